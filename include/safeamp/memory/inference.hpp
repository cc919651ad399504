// Inference memory of a transformer with a KV cache: the weights, the cache of every sequence (2 L kv (h/a) bytes per
// token and layer pair, K and V), and the transient activations of the prefill pass and of one decode step; the
// largest batch of concurrent sequences and the longest context that fit.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "safeamp/error.hpp"
#include "safeamp/memory/bytes.hpp"
#include "safeamp/memory/transformer_shape.hpp"
#include "safeamp/quoted_input.hpp"

namespace safeamp {

/// Which positions the language-model head computes logits for during generation.
///  last: only the last position (vLLM; Hugging Face generate() with `logits_to_keep=1`): 4v bytes per sequence.
///  all:  every position of the prefill (a plain `model(input_ids)` forward): 4 s v bytes per sequence, fp32.
enum class kept_logits : std::uint8_t { last, all };

[[nodiscard]] constexpr std::string_view to_string(kept_logits k) noexcept {
  return k == kept_logits::last ? "last" : "all";
}

[[nodiscard]] inline kept_logits parse_kept_logits(std::string_view s) {
  if (s == "last") return kept_logits::last;
  if (s == "all") return kept_logits::all;
  throw error("logits", quoted_input(s), "last (logits of the last position only) or all (every position)");
}

/// An inference workload on one device (tensor parallel size from the shape). `context_tokens` is the length every
/// sequence reaches (prompt + generated tokens: what the cache holds at the end), `prompt_tokens` the part processed
/// at once by the prefill (0: the whole context, the worst case for the prefill's transients).
struct inference_request {
  transformer_shape shape{};
  std::uint64_t context_tokens = 0;
  std::uint64_t prompt_tokens = 0;
  double weight_bytes_per_param = 2.0;  // bf16/fp16 2, fp8/int8 1, NF4 nf4_bytes_per_param, fp32 4
  int kv_element_bytes = 2;             // the cache's element: 2 for bf16/fp16, 1 for an fp8 cache
  int activation_element_bytes = 2;     // the compute format of the activations
  kept_logits logits = kept_logits::last;
};

/// KV-cache bytes per token of one sequence on one tensor-parallel rank: K and V for every layer, the rank's K/V heads
/// of h/a each: 2 L kv_heads_per_rank (h/a) e, where a rank holds kv / t heads, or one when t > kv (replicated).
/// Llama 2 7B in fp16 (L = 32, kv = a = 32, h/a = 128): 524,288 bytes per token,
/// 2 GiB for 4096 tokens (NVIDIA, "Mastering LLM Techniques: Inference Optimization", 2023: "~2 GB").
[[nodiscard]] inline std::uint64_t kv_cache_bytes_per_token(const transformer_shape& t, int element_bytes) {
  validate(t);
  if (element_bytes < 1 || element_bytes > 4)
    throw error("kv-cache element bytes", std::to_string(element_bytes), "1 .. 4");
  const std::uint64_t head_dim = t.hidden / t.heads;
  const std::uint64_t per_layer =
      checked_mul(checked_mul(2, kv_heads_per_rank(t), "KV cache"),
                  checked_mul(head_dim, static_cast<std::uint64_t>(element_bytes), "KV cache"), "KV cache");
  return checked_mul(per_layer, t.layers, "KV cache");
}

/// The tokens one forward computes: `query_tokens` new tokens attending to `key_tokens` (prefill: both the prompt; a
/// decode step: 1 and the context). Named, because two counts in a row would compile swapped.
struct token_span {
  std::uint64_t query_tokens = 0;
  std::uint64_t key_tokens = 0;
};

/// Transient activations of one forward over a token_span for one sequence, without autograd (each intermediate is
/// freed when its last user has run). An upper bound of the working set of the largest block, with e the activation
/// element bytes:
///   residual stream                   e q h   (kept across the block for the residual add)
///   + max( attention: normed input and Q, e q h + e q h, plus the scores and their softmax 2 e a q k (eager), or the
///          output and the fp32 logsumexp e q h + 4 a q (flash);
///          MLP: normed input e q h + the wide tensors 2 e q f (GeLU: fc1 output and its activation) or 3 e q f
///          (SwiGLU: gate, up and SiLU(gate)) )
///   + logits in fp32: 4 v (last position) or 4 q v (all positions)
/// all / t (K and V are in the cache, counted there). Tensor parallelism splits heads and f; the residual stream and
/// the logits are split too in this bound (sequence-parallel layouts), so t = 1 is the case to trust.
[[nodiscard]] inline std::uint64_t inference_transient_bytes(const inference_request& r, const token_span& span) {
  const transformer_shape& t = r.shape;
  const double e = r.activation_element_bytes;
  const double q = static_cast<double>(span.query_tokens), k = static_cast<double>(span.key_tokens);
  const double h = static_cast<double>(t.hidden), a = static_cast<double>(t.heads), f = static_cast<double>(ffn_of(t));
  const double v = static_cast<double>(t.vocabulary), tp = static_cast<double>(t.tensor_parallel);
  const double residual = e * q * h;
  const double attention =
      t.attention == attention_kernel::eager ? 2.0 * e * q * h + 2.0 * e * a * q * k : 3.0 * e * q * h + 4.0 * a * q;
  const double mlp = e * q * h + (t.gated_mlp ? 3.0 : 2.0) * e * q * f;
  const double logits = 4.0 * v * (r.logits == kept_logits::last ? 1.0 : q);
  return bytes_from_real((residual + std::max(attention, mlp) + logits) / tp, "inference activations");
}

/// One phase of generation as a line in the batch (concurrent sequences): fixed (the weights) + b x per sequence.
struct inference_phase {
  std::string_view name{};
  std::uint64_t kv_cache_bytes_per_sequence = 0;  // the cache held during the phase
  std::uint64_t transient_bytes_per_sequence = 0;
  [[nodiscard]] std::uint64_t bytes_per_sequence() const {
    return checked_add(kv_cache_bytes_per_sequence, transient_bytes_per_sequence, "inference bytes per sequence");
  }
};

/// The memory of generation: the weights and two phases, the prefill (the prompt's cache written, its activations at
/// their largest) and the last decode step (the whole context cached, one token's activations).
struct inference_needs {
  std::uint64_t parameters = 0;
  std::uint64_t weight_bytes = 0;
  std::uint64_t kv_bytes_per_token = 0;
  inference_phase prefill{};
  inference_phase decode{};
  [[nodiscard]] std::uint64_t peak_bytes(std::uint64_t batch) const {
    const std::uint64_t per = std::max(prefill.bytes_per_sequence(), decode.bytes_per_sequence());
    return checked_add(weight_bytes, checked_mul(batch, per, "inference peak"), "inference peak");
  }
};

inline void validate(const inference_request& r) {
  validate(r.shape);
  if (r.context_tokens == 0 || r.context_tokens > 10'000'000) {
    throw error("context tokens", std::to_string(r.context_tokens), "1 .. 10000000 (prompt + generated tokens)");
  }
  if (r.prompt_tokens > r.context_tokens) {
    throw error("prompt tokens", std::to_string(r.prompt_tokens),
                "at most the context of " + std::to_string(r.context_tokens) + " tokens (0: the whole context)");
  }
  if (!(r.weight_bytes_per_param > 0.0) || r.weight_bytes_per_param > 8.0) {
    throw error("weight bytes per parameter", std::to_string(r.weight_bytes_per_param), "0 < bytes <= 8");
  }
  if (r.activation_element_bytes < 1 || r.activation_element_bytes > 4) {
    throw error("activation element bytes", std::to_string(r.activation_element_bytes), "1 .. 4");
  }
}

/// The needs of `r` on one tensor-parallel rank: weights = rank_parameters(shape) x bytes per parameter
/// (parameter_count when t = 1); prefill: the prompt's cache and the transients of the prompt attending to itself;
/// decode: the whole context's cache and one token attending to it.
[[nodiscard]] inline inference_needs inference_needs_for(const inference_request& r) {
  validate(r);
  const std::uint64_t prompt = r.prompt_tokens == 0 ? r.context_tokens : r.prompt_tokens;
  inference_needs n;
  n.parameters = parameter_count(r.shape);
  n.weight_bytes =
      bytes_from_real(static_cast<double>(rank_parameters(r.shape)) * r.weight_bytes_per_param, "weight bytes");
  n.kv_bytes_per_token = kv_cache_bytes_per_token(r.shape, r.kv_element_bytes);
  n.prefill = {"prefill", checked_mul(n.kv_bytes_per_token, prompt, "KV cache"),
               inference_transient_bytes(r, {.query_tokens = prompt, .key_tokens = prompt})};
  n.decode = {"decode", checked_mul(n.kv_bytes_per_token, r.context_tokens, "KV cache"),
              inference_transient_bytes(r, {.query_tokens = 1, .key_tokens = r.context_tokens})};
  return n;
}

/// Largest batch of sequences both phases fit in `available_bytes` (the pool after context, reserve, fragmentation and
/// workspace): floor((available - weights) / max(prefill, decode) per sequence); 0 when not even one fits.
[[nodiscard]] inline std::uint64_t max_inference_batch(const inference_needs& n, std::uint64_t available_bytes) {
  if (n.weight_bytes >= available_bytes) return 0;
  const std::uint64_t per = std::max(n.prefill.bytes_per_sequence(), n.decode.bytes_per_sequence());
  return per == 0 ? 0 : (available_bytes - n.weight_bytes) / per;
}

/// What max_inference_context searches within, by name.
struct context_search {
  std::uint64_t generated_tokens = 0;  // fixed; the prompt is the rest of the context
  std::uint64_t batch = 1;             // concurrent sequences
  std::uint64_t available_bytes = 0;   // the pool after context, reserve, fragmentation and workspace
};

/// Longest context (prompt + generated tokens, the prompt growing with it: prompt = context - generated) that the
/// batch fits in the available bytes; 0 when even `generated + 1` tokens do not fit. Binary search: the need grows
/// with the context.
[[nodiscard]] inline std::uint64_t max_inference_context(inference_request r, const context_search& search) {
  const std::uint64_t generated_tokens = search.generated_tokens, batch = search.batch;
  const std::uint64_t available_bytes = search.available_bytes;
  if (batch == 0) throw error("batch", "0", ">= 1 sequence");
  const auto fits = [&](std::uint64_t context) {
    r.context_tokens = context;
    r.prompt_tokens = context - generated_tokens;
    try {
      return inference_needs_for(r).peak_bytes(batch) <= available_bytes;
    } catch (const error&) {  // a need beyond the ledger's 2^62 bytes does not fit either
      return false;
    }
  };
  if (!fits(generated_tokens + 1)) return 0;
  std::uint64_t lo = generated_tokens + 1, hi = 10'000'000;  // lo fits; hi is the cap, tried next
  if (fits(hi)) return hi;
  while (hi - lo > 1) {
    const std::uint64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

}  // namespace safeamp
