// The shipped models, with explicit forward and backward under a precision policy:
//  - mlp_model: input -> [linear -> GELU/ReLU] x hidden_layers -> linear head (classes);
//  - transformer_model: decoder-only, pre-norm: embedding (+ learned positions) -> blocks of
//    [LN -> QKV linear -> causal attention -> projection, residual; LN -> fc1 -> GELU -> fc2, residual]
//    -> final LN -> linear head over the vocabulary.
// The head writes logits in the loss format (a wider GEMM output, as the loss path of autocast).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "safeamp/policy/precision_policy.hpp"
#include "safeamp/sim/parameter.hpp"
#include "safeamp/sim/run_config.hpp"
#include "safeamp/sim/tensor.hpp"

namespace safeamp::sim {

/// One batch: MLP features or transformer tokens, one target and one slice index per logits row.
struct batch {
  matrix features;                     // MLP: (rows, input_dim)
  std::vector<std::int32_t> tokens;    // transformer: (sequences * context)
  std::vector<std::int32_t> targets;   // one per logits row
  std::vector<std::int32_t> slices;    // slice index per logits row (MLP: class; transformer: position bucket)
  std::int64_t samples = 0;            // MLP rows or transformer sequences
  bool inject_nan = false;             // fault: one input value becomes NaN
};

class model {
 public:
  virtual ~model() = default;
  model() = default;
  model(const model&) = delete;
  model& operator=(const model&) = delete;

  [[nodiscard]] parameter_list& parameters() noexcept { return params_; }
  [[nodiscard]] const parameter_list& parameters() const noexcept { return params_; }

  /// logits (rows, classes) in the loss format.
  virtual void forward(exec_context& ctx, const precision_policy& pol, const batch& b, matrix& logits) = 0;
  /// Sets every parameter gradient (cast into policy.gradient, with counters) from dlogits.
  virtual void backward(exec_context& ctx, const precision_policy& pol, const matrix& dlogits) = 0;

 protected:
  parameter_list params_;
};

/// Parameters initialised from `seed` and rounded to `param_format`.
[[nodiscard]] std::unique_ptr<model> make_mlp(const mlp_shape& shape, std::uint64_t seed, format_spec param_format);
[[nodiscard]] std::unique_ptr<model> make_transformer(const transformer_shape& shape, std::int64_t vocab,
                                                      std::uint64_t seed, format_spec param_format);

}  // namespace safeamp::sim
