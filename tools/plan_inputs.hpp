// Inputs of `safeamp plan`: every setting is a named key that can come from a flag (--key value) or from a JSON
// input file ({"key": value}); flags win. Values stay text until resolved here, so both paths share one parser
// and one set of error messages (safeamp::error naming the key and the accepted range -> exit code 2).
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "safeamp/error.hpp"
#include "safeamp/memory.hpp"
#include "safeamp/policy/precision_policy.hpp"
#include "safeamp/sim/json_input.hpp"

namespace safeamp::tool {

struct plan_key {
  std::string_view name;
  std::string_view help;
};

// clang-format off
inline constexpr plan_key plan_keys[] = {
    {"device", "device name (RTX 4090, RTX 3090, A10, L4, RTX A5000, RTX 4080, RTX 3060, RTX 5090, RTX A6000, L40S, A100 40GB/80GB SXM, H100 SXM/PCIe, H200 SXM/NVL; a100, h100, h200: the SXM rows), 'all' (every card, one row each) or 'custom'"},
    {"capacity", "device memory, e.g. 24GB (10^9), 24GiB (2^30), 2.4e10 (bytes); default: the device's"},
    {"bandwidth", "memory bandwidth per second, e.g. 1008GB (custom devices)"},
    {"peak-fp32", "peak FP32 TFLOPS (custom devices)"},
    {"peak-tf32", "peak TF32 tensor TFLOPS, dense"},
    {"peak-fp16", "peak FP16/BF16 tensor TFLOPS, dense, FP32 accumulate"},
    {"peak-fp8", "peak FP8 tensor TFLOPS, dense, FP32 accumulate (0: none)"},
    {"reserve", "fraction of memory kept free for estimate error, 0 <= r < 1 (default 0.05)"},
    {"context", "CUDA context allowance (default 512MiB)"},
    {"workspace", "cuBLASLt/library workspace allowance (default 32MiB)"},
    {"fragmentation", "allocator fragmentation allowance, fraction of the pool after the reserve (default 0.05)"},
    {"states", "model-state bytes given directly (instead of --params)"},
    {"per-sample", "activation bytes per sample (instead of a transformer shape)"},
    {"params", "parameter count, e.g. 7.5e9 or 7.5B (with a shape: the model's own count, biases and norms included, for the memory; within 1% of the shape's count up to that plus its biases, norms and learned positions, which the FLOPs follow)"},
    {"policy", "precision policy: preset (fp32, tf32, bf16-mixed, fp16-mixed, fp16-pure-master, fp8-hybrid) or policy string; with --window the one policy to plan (--policies for several)"},
    {"weight-format", "block-scaled weight storage: mxfp8 (8.25 bits), mxfp8_e5m2, mxfp6, mxfp6_e3m2 (6.25), mxfp4 (4.25), nvfp4 (4.5 + an fp32 scale per tensor) or none (default: the policy's)"},
    {"gradient-format", "block-scaled gradient storage, as --weight-format (default: the policy's)"},
    {"activation-format", "block-scaled storage of the activations saved for backward, as --weight-format (default: the policy's output format)"},
    {"optimizer", "sgd, sgd-momentum, adamw, adam-8bit (default adamw)"},
    {"optimizer-states", "format of the optimizer's moments: fp32 (default) or bf16"},
    {"optimizer-impl", "foreach (PyTorch's default on CUDA: a temporary copy of the second moments in the step) or fused"},
    {"zero-stage", "ZeRO stage 0..3 (default 0)"},
    {"tuning", "full (default), lora or qlora (frozen base, 4-bit NF4 for qlora; adapters on every linear layer)"},
    {"lora-rank", "LoRA rank r with a shape: 16 r h L adapters (default 16)"},
    {"base-format", "with --tuning lora: the frozen base's storage format, bf16 or fp16 (the usual LoRA setup: the base loaded in 16 bits) or fp32 (default: the policy's parameter format)"},
    {"frozen-params", "full fine-tune: parameters that do not train (requires_grad=False): weights only, no gradients or optimizer states"},
    {"adapter-params", "adapter parameter count instead of --lora-rank (e.g. without a shape)"},
    {"offload", "none (default), optimizer (ZeRO-Offload: fp32 parameters, optimizer states and fp32 gradients in CPU memory; with adam-8bit: paged 8-bit states) or parameters (the optimizer and the weights: ZeRO-3 offload_param)"},
    {"pcie-bandwidth", "host link per direction for --offload, e.g. 25GB (default 32GB: PCIe 4.0 x16)"},
    {"host-bandwidth", "CPU memory bandwidth for the offloaded update, e.g. 80GB (default 50GB: an assumption, 65% of two DDR5-4800 channels' 76.8 GB/s; measure yours)"},
    {"host-memory", "CPU memory for --offload (and offload remedies), e.g. 128GB; the offloaded states x 1.5 must fit (default: MemAvailable of /proc/meminfo)"},
    {"accounting", "pytorch (default) or deepspeed: an fp32 copy of the gradients as well (2 + 18/N bytes/param at ZeRO-2)"},
    {"dp", "data-parallel devices (default 1; with --tp t each is a replica of t devices)"},
    {"devices", "data-parallel ranks N: print each rank's bytes under DDP, ZeRO-1 (distributed optimizer), ZeRO-2 and ZeRO-3 (and plan with N; with --tp t, N x t devices)"},
    {"bucket-view", "with --devices or --dp > 1: DDP's gradient_as_bucket_view, true/false (default false: the buckets copy the gradients)"},
    {"largest-layer", "parameters of the largest layer, for ZeRO-3's gathered layer without a shape (e.g. 32M)"},
    {"seq", "transformer: sequence length s"},
    {"hidden", "transformer: hidden size h"},
    {"heads", "transformer: attention heads a"},
    {"layers", "transformer: layers L"},
    {"vocab", "transformer: vocabulary v"},
    {"tp", "transformer: tensor-parallel size t (default 1)"},
    {"sp", "transformer: sequence parallelism, true/false (default false)"},
    {"kv-heads", "transformer: K/V heads for grouped-query attention (default: heads)"},
    {"ffn-hidden", "transformer: MLP inner width f (default 4h)"},
    {"mlp", "transformer: gelu (default: h x f, f x h) or swiglu (gated: gate and up h x f, down f x h)"},
    {"embeddings", "transformer: tied (default) or untied (a separate v x h output layer)"},
    {"attention", "transformer: attention kernel, eager (default: s^2 scores stored) or flash (flash/SDPA: not stored)"},
    {"cross-entropy", "transformer: full (default: all s x v fp32 logits stored, their gradient in backward) or chunked (fused/chunked loss, recomputed in backward)"},
    {"ce-chunks", "transformer: chunks of the chunked cross-entropy per sequence (default ceil(v/h), Liger Kernel's)"},
    {"recompute", "none, selective, full (default none; planner: all)"},
    {"global-batch", "target global batch (samples per optimizer step)"},
    {"rounding", "accumulation rounding: exact-or-ceil (default: exact when it keeps half the microbatch), exact or ceil"},
    {"window", "completion window with unit, e.g. 8h, 90min, 3600s (runs the planner)"},
    {"samples", "with --window: samples to train in the window"},
    {"tokens", "with --window: tokens to train in the window (samples = tokens / tokens per sample)"},
    {"tokens-per-sample", "tokens per sample without a transformer shape (default 1)"},
    {"efficiency", "with --window: fraction of the roofline bound reached (default 0.4; not with --measured-sps)"},
    {"measured-sps", "with --window: measured samples/s of the whole job (all --dp replicas together, optimizer steps included) running --measured-policy with --measured-recompute as planned (its microbatch and accumulation): calibrates the efficiency so that the plan gives that configuration exactly this rate; above its roofline bound (+10%) it is refused"},
    {"measured-policy", "with --window and --measured-sps or --measured-peak: the policy the measurement ran with, as --policy takes it (default: the one policy planned, --policy or a --policies of one; needed when several are)"},
    {"measured-recompute", "with --window and --measured-sps or --measured-peak: the recompute mode the measurement ran with, none, selective or full (selective only with a shape; default: --recompute, or none when it is not given and the planner tries every mode)"},
    {"measured-peak", "torch.cuda.max_memory_allocated() after one step of the measured configuration (with --window: --measured-policy and --measured-recompute as planned; without it: --policy and --recompute), e.g. 21.3GiB: calibrates the phases (with --window every candidate's)"},
    {"measured-microbatch", "microbatch the --measured-peak was taken at (default 1)"},
    {"policies", "with --window: comma-separated policies to try (default: all presets, or --policy)"},
    {"verified-by", "with --window: a safeamp sim summary.json: policies whose parity verdict is PASS count as verified, FAIL are never chosen, when its model's parameter count is this plan's (within 1%); candidates of another model, or of none recorded, and those run with injected faults are ignored"},
    {"price-per-hour", "with --window: device price per hour, for the cost per sample"},
    {"gemm", "roofline of a GEMM MxNxK, e.g. 8192x8192x8192 (GEMV: 8192x1x8192)"},
    {"format", "roofline compute format (default fp16); output in the same format"},
    {"measured-seconds", "measured time of that GEMM: checked for plausibility"},
    {"task", "train (default) or inference (the same as --inference; for JSON input files)"},
    {"prompt-tokens", "inference: tokens of the prompt, processed at once by the prefill (default: the whole --seq)"},
    {"batch", "inference: concurrent sequences to check (default: report the largest that fits)"},
    {"weights", "inference: weight format, fp32, bf16 (default), fp16, fp8, int8, nf4, or a block format: mxfp8, mxfp8_e5m2, mxfp6, mxfp6_e3m2, mxfp4, nvfp4"},
    {"kv-cache", "inference: KV-cache element format, fp32, bf16, fp16 or fp8 (default: the activations', bf16)"},
    {"logits", "inference: logits of the last position only (default; vLLM, generate()) or all positions"},
};
// clang-format on

using plan_values = std::map<std::string, std::string, std::less<>>;

/// A plan input is one flat object of a few dozen keys: 1 MiB and 4 levels leave a wide margin.
inline constexpr sim::json_input_limits plan_json_limits{.max_bytes = std::uintmax_t{1} << 20, .max_depth = 4};

/// Parses a JSON object of plan keys; numbers and booleans become their text. Unknown keys, duplicate keys,
/// deep nesting, numbers outside double's range and values that are not scalars are safeamp::errors (exit 2);
/// messages quote the input only through bounded summaries. `source` names the input in messages (a path).
inline plan_values parse_plan_json(std::string_view text, std::string_view source) {
  const nlohmann::json j = sim::parse_json_input(text, "input", source, plan_json_limits);
  if (!j.is_object()) {
    throw error("input", "'" + sim::bounded_text(source) + "' (" + sim::summarize_json(j) + ")",
                "a JSON object of plan keys");
  }
  plan_values out;
  for (const auto& [key, value] : j.items()) {
    bool known = false;
    for (const plan_key& k : plan_keys) known = known || k.name == key;
    if (!known) {
      throw error("input key", quoted_input(key, 60), "the flag names of safeamp plan without the leading dashes");
    }
    if (value.is_string()) {
      out[key] = value.get<std::string>();
    } else if (value.is_number() || value.is_boolean()) {
      out[key] = value.dump();
    } else {
      throw error("input key " + key, sim::summarize_json(value), "a string, a number or a boolean");
    }
  }
  return out;
}

/// Reads `path` with the checked reader (a regular file of at most plan_json_limits.max_bytes) and parses it.
inline plan_values read_plan_json(const std::string& path) {
  return parse_plan_json(sim::read_input_file(path, "input", plan_json_limits.max_bytes), path);
}

/// A finite real in [lo, hi] (lo exclusive when `lo_open`).
inline double parse_real(std::string_view key, const std::string& text, double lo, double hi, bool lo_open,
                         std::string_view accepted) {
  std::size_t used = 0;
  double v = 0.0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    throw error(key, quoted_input(text), accepted);
  }
  if (used != text.size() || !std::isfinite(v) || v > hi || (lo_open ? !(v > lo) : !(v >= lo))) {
    throw error(key, quoted_input(text), accepted);
  }
  return v;
}

