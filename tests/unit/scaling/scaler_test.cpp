// The stateful scaler: the safe step order, several buffers per step, step reports, misuse errors, clipping
// on unscaled gradients (non-finite norm = overflow), static and no-op scalers through the concept, and the
// opt-in error after K overflows at the floor.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "safeamp/scaling.hpp"

using namespace safeamp;

namespace {
constexpr float inf = std::numeric_limits<float>::infinity();

template <gradient_scaler S>
step_report generic_step(S& scaler, std::vector<float>& grads, int& applied) {
  (void)scaler.unscale(grads);
  return scaler.step([&] { ++applied; });
}
}  // namespace

TEST_CASE("one clean step: scale, unscale exactly, apply, update") {
  loss_scaler s(scaler_config{.init_scale = 1024.0f, .growth_interval = 2});
  CHECK(s.scale_loss(0.5f) == 512.0f);
  CHECK(s.scale_loss(0.25) == 256.0);
  std::vector<float> a = {1024.0f, -2048.0f, 3.0f};  // gradients of the scaled loss
  std::vector<float> b = {512.0f};
  CHECK_FALSE(s.unscale(a));
  CHECK_FALSE(s.unscale(b));
  CHECK(a == std::vector<float>{1.0f, -2.0f, 3.0f / 1024.0f});
  CHECK(b == std::vector<float>{0.5f});
  bool ran = false;
  const step_report r = s.step([&] { ran = true; });
  CHECK(ran);
  CHECK(r.applied);
  CHECK(r.reason == skip_reason::none);
  CHECK(r.scale_before == 1024.0f);
  CHECK(r.scale_after == 1024.0f);
  CHECK(r.growth_tracker == 1);
  const step_report u = s.update();
  CHECK(u == r);
  CHECK(s.stats().steps == 1);
  CHECK(s.stats().applied_steps == 1);
}

TEST_CASE("an overflow in any buffer skips the step and the report says why and what the scale becomes") {
  loss_scaler s(scaler_config{.init_scale = 1024.0f});
  std::vector<float> a = {1.0f, 2.0f};
  std::vector<float> b = {1.0f, std::nanf("")};
  CHECK_FALSE(s.unscale(a));
  CHECK(s.unscale(b));
  bool ran = false;
  const step_report r = s.step([&] { ran = true; });
  CHECK_FALSE(ran);
  CHECK_FALSE(r.applied);
  CHECK(r.found_inf);
  CHECK(r.reason == skip_reason::found_inf);
  CHECK(r.scale_after == 512.0f);
  CHECK(r.event == scale_event::backed_off);
  s.update();
  CHECK(s.scale() == 512.0f);
  CHECK(s.stats().skipped_steps == 1);
  CHECK(s.stats().consecutive_skips == 1);
  CHECK(s.stats().last_overflow_step == 0);
  CHECK(s.stats().backoff_events == 1);
}

TEST_CASE("a finite gradient that overflows when unscaled by a scale below 1 is an overflow") {
  loss_scaler s(scaler_config{.init_scale = 0.25f, .min_scale = 0.125f});
  std::vector<float> g = {3.0e38f};
  CHECK(s.unscale(g));  // 3e38 * 4 = inf
}

TEST_CASE("misuse is an error with a clear message") {
  loss_scaler s;
  std::vector<float> g = {1.0f, 2.0f, 3.0f, 4.0f};
  CHECK_THROWS_WITH(s.step([] {}), Catch::Contains("no inf check recorded"));
  CHECK_THROWS_WITH(s.update(), Catch::Contains("no inf check recorded"));
  CHECK_THROWS_WITH(s.clip_grad_norm(g, 1.0), Catch::Contains("not unscaled"));  // clip before unscale
  s.unscale(std::span<float>(g).first(2));
  CHECK_THROWS_WITH(s.unscale(g), Catch::Contains("twice"));  // overlaps the first half
  CHECK_THROWS_WITH(s.unscale(std::span<float>(g).subspan(1, 1)), Catch::Contains("twice"));
  CHECK_THROWS_WITH(s.clip_grad_norm(g, 1.0), Catch::Contains("not unscaled"));  // half of g is still scaled
  s.unscale(std::span<float>(g).last(2));                                        // disjoint: fine
  s.step([] {});
  CHECK_THROWS_WITH(s.step([] {}), Catch::Contains("twice"));
  CHECK_THROWS_WITH(s.unscale(g), Catch::Contains("after step"));
  CHECK_THROWS_WITH(s.clip_grad_norm(g, 1.0), Catch::Contains("after step"));
  CHECK_THROWS_WITH(s.checkpoint(), Catch::Contains("middle of a step"));
  s.update();
  CHECK_THROWS_WITH(s.update(), Catch::Contains("no inf check recorded"));
  // After update the same buffer may be unscaled again (next step).
  CHECK_NOTHROW(s.unscale(g));
}

