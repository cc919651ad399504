// Pieces of the rounding routine (round.hpp): the traits of the source types, the encode result, and the
// encoder of unsigned exponent-only formats (E8M0), which has no mantissa to round and no zero.
#pragma once

#include <cstdint>

#include "safeamp/config.hpp"
#include "safeamp/format/format_spec.hpp"
#include "safeamp/format/round_options.hpp"

namespace safeamp {

namespace detail {

template <class T>
struct source_traits;
template <>
struct source_traits<float> {
  using bits_type = std::uint32_t;
  static constexpr int mantissa_bits = 23;
  static constexpr int exponent_bits = 8;
  static constexpr int bias = 127;
};
template <>
struct source_traits<double> {
  using bits_type = std::uint64_t;
  static constexpr int mantissa_bits = 52;
  static constexpr int exponent_bits = 11;
  static constexpr int bias = 1023;
};

/// The encoded result plus whether the value overflowed (its magnitude, rounded with an unbounded
/// exponent range, exceeds max finite). Kept together so bulk casts can count overflows.
struct encode_result {
  std::uint32_t code;
  bool overflowed;
};

/// Exponent-only unsigned formats (E8M0, OCP MX v1.0 section 5.4.1: value 2^(field - 127), 0xFF NaN, no zero,
/// no sign): x = 2^e (1 + r), 0 <= r < 1, goes to 2^e or 2^(e+1). With no stored mantissa bit the kept
/// significand is the implicit 1, which is odd, so nearest-even sends ties (r = 1/2) up; stochastic goes up
/// with probability r (the distance in units of 2^e). NaN, zero and negative inputs (none has a code) give
/// NaN; inputs below the smallest value 2^-bias give it (there is no zero to underflow to); overflow and
/// +inf give NaN, or the largest value when saturating. The same results as ml_dtypes' float8_e8m0fnu casts.
template <class T>
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr encode_result encode_exponent_only(format_spec f, T x, round_options opt,
                                                                               std::uint32_t random_bits) noexcept {
  using tr = source_traits<T>;
  using U = typename tr::bits_type;
  constexpr int SM = tr::mantissa_bits;
  constexpr int width = 8 * static_cast<int>(sizeof(U));
  constexpr U inf_bits = ((U{1} << tr::exponent_bits) - 1) << SM;
  constexpr U mant_mask = (U{1} << SM) - 1;
  const U bits = safeamp::bit_cast<U>(x);
  const std::uint32_t nan_code = canonical_nan_code(f);
  const std::uint32_t max_code = max_finite_code(f);
  const bool saturate = opt.on_overflow == overflow::saturate;
  if ((bits >> (width - 1)) != 0 || bits == 0 || bits > inf_bits) return encode_result{nan_code, false};
  if (bits == inf_bits) return encode_result{saturate ? max_code : nan_code, false};
  // Normalise: sig has its leading one at bit SM, e is the unbiased exponent of x.
  int ex = static_cast<int>(bits >> SM);
  U sig = bits & mant_mask;
  if (ex == 0) {
    ex = 1;
    while ((sig >> SM) == 0) {
      sig <<= 1;
      --ex;
    }
  } else {
    sig |= U{1} << SM;
  }
  const U rem = sig & mant_mask;  // r = rem / 2^SM
  bool up = false;
  switch (opt.mode) {
    case rounding::nearest_even:
      up = rem >= (U{1} << (SM - 1));
      break;
    case rounding::toward_zero:
    case rounding::toward_neg_inf:
      up = false;
      break;
    case rounding::toward_pos_inf:
      up = rem != 0;
      break;
    case rounding::stochastic: {
      const std::uint64_t frac32 =
          SM <= 32 ? static_cast<std::uint64_t>(rem) << (32 - SM) : static_cast<std::uint64_t>(rem) >> (SM - 32);
      up = ((static_cast<std::uint64_t>(random_bits) + frac32) >> 32) != 0;
      break;
    }
  }
  const int field = ex - tr::bias + exponent_bias(f) + (up ? 1 : 0);
  if (field < 0) return encode_result{0u, false};
  if (field > static_cast<int>(max_code)) {
    const bool away =
        opt.mode == rounding::nearest_even || opt.mode == rounding::stochastic || opt.mode == rounding::toward_pos_inf;
    return encode_result{saturate || !away ? max_code : nan_code, true};
  }
  return encode_result{static_cast<std::uint32_t>(field), false};
}

}  // namespace detail

}  // namespace safeamp
