// autocast's one-call GELU, layer norm and softmax: forward values worked by hand (fp32 policy), the rounding and
// counting of a low-precision policy, and each backward against central finite differences of its forward.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "safeamp/format.hpp"
#include "safeamp/policy/precision_policy.hpp"
#include "safeamp/sim/autocast.hpp"

using namespace safeamp;
using namespace safeamp::sim;

namespace {

parameter row_parameter(std::initializer_list<float> v) {
  parameter p;
  p.value.resize(1, static_cast<Eigen::Index>(v.size()));
  Eigen::Index j = 0;
  for (const float x : v) p.value(0, j++) = x;
  return p;
}

// sum(w .* f(x)) for a fixed weighting w: the scalar whose gradient with respect to x is f's backward applied to w.
template <class F>
double weighted(const matrix& w, F&& f, const matrix& x) {
  const matrix y = f(x);
  double s = 0.0;
  for (Eigen::Index i = 0; i < y.size(); ++i) s += static_cast<double>(w.data()[i]) * y.data()[i];
  return s;
}

template <class F>
matrix finite_difference(const matrix& w, F&& f, const matrix& x, float h = 1e-2f) {
  matrix g(x.rows(), x.cols());
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    matrix up = x, down = x;
    up.data()[i] += h;
    down.data()[i] -= h;
    g.data()[i] = static_cast<float>((weighted(w, f, up) - weighted(w, f, down)) / (2.0 * h));
  }
  return g;
}

}  // namespace

TEST_CASE("autocast gelu: torch's tanh GELU values, rounded to the policy, backward = finite differences") {
  autocast in_fp32(presets::fp32);
  matrix x(1, 4);
  x << -1.0f, 0.0f, 1.0f, 3.0f;
  const matrix y = in_fp32.gelu(x);
  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) worked out: gelu(1) = 0.5 (1 + tanh(0.7978846 * 1.044715)).
  CHECK(y(0, 0) == Approx(-0.158808).epsilon(1e-5));
  CHECK(y(0, 1) == 0.0f);
  CHECK(y(0, 2) == Approx(0.841192).epsilon(1e-5));
  CHECK(y(0, 3) == Approx(2.996363).epsilon(1e-5));
  CHECK(in_fp32.counts(op_class::elementwise).elements == 4);

  // Under fp16-mixed the result is an fp16 value: gelu(1) = 0.841192 rounds to 0.84130859375 (spacing 2^-11).
  autocast half(presets::fp16_mixed);
  const matrix yh = half.gelu(x);
  CHECK(yh(0, 2) == 0.84130859375f);
  CHECK(round_to(fp16, yh(0, 3)) == yh(0, 3));
  CHECK(half.counts(op_class::elementwise).elements >= 4);

  matrix w(1, 4);
  w << 0.5f, -1.0f, 2.0f, 0.25f;
  const matrix dx = in_fp32.gelu_backward(x, w);
  const matrix fd = finite_difference(w, [&](const matrix& v) { return in_fp32.gelu(v); }, x);
  for (Eigen::Index i = 0; i < x.size(); ++i) CHECK(dx.data()[i] == Approx(fd.data()[i]).margin(2e-4));
  CHECK_THROWS_AS(in_fp32.gelu_backward(x, matrix(2, 4)), safeamp::error);
}

