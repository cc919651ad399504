// Step-time model of the planner: training FLOPs per sample (6 P tokens, or Korthikanti's transformer count with
// its recomputation overheads), the roofline-attainable rate of the dominant GEMM at a microbatch, and the
// memory-bound optimizer pass.
#pragma once

#include <cmath>
#include <cstdint>

#include "safeamp/error.hpp"
#include "safeamp/format/format_spec.hpp"
#include "safeamp/memory/activations.hpp"
#include "safeamp/memory/devices.hpp"
#include "safeamp/memory/model_states.hpp"
#include "safeamp/memory/roofline.hpp"
#include "safeamp/policy/policy_value.hpp"

namespace safeamp {

/// FLOPs flash attention adds per sample: its backward recomputes S = QK^T (Dao et al. 2022, Algorithm 4),
/// 2 s^2 h per layer; 0 for eager attention.
[[nodiscard]] inline double flash_recompute_flops(const transformer_shape& t) {
  if (t.attention != attention_kernel::flash) return 0.0;
  const double s = static_cast<double>(t.sequence);
  return 2.0 * static_cast<double>(t.layers) * s * s * static_cast<double>(t.hidden);
}

/// Whether `mode` recomputes the attention core in backward: selective recomputation (Korthikanti et al. 2022) drops
/// the stored s^2 core and recomputes it; flash attention stores none, so with it selective recomputation has
/// nothing to drop or recompute, in memory (activation_bytes_per_layer) and in FLOPs alike: none's figures.
[[nodiscard]] constexpr bool recomputes_attention_core(const transformer_shape& t, recompute mode) noexcept {
  return mode == recompute::selective && t.attention != attention_kernel::flash;
}

/// FLOPs a chunked cross-entropy adds per sample: its backward recomputes each chunk's logits, one more forward of
/// the output layer, 2 s h v; 0 when the logits are stored.
[[nodiscard]] inline double chunked_loss_recompute_flops(const transformer_shape& t) {
  if (t.cross_entropy_chunks == 0) return 0.0;
  return 2.0 * static_cast<double>(t.sequence) * static_cast<double>(t.hidden) * static_cast<double>(t.vocabulary);
}

/// Training FLOPs per sample of a transformer (Korthikanti et al. 2022, Appendix A, per sample, B = 1), plus
/// flash_recompute_flops with flash attention and chunked_loss_recompute_flops with a chunked cross-entropy:
///   model FLOPs  72 L s h^2 (1 + s/(6h) + v/(12 h L))
///   selective    the attention core's forward again: + 72 L s h^2 s/(6h) = 12 L s^2 h (s/6h becomes s/3h); with
///                flash attention no core is stored, so selective recomputes nothing: none's count (until 2026-12 it
///                added the 12 L s^2 h while its memory was none's)
///   full         the whole forward again: x 4/3 (forward is 1/3 of forward + backward)
[[nodiscard]] inline double training_flops_per_sample(const transformer_shape& t, recompute mode,
                                                      std::uint64_t adapter_parameters = 0);

/// Training FLOPs per sample split by where they run (the three terms of Korthikanti Appendix A's count):
///  linear   72 L s h^2    the layers' weight GEMMs (QKV, projection, MLP; 6 s x layer_parameters per layer in
///                          general): what fp8 recipes run in fp8
///  other    12 L s^2 h    the attention core (QK^T and attention over V), + 12 L s^2 h again with selective
///           + 6 s h v     recomputation; the logits GEMM. Transformer Engine's fp8 applies to its Linear layers;
///                          attention and the output layer stay in the activation format.
/// Each term is 3 forward passes' worth (forward 1, backward 2: input and weight gradients); full recomputation adds
/// a fourth. With a frozen base and adapters (LoRA) the weight gradients of the linear layers and the output layer
/// are not computed: 2 passes (+1 with full recomputation), and the adapters add 6 x adapters x s.
/// linear + other == training_flops_per_sample(t, mode, adapters).
struct flops_split {
  double linear = 0.0;
  double other = 0.0;
  [[nodiscard]] constexpr double total() const noexcept { return linear + other; }
};

[[nodiscard]] inline flops_split training_flops_split(const transformer_shape& t, recompute mode,
                                                      std::uint64_t adapter_parameters = 0) {
  validate(t);
  const double s = static_cast<double>(t.sequence), h = static_cast<double>(t.hidden);
  const double l = static_cast<double>(t.layers), v = static_cast<double>(t.vocabulary);
  const bool full = mode == recompute::full;
  const double weight_passes = (adapter_parameters > 0 ? 2.0 : 3.0) + (full ? 1.0 : 0.0);
  const double attention_passes = 3.0 * (full ? 4.0 / 3.0 : 1.0) + (recomputes_attention_core(t, mode) ? 3.0 : 0.0);
  flops_split f;
  // One forward pass of the layers' weight GEMMs is 2 s x their parameters: 24 L s h^2 for GPT's 12 h^2.
  f.linear = weight_passes * 2.0 * s * l * static_cast<double>(layer_parameters(t)) +
             6.0 * static_cast<double>(adapter_parameters) * s;
  f.other = attention_passes * 4.0 * l * s * s * h + weight_passes * 2.0 * s * h * v + flash_recompute_flops(t) +
            chunked_loss_recompute_flops(t);
  return f;
}

[[nodiscard]] inline double training_flops_per_sample(const transformer_shape& t, recompute mode,
                                                      std::uint64_t adapter_parameters) {
  const bool gpt = t.kv_heads == 0 && t.ffn_hidden == 0 && !t.gated_mlp;  // Korthikanti's closed form applies
  if (adapter_parameters > 0 || !gpt) return training_flops_split(t, mode, adapter_parameters).total();
  validate(t);
  const double s = static_cast<double>(t.sequence), h = static_cast<double>(t.hidden);
  const double l = static_cast<double>(t.layers), v = static_cast<double>(t.vocabulary);
  const double model = 72.0 * l * s * h * h * (1.0 + s / (6.0 * h) + v / (12.0 * h * l));
  const double flash = flash_recompute_flops(t) + chunked_loss_recompute_flops(t);
  switch (mode) {
    case recompute::none:
      return model + flash;
    case recompute::selective:
      return model + (recomputes_attention_core(t, mode) ? 12.0 * l * s * s * h : 0.0) + flash;
    case recompute::full:
      return model * 4.0 / 3.0 + flash;
  }
  return model;
}

/// The format the non-linear-layer matmuls run in: the policy's matmul format, except for 8-bit matmuls (fp8
/// recipes), whose attention and output layer run in the activation format (bf16 for fp8-hybrid).
[[nodiscard]] constexpr format_spec other_matmul_format(const precision_policy& p) noexcept {
  const format_spec matmul = p.format_for(op_class::matmul);
  return total_bits(matmul) == 8 ? p.output : matmul;
}

/// Training FLOPs per sample from a parameter count: C = 6 P D (Kaplan et al. 2020; EleutherAI "Transformer Math
/// 101": forward 2PD + backward 4PD), D = tokens per sample; full recomputation adds a forward pass (x 4/3). A frozen
/// base with adapters: 4PD (+2PD with full recomputation) + 6AD.
/// Selective recomputation needs the shape (throws).
/// A model known only by its counts, by name (three counts of one type in a row would compile swapped).
struct counted_model {
  std::uint64_t parameters = 0;
  std::uint64_t tokens_per_sample = 0;
  std::uint64_t adapter_parameters = 0;  // > 0: a frozen base with this many trained adapter parameters
};

[[nodiscard]] inline double training_flops_per_sample(const counted_model& model, recompute mode) {
  const std::uint64_t parameters = model.parameters, tokens_per_sample = model.tokens_per_sample;
  const std::uint64_t adapter_parameters = model.adapter_parameters;
  if (parameters == 0 || parameters > max_parameter_count) {
    throw error("parameters", std::to_string(parameters), "1 .. 1e15 parameters");
  }
  if (tokens_per_sample == 0 || tokens_per_sample > 100'000'000) {
    throw error("tokens per sample", std::to_string(tokens_per_sample), "1 .. 1e8");
  }
  const double base = 6.0 * static_cast<double>(parameters) * static_cast<double>(tokens_per_sample);
  if (mode == recompute::selective) {
    throw error("recompute", "selective", "none or full when no transformer shape is given");
  }
  if (adapter_parameters > 0) {  // frozen base: forward and input gradients only (4PD, +2PD full), adapters 6AD
    const double d = static_cast<double>(tokens_per_sample);
    return (mode == recompute::full ? 6.0 : 4.0) * static_cast<double>(parameters) * d +
           6.0 * static_cast<double>(adapter_parameters) * d;
  }
  return mode == recompute::full ? base * 4.0 / 3.0 : base;
}

/// The formats of a GEMM's inputs and output, by name (two formats in a row would compile swapped).
struct gemm_formats {
  format_spec compute = fp32;  // both inputs
  format_spec output = fp32;
};

/// The dominant GEMM of a transformer step at microbatch b: the MLP's up-projection, (b s) x (f / t) x h, inputs in
/// the compute format and output in the activation format. Small microbatches make it memory-bound.
[[nodiscard]] inline kernel_cost dominant_gemm(const transformer_shape& t, std::uint64_t microbatch,
                                               const gemm_formats& formats) {
  const format_spec compute = formats.compute, output = formats.output;
  const double m = static_cast<double>(t.sequence) * static_cast<double>(microbatch);
  const double n = static_cast<double>(ffn_of(t)) / static_cast<double>(t.tensor_parallel);
  const double k = static_cast<double>(t.hidden);
  const double ce = storage_bytes(compute);
  return gemm_cost({.m = m,
                    .n = n,
                    .k = k,
                    .a_element_bytes = ce,
                    .b_element_bytes = ce,
                    .c_element_bytes = static_cast<double>(storage_bytes(output))});
}

/// Seconds of one optimizer step over `parameters` parameters: a memory-bound pass that reads the weights, the
/// gradients, the master copy and the optimizer states and writes back weights, master copy and states.
[[nodiscard]] inline double optimizer_step_seconds(std::uint64_t parameters, state_bytes_per_param b,
                                                   const device_spec& d) {
  const double bytes =
      static_cast<double>(parameters) * (2.0 * b.weights + b.gradients + 2.0 * b.master + 2.0 * b.optimizer);
  return bytes / d.memory_bytes_per_second;
}

/// Host link of an offloaded optimizer step. PCIe 4.0 x16 moves 32 GB/s each way (64 GB/s bidirectional, as NVIDIA's
/// L40S datasheet states its interconnect); real copies reach less. The CPU update is memory-bound; its default rate
/// is the tool's assumption, not a measured or published figure: two DDR5-4800 channels peak at 2 x 4800 MT/s x 8
/// bytes = 76.8 GB/s, and a streaming update sustains part of a peak; 50 GB/s (65% of it) stands for a workstation.
/// Pass a measured figure (a STREAM-like triad on the training machine) as host_bytes_per_second
/// (`--host-bandwidth`).
inline constexpr double default_pcie_bytes_per_second = 32e9;
inline constexpr double default_host_bytes_per_second = 50e9;
struct offload_link {
  double pcie_bytes_per_second = default_pcie_bytes_per_second;
  double host_bytes_per_second = default_host_bytes_per_second;
};

/// Seconds of one offloaded optimizer step: the gradients go to the CPU and the updated weights come back over PCIe,
/// P (g + w) / PCIe; the CPU reads the fp32 gradients (4), reads and writes the fp32 parameters (8) and the states
/// (2 K_opt): P (12 + 2 K_opt) / host bandwidth. Not overlapped with the device's work (an upper bound: ZeRO-Offload
/// overlaps part of it).
[[nodiscard]] inline double offload_step_seconds(std::uint64_t parameters, state_bytes_per_param b, offload_link link) {
  if (!(link.pcie_bytes_per_second > 0.0) || !(link.host_bytes_per_second > 0.0) ||
      !std::isfinite(link.pcie_bytes_per_second) || !std::isfinite(link.host_bytes_per_second)) {
    throw error(
        "offload bandwidth",
        std::to_string(link.pcie_bytes_per_second) + " / " + std::to_string(link.host_bytes_per_second) + " B/s",
        "finite numbers > 0");
  }
  const auto p = static_cast<double>(parameters);
  return p * (b.gradients + b.weights) / link.pcie_bytes_per_second +
         p * (12.0 + 2.0 * b.optimizer) / link.host_bytes_per_second;
}

/// Seconds of one optimizer step of what trains (trained_parameters: the adapters when there are any, otherwise every
/// parameter that is not frozen):
///  on the device: optimizer_step_seconds;
///  offloaded fp32 AdamW (ZeRO-Offload): offload_step_seconds;
///  paged 8-bit AdamW: the states paged out and back in over PCIe, 2 P K_opt / PCIe (an upper bound: every step
///    evicts them), then the device's update.
[[nodiscard]] inline double optimizer_update_seconds(std::uint64_t parameters, const precision_policy& policy,
                                                     const state_options& states, const device_spec& d,
                                                     offload_link link) {
  const bool adapters = states.adapter_parameters > 0;
  const std::uint64_t trained = trained_parameters(parameters, states);
  const state_bytes_per_param b = bytes_per_param(adapters ? precision_policy{} : policy, states);  // fp32 adapters
  if (!states.offload_optimizer) return optimizer_step_seconds(trained, b, d);
  if (states.optimizer == optimizer_kind::adam_8bit) {
    (void)offload_step_seconds(0, b, link);  // validates the link
    return 2.0 * static_cast<double>(trained) * b.optimizer / link.pcie_bytes_per_second +
           optimizer_step_seconds(trained, b, d);
  }
  return offload_step_seconds(trained, b, link);
}

/// Seconds per microbatch of fetching offloaded parameters (state_options::offload_parameters): every layer's weights
/// cross PCIe for the forward and again for the backward, 2 w P / PCIe (not overlapped: an upper bound).
[[nodiscard]] inline double parameter_fetch_seconds(std::uint64_t parameters, const precision_policy& policy,
                                                    offload_link link) {
  (void)offload_step_seconds(0, {}, link);  // validates the link
  return 2.0 * storage_bytes(policy.param) * static_cast<double>(parameters) / link.pcie_bytes_per_second;
}

}  // namespace safeamp
