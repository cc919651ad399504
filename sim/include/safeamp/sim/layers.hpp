// Layers with explicit forward and backward, each op in the format the precision policy gives its op
// class: linear (matmul; bias added in the GEMM epilogue), GELU/ReLU (elementwise), layer norm
// (normalization), embedding (elementwise add of token and position rows; reduction for its gradient).
// Activations are stored in policy.output, activation gradients in policy.gradient, parameter gradients
// are cast into policy.gradient with counters (that cast is where fp16 gradients underflow).
#pragma once

#include <cstdint>
#include <vector>

#include "safeamp/policy/precision_policy.hpp"
#include "safeamp/sim/parameter.hpp"
#include "safeamp/sim/tensor.hpp"

namespace safeamp::sim {

/// y = x W + b, W (in, out), b (1, out).
struct linear_layer {
  std::size_t weight = 0;
  std::size_t bias = 0;
  matrix input;  // cached forward input
  // The input rounded to the matmul format by the forward's GEMM, kept for the backward's dW (fp32: none kept).
  matrix input_low{};
  format_spec input_low_format = fp32;
  // The weight rounded to the matmul format by the forward, kept for the backward's dx = dy W^T (the weight does
  // not change between the two), so that a step rounds each weight once (fp32: none kept).
  matrix weight_low{};
  format_spec weight_low_format = fp32;

  /// out_format: the format y is written in (policy.output, or a wider consumer format such as the loss's).
  void forward(exec_context& ctx, const precision_policy& pol, const parameter_list& params, const matrix& x, matrix& y,
               format_spec out_format);
  /// Where a caller may write the next forward's input itself (then calling forward_in_place), so that the layer
  /// keeps it for the backward without a copy.
  [[nodiscard]] matrix& input_slot() noexcept { return input_low; }
  /// forward() on the input the caller wrote into input_slot(). x_format: a format that every element written
  /// there is already a value of (a stored activation: policy.output); the GEMM's operand rounding is skipped
  /// when it is the matmul format (rounding a value of a format to that format returns it unchanged), so the
  /// bits are forward()'s. fp32 promises nothing.
  void forward_in_place(exec_context& ctx, const precision_policy& pol, const parameter_list& params,
                        format_spec x_format, matrix& y, format_spec out_format);
  /// Sets the weight/bias gradients (with counters) and, when dx is not null, dx = dy W^T. dy_format: as x_format
  /// above, for dy (a gradient cast to policy.gradient); fp32 promises nothing.
  void backward(exec_context& ctx, const precision_policy& pol, parameter_list& params, const matrix& dy, matrix* dx,
                format_spec dy_format = fp32);
};

/// Creates a linear layer's parameters "<name>.weight" (in, out) and "<name>.bias" (1, out).
linear_layer make_linear(parameter_list& params, const std::string& name, Eigen::Index in, Eigen::Index out);

enum class activation_fn : std::uint8_t { gelu, relu };

struct activation_layer {
  activation_fn fn = activation_fn::gelu;
  matrix input;
  matrix gelu_tanh{};  // GELU: the forward's tanh(sqrt(2/pi) (x + 0.044715 x^3)) per element, reused by the backward
  void forward(exec_context& ctx, const precision_policy& pol, const matrix& x, matrix& y);
  /// Where a caller may write the next forward's input itself (then calling forward_in_place): kept for the
  /// backward without a copy.
  [[nodiscard]] matrix& input_slot() noexcept { return input; }
  /// forward() on the input the caller wrote into input_slot().
  void forward_in_place(exec_context& ctx, const precision_policy& pol, matrix& y);
  void backward(exec_context& ctx, const precision_policy& pol, const matrix& dy, matrix& dx);
};

/// The activation's arithmetic on explicit operands (activation_layer and autocast call these): y = fn(x) in
/// the elementwise format, stored in policy.output (casts added to ctx.activation_stats, each element once); dx =
/// dy fn'(x) in the elementwise format, then policy.gradient, returning the counters of those casts (each element
/// once; the layers discard them, autocast counts them under elementwise).
void activation_forward(exec_context& ctx, const precision_policy& pol, activation_fn fn, const matrix& x, matrix& y);
cast_stats activation_backward(exec_context& ctx, const precision_policy& pol, activation_fn fn, const matrix& x,
                               const matrix& dy, matrix& dx);

/// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), and its derivative.
[[nodiscard]] float gelu(float x) noexcept;
[[nodiscard]] float gelu_derivative(float x) noexcept;

/// Row-wise layer norm with gain and bias ("<name>.gain", "<name>.bias", each (1, width)). The mean and the
/// variance are summed left to right in the normalization format (each addition rounded there).
/// What a layer norm's backward needs from its forward.
struct layer_norm_saved {
  matrix normalized;        // x_hat, in the normalization format
  std::vector<float> rstd;  // per row
};

struct layer_norm_layer {
  std::size_t gain = 0;
  std::size_t bias = 0;
  float epsilon = 1e-5f;
  layer_norm_saved saved;
  void forward(exec_context& ctx, const precision_policy& pol, const parameter_list& params, const matrix& x,
               matrix& y);
  void backward(exec_context& ctx, const precision_policy& pol, parameter_list& params, const matrix& dy, matrix& dx);
};

/// The layer norm's arithmetic on explicit operands (layer_norm_layer and autocast call these). Forward: y in the
/// normalization format, stored in policy.output (that cast added to ctx.activation_stats). Backward: gain and
/// bias gradients summed in the reduction format and cast into policy.gradient (counted on the parameters),
/// dx in the normalization format, then policy.gradient; returns the counters of dx's cast into policy.gradient
/// (none when that is the normalization format: the rounding there is the arithmetic's own).
void layer_norm_forward(exec_context& ctx, const precision_policy& pol, const matrix& gain, const matrix& bias,
                        float epsilon, const matrix& x, matrix& y, layer_norm_saved& saved);
cast_stats layer_norm_backward(exec_context& ctx, const precision_policy& pol, parameter& gain, parameter& bias,
                               const layer_norm_saved& saved, const matrix& dy, matrix& dx);

layer_norm_layer make_layer_norm(parameter_list& params, const std::string& name, Eigen::Index width);

/// Token embedding (vocab, width) plus learned positions (context, width); row r of the batch is token
/// tokens[r] at position r % context.
struct embedding_layer {
  std::size_t tokens_table = 0;
  std::size_t positions_table = 0;
  std::vector<std::int32_t> tokens;
  std::int64_t context = 0;
  void forward(exec_context& ctx, const precision_policy& pol, const parameter_list& params,
               const std::vector<std::int32_t>& batch_tokens, matrix& y);
  void backward(exec_context& ctx, const precision_policy& pol, parameter_list& params, const matrix& dy);
};

embedding_layer make_embedding(parameter_list& params, const std::string& name, Eigen::Index vocab,
                               Eigen::Index context, Eigen::Index width);

/// y = a + b (residual), in the elementwise format, stored in policy.output.
void residual_add(exec_context& ctx, const precision_policy& pol, const matrix& a, const matrix& b, matrix& y);

/// Casts a parameter gradient into policy.gradient and adds the counters to the parameter.
void cast_gradient(exec_context& ctx, const precision_policy& pol, parameter& p);

}  // namespace safeamp::sim
