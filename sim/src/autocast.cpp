// The autocast for user loops (see autocast.hpp).
#include "safeamp/sim/autocast.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "safeamp/error.hpp"
#include "safeamp/sim/attention.hpp"
#include "safeamp/sim/loss.hpp"

namespace safeamp::sim {
namespace {

// The counters of a result its op already rounded element by element into f (softmax, a layer norm whose output
// or dx needs no storage cast): a rounding of a copy, which changes nothing and takes no key, so the result and
// the keys of the casts after it stay those of the op alone. An underflow inside the op's arithmetic is a zero
// here, not counted; subnormal, NaN and inf results are.
cast_stats counted_in_format(const matrix& result, format_spec f) {
  matrix copy = result;
  return cast_in_place(copy, f, round_options{}, philox_key{});
}

}  // namespace

autocast::autocast(const precision_policy& policy, round_options rounding, std::uint64_t seed) : policy_(policy) {
  ctx_.rounding = rounding;
  ctx_.seed = seed;
}

cast_stats autocast::count(op_class c, const cast_stats& s) {
  by_class_[op_class_index(c)] += s;
  ++casts_;
  return s;
}

matrix autocast::matmul(mm op, const matrix& a, const matrix& b) { return matmul(op, a, b, policy_.output); }

cast_stats autocast::gemm_into(mm op, const matrix& a, const matrix& b, format_spec out, matrix& d) {
  const gemm_formats f{policy_.format_for(op_class::matmul), policy_.accumulate, out, policy_.matmul_blocks};
  const gemm_options o{.alpha = 1.0f,
                       .beta = 0.0f,
                       .trans_a = op == mm::tn ? transpose::transposed : transpose::none,
                       .trans_b = op == mm::nt ? transpose::transposed : transpose::none,
                       .rounding = ctx_.rounding,
                       .key = ctx_.next_key(),
                       .threads = ctx_.threads};
  return count(op_class::matmul, gemm(f, a, b, d, o));
}

matrix autocast::matmul(mm op, const matrix& a, const matrix& b, format_spec out) {
  matrix d;
  (void)gemm_into(op, a, b, out, d);
  return d;
}

void autocast::matmul(mm op, std::span<const float> a, std::span<const float> b, std::span<float> out, std::int64_t m,
                      std::int64_t n, std::int64_t k) {
  const auto check = [](const char* operand, std::size_t size, std::int64_t rows, std::int64_t cols) {
    if (rows < 0 || cols < 0 || size != static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols)) {
      throw error(std::string("autocast::matmul ") + operand, std::to_string(size) + " values",
                  std::to_string(rows * cols) + " (" + std::to_string(rows) + " x " + std::to_string(cols) + ")");
    }
  };
  // The operands as stored: A (m, k) or, for tn, (k, m); B (k, n) or, for nt, (n, k).
  const std::int64_t a_rows = op == mm::tn ? k : m, a_cols = op == mm::tn ? m : k;
  const std::int64_t b_rows = op == mm::nt ? n : k, b_cols = op == mm::nt ? k : n;
  check("a", a.size(), a_rows, a_cols);
  check("b", b.size(), b_rows, b_cols);
  check("out", out.size(), m, n);
  const matrix am = Eigen::Map<const matrix>(a.data(), a_rows, a_cols);
  const matrix bm = Eigen::Map<const matrix>(b.data(), b_rows, b_cols);
  matrix d;
  (void)gemm_into(op, am, bm, policy_.output, d);
  std::copy(d.data(), d.data() + d.size(), out.begin());
}

matrix autocast::linear(const matrix& x, const matrix& w, const matrix& b) {
  if (b.rows() != 1 || b.cols() != w.cols()) {
    throw error("autocast::linear bias", std::to_string(b.rows()) + "x" + std::to_string(b.cols()),
                "1x" + std::to_string(w.cols()));
  }
  matrix y(x.rows(), w.cols());
  y.rowwise() = b.row(0);  // the bias epilogue: D = x W + 1 b before the output rounding
  const gemm_formats f{policy_.format_for(op_class::matmul), policy_.accumulate, policy_.output, policy_.matmul_blocks};
  const gemm_options o{.alpha = 1.0f,
                       .beta = 1.0f,
                       .trans_a = transpose::none,
                       .trans_b = transpose::none,
                       .rounding = ctx_.rounding,
                       .key = ctx_.next_key(),
                       .threads = ctx_.threads};
  (void)count(op_class::matmul, gemm(f, x, w, y, o));
  return y;
}

void autocast::linear_backward(const matrix& x, parameter& w, parameter& b, const matrix& dy, matrix* dx) {
  w.grad_stats += gemm_into(mm::tn, x, dy, policy_.gradient, w.grad);
  b.grad.setZero(1, dy.cols());
  const format_spec fr = policy_.format_for(op_class::reduction);
  for (Eigen::Index i = 0; i < dy.rows(); ++i) {
    for (Eigen::Index j = 0; j < dy.cols(); ++j) b.grad(0, j) = round_scalar(fr, b.grad(0, j) + dy(i, j));
  }
  b.grad_stats += count(op_class::reduction, cast_in_place(b.grad, policy_.gradient, ctx_.rounding, ctx_.next_key()));
  if (dx != nullptr) *dx = matmul(mm::nt, dy, w.value, policy_.gradient);
}

