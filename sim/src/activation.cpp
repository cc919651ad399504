// GELU and ReLU layers (see layers.hpp).
//
// GELU's time is libm's tanh. Two things cut it without changing a bit: the layer's backward reuses the tanh its
// forward computed (activation_layer::gelu_tanh), and an input that is exactly a 16-bit float (fp16 or bf16: what
// the activations of a mixed policy are stored in, so every GELU input there) takes its tanh from a table of the
// 2^16 values, each entry being the very tanh call the element would have made. Inputs that are not such values
// (fp32 policies, fp16 subnormals, inf, NaN) call tanh as before. The loops are activation_kernels.hpp's, one
// back-end per CPU path (table gathers on AVX2 / AVX-512), with the scalar loop's bits.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "activation_kernels.hpp"
#include "layer_common.hpp"
#include "safeamp/config.hpp"
#include "safeamp/error.hpp"
#include "safeamp/format/round.hpp"
#include "safeamp/sim/layers.hpp"
#include "safeamp/sim/parallel.hpp"

namespace safeamp::sim {
namespace {

using detail::gelu_derivative_from_tanh;
using detail::gelu_from_tanh;
using detail::gelu_inner;

// Elements per parallel task of the GELU forward and backward (enough work per task to pay for a thread's start).
constexpr Eigen::Index elementwise_chunk = 8192;

// table[code] = tanh(gelu_inner(value of code)) for every code of format F (entries of inf/NaN codes unused).
template <format_spec F>
const std::vector<float>& gelu_tanh_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(std::size_t{1} << 16);
    for (std::uint32_t c = 0; c < t.size(); ++c) t[c] = std::tanh(gelu_inner(decode<F>(c)));
    return t;
  }();
  return table;
}

// The casts after the activation's arithmetic: y in the elementwise format, stored in policy.output, each element
// counted once (detail::counted_once) in ctx.activation_stats.
void finish_activation_forward(exec_context& ctx, const precision_policy& pol, matrix& y) {
  ctx.activation_stats += detail::cast_then_store(ctx, y, pol.format_for(op_class::elementwise), pol.output);
}

// dx in the elementwise format, then policy.gradient; the counters of both, each element once.
cast_stats finish_activation_backward(exec_context& ctx, const precision_policy& pol, matrix& dx) {
  return detail::cast_then_store(ctx, dx, pol.format_for(op_class::elementwise), pol.gradient);
}

void check_activation_gradient(const matrix& input, const matrix& dy) {
  if (dy.rows() != input.rows() || dy.cols() != input.cols()) {
    throw error("activation gradient shape", std::to_string(dy.rows()) + "x" + std::to_string(dy.cols()),
                std::to_string(input.rows()) + "x" + std::to_string(input.cols()));
  }
}

}  // namespace

namespace detail {

void gelu_forward(cpu_path p, const gelu_forward_args& a) noexcept {
#if defined(SAFEAMP_X86_KERNELS)
  if (p == cpu_path::avx512) return avx512::gelu_forward(a);
  if (p == cpu_path::avx2) return avx2::gelu_forward(a);
#endif
  (void)p;
  gelu_forward_scalar(a, 0, a.n);
}

void gelu_backward(cpu_path p, const float* x, const float* t, const float* dy, float* dx, std::int64_t n) noexcept {
#if defined(SAFEAMP_X86_KERNELS)
  if (p == cpu_path::avx512) return avx512::gelu_backward(x, t, dy, dx, n);
  if (p == cpu_path::avx2) return avx2::gelu_backward(x, t, dy, dx, n);
#endif
  (void)p;
  gelu_backward_scalar(x, t, dy, dx, 0, n);
}

}  // namespace detail

float gelu(float x) noexcept { return gelu_from_tanh(x, std::tanh(gelu_inner(x))); }

float gelu_derivative(float x) noexcept { return gelu_derivative_from_tanh(x, std::tanh(gelu_inner(x))); }

