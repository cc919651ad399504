// The device loss scaler (basic_loss_scaler over device_memory) against the host loss_scaler on the same
// gradients and flag sequence: same unscaled bits, reports, counters and checkpoint text; checkpoints moving
// host -> device -> host bit-exactly; max_overflows_at_min raised at the next read; no host wait in the steps.
#include "safeamp/cuda/device_scaler.hpp"

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <limits>
#include <vector>

#include "busy_wait.hpp"
#include "device_util.hpp"
#include "safeamp/cuda/amp_ops.hpp"
#include "safeamp/format/philox.hpp"
#include "safeamp/scaling/loss_scaler.hpp"
#include "unit/scaling/scaler_sequences.hpp"

using namespace safeamp;
using namespace safeamp::cuda;
using safeamp::cuda::testing::device_array;

namespace {

const scaler_config every_field = safeamp::testing::every_field_config;

std::vector<float> step_gradient(std::uint64_t step, std::size_t n, bool bad) {
  std::vector<float> g(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t r = stochastic_bits(3, 0, step * 4096 + i);
    g[i] = static_cast<float>(static_cast<std::int32_t>(r % 20001u) - 10000) * 0.37f;
  }
  if (bad) g[n / 2] = std::numeric_limits<float>::infinity();
  return g;
}

bool flag_at(std::uint64_t step) { return safeamp::testing::overflow_at(step); }

}  // namespace

TEST_CASE("device scaler = host scaler on the same flag sequence", "[cuda][gpu][scaler]") {
  loss_scaler host(every_field);
  device_loss_scaler dev(every_field, device_memory(nullptr));
  const std::size_t n = 1000;
  device_array<float> dg(n);
  for (std::uint64_t step = 0; step < 300; ++step) {
    const bool bad = flag_at(step);
    std::vector<float> g = step_gradient(step, n, bad);
    dg.upload(g);
    (void)host.unscale(g);
    const bool clip = step % 5 == 0;
    if (clip) (void)host.clip_grad_norm(std::span<float>(g), 1000.0);
    (void)host.step([] {});
    const step_report want = host.update();
    const gradient_span span = tensor_span{dg.data(), n};
    dev.unscale(span);
    if (clip) dev.clip_grad_norm(std::span<const gradient_span>(&span, 1), 1000.0);
    dev.step([] {});
    dev.update();
    if (step % 25 != 24) continue;
    const scaler_block b = dev.read();
    INFO("step " << step);
    REQUIRE(b.state == host.rule().state);
    REQUIRE(b.stats == host.stats());
    // the device norm is a tree sum in double: the report equals the host's up to the norms
    step_report got = b.last;
    CHECK(got.grad_norm_before_clip == Approx(want.grad_norm_before_clip).epsilon(1000.0 * 0x1p-53));
    got.grad_norm_before_clip = want.grad_norm_before_clip;
    got.grad_norm_after_clip = want.grad_norm_after_clip;
    REQUIRE(got == want);
    if (!clip) REQUIRE(dg.download() == g);  // unscaled bits identical (clipping may differ by an ulp)
  }
  CHECK(dev.memory().reads() == 12);
  CHECK(dev.save_json() == host.save_json());
}

TEST_CASE("device scaler: checkpoints move host -> device -> host bit-exactly", "[cuda][gpu][scaler]") {
  loss_scaler host(every_field);
  for (std::uint64_t step = 0; step < 97; ++step) {
    std::vector<float> g = step_gradient(step, 16, flag_at(step));
    (void)host.unscale(g);
    (void)host.step([] {});
    (void)host.update();
  }
  device_loss_scaler dev(scaler_config{}, device_memory(nullptr));
  dev.load_json(host.save_json());
  CHECK(dev.save_json() == host.save_json());
  device_array<float> dg(16);
  for (std::uint64_t step = 97; step < 200; ++step) {
    std::vector<float> g = step_gradient(step, 16, flag_at(step));
    dg.upload(g);
    (void)host.unscale(g);
    (void)host.step([] {});
    (void)host.update();
    dev.unscale(tensor_span{dg.data(), 16});
    dev.step([] {});
    dev.update();
  }
  loss_scaler back(scaler_config{});
  back.load_json(dev.save_json());
  CHECK(back.checkpoint() == host.checkpoint());
}

TEST_CASE("device scaler: max_overflows_at_min raises at the next read", "[cuda][gpu][scaler]") {
  device_loss_scaler dev(scaler_config{.init_scale = 4.0f, .min_scale = 1.0f, .max_overflows_at_min = 3},
                         device_memory(nullptr));
  device_array<float> g(std::vector<float>{1.0f, std::numeric_limits<float>::infinity()});
  for (int i = 0; i < 5; ++i) {  // 4 -> 2 -> 1, then 3 overflows at the floor: the third is step 4
    dev.unscale(tensor_span{g.data(), 2});
    dev.step([] {});
    dev.update();
  }
  CHECK_THROWS_WITH(dev.stats(), Catch::Contains("max_overflows_at_min is 3") && Catch::Contains("step 4"));
  CHECK(dev.stats().steps == 5);
}

TEST_CASE("device scaler: the step enqueues without a host wait", "[cuda][gpu][scaler]") {
  cudaStream_t stream = nullptr;
  TEST_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  {
    const std::size_t n = std::size_t{1} << 16;
    device_array<float> w(n), g(n), v(n);
    device_loss_scaler dev(scaler_config{.growth_interval = 10}, device_memory(stream));
    const gradient_span grads[] = {tensor_span{g.data(), n}};
    TEST_CUDA_CHECK(cudaMemsetAsync(g.data(), 0, n * sizeof(float), stream));
    TEST_CUDA_CHECK(cudaMemsetAsync(w.data(), 0, n * sizeof(float), stream));
    TEST_CUDA_CHECK(cudaMemsetAsync(v.data(), 0, n * sizeof(float), stream));
    const auto one_step = [&] {
      dev.unscale(grads);
      dev.clip_grad_norm(grads, 1.0);
      dev.step([&] {
        sgd_momentum_step({w.data(), n}, g.data(), v.data(), sgd_options{}, dev.block_in_memory(), stream);
      });
      dev.update();
    };
    one_step();  // module loading before the measured enqueue
    TEST_CUDA_CHECK(cudaStreamSynchronize(stream));
    const std::int64_t reads0 = dev.memory().reads();
    safeamp::cuda::testing::launch_busy_wait(300'000'000, stream);
    for (int step = 0; step < 50; ++step) one_step();
    CHECK(cudaStreamQuery(stream) == cudaErrorNotReady);  // the host never waited for the device
    CHECK(dev.memory().reads() == reads0);
    CHECK(dev.stats().steps == 51);  // the lazy read waits, once
    CHECK(dev.memory().reads() == reads0 + 1);
  }
  TEST_CUDA_CHECK(cudaStreamDestroy(stream));
}