/// A whole number in [lo, hi], decimal digits only (a leading '-' for a negative one): no sign '+', exponent,
/// fraction, hexadecimal, spaces, or value past the 64-bit range, each of which CLI11's own conversion would take
/// or wrap in silence ("-1" into an unsigned seed gave 2^64 - 1, 2^64 gave the same).
inline std::int64_t parse_whole(std::string_view key, const std::string& text, std::int64_t lo, std::int64_t hi,
                                std::string_view accepted) {
  std::int64_t v = 0;
  const char* const end = text.data() + text.size();
  const auto [stop, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc{} || stop != end || v < lo || v > hi) {
    throw error(key, quoted_input(text), accepted);
  }
  return v;
}

/// A count with an optional suffix K (1e3), M (1e6), B or G (1e9), T (1e12): "7.5B", "3.2e9", "125M".
inline std::uint64_t parse_count(std::string_view key, std::string text, double max, std::string_view accepted) {
  double scale = 1.0;
  if (!text.empty()) {
    switch (text.back()) {
      case 'k':
      case 'K':
        scale = 1e3;
        break;
      case 'm':
      case 'M':
        scale = 1e6;
        break;
      case 'b':
      case 'B':
      case 'g':
      case 'G':
        scale = 1e9;
        break;
      case 't':
      case 'T':
        scale = 1e12;
        break;
      default:
        break;
    }
    if (scale != 1.0) text.pop_back();
  }
  const double v = parse_real(key, text, 0.0, max / scale, true, accepted) * scale;
  if (v < 1.0 || v != std::floor(v)) throw error(key, quoted_input(text), accepted);
  return static_cast<std::uint64_t>(v);
}

