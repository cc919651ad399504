// Models as a sequential stack of layers (linear, activation, layer norm, embedding, transformer block), with
// explicit forward and backward under a precision policy. The shipped models are presets of it:
//  - mlp: input -> [linear fc<i> -> GELU/ReLU] x hidden_layers -> linear head (classes);
//  - transformer: decoder-only, pre-norm: embedding (+ learned positions) -> blocks of
//    [LN -> QKV linear -> causal attention -> projection, residual; LN -> fc1 -> GELU -> fc2, residual]
//    -> final LN -> linear head over the vocabulary.
// The last layer is a linear head that writes its output in the loss format (a wider GEMM output, as the loss
// path of autocast). Initialisation: linear weights N(0, 1/fan_in) (the projections back into a residual
// stream scaled by 1/sqrt(2 blocks)), embeddings N(0, 0.1^2), biases 0, layer-norm gains 1; parameter i draws
// from Philox stream 0x1000 + i.
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
  matrix features;                    // MLP: (rows, input_dim)
  std::vector<std::int32_t> tokens;   // transformer: (sequences * context)
  std::vector<std::int32_t> targets;  // one per logits row (classification)
  matrix target_values;               // regression: (rows, output width)
  std::vector<std::int32_t> slices;   // slice index per logits row (MLP: class; transformer: position bucket)
  std::int64_t samples = 0;           // MLP rows or transformer sequences
  bool inject_nan = false;            // fault: one input value becomes NaN
};

/// Which training batch a data source serves: the step it is for and its size (MLP rows or transformer
/// sequences). Named fields: the positional train_batch(step, size) compiled with the two counts swapped.
struct batch_request {
  std::int64_t step = 0;
  std::int64_t samples = 0;
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

/// The layer stack of a run: the preset's expansion for model_kind::mlp and transformer, cfg.stack for stack.
[[nodiscard]] model_stack preset_stack(const run_config& cfg);

/// A stack model. `vocab`: rows of an embedding's token table; `output_width`: the head's width when its `out`
/// is 0. Throws safeamp::error naming "model.layers[i]" for an impossible stack (no linear head last, an
/// embedding not first, a block width not a multiple of its heads, a head width other than output_width).
[[nodiscard]] std::unique_ptr<model> make_stack_model(const model_stack& stack, std::int64_t vocab,
                                                      std::int64_t output_width, std::uint64_t seed,
                                                      format_spec param_format);

/// Parameters initialised from `seed` and rounded to `param_format` (the presets through make_stack_model).
[[nodiscard]] std::unique_ptr<model> make_mlp(const mlp_shape& shape, std::uint64_t seed, format_spec param_format);
[[nodiscard]] std::unique_ptr<model> make_transformer(const transformer_shape& shape, std::int64_t vocab,
                                                      std::uint64_t seed, format_spec param_format);

}  // namespace safeamp::sim
