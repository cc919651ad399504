// Shapes of published models the memory tests work their cases on (from each model's config.json).
#pragma once

#include "safeamp/memory/transformer_shape.hpp"

namespace safeamp::test_shapes {

// Llama 2 7B: hidden 4096, 32 heads, 32 layers, vocab 32000, intermediate 11008, SiLU-gated, untied; flash attention.
inline constexpr transformer_shape llama2_7b{.sequence = 4096,
                                             .hidden = 4096,
                                             .heads = 32,
                                             .layers = 32,
                                             .vocabulary = 32000,
                                             .attention = attention_kernel::flash,
                                             .ffn_hidden = 11008,
                                             .gated_mlp = true,
                                             .tied_embeddings = false};

// Llama 3 8B: 8 K/V heads (grouped-query attention), intermediate 14336, vocab 128256; flash attention.
inline constexpr transformer_shape llama3_8b{.sequence = 8192,
                                             .hidden = 4096,
                                             .heads = 32,
                                             .layers = 32,
                                             .vocabulary = 128256,
                                             .attention = attention_kernel::flash,
                                             .kv_heads = 8,
                                             .ffn_hidden = 14336,
                                             .gated_mlp = true,
                                             .tied_embeddings = false};

}  // namespace safeamp::test_shapes
