// Linear, activation, layer norm, embedding and residual layers (see layers.hpp).
#include "safeamp/sim/layers.hpp"

#include <cmath>
#include <numbers>
#include <string>

#include "safeamp/error.hpp"
#include "safeamp/sim/gemm.hpp"

namespace safeamp::sim {
namespace {

gemm_options gemm_opts(exec_context& ctx, float beta = 0.0f, transpose ta = transpose::none,
                       transpose tb = transpose::none) {
  return gemm_options{.alpha = 1.0f, .beta = beta, .trans_a = ta, .trans_b = tb, .rounding = ctx.rounding,
                      .key = ctx.next_key(), .threads = ctx.threads};
}

// out(0, j) = sum_i in(i, j), left to right over rows, each addition rounded to f.
void column_sums(format_spec f, const matrix& in, matrix& out) {
  out.setZero(1, in.cols());
  for (Eigen::Index i = 0; i < in.rows(); ++i) {
    for (Eigen::Index j = 0; j < in.cols(); ++j) out(0, j) = round_scalar(f, out(0, j) + in(i, j));
  }
}

// Casts an activation to the storage format when it differs from the op's format.
void store_activation(exec_context& ctx, const precision_policy& pol, matrix& y, format_spec op_format) {
  if (pol.output != op_format) ctx.activation_stats += cast_in_place(ctx, y, pol.output);
}

void check_cols(const char* field, Eigen::Index got, Eigen::Index expected) {
  if (got != expected) throw error(field, std::to_string(got), std::to_string(expected));
}

}  // namespace

void cast_gradient(exec_context& ctx, const precision_policy& pol, parameter& p) {
  p.grad_stats += cast_in_place(ctx, p.grad, pol.gradient);
}

// ---- linear -------------------------------------------------------------------------------------------

linear_layer make_linear(parameter_list& params, const std::string& name, Eigen::Index in, Eigen::Index out) {
  linear_layer l;
  l.weight = add_parameter(params, name + ".weight", in, out);
  l.bias = add_parameter(params, name + ".bias", 1, out);
  return l;
}

void linear_layer::forward(exec_context& ctx, const precision_policy& pol, const parameter_list& params,
                           const matrix& x, matrix& y, format_spec out_format) {
  const matrix& w = params[weight].value;
  check_cols("linear input columns", x.cols(), w.rows());
  input = x;
  y.resize(x.rows(), w.cols());
  y.rowwise() = params[bias].value.row(0);  // bias epilogue: D = x W + 1 b, added in fp32 before rounding
  const gemm_formats f{pol.format_for(op_class::matmul), pol.accumulate, out_format, pol.matmul_blocks};
  ctx.activation_stats += gemm(f, x, w, y, gemm_opts(ctx, 1.0f));
}

void linear_layer::backward(exec_context& ctx, const precision_policy& pol, parameter_list& params, const matrix& dy,
                            matrix* dx) {
  parameter& w = params[weight];
  parameter& b = params[bias];
  check_cols("linear output-gradient columns", dy.cols(), w.value.cols());
  const gemm_formats f{pol.format_for(op_class::matmul), pol.accumulate, pol.gradient, pol.matmul_blocks};
  w.grad_stats += gemm(f, input, dy, w.grad, gemm_opts(ctx, 0.0f, transpose::transposed));  // dW = x^T dy
  column_sums(pol.format_for(op_class::reduction), dy, b.grad);                               // db = 1^T dy
  cast_gradient(ctx, pol, b);
  if (dx != nullptr) (void)gemm(f, dy, w.value, *dx, gemm_opts(ctx, 0.0f, transpose::none, transpose::transposed));
}

// ---- activations ---------------------------------------------------------------------------------------

namespace {
constexpr float gelu_c = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float gelu_a = 0.044715f;
}  // namespace

float gelu(float x) noexcept {
  const float u = gelu_c * (x + gelu_a * x * x * x);
  return 0.5f * x * (1.0f + std::tanh(u));
}

float gelu_derivative(float x) noexcept {
  const float u = gelu_c * (x + gelu_a * x * x * x);
  const float t = std::tanh(u);
  const float du = gelu_c * (1.0f + 3.0f * gelu_a * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

void activation_layer::forward(exec_context& ctx, const precision_policy& pol, const matrix& x, matrix& y) {
  input = x;
  activation_forward(ctx, pol, fn, x, y);
}

void activation_layer::backward(exec_context& ctx, const precision_policy& pol, const matrix& dy, matrix& dx) {
  activation_backward(ctx, pol, fn, input, dy, dx);
}

void activation_forward(exec_context& ctx, const precision_policy& pol, activation_fn fn, const matrix& x,
                        matrix& y) {
  y.resize(x.rows(), x.cols());
  const float* in = x.data();
  float* out = y.data();
  if (fn == activation_fn::gelu) {
    for (Eigen::Index i = 0; i < x.size(); ++i) out[i] = gelu(in[i]);
  } else {
    for (Eigen::Index i = 0; i < x.size(); ++i) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
  }
  const format_spec fe = pol.format_for(op_class::elementwise);
  ctx.activation_stats += cast_in_place(ctx, y, fe);
  store_activation(ctx, pol, y, fe);
}

void activation_backward(exec_context& ctx, const precision_policy& pol, activation_fn fn, const matrix& input,
                         const matrix& dy, matrix& dx) {
  if (dy.rows() != input.rows() || dy.cols() != input.cols()) {
    throw error("activation gradient shape", std::to_string(dy.rows()) + "x" + std::to_string(dy.cols()),
                std::to_string(input.rows()) + "x" + std::to_string(input.cols()));
  }
  dx.resize(dy.rows(), dy.cols());
  const float* in = input.data();
  const float* g = dy.data();
  float* out = dx.data();
  if (fn == activation_fn::gelu) {
    for (Eigen::Index i = 0; i < dy.size(); ++i) out[i] = g[i] * gelu_derivative(in[i]);
  } else {
    for (Eigen::Index i = 0; i < dy.size(); ++i) out[i] = in[i] > 0.0f ? g[i] : 0.0f;
  }
  (void)cast_in_place(ctx, dx, pol.format_for(op_class::elementwise));
  if (pol.gradient != pol.format_for(op_class::elementwise)) (void)cast_in_place(ctx, dx, pol.gradient);
}

// ---- layer norm ----------------------------------------------------------------------------------------

layer_norm_layer make_layer_norm(parameter_list& params, const std::string& name, Eigen::Index width) {
  layer_norm_layer l;
  l.gain = add_parameter(params, name + ".gain", 1, width);
  l.bias = add_parameter(params, name + ".bias", 1, width);
  params[l.gain].value.setOnes();
  return l;
}

void layer_norm_layer::forward(exec_context& ctx, const precision_policy& pol, const parameter_list& params,
                               const matrix& x, matrix& y) {
  layer_norm_forward(ctx, pol, params[gain].value, params[bias].value, epsilon, x, y, saved);
}

void layer_norm_layer::backward(exec_context& ctx, const precision_policy& pol, parameter_list& params,
                                const matrix& dy, matrix& dx) {
  layer_norm_backward(ctx, pol, params[gain], params[bias], saved, dy, dx);
}

void layer_norm_forward(exec_context& ctx, const precision_policy& pol, const matrix& g, const matrix& b,
                        float epsilon, const matrix& x, matrix& y, layer_norm_saved& saved) {
  check_cols("layer norm input columns", x.cols(), g.cols());
  check_cols("layer norm bias columns", b.cols(), g.cols());
  std::vector<float>& rstd = saved.rstd;
  matrix& normalized = saved.normalized;
  const format_spec f = pol.format_for(op_class::normalization);
  const Eigen::Index width = x.cols();
  const float inv_width = 1.0f / static_cast<float>(width);
  normalized.resize(x.rows(), width);
  rstd.assign(static_cast<std::size_t>(x.rows()), 0.0f);
  y.resize(x.rows(), width);
  for (Eigen::Index r = 0; r < x.rows(); ++r) {
    float sum = 0.0f;
    for (Eigen::Index j = 0; j < width; ++j) sum = round_scalar(f, sum + round_scalar(f, x(r, j)));
    const float mean = round_scalar(f, sum * inv_width);
    float sq = 0.0f;
    for (Eigen::Index j = 0; j < width; ++j) {
      const float d = round_scalar(f, round_scalar(f, x(r, j)) - mean);
      sq = round_scalar(f, sq + round_scalar(f, d * d));
    }
    const float var = round_scalar(f, sq * inv_width);
    const float rs = round_scalar(f, 1.0f / std::sqrt(round_scalar(f, var + epsilon)));
    rstd[static_cast<std::size_t>(r)] = rs;
    for (Eigen::Index j = 0; j < width; ++j) {
      const float xh = round_scalar(f, round_scalar(f, round_scalar(f, x(r, j)) - mean) * rs);
      normalized(r, j) = xh;
      y(r, j) = round_scalar(f, round_scalar(f, xh * g(0, j)) + b(0, j));
    }
  }
  store_activation(ctx, pol, y, f);
}

void layer_norm_backward(exec_context& ctx, const precision_policy& pol, parameter& g, parameter& b,
                         const layer_norm_saved& saved, const matrix& dy, matrix& dx) {
  const matrix& normalized = saved.normalized;
  const std::vector<float>& rstd = saved.rstd;
  if (dy.rows() != normalized.rows() || dy.cols() != normalized.cols()) {
    throw error("layer norm gradient shape", std::to_string(dy.rows()) + "x" + std::to_string(dy.cols()),
                std::to_string(normalized.rows()) + "x" + std::to_string(normalized.cols()));
  }
  const format_spec f = pol.format_for(op_class::normalization);
  const format_spec fr = pol.format_for(op_class::reduction);
  const Eigen::Index width = dy.cols();
  const float inv_width = 1.0f / static_cast<float>(width);
  g.grad.setZero(1, width);
  b.grad.setZero(1, width);
  dx.resize(dy.rows(), width);
  std::vector<float> dxhat(static_cast<std::size_t>(width));
  for (Eigen::Index r = 0; r < dy.rows(); ++r) {
    float s1 = 0.0f;
    float s2 = 0.0f;
    for (Eigen::Index j = 0; j < width; ++j) {
      const float xh = normalized(r, j);
      g.grad(0, j) = round_scalar(fr, g.grad(0, j) + dy(r, j) * xh);
      b.grad(0, j) = round_scalar(fr, b.grad(0, j) + dy(r, j));
      const float d = round_scalar(f, dy(r, j) * g.value(0, j));
      dxhat[static_cast<std::size_t>(j)] = d;
      s1 = round_scalar(f, s1 + d);
      s2 = round_scalar(f, s2 + round_scalar(f, d * xh));
    }
    const float m1 = round_scalar(f, s1 * inv_width);
    const float m2 = round_scalar(f, s2 * inv_width);
    const float rs = rstd[static_cast<std::size_t>(r)];
    for (Eigen::Index j = 0; j < width; ++j) {
      const float inner = round_scalar(f, dxhat[static_cast<std::size_t>(j)] - m1 - normalized(r, j) * m2);
      dx(r, j) = round_scalar(f, rs * inner);
    }
  }
  cast_gradient(ctx, pol, g);
  cast_gradient(ctx, pol, b);
  if (pol.gradient != f) (void)cast_in_place(ctx, dx, pol.gradient);
}

// ---- embedding -----------------------------------------------------------------------------------------

embedding_layer make_embedding(parameter_list& params, const std::string& name, Eigen::Index vocab,
                               Eigen::Index context, Eigen::Index width) {
  embedding_layer l;
  l.tokens_table = add_parameter(params, name + ".tokens", vocab, width);
  l.positions_table = add_parameter(params, name + ".positions", context, width);
  l.context = context;
  return l;
}

void embedding_layer::forward(exec_context& ctx, const precision_policy& pol, const parameter_list& params,
                              const std::vector<std::int32_t>& batch_tokens, matrix& y) {
  const matrix& te = params[tokens_table].value;
  const matrix& pe = params[positions_table].value;
  const format_spec fe = pol.format_for(op_class::elementwise);
  if (batch_tokens.size() % static_cast<std::size_t>(context) != 0) {
    throw error("embedding batch tokens", std::to_string(batch_tokens.size()),
                "a multiple of the context (" + std::to_string(context) + ")");
  }
  tokens = batch_tokens;
  y.resize(static_cast<Eigen::Index>(tokens.size()), te.cols());
  for (std::size_t r = 0; r < tokens.size(); ++r) {
    const std::int32_t t = tokens[r];
    if (t < 0 || t >= te.rows()) {
      throw error("embedding token", std::to_string(t), "0.." + std::to_string(te.rows() - 1));
    }
    const auto row = static_cast<Eigen::Index>(r);
    const Eigen::Index pos = row % context;
    for (Eigen::Index j = 0; j < te.cols(); ++j) y(row, j) = round_scalar(fe, te(t, j) + pe(pos, j));
  }
  store_activation(ctx, pol, y, fe);
}

void embedding_layer::backward(exec_context& ctx, const precision_policy& pol, parameter_list& params,
                               const matrix& dy) {
  parameter& te = params[tokens_table];
  parameter& pe = params[positions_table];
  const format_spec fr = pol.format_for(op_class::reduction);
  check_cols("embedding gradient columns", dy.cols(), te.value.cols());
  te.grad.setZero();
  pe.grad.setZero();
  for (std::size_t r = 0; r < tokens.size(); ++r) {
    const auto row = static_cast<Eigen::Index>(r);
    const Eigen::Index t = tokens[r];
    const Eigen::Index pos = row % context;
    for (Eigen::Index j = 0; j < dy.cols(); ++j) {
      te.grad(t, j) = round_scalar(fr, te.grad(t, j) + dy(row, j));
      pe.grad(pos, j) = round_scalar(fr, pe.grad(pos, j) + dy(row, j));
    }
  }
  cast_gradient(ctx, pol, te);
  cast_gradient(ctx, pol, pe);
}

// ---- residual ------------------------------------------------------------------------------------------

void residual_add(exec_context& ctx, const precision_policy& pol, const matrix& a, const matrix& b, matrix& y) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) {
    throw error("residual operand shape", std::to_string(b.rows()) + "x" + std::to_string(b.cols()),
                std::to_string(a.rows()) + "x" + std::to_string(a.cols()));
  }
  y = a + b;
  const format_spec fe = pol.format_for(op_class::elementwise);
  ctx.activation_stats += cast_in_place(ctx, y, fe);
  store_activation(ctx, pol, y, fe);
}

}  // namespace safeamp::sim
