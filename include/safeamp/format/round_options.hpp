// Rounding modes and overflow behaviour, as explicit named options (never positional bools).
#pragma once

#include <cstdint>

namespace safeamp {

enum class rounding : std::uint8_t {
  nearest_even,    // IEEE roundTiesToEven
  toward_zero,     // truncation
  toward_pos_inf,  // ceiling
  toward_neg_inf,  // floor
  stochastic,      // up with probability (x - down) / (up - down), from 32 caller-supplied random bits
};

enum class overflow : std::uint8_t {
  // IEEE 754 overflow: nearest and stochastic give +-inf, directed modes give inf only in their direction
  // (toward_zero always gives +-max finite). Formats without infinity (E4M3) give NaN instead of inf.
  to_infinity,
  // Overflow and +-inf inputs become +-max finite (OCP "saturating" / PTX satfinite). NaN stays NaN.
  saturate,
};

struct round_options {
  rounding mode = rounding::nearest_even;
  overflow on_overflow = overflow::to_infinity;
  bool flush_subnormals = false;  // a result that would be subnormal becomes a zero of the same sign

  friend constexpr bool operator==(const round_options&, const round_options&) = default;
};

}  // namespace safeamp
