// A policy-driven autocast for the user's own training loop on Eigen matrices and float spans: each op is
// one call, the precision policy decides the format of its op class, and every result is counted once, under
// that class (overflow, underflow, subnormal, NaN; docs/simulator.md, "Cast counters"). The same arithmetic as
// the simulator's layers (gemm.hpp, loss.hpp):
//   matmul / linear   inputs rounded to policy.format_for(matmul), exact products summed in policy.accumulate,
//                     bias added in the fp32 epilogue, the output rounded once to policy.output
//   linear_backward   dW = X^T dY and dX = dY W^T in the matmul format, dW and db rounded to policy.gradient,
//                     db = column sums in the reduction format
//   mse_loss          in the loss format, its gradient times the loss scale rounded there, then policy.gradient
//                     (counted under loss)
//   gelu / relu       in the elementwise format, stored in policy.output; the backward dy f'(x) likewise,
//                     then policy.gradient (both counted under elementwise)
//   layer_norm        in the normalization format (each addition rounded there), stored in policy.output; the
//                     backward sums gain and bias gradients in the reduction format into policy.gradient (counted
//                     under reduction), dx in the normalization format, then policy.gradient (under normalization)
//   softmax           row-wise in the softmax format (max subtracted, each exp, sum and division rounded there),
//                     forward and backward counted under softmax
//   cast_output / cast_gradient / cast(op_class)   an elementwise result rounded to the storage format
// docs/simulator.md compares each op with PyTorch's autocast.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "safeamp/policy/precision_policy.hpp"
#include "safeamp/sim/gemm.hpp"
#include "safeamp/sim/layers.hpp"
#include "safeamp/sim/parameter.hpp"
#include "safeamp/sim/tensor.hpp"

namespace safeamp::sim {

/// Which operands of a matmul are transposed: nn is A B, tn is A^T B (a weight gradient), nt is A B^T.
enum class mm : std::uint8_t { nn, tn, nt };

class autocast {
 public:
  explicit autocast(const precision_policy& policy, round_options rounding = {}, std::uint64_t seed = 0);

  [[nodiscard]] const precision_policy& policy() const noexcept { return policy_; }
  /// The execution context (cast keys, thread count) for the simulator's optimizers: optimizer::step(ctx, ...).
  [[nodiscard]] exec_context& context() noexcept { return ctx_; }
  /// Starts step s: stochastic-rounding keys depend on (seed, step, cast site, element) only.
  void begin_step(std::int64_t s) noexcept { ctx_.begin_step(s); }

  /// op(A) op(B) in the matmul format with the policy's accumulation, the output in `out` (default: policy.output).
  [[nodiscard]] matrix matmul(mm op, const matrix& a, const matrix& b);
  [[nodiscard]] matrix matmul(mm op, const matrix& a, const matrix& b, format_spec out);
  /// The same on row-major float spans (your own arrays): op(A) is (m, k) and op(B) is (k, n), so `a` holds
  /// m*k values ((m, k) for nn and nt, (k, m) for tn) and `b` k*n ((k, n), or (n, k) for nt); `out` receives the
  /// (m, n) result. Throws safeamp::error naming the operand whose size is not the shape's.
  void matmul(mm op, std::span<const float> a, std::span<const float> b, std::span<float> out, std::int64_t m,
              std::int64_t n, std::int64_t k);
  /// x W + b (W (in, out), b (1, out)) as torch.nn.Linear under autocast, bias in the epilogue.
  [[nodiscard]] matrix linear(const matrix& x, const matrix& w, const matrix& b);
  /// Sets w.grad = x^T dy and b.grad = column sums of dy (both in policy.gradient, counted on the parameters
  /// too) and, when dx is not null, dx = dy W^T (in policy.gradient).
  void linear_backward(const matrix& x, parameter& w, parameter& b, const matrix& dy, matrix* dx = nullptr);
  /// mean((y - t)^2) in the loss format; dy (when not null) = d(scale * loss)/dy in policy.gradient.
  double mse_loss(const matrix& y, const matrix& t, double scale = 1.0, matrix* dy = nullptr);

