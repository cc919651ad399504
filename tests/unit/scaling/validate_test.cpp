// Every bad config field is rejected with an error naming the field, the value and the accepted range.
#include <catch2/catch.hpp>
#include <cfloat>
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "safeamp/scaling.hpp"

using namespace safeamp;

namespace {
void expect_rejected(const std::function<void(scaler_config&)>& change, const std::string& field,
                     const std::string& value_text, const std::string& accepted_text) {
  scaler_config cfg{};
  change(cfg);
  try {
    validate(cfg);
    FAIL("accepted a bad " << field);
  } catch (const error& e) {
    const std::string m = e.what();
    INFO(m);
    CHECK(e.field() == field);
    CHECK(m.find(value_text) != std::string::npos);
    CHECK(m.find(accepted_text) != std::string::npos);
  }
  // The stateful scaler validates on construction too.
  CHECK_THROWS_AS(loss_scaler(cfg), error);
}
constexpr float inf = std::numeric_limits<float>::infinity();
}  // namespace

TEST_CASE("the default config and every preset are valid") {
  CHECK_NOTHROW(validate(scaler_config{}));
  CHECK_NOTHROW(loss_scaler(scaler_presets::nemo));
}

TEST_CASE("each bad config field is named with its value and accepted range") {
  expect_rejected([](scaler_config& c) { c.growth_factor = 1.0; }, "scaler growth_factor", "1", "> 1");
  expect_rejected([](scaler_config& c) { c.growth_factor = 0.5; }, "scaler growth_factor", "0.5", "> 1");
  expect_rejected([](scaler_config& c) { c.growth_factor = std::nan(""); }, "scaler growth_factor", "nan", "> 1");
  expect_rejected([](scaler_config& c) { c.backoff_factor = 1.0; }, "scaler backoff_factor", "1", "(0, 1)");
  expect_rejected([](scaler_config& c) { c.backoff_factor = 0.0; }, "scaler backoff_factor", "0", "(0, 1)");
  expect_rejected([](scaler_config& c) { c.backoff_factor = -0.5; }, "scaler backoff_factor", "-0.5", "(0, 1)");
  expect_rejected([](scaler_config& c) { c.growth_interval = 0; }, "scaler growth_interval", "0", ">= 1");
  expect_rejected([](scaler_config& c) { c.hysteresis = 0; }, "scaler hysteresis", "0", ">= 1");
  expect_rejected([](scaler_config& c) { c.min_scale = 0.0f; }, "scaler min_scale", "0", "2^-126");
  expect_rejected([](scaler_config& c) { c.min_scale = -1.0f; }, "scaler min_scale", "-1", "2^-126");
  expect_rejected([](scaler_config& c) { c.min_scale = 1e-40f; }, "scaler min_scale", "1e-40", "normal");
  expect_rejected([](scaler_config& c) { c.min_scale = inf; }, "scaler min_scale", "inf", "finite");
  expect_rejected([](scaler_config& c) { c.max_scale = inf; }, "scaler max_scale", "inf", ">= min_scale");
  expect_rejected(
      [](scaler_config& c) {
        c.min_scale = 4.0f;
        c.max_scale = 2.0f;
        c.init_scale = 3.0f;
      },
      "scaler max_scale", "2", ">= min_scale (4)");
  expect_rejected([](scaler_config& c) { c.init_scale = 0.5f; }, "scaler init_scale", "0.5", "[1, 3.4028235e+38]");
  expect_rejected([](scaler_config& c) { c.init_scale = std::nanf(""); }, "scaler init_scale", "nan", "finite");
  expect_rejected([](scaler_config& c) { c.max_scale = 1024.0f; }, "scaler init_scale", "65536", "[1, 1024]");
  expect_rejected([](scaler_config& c) { c.mode = static_cast<hysteresis_mode>(7); }, "scaler mode", "7",
                  "since_growth");
  expect_rejected([](scaler_config& c) { c.max_overflows_at_min = -1; }, "scaler max_overflows_at_min", "-1", ">= 0");
}

