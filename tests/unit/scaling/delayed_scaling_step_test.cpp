// The plain-data delayed-scaling step (what the device update kernel runs) against the delayed_scaling class
// (its CPU reference) over long random amax sequences with zeros, inf, NaN and tiny values; amax_fold (the
// amax kernels' per-element step) against tensor_amax.
#include "safeamp/scaling/delayed_scaling_step.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "safeamp/format/philox.hpp"

using namespace safeamp;

namespace {

float random_amax(std::uint64_t i) {
  const std::uint32_t r = stochastic_bits(21, 1, i);
  switch (r % 23u) {
    case 0:
      return 0.0f;  // tensor not used this step
    case 1:
      return std::numeric_limits<float>::infinity();
    case 2:
      return std::numeric_limits<float>::quiet_NaN();
    case 3:
      return 1e-45f;  // the smallest subnormal: 448 / it overflows, the scale is clamped
    default:
      return std::ldexp(1.0f + static_cast<float>(r >> 12) / 1048576.0f, static_cast<int>((r >> 5) % 40u) - 20);
  }
}

}  // namespace

TEST_CASE("amax_fold gives tensor_amax's bits (NaN wins, signs and -0 ignored)") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<std::vector<float>> cases = {
      {},
      {-0.0f},
      {1.0f, -3.5f, 2.0f},
      {1e-45f, -1e-40f},
      {-inf, 3.0f},
      {1.0f, nan, -inf},
      {-nan, 2.0f},
      {safeamp::bit_cast<float>(0xFF800001u), 1.0f},  // a signalling NaN with the sign bit set
  };
  for (const std::vector<float>& c : cases) {
    std::uint32_t acc = 0;
    for (const float x : c) acc = amax_fold(acc, x);
    const float want = tensor_amax(c);
    INFO("case of " << c.size() << " values");
    if (std::isnan(want)) {
      CHECK(acc == amax_nan_bits);
    } else {
      CHECK(acc == safeamp::bit_cast<std::uint32_t>(want));
    }
  }
  CHECK(amax_fold(0, -2.0f) == 0x40000000u);  // |-2| = 2.0f
  CHECK(amax_fold(amax_nan_bits, inf) == amax_nan_bits);
}

TEST_CASE("delayed_scaling_step follows the delayed_scaling class bit for bit") {
  delayed_scaling_counters total{};  // over every configuration: the sequences reached every branch
  for (const std::int32_t length : {1, 2, 5, 16}) {
    for (const amax_algorithm algo : {amax_algorithm::max, amax_algorithm::most_recent}) {
      for (const std::int32_t margin : {0, 3}) {
        const delayed_scaling_config cfg{
            .format = fp8_e4m3, .history_length = length, .algorithm = algo, .margin = margin};
        delayed_scaling ref(cfg);
        const delayed_scaling_params p = make_delayed_scaling_params(cfg);
        delayed_scaling_state s{};
        std::vector<float> window(static_cast<std::size_t>(length), -1.0f);
        for (std::uint64_t step = 0; step < 2000; ++step) {
          // one to three observations per step, as several GEMMs may read one tensor
          const int observations = 1 + static_cast<int>(step % 3);
          for (int o = 0; o < observations; ++o) {
            const float a = random_amax(step * 4 + static_cast<std::uint64_t>(o));
            ref.record_amax(a);
            s.amax_bits = amax_fold(s.amax_bits, a);
          }
          (void)ref.update();
          delayed_scaling_step(p, s, window.data());
          INFO("length " << length << ", margin " << margin << ", step " << step);
          REQUIRE(safeamp::bit_cast<std::uint32_t>(s.scale) == safeamp::bit_cast<std::uint32_t>(ref.scale()));
          REQUIRE(safeamp::bit_cast<std::uint32_t>(s.scale_inv) == safeamp::bit_cast<std::uint32_t>(ref.scale_inv()));
          REQUIRE(s.counters == ref.counters());
          REQUIRE(s.window_count == static_cast<std::int32_t>(ref.history().size()));
          for (std::int32_t i = 0; i < s.window_count; ++i) {  // the ring, oldest first
            REQUIRE(window[static_cast<std::size_t>((s.window_oldest + i) % (length - 1))] ==
                    ref.history()[static_cast<std::size_t>(i)]);
          }
        }
        total.clamped_scales += ref.counters().clamped_scales;
        total.non_finite_amax += ref.counters().non_finite_amax;
        total.unused_steps += ref.counters().unused_steps;
      }
    }
  }
  CHECK(total.clamped_scales > 0);
  CHECK(total.non_finite_amax > 0);
  CHECK(total.unused_steps > 0);
}

TEST_CASE("delayed scaling parameters: hand-derived scaled maxima; bad configs refused") {
  CHECK(make_delayed_scaling_params({.format = fp8_e4m3, .margin = 0}).scaled_max == 448.0f);
  CHECK(make_delayed_scaling_params({.format = fp8_e4m3, .margin = 2}).scaled_max == 112.0f);
  CHECK(make_delayed_scaling_params({.format = fp8_e5m2, .margin = 1}).scaled_max == 28672.0f);
  CHECK_THROWS_WITH(make_delayed_scaling_params({.history_length = 0}), Catch::Contains("history_length"));
  CHECK_THROWS_WITH(make_delayed_scaling_params({.margin = 127}), Catch::Contains("margin"));
  // amax 2 with margin 0: 448 / 2 = 224, inverse 1/224
  const delayed_scaling_params p = make_delayed_scaling_params({.history_length = 4});
  delayed_scaling_state s{};
  float window[3] = {};
  s.amax_bits = amax_fold(0, -2.0f);
  delayed_scaling_step(p, s, window);
  CHECK(s.scale == 224.0f);
  CHECK(s.scale_inv == 1.0f / 224.0f);
  CHECK(s.amax_bits == 0);
  CHECK(window[0] == 2.0f);
}
