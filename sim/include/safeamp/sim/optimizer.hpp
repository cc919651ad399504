// Optimizers: SGD with momentum and AdamW (decoupled weight decay), safeamp's own; and sgd_torch / adamw_torch,
// which follow torch.optim.SGD (momentum, dampening, nesterov, weight decay added to the gradient, the first
// step's buffer a copy of the gradient) and torch.optim.AdamW (decay param *= 1 - lr*wd first, lerp for the
// first moment, denom = sqrt(v)/sqrt(1 - beta2^t) + eps, step lr/(1 - beta1^t)) operation by operation in float. State
// (momentum, second moment) is fp32. With master weights the update goes into an fp32 master copy and the parameters
// are its rounding to the parameter format; without, the update is added to the parameter and the sum rounded straight
// back to the parameter format, so updates below half an ulp are lost (the classic fp16 stagnation).
// The write-back rounds to nearest, or stochastically (Philox bits keyed by step and element).
#pragma once

#include <cstdint>
#include <vector>

#include "safeamp/policy/precision_policy.hpp"
#include "safeamp/sim/parameter.hpp"
#include "safeamp/sim/run_config.hpp"
#include "safeamp/sim/tensor.hpp"

namespace safeamp::sim {

struct optimizer_state {
  std::vector<matrix> first;   // SGD velocity / AdamW first moment
  std::vector<matrix> second;  // AdamW second moment (empty for SGD)
  std::vector<matrix> master;  // fp32 master weights (empty when not kept)
  std::int64_t updates = 0;    // applied updates (AdamW bias correction)
};

class optimizer {
 public:
  optimizer(const optimizer_config& cfg, const precision_policy& pol, bool master_weights,
            const parameter_list& params);

  /// One update from the unscaled (and clipped) gradients.
  void step(exec_context& ctx, parameter_list& params);

  [[nodiscard]] optimizer_state& state() noexcept { return state_; }
  [[nodiscard]] const optimizer_state& state() const noexcept { return state_; }
  [[nodiscard]] bool keeps_master() const noexcept { return !state_.master.empty(); }

  /// Count of parameter elements whose value did not change in the last step although the computed
  /// update was nonzero (lost to rounding in the write-back).
  [[nodiscard]] std::uint64_t lost_updates() const noexcept { return lost_updates_; }

 private:
  optimizer_config cfg_;
  precision_policy pol_;
  optimizer_state state_;
  std::uint64_t lost_updates_ = 0;
  std::vector<matrix> updated_;  // step()'s scratch, one per parameter: no allocation per step
};

}  // namespace safeamp::sim
