// The evaluation of one candidate configuration of the nightly-window planner (policy x recomputation x optimizer at
// the best microbatch it allows): memory fit on the device and the host, step time from the roofline, margin, cost.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "safeamp/error.hpp"
#include "safeamp/memory/activations.hpp"
#include "safeamp/memory/budget.hpp"
#include "safeamp/memory/calibration.hpp"
#include "safeamp/memory/model_states.hpp"
#include "safeamp/memory/plan_options.hpp"
#include "safeamp/memory/step_phases.hpp"
#include "safeamp/memory/step_time.hpp"
#include "safeamp/policy/policy_presets.hpp"

namespace safeamp {

/// One (policy, recompute, optimizer) configuration with its best microbatch.
struct plan_candidate {
  std::string policy_name{};
  precision_policy policy{};
  recompute mode = recompute::none;
  state_options states{};  // optimizer, state format and implementation evaluated
  bool supported = true;   // the device has math units for the policy's matmul formats (linear layers and the rest)
  format_spec unsupported_format = fp32;  // when not supported: the first of those formats the device has none for
  quality_status quality = quality_status::unverified;
  std::uint64_t state_bytes = 0;
  std::uint64_t host_bytes = 0;                   // CPU memory of an offloaded optimizer (per device)
  std::uint64_t host_needed_bytes = 0;            // host_memory_needed: x 1.5, over every device (0: no offload)
  std::uint64_t host_shortfall_bytes = 0;         // host_needed - host memory when that is short (0: it fits)
  double offload_seconds_per_step = 0.0;          // the offloaded optimizer step (PCIe and the CPU update)
  std::uint64_t activation_bytes_per_sample = 0;  // backward-pass activation peak per sample
  std::int64_t max_microbatch = 0;   // 0: not even one sample fits (with accumulation, when the target needs it)
  std::int64_t shortfall_bytes = 0;  // bytes missing at microbatch 1 in the limiting phase (0 when it fits)
  step_phase limiting_phase = step_phase::forward;  // the phase that sets the microbatch (or is short)
  step_needs needs{};                               // what each phase holds (as lines in the microbatch)
  std::array<std::uint64_t, 3> phase_peak_bytes{};  // forward, backward, optimizer step at the chosen microbatch
  accumulation_plan accumulation{};
  std::int64_t headroom_bytes = 0;  // at the chosen microbatch, in the tightest phase
  std::uint64_t data_parallel = 1;  // replicas evaluated (each tensor_parallel devices)
  double flops_per_sample = 0.0;
  double attainable_flops = 0.0;  // effective roofline bound: flops over the bound's time (GEMMs and the rest)
  double roofline_seconds_per_sample = 0.0;  // one replica's compute per sample at the roofline bound (efficiency 1)
  double fetch_seconds_per_sample = 0.0;     // offloaded parameters' PCIe fetches per sample (0 without)
  /// One replica's time per sample without the optimizer steps: roofline / efficiency + fetches.
  double seconds_per_sample = 0.0;
  double optimizer_seconds_per_step = 0.0;  // one optimizer step, on the device or offloaded
  double optimizer_seconds = 0.0;           // every optimizer step of the night: ceil(samples / batch) x one
  double total_seconds = 0.0;               // samples x seconds per sample / replicas + optimizer_seconds
  double margin_seconds = 0.0;              // window - total (negative: late)
  double cost_per_sample = 0.0;             // price_per_hour x devices x total / 3600 / samples (0 without a price)
  /// One replica's time per sample with its share of the optimizer steps (one step per global batch, which the
  /// replicas share): the figure remedies are ranked by; seconds_per_sample leaves the step out.
  [[nodiscard]] double full_seconds_per_sample() const noexcept {
    if (accumulation.global_batch < 1) return seconds_per_sample;
    return seconds_per_sample + optimizer_seconds_per_step * static_cast<double>(data_parallel) /
                                    static_cast<double>(accumulation.global_batch);
  }
  [[nodiscard]] bool fits_memory() const noexcept {
    return supported && max_microbatch >= 1 && host_shortfall_bytes == 0;
  }
  /// How far from fitting memory: the device shortfall at microbatch 1 plus the host shortfall (0 when it fits).
  [[nodiscard]] std::uint64_t missing_bytes() const noexcept {
    return (shortfall_bytes > 0 ? static_cast<std::uint64_t>(shortfall_bytes) : 0) + host_shortfall_bytes;
  }
  [[nodiscard]] bool fits() const noexcept {
    return fits_memory() && margin_seconds >= 0.0 && quality != quality_status::failed;
  }
};

struct plan_result {
  std::vector<plan_candidate> candidates{};  // every configuration tried, fastest first among those that fit
  std::optional<plan_candidate> chosen{};
  std::optional<plan_candidate> runner_up{};
  std::optional<plan_candidate> fastest_verified{};  // fastest fitting one whose quality is fp32 or a parity PASS
  double efficiency = 0.0;                           // used (given, or calibrated from a measurement)
  std::optional<plan_candidate> calibrated_on{};     // with a measured throughput: the measured configuration
  std::vector<std::string> failures{};               // when nothing fits: which constraint, by how much
  std::vector<std::string> remedies{};               // when nothing fits in memory: what would
};

namespace detail {
inline std::string gb_text(double bytes) {
  return format_bytes(static_cast<std::uint64_t>(std::max(0.0, bytes)), byte_unit::gb);
}

/// For a candidate short of host memory: "106.37 GB to the CPU (x 1.5 = 159.56 GB of host memory needed, 64.00 GB
/// available)".
inline std::string host_text(const plan_candidate& c) {
  char factor[16];
  std::snprintf(factor, sizeof factor, "%.3g", host_buffer_factor);
  return gb_text(static_cast<double>(c.host_bytes)) + " to the CPU (x " + factor + " = " +
         gb_text(static_cast<double>(c.host_needed_bytes)) + " of host memory needed, " +
         gb_text(static_cast<double>(c.host_needed_bytes - c.host_shortfall_bytes)) + " available)";
}

/// The shape with the rank of the adapters being trained (their r-wide activations), or none for a full fine-tune.
inline transformer_shape with_adapters(transformer_shape t, const state_options& states) {
  t.lora_rank = states.adapter_parameters > 0 ? states.adapter_rank : 0;
  return t;
}

inline quality_status quality_of(const planner_options& o, const precision_policy& p) {
  if (p == presets::fp32) return quality_status::reference;
  if (std::find(o.failed_policies.begin(), o.failed_policies.end(), p) != o.failed_policies.end()) {
    return quality_status::failed;
  }
  if (std::find(o.verified_policies.begin(), o.verified_policies.end(), p) != o.verified_policies.end()) {
    return quality_status::verified;
  }
  return quality_status::unverified;
}

/// Memory available to the phases: the pool after context, reserve, fragmentation and workspace.
inline std::uint64_t phase_pool_bytes(const memory_budget& budget) {
  memory_budget b = budget;
  b.fixed_bytes = 0;
  b.activation_bytes_per_sample = 1;
  return breakdown(b).available_for_activations_bytes;
}

/// Parameters one device holds before ZeRO partitioning: the tensor-parallel rank's share with a shape
/// (tensor_parallel_share), every parameter without one.
inline std::uint64_t device_parameters(const workload& w) {
  return w.shape ? tensor_parallel_share(*w.shape, w.parameters) : w.parameters;
}

/// The state options of one device: under tensor parallelism the adapters as one rank holds them
/// (tensor_parallel_adapter_share) and the frozen parameters as the rank's share of the model less its share of the
/// trained ones (tensor_parallel_share, rounded up: a rank never trains fewer than 1/t of them); as given otherwise.
inline state_options device_states(const workload& w, state_options s) {
  if (!w.shape || w.shape->tensor_parallel == 1) return s;
  if (s.adapter_parameters > 0) s.adapter_parameters = tensor_parallel_adapter_share(*w.shape, s.adapter_parameters);
  if (s.frozen_parameters > 0 && s.frozen_parameters < w.parameters) {
    s.frozen_parameters = tensor_parallel_share(*w.shape, w.parameters) -
                          tensor_parallel_share(*w.shape, w.parameters - s.frozen_parameters);
  }
  return s;
}

/// Whether the target global batch can be planned over `replicas` data-parallel replicas under the user's rounding
/// rule: --rounding exact keeps the batch exactly and needs it to be a multiple of the replicas (accumulation_for
/// throws otherwise). Suggestions over other device counts skip a count that fails this instead of aborting the plan.
inline bool batch_splits_over(const workload& w, const planner_options& o, std::uint64_t replicas) {
  return w.global_batch <= 0 || o.rounding != accumulation_rounding::exact_divisor ||
         static_cast<std::uint64_t>(w.global_batch) % replicas == 0;
}

/// Devices `replicas` data-parallel replicas occupy: replicas x t under tensor parallelism (each replica is one
/// tensor-parallel group of t devices), replicas otherwise.
inline std::uint64_t devices_in_all(const workload& w, std::uint64_t replicas) {
  return checked_mul(replicas, w.shape ? w.shape->tensor_parallel : 1, "devices");
}

/// "4 devices"; under tensor parallelism "4 data-parallel replicas x 8 tensor-parallel ranks = 32 devices".
inline std::string devices_text(const workload& w, std::uint64_t replicas) {
  const std::uint64_t tp = w.shape ? w.shape->tensor_parallel : 1;
  if (tp == 1) return std::to_string(replicas) + " devices";
  return std::to_string(replicas) + " data-parallel replicas x " + std::to_string(tp) +
         " tensor-parallel ranks = " + std::to_string(devices_in_all(w, replicas)) + " devices";
}

/// Training FLOPs per sample one device runs: the shape's count / t under tensor parallelism (Megatron splits every
/// matmul, the attention core by heads and the logits by vocabulary, evenly over the t ranks), 6PD without a shape.
inline double device_flops_per_sample(const workload& w, recompute mode, std::uint64_t adapters) {
  if (!w.shape) {
    return training_flops_per_sample(
        {.parameters = w.parameters, .tokens_per_sample = w.tokens_per_sample, .adapter_parameters = adapters}, mode);
  }
  return training_flops_per_sample(*w.shape, mode, adapters) / static_cast<double>(w.shape->tensor_parallel);
}

/// Seconds per sample on one device (one tensor-parallel rank) at a microbatch: linear-layer GEMM FLOPs at the matmul
/// format's roofline rate, the rest (attention core, logits) at the rate of other_matmul_format; without a shape 6PD at
/// the matmul format's peak, except that an 8-bit matmul format gets no credit (the GEMM share is unknown) and runs at
/// the activation format's peak.
inline double seconds_per_sample(const workload& w, const device_spec& d, const precision_policy& p, recompute mode,
                                 std::int64_t microbatch, double efficiency, std::uint64_t adapters = 0) {
  const format_spec other = other_matmul_format(p);
  if (!w.shape) {
    return training_flops_per_sample(
               {.parameters = w.parameters, .tokens_per_sample = w.tokens_per_sample, .adapter_parameters = adapters},
               mode) /
           (efficiency * peak_flops_for(d, other));
  }
  const auto b = static_cast<std::uint64_t>(microbatch);
  const flops_split f = training_flops_split(*w.shape, mode, adapters);
  const auto tp = static_cast<double>(w.shape->tensor_parallel);  // each rank runs 1/t of every matmul
  const format_spec matmul = p.format_for(op_class::matmul);
  const double linear_rate =
      roofline(d, matmul, dominant_gemm(*w.shape, b, {.compute = matmul, .output = p.output})).attainable_flops;
  const double other_rate =
      roofline(d, other, dominant_gemm(*w.shape, b, {.compute = other, .output = p.output})).attainable_flops;
  return (f.linear / linear_rate + f.other / other_rate) / tp / efficiency;
}

inline plan_candidate evaluate(const workload& w, const planner_options& o, const named_policy& p, recompute mode,
                               double efficiency, state_options states, zero_stage stage, std::uint64_t data_parallel) {
  plan_candidate c;
  c.policy_name = std::string(p.name);
  c.policy = p.policy;
  c.mode = mode;
  c.states = states;
  c.data_parallel = data_parallel;
  c.quality = quality_of(o, p.policy);
  for (const format_spec f : {p.policy.format_for(op_class::matmul), other_matmul_format(p.policy)}) {
    if (c.supported && !(peak_flops_for(o.device, f) > 0.0)) {
      c.supported = false;
      c.unsupported_format = f;
    }
  }
  const std::uint64_t parameters = device_parameters(w);       // per tensor-parallel rank
  const state_options rank_states = device_states(w, states);  // its adapters and frozen parameters
  const model_states ms = model_states_for(parameters, p.policy, rank_states, stage, data_parallel);
  c.state_bytes = ms.total_bytes();
  c.host_bytes = ms.host_bytes;
  if (ms.host_bytes > 0) {  // offloaded: the host must hold it (0 host memory given: nothing offloaded fits)
    c.host_needed_bytes = host_memory_needed(ms.host_bytes, devices_in_all(w, data_parallel));  // every rank offloads
    if (c.host_needed_bytes > o.host_memory_bytes) c.host_shortfall_bytes = c.host_needed_bytes - o.host_memory_bytes;
  }
  if (states.offload_optimizer) {
    c.offload_seconds_per_step = optimizer_update_seconds(parameters, p.policy, rank_states, o.device, o.link) /
                                 static_cast<double>(stage == zero_stage::none ? 1 : data_parallel);
  }
  std::uint64_t stored = w.activation_bytes_per_sample, peak = w.activation_bytes_per_sample;
  if (w.shape) {
    const activation_ledger l =
        activation_ledger_for(with_adapters(*w.shape, states), 1, mode, activation_element_bytes(p.policy, states));
    stored = l.stored_bytes;
    peak = l.peak_bytes;
  }
  c.activation_bytes_per_sample = peak;
  const std::uint64_t adapters = states.adapter_parameters;
  c.flops_per_sample = device_flops_per_sample(w, mode, adapters);
  const std::uint64_t pool = phase_pool_bytes(o.budget);
  const bool full = mode == recompute::full;
  // First without accumulation (no gradients in the forward pass); if the target batch needs more than one
  // microbatch per step, again with the gradients held through the forward passes.
  const std::uint64_t largest = w.shape ? largest_layer_parameters(*w.shape) : w.largest_layer_parameters;
  const std::uint64_t gathered = states.offload_parameters
                                     ? offloaded_layer_bytes(largest, p.policy)
                                     : gathered_layer_bytes(largest, p.policy, stage, data_parallel);
  const auto needs_for = [&](bool accumulating) {
    step_inputs in = step_inputs_for({.parameters = parameters,
                                      .policy = p.policy,
                                      .states = rank_states,
                                      .stage = stage,
                                      .data_parallel = data_parallel,
                                      .forward_bytes_per_sample = stored,
                                      .backward_bytes_per_sample = peak,
                                      .accumulating = accumulating,
                                      .full_recompute = full,
                                      .gradient_as_bucket_view = o.gradient_as_bucket_view});
    in.gathered_bytes = gathered;
    const step_needs n = step_needs_for(in);
    return o.peak_calibration_ratio == 1.0 ? n : scaled(n, o.peak_calibration_ratio);
  };
  c.needs = needs_for(false);
  phase_fit fit = fit_phases(pool, c.needs);
  const auto dp = static_cast<std::int64_t>(data_parallel);
  const std::int64_t per_device = w.global_batch > 0 ? (w.global_batch + dp - 1) / dp : 0;
  if (fit.max_microbatch >= 1 && per_device > fit.max_microbatch) {
    c.needs = needs_for(true);
    fit = fit_phases(pool, c.needs);
  }
  c.max_microbatch = fit.max_microbatch;
  c.limiting_phase = fit.limiting;
  if (c.max_microbatch < 1) {
    c.shortfall_bytes = fit.shortfall_bytes;
    for (std::size_t i = 0; i < 3; ++i) c.phase_peak_bytes[i] = c.needs[i].bytes_at(1);
    return c;
  }
  c.accumulation =
      w.global_batch > 0
          ? accumulation_for({.target_global_batch = w.global_batch,
                              .max_microbatch = c.max_microbatch,
                              .data_parallel = dp,
                              .rule = o.rounding})
          : accumulation_plan{.microbatch = c.max_microbatch, .steps = 1, .global_batch = c.max_microbatch * dp};
  const auto micro = static_cast<std::uint64_t>(c.accumulation.microbatch);
  for (std::size_t i = 0; i < 3; ++i) c.phase_peak_bytes[i] = c.needs[i].bytes_at(micro);
  c.headroom_bytes = phase_headroom_bytes(c.needs, {.available_bytes = pool, .microbatch = micro});
  if (!c.supported) return c;
  // The time model: total = samples x (roofline / efficiency + fetches) / replicas + optimizer steps. Its terms are
  // kept apart so that a measured throughput can be solved for the efficiency (calibrated_efficiency, planner.hpp).
  c.roofline_seconds_per_sample =
      seconds_per_sample(w, o.device, p.policy, mode, c.accumulation.microbatch, 1.0, adapters);
  c.attainable_flops = c.flops_per_sample / c.roofline_seconds_per_sample;
  if (states.offload_parameters) {  // each microbatch fetches every layer twice over PCIe
    c.fetch_seconds_per_sample = parameter_fetch_seconds(parameters, p.policy, o.link) /
                                 static_cast<double>(c.accumulation.microbatch) / static_cast<double>(data_parallel);
  }
  c.seconds_per_sample = c.roofline_seconds_per_sample / efficiency + c.fetch_seconds_per_sample;
  c.optimizer_seconds_per_step = optimizer_update_seconds(parameters, p.policy, rank_states, o.device, o.link) /
                                 static_cast<double>(stage == zero_stage::none ? 1 : data_parallel);
  c.optimizer_seconds =
      std::ceil(w.samples / static_cast<double>(c.accumulation.global_batch)) * c.optimizer_seconds_per_step;
  c.total_seconds = w.samples * c.seconds_per_sample / static_cast<double>(data_parallel) + c.optimizer_seconds;
  if (!std::isfinite(c.total_seconds) || !(c.seconds_per_sample > 0.0)) {  // never a verdict from an overflow
    throw error("step time of " + c.policy_name, std::to_string(c.seconds_per_sample) + " s per sample",
                "a finite time > 0 (check --efficiency, --measured-sps, --samples and the device's figures)");
  }
  c.margin_seconds = o.window_seconds - c.total_seconds;
  if (o.price_per_hour > 0.0) {
    const auto devices = static_cast<double>(devices_in_all(w, data_parallel));
    c.cost_per_sample = o.price_per_hour * devices * c.total_seconds / 3600.0 / w.samples;
  }
  return c;
}
}  // namespace detail

}  // namespace safeamp