/// "8h", "90min", "30m", "3600s" -> seconds, > 0 and at most max_window_seconds (1e9 s); a bad value is quoted whole,
/// its unit included. `accepted` names the range a caller holds it to (plan's --window also has a 1 s minimum).
inline double parse_duration_seconds(
    std::string_view key, const std::string& text,
    std::string_view accepted =
        "a duration > 0 and <= 1e9 s (about 31.7 years) with a unit: h, min (or m), s; e.g. "
        "8h, 90min") {
  std::size_t split = text.find_first_not_of("0123456789.eE+-");
  if (split == std::string::npos || split == 0) throw error(key, quoted_input(text), accepted);
  const std::string unit = text.substr(split);
  double scale = 0.0;
  if (unit == "h" || unit == "hours" || unit == "hour") scale = 3600.0;
  if (unit == "min" || unit == "m") scale = 60.0;
  if (unit == "s" || unit == "sec") scale = 1.0;
  if (scale == 0.0) throw error(key, quoted_input(text), accepted);
  try {
    return parse_real(key, text.substr(0, split), 0.0, max_window_seconds / scale, true, accepted) * scale;
  } catch (const error&) {
    throw error(key, quoted_input(text), accepted);  // the whole text, unit included
  }
}

inline bool parse_bool(std::string_view key, const std::string& text) {
  if (text == "true" || text == "1" || text == "on" || text == "yes") return true;
  if (text == "false" || text == "0" || text == "off" || text == "no") return false;
  throw error(key, quoted_input(text), "true or false");
}

