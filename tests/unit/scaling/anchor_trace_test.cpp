// Each preset against an independent model of its anchor (anchor_models.hpp, from the reference pseudo-code)
// step for step over random overflow sequences, plus short hand-written traces and each preset's one
// documented deliberate difference (PyTorch/Apex collapse to 0; Megatron grows to inf).
#include <catch2/catch.hpp>
#include <cfloat>
#include <cmath>
#include <random>

#include "anchor_models.hpp"
#include "safeamp/scaling.hpp"

using namespace safeamp;

namespace {
// A preset with a short growth interval so random sequences exercise growth; every other field as the preset.
scaler_config with_interval(scaler_config c, std::int32_t interval) {
  c.growth_interval = interval;
  return c;
}
}  // namespace

TEST_CASE("presets hold the anchors' documented defaults") {
  CHECK(scaler_presets::pytorch.init_scale == 65536.0f);
  CHECK(scaler_presets::pytorch.growth_interval == 2000);
  CHECK(scaler_presets::pytorch.hysteresis == 1);
  CHECK(scaler_presets::deepspeed.growth_interval == 1000);
  CHECK(scaler_presets::deepspeed.hysteresis == 2);
  CHECK(scaler_presets::deepspeed.mode == hysteresis_mode::since_growth);
  CHECK(scaler_presets::deepspeed.min_scale == 1.0f);
  CHECK(scaler_presets::deepspeed_consecutive.mode == hysteresis_mode::consecutive);
  CHECK(scaler_presets::megatron.init_scale == std::ldexp(1.0f, 32));
  CHECK(scaler_presets::megatron.mode == hysteresis_mode::since_growth);
  CHECK(scaler_presets::nemo.mode == hysteresis_mode::consecutive);
  for (const auto& p : scaler_presets::all) CHECK_NOTHROW(validate(p.config));
  CHECK(scaler_presets::by_name("Megatron") == scaler_presets::megatron);
  CHECK_THROWS_WITH(scaler_presets::by_name("apex"), Catch::Contains("deepspeed-consecutive"));
}

TEST_CASE("pytorch preset == torch GradScaler kernel while the scale stays >= 2^-126") {
  std::mt19937_64 rng(1);
  for (const double rate : {0.001, 0.05, 0.2, 0.5}) {
    const scaler_config cfg = with_interval(scaler_presets::pytorch, 7);
    anchor::torch_grad_scaler ref{cfg.init_scale, 2.0, 0.5, 7};
    scaler_state s = initial_state(cfg);
    std::bernoulli_distribution overflow(rate);
    for (int i = 0; i < 20000; ++i) {
      const bool fi = overflow(rng);
      ref.update(fi);
      s = update_scale(cfg, s, fi);
      if (ref.scale < FLT_MIN) break;  // the documented difference (tested below)
      REQUIRE(s.scale == ref.scale);
      REQUIRE(s.growth_tracker == ref.tracker);
    }
  }
}

TEST_CASE("pytorch preset: the one difference, the scale stops at 2^-126 instead of collapsing to 0") {
  anchor::torch_grad_scaler ref{65536.0f, 2.0, 0.5, 2000};
  scaler_state s = initial_state(scaler_presets::pytorch);
  for (int i = 0; i < 200; ++i) {
    ref.update(true);
    s = update_scale(scaler_presets::pytorch, s, true);
  }
  CHECK(ref.scale == 0.0f);  // 2^16 halved 166 times passes through the subnormals to exactly 0
  CHECK(s.scale == FLT_MIN);
  // and from 0 PyTorch never recovers; safeamp grows back.
  for (int i = 0; i < 2000; ++i) {
    ref.update(false);
    s = update_scale(scaler_presets::pytorch, s, false);
  }
  CHECK(ref.scale == 0.0f);
  CHECK(s.scale == 2.0f * FLT_MIN);
}

