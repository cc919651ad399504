// The loss scaler over a deferred memory (the device scaler's code path), run on the host through
// queued_memory: no wait inside a step, the same gradients, reports, counters and checkpoints as the host
// scaler on the same flag sequence, checkpoints that move between the two bit-exactly, config validated once,
// max_overflows_at_min raised at the next read, and the misuse errors of the host scaler.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "queued_memory.hpp"
#include "safeamp/format/philox.hpp"
#include "safeamp/scaling/deferred_loss_scaler.hpp"
#include "safeamp/scaling/loss_scaler.hpp"
#include "scaler_sequences.hpp"

using namespace safeamp;
using deferred_scaler = basic_loss_scaler<dynamic_scale_rule, testing::queued_memory>;

namespace {

constexpr float inf = std::numeric_limits<float>::infinity();

const scaler_config every_field = testing::every_field_config;

// Gradients of the scaled loss for one step; `bad` puts an inf in the second buffer.
std::vector<std::vector<float>> step_gradients(std::uint64_t step, bool bad) {
  std::vector<std::vector<float>> g = {std::vector<float>(37), std::vector<float>(5)};
  for (std::size_t b = 0; b < g.size(); ++b) {
    for (std::size_t i = 0; i < g[b].size(); ++i) {
      const std::uint32_t r = stochastic_bits(3, static_cast<std::uint32_t>(b), step * 64 + i);
      g[b][i] = static_cast<float>(static_cast<std::int32_t>(r % 20001u) - 10000) * 0.37f;
    }
  }
  if (bad) g[1][2] = inf;
  return g;
}

bool flag_at(std::uint64_t step) { return testing::overflow_at(step); }

}  // namespace

TEST_CASE("deferred scaler: hand-derived scales and counters, no wait inside the steps") {
  deferred_scaler s(scaler_config{.init_scale = 1024.0f, .growth_interval = 2, .min_scale = 256.0f});
  CHECK(s.memory().waits() == 0);
  // flags F F T T T: 1024 -> 1024 -> 2048 (grew) -> 1024 -> 512 -> 256
  const bool flags[] = {false, false, true, true, true};
  // one buffer per step: queued passes read them later, as a stream reads device memory
  std::vector<std::vector<float>> grads(5, std::vector<float>(4, 2048.0f));
  for (std::size_t i = 0; i < 5; ++i) {
    if (flags[i]) grads[i][3] = inf;
    s.unscale(std::span<float>(grads[i]));
    s.step([] {});
    s.update();
  }
  CHECK(s.memory().waits() == 0);  // five steps enqueued, nothing read
  CHECK(s.steps_enqueued() == 5);
  const scaler_stats st = s.stats();
  CHECK(s.memory().waits() == 1);
  CHECK(st.steps == 5);
  CHECK(st.applied_steps == 2);
  CHECK(st.skipped_steps == 3);
  CHECK(st.consecutive_skips == 3);
  CHECK(st.growth_events == 1);
  CHECK(st.backoff_events == 3);
  CHECK(st.last_overflow_step == 4);
  CHECK(s.scale() == 256.0f);
  // each step unscaled 2048 by the scale of its point in the queue: 1024, 1024, 2048, 1024, 512
  CHECK(grads[0][0] == 2.0f);
  CHECK(grads[2][0] == 1.0f);
  CHECK(grads[4][0] == 4.0f);
  const step_report r = s.last_report();
  CHECK(r.step == 4);
  CHECK(r.scale_before == 512.0f);
  CHECK(r.scale_after == 256.0f);
  CHECK(r.event == scale_event::backed_off);
  CHECK(r.reason == skip_reason::found_inf);
}

