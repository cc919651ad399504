// What the model-state count needs beyond the precision policy: the optimizer, frozen parameters, adapters (LoRA on
// a frozen base in the policy's format, in 16 bits or in 4-bit NF4), offload and block-scaled storage, with the checks
// that refuse combinations the ledger does not model.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "safeamp/error.hpp"
#include "safeamp/format/block_names.hpp"
#include "safeamp/format/format_names.hpp"
#include "safeamp/format/format_spec.hpp"
#include "safeamp/memory/block_storage.hpp"
#include "safeamp/memory/optimizers.hpp"
#include "safeamp/policy/policy_value.hpp"

namespace safeamp {

/// Largest parameter count accepted (10^15): three orders above today's largest models; 10^30 is a typo.
inline constexpr std::uint64_t max_parameter_count = 1'000'000'000'000'000ULL;

/// Options of the model-state count beyond the policy.
struct state_options {
  optimizer_kind optimizer = optimizer_kind::adam;
  /// Format of the optimizer's momentum/variance (fp32 normally; bf16 halves them). Ignored for adam_8bit.
  format_spec optimizer_state_format = fp32;
  /// How the update runs (temporaries of the optimizer step); PyTorch's default on CUDA is foreach.
  optimizer_impl impl = optimizer_impl::foreach;
  /// DeepSpeed's accounting: besides the low-precision gradients, an fp32 copy of the gradients for the fp32 master
  /// update (4 bytes per parameter, partitioned with the optimizer states): 2 + 2 + 4 + 4 + 8 = 20 bytes per
  /// parameter with fp16 parameters and Adam, the ZeRO-2 estimator's 2 + 18/N at N = 1 (deepspeed PR #5099).
  bool fp32_gradient_copy = false;
  /// Frozen parameters of a full fine-tune (requires_grad=False: embeddings, the first layers, ...): they keep their
  /// weights (and autocast's copies of them) but no gradients, master copy or optimizer states; the other
  /// parameters train as usual. 0: everything trains. Not with adapters, whose base is frozen whole.
  std::uint64_t frozen_parameters = 0;
  /// Fine-tuning with adapters (LoRA, Hu et al. 2021): when > 0, the base parameters are frozen (no gradients, no
  /// optimizer states, no master copy) and only this many adapter parameters train, in fp32.
  std::uint64_t adapter_parameters = 0;
  /// The adapters' LoRA rank r, for their r-wide activations (transformer_shape::lora_rank); 0: not known (adapters
  /// given as a count), their activations are not counted.
  std::uint64_t adapter_rank = 0;
  /// QLoRA (Dettmers et al. 2023): the frozen base stored in 4-bit NF4 with double quantization (needs adapters).
  bool base_4bit = false;
  /// The frozen base's storage format when it is not the policy's parameter format (needs adapters): bf16 or fp16
  /// for the usual LoRA setup, the base loaded in 16 bits (`from_pretrained(..., torch_dtype=torch.bfloat16)`) while
  /// the adapters train in fp32; fp32 also accepted. Empty: the policy's parameter format (fp32 under autocast).
  std::optional<format_spec> base_format{};
  /// ZeRO-Offload (Ren et al. 2021, USENIX ATC): fp32 parameters, optimizer states and fp32 gradients live in CPU
  /// memory and the CPU runs the update; the device keeps the weights and the gradients it produces. With 8-bit
  /// AdamW it is bitsandbytes' paged optimizer instead (QLoRA, Dettmers et al. 2023, section 3, "Paged Optimizers"):
  /// the 8-bit states live in CPU memory (unified memory, evicted there under pressure) and the GPU runs the update.
  /// With adapters only the adapters' optimizer is offloaded.
  bool offload_optimizer = false;
  /// ZeRO-Infinity / ZeRO-3 `offload_param` (Rajbhandari et al. 2021, "ZeRO-Infinity", arXiv:2104.07857): the
  /// parameters live in CPU memory too and each layer is fetched when it runs; the device holds one gathered layer
  /// (step_phases' offloaded_layer_bytes). Needs offload_optimizer with fp32 AdamW and no adapters (see
  /// check_state_options: refused on purpose, not an omission).
  bool offload_parameters = false;
  /// Block-scaled storage (OCP MX, NVFP4) of the weights and of the gradients instead of the policy's formats:
  /// block_bits_per_element (MXFP8 8.25, MXFP4 4.25, NVFP4 4.5 bits) per parameter, plus NVFP4's 4-byte fp32
  /// tensor scale for each of weight_tensors tensors. no_block_scaling: the policy's format (storage_bytes).
  block_format weight_blocks = no_block_scaling;
  block_format gradient_blocks = no_block_scaling;
  /// Weight tensors (each has its own tensor scale under NVFP4): a shape's matrices, or 1 without one.
  std::uint64_t weight_tensors = 1;
  /// Block-scaled storage of the activations saved for backward instead of policy.output (activation_element_bytes).
  block_format activation_blocks = no_block_scaling;
  friend constexpr bool operator==(const state_options&, const state_options&) = default;
};

/// Bytes per parameter of a 4-bit NF4 base with double quantization: 4 bits plus 8/64 + 32/(64 x 256) = 0.127 bits of
/// quantization constants (QLoRA, Dettmers et al. 2023, section 3, "Double Quantization").
inline constexpr double nf4_bytes_per_param = (4.0 + 8.0 / 64.0 + 32.0 / (64.0 * 256.0)) / 8.0;

/// The parameters whose gradients, master copy and optimizer states exist: the adapters when there are any,
/// otherwise every parameter that is not frozen.
[[nodiscard]] constexpr std::uint64_t trained_parameters(std::uint64_t parameters, const state_options& o) noexcept {
  return o.adapter_parameters > 0 ? o.adapter_parameters : parameters - o.frozen_parameters;
}

/// The format a frozen adapter base is stored in (not for QLoRA's NF4 or a block format): base_format when given,
/// else the policy's parameter format.
[[nodiscard]] constexpr format_spec frozen_base_format(const precision_policy& policy,
                                                       const state_options& o) noexcept {
  return o.base_format ? *o.base_format : policy.param;
}

/// Bytes per parameter of the frozen base under adapters: NF4 (QLoRA), a block format (weight_blocks), or
/// storage_bytes(frozen_base_format): 2 for a 16-bit base, 4 for the fp32 parameters of an autocast policy.
[[nodiscard]] constexpr double frozen_base_bytes_per_param(const precision_policy& policy,
                                                           const state_options& o) noexcept {
  if (o.base_4bit) return nf4_bytes_per_param;
  if (is_block_scaled(o.weight_blocks)) return block_bytes_per_element(o.weight_blocks);
  return storage_bytes(frozen_base_format(policy, o));
}

/// Refuses what the model-state ledger does not model, naming the option, the value and what is accepted:
///  - adapters beyond the parameter count, frozen parameters that leave nothing to train or come with adapters;
///  - a 4-bit base without adapters or with block-scaled weights; a base format without adapters, with QLoRA or with
///    block-scaled weights, or one that is not fp32, bf16 or fp16;
///  - parameter offload without optimizer offload, with adapters or with 8-bit AdamW. These are deliberate: the
///    modelled parameter offload is DeepSpeed's ZeRO-3 offload_param, which streams the parameters for its CPU
///    optimizer to update, and DeepSpeedCPUAdam keeps fp32 states (or the parameters' 16-bit format with
///    fp32_optimizer_states=False), never 8-bit ones; adapters train so few parameters that offloading the optimizer
///    alone (offload_optimizer) is what is done, and a frozen base streamed from the CPU without an optimizer
///    (accelerate's device_map offload) is another scheme, not modelled;
///  - weight tensors outside 1 .. parameters.
inline void check_state_options(std::uint64_t parameters, const state_options& o) {
  if (o.adapter_parameters > parameters) {
    throw error("adapter parameters", std::to_string(o.adapter_parameters),
                "at most the model's " + std::to_string(parameters) + " parameters");
  }
  if (o.frozen_parameters > 0 && o.adapter_parameters > 0) {
    throw error("frozen parameters", std::to_string(o.frozen_parameters) + " with adapters",
                "0 with adapters (their base is frozen whole), or a full fine-tune");
  }
  if (o.frozen_parameters >= parameters) {
    throw error("frozen parameters", std::to_string(o.frozen_parameters),
                "fewer than the model's " + std::to_string(parameters) + " parameters (something must train)");
  }
  if (o.offload_parameters) {
    const std::string field = "parameter offload (offload_parameters)";
    if (!o.offload_optimizer) {
      throw error(field, "without optimizer offload",
                  "offload_optimizer too: ZeRO-3 offload_param streams the parameters for DeepSpeed's CPU optimizer");
    }
    if (o.adapter_parameters > 0) {
      throw error(field, "with adapters (LoRA/QLoRA)",
                  "a full fine-tune; with adapters offload the optimizer only (offload_optimizer); a frozen base "
                  "streamed from the CPU without an optimizer (accelerate's device_map) is not modelled");
    }
    if (o.optimizer == optimizer_kind::adam_8bit) {
      throw error(field, "with 8-bit AdamW (adam_8bit)",
                  "AdamW (adam): DeepSpeed's CPU Adam keeps fp32 (or 16-bit) states, never 8-bit ones; for 8-bit "
                  "states offload the optimizer only (offload_optimizer: bitsandbytes' paged 8-bit AdamW)");
    }
  }
  if (o.base_4bit && is_block_scaled(o.weight_blocks)) {
    throw error("4-bit base (QLoRA)", "with block-scaled weights (" + block_format_name(o.weight_blocks) + ")",
                "one weight storage: NF4 (qlora) or a block format (lora with --weight-format)");
  }
  if (o.base_4bit && o.adapter_parameters == 0) {
    throw error("4-bit base (QLoRA)", "without adapters",
                "adapter parameters > 0 (a frozen 4-bit base trains nothing)");
  }
  if (o.base_format) {
    const std::string value = format_name(*o.base_format);
    if (*o.base_format != fp32 && *o.base_format != bf16 && *o.base_format != fp16) {
      throw error("frozen base format", value, "fp32, bf16 or fp16");
    }
    if (o.adapter_parameters == 0) {
      throw error("frozen base format", value + " without adapters", "adapter parameters > 0 (LoRA)");
    }
    if (o.base_4bit || is_block_scaled(o.weight_blocks)) {
      throw error("frozen base format", value + (o.base_4bit ? " with a 4-bit base" : " with block-scaled weights"),
                  "one base storage: a format (lora), NF4 (qlora) or a block format (--weight-format)");
    }
  }
  if (o.weight_tensors == 0 || o.weight_tensors > parameters) {
    throw error("weight tensors", std::to_string(o.weight_tensors),
                "1 .. the parameter count (" + std::to_string(parameters) + ")");
  }
}

}  // namespace safeamp
