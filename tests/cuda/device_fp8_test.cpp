// FP8 delayed scaling on the device against its CPU references: the amax kernel against amax_reference (and
// so tensor_amax) on unaligned sizes with NaN/inf/subnormals, and the one-thread update against the core
// delayed_scaling class over 500 steps with a history ring and a margin.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "device_util.hpp"
#include "safeamp/cuda/fp8_scaling.hpp"
#include "safeamp/format/philox.hpp"

using namespace safeamp;
using namespace safeamp::cuda;
using safeamp::cuda::testing::device_array;

TEST_CASE("amax kernel = CPU reference, NaN sticky", "[cuda][gpu][fp8]") {
  for (const std::size_t n : {std::size_t{1}, std::size_t{1000}, (std::size_t{1} << 20) + 7}) {
    std::vector<float> x(n);
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint32_t r = stochastic_bits(4, 0, i);
      x[i] = std::ldexp(static_cast<float>(r % 1000u) - 500.0f, static_cast<int>((r >> 10) % 60u) - 150);
    }
    device_array<float> dx(x);
    device_array<delayed_scaling_state> st(1);
    delayed_scaling_reset(st.data(), nullptr);
    launch_amax(dx.data(), n, st.data(), nullptr);
    INFO("n " << n);
    CHECK(st.download()[0].amax_bits == amax_reference(x));
    x[n / 2] = -std::numeric_limits<float>::infinity();
    dx.upload(x);
    launch_amax(dx.data(), n, st.data(), nullptr);
    CHECK(st.download()[0].amax_bits == 0x7F800000u);
    x[n - 1] = std::numeric_limits<float>::quiet_NaN();
    dx.upload(x);
    launch_amax(dx.data(), n, st.data(), nullptr);
    CHECK(st.download()[0].amax_bits == amax_nan_bits);
  }
}

TEST_CASE("device delayed-scaling update = the delayed_scaling class", "[cuda][gpu][fp8]") {
  const delayed_scaling_config cfg{
      .format = fp8_e4m3, .history_length = 8, .algorithm = amax_algorithm::max, .margin = 1};
  delayed_scaling ref(cfg);
  const delayed_scaling_params p = make_delayed_scaling_params(cfg);
  device_array<delayed_scaling_state> st(1);
  device_array<float> window(7);
  delayed_scaling_reset(st.data(), nullptr);
  device_array<float> x(64);
  for (std::uint64_t step = 0; step < 500; ++step) {
    std::vector<float> t(64);
    for (std::size_t i = 0; i < t.size(); ++i) {
      const std::uint32_t r = stochastic_bits(8, 0, step * 64 + i);
      t[i] = std::ldexp(static_cast<float>(r % 2000u) - 1000.0f, static_cast<int>((step * 7) % 30) - 15);
    }
    if (step % 50 == 7) t[3] = std::numeric_limits<float>::quiet_NaN();
    if (step % 50 != 9) {  // every 50th step the tensor is not used
      x.upload(t);
      launch_amax(x.data(), t.size(), st.data(), nullptr);
      ref.record(t);
    }
    delayed_scaling_update(p, st.data(), window.data(), nullptr);
    (void)ref.update();
    const delayed_scaling_state s = st.download()[0];
    INFO("step " << step);
    REQUIRE(s.scale == ref.scale());
    REQUIRE(s.scale_inv == ref.scale_inv());
    REQUIRE(s.counters == ref.counters());
  }
}
