// The communicator concept's helpers on N ranks of an in-process thread group (a real exchange between
// threads): integer found_inf consensus, the step order of a data-parallel step (one overflowing rank skips
// every rank; unscale uses the scale of the backward), the scaler-state check naming diverging ranks, and the
// fixed-order global norm across shards.
#include "safeamp/scaling/communicator.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "../../support/thread_communicator.hpp"
#include "safeamp/scaling.hpp"

using namespace safeamp;
using safeamp::testing::thread_world;

static_assert(rank_communicator<thread_world::rank_handle>);

namespace {
constexpr float inf = std::numeric_limits<float>::infinity();
constexpr float nan_value = std::numeric_limits<float>::quiet_NaN();
}  // namespace

TEST_CASE("agree_found_inf: the integer MAX over ranks; one rank's flag reaches every rank", "[communicator]") {
  for (const int flagged : {-1, 0, 2, 3}) {
    thread_world w(4);
    std::vector<int> seen(4, -1);
    w.run([&](thread_world::rank_handle& c) {
      seen[static_cast<std::size_t>(c.rank())] = agree_found_inf(c, c.rank() == flagged) ? 1 : 0;
    });
    const int expected = flagged >= 0 ? 1 : 0;
    CHECK(seen == std::vector<int>(4, expected));
  }
}

TEST_CASE("data-parallel step: inf or NaN on one rank skips the step on every rank, states stay equal",
          "[communicator]") {
  const scaler_config cfg{.init_scale = 1024.0f, .growth_interval = 3};
  for (const float bad : {inf, nan_value}) {
    thread_world w(3);
    std::vector<step_report> reports(3);
    std::vector<int> applied(3, 0);
    w.run([&](thread_world::rank_handle& c) {
      loss_scaler s{dynamic_scale_rule(cfg)};
      for (int step = 0; step < 4; ++step) {
        // Rank 1 alone holds a non-finite gradient at step 1 (its shard of a sharded optimizer, say).
        std::vector<float> g = {2048.0f, -512.0f};
        if (step == 1 && c.rank() == 1) g[1] = bad;
        const std::span<float> bufs[] = {g};
        (void)unscale_and_agree(c, s, std::span<const std::span<float>>(bufs));
        const step_report r = s.step([&] { ++applied[static_cast<std::size_t>(c.rank())]; });
        (void)r;
        const step_report done = s.update();
        check_scaler_consensus(c, scaler_consensus_hash(done), done.step);
        if (step == 1) reports[static_cast<std::size_t>(c.rank())] = done;
      }
    });
    // Hand trace: step 0 clean (tracker 1), step 1 overflow everywhere: scale 1024 * 0.5 = 512, skipped.
    for (const step_report& r : reports) {
      CHECK_FALSE(r.applied);
      CHECK(r.found_inf);
      CHECK(r.scale_after == 512.0f);
    }
    CHECK(applied == std::vector<int>(3, 3));  // steps 0, 2, 3 applied on every rank
  }
}

TEST_CASE("without the consensus, ranks that check only their own shard diverge and the check names them",
          "[communicator]") {
  const scaler_config cfg{.init_scale = 1024.0f};
  thread_world w(4);
  std::vector<std::string> messages(4);
  std::mutex m;
  w.run([&](thread_world::rank_handle& c) {
    loss_scaler s{dynamic_scale_rule(cfg)};
    std::vector<float> g = {1.0f};
    if (c.rank() == 1 || c.rank() == 3) g[0] = inf;
    (void)s.unscale(g);  // local check only: the bug the consensus prevents
    (void)s.step([] {});
    const step_report done = s.update();
    try {
      check_scaler_consensus(c, scaler_consensus_hash(done), done.step);
    } catch (const error& e) {
      const std::lock_guard<std::mutex> lock(m);
      messages[static_cast<std::size_t>(c.rank())] = e.what();
    }
  });
  for (const std::string& msg : messages) {
    CHECK(msg.find("after step 0") != std::string::npos);
    CHECK(msg.find("rank(s) 1, 3 differ") != std::string::npos);
  }
}

TEST_CASE("a corrupted scaler state on one rank is named", "[communicator]") {
  thread_world w(3);
  std::vector<std::string> messages(3);
  std::mutex m;
  w.run([&](thread_world::rank_handle& c) {
    step_report r{.step = 7, .applied = true, .scale_after = 4096.0f, .growth_tracker = 5, .hysteresis_tracker = 1};
    if (c.rank() == 2) r.growth_tracker = 6;
    try {
      check_scaler_consensus(c, scaler_consensus_hash(r), r.step);
    } catch (const error& e) {
      const std::lock_guard<std::mutex> lock(m);
      messages[static_cast<std::size_t>(c.rank())] = e.what();
    }
  });
  for (const std::string& msg : messages)
    CHECK(msg.find("rank(s) 2 differ from the other 2 of 3") != std::string::npos);
}

