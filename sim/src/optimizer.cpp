// SGD with momentum and AdamW, with or without fp32 master weights (see optimizer.hpp).
#include "safeamp/sim/optimizer.hpp"

#include <cmath>

namespace safeamp::sim {

optimizer::optimizer(const optimizer_config& cfg, const precision_policy& pol, bool master_weights,
                     const parameter_list& params)
    : cfg_(cfg), pol_(pol) {
  for (const parameter& p : params) {
    state_.first.push_back(matrix::Zero(p.value.rows(), p.value.cols()));
    if (cfg.kind == optimizer_kind::adamw) state_.second.push_back(matrix::Zero(p.value.rows(), p.value.cols()));
    if (master_weights) state_.master.push_back(p.value);
  }
}

void optimizer::step(exec_context& ctx, parameter_list& params) {
  ++state_.updates;
  lost_updates_ = 0;
  const format_spec fu = pol_.format_for(op_class::optimizer_update);
  const round_options write_back{.mode = cfg_.stochastic_write_back ? rounding::stochastic : rounding::nearest_even,
                                 .on_overflow = overflow::to_infinity, .flush_subnormals = false};
  const auto lr = static_cast<float>(cfg_.learning_rate);
  const auto mu = static_cast<float>(cfg_.momentum);
  const auto b1 = static_cast<float>(cfg_.beta1);
  const auto b2 = static_cast<float>(cfg_.beta2);
  const auto eps = static_cast<float>(cfg_.epsilon);
  const auto wd = static_cast<float>(cfg_.weight_decay);
  const auto t = static_cast<double>(state_.updates);
  const auto c1 = static_cast<float>(1.0 / (1.0 - std::pow(cfg_.beta1, t)));
  const auto c2 = static_cast<float>(1.0 / (1.0 - std::pow(cfg_.beta2, t)));
  matrix updated;
  for (std::size_t i = 0; i < params.size(); ++i) {
    parameter& p = params[i];
    matrix& weights = keeps_master() ? state_.master[i] : p.value;  // what the update is added to
    updated.resize(weights.rows(), weights.cols());
    float* m = state_.first[i].data();
    float* v = cfg_.kind == optimizer_kind::adamw ? state_.second[i].data() : nullptr;
    const float* g = p.grad.data();
    const float* w = weights.data();
    float* out = updated.data();
    for (Eigen::Index k = 0; k < weights.size(); ++k) {
      float upd = 0.0f;
      if (cfg_.kind == optimizer_kind::sgd_momentum) {
        m[k] = mu * m[k] + g[k];
        upd = -lr * m[k];
      } else {
        m[k] = b1 * m[k] + (1.0f - b1) * g[k];
        v[k] = b2 * v[k] + (1.0f - b2) * g[k] * g[k];
        upd = -lr * ((m[k] * c1) / (std::sqrt(v[k] * c2) + eps) + wd * w[k]);
      }
      out[k] = w[k] + round_scalar(fu, upd);
    }
    if (keeps_master()) {
      weights = updated;  // fp32 master: the update is kept exactly as fp32 arithmetic gave it
      p.value = weights;
    } else {
      p.value.swap(updated);  // `updated` now holds the pre-update values, for counting lost updates
    }
    (void)cast_in_place(p.value, pol_.param, write_back, ctx.next_key());
    if (!keeps_master()) {
      for (Eigen::Index k = 0; k < p.value.size(); ++k) {
        lost_updates_ += (p.value.data()[k] == updated.data()[k] && p.grad.data()[k] != 0.0f) ? 1u : 0u;
      }
    }
  }
}

}  // namespace safeamp::sim
