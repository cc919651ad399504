// Transition tables for every mode of update_scale, written by hand from the rules in docs/loss_scaling.md:
// each row is (state, found_inf) -> (next state, event). Plus the float-range edges: growth refused at
// FLT_MAX and at max_scale (tracker still reset), backoff clamped at min_scale and landing exactly on it, a
// non-power-of-two backoff rounded from double, never 0/subnormal/inf/NaN.
#include <bit>
#include <catch2/catch.hpp>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <vector>

#include "safeamp/scaling.hpp"

using namespace safeamp;

namespace {
struct row {
  scaler_state before;
  bool found_inf;
  scaler_state after;
  scale_event event;
};

void check_table(const scaler_config& cfg, const std::vector<row>& rows) {
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const row& r = rows[i];
    INFO("row " << i << " scale " << r.before.scale << " g " << r.before.growth_tracker << " h "
                << r.before.hysteresis_tracker << " found_inf " << r.found_inf);
    const scale_transition t = transition(cfg, r.before, r.found_inf);
    CHECK(t.next.scale == r.after.scale);
    CHECK(t.next.growth_tracker == r.after.growth_tracker);
    CHECK(t.next.hysteresis_tracker == r.after.hysteresis_tracker);
    CHECK(t.next.overflows_at_min == r.after.overflows_at_min);
    CHECK(t.event == r.event);
    CHECK(update_scale(cfg, r.before, r.found_inf) == t.next);
  }
}
}  // namespace

TEST_CASE("no hysteresis (PyTorch rule): every overflow backs off, every interval-th clean step grows") {
  const scaler_config cfg{.init_scale = 1024.0f,
                          .growth_factor = 2.0,
                          .backoff_factor = 0.5,
                          .growth_interval = 3,
                          .hysteresis = 1,
                          .mode = hysteresis_mode::consecutive,
                          .min_scale = 1.0f,
                          .max_scale = 65536.0f,
                          .max_overflows_at_min = 0};
  check_table(cfg, {
                       // clean steps count up; the 3rd grows and resets
                       {{1024.0f, 0, 1, 0}, false, {1024.0f, 1, 1, 0}, scale_event::none},
                       {{1024.0f, 1, 1, 0}, false, {1024.0f, 2, 1, 0}, scale_event::none},
                       {{1024.0f, 2, 1, 0}, false, {2048.0f, 0, 1, 0}, scale_event::grew},
                       // overflow halves and resets the growth tracker
                       {{1024.0f, 2, 1, 0},
                        true,
                        {512.0f, 0, 0, 0},
                        scale_event::backed_off},  // budget 1 used (refilled next clean step)
                       // growth past max_scale is refused, tracker still resets
                       {{65536.0f, 2, 1, 0}, false, {65536.0f, 0, 1, 0}, scale_event::growth_refused},
                       {{32768.0f, 2, 1, 0}, false, {65536.0f, 0, 1, 0}, scale_event::grew},
                       // at the floor: clamp and count consecutive overflows at min; a clean step resets the count
                       {{1.5f, 0, 1, 0}, true, {1.0f, 0, 0, 0}, scale_event::clamped_at_min},
                       // 2 * 0.5 lands exactly on the floor: a plain backoff (nothing was clamped), and 2 was
                       // above the floor, so it is not an overflow at min either
                       {{2.0f, 0, 1, 0}, true, {1.0f, 0, 0, 0}, scale_event::backed_off},
                       {{1.0f, 0, 0, 0}, true, {1.0f, 0, 0, 1}, scale_event::clamped_at_min},
                       {{1.0f, 0, 0, 1}, true, {1.0f, 0, 0, 2}, scale_event::clamped_at_min},
                       {{1.0f, 0, 0, 2}, false, {1.0f, 1, 1, 0}, scale_event::none},
                   });
}