TEST_CASE("find_diverging_ranks: the ranks off the majority, the lowest rank's value on a tie", "[communicator]") {
  using v = std::vector<std::uint64_t>;
  const auto diverging = [](const v& hashes) { return find_diverging_ranks(hashes).ranks; };
  CHECK(diverging(v{5, 5, 7, 5}) == std::vector<int>{2});
  CHECK(find_diverging_ranks(v{5, 5, 7, 5}).agreeing == 3);
  CHECK(diverging(v{9, 9, 9}).empty());
  CHECK(diverging(v{1, 2}) == std::vector<int>{1});                 // a tie of one each: rank 0's value
  CHECK(diverging(v{1, 2, 2}) == std::vector<int>{0});              // the majority need not include rank 0
  CHECK(diverging(v{1, 2, 3, 2, 1}) == std::vector<int>{1, 2, 3});  // 1 and 2 tie at two: rank 0's 1 wins
  CHECK(diverging(v{}).empty());
  const std::string text = scaler_divergence_error(v{4, 4, 8, 4, 8}, 12).what();
  CHECK(text.find("after step 12: rank(s) 2, 4 differ from the other 3 of 5 ranks") != std::string::npos);
}

TEST_CASE("scaler_consensus_hash changes with every field the ranks must share", "[communicator]") {
  const step_report base{.step = 3,
                         .applied = true,
                         .found_inf = false,
                         .scale_after = 256.0f,
                         .growth_tracker = 2,
                         .hysteresis_tracker = 1,
                         .overflows_at_min = 0};
  const std::uint64_t h = scaler_consensus_hash(base);
  CHECK(scaler_consensus_hash(base) == h);
  std::vector<step_report> changed(7, base);
  changed[0].step = 4;
  changed[1].applied = false;
  changed[2].found_inf = true;
  changed[3].scale_after = std::nextafter(256.0f, 512.0f);
  changed[4].growth_tracker = 3;
  changed[5].hysteresis_tracker = 0;
  changed[6].overflows_at_min = 1;
  for (const step_report& r : changed) CHECK(scaler_consensus_hash(r) != h);
  // Telemetry-only fields (norms, scale_before) are not part of the state.
  step_report norms = base;
  norms.grad_norm_before_clip = 12.0;
  CHECK(scaler_consensus_hash(norms) == h);
}

TEST_CASE("unscale uses the scale of the backward on a growth step", "[communicator]") {
  // growth_interval 1: the clean step grows 8 -> 16. The gradient was scaled by 8 in the backward, so the
  // applied update must see 24 / 8 = 3 (DeepSpeed's order unscales by the grown scale and sees 1.5).
  const scaler_config cfg{.init_scale = 8.0f, .growth_interval = 1};
  thread_world w(2);
  std::vector<float> applied_value(2, 0.0f);
  std::vector<float> next_scale(2, 0.0f);
  std::vector<int> agreed(2, -1);
  w.run([&](thread_world::rank_handle& c) {  // Catch2 assertions only on the main thread
    const auto r = static_cast<std::size_t>(c.rank());
    loss_scaler s{dynamic_scale_rule(cfg)};
    std::vector<float> g = {24.0f};
    const std::span<float> bufs[] = {g};
    agreed[r] = unscale_and_agree(c, s, std::span<const std::span<float>>(bufs)) ? 1 : 0;
    (void)s.step([&] { applied_value[r] = g[0]; });
    next_scale[r] = s.update().scale_after;
  });
  CHECK(agreed == std::vector<int>{0, 0});
  CHECK(next_scale == std::vector<float>{16.0f, 16.0f});
  CHECK(applied_value == std::vector<float>{3.0f, 3.0f});
}

TEST_CASE("global_norm_across_ranks sums shard norms in rank order", "[communicator]") {
  // Shards {1, 2}, {2}, {4}: sqrt(1 + 4 + 4 + 16) = 5 on every rank.
  thread_world w(3);
  std::vector<double> norms(3, -1.0);
  const std::vector<std::vector<float>> shards = {{1.0f, 2.0f}, {2.0f}, {4.0f}};
  w.run([&](thread_world::rank_handle& c) {
    std::vector<float> mine = shards[static_cast<std::size_t>(c.rank())];
    const std::span<float> bufs[] = {mine};
    norms[static_cast<std::size_t>(c.rank())] = global_norm_across_ranks(c, std::span<const std::span<float>>(bufs));
  });
  CHECK(norms == std::vector<double>{5.0, 5.0, 5.0});
}
