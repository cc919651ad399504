// Cross-entropy over rows of logits with integer targets, computed in the policy's loss format, and its
// gradient (softmax - one_hot) * grad_scale / rows, rounded in the loss format and written in policy.gradient; and the
// regression losses (mse, l1, huber with delta 1) over float targets of any width, mean over every element as PyTorch's
// reduction='mean', with their gradients.
#pragma once

#include <cstdint>
#include <vector>

#include "safeamp/policy/precision_policy.hpp"
#include "safeamp/sim/run_config.hpp"
#include "safeamp/sim/tensor.hpp"

namespace safeamp::sim {

struct loss_result {
  double loss = 0.0;                   // mean over rows (the sum is accumulated in the loss format)
  std::vector<float> row_loss;         // per row
  std::vector<std::int32_t> predicted; // argmax per row (-1 when the row is not finite)
  cast_stats gradient_stats{};         // counters of the gradient's rounding into the loss format and its cast
                                       // into policy.gradient, each element once (autocast.hpp, counted_once)
};

/// logits (rows, classes), targets (rows) in [0, classes). When dlogits is not null it receives
/// d(grad_scale * mean loss)/d logits. Throws safeamp::error on a size mismatch or a target out of range.
loss_result cross_entropy(exec_context& ctx, const precision_policy& pol, const matrix& logits,
                          const std::vector<std::int32_t>& targets, double grad_scale, matrix* dlogits);

/// outputs and targets (rows, k); d = output - target in the loss format; per element mse d^2, l1 |d|, huber
/// 0.5 d^2 when |d| < 1 else |d| - 0.5. row_loss: each row's mean; loss: the mean over all rows*k elements
/// (summed left to right in the loss format). d/doutput of grad_scale * loss: mse 2d, l1 sign(d) (0 at 0, as
/// torch.sign), huber d clamped to [-1, 1], each times grad_scale / (rows*k), written in policy.gradient.
/// `predicted` is -1 on every row (no class). Throws safeamp::error on a shape mismatch.
loss_result regression_loss(exec_context& ctx, const precision_policy& pol, loss_kind kind, const matrix& outputs,
                            const matrix& targets, double grad_scale, matrix* doutputs);

}  // namespace safeamp::sim