void activation_layer::forward(exec_context& ctx, const precision_policy& pol, const matrix& x, matrix& y) {
  if (&x != &input) input = x;
  forward_in_place(ctx, pol, y);
}

void activation_layer::forward_in_place(exec_context& ctx, const precision_policy& pol, matrix& y) {
  const matrix& x = input;
  if (fn != activation_fn::gelu) {
    gelu_tanh.resize(0, 0);
    activation_forward(ctx, pol, fn, x, y);
    return;
  }
  y.resize(x.rows(), x.cols());
  gelu_tanh.resize(x.rows(), x.cols());
  // The table of the format the policy stores activations in, if it is a 16-bit one (the inputs are checked
  // element by element all the same).
  const bool fp16_inputs = pol.output == fp16;
  const detail::gelu_forward_args all{.in = x.data(),
                                      .t = gelu_tanh.data(),
                                      .out = y.data(),
                                      .n = x.size(),
                                      .table = fp16_inputs          ? gelu_tanh_table<fp16>().data()
                                               : pol.output == bf16 ? gelu_tanh_table<bf16>().data()
                                                                    : nullptr,
                                      .fp16 = fp16_inputs};
  const cpu_path path = safeamp::detail::kernel_path();
  // Each element on its own, so chunks of elements are independent tasks.
  parallel_chunks(ctx.threads, x.size(), elementwise_chunk, [&](std::int64_t begin, std::int64_t end) {
    detail::gelu_forward_args part = all;
    part.in += begin;
    part.t += begin;
    part.out += begin;
    part.n = end - begin;
    detail::gelu_forward(path, part);
  });
  finish_activation_forward(ctx, pol, y);
}

void activation_layer::backward(exec_context& ctx, const precision_policy& pol, const matrix& dy, matrix& dx) {
  if (fn != activation_fn::gelu || gelu_tanh.rows() != input.rows() || gelu_tanh.cols() != input.cols()) {
    (void)activation_backward(ctx, pol, fn, input, dy, dx);
    return;
  }
  check_activation_gradient(input, dy);
  dx.resize(dy.rows(), dy.cols());
  const float* in = input.data();
  const float* t = gelu_tanh.data();
  const float* g = dy.data();
  float* out = dx.data();
  const cpu_path path = safeamp::detail::kernel_path();
  // Each element on its own, as in the forward.
  parallel_chunks(ctx.threads, dy.size(), elementwise_chunk, [&](std::int64_t begin, std::int64_t end) {
    detail::gelu_backward(path, in + begin, t + begin, g + begin, out + begin, end - begin);
  });
  (void)finish_activation_backward(ctx, pol, dx);
}

void activation_forward(exec_context& ctx, const precision_policy& pol, activation_fn fn, const matrix& x, matrix& y) {
  y.resize(x.rows(), x.cols());
  const float* in = x.data();
  float* out = y.data();
  if (fn == activation_fn::gelu) {
    for (Eigen::Index i = 0; i < x.size(); ++i) out[i] = gelu(in[i]);
  } else {
    for (Eigen::Index i = 0; i < x.size(); ++i) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
  }
  finish_activation_forward(ctx, pol, y);
}

cast_stats activation_backward(exec_context& ctx, const precision_policy& pol, activation_fn fn, const matrix& input,
                               const matrix& dy, matrix& dx) {
  check_activation_gradient(input, dy);
  dx.resize(dy.rows(), dy.cols());
  const float* in = input.data();
  const float* g = dy.data();
  float* out = dx.data();
  if (fn == activation_fn::gelu) {
    for (Eigen::Index i = 0; i < dy.size(); ++i) out[i] = g[i] * gelu_derivative(in[i]);
  } else {
    for (Eigen::Index i = 0; i < dy.size(); ++i) out[i] = in[i] > 0.0f ? g[i] : 0.0f;
  }
  return finish_activation_backward(ctx, pol, dx);
}

}  // namespace safeamp::sim
