// The one rounding routine: float or double to any format_spec, in a single rounding step (no double
// rounding), returning the target's bit pattern (encode) or the exactly representable value as a
// float (round_to). Pure integer arithmetic: unaffected by FTZ/DAZ, -ffast-math or the FPU rounding mode.
#pragma once

#include <cstdint>

#include "safeamp/config.hpp"
#include "safeamp/format/format_spec.hpp"
#include "safeamp/format/round_exponent_only.hpp"
#include "safeamp/format/round_options.hpp"

namespace safeamp {

namespace detail {

// Source value (float: SM = 23, double: SM = 52), magnitude bits
//   [ exponent field ex | mantissa field ]          value = sig * 2^(max(ex,1) - bias - SM)
// with sig = mantissa | (ex != 0) << SM. The target quantum (the weight of its last mantissa bit) is
// 2^(max(e, emin) - M), so sig is shifted right by
//   shift = SM - M + max(emin_src - max(ex,1), 0)        (emin_src: target emin as a source exponent field)
// and the quotient q (plus the rounding increment) counts quanta. The target code then is
//   (max(max(ex,1) - emin_src, 0) << M) + q
// which is right in every binade: a carry out of the mantissa (q == 2^(M+1)) bumps the exponent field,
// and a subnormal that rounds up to 2^M becomes the smallest normal. Overflow is code > max_finite_code.
template <class T>
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr encode_result encode_impl(format_spec f, T x, round_options opt,
                                                                      std::uint32_t random_bits) noexcept {
  using tr = source_traits<T>;
  using U = typename tr::bits_type;
  constexpr int SM = tr::mantissa_bits;
  constexpr int width = 8 * static_cast<int>(sizeof(U));
  constexpr U sign_mask = U{1} << (width - 1);
  constexpr U inf_bits = ((U{1} << tr::exponent_bits) - 1) << SM;
  constexpr U mant_mask = (U{1} << SM) - 1;

  if (f.mantissa_bits == 0) return encode_exponent_only<T>(f, x, opt, random_bits);
  const int M = f.mantissa_bits;
  const U bits = safeamp::bit_cast<U>(x);
  const bool negative = (bits & sign_mask) != 0;
  const U mag = bits & ~sign_mask;
  const std::uint32_t sign_code = negative ? sign_bit(f) : 0u;

  // ---- finite values -----------------------------------------------------------------------------
  const int ex_raw = static_cast<int>(mag >> SM);
  const int ex = ex_raw == 0 ? 1 : ex_raw;  // subnormal sources share exponent 1
  const U sig = (mag & mant_mask) | (ex_raw != 0 ? U{1} << SM : U{0});
  const int emin_src = min_exponent(f) + tr::bias;      // biased source exponent of target emin
  const int below = emin_src > ex ? emin_src - ex : 0;  // extra shift in the target's subnormal range
  const int shift_true = SM - M + below;
  const int sh = shift_true < width - 1 ? shift_true : width - 1;  // sig < 2^(SM+1): larger shifts give q = 0
  const U q = sig >> sh;
  const U rem = sig & ((U{1} << sh) - 1);
  const U half = (U{1} << sh) >> 1;

  U up = 0;
  switch (opt.mode) {
    case rounding::nearest_even:
      up = (rem > half || (rem == half && half != 0 && (q & 1) != 0)) ? 1 : 0;
      break;
    case rounding::toward_zero:
      up = 0;
      break;
    case rounding::toward_pos_inf:
      up = (rem != 0 && !negative) ? 1 : 0;
      break;
    case rounding::toward_neg_inf:
      up = (rem != 0 && negative) ? 1 : 0;
      break;
    case rounding::stochastic: {
      // Round up with probability rem / 2^shift_true, resolved to 32 bits: frac32 = floor(2^32 rem / 2^shift),
      // up iff random_bits + frac32 carries out of 32 bits.  P(up) = frac32 / 2^32 exactly.
      std::uint64_t frac32 = 0;
      if (shift_true <= 32) {
        frac32 = static_cast<std::uint64_t>(rem) << (32 - shift_true);
      } else if (shift_true - 32 < 64) {
        frac32 = static_cast<std::uint64_t>(rem) >> (shift_true - 32);
      }
      up = ((static_cast<std::uint64_t>(random_bits) + frac32) >> 32) != 0 ? 1 : 0;
      break;
    }
  }
  const U base = ex > emin_src ? static_cast<U>(ex - emin_src) : U{0};
  const U code_mag = (base << M) + q + up;
  const std::uint32_t max_code = max_finite_code(f);

  const bool is_nan = mag > inf_bits;
  const bool is_inf = mag == inf_bits;
  const bool overflowed = !is_nan && !is_inf && code_mag > U{max_code};

  // Value to use for overflow / infinite input. A format with neither inf nor NaN (OCP MX FP6/FP4) can only
  // saturate: OCP MX v1.0 section 5.3.3 ("clamped to the maximum normal") whatever the overflow option.
  const bool saturate = opt.on_overflow == overflow::saturate || !has_nan(f);
  const bool away = opt.mode == rounding::nearest_even || opt.mode == rounding::stochastic ||
                    (opt.mode == rounding::toward_pos_inf && !negative) ||
                    (opt.mode == rounding::toward_neg_inf && negative);
  const std::uint32_t inf_or_nan = has_infinity(f) ? infinity_code(f) : has_nan(f) ? canonical_nan_code(f) : max_code;
  const std::uint32_t overflow_code = (saturate || !away) ? max_code : inf_or_nan;
  const std::uint32_t inf_input_code = saturate ? max_code : inf_or_nan;

  // NaN keeps its sign and the top of its payload, and is made quiet (ieee); finite_nan and fnuz have one NaN
  // code (fnuz: the sign bit alone). A format without NaN has no code for it: encode gives +0 (round_to and
  // round_span keep the NaN as a float NaN instead, see round_to).
  const std::uint32_t nan_code = has_infinity(f)
                                     ? canonical_nan_code(f) | static_cast<std::uint32_t>((mag & mant_mask) >> (SM - M))
                                     : canonical_nan_code(f);

  std::uint32_t code = static_cast<std::uint32_t>(overflowed ? U{0} : code_mag);
  if (opt.flush_subnormals && code < (std::uint32_t{1} << M)) code = 0;
  code = is_nan ? nan_code : is_inf ? inf_input_code : overflowed ? overflow_code : code;
  // fnuz has no -0 (its code is the NaN): a zero result is +0; a NaN code already holds the sign bit.
  const std::uint32_t signed_code =
      (code == 0u && !has_negative_zero(f)) || (is_nan && !has_nan(f)) ? 0u : sign_code | code;
  return encode_result{signed_code, overflowed};
}

}  // namespace detail

/// Rounds x to format f and returns the target bit pattern (sign at bit exponent_bits + mantissa_bits).
/// random_bits is used only by rounding::stochastic (see format/philox.hpp for deterministic bits).
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr std::uint32_t encode(format_spec f, float x, round_options opt = {},
                                                                 std::uint32_t random_bits = 0) noexcept {
  return detail::encode_impl<float>(f, x, opt, random_bits).code;
}
/// From double in one rounding step (no double rounding through float).
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr std::uint32_t encode(format_spec f, double x, round_options opt = {},
                                                                 std::uint32_t random_bits = 0) noexcept {
  return detail::encode_impl<double>(f, x, opt, random_bits).code;
}

/// The value of a code of format f, exactly, as a float (every supported format is a subset of fp32).
/// A NaN code gives a quiet float NaN with the same sign and the code's payload in the top mantissa bits;
/// the one NaN of an fnuz or exponent-only format gives +qNaN (0x7FC00000).
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr float decode(format_spec f, std::uint32_t code) noexcept {
  const int M = f.mantissa_bits;
  const int E = f.exponent_bits;
  const std::uint32_t sign = ((code >> (E + M)) & 1u) << 31;
  const std::uint32_t mag = code & (sign_bit(f) - 1u);
  const std::uint32_t e = mag >> M;
  const std::uint32_t m = mag & ((std::uint32_t{1} << M) - 1u);
  const std::uint32_t top = (std::uint32_t{1} << E) - 1u;
  if (M == 0) {  // exponent-only (E8M0): 2^(e - bias) for every field but the all-ones NaN
    return e == top ? safeamp::bit_cast<float>(0x7FC00000u)
                    : static_cast<float>(detail::exp2i(static_cast<int>(e) - exponent_bias(f)));
  }
  if (f.specials == special_values::fnuz && code == sign_bit(f)) return safeamp::bit_cast<float>(0x7FC00000u);
  const bool is_nan = f.specials == special_values::ieee         ? (e == top && m != 0)
                      : f.specials == special_values::finite_nan ? mag == canonical_nan_code(f)
                                                                 : false;
  const bool is_inf = has_infinity(f) && e == top && m == 0;

  // Normal: rebias the exponent, widen the mantissa.
  const std::uint32_t normal = ((e + static_cast<std::uint32_t>(127 - exponent_bias(f))) << 23) | (m << (23 - M));
  // Subnormal m * 2^(emin - M): for emin = -126 (8 exponent bits) it is an fp32 subnormal with the same
  // mantissa; otherwise float(m) is exact (m < 2^23) and its exponent field is lowered by M - emin.
  std::uint32_t sub = 0;
  if (min_exponent(f) == -126) {
    sub = m << (23 - M);
  } else {
    const std::uint32_t fm = safeamp::bit_cast<std::uint32_t>(static_cast<float>(m));
    sub = m == 0 ? 0u : fm - (static_cast<std::uint32_t>(M - min_exponent(f)) << 23);
  }
  std::uint32_t out = e == 0 ? sub : normal;
  out = is_inf ? 0x7F800000u : out;
  out = is_nan ? (0x7FC00000u | (m << (23 - M))) : out;
  return safeamp::bit_cast<float>(sign | out);
}

namespace detail {
/// A NaN input to a format without NaN (OCP MX FP6/FP4) has no code; as a float it stays a quiet NaN with
/// its sign (no payload), so a NaN in a tensor is never hidden by an emulated cast.
template <class T>
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr float round_to_impl(format_spec f, T x, round_options opt,
                                                                std::uint32_t random_bits) noexcept {
  using U = typename source_traits<T>::bits_type;
  const bool negative = (safeamp::bit_cast<U>(x) >> (8 * sizeof(T) - 1)) != 0;
  if (!has_nan(f) && x != x) return safeamp::bit_cast<float>(negative ? 0xFFC00000u : 0x7FC00000u);
  return decode(f, encode_impl<T>(f, x, opt, random_bits).code);
}
}  // namespace detail

/// Rounds x to format f and returns the exactly representable result as a float (see detail::round_to_impl
/// for NaN in a format without NaN).
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr float round_to(format_spec f, float x, round_options opt = {},
                                                           std::uint32_t random_bits = 0) noexcept {
  return detail::round_to_impl<float>(f, x, opt, random_bits);
}
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr float round_to(format_spec f, double x, round_options opt = {},
                                                           std::uint32_t random_bits = 0) noexcept {
  return detail::round_to_impl<double>(f, x, opt, random_bits);
}

/// Compile-time format and options: an invalid descriptor does not compile.
template <format_spec F, round_options O = round_options{}>
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr float round_to(float x, std::uint32_t random_bits = 0) noexcept {
  static_assert(
      is_valid(F),
      "format_spec must be valid (see is_valid): 2..8 exponent bits, 1..23 mantissa bits, range within float");
  return round_to(F, x, O, random_bits);
}
template <format_spec F, round_options O = round_options{}>
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr std::uint32_t encode(float x, std::uint32_t random_bits = 0) noexcept {
  static_assert(
      is_valid(F),
      "format_spec must be valid (see is_valid): 2..8 exponent bits, 1..23 mantissa bits, range within float");
  return encode(F, x, O, random_bits);
}
template <format_spec F>
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr float decode(std::uint32_t code) noexcept {
  static_assert(
      is_valid(F),
      "format_spec must be valid (see is_valid): 2..8 exponent bits, 1..23 mantissa bits, range within float");
  return decode(F, code);
}

/// True when x is exactly representable in f (NaN counts as representable: it stays NaN).
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr bool is_representable(format_spec f, float x) noexcept {
  const float r = round_to(f, x);
  return (r != r && x != x) || safeamp::bit_cast<std::uint32_t>(r) == safeamp::bit_cast<std::uint32_t>(x);
}

}  // namespace safeamp