/// Anything the policy grammar accepts (safeamp/policy/policy_string.hpp): a preset name, a bare format ("bf16":
/// parameters, compute and output in bf16) or a policy string such as "params=fp32,compute=bf16,output=bf16".
inline precision_policy parse_policy_arg(std::string_view key, const std::string& text) {
  try {
    return parse_policy(text);
  } catch (const error& e) {
    // The grammar's reason without its own quote of the text (which would print the input again): the field it
    // rejected and what that field accepts.
    const std::string what = e.what();
    const std::size_t at = what.rfind("; accepted: ");
    std::string reason = e.field();
    const std::string lead = e.field() + " is ";
    const std::size_t in = what.find(" in policy '");
    if (what.rfind(lead, 0) == 0 && in != std::string::npos && in > lead.size()) {  // the rejected part, cut
      const std::string part = what.substr(lead.size(), in - lead.size());
      if (part != quoted_input(text)) reason += " " + bounded_input(part, 40);  // not the whole text again
    }
    if (at != std::string::npos) reason += "; " + what.substr(at + 12);
    throw error(
        key, quoted_input(text) + " (" + bounded_input(reason, 160) + ")",
        std::string(policy_preset_names) + ", a format name (bf16, fp16, ...) or a policy string (key=format,...)");
  }
}

}  // namespace safeamp::tool
