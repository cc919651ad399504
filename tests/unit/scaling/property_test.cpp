// Property test over >= 10^6 random steps with random overflow patterns (independent per step and in
// bursts) at rates from 0.1% to 50%, through the stateful scaler: weights change only on finite steps, the
// scale stays finite and in [min, max], the skipped count equals the overflow count, applied + skipped = steps.
#include <catch2/catch.hpp>
#include <cfloat>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "safeamp/scaling.hpp"

using namespace safeamp;

TEST_CASE("10^6 random steps keep every invariant") {
  std::mt19937_64 rng(20260529u);
  const double rates[] = {0.001, 0.01, 0.05, 0.2, 0.5};
  const scaler_config configs[] = {
      scaler_presets::pytorch, scaler_presets::megatron, scaler_presets::nemo,
      scaler_config{.init_scale = 8.0f,
                    .growth_factor = 3.0,
                    .backoff_factor = 0.25,
                    .growth_interval = 3,
                    .hysteresis = 3,
                    .mode = hysteresis_mode::since_growth,
                    .min_scale = 0.5f,
                    .max_scale = 1e6f},
      scaler_config{.init_scale = 1.0f, .growth_interval = 1, .min_scale = 1.0f, .max_scale = 1.0e38f}};
  std::int64_t total_steps = 0;
  for (const scaler_config& base : configs) {
    for (const double rate : rates) {
      scaler_config cfg = base;
      cfg.growth_interval = std::min(cfg.growth_interval, 50);  // so growth happens often
      loss_scaler s(cfg);
      std::bernoulli_distribution overflow(rate);
      std::bernoulli_distribution burst_start(rate / 20.0);
      std::vector<float> grads(4);
      float weight = 0.0f;
      std::int64_t overflows = 0;
      int burst_left = 0;
      const int steps = 41000;
      for (int i = 0; i < steps; ++i) {
        if (burst_left == 0 && burst_start(rng)) burst_left = 1 + static_cast<int>(rng() % 30);
        const bool bad = burst_left > 0 || overflow(rng);
        if (burst_left > 0) --burst_left;
        const float scale = s.scale();
        for (float& g : grads) g = scale * 0.001f;
        if (bad) grads[rng() % grads.size()] = (rng() & 1u) ? std::numeric_limits<float>::infinity() : std::nanf("");
        overflows += bad ? 1 : 0;
        const float w_before = weight;
        (void)s.unscale(grads);
        const step_report r = s.step([&] { weight += grads[0]; });
        s.update();
        REQUIRE(r.applied == !bad);
        REQUIRE((weight != w_before) == r.applied);
        REQUIRE(std::isfinite(weight));
        REQUIRE(std::isfinite(s.scale()));
        REQUIRE(std::isnormal(s.scale()));
        REQUIRE(s.scale() >= cfg.min_scale);
        REQUIRE(s.scale() <= cfg.max_scale);
      }
      total_steps += steps;
      CHECK(s.stats().skipped_steps == overflows);
      CHECK(s.stats().steps == steps);
      CHECK(s.stats().applied_steps + s.stats().skipped_steps == steps);
    }
  }
  CHECK(total_steps >= 1000000);
}
