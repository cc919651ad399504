// The transformer a plan is about: its shape in Korthikanti et al.'s notation (s, h, a, L, v, t), the architecture
// options that change its parameters and activations (grouped-query attention, the MLP width, a gated MLP, untied
// embeddings), the attention kernel, and the counts derived from it (parameters, largest layer, LoRA adapters).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "safeamp/error.hpp"
#include "safeamp/memory/bytes.hpp"
#include "safeamp/quoted_input.hpp"

namespace safeamp {

/// How the attention core is computed.
///  eager: softmax(QK^T) materialized: the s^2 scores, their dropout mask and output are stored (Korthikanti 5as^2b).
///  flash: FlashAttention / PyTorch SDPA's flash and memory-efficient kernels (Dao et al. 2022, "FlashAttention",
///         arXiv:2205.14135, Algorithms 2 and 4): only the output and the softmax statistics (one fp32 logsumexp per
///         row and head, 4as bytes per sample) are stored; backward recomputes S = QK^T block by block.
enum class attention_kernel : std::uint8_t { eager, flash };

[[nodiscard]] constexpr std::string_view to_string(attention_kernel k) noexcept {
  return k == attention_kernel::eager ? "eager" : "flash";
}

[[nodiscard]] inline attention_kernel parse_attention_kernel(std::string_view s) {
  if (s == "eager" || s == "math") return attention_kernel::eager;
  if (s == "flash" || s == "sdpa" || s == "flash-attention") return attention_kernel::flash;
  throw error("attention", quoted_input(s), "eager (softmax(QK^T) stored) or flash (flash/SDPA: no s^2 stored)");
}

/// Shape of a GPT-style transformer: s, h, a, L, v in Korthikanti et al.'s notation, plus tensor-parallel size t and
/// whether sequence parallelism splits the non-tensor-parallel regions too. The architecture options default to
/// GPT-2/GPT-3's: multi-head attention, an MLP of width 4h with GeLU, tied embeddings.
struct transformer_shape {
  std::uint64_t sequence = 0;         // s: tokens per sample
  std::uint64_t hidden = 0;           // h
  std::uint64_t heads = 0;            // a
  std::uint64_t layers = 0;           // L
  std::uint64_t vocabulary = 0;       // v
  std::uint64_t tensor_parallel = 1;  // t
  bool sequence_parallel = false;
  attention_kernel attention = attention_kernel::eager;  // not a shape, but it decides what attention stores
  std::uint64_t kv_heads = 0;    // grouped-query attention (Ainslie et al. 2023): K/V heads; 0 = a (multi-head)
  std::uint64_t ffn_hidden = 0;  // f, the MLP's inner width; 0 = 4h
  bool gated_mlp = false;        // SwiGLU (Shazeer 2020): gate and up h x f, down f x h, instead of h x f, f x h
  bool tied_embeddings = true;   // the output layer shares the input embedding's v x h
  /// Cross-entropy over the logits: 0 materializes all s x v fp32 logits (and their gradient in backward); k > 0
  /// computes them in k chunks of ceil(s/k) tokens per sample, recomputed in backward (chunked/fused cross-entropy:
  /// Wijmans et al. 2024, "Cut Your Losses in Large-Vocabulary Language Models", arXiv:2411.09009; Liger Kernel's
  /// fused linear cross-entropy, whose default is k = ceil(v/h) chunks).
  std::uint64_t cross_entropy_chunks = 0;
  /// Rank r of LoRA adapters on every linear layer (0: none): each adapted matrix stores its r-wide A output for
  /// the gradient of B (see lora_parameters for which matrices are adapted).
  std::uint64_t lora_rank = 0;
  friend constexpr bool operator==(const transformer_shape&, const transformer_shape&) = default;
};

/// Liger Kernel's default number of cross-entropy chunks, ceil(v/h): each chunk's logits are about the size of the
/// hidden states (linkedin/Liger-Kernel, fused_linear_cross_entropy.py: inc_factor = cdiv(V, H)).
[[nodiscard]] constexpr std::uint64_t default_cross_entropy_chunks(const transformer_shape& t) noexcept {
  return t.hidden == 0 ? 1 : (t.vocabulary + t.hidden - 1) / t.hidden;
}

/// K/V heads (a when kv_heads is 0) and the MLP width (4h when ffn_hidden is 0).
[[nodiscard]] constexpr std::uint64_t kv_heads_of(const transformer_shape& t) noexcept {
  return t.kv_heads == 0 ? t.heads : t.kv_heads;
}
[[nodiscard]] constexpr std::uint64_t ffn_of(const transformer_shape& t) noexcept {
  return t.ffn_hidden == 0 ? 4 * t.hidden : t.ffn_hidden;
}

inline void validate(const transformer_shape& t) {
  auto in_range = [](std::string_view field, std::uint64_t v, std::uint64_t hi) {
    if (v == 0 || v > hi) throw error(field, std::to_string(v), "1 .. " + std::to_string(hi));
  };
  in_range("sequence", t.sequence, 10'000'000);
  in_range("hidden", t.hidden, 1'000'000);
  in_range("heads", t.heads, 100'000);
  in_range("layers", t.layers, 100'000);
  in_range("vocabulary", t.vocabulary, 100'000'000);
  in_range("tensor_parallel", t.tensor_parallel, 1'000'000);
  if (t.hidden % t.heads != 0) {
    throw error("heads", std::to_string(t.heads), "a divisor of hidden (" + std::to_string(t.hidden) + ")");
  }
  if (t.kv_heads != 0 && (t.kv_heads > t.heads || t.heads % t.kv_heads != 0)) {
    throw error("kv_heads", std::to_string(t.kv_heads), "a divisor of heads (" + std::to_string(t.heads) + "), or 0");
  }
  if (t.ffn_hidden > 16'000'000) throw error("ffn_hidden", std::to_string(t.ffn_hidden), "1 .. 16000000, or 0 (4h)");
  // Tensor parallelism (Megatron-LM) gives each rank a/t attention heads and f/t of the MLP's columns; K/V heads are
  // split too, or replicated when t exceeds them (each rank then holds one K/V head, as vLLM does for GQA).
  const std::uint64_t tp = t.tensor_parallel, kv = kv_heads_of(t);
  if (t.heads % tp != 0) {
    throw error("tensor_parallel", std::to_string(tp), "a divisor of heads (" + std::to_string(t.heads) + ")");
  }
  if (kv % tp != 0 && tp % kv != 0) {
    throw error("tensor_parallel", std::to_string(tp),
                "a divisor or a multiple of the K/V heads (" + std::to_string(kv) + ")");
  }
  if (ffn_of(t) % tp != 0) {
    throw error("tensor_parallel", std::to_string(tp),
                "a divisor of the MLP width (" + std::to_string(ffn_of(t)) + ")");
  }
  if (t.lora_rank > t.hidden)
    throw error("lora_rank", std::to_string(t.lora_rank), "0 .. hidden (" + std::to_string(t.hidden) + ")");
  if (t.cross_entropy_chunks > t.sequence) {
    throw error("cross_entropy_chunks", std::to_string(t.cross_entropy_chunks),
                "1 .. the sequence (" + std::to_string(t.sequence) + " tokens), or 0 (all logits at once)");
  }
}

/// Weight parameters of one layer: attention Q and O (h x h each), K and V (h x h kv/a each), and the MLP, 2hf or
/// with a gated MLP 3hf. GPT defaults: 4h^2 + 8h^2 = 12h^2.
[[nodiscard]] constexpr std::uint64_t layer_parameters(const transformer_shape& t) {
  const std::uint64_t h = t.hidden;
  const std::uint64_t kv = checked_mul(h, h / t.heads * kv_heads_of(t), "parameters");  // h x (h kv / a)
  const std::uint64_t attention = checked_add(checked_mul(2, checked_mul(h, h, "parameters"), "parameters"),
                                              checked_mul(2, kv, "parameters"), "parameters");
  const std::uint64_t mlp = checked_mul(t.gated_mlp ? 3 : 2, checked_mul(h, ffn_of(t), "parameters"), "parameters");
  return checked_add(attention, mlp, "parameters");
}

/// Parameters of the shape: L layer_parameters + v h (embedding; x 2 when the output layer is untied), biases and
/// norms neglected (Korthikanti Appendix A; Kaplan et al. 2020): 12 L h^2 + v h for GPT.
[[nodiscard]] constexpr std::uint64_t parameter_count(const transformer_shape& t) {
  const std::uint64_t embeddings =
      checked_mul(t.tied_embeddings ? 1 : 2, checked_mul(t.vocabulary, t.hidden, "parameters"), "parameters");
  return checked_add(checked_mul(layer_parameters(t), t.layers, "parameters"), embeddings, "parameters");
}

/// K/V heads one tensor-parallel rank holds: kv / t, or 1 when t > kv (each K/V head replicated on t / kv ranks).
[[nodiscard]] constexpr std::uint64_t kv_heads_per_rank(const transformer_shape& t) noexcept {
  const std::uint64_t kv = kv_heads_of(t);
  return kv > t.tensor_parallel ? kv / t.tensor_parallel : 1;
}

/// Vocabulary rows one tensor-parallel rank holds: ceil(v / t) (Megatron's VocabParallelEmbedding splits the
/// embedding and the output layer by rows, padding v to a multiple of t).
[[nodiscard]] constexpr std::uint64_t vocabulary_per_rank(const transformer_shape& t) noexcept {
  return (t.vocabulary + t.tensor_parallel - 1) / t.tensor_parallel;
}

/// Parameters one tensor-parallel rank holds, in Megatron-LM's layout (Shoeybi et al. 2019, arXiv:1909.08053, §3):
/// Q and O h x h/t each, K and V h x (h/a) x kv_heads_per_rank each, the MLP's matrices 1/t of their columns or rows
/// ((2 or 3) h f / t), the embedding (and an untied output layer) ceil(v/t) x h. The count neglects biases and layer
/// norms, as parameter_count does; Megatron replicates those on every rank (a few h per layer). t = 1: parameter_count.
[[nodiscard]] constexpr std::uint64_t rank_parameters(const transformer_shape& t) {
  const std::uint64_t h = t.hidden, tp = t.tensor_parallel;
  const std::uint64_t qo = checked_mul(2, checked_mul(h, h / tp, "parameters"), "parameters");
  const std::uint64_t kv =
      checked_mul(2, checked_mul(h, h / t.heads * kv_heads_per_rank(t), "parameters"), "parameters");
  const std::uint64_t mlp =
      checked_mul(t.gated_mlp ? 3 : 2, checked_mul(h, ffn_of(t) / tp, "parameters"), "parameters");
  const std::uint64_t layer = checked_add(checked_add(qo, kv, "parameters"), mlp, "parameters");
  const std::uint64_t embeddings =
      checked_mul(t.tied_embeddings ? 1 : 2, checked_mul(vocabulary_per_rank(t), h, "parameters"), "parameters");
  return checked_add(checked_mul(layer, t.layers, "parameters"), embeddings, "parameters");
}

/// A parameter count of the shape's model (its own parameter_count, or one given in its place) as one tensor-parallel
/// rank holds it: count x rank_parameters / parameter_count, rounded up; the count itself when t = 1.
[[nodiscard]] constexpr std::uint64_t tensor_parallel_share(const transformer_shape& t, std::uint64_t parameters) {
  if (t.tensor_parallel == 1) return parameters;
  const std::uint64_t whole = parameter_count(t), rank = rank_parameters(t);
  if (parameters == whole) return rank;
  const double share = static_cast<double>(parameters) * static_cast<double>(rank) / static_cast<double>(whole);
  const auto floor = static_cast<std::uint64_t>(share);
  return static_cast<double>(floor) < share ? floor + 1 : floor;
}

/// Parameters of the largest single layer (module) of the shape on one tensor-parallel rank: the embedding ceil(v/t) h
/// or the MLP's up-projection h x f / t. ZeRO stage 3 gathers one such layer's parameters (and its gradients) at a
/// time.
[[nodiscard]] constexpr std::uint64_t largest_layer_parameters(const transformer_shape& t) {
  const std::uint64_t embedding = checked_mul(vocabulary_per_rank(t), t.hidden, "largest layer");
  const std::uint64_t mlp = checked_mul(ffn_of(t), t.hidden, "largest layer") / t.tensor_parallel;
  return embedding > mlp ? embedding : mlp;
}

/// Linear layers LoRA adapts per transformer layer: GPT's layout has 4 (fused QKV, projection, fc1, fc2); a shape with
/// grouped-query attention or a gated MLP is taken as Llama's, with 7 (q, k, v, o, gate, up, down).
[[nodiscard]] constexpr std::uint64_t adapted_matrices_per_layer(const transformer_shape& t) noexcept {
  return t.kv_heads != 0 || t.gated_mlp ? 7 : 4;
}

/// Weight matrices of the shape, each a tensor with its own scale under per-tensor scaling (NVFP4): the linear layers
/// of every layer (adapted_matrices_per_layer) and the embedding (two when the output layer is untied).
[[nodiscard]] constexpr std::uint64_t weight_matrices(const transformer_shape& t) {
  return checked_add(checked_mul(adapted_matrices_per_layer(t), t.layers, "weight matrices"), t.tied_embeddings ? 1 : 2,
                     "weight matrices");
}

/// LoRA adapter parameters (Hu et al. 2021: W + BA with B of d x r and A of r x k, r (d + k) parameters per matrix)
/// on every linear layer, as QLoRA does. GPT's layout has one fused QKV projection h x 3h (GPT-2's c_attn): 4rh, the
/// output projection 2rh and the MLP 2r(h + f) = 10rh: 16 r h per layer. A shape with grouped-query attention or a
/// gated MLP is taken as Llama's layout, with separate q, k, v, o projections: 2rh + 2r(h + h kv/a) + 2rh, and the
/// MLP's gate, up and down 3r(h + f).
[[nodiscard]] constexpr std::uint64_t lora_parameters(const transformer_shape& t, std::uint64_t rank) {
  const std::uint64_t h = t.hidden, f = ffn_of(t);
  const std::uint64_t kv = h / t.heads * kv_heads_of(t);
  const bool llama = t.kv_heads != 0 || t.gated_mlp;
  const std::uint64_t attention = llama ? 2 * h + 2 * (h + kv) + 2 * h : (h + h + 2 * kv) + 2 * h;
  const std::uint64_t per_rank = attention + (t.gated_mlp ? 3 : 2) * (h + f);
  return checked_mul(checked_mul(per_rank, rank, "LoRA parameters"), t.layers, "LoRA parameters");
}

/// LoRA adapter parameters one tensor-parallel rank holds (lora_parameters' matrices at rank r), in the layout of
/// PEFT's LoraParallelLinear for Megatron's parallel layers (peft/tuners/lora/tp_layer.py): on a column-parallel layer
/// (QKV, or q, k and v; fc1, or gate and up) A (r x d_in) is whole on every rank and B (d_out x r) is split with the
/// layer's output, r (d_in + d_out / t); on a row-parallel layer (the output projection; fc2 or down) A is split with
/// the layer's input and B is whole, r (d_in / t + d_out). K and V keep the rank's K/V heads (kv_heads_per_rank).
/// Megatron Bridge splits A and B of every layer (its LoRAMerge gathers a column-parallel layer's linear_in and a
/// row-parallel layer's linear_out), lora_parameters / t, fewer: this count is the larger of the two layouts.
/// t = 1: lora_parameters.
[[nodiscard]] constexpr std::uint64_t tensor_parallel_lora_parameters(const transformer_shape& t, std::uint64_t rank) {
  const std::uint64_t h = t.hidden, tp = t.tensor_parallel, f = ffn_of(t);
  const std::uint64_t kv = h / t.heads * kv_heads_per_rank(t);  // K (or V) outputs on one rank
  const bool llama = t.kv_heads != 0 || t.gated_mlp;
  const std::uint64_t qkv = llama ? (h + h / tp) + 2 * (h + kv) : h + (h / tp + 2 * kv);  // column-parallel
  const std::uint64_t projection = h / tp + h;                                            // row-parallel
  const std::uint64_t mlp = (t.gated_mlp ? 2 : 1) * (h + f / tp) + (f / tp + h);          // column, then row
  return checked_mul(checked_mul(qkv + projection + mlp, rank, "LoRA parameters"), t.layers, "LoRA parameters");
}

/// An adapter count of the shape's model (lora_parameters at some rank, or a count given in its place) as one
/// tensor-parallel rank holds it: count x tensor_parallel_lora_parameters / lora_parameters (their ratio does not
/// depend on the LoRA rank), exact for a multiple of lora_parameters at rank 1, otherwise rounded up; the count itself
/// when t = 1.
[[nodiscard]] constexpr std::uint64_t tensor_parallel_adapter_share(const transformer_shape& t,
                                                                    std::uint64_t adapters) {
  if (t.tensor_parallel == 1) return adapters;
  const std::uint64_t whole = lora_parameters(t, 1), rank = tensor_parallel_lora_parameters(t, 1);
  if (adapters % whole == 0) return checked_mul(adapters / whole, rank, "LoRA parameters");
  const double share = static_cast<double>(adapters) * static_cast<double>(rank) / static_cast<double>(whole);
  const auto floor = static_cast<std::uint64_t>(share);
  return static_cast<double>(floor) < share ? floor + 1 : floor;
}

}  // namespace safeamp
