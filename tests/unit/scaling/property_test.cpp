// Property tests over >= 10^6 random steps with random overflow patterns (independent per step and in
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

TEST_CASE("DeepSpeed presets under random overflows: clipping, the raise at the floor, checkpoint/restore mid-run") {
  // Each scaler runs beside a twin that is never checkpointed; every 997 steps the scaler is saved to JSON and
  // replaced by a fresh one restored from it. The two must stay identical in scale, state and counters.
  // Clipping (max norm 1) sits between unscale and step, as docs/loss_scaling.md orders it: an overflow is
  // reported as found_inf (never non_finite_norm), applied gradients have a norm within 1 (+ float rounding).
  // DeepSpeed raises after max_overflows_at_min = 1 overflow at min_scale; update() commits before it throws,
  // so the run goes on, and the raise must come exactly when the state says an overflow found the floor.
  std::mt19937_64 rng(20261130u);
  const double rates[] = {0.001, 0.01, 0.05, 0.2, 0.5};
  std::int64_t total_steps = 0;
  std::int64_t raises = 0;
  for (const scaler_config& base : {scaler_presets::deepspeed, scaler_presets::deepspeed_consecutive}) {
    for (const double rate : rates) {
      scaler_config cfg = base;
      cfg.growth_interval = std::min(cfg.growth_interval, 50);
      cfg.init_scale = 64.0f;  // close enough to the floor of 1 that high rates reach it
      loss_scaler s(cfg);
      loss_scaler twin(cfg);
      std::bernoulli_distribution overflow(rate);
      std::vector<float> grads(4), twin_grads(4);
      std::int64_t overflows = 0;
      const int steps = 41000;
      for (int i = 0; i < steps; ++i) {
        if (i % 997 == 996) {
          const std::string saved = s.save_json();
          loss_scaler restored(scaler_presets::pytorch);  // another config: restore must replace all of it
          restored.load_json(saved);
          s = std::move(restored);
        }
        const bool injected = overflow(rng);
        const float magnitude = static_cast<float>(1 + rng() % 4);  // norms from 2 to 8 before clipping
        for (std::size_t k = 0; k < grads.size(); ++k) grads[k] = s.scale() * magnitude * (k % 2 ? -1.0f : 1.0f);
        if (injected) grads[rng() % grads.size()] = std::numeric_limits<float>::infinity();
        // A scale grown past FLT_MAX / magnitude overflows the scaled gradient by itself, as in real training.
        const bool bad = injected || !std::isfinite(s.scale() * magnitude);
        overflows += bad ? 1 : 0;
        twin_grads = grads;
        double applied_norm = -1.0;
        const auto run = [&](loss_scaler& sc, std::vector<float>& g, bool record) {
          (void)sc.unscale(g);
          (void)sc.clip_grad_norm(std::span<float>(g), 1.0);
          const step_report r = sc.step([&] {
            if (!record) return;
            double sq = 0.0;
            for (const float x : g) sq += static_cast<double>(x) * x;
            applied_norm = std::sqrt(sq);
          });
          bool raised = false;
          try {
            (void)sc.update();
          } catch (const safeamp::error&) {
            raised = true;
          }
          return std::pair{r, raised};
        };
        const auto [r, raised] = run(s, grads, true);
        const auto [tr, twin_raised] = run(twin, twin_grads, false);
        REQUIRE(r.applied == !bad);
        REQUIRE(r.reason == (bad ? skip_reason::found_inf : skip_reason::none));
        if (r.applied) REQUIRE(applied_norm <= 1.0 + 1e-6);
        REQUIRE(raised == (bad && r.overflows_at_min >= cfg.max_overflows_at_min && cfg.max_overflows_at_min > 0));
        raises += raised ? 1 : 0;
        REQUIRE(raised == twin_raised);
        REQUIRE(r == tr);
        REQUIRE(s.scale() == twin.scale());
        REQUIRE(s.stats() == twin.stats());
        REQUIRE(std::isfinite(s.scale()));
        REQUIRE(s.scale() >= cfg.min_scale);
        REQUIRE(s.scale() <= cfg.max_scale);
      }
      total_steps += steps;
      CHECK(s.stats().skipped_steps == overflows);
      CHECK(s.stats().non_finite_norms == 0);
      CHECK(s.stats().steps == steps);
    }
  }
  CHECK(total_steps == 410000);
  CHECK(raises > 0);  // the floor was reached and the raise exercised
}
