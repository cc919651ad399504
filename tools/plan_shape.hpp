// `safeamp plan`: the transformer shape from its keys (--seq --hidden --heads --layers --vocab and the architecture,
// attention and loss options), every bad or missing value reported by key.
#pragma once

#include <optional>
#include <string>

#include "plan_inputs.hpp"

namespace safeamp::tool {

/// The shape, when any of its five keys is given (then all five are needed); options without a shape are errors.
inline std::optional<transformer_shape> resolve_shape(const plan_values& v) {
  auto get = [&](const char* k) -> const std::string* {
    auto it = v.find(k);
    return it == v.end() ? nullptr : &it->second;
  };
  auto count = [&](const char* k, double max) -> std::optional<std::uint64_t> {
    if (auto* s = get(k)) {
      return parse_count(k, *s, max, "a whole number 1 .. " + std::to_string(static_cast<long long>(max)));
    }
    return std::nullopt;
  };
  for (const char* k :
       {"attention", "kv-heads", "ffn-hidden", "mlp", "embeddings", "cross-entropy", "ce-chunks", "tp", "sp"}) {
    if (get(k) && !get("seq"))
      throw error(k, quoted_input(*get(k)), "a transformer shape (--seq --hidden --heads --layers --vocab)");
  }
  const char* shape_keys[] = {"seq", "hidden", "heads", "layers", "vocab"};
  int shape_given = 0;
  for (const char* k : shape_keys) shape_given += get(k) ? 1 : 0;
  if (shape_given > 0) {
    if (shape_given < 5)
      throw error("transformer shape", std::to_string(shape_given) + " of 5 keys",
                  "all of --seq --hidden --heads --layers --vocab");
    transformer_shape t;
    t.sequence = *count("seq", 1e7);
    t.hidden = *count("hidden", 1e6);
    t.heads = *count("heads", 1e5);
    t.layers = *count("layers", 1e5);
    t.vocabulary = *count("vocab", 1e8);
    if (auto c = count("tp", 1e6)) t.tensor_parallel = *c;
    if (auto* s = get("sp")) t.sequence_parallel = parse_bool("sp", *s);
    if (auto* s = get("attention")) t.attention = parse_attention_kernel(*s);
    if (auto c = count("kv-heads", 1e5)) t.kv_heads = *c;
    if (auto c = count("ffn-hidden", 16e6)) t.ffn_hidden = *c;
    if (auto* s = get("mlp")) {
      if (*s != "gelu" && *s != "swiglu") throw error("mlp", quoted_input(*s), "gelu or swiglu");
      t.gated_mlp = *s == "swiglu";
    }
    if (auto* s = get("embeddings")) {
      if (*s != "tied" && *s != "untied") throw error("embeddings", quoted_input(*s), "tied or untied");
      t.tied_embeddings = *s == "tied";
    }
    if (auto* s = get("cross-entropy")) {
      if (*s != "full" && *s != "chunked") throw error("cross-entropy", quoted_input(*s), "full or chunked");
      if (*s == "chunked") t.cross_entropy_chunks = default_cross_entropy_chunks(t);
    }
    if (auto c = count("ce-chunks", 1e7)) {
      if (t.cross_entropy_chunks == 0)
        throw error("ce-chunks", std::to_string(*c), "only with --cross-entropy chunked");
      t.cross_entropy_chunks = *c;
    }
    validate(t);
    return t;
  }
  return std::nullopt;
}

}  // namespace safeamp::tool
