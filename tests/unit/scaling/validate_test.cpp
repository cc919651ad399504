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
