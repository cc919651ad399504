// The device scaler path against the CPU: multi-tensor unscale (same bits and the same found_inf as
// unscale_and_check), the device update running update_scale (same states step by step), SGD predicated
// on the device flag, no host synchronisation while enqueuing steps, telemetry through pinned memory,
// and the memory probe.
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "busy_wait.hpp"
#include "device_util.hpp"
#include "safeamp/cuda/amp_ops.hpp"
#include "safeamp/cuda/memory_probe.hpp"
#include "safeamp/cuda/telemetry_reader.hpp"
#include "safeamp/format/philox.hpp"
#include "safeamp/scaling/unscale.hpp"
#include "safeamp/scaling/update_scale.hpp"

using namespace safeamp;
using namespace safeamp::cuda;
using safeamp::cuda::testing::device_array;

namespace {

std::vector<float> gradient_like(std::size_t n, std::uint32_t stream) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    // values spread over many binades, as scaled gradients are: mantissa and exponent from random bits
    const std::uint32_t r = stochastic_bits(11, stream, i);
    const float mant = 1.0f + static_cast<float>(r & 0xFFFFu) / 65536.0f;
    const int e = static_cast<int>((r >> 16) % 40u) - 10;
    v[i] = ((r >> 31) != 0u ? -1.0f : 1.0f) * std::ldexp(mant, e);
  }
  return v;
}

device_amp_state read_state(const device_array<device_amp_state>& s) { return s.download()[0]; }

void set_found_inf(device_amp_state* state, int value) {
  TEST_CUDA_CHECK(cudaMemcpy(reinterpret_cast<char*>(state) + offsetof(device_amp_state, found_inf), &value,
                             sizeof(value), cudaMemcpyHostToDevice));
}

}  // namespace

TEST_CASE("multi-tensor unscale: same bits and found_inf as the CPU", "[cuda][gpu][amp]") {
  const scaler_config cfg{.init_scale = 3.0f * 65536.0f};  // not a power of two: 1/scale is rounded
  device_array<device_amp_state> state(1);
  amp_reset(state.data(), cfg, nullptr);

  const std::vector<std::size_t> sizes = {1000, 4099, (std::size_t{1} << 20) + 3};
  std::vector<std::vector<float>> host;
  std::vector<device_array<float>> dev;
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    host.push_back(gradient_like(sizes[t] + 1, static_cast<std::uint32_t>(t)));
    dev.emplace_back(host.back());
  }
  // the second buffer starts one float in: a pointer that is not 16-byte aligned (scalar path)
  std::vector<gradient_span> spans = {tensor_span{dev[0].data(), sizes[0]}, tensor_span{dev[1].data() + 1, sizes[1]},
                                      tensor_span{dev[2].data(), sizes[2]}};
  multi_tensor_unscale(spans, state.data(), nullptr);
  const float inv = inverse_scale(cfg.init_scale);
  bool cpu_found = false;
  cpu_found |= unscale_and_check(std::span<float>(host[0].data(), sizes[0]), inv);
  cpu_found |= unscale_and_check(std::span<float>(host[1].data() + 1, sizes[1]), inv);
  cpu_found |= unscale_and_check(std::span<float>(host[2].data(), sizes[2]), inv);
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    INFO("buffer " << t);
    CHECK(dev[t].download() == host[t]);  // untouched extra element included
  }
  CHECK_FALSE(cpu_found);
  CHECK(read_state(state).found_inf == 0);

  // one inf in the middle buffer raises the flag; a NaN in the last one too
  for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    amp_reset(state.data(), cfg, nullptr);
    std::vector<float> b = host[1];
    b[2000] = bad;
    dev[1].upload(b);
    multi_tensor_unscale(spans, state.data(), nullptr);
    CHECK(read_state(state).found_inf == 1);
  }
  // a finite value that overflows when unscaled by a scale below 1 counts (the result is checked)
  const scaler_config small{.init_scale = 0.25f, .min_scale = 0.125f};
  amp_reset(state.data(), small, nullptr);
  device_array<float> big(std::vector<float>{1.0f, 3.0e38f});
  const gradient_span one[] = {tensor_span{big.data(), 2}};
  multi_tensor_unscale(one, state.data(), nullptr);
  CHECK(read_state(state).found_inf == 1);
}

TEST_CASE("scale_by_loss_scale multiplies by the scale in the device block", "[cuda][gpu][amp]") {
  const scaler_config cfg{.init_scale = 3.0f * 1024.0f};
  device_array<device_amp_state> state(1);
  amp_reset(state.data(), cfg, nullptr);
  const std::vector<float> v = gradient_like(4099, 50);
  device_array<float> d(v);
  scale_by_loss_scale({d.data(), v.size()}, state.data(), nullptr);
  std::vector<float> want(v);
  for (float& x : want) x *= cfg.init_scale;  // one fp32 multiply per element
  CHECK(d.download() == want);
}