TEST_CASE("update() after an inf check without step() counts a not-stepped skip") {
  loss_scaler s;
  std::vector<float> g = {1.0f};
  s.unscale(g);
  const step_report r = s.update();
  CHECK_FALSE(r.applied);
  CHECK(r.reason == skip_reason::not_stepped);
  CHECK(s.stats().skipped_steps == 1);
  // Skipped without an overflow (step_report.hpp, docs/loss_scaling.md): skipped_steps counts it, the overflow
  // record does not.
  CHECK_FALSE(r.found_inf);
  CHECK(s.stats().applied_steps == 0);
  CHECK(s.stats().last_overflow_step == -1);
  CHECK(s.stats().backoff_events == 0);
}

TEST_CASE("clip works on unscaled gradients and returns the pre-clip norm") {
  loss_scaler s(scaler_config{.init_scale = 1024.0f});
  std::vector<float> a = {3.0f * 1024.0f, 0.0f};
  std::vector<float> b = {4.0f * 1024.0f};
  s.unscale(a);
  s.unscale(b);
  const std::span<float> both[] = {a, b};
  const clip_result c = s.clip_grad_norm(std::span<const std::span<float>>(both), 1.0);
  CHECK(c.norm_before == 5.0);  // true magnitude, not 5 * 1024
  CHECK(c.clipped);
  CHECK(a[0] == static_cast<float>(3.0 / 5.0));
  CHECK(b[0] == static_cast<float>(4.0 / 5.0));
  CHECK(c.norm_after == Approx(1.0).epsilon(1e-7));
  const step_report r = s.step([] {});
  CHECK(r.grad_norm_before_clip == 5.0);
  CHECK(r.applied);
}

TEST_CASE("clip accepts a buffer unscaled in pieces that cover it, and refuses one with a gap") {
  // The reviewer's case: the halves of one flat buffer unscaled separately, then the whole buffer clipped.
  loss_scaler s;  // scale 65536
  std::vector<float> flat(8, 65536.0f);
  const std::span<float> all(flat);
  s.unscale(all.first(4));
  s.unscale(all.last(4));  // every element is 65536 * f32(1/65536) = 1 now
  const clip_result c = s.clip_grad_norm(all, 1.0);
  CHECK(c.norm_before == std::sqrt(8.0));  // eight ones
  CHECK(c.clipped);
  for (const float v : flat) CHECK(v == static_cast<float>(1.0 / std::sqrt(8.0)));
  CHECK(s.step([] {}).applied);
  s.update();

  // Three pieces in any order, one of them empty, cover it too; so do two buffers, each covered differently.
  std::vector<float> g(8, 65536.0f);
  std::vector<float> other(3, 65536.0f);
  const std::span<float> whole(g);
  s.unscale(whole.subspan(5, 3));
  s.unscale(whole.subspan(0, 0));
  s.unscale(whole.subspan(0, 2));
  s.unscale(whole.subspan(2, 3));
  s.unscale(other);
  const std::span<float> both[] = {whole, std::span<float>(other)};
  CHECK(s.clip_grad_norm(std::span<const std::span<float>>(both), 100.0).norm_before == std::sqrt(11.0));
  s.step([] {});
  s.update();

  // A gap of one element (index 3 never unscaled) is refused, for the whole buffer and for any span over the gap.
  std::vector<float> h(8, 65536.0f);
  const std::span<float> hs(h);
  s.unscale(hs.first(3));
  s.unscale(hs.last(4));
  CHECK_THROWS_WITH(s.clip_grad_norm(hs, 1.0), Catch::Contains("(8 elements) with elements not unscaled"));
  CHECK_THROWS_WITH(s.clip_grad_norm(hs.subspan(2, 3), 1.0), Catch::Contains("not unscaled"));
  CHECK_THROWS_WITH(s.clip_grad_norm(hs.subspan(3, 1), 1.0), Catch::Contains("not unscaled"));
  CHECK(h[3] == 65536.0f);  // a refused clip scales nothing
  CHECK(h[0] == 1.0f);
  CHECK(s.clip_grad_norm(hs.subspan(4, 4), 10.0).norm_before == 2.0);  // inside one piece: four ones
  CHECK(s.clip_grad_norm(hs.subspan(1, 2), 10.0).norm_before == std::sqrt(2.0));
}

