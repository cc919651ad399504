// Global gradient-norm clipping on unscaled gradients: the L2 norm over several buffers (accumulated in
// double in a fixed order, so it is deterministic), and a clip that never scales by NaN: a non-finite norm
// leaves the gradients untouched and is reported as an overflow.
#pragma once

#include <cmath>
#include <span>

#include "safeamp/error.hpp"

namespace safeamp {

struct clip_result {
  double norm_before = 0.0;  // global L2 norm before clipping (inf or NaN when a gradient is not finite)
  double norm_after = 0.0;   // norm after clipping: min(norm_before, max_norm) up to float rounding
  bool finite = true;        // false: the norm was inf/NaN; nothing was scaled; treat the step as an overflow
  bool clipped = false;      // true when the gradients were multiplied by max_norm / norm_before
  friend constexpr bool operator==(const clip_result&, const clip_result&) = default;
};

/// sqrt(sum of squares) over every element of every buffer, summed in double in buffer order.
[[nodiscard]] inline double global_grad_norm(std::span<const std::span<float>> buffers) noexcept {
  double sum = 0.0;
  for (const std::span<float> b : buffers) {
    for (const float v : b) sum += static_cast<double>(v) * static_cast<double>(v);
  }
  return std::sqrt(sum);
}

/// Clips the global norm of `buffers` to `max_norm` (> 0, finite): when the norm exceeds it, every element is
/// multiplied by f32(max_norm / norm). A non-finite norm scales nothing and returns finite = false.
[[nodiscard]] inline clip_result clip_grad_norm(std::span<const std::span<float>> buffers, double max_norm) {
  if (!(max_norm > 0.0) || !std::isfinite(max_norm)) {
    throw error("clip max_norm", std::to_string(max_norm), "a finite number > 0");
  }
  clip_result r;
  r.norm_before = global_grad_norm(buffers);
  r.norm_after = r.norm_before;
  if (!std::isfinite(r.norm_before)) {
    r.finite = false;
    return r;
  }
  if (r.norm_before > max_norm) {
    const double factor = max_norm / r.norm_before;
    const float f = static_cast<float>(factor);
    for (const std::span<float> b : buffers) {
      for (float& v : b) v *= f;
    }
    r.norm_after = r.norm_before * static_cast<double>(f);
    r.clipped = true;
  }
  return r;
}

/// One buffer.
[[nodiscard]] inline clip_result clip_grad_norm(std::span<float> buffer, double max_norm) {
  const std::span<float> one[] = {buffer};
  return clip_grad_norm(std::span<const std::span<float>>(one), max_norm);
}

}  // namespace safeamp