TEST_CASE("states a config cannot reach are rejected") {
  const scaler_config cfg{};
  CHECK_NOTHROW(validate(cfg, initial_state(cfg)));
  CHECK_THROWS_WITH(validate(cfg, scaler_state{0.5f, 0, 1, 0}), Catch::Contains("scale"));
  CHECK_THROWS_WITH(validate(cfg, scaler_state{inf, 0, 1, 0}), Catch::Contains("scale"));
  CHECK_THROWS_WITH(validate(cfg, scaler_state{2.0f, 2000, 1, 0}), Catch::Contains("growth_tracker"));
  CHECK_THROWS_WITH(validate(cfg, scaler_state{2.0f, -1, 1, 0}), Catch::Contains("growth_tracker"));
  CHECK_THROWS_WITH(validate(cfg, scaler_state{2.0f, 0, 2, 0}), Catch::Contains("hysteresis_tracker"));
  CHECK_THROWS_WITH(validate(cfg, scaler_state{2.0f, 0, 1, -3}), Catch::Contains("overflows_at_min"));
}

TEST_CASE("static scale is validated too") {
  CHECK_THROWS_AS(static_scale_rule(0.0f), error);
  CHECK_THROWS_AS(static_scale_rule(inf), error);
  CHECK_NOTHROW(static_scale_rule(128.0f));
}

TEST_CASE("a factor that leaves some float32 scale of the range unchanged is refused") {
  // Expected witnesses by hand: a float s = m * 2^e stays under f32(s * f) when |f - 1| is at most half the
  // gap to its neighbour over s: 2^-24 / m, or 2^-25 / 1 below a power of two (the gap there is half as wide).
  // 1 - 0.99999999999 = 1e-11 and 1.00000001 - 1 = 1e-8 are below 2^-25 = 2.98e-8: s = min_scale = 1 stays.
  expect_rejected([](scaler_config& c) { c.backoff_factor = 0.99999999999; }, "scaler backoff_factor",
                  "0.99999999999 (f32(1 * backoff_factor) is 1: an overflow would not lower the scale)",
                  "f32(s * backoff_factor) < s for every float scale s in [min_scale, max_scale] = [1, 3.4028235e+38]");
  expect_rejected([](scaler_config& c) { c.growth_factor = 1.00000001; }, "scaler growth_factor",
                  "1.00000001 (f32(1 * growth_factor) is 1: a growth would not raise the scale)",
                  "every growth_factor >= 1.0000002 qualifies");
  // 1 - 2^-25 is the midpoint between 1 - 2^-24 and 1: it rounds to the even neighbour, 1.
  expect_rejected([](scaler_config& c) { c.backoff_factor = 1.0 - 0x1p-25; }, "scaler backoff_factor",
                  "f32(1 * backoff_factor) is 1", "(0, 1)");
  // 1 + 2^-24 is the midpoint between 1 and 1 + 2^-23: it rounds to 1 too.
  expect_rejected([](scaler_config& c) { c.growth_factor = 1.0 + 0x1p-24; }, "scaler growth_factor",
                  "f32(1 * growth_factor) is 1", "> 1");
  // 1 - b = 0.75 * 2^-24 = 4.47e-8 lowers every power of two (> 2^-25 = 2.98e-8) but not the float after it,
  // 1 + 2^-23 = 1.0000001 (shortest text), whose half gap is 2^-24 / (1 + 2^-23) = 5.96e-8: the scale a
  // check of min_scale and max_scale alone would miss.
  const double backoff = 1.0 - 0x1.8p-25;
  expect_rejected([&](scaler_config& c) { c.backoff_factor = backoff; }, "scaler backoff_factor",
                  "f32(1.0000001 * backoff_factor) is 1.0000001", "(0, 1)");
  // ... while a range holding only the power of two 1 accepts it: there it lowers 1 (then clamped to the floor).
  const scaler_config only_one{.init_scale = 1.0f, .backoff_factor = backoff, .min_scale = 1.0f, .max_scale = 1.0f};
  CHECK_NOTHROW(validate(only_one));
  CHECK(transition(only_one, initial_state(only_one), true).event == scale_event::clamped_at_min);
  // growth 1 + 2^-24 leaves 1 unchanged, but moves every float of [1.5, 1.75]: 1.5 * 2^-24 is above the half gap
  // 2^-24 there, and larger significands only widen the margin.
  const scaler_config upper{.init_scale = 1.5f, .growth_factor = 1.0 + 0x1p-24, .min_scale = 1.5f, .max_scale = 1.75f};
  CHECK_NOTHROW(validate(upper));
  // The bounds the message promises: 1 - 0.99999994 = 6e-8 > 2^-24 and 1.0000002 - 1 = 2e-7 > 2^-23.
  CHECK_NOTHROW(validate(scaler_config{.backoff_factor = 0.99999994}));
  CHECK_NOTHROW(validate(scaler_config{.growth_factor = 1.0000002}));
  CHECK_NOTHROW(validate(scaler_config{.backoff_factor = 0.99999994, .min_scale = float_min_normal}));
  // The probe's report: 5 overflows used to log "65536 -> 65536, backed_off"; now the scaler is never built.
  CHECK_THROWS_AS(loss_scaler(scaler_config{.backoff_factor = 0.99999999999, .growth_interval = 1}), error);
}

