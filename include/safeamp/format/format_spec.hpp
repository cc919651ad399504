// Number-format descriptors: small constexpr values (usable as template arguments) from which every
// limit is derived. A format is sign + exponent_bits + mantissa_bits (stored, no implicit bit).
#pragma once

#include <cstdint>
#include <string>

#include "safeamp/config.hpp"
#include "safeamp/error.hpp"

namespace safeamp {

/// How the top exponent code (and the sign of zero) is used.
///  ieee:        exponent all ones encodes +-inf (mantissa 0) and NaN (mantissa != 0): fp16, bf16, E5M2.
///  finite_nan:  no infinity; only S.1111...1 (all ones) is NaN, the rest of the top binade is finite
///               (OCP FP8 E4M3, ml_dtypes float8_e4m3fn: max 448; with no mantissa bits, E8M0: 0xFF is NaN).
///  fnuz:        no infinity, no negative zero; the one NaN is the code of -0 (the sign bit alone, 0x80 for
///               8 bits); every other code is finite (ml_dtypes float8_e4m3fnuz, float8_e5m2fnuz,
///               float8_e4m3b11fnuz: AMD MI300 and Graphcore FP8).
///  finite:      no infinity and no NaN: every code is a finite number (OCP MX v1.0 FP6 E2M3/E3M2 and
///               FP4 E2M1, ml_dtypes float6_e2m3fn, float6_e3m2fn, float4_e2m1fn).
enum class special_values : std::uint8_t { ieee, finite_nan, fnuz, finite };

/// A number format: [sign] exponent_bits mantissa_bits (stored, no implicit bit). Aggregate, so existing
/// three-field initializers {E, M, specials} keep their meaning (IEEE bias, signed).
struct format_spec {
  int exponent_bits = 8;
  int mantissa_bits = 23;
  special_values specials = special_values::ieee;
  /// Added to the IEEE bias 2^(E-1) - 1: +1 for the fnuz formats e4m3fnuz (bias 8) and e5m2fnuz (16),
  /// +4 for e4m3b11fnuz (bias 11); 0 for everything else.
  int bias_offset = 0;
  /// No sign bit (E8M0 block scales). Only with mantissa_bits == 0 and finite_nan (see is_valid).
  bool is_unsigned = false;