TEST_CASE("device scale update follows update_scale step by step", "[cuda][gpu][amp]") {
  const scaler_config cfg{.init_scale = 1024.0f,
                          .growth_factor = 2.0,
                          .backoff_factor = 0.5,
                          .growth_interval = 5,
                          .hysteresis = 2,
                          .mode = hysteresis_mode::since_growth,
                          .min_scale = 1.0f,
                          .max_scale = 65536.0f};
  device_array<device_amp_state> state(1);
  amp_reset(state.data(), cfg, nullptr);
  scaler_state cpu = initial_state(cfg);
  std::int64_t skipped = 0;
  for (std::int64_t step = 0; step < 400; ++step) {
    // bursts of overflows, clean runs long enough to grow, and long overflow runs that hit min_scale
    const std::uint32_t r = stochastic_bits(5, 0, static_cast<std::uint64_t>(step));
    const bool found = (step % 97 > 80) || (r % 11u == 0u);
    set_found_inf(state.data(), found ? 1 : 0);
    scale_update(cfg, state.data(), nullptr);
    cpu = update_scale(cfg, cpu, found);
    skipped += found ? 1 : 0;
    const device_amp_state d = read_state(state);
    INFO("step " << step);
    REQUIRE(d.state == cpu);
    REQUIRE(d.found_inf == 0);
    REQUIRE(d.last.found_inf == found);
    REQUIRE(d.stats.steps == step + 1);
    REQUIRE(d.stats.skipped_steps == skipped);
  }
}

TEST_CASE("SGD runs only when the device flag is clear", "[cuda][gpu][amp]") {
  const std::size_t n = 5000;
  const std::vector<float> w0 = gradient_like(n, 20), g = gradient_like(n, 21), v0 = gradient_like(n, 22);
  const sgd_options o{.learning_rate = 0.01f, .momentum = 0.9f};
  device_array<float> w(w0), dg(g), v(v0);
  device_array<device_amp_state> state(1);
  amp_reset(state.data(), scaler_config{}, nullptr);

  set_found_inf(state.data(), 1);
  sgd_momentum_step({w.data(), n}, dg.data(), v.data(), o, state.data(), nullptr);
  CHECK(w.download() == w0);  // skipped: bit-for-bit unchanged
  CHECK(v.download() == v0);

  set_found_inf(state.data(), 0);
  sgd_momentum_step({w.data(), n}, dg.data(), v.data(), o, state.data(), nullptr);
  std::vector<float> w1 = w0, v1 = v0;
  for (std::size_t i = 0; i < n; ++i) {  // the simulator's arithmetic, each operation rounded (volatile: no fma)
    volatile float prod = o.momentum * v1[i];
    v1[i] = prod + g[i];
    volatile float step = -o.learning_rate * v1[i];
    w1[i] = w1[i] + step;
  }
  CHECK(v.download() == v1);
  CHECK(w.download() == w1);
}

TEST_CASE("AdamW runs only when the device flag is clear, with t counting applied steps", "[cuda][gpu][amp]") {
  const std::size_t n = 3000;
  const adamw_options o{.learning_rate = 1e-3f, .beta1 = 0.9, .beta2 = 0.999, .epsilon = 1e-8f, .weight_decay = 0.01f};
  std::vector<float> w1 = gradient_like(n, 30), m1(n, 0.0f), v1(n, 0.0f);
  device_array<float> w(w1), m(m1), v(v1);
  device_array<device_amp_state> state(1);
  const scaler_config cfg{};
  amp_reset(state.data(), cfg, nullptr);
  std::int64_t applied = 0;
  for (int step = 0; step < 4; ++step) {
    const bool found = step == 1;  // the second step overflows: skipped, t does not advance
    const std::vector<float> g = gradient_like(n, 40 + static_cast<std::uint32_t>(step));
    device_array<float> dg(g);
    set_found_inf(state.data(), found ? 1 : 0);
    adamw_step({w.data(), n}, dg.data(), m.data(), v.data(), o, state.data(), nullptr);
    scale_update(cfg, state.data(), nullptr);
    if (found) continue;
    ++applied;
    const double t = static_cast<double>(applied);
    const auto c1 = static_cast<float>(1.0 / (1.0 - std::pow(o.beta1, t)));
    const auto c2 = static_cast<float>(1.0 / (1.0 - std::pow(o.beta2, t)));
    const auto b1 = static_cast<float>(o.beta1), b2 = static_cast<float>(o.beta2);
    for (std::size_t i = 0; i < n; ++i) {  // each operation rounded to float (volatile stops contraction)
      volatile float a = b1 * m1[i], b = (1.0f - b1) * g[i];
      m1[i] = a + b;
      volatile float c = b2 * v1[i], d0 = (1.0f - b2) * g[i];
      volatile float d = d0 * g[i];
      v1[i] = c + d;
      volatile float num = m1[i] * c1, vc = v1[i] * c2;
      volatile float den = std::sqrt(static_cast<float>(vc)) + o.epsilon;
      volatile float ratio = num / den, decay = o.weight_decay * w1[i];
      volatile float sum = ratio + decay;
      volatile float upd = -o.learning_rate * sum;
      w1[i] = w1[i] + upd;
    }
  }
  CHECK(m.download() == m1);
  CHECK(v.download() == v1);
  CHECK(w.download() == w1);
  CHECK(read_state(state).stats.skipped_steps == 1);
}