TEST_CASE("states the transition cannot reach are rejected across fields") {
  const scaler_config ds = scaler_presets::deepspeed;  // min 1, hysteresis 2, since_growth
  // The reviewer's checkpoint: 5 overflows at min_scale counted while the scale is 65536.
  try {
    validate(ds, scaler_state{.scale = 65536.0f, .growth_tracker = 0, .hysteresis_tracker = 0, .overflows_at_min = 5});
    FAIL("accepted overflows_at_min 5 at scale 65536");
  } catch (const error& e) {
    CHECK(e.field() == "scaler state overflows_at_min");
    CHECK_THAT(e.what(), Catch::Contains("5 with scale 65536") && Catch::Contains("scale == min_scale (1)"));
  }
  // The only states with overflows_at_min > 0: at min_scale, both trackers 0 (one overflow at the floor gets there).
  const scaler_state floor_state{.scale = 1.0f, .growth_tracker = 0, .hysteresis_tracker = 0, .overflows_at_min = 5};
  CHECK_NOTHROW(validate(ds, floor_state));
  const scaler_state one_more = update_scale(ds, floor_state, true);
  CHECK(one_more == scaler_state{.scale = 1.0f, .growth_tracker = 0, .hysteresis_tracker = 0, .overflows_at_min = 6});
  CHECK_THROWS_WITH(validate(ds, scaler_state{1.0f, 3, 0, 5}), Catch::Contains("overflows_at_min"));
  CHECK_THROWS_WITH(validate(ds, scaler_state{1.0f, 0, 1, 5}), Catch::Contains("overflows_at_min"));
  // consecutive mode: a clean step raises growth_tracker and refills the hysteresis, so g > 0 needs h == H.
  const scaler_config cons = scaler_presets::deepspeed_consecutive;  // hysteresis 2
  CHECK_NOTHROW(validate(cons, scaler_state{65536.0f, 7, 2, 0}));
  CHECK_NOTHROW(validate(cons, scaler_state{65536.0f, 0, 1, 0}));  // one absorbed overflow
  try {
    validate(cons, scaler_state{65536.0f, 7, 1, 0});
    FAIL("accepted growth_tracker 7 with hysteresis_tracker 1 in consecutive mode");
  } catch (const error& e) {
    CHECK(e.field() == "scaler state hysteresis_tracker");
    CHECK_THAT(e.what(), Catch::Contains("1 with growth_tracker 7") && Catch::Contains("hysteresis (2)"));
  }
  // since_growth: clean steps after an absorbed overflow raise g without refilling h, so that state is reachable.
  scaler_state s = initial_state(ds);
  s = update_scale(ds, s, true);   // absorbed: h 2 -> 1, g 0
  s = update_scale(ds, s, false);  // clean: g 1, h stays 1
  CHECK(s == scaler_state{65536.0f, 1, 1, 0});
  CHECK_NOTHROW(validate(ds, s));
}

TEST_CASE("a restored checkpoint with an unreachable state is refused before it can raise a false floor error") {
  loss_scaler saved(scaler_presets::deepspeed);
  scaler_checkpoint c = saved.checkpoint();
  c.state.overflows_at_min = 5;
  c.state.hysteresis_tracker = 0;
  loss_scaler r(scaler_presets::deepspeed);
  CHECK_THROWS_WITH(r.restore(c), Catch::Contains("overflows_at_min"));
  CHECK_THROWS_WITH(r.load_json(to_json(c)), Catch::Contains("overflows_at_min"));
  CHECK(r.rule().state == initial_state(scaler_presets::deepspeed));  // unchanged
}