TEST_CASE("consecutive hysteresis: H overflows in a row back off; any clean step refills") {
  const scaler_config cfg{.init_scale = 256.0f,
                          .growth_factor = 2.0,
                          .backoff_factor = 0.5,
                          .growth_interval = 4,
                          .hysteresis = 3,
                          .mode = hysteresis_mode::consecutive,
                          .min_scale = 1.0f,
                          .max_scale = FLT_MAX,
                          .max_overflows_at_min = 0};
  check_table(cfg, {
                       {{256.0f, 2, 3, 0}, true, {256.0f, 0, 2, 0}, scale_event::absorbed},
                       {{256.0f, 0, 2, 0}, true, {256.0f, 0, 1, 0}, scale_event::absorbed},
                       {{256.0f, 0, 1, 0}, true, {128.0f, 0, 0, 0}, scale_event::backed_off},
                       {{128.0f, 0, 0, 0},
                        true,
                        {64.0f, 0, 0, 0},
                        scale_event::backed_off},  // budget used up: every overflow backs off
                       {{64.0f, 0, 0, 0}, false, {64.0f, 1, 3, 0}, scale_event::none},  // a clean step refills
                       {{64.0f, 1, 1, 0}, false, {64.0f, 2, 3, 0}, scale_event::none},
                       {{64.0f, 3, 2, 0}, false, {128.0f, 0, 3, 0}, scale_event::grew},
                       // an absorbed overflow at the floor does not count as an overflow at min
                       {{1.0f, 0, 2, 0}, true, {1.0f, 0, 1, 0}, scale_event::absorbed},
                       {{1.0f, 0, 1, 0}, true, {1.0f, 0, 0, 1}, scale_event::clamped_at_min},
                   });
}

TEST_CASE("since-growth hysteresis: H overflows since the last growth; only growth refills") {
  const scaler_config cfg{.init_scale = 256.0f,
                          .growth_factor = 2.0,
                          .backoff_factor = 0.5,
                          .growth_interval = 2,
                          .hysteresis = 2,
                          .mode = hysteresis_mode::since_growth,
                          .min_scale = 1.0f,
                          .max_scale = FLT_MAX,
                          .max_overflows_at_min = 0};
  check_table(cfg, {
                       {{256.0f, 0, 2, 0}, true, {256.0f, 0, 1, 0}, scale_event::absorbed},
                       {{256.0f, 0, 1, 0}, false, {256.0f, 1, 1, 0}, scale_event::none},  // clean step does NOT refill
                       {{256.0f, 1, 1, 0}, true, {128.0f, 0, 0, 0}, scale_event::backed_off},
                       {{128.0f, 0, 0, 0}, false, {128.0f, 1, 0, 0}, scale_event::none},
                       {{128.0f, 1, 0, 0}, false, {256.0f, 0, 2, 0}, scale_event::grew},  // growth refills
                       // a refused growth is still a growth event: it refills the hysteresis and resets the tracker
                       {{FLT_MAX, 1, 0, 0}, false, {FLT_MAX, 0, 2, 0}, scale_event::growth_refused},
                   });
}

TEST_CASE("growth refused where f32(s * growth) would overflow; non-power-of-two factors round to nearest") {
  const scaler_config cfg{.init_scale = 1.0f,
                          .growth_factor = 2.0,
                          .backoff_factor = 0.5,
                          .growth_interval = 1,
                          .hysteresis = 1,
                          .mode = hysteresis_mode::consecutive,
                          .min_scale = 1.0f,
                          .max_scale = FLT_MAX,
                          .max_overflows_at_min = 0};
  const float top_pow2 = std::ldexp(1.0f, 127);
  CHECK(update_scale(cfg, {top_pow2, 0, 1, 0}, false).scale == top_pow2);  // 2^128 is not a float
  CHECK(update_scale(cfg, {std::ldexp(1.0f, 126), 0, 1, 0}, false).scale == top_pow2);
  // growth 1.5: 1.5 * 2^127 is finite (< FLT_MAX = 1.99999988 * 2^127) and grows; 2.25 * 2^127 is refused.
  scaler_config c15 = cfg;
  c15.growth_factor = 1.5;
  CHECK(update_scale(c15, {top_pow2, 0, 1, 0}, false).scale == 1.5f * top_pow2);
  CHECK(update_scale(c15, {1.5f * top_pow2, 0, 1, 0}, false).scale == 1.5f * top_pow2);
  // 3 * 1.1 in double is 3.3000000000000003; stored as the float nearest to it.
  scaler_config c11 = cfg;
  c11.growth_factor = 1.1;
  CHECK(update_scale(c11, {3.0f, 0, 1, 0}, false).scale == static_cast<float>(3.0 * 1.1));
  // The threshold constant: the double just below rounds to FLT_MAX, the threshold itself to infinity.
  CHECK(detail::to_float_or_inf(std::nextafter(detail::float_overflow_threshold, 0.0)) == FLT_MAX);
  CHECK(std::isinf(detail::to_float_or_inf(detail::float_overflow_threshold)));
}