TEST_CASE("an inf found by unscale is reported found_inf, although the clip then sees a non-finite norm") {
  // The documented order: unscale (finds the inf), clip (its norm is inf too), step. The gradient is the
  // cause; non_finite_norm is kept for norms that overflow on their own.
  loss_scaler t(scaler_config{.init_scale = 2.0f});
  std::vector<float> bad = {1.0f, inf};
  CHECK(t.unscale(bad));
  const clip_result c = t.clip_grad_norm(bad, 1.0);
  CHECK_FALSE(c.finite);
  CHECK(bad[0] == 0.5f);  // untouched by the clip
  bool ran = false;
  const step_report r = t.step([&] { ran = true; });
  CHECK_FALSE(ran);
  CHECK(r.found_inf);
  CHECK(r.reason == skip_reason::found_inf);
  CHECK(t.update().reason == skip_reason::found_inf);
  CHECK(t.stats().non_finite_norms == 0);
  CHECK(t.stats().skipped_steps == 1);
}

TEST_CASE("non_finite_norm only when every gradient check was finite and the norm alone is not") {
  loss_scaler t(scaler_config{.init_scale = 2.0f});
  std::vector<float> g = {2.0f, 4.0f};
  CHECK_FALSE(t.unscale(g));  // {1, 2}: finite
  g[1] = inf;                 // the buffer changed after its check (e.g. a hook wrote into it)
  const clip_result c = t.clip_grad_norm(g, 1.0);
  CHECK_FALSE(c.finite);
  CHECK(g[0] == 1.0f);  // a non-finite norm scales nothing
  bool ran = false;
  const step_report r = t.step([&] { ran = true; });
  CHECK_FALSE(ran);
  CHECK(r.found_inf);
  CHECK(r.reason == skip_reason::non_finite_norm);
  t.update();
  CHECK(t.stats().non_finite_norms == 1);
  CHECK(t.stats().skipped_steps == 1);
}

TEST_CASE("a flag recorded before or after a non-finite clip makes the reason found_inf; counters per reason") {
  loss_scaler t(scaler_config{.init_scale = 2.0f});
  auto norm_overflow = [&](std::vector<float>& g) {  // finite at unscale, inf at the clip
    CHECK_FALSE(t.unscale(g));
    g[0] = inf;
    CHECK_FALSE(t.clip_grad_norm(g, 1.0).finite);
  };
  // 1: another rank's flag after the clip.
  std::vector<float> g1 = {2.0f};
  norm_overflow(g1);
  t.record_found_inf(true);
  CHECK(t.step([] {}).reason == skip_reason::found_inf);
  t.update();
  // 2: the flag before the clip.
  std::vector<float> g2 = {2.0f};
  t.record_found_inf(true);
  norm_overflow(g2);
  CHECK(t.step([] {}).reason == skip_reason::found_inf);
  t.update();
  // 3: a finite flag changes nothing: the norm alone overflowed.
  std::vector<float> g3 = {2.0f};
  t.record_found_inf(false);
  norm_overflow(g3);
  CHECK(t.step([] {}).reason == skip_reason::non_finite_norm);
  t.update();
  // 4: a clean step, then the reason resets.
  std::vector<float> g4 = {2.0f};
  CHECK_FALSE(t.unscale(g4));
  CHECK(t.clip_grad_norm(g4, 10.0).finite);
  CHECK(t.step([] {}).reason == skip_reason::none);
  t.update();
  CHECK(t.stats().steps == 4);
  CHECK(t.stats().skipped_steps == 3);
  CHECK(t.stats().applied_steps == 1);
  CHECK(t.stats().non_finite_norms == 1);
  CHECK(t.stats().last_overflow_step == 2);
}