TEST_CASE("the scaler path enqueues without host synchronisation", "[cuda][gpu][amp]") {
  cudaStream_t stream = nullptr;
  TEST_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const std::size_t n = std::size_t{1} << 16;
  device_array<float> w(gradient_like(n, 1)), g(gradient_like(n, 2)), v(std::vector<float>(n, 0.0f));
  device_array<device_amp_state> state(1);
  const scaler_config cfg{.init_scale = 65536.0f, .growth_interval = 10};
  const gradient_span grads[] = {tensor_span{g.data(), n}};
  // The scaler block is device memory as cudaMalloc left it: set it before any kernel reads it (its scale
  // could be 0, making the warm-up's inverse scale inf, and every step after it an overflow).
  amp_reset(state.data(), cfg, stream);
  // One step first, so that module loading of every kernel is done before the measured enqueue.
  multi_tensor_unscale(grads, state.data(), stream);
  sgd_momentum_step({w.data(), n}, g.data(), v.data(), sgd_options{}, state.data(), stream);
  scale_update(cfg, state.data(), stream);
  safeamp::cuda::testing::launch_busy_wait(1000, stream);
  amp_reset(state.data(), cfg, stream);
  telemetry_reader telemetry(10);
  TEST_CUDA_CHECK(cudaStreamSynchronize(stream));

  // The device is kept busy for ~300 ms; if any call below waited for the device, the stream would be
  // idle by the time the host returns. It is still busy: the host never synchronised.
  const std::uint64_t busy_ns = 300'000'000;
  safeamp::cuda::testing::launch_busy_wait(busy_ns, stream);
  const auto t0 = std::chrono::steady_clock::now();
  constexpr int steps = 50;
  for (int step = 0; step < steps; ++step) {
    multi_tensor_unscale(grads, state.data(), stream);
    sgd_momentum_step({w.data(), n}, g.data(), v.data(), sgd_options{}, state.data(), stream);
    scale_update(cfg, state.data(), stream);
    telemetry.on_step(step, state.data(), stream);
    (void)telemetry.poll();  // non-blocking: nothing has landed yet
  }
  const double host_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const cudaError_t busy = cudaStreamQuery(stream);
  CHECK(busy == cudaErrorNotReady);
  CHECK(host_seconds < 0.3);
  TEST_CUDA_CHECK(cudaStreamSynchronize(stream));
  const auto snap = telemetry.poll();
  REQUIRE(snap.has_value());
  CHECK(snap->requested_at_step == 0);  // later copies were skipped while the first was in flight
  CHECK(snap->state.stats.steps == 1);  // the copy ran right after step 0's update
  CHECK(telemetry.copies_skipped_in_flight() == 4);
  // after the stream drained, the next due copy is enqueued and lands
  telemetry.on_step(50, state.data(), stream);
  TEST_CUDA_CHECK(cudaStreamSynchronize(stream));
  const auto later = telemetry.poll();
  REQUIRE(later.has_value());
  CHECK(later->state.stats.steps == steps);
  CHECK(later->state.stats.skipped_steps == 0);
  CHECK(later->state.state.scale == 65536.0f * 32.0f);  // 50 clean steps, growth every 10
  TEST_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST_CASE("memory probe: runtime figures, counters and a leak", "[cuda][gpu][memory]") {
  const device_memory_info m = query_device_memory();
  CHECK(m.capacity_bytes > 0);
  CHECK(m.free_bytes <= m.capacity_bytes);
  allocation_counters& c = device_allocations();
  const std::uint64_t live0 = c.live_bytes();
  {
    device_buffer a(1 << 20), b(3 << 20);
    CHECK(c.live_bytes() == live0 + (4u << 20));
    CHECK(c.peak_bytes() >= live0 + (4u << 20));
  }
  CHECK(c.live_bytes() == live0);

  leak_detector detector({.window_steps = 3});
  std::vector<device_buffer> retained;  // a "retained tensor" per step
  bool flagged = false;
  for (int step = 0; step < 6; ++step) {
    device_buffer activation(1 << 20);  // freed at the end of the step: no leak
    retained.emplace_back(1 << 16);     // kept alive: a leak
    flagged = detector.observe(step, c.live_bytes() - activation.size_bytes()).leaking || flagged;
  }
  CHECK(flagged);
}
