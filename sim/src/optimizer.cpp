// SGD with momentum and AdamW, with or without fp32 master weights (see optimizer.hpp).
#include "safeamp/sim/optimizer.hpp"

#include <atomic>
#include <cmath>
#include <cstring>

#include "optimizer_kernels.hpp"
#include "safeamp/sim/parallel.hpp"
#include "scalar_round.hpp"

namespace safeamp::sim {
namespace {

// Elements of a parameter per task of the bulk AdamW update (five arrays of 8192 floats: 160 KiB, within L2).
constexpr std::int64_t adamw_chunk = 8192;

// Elements per task of the lost-update count (three arrays of 16384 floats: 192 KiB).
constexpr std::int64_t lost_chunk = 16384;

// How many elements with a nonzero gradient kept their stored value (now == before): updates lost to rounding.
// Chunks on the step's threads; an integer count, so the order in which they add up does not matter.
std::uint64_t count_lost_updates(int threads, const matrix& now, const matrix& before, const matrix& grad) {
  std::atomic<std::uint64_t> total{0};
  parallel_chunks(threads, now.size(), lost_chunk, [&](std::int64_t begin, std::int64_t end) {
    const float* a = now.data();
    const float* b = before.data();
    const float* g = grad.data();
    std::uint64_t lost = 0;
    // Branch-free (& rather than &&) so that the compiler vectorises the count.
    for (std::int64_t k = begin; k < end; ++k) lost += static_cast<std::uint64_t>((a[k] == b[k]) & (g[k] != 0.0f));
    total.fetch_add(lost, std::memory_order_relaxed);
  });
  return total.load(std::memory_order_relaxed);
}

}  // namespace

optimizer::optimizer(const optimizer_config& cfg, const precision_policy& pol, bool master_weights,
                     const parameter_list& params)
    : cfg_(cfg), pol_(pol) {
  for (const parameter& p : params) {
    state_.first.push_back(matrix::Zero(p.value.rows(), p.value.cols()));
    if (cfg.kind == optimizer_kind::adamw || cfg.kind == optimizer_kind::adamw_torch)
      state_.second.push_back(matrix::Zero(p.value.rows(), p.value.cols()));
    if (master_weights) state_.master.push_back(p.value);
  }
}

void optimizer::step(exec_context& ctx, parameter_list& params) {
  ++state_.updates;
  lost_updates_ = 0;
  const format_spec fu = pol_.format_for(op_class::optimizer_update);
  const round_options write_back{.mode = cfg_.stochastic_write_back ? rounding::stochastic : rounding::nearest_even,
                                 .on_overflow = overflow::to_infinity,
                                 .flush_subnormals = false};
  const auto lr = static_cast<float>(cfg_.learning_rate);
  const auto mu = static_cast<float>(cfg_.momentum);
  const auto b1 = static_cast<float>(cfg_.beta1);
  const auto b2 = static_cast<float>(cfg_.beta2);
  const auto eps = static_cast<float>(cfg_.epsilon);
  const auto wd = static_cast<float>(cfg_.weight_decay);
  const auto t = static_cast<double>(state_.updates);
  const auto c1 = static_cast<float>(1.0 / (1.0 - std::pow(cfg_.beta1, t)));
  const auto c2 = static_cast<float>(1.0 / (1.0 - std::pow(cfg_.beta2, t)));
  // torch.optim.AdamW (_single_tensor_adamw): Python floats, converted to float where they meet a tensor.
  const auto torch_decay = static_cast<float>(1.0 - cfg_.learning_rate * cfg_.weight_decay);
  const auto torch_step_size = static_cast<float>(cfg_.learning_rate / (1.0 - std::pow(cfg_.beta1, t)));
  const auto torch_bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(cfg_.beta2, t)));
  const auto one_minus_b1 = static_cast<float>(1.0 - cfg_.beta1);
  const auto one_minus_b2 = static_cast<float>(1.0 - cfg_.beta2);
  const auto one_minus_damp = static_cast<float>(1.0 - cfg_.dampening);
  const bool first_update = state_.updates == 1;
  // The updated weights of parameter i go into updated_[i], which then trades its memory with the parameter's:
  // with the same shapes every step, no step allocates.
  if (updated_.size() != params.size()) updated_.resize(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    parameter& p = params[i];
    matrix& weights = keeps_master() ? state_.master[i] : p.value;  // what the update is added to
    matrix& updated = updated_[i];
    updated.resize(weights.rows(), weights.cols());
    float* m = state_.first[i].data();
    float* v = state_.second.empty() ? nullptr : state_.second[i].data();
    const float* g = p.grad.data();
    const float* w = weights.data();
    float* out = updated.data();
    const Eigen::Index n = weights.size();
    // One loop per kind, each with the kind's rounding of the update chosen once (detail::with_round): the fp32
    // loops are plain float loops the compiler vectorises. Every element's operations and their order are the
    // ones written here (the build has -ffp-contract=off and no reassociation), so the bits do not depend on it.
    const bool bulk_adamw = cfg_.kind == optimizer_kind::adamw && fu == fp32;  // optimizer_kernels.hpp: same bits
    if (bulk_adamw) {
      const detail::adamw_fp32_args all{.m = m,
                                        .v = v,
                                        .g = g,
                                        .w = w,
                                        .out = out,
                                        .n = n,
                                        .b1 = b1,
                                        .b2 = b2,
                                        .lr = lr,
                                        .c1 = c1,
                                        .c2 = c2,
                                        .eps = eps,
                                        .wd = wd};
      // Each element's update reads and writes that element alone, so chunks on several threads give the bits of
      // one loop; the cut depends on n only.
      const cpu_path path = safeamp::detail::kernel_path();
      // With fp32 master weights the chunk's results are also copied into the parameter while still in cache.
      float* const param_copy = keeps_master() ? p.value.data() : nullptr;
      parallel_chunks(ctx.threads, n, adamw_chunk, [&](std::int64_t begin, std::int64_t end) {
        detail::adamw_fp32_args part = all;
        part.m += begin;
        part.v += begin;
        part.g += begin;
        part.w += begin;
        part.out += begin;
        part.n = end - begin;
        detail::adamw_fp32(path, part);
        if (param_copy != nullptr) {
          std::memcpy(param_copy + begin, part.out, static_cast<std::size_t>(part.n) * sizeof(float));
        }
      });
    } else {
      detail::with_round(fu, [&](auto round_update) {
        switch (cfg_.kind) {
          case optimizer_kind::sgd_momentum:
            for (Eigen::Index k = 0; k < n; ++k) {
              m[k] = mu * m[k] + g[k];
              out[k] = w[k] + round_update(-lr * m[k]);
            }
            break;
          case optimizer_kind::adamw:
            for (Eigen::Index k = 0; k < n; ++k) {
              m[k] = b1 * m[k] + (1.0f - b1) * g[k];
              v[k] = b2 * v[k] + (1.0f - b2) * g[k] * g[k];
              out[k] = w[k] + round_update(-lr * ((m[k] * c1) / (std::sqrt(v[k] * c2) + eps) + wd * w[k]));
            }
            break;
          case optimizer_kind::adamw_torch:
            // param.mul_(1 - lr*wd); exp_avg.lerp_(grad, 1 - beta1); exp_avg_sq.mul_(beta2).addcmul_(grad, grad,
            // 1 - beta2); denom = exp_avg_sq.sqrt() / sqrt(bias_correction2) + eps;
            // param.addcdiv_(exp_avg, denom, -lr / bias_correction1). lerp with weight < 0.5 is a + w (b - a).
            for (Eigen::Index k = 0; k < n; ++k) {
              m[k] = one_minus_b1 < 0.5f ? m[k] + one_minus_b1 * (g[k] - m[k])
                                         : g[k] - (g[k] - m[k]) * (1.0f - one_minus_b1);
              v[k] = v[k] * b2 + one_minus_b2 * g[k] * g[k];  // addcmul: self + (value * t1) * t2
              // addcdiv: (value * t1) / t2, added to the decayed weight
              out[k] =
                  w[k] * torch_decay + round_update(-torch_step_size * m[k] / (std::sqrt(v[k]) / torch_bc2_sqrt + eps));
            }
            break;
          case optimizer_kind::sgd_torch:
            // d_p = grad + wd*param; buf = d_p on the first step, else buf*momentum + (1 - dampening)*d_p;
            // nesterov: d_p += momentum*buf, else d_p = buf; param.add_(d_p, alpha=-lr).
            for (Eigen::Index k = 0; k < n; ++k) {
              float d = wd != 0.0f ? g[k] + wd * w[k] : g[k];
              if (mu != 0.0f) {
                m[k] = first_update ? d : m[k] * mu + one_minus_damp * d;
                d = cfg_.nesterov ? d + mu * m[k] : m[k];
              }
              out[k] = w[k] + round_update(-lr * d);
            }
            break;
        }
      });
    }
    if (keeps_master()) {
      // fp32 master: the update is kept exactly as fp32 arithmetic gave it (the buffers trade places: no copy).
      weights.swap(updated);
      if (!bulk_adamw) p.value = weights;  // the bulk loop copied it chunk by chunk
    } else {
      p.value.swap(updated);  // `updated` now holds the pre-update values, for counting lost updates
    }
    // The write-back into the parameter's format, on the step's threads (cast_span: the same keys and bits on any
    // thread count). Into fp32 it changes nothing (no flushing here), so only its key is taken.
    const philox_key write_back_key = ctx.next_key();
    if (pol_.param != fp32) (void)cast_span(ctx.threads, span_of(p.value), pol_.param, write_back, write_back_key);
    if (!keeps_master()) lost_updates_ += count_lost_updates(ctx.threads, p.value, updated, p.grad);
  }
}

}  // namespace safeamp::sim
