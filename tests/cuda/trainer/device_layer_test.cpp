// The GPU trainer's layer kernels (examples/cuda/layer_kernels.hpp) against the simulator's
// host code: bias + cast and column sums bit for bit (same operations in the same order), GELU/ReLU and the
// softmax cross-entropy within a few fp32 ulps (only tanhf/expf/logf may differ), the global norm and clip
// against the core clip_grad_norm. Needs a GPU (the main exits 77 without one).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

#include "cuda/device_util.hpp"
#include "layer_kernels.hpp"
#include "safeamp/cuda/amp_ops.hpp"
#include "safeamp/format/philox.hpp"
#include "safeamp/format/round.hpp"
#include "safeamp/policy.hpp"
#include "safeamp/scaling/grad_clip.hpp"
#include "safeamp/sim/layers.hpp"
#include "safeamp/sim/loss.hpp"

using namespace safeamp;
using safeamp::cuda::testing::device_array;

namespace {

std::vector<float> uniform(std::size_t n, std::uint32_t stream, float lo, float hi) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const float u = static_cast<float>(stochastic_bits(5, stream, i) >> 8) / 16777216.0f;  // [0, 1)
    v[i] = lo + (hi - lo) * u;
  }
  return v;
}

void wait_for_device() { TEST_CUDA_CHECK(cudaDeviceSynchronize()); }

// |a - b| within `ulps` units in the last place of fp32 at the larger magnitude (2^-23 relative per ulp).
bool close_ulps(float a, float b, float ulps) {
  if (a == b) return true;
  const float mag = std::max(std::fabs(a), std::fabs(b));
  return std::fabs(a - b) <= ulps * std::ldexp(mag, -23);
}

}  // namespace

TEST_CASE("add_bias_and_cast and column_sums equal the host's rounding bit for bit", "[cuda][gpu][trainer]") {
  const std::int64_t rows = 37, cols = 19;
  const std::vector<float> y = uniform(static_cast<std::size_t>(rows * cols), 1, -300.0f, 300.0f);
  const std::vector<float> b = uniform(static_cast<std::size_t>(cols), 2, -2.0f, 2.0f);
  for (const format_spec f : {fp16, bf16, fp32}) {
    device_array<float> dy(y), db(b);
    cuda::add_bias_and_cast(dy.data(), db.data(), rows, cols, {.format = f, .rounding = {}, .key = {}}, nullptr);
    const std::vector<float> got = dy.download();
    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < y.size(); ++i) {
      const float want = round_to(f, y[i] + b[i % static_cast<std::size_t>(cols)]);
      mismatches += std::memcmp(&want, &got[i], sizeof(float)) != 0 ? 1u : 0u;
    }
    CHECK(mismatches == 0);

    device_array<float> sums(static_cast<std::size_t>(cols));
    device_array<float> in(y);
    cuda::column_sums(in.data(), rows, cols, f, sums.data(), nullptr);
    const std::vector<float> s = sums.download();
    for (std::int64_t c = 0; c < cols; ++c) {
      float want = 0.0f;  // left to right, each addition rounded to f (the simulator's column_sums)
      for (std::int64_t r = 0; r < rows; ++r)
        want = f == fp32 ? want + y[static_cast<std::size_t>(r * cols + c)]
                         : round_to(f, want + y[static_cast<std::size_t>(r * cols + c)]);
      CHECK(s[static_cast<std::size_t>(c)] == want);
    }
  }
}