TEST_CASE("autocast layer_norm: hand-worked rows, fp16 storage, gain/bias/input gradients by finite differences") {
  autocast in_fp32(presets::fp32);
  const parameter gain = row_parameter({1.0f, 1.0f, 1.0f});
  const parameter bias = row_parameter({0.0f, 0.0f, 0.0f});
  matrix x(2, 3);
  x << 1.0f, 2.0f, 3.0f,  //
      -4.0f, 0.0f, 4.0f;
  layer_norm_saved saved;
  const matrix y = in_fp32.layer_norm(x, gain, bias, saved);
  // Row 0: mean 2, variance 2/3, so (1 - 2) / sqrt(2/3 + 1e-5) = -1.2247357; row 1: variance 32/3, -1.2247442.
  CHECK(y(0, 0) == Approx(-1.2247357).epsilon(1e-6));
  CHECK(y(0, 1) == 0.0f);
  CHECK(y(0, 2) == Approx(1.2247357).epsilon(1e-6));
  CHECK(y(1, 0) == Approx(-4.0 / std::sqrt(32.0 / 3.0 + 1e-5)).epsilon(1e-6));
  REQUIRE(saved.rstd.size() == 2);
  CHECK(saved.rstd[0] == Approx(1.0 / std::sqrt(2.0 / 3.0 + 1e-5)).epsilon(1e-6));

  // Gain and bias apply per column: y = x_hat * g + b.
  const parameter g2 = row_parameter({2.0f, 1.0f, 0.5f});
  const parameter b2 = row_parameter({1.0f, -1.0f, 0.0f});
  layer_norm_saved s2;
  const matrix y2 = in_fp32.layer_norm(x, g2, b2, s2);
  CHECK(y2(0, 0) == Approx(2.0 * -1.2247357 + 1.0).epsilon(1e-6));
  CHECK(y2(0, 1) == Approx(-1.0).epsilon(1e-6));

  // bf16-mixed: the normalization runs in fp32 (the preset keeps it wide), the stored output is a bf16 value.
  autocast bf(presets::bf16_mixed);
  layer_norm_saved sb;
  const matrix yb = bf.layer_norm(x, g2, b2, sb);
  for (Eigen::Index i = 0; i < yb.size(); ++i) CHECK(round_to(bf16, yb.data()[i]) == yb.data()[i]);
  CHECK(bf.counts(op_class::normalization).elements == 6);  // the one storage cast, 6 elements
  CHECK(bf.counts(op_class::normalization).elements != 0);

  // Backward against finite differences of sum(w .* layer_norm(x)).
  matrix w(2, 3);
  w << 0.3f, -0.7f, 1.1f,  //
      2.0f, 0.5f, -1.5f;
  parameter g = g2, b = b2;
  layer_norm_saved sv;
  (void)in_fp32.layer_norm(x, g, b, sv);
  const matrix dx = in_fp32.layer_norm_backward(sv, g, b, w);
  const matrix fd = finite_difference(w, [&](const matrix& v) {
    layer_norm_saved tmp;
    return in_fp32.layer_norm(v, g2, b2, tmp);
  }, x);
  for (Eigen::Index i = 0; i < x.size(); ++i) CHECK(dx.data()[i] == Approx(fd.data()[i]).margin(2e-3));
  // d/d gain_j = sum_r w(r, j) x_hat(r, j); d/d bias_j = sum_r w(r, j).
  for (Eigen::Index j = 0; j < 3; ++j) {
    CHECK(b.grad(0, j) == Approx(w(0, j) + w(1, j)).epsilon(1e-6));
    CHECK(g.grad(0, j) == Approx(w(0, j) * sv.normalized(0, j) + w(1, j) * sv.normalized(1, j)).epsilon(1e-5));
  }
  CHECK(in_fp32.counts(op_class::reduction).elements == 6);  // gain and bias gradients, 3 + 3
  CHECK(g.grad_stats.elements == 3);

  CHECK_THROWS_AS(in_fp32.layer_norm(matrix(2, 4), gain, bias, saved), safeamp::error);
  CHECK_THROWS_AS(in_fp32.layer_norm(x, gain, bias, saved, 0.0f), safeamp::error);
  CHECK_THROWS_AS(in_fp32.layer_norm(x, gain, bias, saved, std::numeric_limits<float>::quiet_NaN()), safeamp::error);
}

TEST_CASE("autocast softmax: exact rows, causal mask, NaN counted, backward = finite differences") {
  autocast in_fp32(presets::fp32);
  matrix s(2, 3);
  s << 0.0f, std::log(2.0f), std::log(5.0f),  //
      1.0f, 1.0f, 1.0f;
  const matrix p = in_fp32.softmax(s);
  CHECK(p(0, 0) == Approx(1.0 / 8.0).epsilon(1e-6));
  CHECK(p(0, 1) == Approx(2.0 / 8.0).epsilon(1e-6));
  CHECK(p(0, 2) == Approx(5.0 / 8.0).epsilon(1e-6));
  CHECK(p(1, 1) == Approx(1.0 / 3.0).epsilon(1e-6));

  const matrix pc = in_fp32.softmax(s, true);
  CHECK(pc(0, 0) == 1.0f);  // row 0 keeps column 0 only
  CHECK(pc(0, 1) == 0.0f);
  CHECK(pc(1, 0) == Approx(0.5).epsilon(1e-6));
  CHECK(pc(1, 2) == 0.0f);

  matrix bad = s;
  bad(1, 1) = std::numeric_limits<float>::quiet_NaN();
  (void)in_fp32.softmax(bad);
  CHECK(in_fp32.counts(op_class::softmax).nan == 3);  // a NaN score poisons its row

  matrix w(2, 3);
  w << 1.0f, -2.0f, 0.5f,  //
      0.25f, 3.0f, -1.0f;
  const matrix ds = in_fp32.softmax_backward(p, w);
  const matrix fd = finite_difference(w, [&](const matrix& v) { return in_fp32.softmax(v); }, s, 1e-3f);
  for (Eigen::Index i = 0; i < s.size(); ++i) CHECK(ds.data()[i] == Approx(fd.data()[i]).margin(1e-3));
  CHECK_THROWS_AS(in_fp32.softmax_backward(p, matrix(3, 2)), safeamp::error);
}
