// Cross-entropy over rows of logits with integer targets, computed in the policy's loss format, and its
// gradient (softmax - one_hot) * grad_scale / rows, written in policy.gradient.
#pragma once

#include <cstdint>
#include <vector>

#include "safeamp/policy/precision_policy.hpp"
#include "safeamp/sim/tensor.hpp"

namespace safeamp::sim {

struct loss_result {
  double loss = 0.0;                   // mean over rows (the sum is accumulated in the loss format)
  std::vector<float> row_loss;         // per row
  std::vector<std::int32_t> predicted; // argmax per row (-1 when the row is not finite)
  cast_stats gradient_stats{};         // counters of the dlogits cast
};

/// logits (rows, classes), targets (rows) in [0, classes). When dlogits is not null it receives
/// d(grad_scale * mean loss)/d logits. Throws safeamp::error on a size mismatch or a target out of range.
loss_result cross_entropy(exec_context& ctx, const precision_policy& pol, const matrix& logits,
                          const std::vector<std::int32_t>& targets, double grad_scale, matrix* dlogits);

}  // namespace safeamp::sim
