// `safeamp plan --inference`: generation with a KV cache on one device: the weights, the cache per sequence and the
// transients of the prefill and of a decode step, the largest batch of sequences and the longest context that fit.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "plan_print.hpp"

namespace safeamp::tool {

/// Keys that describe training and mean nothing for inference (refused with --inference rather than ignored).
inline constexpr const char* training_only_keys[] = {"states",
                                                     "per-sample",
                                                     "params",
                                                     "policy",
                                                     "weight-format",
                                                     "gradient-format",
                                                     "activation-format",
                                                     "optimizer",
                                                     "optimizer-states",
                                                     "optimizer-impl",
                                                     "zero-stage",
                                                     "tuning",
                                                     "lora-rank",
                                                     "adapter-params",
                                                     "offload",
                                                     "accounting",
                                                     "dp",
                                                     "devices",
                                                     "largest-layer",
                                                     "recompute",
                                                     "global-batch",
                                                     "rounding",
                                                     "window",
                                                     "samples",
                                                     "tokens",
                                                     "tokens-per-sample",
                                                     "efficiency",
                                                     "measured-sps",
                                                     "measured-policy",
                                                     "measured-recompute",
                                                     "measured-peak",
                                                     "measured-microbatch",
                                                     "policies",
                                                     "verified-by",
                                                     "price-per-hour",
                                                     "gemm",
                                                     "cross-entropy",
                                                     "ce-chunks"};
inline constexpr const char* inference_only_keys[] = {"prompt-tokens", "batch", "weights", "kv-cache", "logits"};

struct inference_plan {
  inference_request request{};
  std::uint64_t generated_tokens = 0;  // context - prompt
  std::uint64_t batch = 0;             // sequences to check (0: report the largest)
  std::string weights_name = "bf16";
  memory_budget budget{};  // the device's pool (capacity, reserve, context, workspace, fragmentation)
};

inline bool inference_requested(const plan_values& v) {
  const auto it = v.find("task");
  if (it == v.end()) return false;
  if (it->second == "inference") return true;
  if (it->second == "train") return false;
  throw error("task", quoted_input(it->second), "train (default) or inference");
}

/// Inference keys without --inference are errors (they would be ignored by the training reports).
inline void refuse_inference_keys(const plan_values& v) {
  for (const char* k : inference_only_keys) {
    if (v.count(k) != 0) throw error(k, quoted_input(v.at(k)), "only with --inference");
  }
}

inline inference_plan resolve_inference(const plan_values& v, const device_spec& device) {
  for (const char* k : training_only_keys) {
    if (v.count(k) != 0)
      throw error(k, quoted_input(v.at(k)) + " with --inference", "a training setting: drop --" + std::string(k));
  }
  if (v.count("seq") == 0) {
    throw error("inference", "without a shape", "a transformer shape (--seq --hidden --heads --layers --vocab)");
  }
  // The budget's overheads through the training request's parser, without the training figures of the shape (a
  // context an inference fits can be one whose training activations exceed the ledger).
  plan_values budget_keys{{"states", "0"}, {"per-sample", "1"}};
  for (const char* k : {"capacity", "reserve", "context", "workspace", "fragmentation"}) {
    if (v.count(k) != 0) budget_keys[k] = v.at(k);
  }
  const plan_request budget_request = resolve_request(budget_keys, device);
  inference_plan p;
  p.budget = budget_request.budget;
  inference_request& r = p.request;
  r.shape = resolve_shape(v).value();
  r.context_tokens = r.shape.sequence;
  auto get = [&](const char* k) -> const std::string* {
    const auto it = v.find(k);
    return it == v.end() ? nullptr : &it->second;
  };
  if (const std::string* s = get("prompt-tokens")) {
    r.prompt_tokens = parse_count("prompt-tokens", *s, 1e7, "1 .. --seq tokens (the prompt, part of the context)");
    if (r.prompt_tokens > r.context_tokens) {
      throw error("prompt-tokens", *s,
                  "at most --seq (" + std::to_string(r.context_tokens) + " tokens: prompt + generated)");
    }
  }
  p.generated_tokens = r.prompt_tokens == 0 ? 0 : r.context_tokens - r.prompt_tokens;
  if (const std::string* s = get("batch")) p.batch = parse_count("batch", *s, 1e7, "1 .. 10000000 sequences");
  if (const std::string* s = get("weights")) {
    p.weights_name = *s;
    if (*s == "fp32")
      r.weight_bytes_per_param = 4.0;
    else if (*s == "bf16" || *s == "fp16")
      r.weight_bytes_per_param = 2.0;
    else if (*s == "fp8" || *s == "int8")
      r.weight_bytes_per_param = 1.0;
    else if (*s == "nf4")
      r.weight_bytes_per_param = nf4_bytes_per_param;
    else if (block_format b{}; detail::parse_block_format_name(*s, b))
      r.weight_bytes_per_param = block_bytes_per_element(b);  // elements and block scales (NVFP4's tensor scales aside)
    else
      throw error("weights", quoted_input(*s),
                  "fp32, bf16, fp16, fp8, int8, nf4 (4-bit with double quantization) or a block format: " +
                      std::string(block_format_names_accepted));
  }
  r.activation_element_bytes = r.weight_bytes_per_param == 4.0 ? 4 : 2;  // quantized weights compute in 16 bits
  r.kv_element_bytes = r.activation_element_bytes;
  if (const std::string* s = get("kv-cache")) {
    if (*s == "fp32")
      r.kv_element_bytes = 4;
    else if (*s == "bf16" || *s == "fp16")
      r.kv_element_bytes = 2;
    else if (*s == "fp8")
      r.kv_element_bytes = 1;
    else
      throw error("kv-cache", quoted_input(*s), "fp32, bf16, fp16 or fp8");
  }
  if (const std::string* s = get("logits")) r.logits = parse_kept_logits(*s);
  validate(r);
  return p;
}

inline nlohmann::json inference_phase_json(const inference_phase& p) {
  return {{"kv_cache_bytes_per_sequence", p.kv_cache_bytes_per_sequence},
          {"transient_bytes_per_sequence", p.transient_bytes_per_sequence},
          {"bytes_per_sequence", p.bytes_per_sequence()}};
}

/// Prints (or writes into `out`) the inference memory; exit 1 when not one sequence (or not the asked batch) fits.
inline int report_inference(const plan_values& v, const device_spec& device, bool capacity_given, nlohmann::json& out,
                            bool json) {
  const inference_plan p = resolve_inference(v, device);
  const std::uint64_t usable = detail::phase_pool_bytes(p.budget);
  const inference_needs n = inference_needs_for(p.request);
  const std::uint64_t largest = max_inference_batch(n, usable);
  const std::uint64_t batch = p.batch > 0 ? p.batch : std::max<std::uint64_t>(largest, 1);
  const bool fits = p.batch > 0 ? batch <= largest : largest >= 1;
  const std::uint64_t longest = max_inference_context(
      p.request, {.generated_tokens = p.generated_tokens, .batch = batch, .available_bytes = usable});
  const bool prefill_limits = n.prefill.bytes_per_sequence() >= n.decode.bytes_per_sequence();
  const std::uint64_t peak = n.peak_bytes(batch);
  const auto headroom = static_cast<std::int64_t>(usable) - static_cast<std::int64_t>(peak);
  const std::uint64_t prompt = p.request.prompt_tokens == 0 ? p.request.context_tokens : p.request.prompt_tokens;
  if (json) {
    out["device"] = device_json(device);
    out["inference"] = {{"parameters", n.parameters},
                        {"tensor_parallel", p.request.shape.tensor_parallel},
                        {"weights", p.weights_name},
                        {"weight_bytes", n.weight_bytes},
                        {"context_tokens", p.request.context_tokens},
                        {"prompt_tokens", prompt},
                        {"generated_tokens", p.generated_tokens},
                        {"kv_cache_element_bytes", p.request.kv_element_bytes},
                        {"kv_cache_bytes_per_token", n.kv_bytes_per_token},
                        {"logits", std::string(to_string(p.request.logits))},
                        {"prefill", inference_phase_json(n.prefill)},
                        {"decode", inference_phase_json(n.decode)},
                        {"usable_bytes", usable},
                        {"max_batch", largest},
                        {"limiting_phase", prefill_limits ? "prefill" : "decode"},
                        {"batch", batch},
                        {"peak_bytes", peak},
                        {"headroom_bytes", headroom},
                        {"max_context_tokens", longest},
                        {"fits", fits}};
    return fits ? exit_ok : exit_check_failed;
  }
  print_device(device, capacity_given);
  const transformer_shape& t = p.request.shape;
  if (t.tensor_parallel > 1) {
    std::printf(
        "PER TENSOR-PARALLEL RANK (t = %llu): every figure below is one rank's: %.4g of the %.4g parameters, %llu of "
        "the %llu K/V heads%s\n",
        static_cast<unsigned long long>(t.tensor_parallel), static_cast<double>(rank_parameters(t)),
        static_cast<double>(n.parameters), static_cast<unsigned long long>(kv_heads_per_rank(t)),
        static_cast<unsigned long long>(kv_heads_of(t)),
        t.tensor_parallel > kv_heads_of(t) ? " (replicated: t exceeds the K/V heads)" : "");
  }
  std::printf("Inference with a KV cache: %.4g parameters, weights in %s: %s%s\n", static_cast<double>(n.parameters),
              p.weights_name.c_str(), format_bytes(n.weight_bytes, byte_unit::gb, 3).c_str(),
              t.tensor_parallel > 1 ? " per rank" : "");
  std::printf(
      "  KV cache per token%s: 2 x %llu layers x %llu K/V heads x %llu head dim x %d bytes = %llu bytes; context "
      "%llu tokens (prompt %llu, generated %llu)\n",
      t.tensor_parallel > 1 ? " per rank" : "", static_cast<unsigned long long>(t.layers),
      static_cast<unsigned long long>(kv_heads_per_rank(t)), static_cast<unsigned long long>(t.hidden / t.heads),
      p.request.kv_element_bytes, static_cast<unsigned long long>(n.kv_bytes_per_token),
      static_cast<unsigned long long>(p.request.context_tokens), static_cast<unsigned long long>(prompt),
      static_cast<unsigned long long>(p.generated_tokens));
  print_pool(p.budget);
  std::printf("Per sequence (attention %s, logits of %s position%s)\n  %-42s %12s %12s %12s\n",
              std::string(to_string(t.attention)).c_str(), std::string(to_string(p.request.logits)).c_str(),
              p.request.logits == kept_logits::last ? "" : "s", "", "KV cache GB", "transient GB", "total GB");
  for (const inference_phase* ph : {&n.prefill, &n.decode}) {
    std::printf("  %-42s %12.4f %12.4f %12.4f\n", std::string(ph->name).c_str(),
                in_unit(ph->kv_cache_bytes_per_sequence, byte_unit::gb),
                in_unit(ph->transient_bytes_per_sequence, byte_unit::gb),
                in_unit(ph->bytes_per_sequence(), byte_unit::gb));
  }
  if (largest == 0) {
    std::printf("Does not fit: the weights and one sequence need %s against %s usable (short by %s)\n",
                format_bytes(n.peak_bytes(1), byte_unit::gb, 3).c_str(), format_bytes(usable, byte_unit::gb, 3).c_str(),
                format_bytes(n.peak_bytes(1) - usable, byte_unit::gb, 3).c_str());
  } else {
    std::printf("Largest batch: %llu sequences of %llu tokens, set by the %s\n",
                static_cast<unsigned long long>(largest), static_cast<unsigned long long>(p.request.context_tokens),
                prefill_limits ? "prefill" : "decode");
  }
  std::printf("At batch %llu: peak %s, %s %s\n", static_cast<unsigned long long>(batch),
              format_bytes(peak, byte_unit::gb, 3).c_str(), headroom >= 0 ? "headroom" : "OVER by",
              format_bytes(static_cast<std::uint64_t>(headroom >= 0 ? headroom : -headroom), byte_unit::gb, 3).c_str());
  std::printf("Longest context at batch %llu (generating %llu tokens): %llu tokens\n",
              static_cast<unsigned long long>(batch), static_cast<unsigned long long>(p.generated_tokens),
              static_cast<unsigned long long>(longest));
  return fits ? exit_ok : exit_check_failed;
}

}  // namespace safeamp::tool