TEST_CASE("deferred scaler: same gradients, reports, counters and checkpoint as the host scaler") {
  loss_scaler host(every_field);
  deferred_scaler dev(every_field);
  std::vector<std::vector<std::vector<float>>> deferred_grads;  // alive until read, as device buffers are
  deferred_grads.reserve(600);
  int applied_h = 0, applied_d = 0;  // optimizer runs: inline on the host, predicated in the queue
  for (std::uint64_t step = 0; step < 600; ++step) {
    const bool bad = flag_at(step);
    auto gh = step_gradients(step, bad);
    auto& gd = deferred_grads.emplace_back(gh);
    std::vector<std::span<float>> sh = {gh[0], gh[1]}, sd = {gd[0], gd[1]};
    for (auto& b : sh) (void)host.unscale(b);
    const bool clip = step % 5 == 0;
    if (clip) (void)host.clip_grad_norm(std::span<const std::span<float>>(sh), 50.0);
    (void)host.step([&] { ++applied_h; });
    const step_report rh = host.update();

    dev.unscale(std::span<const std::span<float>>(sd));
    if (clip) dev.clip_grad_norm(std::span<const std::span<float>>(sd), 50.0);
    dev.step([&] { dev.memory().enqueue_predicated([&](bool found) { applied_d += found ? 0 : 1; }); });
    dev.update();
    if (step % 50 != 49) continue;  // read every 50 steps only: 49 steps queued between reads
    const scaler_block b = dev.read();
    INFO("step " << step);
    REQUIRE(b.last == rh);
    REQUIRE(b.stats == host.stats());
    REQUIRE(b.state == host.rule().state);
    REQUIRE(gd == gh);  // unscaled (and clipped) bits identical, flagged steps included
    REQUIRE(applied_d == applied_h);
  }
  CHECK(dev.memory().waits() == 12);
  CHECK(dev.save_json() == host.save_json());
  CHECK(host.stats().skipped_steps > 100);  // the sequence really exercised overflows,
  CHECK(host.stats().growth_events > 5);    // growth,
  CHECK(host.stats().floor_hits > 0);       // and the floor
  CHECK(host.stats().absorbed_overflows > 0);
}

TEST_CASE("deferred scaler: checkpoints move between host and deferred memory bit-exactly") {
  loss_scaler host(every_field);
  for (std::uint64_t step = 0; step < 97; ++step) {
    auto g = step_gradients(step, flag_at(step));
    (void)host.unscale(g[0]);
    (void)host.unscale(g[1]);
    (void)host.step([] {});
    (void)host.update();
  }
  // host -> deferred -> host: the same text at each hop, and the same future
  deferred_scaler dev(scaler_config{});
  dev.load_json(host.save_json());
  CHECK(dev.config() == every_field);
  CHECK(dev.save_json() == host.save_json());
  loss_scaler back(scaler_config{});
  back.load_json(dev.save_json());
  CHECK(back.checkpoint() == host.checkpoint());
  std::vector<std::vector<std::vector<float>>> deferred_grads;
  deferred_grads.reserve(300);
  for (std::uint64_t step = 97; step < 300; ++step) {
    const bool bad = flag_at(step);
    auto gh = step_gradients(step, bad);
    auto& gd = deferred_grads.emplace_back(gh);
    (void)host.unscale(gh[0]);
    (void)host.unscale(gh[1]);
    (void)host.step([] {});
    (void)host.update();
    const std::span<float> sd[] = {gd[0], gd[1]};
    dev.unscale(std::span<const std::span<float>>(sd));
    dev.step([] {});
    dev.update();
  }
  CHECK(dev.checkpoint() == host.checkpoint());
  CHECK(dev.checkpoint().stats.steps == 300);
}

TEST_CASE("deferred scaler: config validated once, at construction") {
  CHECK_THROWS_WITH(deferred_scaler(scaler_config{.backoff_factor = 1.5}), Catch::Contains("backoff_factor"));
  CHECK_THROWS_WITH(deferred_scaler(scaler_config{.init_scale = 0.5f, .min_scale = 1.0f}),
                    Catch::Contains("init_scale"));
  deferred_scaler s(scaler_config{});
  CHECK_THROWS_WITH(s.load_json("{}"), Catch::Contains("format"));
  CHECK(s.config() == scaler_config{});  // a refused restore changes nothing
}

TEST_CASE("deferred scaler: max_overflows_at_min raises at the next read, once per new floor hit") {
  deferred_scaler s(scaler_config{.init_scale = 4.0f, .min_scale = 1.0f, .max_overflows_at_min = 3});
  std::vector<std::vector<float>> grads;
  grads.reserve(8);
  const auto overflow_step = [&] {
    s.unscale(std::span<float>(grads.emplace_back(std::vector<float>{1.0f, inf})));
    s.step([] {});
    s.update();  // never throws: the device cannot
  };
  // 4 -> 2 -> 1 (backoffs), then overflows at the floor: counts 1, 2, 3 (raise) at steps 2, 3, 4
  for (int i = 0; i < 4; ++i) overflow_step();
  CHECK(s.read().state.overflows_at_min == 2);  // not yet: 2 overflows at the floor
  overflow_step();
  CHECK_THROWS_WITH(s.stats(), Catch::Contains("3 consecutive overflows") && Catch::Contains("step 4") &&
                                   Catch::Contains("max_overflows_at_min is 3"));
  CHECK(s.stats().steps == 5);  // reported once; the state was committed
  CHECK(s.checkpoint().state.overflows_at_min == 3);
  overflow_step();
  CHECK_THROWS_WITH(s.scale(), Catch::Contains("4 consecutive overflows") && Catch::Contains("step 5"));
}

