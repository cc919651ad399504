// Activation memory of a transformer (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
// Transformer Models", arXiv:2205.05198, section 4 and Table 2) with no, selective or full recomputation, and a
// per-block ledger of how activations accumulate through the forward pass and where the peak is reached.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "safeamp/error.hpp"
#include "safeamp/memory/bytes.hpp"
#include "safeamp/memory/transformer_shape.hpp"
#include "safeamp/quoted_input.hpp"

namespace safeamp {

/// What the backward pass recomputes instead of storing (Korthikanti section 5).
///  none:      everything is stored.
///  selective: the attention core (QK^T, softmax, softmax dropout, attention over V) is recomputed.
///  full:      only each layer's input is stored; the whole layer forward is recomputed in backward.
enum class recompute : std::uint8_t { none, selective, full };

[[nodiscard]] constexpr std::string_view to_string(recompute r) noexcept {
  return r == recompute::none ? "none" : r == recompute::selective ? "selective" : "full";
}

[[nodiscard]] inline recompute parse_recompute(std::string_view s) {
  if (s == "none" || s == "off") return recompute::none;
  if (s == "selective") return recompute::selective;
  if (s == "full") return recompute::full;
  throw error("recompute", quoted_input(s), "none, selective, full");
}

/// Bytes of activations one transformer layer stores for a microbatch of `microbatch` samples, with activations
/// of `element_bytes` bytes (2 for fp16/bf16; fractional for block-scaled storage, block_bytes_per_element: MXFP8
/// 1.03125) and 1-byte dropout masks. Korthikanti section 4.1, generalized to
/// element size e (the paper's e = 2 gives its coefficients):
///   attention 11sbh + 5as^2b  = (5e+1) sbh + (2e+1) a s^2 b
///   MLP       19sbh           = (9e+1) sbh
///   norms      4sbh           = 2e sbh
/// Table 2: without sequence parallelism (4e+2) sbh (= 10 sbh) stays whole and 12e sbh (= 24 sbh) is split by t
/// (generalized: K and V at kv/a of Q's size with grouped-query attention, as kernels with native GQA store them; the
/// MLP's wide tensors at f/h, four of them with a gated MLP, as an unfused SwiGLU's autograd saves them);
/// with it all of (16e+2) sbh (= 34 sbh) is split by t. The attention core (2e+1) as^2 b / t is dropped by selective
/// recomputation. Full recomputation keeps only the layer input, e sbh (Table 2: 2sbh). LoRA adapters of rank r add
/// their r-wide intermediates, e r sb per adapted matrix (4 per layer on GPT's layout, 7 on Llama's). With flash
/// attention the core is never stored; its softmax statistics, 4as b / t bytes (fp32 logsumexp), are instead.
[[nodiscard]] inline std::uint64_t activation_bytes_per_layer(const transformer_shape& t, std::uint64_t microbatch,
                                                              recompute mode, double element_bytes = 2.0) {
  validate(t);
  if (microbatch == 0) throw error("microbatch", "0", ">= 1");
  if (!(element_bytes >= 0.5 && element_bytes <= 4.0))
    throw error("activation element bytes", std::to_string(element_bytes), "0.5 .. 4 (4-bit block formats: 0.53)");
  const double s = static_cast<double>(t.sequence), b = static_cast<double>(microbatch);
  const double h = static_cast<double>(t.hidden), a = static_cast<double>(t.heads);
  const double tp = static_cast<double>(t.tensor_parallel), e = element_bytes;
  const double sbh = s * b * h;
  if (mode == recompute::full) return bytes_from_real(e * sbh, "activation bytes per layer");
  // Split by t: Q, K, V (e (1 + 2 kv/a) sbh), the projection input (e sbh) and the MLP's wide tensors, 2e f/h sbh
  // (fc1 output, GeLU output) or 4e f/h sbh gated (gate, up, SiLU(gate), their product); 12e sbh for GPT.
  const double kv_ratio = static_cast<double>(kv_heads_of(t)) / a;
  const double ffn_ratio = static_cast<double>(ffn_of(t)) / h;
  const double split = e * (1.0 + 2.0 * kv_ratio) + e + (t.gated_mlp ? 4.0 : 2.0) * e * ffn_ratio;
  const double whole = 4.0 * e + 2.0;  // two norm inputs, the QKV and fc1 inputs, two dropout masks
  const double linear = t.sequence_parallel ? (whole + split) * sbh / tp : whole * sbh + split * sbh / tp;
  const bool flash = t.attention == attention_kernel::flash;
  // LoRA: each adapted matrix y = W x + B (A x) stores x (already counted above: the frozen W's input is the same
  // tensor) and the r-wide A x for B's gradient: e r sb per adapted matrix (adapters are not split by t).
  const double adapters =
      e * static_cast<double>(t.lora_rank) * s * b * static_cast<double>(adapted_matrices_per_layer(t));
  const double core = mode == recompute::none && !flash ? (2.0 * e + 1.0) * a * s * s * b / tp : 0.0;
  const double statistics = flash ? 4.0 * a * s * b / tp : 0.0;  // fp32 logsumexp per row and head
  return bytes_from_real(linear + core + statistics + adapters, "activation bytes per layer");
}

/// One line of the forward-pass ledger.
struct activation_entry {
  std::string block{};                 // "embedding", "layer 1", ..., "logits (fp32)", "backward: ..."
  std::uint64_t bytes = 0;             // added by this block (transient entries are released after the block)
  std::uint64_t cumulative_bytes = 0;  // activations held after/during this block
  bool transient = false;              // only alive during this block (backward recomputation, logits gradient)
};

struct activation_ledger {
  std::vector<activation_entry> entries{};
  std::uint64_t stored_bytes = 0;  // held at the end of the forward pass
  std::uint64_t peak_bytes = 0;    // largest cumulative figure (including transients)
  std::string peak_block{};        // where the peak is reached
};

/// How activations accumulate through one forward + backward for `microbatch` samples. Besides the layers it counts
/// Korthikanti section 4.3's extra terms (p = 1): the embedding dropout mask sbh, the final norm and output-layer
/// inputs 2e sbh, the fp32 logits 4sbv (all / t) — large for small models with big vocabularies; then the
/// backward pass's transients: the fp32 logits gradient 4sbv / t, and the recomputation of one layer (selective:
/// its attention core; full: the whole layer's stored activations). With a chunked cross-entropy (k chunks of
/// c = ceil(s/k) tokens per sample) no logits are stored: the forward holds one chunk's fp32 logits 4cbv / t while it
/// reduces them to the loss, and the backward one chunk's recomputed logits and their gradient, 8cbv / t.
[[nodiscard]] inline activation_ledger activation_ledger_for(const transformer_shape& t, std::uint64_t microbatch,
                                                             recompute mode, double element_bytes = 2.0) {
  const std::uint64_t layer = activation_bytes_per_layer(t, microbatch, mode, element_bytes);
  const double s = static_cast<double>(t.sequence), b = static_cast<double>(microbatch);
  const double h = static_cast<double>(t.hidden), v = static_cast<double>(t.vocabulary);
  const double tp = static_cast<double>(t.tensor_parallel);
  activation_ledger out;
  std::uint64_t held = 0;
  auto add = [&](std::string block, std::uint64_t bytes, bool transient) {
    const std::uint64_t during = checked_add(held, bytes, "activation ledger");
    out.entries.push_back({std::move(block), bytes, during, transient});
    if (during > out.peak_bytes || out.peak_block.empty()) {
      out.peak_bytes = during;
      out.peak_block = out.entries.back().block;
    }
    if (!transient) held = during;
  };
  add("embedding (dropout mask)", bytes_from_real(s * b * h / tp, "embedding activations"), false);
  for (std::uint64_t i = 1; i <= t.layers; ++i) add("layer " + std::to_string(i), layer, false);
  add("final norm + output-layer input", bytes_from_real(2.0 * element_bytes * s * b * h / tp, "head activations"),
      false);
  if (t.cross_entropy_chunks == 0) {
    add("logits (fp32)", bytes_from_real(4.0 * s * b * v / tp, "logit bytes"), false);
    out.stored_bytes = held;
    add("backward: logits gradient (fp32)", bytes_from_real(4.0 * s * b * v / tp, "logit gradient bytes"), true);
  } else {
    const double chunk = std::ceil(s / static_cast<double>(t.cross_entropy_chunks));  // tokens per sample and chunk
    add("logits of one loss chunk (fp32)", bytes_from_real(4.0 * chunk * b * v / tp, "logit chunk bytes"), true);
    out.stored_bytes = held;
    add("backward: one chunk's logits + gradient (fp32)",
        bytes_from_real(8.0 * chunk * b * v / tp, "logit chunk bytes"), true);
  }
  if (mode != recompute::none) {
    const std::uint64_t full_layer = activation_bytes_per_layer(t, microbatch, recompute::none, element_bytes);
    const std::uint64_t recomputed = checked_sub(full_layer, layer, "recomputed activations");
    if (recomputed > 0) {  // with flash attention selective recomputation has nothing left to recompute
      add(mode == recompute::selective ? "backward: recompute one attention core" : "backward: recompute one layer",
          recomputed, true);
    }
  }
  return out;
}

/// Peak activation bytes per sample (the ledger is linear in the microbatch, so this times b is the peak at b).
[[nodiscard]] inline std::uint64_t activation_bytes_per_sample(const transformer_shape& t, recompute mode,
                                                               double element_bytes = 2.0) {
  return activation_ledger_for(t, 1, mode, element_bytes).peak_bytes;
}

}  // namespace safeamp