double autocast::mse_loss(const matrix& y, const matrix& t, double scale, matrix* dy) {
  const loss_result r = regression_loss(ctx_, policy_, loss_kind::mse, y, t, scale, dy);
  if (dy != nullptr) (void)count(op_class::loss, r.gradient_stats);
  return r.loss;
}

template <class F>
void autocast::count_activation_casts(op_class c, F&& f) {
  const cast_stats before = ctx_.activation_stats;
  ctx_.activation_stats = {};
  f();
  const cast_stats these = ctx_.activation_stats;
  ctx_.activation_stats = before;
  ctx_.activation_stats += these;
  (void)count(c, these);
}

matrix autocast::activation(activation_fn fn, const matrix& x) {
  matrix y;
  count_activation_casts(op_class::elementwise, [&] { activation_forward(ctx_, policy_, fn, x, y); });
  return y;
}

matrix autocast::activation_backward(activation_fn fn, const matrix& x, const matrix& dy) {
  matrix dx;
  (void)count(op_class::elementwise, sim::activation_backward(ctx_, policy_, fn, x, dy, dx));
  return dx;
}

matrix autocast::layer_norm(const matrix& x, const parameter& gain, const parameter& bias, layer_norm_saved& saved,
                            float epsilon) {
  if (gain.value.rows() != 1 || bias.value.rows() != 1) {
    throw error("autocast::layer_norm gain and bias",
                std::to_string(gain.value.rows()) + " and " + std::to_string(bias.value.rows()) + " rows",
                "(1, width) parameters");
  }
  if (!(epsilon > 0.0f) || !std::isfinite(epsilon)) {
    throw error("autocast::layer_norm epsilon", std::to_string(epsilon), "a finite number above 0");
  }
  matrix y;
  const format_spec f = policy_.format_for(op_class::normalization);
  if (policy_.output != f) {
    count_activation_casts(op_class::normalization,
                           [&] { layer_norm_forward(ctx_, policy_, gain.value, bias.value, epsilon, x, y, saved); });
  } else {
    layer_norm_forward(ctx_, policy_, gain.value, bias.value, epsilon, x, y, saved);  // no storage cast to count
    (void)count(op_class::normalization, counted_in_format(y, f));
  }
  return y;
}

matrix autocast::layer_norm_backward(const layer_norm_saved& saved, parameter& gain, parameter& bias,
                                     const matrix& dy) {
  matrix dx;
  const cast_stats g0 = gain.grad_stats, b0 = bias.grad_stats;
  gain.grad_stats = {};
  bias.grad_stats = {};
  const cast_stats dx_cast = sim::layer_norm_backward(ctx_, policy_, gain, bias, saved, dy, dx);
  const format_spec f = policy_.format_for(op_class::normalization);
  (void)count(op_class::normalization, policy_.gradient != f ? dx_cast : counted_in_format(dx, f));
  // This step's two gradient casts, counted here and kept on the parameters' counters as linear_backward does.
  const cast_stats g = gain.grad_stats, b = bias.grad_stats;
  gain.grad_stats = g0;
  gain.grad_stats += g;
  bias.grad_stats = b0;
  bias.grad_stats += b;
  (void)count(op_class::reduction, g);
  (void)count(op_class::reduction, b);
  return dx;
}

matrix autocast::softmax(const matrix& s, bool causal) {
  matrix p;
  const format_spec f = policy_.format_for(op_class::softmax);
  softmax_rows(f, s, p, causal);
  (void)count(op_class::softmax, cast_in_place(ctx_, p, f));  // already in f: counts NaN/inf, changes nothing
  return p;
}

matrix autocast::softmax_backward(const matrix& p, const matrix& dp) {
  if (dp.rows() != p.rows() || dp.cols() != p.cols()) {
    throw error("autocast::softmax_backward gradient shape",
                std::to_string(dp.rows()) + "x" + std::to_string(dp.cols()),
                std::to_string(p.rows()) + "x" + std::to_string(p.cols()) + " (the forward's output)");
  }
  matrix ds;
  const format_spec f = policy_.format_for(op_class::softmax);
  softmax_rows_backward(f, p, dp, ds);
  (void)count(op_class::softmax, counted_in_format(ds, f));
  return ds;
}

cast_stats autocast::cast_output(matrix& m) { return cast_output(span_of(m)); }
cast_stats autocast::cast_gradient(matrix& m) { return cast_gradient(span_of(m)); }

cast_stats autocast::cast_output(std::span<float> values) {
  return count(op_class::elementwise, round_span(policy_.output, values, ctx_.rounding, ctx_.next_key()));
}

cast_stats autocast::cast_gradient(std::span<float> values) {
  return count(op_class::elementwise, round_span(policy_.gradient, values, ctx_.rounding, ctx_.next_key()));
}

cast_stats autocast::cast(op_class c, matrix& m) { return count(c, cast_in_place(ctx_, m, policy_.format_for(c))); }

std::vector<std::span<float>> grad_spans(parameter_list& params) {
  std::vector<std::span<float>> out;
  out.reserve(params.size());
  for (parameter& p : params) out.push_back(span_of(p.grad));
  return out;
}

}  // namespace safeamp::sim
