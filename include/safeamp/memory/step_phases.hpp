// Peaks of one training step by phase (forward, backward, optimizer step), each with the allocations it holds, and
// the largest microbatch for which every phase fits. A step's memory is not one sum: activations are gone before the
// optimizer runs, and the optimizer's temporaries do not exist during the forward pass.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "safeamp/error.hpp"
#include "safeamp/memory/budget.hpp"
#include "safeamp/memory/bytes.hpp"
#include "safeamp/memory/model_states.hpp"

namespace safeamp {

enum class step_phase : std::uint8_t { forward, backward, optimizer_step };

[[nodiscard]] constexpr std::string_view to_string(step_phase p) noexcept {
  return p == step_phase::forward ? "forward" : p == step_phase::backward ? "backward" : "optimizer step";
}

/// One allocation a phase holds: a fixed part and a part proportional to the microbatch.
struct phase_item {
  std::string name{};
  std::uint64_t fixed_bytes = 0;
  std::uint64_t bytes_per_sample = 0;
  friend bool operator==(const phase_item&, const phase_item&) = default;
};

/// What one phase holds at its peak, as a line in the microbatch b: fixed + b x per sample.
struct phase_need {
  step_phase phase = step_phase::forward;
  std::vector<phase_item> items{};
  [[nodiscard]] std::uint64_t fixed_bytes() const {
    std::uint64_t sum = 0;
    for (const phase_item& i : items) sum = checked_add(sum, i.fixed_bytes, "phase fixed bytes");
    return sum;
  }
  [[nodiscard]] std::uint64_t bytes_per_sample() const {
    std::uint64_t sum = 0;
    for (const phase_item& i : items) sum = checked_add(sum, i.bytes_per_sample, "phase bytes per sample");
    return sum;
  }
  /// The phase's peak at `microbatch` samples.
  [[nodiscard]] std::uint64_t bytes_at(std::uint64_t microbatch) const {
    return checked_add(fixed_bytes(), checked_mul(microbatch, bytes_per_sample(), "phase activations"), "phase peak");
  }
};

using step_needs = std::array<phase_need, 3>;  // forward, backward, optimizer step

/// Inputs of the per-phase model, all per device.
struct step_inputs {
  model_states states{};                        // weights, gradients, master copy, optimizer states
  std::uint64_t weight_copy_bytes = 0;          // compute-format copies of the weights (autocast), see below
  std::uint64_t optimizer_temporary_bytes = 0;  // allocated by the optimizer step (optimizer_temporary_bytes_per_param)
  std::uint64_t forward_bytes_per_sample = 0;   // activations held at the end of the forward pass (ledger's stored)
  std::uint64_t backward_bytes_per_sample = 0;  // activation peak of the backward pass (ledger's peak, >= stored)
  std::uint64_t gathered_bytes = 0;             // ZeRO stage 3: one layer's gathered parameters and gradients
  std::uint64_t bucket_bytes = 0;               // DDP's all-reduce buckets (ddp_bucket_bytes)
  bool accumulating = false;                    // more than one microbatch per optimizer step
  bool full_recompute = false;                  // every layer checkpointed
};

/// Bytes per parameter of the compute-format weight copies that autocast makes. Under torch.autocast a weight
/// stored in fp32 and multiplied in a narrower format is cast once per forward and cached for the autocast region
/// (PyTorch `cached_cast`, aten/src/ATen/autocast_mode.cpp; the `cache_enabled` argument of torch.autocast); the
/// backward graph saves the same casts for the weight gradients. A policy whose parameters are already stored in
/// the compute format (fp16-pure-master) makes no copies.
/// The same for weights stored in `stored` (a frozen LoRA base in bf16 under bf16 compute: none, since autocast's
/// cast returns a tensor already in the target format as it is).
[[nodiscard]] constexpr double weight_copy_bytes_per_param(const precision_policy& p, format_spec stored) noexcept {
  const int compute = storage_bytes(p.format_for(op_class::matmul));
  return compute < storage_bytes(stored) ? compute : 0.0;
}
[[nodiscard]] constexpr double weight_copy_bytes_per_param(const precision_policy& p) noexcept {
  return weight_copy_bytes_per_param(p, p.param);
}

/// The three phases (all counted as upper bounds at their peak):
///  forward:        weights + master + optimizer states + the weight copies (+ ZeRO-3's gathered layer) + the stored
///                  activations, and the
///                  gradients only when accumulating (PyTorch >= 2.0 `zero_grad()` sets .grad to None after each step,
///                  so the first forward holds none; the forwards of microbatches 2..k hold the summed gradients);
///  backward:       weights + master + optimizer states + every gradient + the weight copies (saved by the graph;
///                  with full recomputation the checkpointed layers saved none and autocast's cache is freed when its
///                  region exits before backward) + the activation peak (stored + the largest backward transient);
///  optimizer step: weights + master + optimizer states + gradients + the optimizer's temporaries (and DeepSpeed's
///                  fp32 gradient copy, made for the master update); the activations and their graph were freed at
///                  the end of backward.
[[nodiscard]] inline step_needs step_needs_for(const step_inputs& in) {
  const model_states& m = in.states;
  const auto persistent = [&](phase_need& p) {
    p.items.push_back({"weights", m.weight_bytes, 0});
    if (m.master_bytes > 0) p.items.push_back({"fp32 master copy", m.master_bytes, 0});
    if (m.optimizer_bytes > 0) p.items.push_back({"optimizer states", m.optimizer_bytes, 0});
  };
  step_needs out;
  phase_need& fwd = out[0];
  fwd.phase = step_phase::forward;
  persistent(fwd);
  if (in.accumulating) fwd.items.push_back({"gradients (accumulating)", m.gradient_bytes, 0});
  if (in.weight_copy_bytes > 0) fwd.items.push_back({"weight copies in the compute format", in.weight_copy_bytes, 0});
  if (in.gathered_bytes > 0) fwd.items.push_back({"gathered layer (ZeRO-3)", in.gathered_bytes, 0});
  if (in.bucket_bytes > 0) fwd.items.push_back({"DDP gradient buckets", in.bucket_bytes, 0});
  fwd.items.push_back({"activations (stored)", 0, in.forward_bytes_per_sample});

  phase_need& bwd = out[1];
  bwd.phase = step_phase::backward;
  persistent(bwd);
  bwd.items.push_back({"gradients", m.gradient_bytes, 0});
  if (in.weight_copy_bytes > 0 && !in.full_recompute) {
    bwd.items.push_back({"weight copies saved by the graph", in.weight_copy_bytes, 0});
  }
  if (in.gathered_bytes > 0) bwd.items.push_back({"gathered layer (ZeRO-3)", in.gathered_bytes, 0});
  if (in.bucket_bytes > 0) bwd.items.push_back({"DDP gradient buckets", in.bucket_bytes, 0});
  bwd.items.push_back({"activations (peak, with transients)", 0, in.backward_bytes_per_sample});

  phase_need& opt = out[2];
  opt.phase = step_phase::optimizer_step;
  persistent(opt);
  opt.items.push_back({"gradients", m.gradient_bytes, 0});
  if (m.fp32_gradient_bytes > 0) opt.items.push_back({"fp32 gradient copy (DeepSpeed)", m.fp32_gradient_bytes, 0});
  if (in.optimizer_temporary_bytes > 0) opt.items.push_back({"optimizer temporaries", in.optimizer_temporary_bytes, 0});
  if (in.bucket_bytes > 0) opt.items.push_back({"DDP gradient buckets", in.bucket_bytes, 0});
  return out;
}

/// PyTorch DistributedDataParallel's all-reduce buckets: allocated when the model is wrapped and kept, they hold a copy
/// of every gradient (bucket_cap_mb = 25 each) unless `gradient_as_bucket_view=True` makes the gradients views into
/// them ("the saved memory size will be equal to the total gradients size", the DDP documentation): the gradient bytes
/// under plain data parallelism (stage 0) over more than one rank, otherwise 0 (ZeRO partitions instead).
[[nodiscard]] constexpr std::uint64_t ddp_bucket_bytes(const model_states& states, zero_stage stage,
                                                       std::uint64_t data_parallel, bool gradient_as_bucket_view) {
  return stage == zero_stage::none && data_parallel > 1 && !gradient_as_bucket_view ? states.gradient_bytes : 0;
}

/// ZeRO stage 3's gathered layer: the largest layer's parameters and gradients at full size, (w + g) x its
/// parameters; 4 x largest-layer parameters with fp16 parameters and gradients, DeepSpeed's ZeRO-3 estimator term
/// (deepspeed/runtime/zero/stage3.py, estimate_zero3_model_states_mem_needs: largest_layer_memory = 4 * params).
/// 0 below stage 3, on one device, or when the largest layer is unknown (0).
[[nodiscard]] inline std::uint64_t gathered_layer_bytes(std::uint64_t largest_layer_parameters,
                                                        const precision_policy& policy, zero_stage stage,
                                                        std::uint64_t data_parallel) {
  if (stage != zero_stage::parameters || data_parallel < 2) return 0;
  const double per =
      storage_bytes(policy.param) + storage_bytes(policy.master_weights ? policy.gradient : policy.param);
  return bytes_from_real(per * static_cast<double>(largest_layer_parameters), "gathered layer bytes");
}

/// What step_inputs_for needs, by name (runs of same-typed counts and flags in a positional list compile when swapped).
struct step_request {
  std::uint64_t parameters = 0;
  precision_policy policy{};
  state_options states{};
  zero_stage stage = zero_stage::none;
  std::uint64_t data_parallel = 1;
  std::uint64_t forward_bytes_per_sample = 0;   // activations held at the end of the forward pass
  std::uint64_t backward_bytes_per_sample = 0;  // activation peak of the backward pass
  bool accumulating = false;                    // more than one microbatch per optimizer step
  bool full_recompute = false;                  // every layer checkpointed
  bool gradient_as_bucket_view = false;         // DDP's option: no bucket copy of the gradients
};

/// The layer on the device when the parameters are offloaded (state_options::offload_parameters): the largest layer's
/// weights, its gradients before they stream to the CPU, and its compute-format copy, (w + g + copy) x its parameters;
/// DeepSpeed's ZeRO-3 estimator with offload_param has gpu_mem = largest_layer_memory = 4 x largest-layer parameters.
[[nodiscard]] inline std::uint64_t offloaded_layer_bytes(std::uint64_t largest_layer_parameters,
                                                         const precision_policy& policy) {
  const double per = storage_bytes(policy.param) +
                     storage_bytes(policy.master_weights ? policy.gradient : policy.param) +
                     weight_copy_bytes_per_param(policy);
  return bytes_from_real(per * static_cast<double>(largest_layer_parameters), "offloaded layer bytes");
}

/// step_inputs for `parameters` under a policy and optimizer, ZeRO-partitioned like the model states (the weight
/// copies follow the weights, the temporaries the optimizer states), with per-sample activation figures.
[[nodiscard]] inline step_inputs step_inputs_for(const step_request& request) {
  const std::uint64_t parameters = request.parameters;
  const precision_policy& policy = request.policy;
  const state_options& options = request.states;
  const zero_stage stage = request.stage;
  const std::uint64_t data_parallel = request.data_parallel;
  step_inputs in;
  in.states = model_states_for(parameters, policy, options, stage, data_parallel);
  const auto psi = static_cast<double>(parameters);
  const auto n = static_cast<double>(data_parallel);
  const int s = static_cast<int>(stage);
  // A 4-bit base is dequantized matmul by matmul (bitsandbytes saves the packed weight for backward): no copies;
  // nor for block-scaled weights (MX, NVFP4), which the block-scaled GEMM reads as they are stored.
  // With offloaded parameters the copies are of the one layer on the device (offloaded_layer_bytes).
  // A LoRA base keeps copies when it is stored wider than the compute format (fp32 under autocast), not in 16 bits.
  // (The fp32 adapters' own copies, 2 bytes each under bf16 compute, are not counted: under 1% of the base.)
  const double copies =
      options.base_4bit || options.offload_parameters || is_block_scaled(options.weight_blocks)
          ? 0.0
          : weight_copy_bytes_per_param(
                policy, options.adapter_parameters > 0 ? frozen_base_format(policy, options) : policy.param);
  const auto trained = static_cast<double>(trained_parameters(parameters, options));
  in.weight_copy_bytes = bytes_from_real(copies * psi / (s >= 3 ? n : 1.0), "weight copies");
  const double temporaries =
      options.offload_optimizer ? 0.0 : optimizer_temporary_bytes_per_param(options);  // CPU side
  in.optimizer_temporary_bytes = bytes_from_real(temporaries * trained / (s >= 1 ? n : 1.0), "optimizer temporaries");
  in.forward_bytes_per_sample = request.forward_bytes_per_sample;
  in.backward_bytes_per_sample = request.backward_bytes_per_sample;
  in.accumulating = request.accumulating;
  in.full_recompute = request.full_recompute;
  in.bucket_bytes = ddp_bucket_bytes(in.states, stage, data_parallel, request.gradient_as_bucket_view);
  return in;
}

/// The largest microbatch every phase fits in, and which phase limits it.
struct phase_fit {
  std::int64_t max_microbatch = 0;            // 0: microbatch 1 does not fit
  step_phase limiting = step_phase::forward;  // the phase that sets the limit (or is furthest over at microbatch 1)
  std::int64_t shortfall_bytes = 0;           // bytes missing at microbatch 1 in the limiting phase (0 when it fits)
};

/// Largest microbatch cap when no phase grows with the batch (a measured per-sample figure of 0 is rejected
/// elsewhere; this only bounds the arithmetic).
inline constexpr std::int64_t max_phase_microbatch = std::int64_t{1} << 40;

/// Fits each phase into `available_bytes` (the pool after context, reserve, fragmentation and workspace:
/// breakdown(...).available_for_activations_bytes with fixed_bytes = 0): a phase allows
/// floor((available - fixed) / per sample) samples; the step allows the smallest of these.
[[nodiscard]] inline phase_fit fit_phases(std::uint64_t available_bytes, const step_needs& needs) {
  phase_fit fit;
  fit.max_microbatch = max_phase_microbatch;
  std::int64_t worst_shortfall = std::numeric_limits<std::int64_t>::min();
  step_phase worst = step_phase::forward;
  for (const phase_need& p : needs) {
    const std::uint64_t fixed = p.fixed_bytes();
    const std::uint64_t per = p.bytes_per_sample();
    std::int64_t allowed = 0;
    if (fixed <= available_bytes) {
      allowed = per == 0 ? max_phase_microbatch
                         : static_cast<std::int64_t>(
                               std::min<std::uint64_t>((available_bytes - fixed) / per, max_phase_microbatch));
    }
    if (allowed < fit.max_microbatch) {
      fit.max_microbatch = allowed;
      fit.limiting = p.phase;
    }
    const std::int64_t shortfall =
        static_cast<std::int64_t>(p.bytes_at(1)) - static_cast<std::int64_t>(available_bytes);
    if (shortfall > worst_shortfall) {
      worst_shortfall = shortfall;
      worst = p.phase;
    }
  }
  if (fit.max_microbatch < 1) {
    fit.limiting = worst;
    fit.shortfall_bytes = worst_shortfall;
  }
  return fit;
}

/// Where a headroom is taken, by name (a byte count and a sample count in a row would compile swapped).
struct phase_point {
  std::uint64_t available_bytes = 0;  // the pool the phases share
  std::uint64_t microbatch = 1;
};

/// Headroom at the microbatch in the tightest phase: available minus the largest phase peak (negative: over).
[[nodiscard]] inline std::int64_t phase_headroom_bytes(const step_needs& needs, const phase_point& at) {
  std::uint64_t peak = 0;
  for (const phase_need& p : needs) peak = std::max(peak, p.bytes_at(at.microbatch));
  return static_cast<std::int64_t>(at.available_bytes) - static_cast<std::int64_t>(peak);
}

}  // namespace safeamp
