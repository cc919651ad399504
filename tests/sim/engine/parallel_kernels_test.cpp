// The simulator's elementwise kernels that run on several threads (layer norm forward and backward, the GELU
// backward, casts with a context): for 1, 2 and 3 threads they give the bits of plain sequential loops written
// here in the documented order, and the counters of one sequential cast. The matrices span several tasks with a
// partial last one, so a task that skips or repeats rows, columns or elements, or a chunk keyed from 0 instead of
// its offset, shows.
#include <catch2/catch.hpp>
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include "safeamp/format.hpp"
#include "safeamp/policy.hpp"
#include "safeamp/sim/layers.hpp"
#include "safeamp/sim/parameter.hpp"
#include "safeamp/sim/tensor.hpp"
#include "sim_test_util.hpp"

using namespace safeamp;
using namespace safeamp::sim;
using sim_test::bits_of;
using sim_test::hex;

namespace {

matrix random_matrix(Eigen::Index rows, Eigen::Index cols, std::uint32_t stream, double std_dev = 1.0) {
  matrix m(rows, cols);
  init_normal(m, std_dev, 91, stream, fp32);
  return m;
}

// Elements whose bits differ, the first three named.
std::int64_t mismatches(const char* what, const matrix& got, const matrix& want) {
  REQUIRE(got.rows() == want.rows());
  REQUIRE(got.cols() == want.cols());
  std::int64_t n = 0;
  for (Eigen::Index i = 0; i < got.size(); ++i) {
    if (bits_of(got.data()[i]) != bits_of(want.data()[i]) && ++n <= 3) {
      UNSCOPED_INFO(what << "[" << i << "] = " << hex(got.data()[i]) << ", sequential " << hex(want.data()[i]));
    }
  }
  return n;
}

// Layer norm of the fp32 policy as plain loops: per row, sum, mean, squared deviations, 1/sqrt(var + eps); then
// the backward's per-row sums and per-column parameter sums over the rows in order.
struct norm_reference {
  matrix y, dx, gain_grad, bias_grad;
};

norm_reference sequential_norm(const matrix& x, const matrix& g, const matrix& b, float eps, const matrix& dy) {
  const Eigen::Index rows = x.rows(), width = x.cols();
  const float inv_width = 1.0f / static_cast<float>(width);
  norm_reference r{.y = matrix(rows, width),
                   .dx = matrix(rows, width),
                   .gain_grad = matrix::Zero(1, width),
                   .bias_grad = matrix::Zero(1, width)};
  matrix xhat(rows, width);
  std::vector<float> rstd(static_cast<std::size_t>(rows));
  for (Eigen::Index i = 0; i < rows; ++i) {
    float sum = 0.0f;
    for (Eigen::Index j = 0; j < width; ++j) sum = sum + x(i, j);
    const float mean = sum * inv_width;
    float sq = 0.0f;
    for (Eigen::Index j = 0; j < width; ++j) {
      const float d = x(i, j) - mean;
      sq = sq + d * d;
    }
    const float rs = 1.0f / std::sqrt(sq * inv_width + eps);
    rstd[static_cast<std::size_t>(i)] = rs;
    for (Eigen::Index j = 0; j < width; ++j) {
      xhat(i, j) = (x(i, j) - mean) * rs;
      r.y(i, j) = xhat(i, j) * g(0, j) + b(0, j);
    }
  }
  for (Eigen::Index i = 0; i < rows; ++i) {
    float s1 = 0.0f, s2 = 0.0f;
    for (Eigen::Index j = 0; j < width; ++j) {
      r.gain_grad(0, j) = r.gain_grad(0, j) + dy(i, j) * xhat(i, j);
      r.bias_grad(0, j) = r.bias_grad(0, j) + dy(i, j);
      const float d = dy(i, j) * g(0, j);
      s1 = s1 + d;
      s2 = s2 + d * xhat(i, j);
    }
    const float m1 = s1 * inv_width, m2 = s2 * inv_width;
    for (Eigen::Index j = 0; j < width; ++j) {
      const float d = dy(i, j) * g(0, j);
      r.dx(i, j) = rstd[static_cast<std::size_t>(i)] * (d - m1 - xhat(i, j) * m2);
    }
  }
  return r;
}

std::array<std::uint64_t, 6> counters(const cast_stats& c) {
  return {c.elements, c.overflow, c.underflow, c.subnormal, c.nan, c.infinity};
}

}  // namespace