TEST_CASE("a non-power-of-two backoff is applied in double, then rounded once to float") {
  // backoff 0.3: the double 0.3 is 5404319552844595 * 2^-54 (a hair below 0.3); 3072 * it, rounded to double,
  // is 8106479329266892 * 2^-43 = 921.59999999999990905052982270717620849609375. The floats around it are
  // 0x44666666 = 921.5999755859375 and 0x44666667 = 921.60003662109375 (ulp 2^-14 at 2^9), midpoint
  // 921.600006103515625: the double is below it, so the next scale is 0x44666666. Multiplying in float instead
  // uses f32(0.3) = 0x3E99999A = 10066330 * 2^-25 (a hair above 0.3); 3072 * it = 15099495 * 2^-14 is exactly
  // the float 0x44666667, one ulp higher.
  const scaler_config cfg{.init_scale = 3072.0f,
                          .growth_factor = 2.0,
                          .backoff_factor = 0.3,
                          .growth_interval = 10,
                          .hysteresis = 1,
                          .mode = hysteresis_mode::consecutive,
                          .min_scale = 1.0f,
                          .max_scale = FLT_MAX,
                          .max_overflows_at_min = 0};
  constexpr std::uint32_t expected_bits = 0x44666666u;
  constexpr std::uint32_t float_product_bits = 0x44666667u;  // what a float multiplication gives
  const scale_transition t = transition(cfg, {3072.0f, 3, 1, 0}, true);
  const auto got = std::bit_cast<std::uint32_t>(t.next.scale);
  INFO("next scale 0x" << std::hex << got << ", expected 0x" << expected_bits << " (float product 0x"
                       << float_product_bits << ")");
  CHECK(got == expected_bits);
  CHECK(t.event == scale_event::backed_off);
  CHECK(t.next.growth_tracker == 0);
  CHECK(std::bit_cast<float>(expected_bits) == 921.5999755859375f);  // the decimal above, as a float literal
}

TEST_CASE("the scale never becomes 0, subnormal, inf or NaN, even from the smallest floor") {
  const scaler_config cfg{.init_scale = 1.0f,
                          .growth_factor = 2.0,
                          .backoff_factor = 0.5,
                          .growth_interval = 1,
                          .hysteresis = 1,
                          .mode = hysteresis_mode::consecutive,
                          .min_scale = FLT_MIN,
                          .max_scale = FLT_MAX,
                          .max_overflows_at_min = 0};
  scaler_state s = initial_state(cfg);
  for (int i = 0; i < 400; ++i) s = update_scale(cfg, s, true);
  CHECK(s.scale == FLT_MIN);
  CHECK(std::isnormal(s.scale));
  CHECK(s.overflows_at_min == 400 - 126);  // the first 126 overflows reach 2^-126, the rest find it there
  for (int i = 0; i < 400; ++i) s = update_scale(cfg, s, false);
  CHECK(s.scale == std::ldexp(1.0f, 127));
  CHECK(std::isfinite(s.scale));
}

TEST_CASE("update_scale is a constant expression") {
  constexpr scaler_config cfg = scaler_presets::megatron;
  constexpr scaler_state s0 = initial_state(cfg);
  constexpr scaler_state s1 = update_scale(cfg, s0, true);
  constexpr scaler_state s2 = update_scale(cfg, s1, true);
  STATIC_REQUIRE(s1.scale == 4294967296.0f);  // absorbed by hysteresis 2
  STATIC_REQUIRE(s2.scale == 2147483648.0f);
  STATIC_REQUIRE(s2.hysteresis_tracker == 0);
}
