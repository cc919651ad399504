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

/// torch.nn.utils.clip_grad_norm_ (norm_type 2, error_if_nonfinite false), step for step in float: the norm
/// of each buffer (squares summed left to right in float, then sqrtf), the norm of those norms, coef =
/// f32(max_norm) / (norm + 1e-6f) clamped to at most 1, and every element multiplied by coef. Unlike
/// clip_grad_norm: a sum of squares beyond float's range gives norm inf and coef 0, which zeroes every finite
/// gradient (1e20 squared overflows float); a NaN norm makes every gradient NaN. finite reports the norm;
/// clipped is coef < 1. (torch sums in a blocked order, so its norm may differ in the last bits.)
[[nodiscard]] inline clip_result clip_grad_norm_torch(std::span<const std::span<float>> buffers, double max_norm) {
  if (!(max_norm > 0.0) || !std::isfinite(max_norm)) {
    throw error("clip max_norm", std::to_string(max_norm), "a finite number > 0");
  }
  float total_sq = 0.0f;
  for (const std::span<float> b : buffers) {
    float sq = 0.0f;
    for (const float v : b) sq += v * v;
    const float norm = std::sqrt(sq);
    total_sq += norm * norm;
  }
  const float total = std::sqrt(total_sq);
  constexpr float torch_clip_epsilon = 1e-6f;  // torch/nn/utils/clip_grad.py: max_norm / (total_norm + 1e-6)
  float coef = static_cast<float>(max_norm) / (total + torch_clip_epsilon);
  if (coef > 1.0f) coef = 1.0f;  // torch.clamp(max=1.0); NaN stays NaN
  for (const std::span<float> b : buffers) {
    for (float& v : b) v *= coef;
  }
  clip_result r;
  r.norm_before = static_cast<double>(total);
  r.norm_after = coef == 0.0f ? 0.0 : static_cast<double>(total) * static_cast<double>(coef);  // zeroed: 0
  r.finite = std::isfinite(total);
  r.clipped = coef < 1.0f;
  return r;
}

/// One buffer.
[[nodiscard]] inline clip_result clip_grad_norm(std::span<float> buffer, double max_norm) {
  const std::span<float> one[] = {buffer};
  return clip_grad_norm(std::span<const std::span<float>>(one), max_norm);
}

}  // namespace safeamp
