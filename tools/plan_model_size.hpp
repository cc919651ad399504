// `safeamp plan`: the planned model's parameter count as a range (a shape's count leaves out biases, norms and learned
// positions), and the one rule for "the same model" that --params beside a shape and --verified-by's evidence meet.
#pragma once

#include <cstdint>
#include <string>

#include "safeamp/memory.hpp"

namespace safeamp::tool {

/// Parameters a shape's parameter_count leaves out, at most (GPT-2's layout, which has all of them): per layer the
/// biases of Q (h), of K and V (2 h kv / a), of the output projection (h), of the MLP's first layer (f; gated: 2f) and
/// of its second (h), and two layer norms' gains and biases (4h); a final norm (2h); learned positions for the planned
/// sequence (s h); an untied output layer's bias (v). GPT-2 small (s = 1024, h = 768, a = 12, L = 12, f = 4h):
/// 12 x 13 x 768 + 2 x 768 + 1024 x 768 = 907,776, so the shape's 123,532,032 become Hugging Face's 124,439,808.
[[nodiscard]] inline std::uint64_t neglected_parameters(const transformer_shape& t) {
  const std::uint64_t h = t.hidden;
  const std::uint64_t kv_biases = checked_mul(2, h / t.heads * kv_heads_of(t), "parameters");
  const std::uint64_t mlp_biases =
      checked_add(checked_mul(t.gated_mlp ? 2 : 1, ffn_of(t), "parameters"), h, "parameters");
  const std::uint64_t layer =
      checked_add(checked_add(checked_mul(2, h, "parameters"), kv_biases, "parameters"),
                  checked_add(mlp_biases, checked_mul(4, h, "parameters"), "parameters"), "parameters");
  const std::uint64_t positions = checked_mul(t.sequence, h, "parameters");
  const std::uint64_t outside = checked_add(checked_add(checked_mul(2, h, "parameters"), positions, "parameters"),
                                            t.tied_embeddings ? 0 : t.vocabulary, "parameters");
  return checked_add(checked_mul(layer, t.layers, "parameters"), outside, "parameters");
}

/// The planned model's parameter count: [low, high] (one count when it was given), and how it is known.
struct parameter_range {
  std::uint64_t low = 0;
  std::uint64_t high = 0;
  std::string basis{};  // for messages: "--params 125000000", "the shape's 123532032 parameters (124439808 with ...)"
};

/// 1 part in 100 around the range: a judgement, not a derived bound. It takes a count rounded to three significant
/// figures (at most 0.5% off) and a position table somewhat longer than the planned sequence, and it tells GPT-2
/// small's shape from a 7B count, or from the simulator's 676-parameter MLP.
inline constexpr std::uint64_t same_model_parts = 100;

[[nodiscard]] constexpr std::uint64_t lowest_agreeing(const parameter_range& r) noexcept {
  return r.low - r.low / same_model_parts;
}
[[nodiscard]] inline std::uint64_t highest_agreeing(const parameter_range& r) {
  return checked_add(r.high, r.high / same_model_parts, "parameters");
}

/// A parameter count is of the planned model when it lies within 1% of the range.
[[nodiscard]] inline bool agrees(const parameter_range& r, std::uint64_t parameters) {
  return parameters >= lowest_agreeing(r) && parameters <= highest_agreeing(r);
}

/// "122296712 .. 125684206": the counts that agree with the range.
[[nodiscard]] inline std::string agreeing_text(const parameter_range& r) {
  return std::to_string(lowest_agreeing(r)) + " .. " + std::to_string(highest_agreeing(r));
}

/// A shape's model: its parameter_count up to that plus what the count leaves out.
[[nodiscard]] inline parameter_range shape_parameter_range(const transformer_shape& t) {
  const std::uint64_t count = parameter_count(t);
  const std::uint64_t high = checked_add(count, neglected_parameters(t), "parameters");
  return {.low = count,
          .high = high,
          .basis = "the shape's " + std::to_string(count) + " parameters (up to " + std::to_string(high) +
                   " with biases, norms and learned positions)"};
}

/// A model given by its count (--params): that count.
[[nodiscard]] inline parameter_range given_parameter_range(std::uint64_t parameters) {
  return {.low = parameters, .high = parameters, .basis = "--params " + std::to_string(parameters)};
}

}  // namespace safeamp::tool
