// A policy-driven autocast for the user's own training loop on Eigen matrices (and float spans): each op is
// one call, the precision policy decides the format of its op class, and every cast is counted (overflow,
// underflow, subnormal, NaN per op class). The same arithmetic as the simulator's layers (gemm.hpp, loss.hpp):
//   matmul / linear   inputs rounded to policy.format_for(matmul), exact products summed in policy.accumulate,
//                     bias added in the fp32 epilogue, the output rounded once to policy.output
//   linear_backward   dW = X^T dY and dX = dY W^T in the matmul format, dW and db rounded to policy.gradient,
//                     db = column sums in the reduction format
//   mse_loss          in the loss format, its gradient times the loss scale in policy.gradient
//   cast_output / cast_gradient / cast(op_class)   an elementwise result rounded to the storage format
// docs/simulator.md compares each op with PyTorch's autocast.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "safeamp/policy/precision_policy.hpp"
#include "safeamp/sim/gemm.hpp"
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
  /// x W + b (W (in, out), b (1, out)) as torch.nn.Linear under autocast, bias in the epilogue.
  [[nodiscard]] matrix linear(const matrix& x, const matrix& w, const matrix& b);
  /// Sets w.grad = x^T dy and b.grad = column sums of dy (both in policy.gradient, counted on the parameters
  /// too) and, when dx is not null, dx = dy W^T (in policy.gradient).
  void linear_backward(const matrix& x, parameter& w, parameter& b, const matrix& dy, matrix* dx = nullptr);
  /// mean((y - t)^2) in the loss format; dy (when not null) = d(scale * loss)/dy in policy.gradient.
  double mse_loss(const matrix& y, const matrix& t, double scale = 1.0, matrix* dy = nullptr);

  /// Rounds in place to policy.output (an activation as autocast stores it).
  cast_stats cast_output(matrix& m);
  cast_stats cast_output(std::span<float> values);
  /// Rounds in place to policy.gradient (a gradient as the backward stores it).
  cast_stats cast_gradient(matrix& m);
  cast_stats cast_gradient(std::span<float> values);
  /// Rounds in place to the format of op class c (an elementwise, reduction, softmax, ... result).
  cast_stats cast(op_class c, matrix& m);

  /// Counters of every cast so far, by op class: GEMM outputs (dW and dX included) under matmul, db under
  /// reduction, the loss gradient under loss, cast_output and cast_gradient under elementwise, cast(c, m) under c.
  [[nodiscard]] const cast_stats& counts(op_class c) const noexcept { return by_class_[op_class_index(c)]; }
  [[nodiscard]] std::uint64_t casts() const noexcept { return casts_; }  // calls that rounded something

 private:
  cast_stats count(op_class c, const cast_stats& s);
  cast_stats gemm_into(mm op, const matrix& a, const matrix& b, format_spec out, matrix& d);
  precision_policy policy_;
  exec_context ctx_;
  std::array<cast_stats, op_class_count> by_class_{};
  std::uint64_t casts_ = 0;
};

}  // namespace safeamp::sim