TEST_CASE("GELU and ReLU forward/backward match the simulator's formulas", "[cuda][gpu][trainer]") {
  const std::vector<float> x = uniform(4096, 3, -8.0f, 8.0f);
  const std::vector<float> dy = uniform(4096, 4, -1.0f, 1.0f);
  device_array<float> dx_in(x), ddy(dy), out(x.size());
  const cuda::cast_spec f32{.format = fp32, .rounding = {}, .key = {}};
  cuda::activation_forward(cuda::activation_fn::gelu, dx_in.data(), out.data(), x.size(), f32, f32, nullptr);
  std::vector<float> y = out.download();
  // tanhf may differ from the host's tanh by 2 ulps (<= 2^-23 absolute for |t| <= 1); 0.5 x (1 + t) turns that
  // into 0.5 |x| 2^-22, plus a few ulps of rounding of the result itself.
  std::size_t far = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float want = sim::gelu(x[i]);
    const float tol = 0.5f * std::fabs(x[i]) * 0x1p-22f + 4.0f * 0x1p-23f * std::fabs(want) + 1e-30f;
    far += std::fabs(y[i] - want) <= tol ? 0u : 1u;
  }
  CHECK(far == 0);
  cuda::activation_backward(cuda::activation_fn::gelu, dx_in.data(), ddy.data(), out.data(), x.size(), f32, f32,
                            nullptr);
  y = out.download();
  far = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    // d/dt of the derivative is 0.5 - x t du, so a 2-ulp tanh difference moves it by (0.5 + |x| du) 2^-22; the
    // two terms (magnitude <= 1 + |x| du) add a few ulps of rounding: 16 ulps of (1 + |x| du), times |dy|.
    const float want = dy[i] * sim::gelu_derivative(x[i]);
    const float du = 0.7978845608f * (1.0f + 3.0f * 0.044715f * x[i] * x[i]);
    const float tol = std::fabs(dy[i]) * (1.0f + std::fabs(x[i]) * du) * 16.0f * 0x1p-23f;
    far += std::fabs(y[i] - want) <= tol ? 0u : 1u;
  }
  CHECK(far == 0);
  // ReLU has no transcendental: exact, and an fp16 store rounds exactly as the host does.
  const cuda::cast_spec h{.format = fp16, .rounding = {}, .key = {}};
  cuda::activation_forward(cuda::activation_fn::relu, dx_in.data(), out.data(), x.size(), f32, h, nullptr);
  y = out.download();
  for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(y[i] == round_to(fp16, x[i] > 0.0f ? x[i] : 0.0f));
}

TEST_CASE("softmax cross-entropy matches sim::cross_entropy and scales its gradient on the device",
          "[cuda][gpu][trainer]") {
  const std::int64_t rows = 64, classes = 10;
  const std::vector<float> z = uniform(static_cast<std::size_t>(rows * classes), 6, -6.0f, 6.0f);
  std::vector<std::int32_t> t(static_cast<std::size_t>(rows));
  for (std::size_t r = 0; r < t.size(); ++r) t[r] = static_cast<std::int32_t>(r % static_cast<std::size_t>(classes));
  const scaler_config cfg{.init_scale = 1024.0f};
  device_array<cuda::device_amp_state> state(1);
  cuda::amp_reset(state.data(), cfg, nullptr);
  device_array<float> dz(z), row_loss(t.size()), dlogits(z.size());
  device_array<std::int32_t> dt(t), pred(t.size());
  device_array<cuda::device_step_record> rec(1);
  const double factor = 0.5;
  cuda::softmax_cross_entropy(dz.data(), dt.data(), rows, classes, fp32, factor, state.data(), row_loss.data(),
                              pred.data(), dlogits.data(), rec.data(), nullptr);
  wait_for_device();

  sim::matrix logits(rows, classes);
  std::copy(z.begin(), z.end(), logits.data());
  sim::exec_context ctx;
  sim::matrix want_d;
  const sim::loss_result want = sim::cross_entropy(ctx, presets::fp32, logits, t, 1024.0 * factor, &want_d);
  const cuda::device_step_record r = rec.download()[0];
  CHECK(r.scale == 1024.0f);
  // Each row loss lse - z_t has magnitude <= 6 + ln 10 < 16: expf/logf differences of a few ulps give at most
  // 8 ulps of 16 per row, and the fp32 running sum adds one ulp of the total per row (rows of them, / rows).
  const double row_tol = 8.0 * 16.0 * 0x1p-23;
  CHECK(std::fabs(r.loss - want.loss * factor) <= (row_tol + static_cast<double>(rows) * 0x1p-23 * want.loss) * factor);
  // dlogits = coef (p - onehot), p = exp(z - lse) <= 1. The argument z - lse (|.| < 16) may differ by 4 ulps of
  // 16 (logf and the roundings of lse), which moves p by at most that much (absolute, as p <= 1); expf adds
  // 4 ulps of 1. Times coef = scale * factor / rows.
  const float coef = static_cast<float>(1024.0 * factor / static_cast<double>(rows));
  const float d_tol = coef * (4.0f * 0x1p-20f + 4.0f * 0x1p-23f);
  const std::vector<float> d = dlogits.download();
  const std::vector<std::int32_t> p = pred.download();
  std::size_t far = 0;
  for (std::size_t i = 0; i < d.size(); ++i) far += std::fabs(d[i] - want_d.data()[i]) <= d_tol ? 0u : 1u;
  CHECK(far == 0);
  for (std::size_t i = 0; i < p.size(); ++i) CHECK(p[i] == want.predicted[i]);
}