TEST_CASE("deepspeed presets == DeepSpeed DynamicLossScaler (both hysteresis modes), including the raise") {
  std::mt19937_64 rng(2);
  for (const bool consecutive : {false, true}) {
    for (const double rate : {0.001, 0.05, 0.3, 0.5}) {
      const scaler_config cfg =
          with_interval(consecutive ? scaler_presets::deepspeed_consecutive : scaler_presets::deepspeed, 5);
      anchor::deepspeed_dynamic ref{.cur_scale = 65536.0,
                                    .scale_factor = 2.0,
                                    .scale_window = 5,
                                    .min_scale = 1.0,
                                    .delayed_shift = 2,
                                    .consecutive_hysteresis = consecutive,
                                    .cur_hysteresis = 2};
      scaler_state s = initial_state(cfg);
      std::bernoulli_distribution overflow(rate);
      for (int i = 0; i < 20000; ++i) {
        const bool fi = overflow(rng);
        ref.update(fi);
        s = update_scale(cfg, s, fi);
        INFO("step " << i << " rate " << rate << " consecutive " << consecutive);
        if (ref.cur_scale > FLT_MAX) break;  // the documented difference: DeepSpeed's double scale has no cap
        REQUIRE(static_cast<double>(s.scale) == ref.cur_scale);
        // DeepSpeed raises exactly when an overflow finds the scale at the floor (K = 1 in the preset).
        REQUIRE((s.overflows_at_min >= cfg.max_overflows_at_min) == ref.raised);
        ref.raised = false;
        // DeepSpeed's tracker stays at 1 when used up; safeamp's exposed tracker goes to 0 (clamped) only when
        // used up, so both agree whenever DeepSpeed's is above 1.
        if (ref.cur_hysteresis > 1) REQUIRE(s.hysteresis_tracker == ref.cur_hysteresis);
      }
    }
  }
}

TEST_CASE("megatron preset == Megatron DynamicGradScaler while the scale stays finite") {
  std::mt19937_64 rng(3);
  for (const double rate : {0.001, 0.05, 0.3, 0.5}) {
    const scaler_config cfg = with_interval(scaler_presets::megatron, 6);
    anchor::megatron_dynamic ref{.scale = std::ldexp(1.0f, 32),
                                 .min_scale = 1.0f,
                                 .growth = 2.0f,
                                 .backoff = 0.5f,
                                 .interval = 6,
                                 .hysteresis = 2,
                                 .hysteresis_tracker = 2};
    scaler_state s = initial_state(cfg);
    std::bernoulli_distribution overflow(rate);
    for (int i = 0; i < 20000; ++i) {
      const bool fi = overflow(rng);
      ref.update(fi);
      s = update_scale(cfg, s, fi);
      if (std::isinf(ref.scale)) break;
      REQUIRE(s.scale == ref.scale);
      REQUIRE(s.growth_tracker == ref.growth_tracker);
      REQUIRE(s.hysteresis_tracker == std::max(ref.hysteresis_tracker, 0));  // Megatron's may go negative
    }
  }
}

TEST_CASE("megatron preset: the one difference, growth stops at 2^127 instead of reaching inf") {
  const scaler_config cfg = with_interval(scaler_presets::megatron, 1);
  anchor::megatron_dynamic ref{.scale = std::ldexp(1.0f, 32),
                               .min_scale = 1.0f,
                               .growth = 2.0f,
                               .backoff = 0.5f,
                               .interval = 1,
                               .hysteresis = 2,
                               .hysteresis_tracker = 2};
  scaler_state s = initial_state(cfg);
  for (int i = 0; i < 100; ++i) {
    ref.update(false);
    s = update_scale(cfg, s, false);
  }
  CHECK(std::isinf(ref.scale));
  CHECK(s.scale == std::ldexp(1.0f, 127));
  ref.update(true);  // inf * 0.5 = inf: Megatron never recovers
  ref.update(true);
  CHECK(std::isinf(ref.scale));
}

