// `safeamp plan`: the training-state keys of a request: the optimizer (--optimizer, --optimizer-impl, --accounting,
// --optimizer-states), adapters and frozen weights (--tuning, --lora-rank, --adapter-params, --base-format,
// --frozen-params), offload (--offload) with its host (--pcie-bandwidth, --host-bandwidth, --host-memory).
#pragma once

#include <string>

#include "plan_request_types.hpp"
#include "safeamp/sim/preflight.hpp"

namespace safeamp::tool {

/// --optimizer, --optimizer-impl, --accounting and --optimizer-states into r.states.
inline void resolve_optimizer(const plan_values& v, plan_request& r) {
  const plan_value_reader in{v};
  const auto get = [&in](const char* k) { return in.get(k); };
  if (auto* s = get("optimizer")) r.states.optimizer = parse_optimizer(*s);
  if (auto* s = get("optimizer-impl")) r.states.impl = parse_optimizer_impl(*s);
  if (auto* s = get("accounting")) {
    if (*s == "deepspeed") {
      r.states.fp32_gradient_copy = true;
      if (!get("optimizer-impl")) r.states.impl = optimizer_impl::fused;  // DeepSpeed's FusedAdam updates in place
    } else if (*s != "pytorch") {
      throw error("accounting", quoted_input(*s), "pytorch (default) or deepspeed (fp16 and fp32 gradients)");
    }
  }
  if (auto* s = get("optimizer-states")) {
    r.states.optimizer_state_format = parse_format(*s);
    if (r.states.optimizer_state_format != fp32 && r.states.optimizer_state_format != bf16 &&
        r.states.optimizer_state_format != fp16) {
      throw error("optimizer-states", quoted_input(*s), "fp32, bf16 or fp16");
    }
  }
}

/// Adapters, frozen weights, offload and its host into r.states, r.stage, r.link and r.host_memory_bytes (after the
/// model and the shape are known: LoRA's count comes from the shape).
inline void resolve_tuning_and_offload(const plan_values& v, plan_request& r) {
  const plan_value_reader in{v};
  const auto get = [&in](const char* k) { return in.get(k); };
  const auto count = [&in](const char* k, double max) { return in.count(k, max); };
  if (auto* s = get("tuning")) {
    if (*s != "full" && *s != "lora" && *s != "qlora") throw error("tuning", quoted_input(*s), "full, lora or qlora");
    if (*s != "full") {
      if (!r.parameters) throw error("tuning", quoted_input(*s), "a model (--params or a transformer shape)");
      if (auto c = count("adapter-params", 1e15)) {
        r.states.adapter_parameters = *c;
      } else if (r.shape) {
        r.states.adapter_rank = count("lora-rank", 1e5).value_or(16);
        r.states.adapter_parameters = lora_parameters(*r.shape, r.states.adapter_rank);
        r.shape->lora_rank = r.states.adapter_rank;  // validated below with the activations
      } else {
        throw error("tuning", quoted_input(*s) + " without a shape",
                    "--adapter-params N (or a transformer shape and --lora-rank)");
      }
      r.states.base_4bit = *s == "qlora";
      r.states.fp32_gradient_copy = false;
    }
  }
  if (auto* s = get("base-format")) {
    if (!get("tuning") || *get("tuning") != "lora") {
      throw error("base-format", quoted_input(*s),
                  "only with --tuning lora (QLoRA's base is NF4; a full fine-tune stores the policy's parameters)");
    }
    const format_spec f = parse_format(*s);
    if (f != fp32 && f != bf16 && f != fp16) throw error("base-format", quoted_input(*s), "fp32, bf16 or fp16");
    r.states.base_format = f;
  }
  if (auto c = count("frozen-params", 1e15)) {
    if (r.states.adapter_parameters > 0) {
      throw error("frozen-params", std::to_string(*c),
                  "a full fine-tune (--tuning " + *get("tuning") + " freezes the whole base already)");
    }
    if (!r.parameters) throw error("frozen-params", std::to_string(*c), "a model (--params or a transformer shape)");
    if (*c >= *r.parameters) {
      throw error("frozen-params", std::to_string(*c),
                  "fewer than the model's " + std::to_string(*r.parameters) + " parameters (something must train)");
    }
    r.states.frozen_parameters = *c;
  }
  if (auto* s = get("offload")) {
    if (*s == "optimizer" || *s == "parameters") {
      r.states.offload_optimizer = true;
      r.states.impl = optimizer_impl::fused;  // the CPU update allocates nothing on the device
    } else if (*s != "none") {
      throw error("offload", quoted_input(*s),
                  "none, optimizer or parameters (optimizer and parameters: ZeRO-3 offload_param)");
    }
    if (*s == "parameters") {
      // Refused on purpose (check_state_options): DeepSpeed's offload_param feeds its CPU Adam, fp32 or 16-bit states.
      if (r.states.optimizer == optimizer_kind::adam_8bit) {
        throw error("offload", "'parameters' with --optimizer adam-8bit",
                    "--optimizer adamw (DeepSpeed's CPU Adam, which updates offloaded parameters, keeps fp32 or 16-bit "
                    "states, never 8-bit ones), or --offload optimizer (bitsandbytes' paged 8-bit AdamW)");
      }
      if (r.states.adapter_parameters > 0) {
        throw error("offload", "'parameters' with --tuning " + *get("tuning"),
                    "--offload optimizer (the adapters' optimizer on the CPU) or --tuning full; a frozen base streamed "
                    "from the CPU without an optimizer (accelerate's device_map) is not modelled");
      }
      if (get("zero-stage") && r.stage != zero_stage::parameters) {
        throw error("offload", "'parameters' with ZeRO stage " + *get("zero-stage"),
                    "ZeRO stage 3 (or no --zero-stage)");
      }
      if (!r.shape && r.largest_layer == 0) {
        throw error("offload", "'parameters' without a largest layer", "a transformer shape or --largest-layer N");
      }
      r.stage = zero_stage::parameters;
      r.states.offload_parameters = true;
    }
  }
  if (auto* s = get("pcie-bandwidth"))
    r.link.pcie_bytes_per_second = static_cast<double>(parse_bytes(*s, "pcie-bandwidth"));
  if (auto* s = get("host-bandwidth"))
    r.link.host_bytes_per_second = static_cast<double>(parse_bytes(*s, "host-bandwidth"));
  if (!(r.link.pcie_bytes_per_second > 0.0))
    throw error("pcie-bandwidth", quoted_input(*get("pcie-bandwidth")), "> 0 bytes per second");
  if (!(r.link.host_bytes_per_second > 0.0))
    throw error("host-bandwidth", quoted_input(*get("host-bandwidth")), "> 0 bytes per second");
  if (auto* s = get("host-memory")) {
    r.host_memory_bytes = parse_bytes(*s, "host-memory");
    if (r.host_memory_bytes == 0) throw error("host-memory", quoted_input(*s), "> 0 bytes, e.g. 128GB");
    r.host_memory_given = true;
  } else {
    r.host_memory_bytes = sim::available_memory_bytes();  // 0 when unreadable: offload then never fits
  }
  for (const char* k : {"lora-rank", "adapter-params"}) {
    if (get(k) && r.states.adapter_parameters == 0)
      throw error(k, quoted_input(*get(k)), "only with --tuning lora or qlora");
  }
}

}  // namespace safeamp::tool