TEST_CASE("the free clip helper never scales by NaN and validates max_norm") {
  // The free helper: NaN norm leaves the data alone.
  std::vector<float> n = {1.0f, std::nanf("")};
  const clip_result cn = clip_grad_norm(n, 1.0);
  CHECK_FALSE(cn.finite);
  CHECK(n[0] == 1.0f);
  CHECK_THROWS_AS(clip_grad_norm(n, 0.0), error);
  CHECK_THROWS_AS(clip_grad_norm(n, std::nan("")), error);
}

TEST_CASE("static and no-op scalers have the same interface and skip non-finite steps") {
  STATIC_REQUIRE(gradient_scaler<loss_scaler>);
  STATIC_REQUIRE(gradient_scaler<static_loss_scaler>);
  STATIC_REQUIRE(gradient_scaler<noop_loss_scaler>);
  static_loss_scaler st(static_scale_rule(8.0f));
  noop_loss_scaler no;
  int applied = 0;
  std::vector<float> g = {16.0f, inf};
  CHECK_FALSE(generic_step(st, g, applied).applied);
  CHECK(g[0] == 2.0f);
  st.update();
  CHECK(st.scale() == 8.0f);  // never moves
  std::vector<float> ok = {16.0f};
  CHECK(generic_step(st, ok, applied).applied);
  st.update();
  CHECK(applied == 1);
  CHECK(no.scale_loss(3.0f) == 3.0f);
  std::vector<float> h = {5.0f};
  CHECK(generic_step(no, h, applied).applied);
  CHECK(h[0] == 5.0f);
  no.update();
  std::vector<float> nan_grad = {std::nanf("")};
  CHECK_FALSE(generic_step(no, nan_grad, applied).applied);
  CHECK(no.update().found_inf);
  CHECK(no.stats().skipped_steps == 1);
}

TEST_CASE("record_found_inf carries an external (device or all-reduced) check") {
  loss_scaler s(scaler_config{.init_scale = 64.0f});
  s.record_found_inf(false);
  s.record_found_inf(true);  // another rank overflowed
  CHECK_FALSE(s.step([] {}).applied);
  CHECK(s.update().scale_after == 32.0f);
}

TEST_CASE("opt-in error after K consecutive overflows at the floor; the step is committed first") {
  loss_scaler s(scaler_config{.init_scale = 2.0f, .min_scale = 1.0f, .max_overflows_at_min = 2});
  std::vector<float> bad = {inf};
  const auto overflow_step = [&] {
    bad[0] = inf;
    s.unscale(bad);
    s.step([] {});
    return s.update();
  };
  CHECK(overflow_step().scale_after == 1.0f);  // 2 -> 1, not yet at the floor when it overflowed
  CHECK_NOTHROW(overflow_step());              // 1st overflow at the floor
  CHECK_THROWS_WITH(overflow_step(), Catch::Contains("2 consecutive overflows") && Catch::Contains("min_scale"));
  CHECK(s.stats().steps == 3);
  CHECK(s.stats().floor_hits == 2);
  CHECK(s.stage() == scaler_stage::ready);
  // The default (K = 0) never raises.
  loss_scaler quiet(scaler_config{.init_scale = 1.0f});
  for (int i = 0; i < 10; ++i) {
    quiet.record_found_inf(true);
    quiet.step([] {});
    CHECK_NOTHROW(quiet.update());
  }
}

TEST_CASE("unscale_and_check agrees with the separate check and scale passes") {
  std::vector<float> a = {1.0f, -3.0f, 1e-30f, 65504.0f, 0.0f, -0.0f};
  std::vector<float> b = a;
  CHECK_FALSE(unscale_and_check(a, 0.125f));
  CHECK_FALSE(has_non_finite(b));
  scale_in_place(b, 0.125f);
  CHECK(a == b);
  std::vector<float> c = {1.0f, -inf};
  CHECK(unscale_and_check(c, 0.5f));
  CHECK(inverse_scale(65536.0f) == 1.0f / 65536.0f);
  CHECK(inverse_scale(3.0f) == static_cast<float>(1.0 / 3.0));
}