  friend constexpr bool operator==(const format_spec&, const format_spec&) = default;
};

inline constexpr int min_exponent_bits = 2;
inline constexpr int max_exponent_bits = 8;
inline constexpr int min_mantissa_bits = 1;  // signed formats; unsigned exponent-only formats have 0
inline constexpr int max_mantissa_bits = 23;

namespace detail {
/// Which rule of is_valid a descriptor breaks (nullptr when it breaks none); the values a float can hold
/// bound the range: largest finite exponent <= 127, smallest normal exponent >= -126 (>= -127 for
/// exponent-only formats, whose smallest value 2^-127 is a float subnormal).
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr const char* format_defect(format_spec f) noexcept {
  if (f.exponent_bits < min_exponent_bits || f.exponent_bits > max_exponent_bits) return "exponent_bits";
  if (f.is_unsigned) {
    if (f.mantissa_bits != 0 || f.specials != special_values::finite_nan) return "is_unsigned";
  } else if (f.mantissa_bits < min_mantissa_bits || f.mantissa_bits > max_mantissa_bits) {
    return "mantissa_bits";
  }
  if (f.specials != special_values::ieee && f.specials != special_values::finite_nan &&
      f.specials != special_values::fnuz && f.specials != special_values::finite) {
    return "specials";
  }
  if (f.bias_offset < -64 || f.bias_offset > 64) return "bias_offset";
  const int bias = (1 << (f.exponent_bits - 1)) - 1 + f.bias_offset;
  if (bias < 0) return "bias_offset";
  const int top = (1 << f.exponent_bits) - 1;
  const bool top_finite =
      f.specials != special_values::ieee && !(f.specials == special_values::finite_nan && f.mantissa_bits == 0);
  const int emax = (top_finite ? top : top - 1) - bias;
  const int emin = f.mantissa_bits == 0 ? -bias : 1 - bias;
  if (emax > 127 || emin < (f.mantissa_bits == 0 ? -127 : -126)) return "bias_offset";
  return nullptr;
}
}  // namespace detail

/// True when the descriptor is one this library can round to: 2..8 exponent bits; 1..23 mantissa bits, or 0
/// for an unsigned exponent-only format with a NaN (E8M0); every value must fit in a float (so finite_nan,
/// fnuz and finite formats have at most 7 exponent bits at the IEEE bias, and bias_offset is bounded).
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr bool is_valid(format_spec f) noexcept {
  return detail::format_defect(f) == nullptr;
}

/// The two field widths of make_format as distinct types, so that they cannot be swapped or passed as bare
/// numbers: make_format(exponent_width{4}, mantissa_width{3}) compiles, make_format(mantissa_width{3},
/// exponent_width{4}), make_format(4, 3) and make_format({4}, {3}) do not (explicit constructors).
struct exponent_width {
  int bits;
  explicit constexpr exponent_width(int exponent_bits) noexcept : bits(exponent_bits) {}
};
struct mantissa_width {
  int bits;
  explicit constexpr mantissa_width(int mantissa_bits) noexcept : bits(mantissa_bits) {}
};

/// Validated construction: throws safeamp::error naming the bad field at run time; in a constant
/// expression an invalid descriptor fails to compile (the throw is not a constant expression).
[[nodiscard]] constexpr format_spec make_format(exponent_width exponent, mantissa_width mantissa,
                                                special_values specials = special_values::ieee, int bias_offset = 0,
                                                bool is_unsigned = false) {
  const int exponent_bits = exponent.bits, mantissa_bits = mantissa.bits;
  const format_spec f{exponent_bits, mantissa_bits, specials, bias_offset, is_unsigned};
  const char* defect = detail::format_defect(f);
  if (defect == nullptr) return f;
  const std::string field = defect;
  if (field == "exponent_bits") throw error("format exponent_bits", std::to_string(exponent_bits), "2..8");
  if (field == "mantissa_bits") {
    throw error("format mantissa_bits", std::to_string(mantissa_bits), "1..23 (0 only for unsigned formats)");
  }
  if (field == "specials") {
    throw error("format specials", std::to_string(static_cast<int>(specials)),
                "ieee (0), finite_nan (1), fnuz (2) or finite (3)");
  }
  if (field == "is_unsigned") {
    throw error("format is_unsigned", "true with " + std::to_string(mantissa_bits) + " mantissa bits",
                "unsigned formats are exponent-only (0 mantissa bits) with a NaN code (finite_nan), like e8m0fnu");
  }
  throw error(
      "format exponent_bits",
      std::to_string(exponent_bits) + " with bias_offset " + std::to_string(bias_offset) +
          (specials == special_values::ieee ? "" : " and no infinity"),
      "a bias >= 0 and a range that fits in a float: largest finite exponent <= 127, smallest normal exponent >= -126 "
      "(so finite_nan, fnuz and finite formats take 2..7 exponent bits at the IEEE bias)");
}

// The named formats. Limits are static_assert-ed against hand-derived values in tests/static/; the names are
// ml_dtypes' (https://github.com/jax-ml/ml_dtypes, README "Supported types") and the OCP specifications'.
inline constexpr format_spec fp32{8, 23, special_values::ieee};           // IEEE binary32
inline constexpr format_spec tf32{8, 10, special_values::ieee};           // NVIDIA TensorFloat-32 (19 bits used)
inline constexpr format_spec fp16{5, 10, special_values::ieee};           // IEEE binary16
inline constexpr format_spec bf16{8, 7, special_values::ieee};            // bfloat16
inline constexpr format_spec fp8_e4m3{4, 3, special_values::finite_nan};  // OCP FP8 E4M3 ("e4m3fn"), max 448
inline constexpr format_spec fp8_e5m2{5, 2, special_values::ieee};        // OCP FP8 E5M2, max 57344
inline constexpr format_spec fp8_e4m3ieee{4, 3, special_values::ieee};    // ml_dtypes float8_e4m3 (IEEE-style), max 240
inline constexpr format_spec fp8_e3m4{3, 4, special_values::ieee};        // ml_dtypes float8_e3m4, max 15.5
inline constexpr format_spec fp8_e4m3fnuz{4, 3, special_values::fnuz, 1};      // bias 8, max 240, NaN 0x80
inline constexpr format_spec fp8_e5m2fnuz{5, 2, special_values::fnuz, 1};      // bias 16, max 57344, NaN 0x80
inline constexpr format_spec fp8_e4m3b11fnuz{4, 3, special_values::fnuz, 4};   // bias 11, max 30, NaN 0x80
inline constexpr format_spec fp6_e2m3{2, 3, special_values::finite};           // OCP MX FP6 E2M3 ("e2m3fn"), max 7.5
inline constexpr format_spec fp6_e3m2{3, 2, special_values::finite};           // OCP MX FP6 E3M2 ("e3m2fn"), max 28
inline constexpr format_spec fp4_e2m1{2, 1, special_values::finite};           // OCP MX FP4 E2M1 ("e2m1fn"), max 6
inline constexpr format_spec e8m0{8, 0, special_values::finite_nan, 0, true};  // OCP MX scale E8M0 ("e8m0fnu")

// ---- derived quantities (all from the descriptor) ------------------------------------------------
namespace detail {
/// 2^e as a double for -1022 <= e <= 1023, built from its bits (constexpr; std::ldexp is not).
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr double exp2i(int e) noexcept {
  return safeamp::bit_cast<double>(static_cast<std::uint64_t>(e + 1023) << 52);
}
}  // namespace detail

/// Total width of the encoding in bits: [sign] + exponent + mantissa.
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr int total_bits(format_spec f) noexcept {
  return (f.is_unsigned ? 0 : 1) + f.exponent_bits + f.mantissa_bits;
}
/// Bytes a value takes in memory when stored in its own container (fp4..fp8: 1, fp16/bf16: 2, tf32/fp32: 4).
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr int storage_bytes(format_spec f) noexcept {
  const int bits = total_bits(f);
  return bits <= 8 ? 1 : bits <= 16 ? 2 : 4;
}
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr int exponent_bias(format_spec f) noexcept {
  return (1 << (f.exponent_bits - 1)) - 1 + f.bias_offset;
}
/// Precision p in bits, the implicit bit included (IEEE "digits").
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr int digits(format_spec f) noexcept { return f.mantissa_bits + 1; }
/// Exponent of the smallest normal number: 1 - bias; with no mantissa bits (E8M0) the exponent field 0 is a
/// normal number 2^-bias too (there are no subnormals and no zero).
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr int min_exponent(format_spec f) noexcept {
  return (f.mantissa_bits == 0 ? 0 : 1) - exponent_bias(f);
}
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr bool has_infinity(format_spec f) noexcept {
  return f.specials == special_values::ieee;
}
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr bool has_nan(format_spec f) noexcept {
  return f.specials != special_values::finite;
}
/// False for fnuz formats (their -0 code is the NaN) and unsigned formats.
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr bool has_negative_zero(format_spec f) noexcept {
  return f.specials != special_values::fnuz && !f.is_unsigned;
}
/// Exponent of the largest finite number: the top exponent field holds finite values except in ieee formats
/// (inf/NaN) and exponent-only finite_nan formats (whose top field is the one NaN).
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr int max_exponent(format_spec f) noexcept {
  const int top_field = (1 << f.exponent_bits) - 1;
  const bool top_is_special =
      f.specials == special_values::ieee || (f.specials == special_values::finite_nan && f.mantissa_bits == 0);
  return (top_is_special ? top_field - 1 : top_field) - exponent_bias(f);
}
/// Code (without sign) of the largest finite value: below inf (ieee), below the all-ones NaN (finite_nan),
/// or all ones (fnuz and finite: every magnitude code is a number).
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr std::uint32_t max_finite_code(format_spec f) noexcept {
  const std::uint32_t all_ones = (std::uint32_t{1} << (f.exponent_bits + f.mantissa_bits)) - 1u;
  switch (f.specials) {
    case special_values::ieee:
      return all_ones - ((std::uint32_t{1} << f.mantissa_bits) - 1u) - 1u;
    case special_values::finite_nan:
      return all_ones - 1u;
    default:
      return all_ones;
  }
}
/// Code (without sign) of +infinity; only meaningful when has_infinity(f).
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr std::uint32_t infinity_code(format_spec f) noexcept {
  return ((std::uint32_t{1} << f.exponent_bits) - 1u) << f.mantissa_bits;
}
/// The sign bit of a code (0 for unsigned formats).
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr std::uint32_t sign_bit(format_spec f) noexcept {
  return f.is_unsigned ? 0u : std::uint32_t{1} << (f.exponent_bits + f.mantissa_bits);
}
/// Canonical NaN code: quiet NaN, top mantissa bit set (ieee); all ones (finite_nan); the sign bit alone,
/// i.e. the code -0 would have (fnuz). Only meaningful when has_nan(f).
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr std::uint32_t canonical_nan_code(format_spec f) noexcept {
  switch (f.specials) {
    case special_values::ieee:
      return infinity_code(f) | (std::uint32_t{1} << (f.mantissa_bits - 1));
    case special_values::finite_nan:
      return (std::uint32_t{1} << (f.exponent_bits + f.mantissa_bits)) - 1u;
    case special_values::fnuz:
      return sign_bit(f);
    default:
      return 0u;
  }
}

/// Largest finite value: (2 - 2^-M) 2^emax, or (2 - 2^(1-M)) 2^emax for finite_nan (its all-ones mantissa is
/// NaN); exponent-only formats: 2^emax.
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr float max_finite(format_spec f) noexcept {
  const int m = f.mantissa_bits;
  if (m == 0) return static_cast<float>(detail::exp2i(max_exponent(f)));
  const double frac = f.specials == special_values::finite_nan ? 2.0 - detail::exp2i(1 - m) : 2.0 - detail::exp2i(-m);
  return static_cast<float>(frac * detail::exp2i(max_exponent(f)));
}
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr float min_normal(format_spec f) noexcept {
  return static_cast<float>(detail::exp2i(min_exponent(f)));
}
/// Smallest positive value: 2^(emin - M) (the smallest subnormal); min_normal for exponent-only formats.
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr float min_subnormal(format_spec f) noexcept {
  return static_cast<float>(detail::exp2i(min_exponent(f) - f.mantissa_bits));
}
/// Distance from 1 to the next larger value: 2^-M.
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr float epsilon(format_spec f) noexcept {
  return static_cast<float>(detail::exp2i(-f.mantissa_bits));
}
/// Unit roundoff u = 2^-p = epsilon/2: the relative error bound of round-to-nearest.
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr float unit_roundoff(format_spec f) noexcept {
  return static_cast<float>(detail::exp2i(-(f.mantissa_bits + 1)));
}

}  // namespace safeamp