TEST_CASE("global norm and clip match the core clip_grad_norm; the flag is recorded", "[cuda][gpu][trainer]") {
  std::vector<float> a = uniform(5000, 7, -3.0f, 3.0f), b = uniform(333, 8, -1.0f, 1.0f);
  device_array<float> da(a), db(b);
  const std::vector<cuda::gradient_span> spans = {cuda::tensor_span{.data = da.data(), .elements = a.size()},
                                                  cuda::tensor_span{.data = db.data(), .elements = b.size()}};
  device_array<double> scratch(cuda::norm_scratch_doubles);
  device_array<cuda::device_amp_state> state(1);
  cuda::amp_reset(state.data(), scaler_config{}, nullptr);
  const double max_norm = 10.0;
  cuda::global_norm_and_clip(spans, max_norm, scratch.data(), state.data(), nullptr);
  wait_for_device();
  const std::span<float> host[] = {std::span<float>(a), std::span<float>(b)};
  const clip_result want = clip_grad_norm(std::span<const std::span<float>>(host), max_norm);
  REQUIRE(want.clipped);
  const scaler_block r = state.download()[0];
  // sums of 5333 squares in double, in a different order: relative 5333 * 2^-53 is the bound
  CHECK(r.norm_before == Approx(want.norm_before).epsilon(5333.0 * 0x1p-53));
  CHECK(r.norm_after == Approx(want.norm_after).epsilon(5333.0 * 0x1p-53 + 0x1p-24));
  CHECK(r.found_inf == 0);
  CHECK(r.norm_non_finite == 0);
  const std::vector<float> ga = da.download();
  std::size_t far = 0;
  // a and the host's clipped values: the factor f32(max / norm) may differ by an ulp when the norms do.
  for (std::size_t i = 0; i < a.size(); ++i) far += close_ulps(ga[i], a[i], 2.0f) ? 0u : 1u;
  CHECK(far == 0);

  // A non-finite gradient: the norm is not finite, nothing is scaled, the step's flag is raised.
  cuda::write_value(db.data(), std::numeric_limits<float>::infinity(), nullptr);
  const std::vector<float> before = da.download();
  cuda::global_norm_and_clip(spans, max_norm, scratch.data(), state.data(), nullptr);
  wait_for_device();
  const scaler_block r2 = state.download()[0];
  CHECK_FALSE(std::isfinite(r2.norm_before));
  CHECK(r2.found_inf == 1);  // clipping on: a non-finite norm is an overflow (loss_scaler::clip_grad_norm)
  CHECK(r2.norm_non_finite == 1);
  CHECK(da.download() == before);
}