TEST_CASE("nemo preset == Apex update_scale_hysteresis kernel while the scale stays >= 2^-126") {
  std::mt19937_64 rng(4);
  for (const double rate : {0.001, 0.05, 0.3, 0.5}) {
    const scaler_config cfg = with_interval(scaler_presets::nemo, 5);
    anchor::apex_hysteresis_kernel ref{
        .scale = 65536.0f, .growth = 2.0, .backoff = 0.5, .interval = 5, .hysteresis = 2, .hyst = 2};
    scaler_state s = initial_state(cfg);
    std::bernoulli_distribution overflow(rate);
    for (int i = 0; i < 20000; ++i) {
      const bool fi = overflow(rng);
      ref.update(fi);
      s = update_scale(cfg, s, fi);
      if (ref.scale < FLT_MIN) break;
      REQUIRE(s.scale == ref.scale);
      REQUIRE(s.growth_tracker == ref.growth_tracker);
      REQUIRE(s.hysteresis_tracker == std::max(ref.hyst, 0));
    }
  }
}

TEST_CASE("hand-written trace: Megatron, hysteresis 2 since growth, window 3, init 8") {
  // From B.3 by hand. step: found_inf -> scale, growth_tracker, hysteresis_tracker
  const scaler_config cfg{.init_scale = 8.0f,
                          .growth_factor = 2.0,
                          .backoff_factor = 0.5,
                          .growth_interval = 3,
                          .hysteresis = 2,
                          .mode = hysteresis_mode::since_growth,
                          .min_scale = 1.0f,
                          .max_scale = FLT_MAX,
                          .max_overflows_at_min = 0};
  struct expect {
    bool fi;
    float scale;
    int g;
    int h;
  };
  const expect trace[] = {
      {true, 8, 0, 1},  {false, 8, 1, 1}, {true, 4, 0, 0},  {true, 2, 0, 0},  {false, 2, 1, 0},
      {false, 2, 2, 0}, {false, 4, 0, 2}, {true, 4, 0, 1},  {false, 4, 1, 1}, {true, 2, 0, 0},
      {true, 1, 0, 0},  {true, 1, 0, 0},  {false, 1, 1, 0}, {false, 1, 2, 0}, {false, 2, 0, 2},
  };
  scaler_state s = initial_state(cfg);
  int i = 0;
  for (const expect& e : trace) {
    s = update_scale(cfg, s, e.fi);
    INFO("step " << i++);
    CHECK(s.scale == e.scale);
    CHECK(s.growth_tracker == e.g);
    CHECK(s.hysteresis_tracker == e.h);
  }
}

TEST_CASE("hand-written trace: same overflows, consecutive hysteresis (DeepSpeed consecutive / NeMo)") {
  const scaler_config cfg{.init_scale = 8.0f,
                          .growth_factor = 2.0,
                          .backoff_factor = 0.5,
                          .growth_interval = 3,
                          .hysteresis = 2,
                          .mode = hysteresis_mode::consecutive,
                          .min_scale = 1.0f,
                          .max_scale = FLT_MAX,
                          .max_overflows_at_min = 0};
  struct expect {
    bool fi;
    float scale;
    int h;
  };
  const expect trace[] = {
      {true, 8, 1},  {false, 8, 2}, {true, 8, 1},  {true, 4, 0}, {false, 4, 2}, {false, 4, 2},
      {false, 8, 2}, {true, 8, 1},  {false, 8, 2}, {true, 8, 1}, {true, 4, 0},  {true, 2, 0},
  };
  scaler_state s = initial_state(cfg);
  int i = 0;
  for (const expect& e : trace) {
    s = update_scale(cfg, s, e.fi);
    INFO("step " << i++);
    CHECK(s.scale == e.scale);
    CHECK(s.hysteresis_tracker == e.h);
  }
}
