// Inputs of the nightly-window planner (workload, options) and the evaluation of one candidate configuration
// (policy x recomputation at the best microbatch it allows): memory fit, step time from the roofline, margin, cost.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "safeamp/error.hpp"
#include "safeamp/memory/activations.hpp"
#include "safeamp/memory/budget.hpp"
#include "safeamp/memory/model_states.hpp"
#include "safeamp/memory/step_time.hpp"
#include "safeamp/policy/policy_presets.hpp"

namespace safeamp {

/// What has to be trained in the window. Give either `shape` (a transformer) or `parameters` with
/// `tokens_per_sample` and `activation_bytes_per_sample` (a measured or estimated figure, used for every policy).
struct workload {
  std::optional<transformer_shape> shape{};
  std::uint64_t parameters = 0;                   // from the shape when one is given
  std::uint64_t tokens_per_sample = 1;            // from the shape (its sequence) when one is given
  std::uint64_t activation_bytes_per_sample = 0;  // only without a shape
  double samples = 0.0;                           // samples to train per night (tokens / tokens_per_sample)
  std::int64_t global_batch = 0;                  // 0: no target, use the largest microbatch
};

struct planner_options {
  device_spec device{};
  memory_budget budget{};           // device_bytes (0: the device's capacity), reserve, context, workspace, fragmentation
  double window_seconds = 0.0;     // completion window
  double efficiency = 0.4;         // fraction of the roofline bound reached (MFU-like); 40% is typical of tuned training
  double measured_samples_per_second = 0.0;  // if > 0: replaces `efficiency` (calibrated on `measured_policy`, no recompute)
  std::string_view measured_policy = "bf16-mixed";
  std::vector<named_policy> policies{policy_presets.begin(), policy_presets.end()};
  std::vector<recompute> recompute_modes{recompute::none, recompute::selective, recompute::full};
  state_options states{};
  zero_stage stage = zero_stage::none;
  std::uint64_t data_parallel = 1;
  accumulation_rounding rounding = accumulation_rounding::ceil;
  double price_per_hour = 0.0;     // optional: device price, for a cost per sample in money
};

/// One (policy, recompute) configuration with its best microbatch.
struct plan_candidate {
  std::string policy_name{};
  precision_policy policy{};
  recompute mode = recompute::none;
  bool supported = true;             // the device has math units for the policy's compute format
  std::uint64_t state_bytes = 0;
  std::uint64_t activation_bytes_per_sample = 0;
  std::int64_t max_microbatch = 0;   // 0: not even one sample fits
  std::int64_t shortfall_bytes = 0;  // bytes missing at microbatch 1 (0 when it fits)
  accumulation_plan accumulation{};
  std::int64_t headroom_bytes = 0;   // at the chosen microbatch
  double flops_per_sample = 0.0;
  double attainable_flops = 0.0;     // roofline bound of the dominant GEMM (compute-bound peak without a shape)
  double seconds_per_sample = 0.0;
  double total_seconds = 0.0;        // samples x seconds per sample + optimizer steps
  double margin_seconds = 0.0;       // window - total (negative: late)
  double cost_per_sample = 0.0;      // price_per_hour x total / 3600 / samples (0 without a price)
  [[nodiscard]] bool fits_memory() const noexcept { return supported && max_microbatch >= 1; }
  [[nodiscard]] bool fits() const noexcept { return fits_memory() && margin_seconds >= 0.0; }
};

struct plan_result {
  std::vector<plan_candidate> candidates{};  // every configuration tried, fastest first among those that fit
  std::optional<plan_candidate> chosen{};
  std::optional<plan_candidate> runner_up{};
  double efficiency = 0.0;                  // used (given, or calibrated from a measurement)
  std::vector<std::string> failures{};       // when nothing fits: which constraint, by how much
  std::vector<std::string> remedies{};       // when nothing fits in memory: what would
};

namespace detail {
inline std::string gb_text(double bytes) {
  return format_bytes(static_cast<std::uint64_t>(std::max(0.0, bytes)), byte_unit::gb);
}

inline plan_candidate evaluate(const workload& w, const planner_options& o, const named_policy& p, recompute mode,
                               double efficiency, state_options states, zero_stage stage, std::uint64_t data_parallel) {
  plan_candidate c;
  c.policy_name = std::string(p.name);
  c.policy = p.policy;
  c.mode = mode;
  const double peak = peak_flops_for(o.device, p.policy.compute);
  c.supported = peak > 0.0;
  c.state_bytes = model_states_for(w.parameters, p.policy, states, stage, data_parallel).total_bytes();
  c.activation_bytes_per_sample = w.shape ? activation_bytes_per_sample(*w.shape, mode, storage_bytes(p.policy.output))
                                          : w.activation_bytes_per_sample;
  memory_budget b = o.budget;
  b.fixed_bytes = c.state_bytes;
  b.activation_bytes_per_sample = c.activation_bytes_per_sample;
  c.max_microbatch = max_microbatch(b);
  c.flops_per_sample = w.shape ? training_flops_per_sample(*w.shape, mode)
                               : training_flops_per_sample(w.parameters, w.tokens_per_sample, mode);
  if (c.max_microbatch < 1) {
    c.shortfall_bytes = -headroom_bytes(b, 1);
    return c;
  }
  c.accumulation = w.global_batch > 0
                       ? accumulation_for(w.global_batch, c.max_microbatch, static_cast<std::int64_t>(data_parallel), o.rounding)
                       : accumulation_plan{.microbatch = c.max_microbatch, .steps = 1,
                                           .global_batch = c.max_microbatch * static_cast<std::int64_t>(data_parallel)};
  c.headroom_bytes = headroom_bytes(b, c.accumulation.microbatch);
  if (!c.supported) return c;
  c.attainable_flops =
      w.shape ? roofline(o.device, p.policy.compute,
                         dominant_gemm(*w.shape, static_cast<std::uint64_t>(c.accumulation.microbatch), p.policy.compute,
                                       p.policy.output)).attainable_flops
              : peak;
  c.seconds_per_sample = c.flops_per_sample / (efficiency * c.attainable_flops);
  const double optimizer_steps = std::ceil(w.samples / static_cast<double>(c.accumulation.global_batch));
  c.total_seconds = w.samples * c.seconds_per_sample / static_cast<double>(data_parallel) +
                    optimizer_steps * optimizer_step_seconds(w.parameters, bytes_per_param(p.policy, states), o.device) /
                        static_cast<double>(stage == zero_stage::none ? 1 : data_parallel);
  c.margin_seconds = o.window_seconds - c.total_seconds;
  if (o.price_per_hour > 0.0) {
    c.cost_per_sample = o.price_per_hour * static_cast<double>(data_parallel) * c.total_seconds / 3600.0 / w.samples;
  }
  return c;
}
}  // namespace detail

}  // namespace safeamp