TEST_CASE("layer norm on several threads has the bits of the sequential loops (rows and parameter columns)") {
  // 300 x 96: row tasks of 85 rows (the last of 45), parameter-column tasks of 32; 28,800 elements start threads.
  // 300 x 100: the last parameter-column task has 4 columns (a partial block of the 16 kept in registers).
  for (const Eigen::Index width : {Eigen::Index{96}, Eigen::Index{100}}) {
    INFO("width " << width);
    const Eigen::Index rows = 300;
    const float eps = 1e-5f;
    const matrix x = random_matrix(rows, width, 1, 2.0);
    const matrix dy = random_matrix(rows, width, 2);
    parameter gain{.name = "gain", .value = random_matrix(1, width, 3), .grad = {}, .grad_stats = {}};
    parameter bias{.name = "bias", .value = random_matrix(1, width, 4), .grad = {}, .grad_stats = {}};
    const norm_reference want = sequential_norm(x, gain.value, bias.value, eps, dy);
    for (const int threads : {1, 2, 3}) {
      INFO("threads " << threads);
      exec_context ctx{.threads = threads};
      layer_norm_saved saved;
      matrix y, dx;
      layer_norm_forward(ctx, presets::fp32, gain.value, bias.value, eps, x, y, saved);
      layer_norm_backward(ctx, presets::fp32, gain, bias, saved, dy, dx);
      CHECK(mismatches("y", y, want.y) == 0);
      CHECK(mismatches("dx", dx, want.dx) == 0);
      CHECK(mismatches("gain grad", gain.grad, want.gain_grad) == 0);
      CHECK(mismatches("bias grad", bias.grad, want.bias_grad) == 0);
    }
  }
}

TEST_CASE("the GELU backward on several threads has the bits of gelu_derivative() element by element") {
  // 200 x 100 fp16 inputs (the forward's tanh table path): tasks of 8192 elements, the last of 3616.
  const precision_policy pol = presets::fp16_mixed;
  matrix x = random_matrix(200, 100, 5, 3.0);
  (void)cast_in_place(x, fp16, round_options{}, philox_key{});
  const matrix dy = random_matrix(200, 100, 6);
  const format_spec fe = pol.format_for(op_class::elementwise);
  matrix want(x.rows(), x.cols());
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    const float v = round_to(fe, dy.data()[i] * gelu_derivative(x.data()[i]));
    want.data()[i] = pol.gradient != fe ? round_to(pol.gradient, v) : v;
  }
  for (const int threads : {1, 2, 3}) {
    INFO("threads " << threads);
    exec_context ctx{.threads = threads};
    activation_layer act{.fn = activation_fn::gelu, .input = {}};
    matrix y, dx;
    act.forward(ctx, pol, x, y);
    act.backward(ctx, pol, dy, dx);
    CHECK(mismatches("dx", dx, want) == 0);
  }
}

TEST_CASE("a cast with a context on several threads keys every element by its index and counts as one cast") {
  // 70,000 elements: chunks of 16,384, the last of 4,464. Stochastic fp16 rounding, so each element's bits depend
  // on its index; magnitudes up to 2^20 overflow and down to 2^-30 underflow, so every counter is nonzero.
  matrix m = random_matrix(700, 100, 7);
  for (Eigen::Index i = 0; i < m.size(); ++i) {
    const double e = -30.0 + 50.0 * static_cast<double>(i % 97) / 96.0;
    m.data()[i] = static_cast<float>(static_cast<double>(m.data()[i]) * std::exp2(e));
  }
  const round_options stochastic{.mode = rounding::stochastic};
  exec_context key_source{.rounding = stochastic, .seed = 5, .step = 3, .threads = 1};
  matrix want = m;
  const cast_stats want_stats = cast_in_place(want, fp16, stochastic, key_source.next_key());
  REQUIRE(want_stats.overflow > 0);
  REQUIRE(want_stats.underflow > 0);
  REQUIRE(want_stats.subnormal > 0);
  for (const int threads : {1, 2, 3}) {
    INFO("threads " << threads);
    exec_context ctx{.rounding = stochastic, .seed = 5, .step = 3, .threads = threads};
    matrix got = m;
    const cast_stats s = cast_in_place(ctx, got, fp16);
    CHECK(mismatches("cast", got, want) == 0);
    CHECK(counters(s) == counters(want_stats));  // elements, overflow, underflow, subnormal, nan, infinity
    CHECK(ctx.cast_site == 1);  // one key taken, as one sequential cast takes
  }
}
