// Number-format descriptors: small constexpr values (usable as template arguments) from which every
// limit is derived. A format is sign + exponent_bits + mantissa_bits (stored, no implicit bit).
#pragma once

#include <cstdint>
#include <string>

#include "safeamp/config.hpp"
#include "safeamp/error.hpp"

namespace safeamp {

/// How the top exponent code is used.
///  ieee:        exponent all ones encodes +-inf (mantissa 0) and NaN (mantissa != 0): fp16, bf16, E5M2.
///  finite_nan:  no infinity; only S.1111...1 (all ones) is NaN, the rest of the top binade is finite
///               (OCP "fn" formats such as E4M3: max 448).
enum class special_values : std::uint8_t { ieee, finite_nan };

struct format_spec {
  int exponent_bits = 8;
  int mantissa_bits = 23;
  special_values specials = special_values::ieee;

  friend constexpr bool operator==(const format_spec&, const format_spec&) = default;
};

inline constexpr int min_exponent_bits = 2;
inline constexpr int max_exponent_bits = 8;
inline constexpr int min_mantissa_bits = 1;
inline constexpr int max_mantissa_bits = 23;

/// True when the descriptor is one this library can round to (2..8 exponent bits, 1..23 mantissa bits;
/// finite_nan only up to 7 exponent bits, since with 8 its top binade 2^128 does not fit in a float).
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr bool is_valid(format_spec f) noexcept {
  return f.exponent_bits >= min_exponent_bits && f.exponent_bits <= max_exponent_bits &&
         f.mantissa_bits >= min_mantissa_bits && f.mantissa_bits <= max_mantissa_bits &&
         (f.specials == special_values::ieee ||
          (f.specials == special_values::finite_nan && f.exponent_bits < max_exponent_bits));
}

/// Validated construction: throws safeamp::error naming the bad field at run time; in a constant
/// expression an invalid descriptor fails to compile (the throw is not a constant expression).
[[nodiscard]] constexpr format_spec make_format(int exponent_bits, int mantissa_bits,
                                                special_values specials = special_values::ieee) {
  if (exponent_bits < min_exponent_bits || exponent_bits > max_exponent_bits) {
    throw error("format exponent_bits", std::to_string(exponent_bits), "2..8");
  }
  if (mantissa_bits < min_mantissa_bits || mantissa_bits > max_mantissa_bits) {
    throw error("format mantissa_bits", std::to_string(mantissa_bits), "1..23");
  }
  if (specials != special_values::ieee && specials != special_values::finite_nan) {
    throw error("format specials", std::to_string(static_cast<int>(specials)), "ieee (0) or finite_nan (1)");
  }
  if (specials == special_values::finite_nan && exponent_bits == max_exponent_bits) {
    throw error("format exponent_bits", std::to_string(exponent_bits) + " with finite_nan",
                "2..7 for finite_nan formats (their values must fit in a float)");
  }
  return format_spec{exponent_bits, mantissa_bits, specials};
}

// The named formats. Limits are static_assert-ed against hand-derived values in tests/static/.
inline constexpr format_spec fp32{8, 23, special_values::ieee};            // IEEE binary32
inline constexpr format_spec tf32{8, 10, special_values::ieee};            // NVIDIA TensorFloat-32 (19 bits used)
inline constexpr format_spec fp16{5, 10, special_values::ieee};            // IEEE binary16
inline constexpr format_spec bf16{8, 7, special_values::ieee};             // bfloat16
inline constexpr format_spec fp8_e4m3{4, 3, special_values::finite_nan};   // OCP FP8 E4M3 ("e4m3fn"), max 448
inline constexpr format_spec fp8_e5m2{5, 2, special_values::ieee};         // OCP FP8 E5M2, max 57344

// ---- derived quantities (all from the descriptor) ------------------------------------------------
namespace detail {
/// 2^e as a double for -1022 <= e <= 1023, built from its bits (constexpr; std::ldexp is not).
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr double exp2i(int e) noexcept {
  return safeamp::bit_cast<double>(static_cast<std::uint64_t>(e + 1023) << 52);
}
}  // namespace detail

/// Total width of the encoding in bits: sign + exponent + mantissa.
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr int total_bits(format_spec f) noexcept {
  return 1 + f.exponent_bits + f.mantissa_bits;
}
/// Bytes a value takes in memory when stored in its own container (fp8: 1, fp16/bf16: 2, tf32/fp32: 4).
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr int storage_bytes(format_spec f) noexcept {
  const int bits = total_bits(f);
  return bits <= 8 ? 1 : bits <= 16 ? 2 : 4;
}
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr int exponent_bias(format_spec f) noexcept {
  return (1 << (f.exponent_bits - 1)) - 1;
}
/// Precision p in bits, the implicit bit included (IEEE "digits").
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr int digits(format_spec f) noexcept { return f.mantissa_bits + 1; }
/// Exponent of the smallest normal number.
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr int min_exponent(format_spec f) noexcept { return 1 - exponent_bias(f); }
/// Exponent of the largest finite number.
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr int max_exponent(format_spec f) noexcept {
  const int top_field = (1 << f.exponent_bits) - 1;
  return (f.specials == special_values::ieee ? top_field - 1 : top_field) - exponent_bias(f);
}
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr bool has_infinity(format_spec f) noexcept {
  return f.specials == special_values::ieee;
}
/// Code (without sign) of the largest finite value.
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr std::uint32_t max_finite_code(format_spec f) noexcept {
  const std::uint32_t all_ones = (std::uint32_t{1} << (f.exponent_bits + f.mantissa_bits)) - 1u;
  return f.specials == special_values::ieee ? all_ones - ((std::uint32_t{1} << f.mantissa_bits) - 1u) - 1u
                                            : all_ones - 1u;
}
/// Code (without sign) of +infinity; only meaningful when has_infinity(f).
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr std::uint32_t infinity_code(format_spec f) noexcept {
  return ((std::uint32_t{1} << f.exponent_bits) - 1u) << f.mantissa_bits;
}
/// Canonical quiet NaN code (without sign): top mantissa bit set (ieee), or all ones (finite_nan).
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr std::uint32_t canonical_nan_code(format_spec f) noexcept {
  return f.specials == special_values::ieee ? infinity_code(f) | (std::uint32_t{1} << (f.mantissa_bits - 1))
                                            : (std::uint32_t{1} << (f.exponent_bits + f.mantissa_bits)) - 1u;
}
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr std::uint32_t sign_bit(format_spec f) noexcept {
  return std::uint32_t{1} << (f.exponent_bits + f.mantissa_bits);
}

/// Largest finite value: ieee (2 - 2^-M) 2^emax; finite_nan (2 - 2^(1-M)) 2^emax (all-ones mantissa is NaN).
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr float max_finite(format_spec f) noexcept {
  const int m = f.mantissa_bits;
  const double frac = f.specials == special_values::ieee ? 2.0 - detail::exp2i(-m) : 2.0 - detail::exp2i(1 - m);
  return static_cast<float>(frac * detail::exp2i(max_exponent(f)));
}
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr float min_normal(format_spec f) noexcept {
  return static_cast<float>(detail::exp2i(min_exponent(f)));
}
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

