// GELU and ReLU layers (see layers.hpp).
//
// GELU's time is libm's tanh. Two things cut it without changing a bit: the layer's backward reuses the tanh its
// forward computed (activation_layer::gelu_tanh), and an input that is exactly a 16-bit float (fp16 or bf16: what
// the activations of a mixed policy are stored in, so every GELU input there) takes its tanh from a table of the
// 2^16 values, each entry being the very tanh call the element would have made. Inputs that are not such values
// (fp32 policies, fp16 subnormals, inf, NaN) call tanh as before.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "layer_common.hpp"
#include "safeamp/config.hpp"
#include "safeamp/error.hpp"
#include "safeamp/format/round.hpp"
#include "safeamp/sim/layers.hpp"
#include "safeamp/sim/parallel.hpp"

namespace safeamp::sim {
namespace {

constexpr float gelu_c = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float gelu_a = 0.044715f;

// Elements per parallel task of the GELU forward (enough work per task to pay for a thread's start).
constexpr Eigen::Index elementwise_chunk = 8192;

// GELU in three parts, so that the backward can take the forward's tanh instead of calling tanh again (the
// same float expressions in the same order as gelu() and gelu_derivative(), hence the same bits).
inline float gelu_inner(float x) noexcept { return gelu_c * (x + gelu_a * x * x * x); }
inline float gelu_from_tanh(float x, float t) noexcept { return 0.5f * x * (1.0f + t); }
inline float gelu_derivative_from_tanh(float x, float t) noexcept {
  const float du = gelu_c * (1.0f + 3.0f * gelu_a * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

// ---- tanh of the GELU inner term for 16-bit inputs -----------------------------------------------------
//   float bits: s | e (8) | m (23).
//   bf16: x is a bf16 value iff the low 16 bits of m are zero; its code is bits >> 16 (inf/NaN excluded here).
//   fp16: x is a normal fp16 value iff e - 127 lies in [-14, 15] and the low 13 bits of m are zero; its code is
//         s << 15 | (e - 112) << 10 | m >> 13. Zero is code s << 15. fp16 subnormals are left to tanh.
constexpr std::uint32_t no_code = 0xFFFFFFFFu;

std::uint32_t bf16_code(std::uint32_t bits) noexcept {
  const bool finite = ((bits >> 23) & 0xFFu) != 0xFFu;
  return (bits & 0xFFFFu) == 0 && finite ? bits >> 16 : no_code;
}

std::uint32_t fp16_code(std::uint32_t bits) noexcept {
  const std::uint32_t e = (bits >> 23) & 0xFFu;
  const std::uint32_t sign = (bits >> 31) << 15;
  if ((bits & 0x7FFFFFFFu) == 0) return sign;
  if ((bits & 0x1FFFu) != 0 || e < 127 - 14 || e > 127 + 15) return no_code;
  return sign | ((e - 112) << 10) | ((bits & 0x7FFFFFu) >> 13);
}

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

// out[i] = gelu(in[i]), t[i] = its tanh, for i in [begin, end); Code gives the 16-bit code of a float or no_code.
template <class Code>
void gelu_span(const float* in, float* t, float* out, Eigen::Index begin, Eigen::Index end, const float* table,
               Code code) noexcept {
  for (Eigen::Index i = begin; i < end; ++i) {
    const std::uint32_t c = table != nullptr ? code(safeamp::bit_cast<std::uint32_t>(in[i])) : no_code;
    t[i] = c != no_code ? table[c] : std::tanh(gelu_inner(in[i]));
    out[i] = gelu_from_tanh(in[i], t[i]);
  }
}

// The casts after the activation's arithmetic: y in the elementwise format, stored in policy.output.
void finish_activation_forward(exec_context& ctx, const precision_policy& pol, matrix& y) {
  const format_spec fe = pol.format_for(op_class::elementwise);
  ctx.activation_stats += cast_in_place(ctx, y, fe);
  detail::store_activation(ctx, pol, y, fe);
}

// dx in the elementwise format, then policy.gradient.
void finish_activation_backward(exec_context& ctx, const precision_policy& pol, matrix& dx) {
  (void)cast_in_place(ctx, dx, pol.format_for(op_class::elementwise));
  if (pol.gradient != pol.format_for(op_class::elementwise)) (void)cast_in_place(ctx, dx, pol.gradient);
}

void check_activation_gradient(const matrix& input, const matrix& dy) {
  if (dy.rows() != input.rows() || dy.cols() != input.cols()) {
    throw error("activation gradient shape", std::to_string(dy.rows()) + "x" + std::to_string(dy.cols()),
                std::to_string(input.rows()) + "x" + std::to_string(input.cols()));
  }
}

}  // namespace

float gelu(float x) noexcept { return gelu_from_tanh(x, std::tanh(gelu_inner(x))); }

float gelu_derivative(float x) noexcept { return gelu_derivative_from_tanh(x, std::tanh(gelu_inner(x))); }

void activation_layer::forward(exec_context& ctx, const precision_policy& pol, const matrix& x, matrix& y) {
  input = x;
  if (fn != activation_fn::gelu) {
    gelu_tanh.resize(0, 0);
    activation_forward(ctx, pol, fn, x, y);
    return;
  }
  y.resize(x.rows(), x.cols());
  gelu_tanh.resize(x.rows(), x.cols());
  const float* in = x.data();
  float* t = gelu_tanh.data();
  float* out = y.data();
  // The table of the format the policy stores activations in, if it is a 16-bit one (the inputs are checked
  // element by element all the same).
  const bool fp16_inputs = pol.output == fp16;
  const float* table = fp16_inputs          ? gelu_tanh_table<fp16>().data()
                       : pol.output == bf16 ? gelu_tanh_table<bf16>().data()
                                            : nullptr;
  // Each element on its own, so chunks of elements are independent tasks.
  parallel_chunks(ctx.threads, x.size(), elementwise_chunk, [&](std::int64_t begin, std::int64_t end) {
    if (fp16_inputs) {
      gelu_span(in, t, out, begin, end, table, fp16_code);
    } else {
      gelu_span(in, t, out, begin, end, table, bf16_code);
    }
  });
  finish_activation_forward(ctx, pol, y);
}

void activation_layer::backward(exec_context& ctx, const precision_policy& pol, const matrix& dy, matrix& dx) {
  if (fn != activation_fn::gelu || gelu_tanh.rows() != input.rows() || gelu_tanh.cols() != input.cols()) {
    activation_backward(ctx, pol, fn, input, dy, dx);
    return;
  }
  check_activation_gradient(input, dy);
  dx.resize(dy.rows(), dy.cols());
  const float* in = input.data();
  const float* t = gelu_tanh.data();
  const float* g = dy.data();
  float* out = dx.data();
  // Each element on its own, as in the forward.
  parallel_chunks(ctx.threads, dy.size(), elementwise_chunk, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) out[i] = g[i] * gelu_derivative_from_tanh(in[i], t[i]);
  });
  finish_activation_backward(ctx, pol, dx);
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

void activation_backward(exec_context& ctx, const precision_policy& pol, activation_fn fn, const matrix& input,
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
  finish_activation_backward(ctx, pol, dx);
}

}  // namespace safeamp::sim