  /// GELU (tanh approximation, torch's approximate="tanh") or ReLU of x; the backward takes the forward's input
  /// and returns dx = dy f'(x). Both directions are counted under elementwise, each element once.
  [[nodiscard]] matrix activation(activation_fn fn, const matrix& x);
  [[nodiscard]] matrix activation_backward(activation_fn fn, const matrix& x, const matrix& dy);
  [[nodiscard]] matrix gelu(const matrix& x) { return activation(activation_fn::gelu, x); }
  [[nodiscard]] matrix gelu_backward(const matrix& x, const matrix& dy) {
    return activation_backward(activation_fn::gelu, x, dy);
  }
  /// Row-wise layer norm with gain and bias ((1, width) parameters), as torch.nn.LayerNorm(width, eps);
  /// `saved` keeps what the backward needs. The output is counted under normalization.
  [[nodiscard]] matrix layer_norm(const matrix& x, const parameter& gain, const parameter& bias,
                                  layer_norm_saved& saved, float epsilon = 1e-5f);
  /// Sets gain.grad and bias.grad (policy.gradient, counted under reduction and on the parameters) and
  /// returns dx (policy.gradient, counted under normalization).
  [[nodiscard]] matrix layer_norm_backward(const layer_norm_saved& saved, parameter& gain, parameter& bias,
                                           const matrix& dy);
  /// Row-wise softmax (causal: row r keeps columns 0..r, the rest are 0) in the softmax format, and its backward
  /// ds = p (dp - sum(dp p)) from the forward's output. Both are counted under softmax: their results are already
  /// in the softmax format, so the count sees their subnormal, NaN and inf results (not a value the arithmetic
  /// rounded to zero).
  [[nodiscard]] matrix softmax(const matrix& s, bool causal = false);
  [[nodiscard]] matrix softmax_backward(const matrix& p, const matrix& dp);

  /// Rounds in place to policy.output (an activation as autocast stores it).
  cast_stats cast_output(matrix& m);
  cast_stats cast_output(std::span<float> values);
  /// Rounds in place to policy.gradient (a gradient as the backward stores it).
  cast_stats cast_gradient(matrix& m);
  cast_stats cast_gradient(std::span<float> values);
  /// Rounds in place to the format of op class c (an elementwise, reduction, softmax, ... result).
  cast_stats cast(op_class c, matrix& m);

  /// Counters of every result so far, by op class, each element once however many roundings it went through
  /// (its op's format, then its storage format): GEMM outputs (dW and dX included) under matmul, db and the layer
  /// norm's gain and bias gradients under reduction, the loss gradient (rounded in the loss format, then
  /// policy.gradient) under loss, gelu / relu in both directions, cast_output and cast_gradient under
  /// elementwise, layer_norm's output and dx under normalization, softmax's p and ds under softmax, cast(c, m)
  /// under c.
  [[nodiscard]] const cast_stats& counts(op_class c) const noexcept { return by_class_[op_class_index(c)]; }
  [[nodiscard]] std::uint64_t casts() const noexcept { return casts_; }  // calls that rounded something

 private:
  cast_stats count(op_class c, const cast_stats& s);
  /// Runs f, which adds its casts to ctx_.activation_stats, and counts those casts under c.
  template <class F>
  void count_activation_casts(op_class c, F&& f);
  cast_stats gemm_into(mm op, const matrix& a, const matrix& b, format_spec out, matrix& d);
  precision_policy policy_;
  exec_context ctx_;
  std::array<cast_stats, op_class_count> by_class_{};
  std::uint64_t casts_ = 0;
};

/// The gradient buffers of `params`, in order, for loss_scaler::unscale and clip_grad_norm(_torch): what
/// scaler.unscale_(opt) and clip_grad_norm_(model.parameters()) take in PyTorch. Valid until a gradient matrix
/// is reassigned (the next backward).
[[nodiscard]] std::vector<std::span<float>> grad_spans(parameter_list& params);

}  // namespace safeamp::sim