TEST_CASE("deferred scaler: misuse of the step order is refused as on the host") {
  deferred_scaler s(scaler_config{});
  std::vector<float> g(8, 1.0f);
  const std::span<float> a(g.data(), 4), overlap(g.data() + 2, 4);
  CHECK_THROWS_WITH(s.step([] {}), Catch::Contains("no inf check"));
  CHECK_THROWS_WITH(s.update(), Catch::Contains("no inf check"));
  s.unscale(a);
  CHECK_THROWS_WITH(s.unscale(overlap), Catch::Contains("twice"));
  CHECK_THROWS_WITH(s.checkpoint(), Catch::Contains("middle of a step"));
  const std::span<float> not_unscaled(g.data() + 4, 4);
  CHECK_THROWS_WITH(s.clip_grad_norm(std::span<const std::span<float>>(&not_unscaled, 1), 1.0),
                    Catch::Contains("not unscaled"));
  CHECK_THROWS_WITH(s.clip_grad_norm(std::span<const std::span<float>>(&a, 1), 0.0), Catch::Contains("max_norm"));
  s.step([] {});
  CHECK_THROWS_WITH(s.step([] {}), Catch::Contains("twice"));
  CHECK_THROWS_WITH(s.unscale(overlap), Catch::Contains("after step()"));
  s.update();
  s.unscale(a);  // a new step: the same buffer again is fine
  CHECK(s.memory().waits() == 0);
}

TEST_CASE("deferred scaler: clip accepts a buffer unscaled in pieces that cover it, and refuses a gap") {
  deferred_scaler s(scaler_config{});  // scale 65536
  std::vector<float> flat(8, 65536.0f);
  const std::span<float> all(flat);
  s.unscale(all.last(4));
  s.unscale(all.first(4));
  s.clip_grad_norm(std::span<const std::span<float>>(&all, 1), 1.0);
  s.step([] {});
  s.update();
  CHECK(s.last_report().grad_norm_before_clip == std::sqrt(8.0));  // eight ones
  CHECK(flat[5] == static_cast<float>(1.0 / std::sqrt(8.0)));
  std::vector<float> h(8, 65536.0f);
  const std::span<float> hs(h);
  s.unscale(hs.first(3));
  s.unscale(hs.last(4));  // element 3 is still scaled
  CHECK_THROWS_WITH(s.clip_grad_norm(std::span<const std::span<float>>(&hs, 1), 1.0),
                    Catch::Contains("(32 bytes) with bytes not unscaled"));
}

TEST_CASE("deferred scaler: update() without step() reports not_stepped and counts a skip, as on the host") {
  deferred_scaler s(scaler_config{.init_scale = 1024.0f});
  std::vector<float> g(3, 1024.0f);
  s.unscale(std::span<float>(g));
  s.update();  // the caller never stepped: the optimizer did not run although the gradients were finite
  const step_report r = s.last_report();
  CHECK_FALSE(r.applied);
  CHECK_FALSE(r.found_inf);
  CHECK(r.reason == skip_reason::not_stepped);
  CHECK(s.stats().skipped_steps == 1);
  CHECK(s.stats().applied_steps == 0);
  CHECK(s.stats().last_overflow_step == -1);
}

TEST_CASE("host scaler: a floor error from before a restore is not raised again after it") {
  // K = 1: every overflow at the floor raises. Step 1 overflows at the floor (raise, step 1); restore a
  // checkpoint taken after step 0, then a clean step 1: no error, although the old floor step was also 1.
  loss_scaler s(scaler_config{.init_scale = 1.0f, .min_scale = 1.0f, .max_overflows_at_min = 1});
  std::vector<float> clean = {1.0f}, bad = {inf};
  (void)s.unscale(clean);
  (void)s.step([] {});
  (void)s.update();
  const scaler_checkpoint after_step0 = s.checkpoint();
  (void)s.unscale(bad);
  (void)s.step([] {});
  CHECK_THROWS_WITH(s.update(), Catch::Contains("max_overflows_at_min is 1"));
  s.restore(after_step0);
  clean = {1.0f};
  (void)s.unscale(clean);
  (void)s.step([] {});
  CHECK_NOTHROW(s.update());
  CHECK(s.stats().steps == 2);
}
