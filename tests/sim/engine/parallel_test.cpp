// parallel_for on its pool of worker threads (sim/src/parallel.cpp): every task runs exactly once, loop after
// loop and for any thread count; a task's exception reaches the caller; a loop inside a task and loops from
// two threads at once complete (they run on the calling thread when the pool is taken); a helper joins a loop
// whether it was still spinning after the previous loop or had gone to sleep.
#include "safeamp/sim/parallel.hpp"

#include <atomic>
#include <chrono>
#include <catch2/catch.hpp>
#include <cstdint>
#include <stdexcept>
#include <thread>
#include <vector>

using safeamp::sim::parallel_for;
using namespace std::chrono_literals;

namespace {

// Runs one loop and returns how many times each task ran.
std::vector<int> run_counts(int threads, std::int64_t tasks) {
  std::vector<std::atomic<int>> runs(static_cast<std::size_t>(tasks));
  parallel_for(threads, tasks, [&](std::int64_t i) { runs[static_cast<std::size_t>(i)].fetch_add(1); });
  std::vector<int> out;
  for (const auto& r : runs) out.push_back(r.load());
  return out;
}

}  // namespace

TEST_CASE("every task runs exactly once, loop after loop, for any thread count") {
  for (int round = 0; round < 50; ++round) {
    for (const int threads : {1, 2, 3, 8}) {
      for (const std::int64_t tasks :
           {std::int64_t{0}, std::int64_t{1}, std::int64_t{2}, std::int64_t{7}, std::int64_t{64}}) {
        INFO("round " << round << ", threads " << threads << ", tasks " << tasks);
        const std::vector<int> runs = run_counts(threads, tasks);
        CHECK(runs == std::vector<int>(static_cast<std::size_t>(tasks), 1));
      }
    }
  }
}

TEST_CASE("a task's exception reaches the caller, and the pool keeps working") {
  const auto throwing = [](std::int64_t i) {
    if (i == 5) throw std::runtime_error("task 5 failed");
  };
  CHECK_THROWS_WITH(parallel_for(2, 16, throwing), "task 5 failed");
  CHECK_THROWS_WITH(parallel_for(1, 16, throwing), "task 5 failed");
  CHECK(run_counts(2, 33) == std::vector<int>(33, 1));
}

TEST_CASE("a loop inside a task, and loops from two threads at once, complete with every task once") {
  std::vector<std::atomic<int>> inner(8 * 16);
  parallel_for(2, 8, [&](std::int64_t outer) {
    parallel_for(2, 16, [&](std::int64_t i) { inner[static_cast<std::size_t>(outer * 16 + i)].fetch_add(1); });
  });
  for (const auto& r : inner) CHECK(r.load() == 1);

  std::vector<int> a, b;
  std::thread other([&] {
    for (int k = 0; k < 200; ++k) a = run_counts(2, 40);
  });
  for (int k = 0; k < 200; ++k) b = run_counts(2, 40);
  other.join();
  CHECK(a == std::vector<int>(40, 1));
  CHECK(b == std::vector<int>(40, 1));
}

namespace {

// Runs a loop of two tasks, each of which waits (up to 2 s) for the other to start: true when two threads ran
// them, which only a pool thread joining the loop can make happen (the caller alone runs one after the other).
bool helper_joined() {
  std::atomic<int> started{0};
  std::thread::id ran_by[2];
  parallel_for(2, 2, [&](std::int64_t i) {
    ran_by[i] = std::this_thread::get_id();
    started.fetch_add(1);
    const auto deadline = std::chrono::steady_clock::now() + 2s;
    while (started.load() < 2 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  });
  return ran_by[0] != ran_by[1];
}

}  // namespace

TEST_CASE("a helper joins the next loop whether it is still spinning or has gone to sleep") {
  CHECK(helper_joined());  // starts the pool's thread
  for (int k = 0; k < 20; ++k) {
    INFO("back-to-back loop " << k);
    CHECK(helper_joined());  // the helper is still spinning after the previous loop
  }
  // Pauses far beyond the pool's spin (200 us): the helper waits on the condition variable and must be woken.
  for (const auto pause : {5ms, 20ms, 50ms}) {
    std::this_thread::sleep_for(pause);
    INFO("after a pause of " << pause.count() << " ms");
    CHECK(helper_joined());
    CHECK(run_counts(2, 64) == std::vector<int>(64, 1));
  }
}
