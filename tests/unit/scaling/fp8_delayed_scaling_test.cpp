// FP8 per-tensor delayed scaling: scale = (fp8 max / amax) / 2^margin with the amax over the window (max) or
// this step (most_recent); amax 0 = not used (no roll, scale kept); non-finite amax keeps the scale and is
// counted; an infinite scale is clamped to FLT_MAX. Expected values are worked out by hand from E4M3's
// max 448 and E5M2's max 57344.
#include <catch2/catch.hpp>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "safeamp/scaling.hpp"

using namespace safeamp;

TEST_CASE("max over a window of L values, oldest dropped") {
  delayed_scaling d({.format = fp8_e4m3, .history_length = 3, .algorithm = amax_algorithm::max, .margin = 0});
  CHECK(d.scale() == 1.0f);
  const float amaxes[] = {2.0f, 8.0f, 1.0f, 0.5f, 0.25f};
  // window after each step (current + previous 2): {2} {2,8} {2,8,1} {8,1,.5} {1,.5,.25}
  const float expected_amax[] = {2.0f, 8.0f, 8.0f, 8.0f, 1.0f};
  for (int i = 0; i < 5; ++i) {
    d.record_amax(amaxes[i]);
    CHECK(d.update() == 448.0f / expected_amax[i]);
  }
  CHECK(d.history() == std::vector<float>{0.5f, 0.25f});
}

TEST_CASE("most_recent ignores the history; margin divides by 2^margin") {
  delayed_scaling d({.format = fp8_e5m2, .history_length = 4, .algorithm = amax_algorithm::most_recent, .margin = 2});
  d.record_amax(1024.0f);
  CHECK(d.update() == 57344.0f / 1024.0f / 4.0f);
  d.record_amax(7.0f);
  CHECK(d.update() == static_cast<float>(14336.0f / 7.0f));
}

TEST_CASE("several observations in a step fold into their max; a tensor's amax is max |x|") {
  delayed_scaling d({.history_length = 1});
  d.record(std::vector<float>{1.0f, -28.0f, 3.0f});
  d.record_amax(-14.0f);
  CHECK(d.update() == 16.0f);
  CHECK(tensor_amax(std::vector<float>{}) == 0.0f);
  CHECK(std::isnan(tensor_amax(std::vector<float>{1.0f, std::nanf("")})));
}

TEST_CASE("amax 0 means not used: no roll, scale kept") {
  delayed_scaling d({.history_length = 2});
  d.record_amax(4.0f);
  CHECK(d.update() == 112.0f);
  CHECK(d.update() == 112.0f);  // nothing recorded
  CHECK(d.history() == std::vector<float>{4.0f});
  CHECK(d.counters().unused_steps == 1);
  d.record_amax(8.0f);
  CHECK(d.update() == 56.0f);  // window {4, 8}: 4 was not rolled out by the unused step
}

TEST_CASE("a non-finite amax keeps the previous scale, is counted and does not enter the window") {
  delayed_scaling d({.history_length = 2});
  d.record_amax(2.0f);
  CHECK(d.update() == 224.0f);
  d.record_amax(std::numeric_limits<float>::infinity());
  CHECK(d.update() == 224.0f);
  d.record_amax(3.0f);
  d.record_amax(std::nanf(""));  // NaN is sticky for the step
  CHECK(d.update() == 224.0f);
  CHECK(d.counters().non_finite_amax == 2);
  CHECK(d.history() == std::vector<float>{2.0f});
  d.record_amax(1.0f);
  CHECK(d.update() == 224.0f);  // max(2, 1) = 2: the inf did not freeze the window (TE freezes it for L steps)
}

TEST_CASE("an infinite scale (tiny amax) is clamped to FLT_MAX") {
  delayed_scaling d({.history_length = 1});
  d.record_amax(1e-45f);  // 448 / 2^-149 overflows
  CHECK(d.update() == FLT_MAX);
  CHECK(d.counters().clamped_scales == 1);
}

TEST_CASE("bad delayed-scaling configs are rejected") {
  CHECK_THROWS_WITH(delayed_scaling({.history_length = 0}), Catch::Contains("history_length"));
  CHECK_THROWS_WITH(delayed_scaling({.margin = -1}), Catch::Contains("margin"));
  CHECK_THROWS_WITH(delayed_scaling({.format = format_spec{1, 0}}), Catch::Contains("format"));
}

TEST_CASE("history_length is capped at 2^20 with a safeamp::error, not an allocation failure") {
  // The reviewer's config: INT_MAX reserved a window of 2^31 - 2 floats (8 GiB) and threw std::bad_alloc.
  for (const std::int32_t length : {std::numeric_limits<std::int32_t>::max(), (1 << 20) + 1}) {
    INFO(length);
    try {
      delayed_scaling d({.history_length = length});
      FAIL("accepted history_length " << length);
    } catch (const error& e) {
      CHECK(e.field() == "delayed scaling history_length");
      CHECK_THAT(e.what(), Catch::Contains("an integer in [1, 1048576] (2^20; Transformer Engine's default is 1024)"));
    }
    CHECK_THROWS_AS(make_delayed_scaling_params({.history_length = length}), error);
  }
  // The cap itself is accepted: a window of 2^20 - 1 floats (4 MiB), reserved up front.
  const delayed_scaling longest({.history_length = 1 << 20});
  CHECK(longest.history().capacity() >= (std::size_t{1} << 20) - 1);
  CHECK(make_delayed_scaling_params({.history_length = 1 << 20}).history_length == 1 << 20);
}
