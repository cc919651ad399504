// Host-side checks of stream_slots (cuda/include/safeamp/cuda/stream_slots.hpp), the per-stream state behind
// gemm_engine: one slot per stream made once, a throwing factory leaves nothing behind, counters read by one
// thread while others run are never torn (every use happens under its slot's lock), and the per-thread default
// stream gets one slot per host thread (the special handles checked against the CUDA header). No GPU needed.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "safeamp/cuda/stream_slots.hpp"

using safeamp::cuda::null_stream;
using safeamp::cuda::stream_key;
using safeamp::cuda::stream_slots;

namespace {

struct counter_slot {
  int id = 0;
  std::int64_t uses = 0;  // plain, not atomic: only the slot's lock keeps concurrent increments whole
  int inside = 0;         // threads inside a use of this slot right now (more than one: the lock failed)
  bool overlapped = false;
};

// A use that holds the slot for a while and gives the core away in the middle (as run() does while it
// enqueues): without the slot's lock another thread would enter the same slot here.
void slow_use(counter_slot& c) {
  c.overlapped = c.overlapped || c.inside != 0;
  ++c.inside;
  const std::int64_t before = c.uses;
  std::this_thread::yield();
  c.uses = before + 1;
  --c.inside;
}

void* stream_at(std::uintptr_t i) { return reinterpret_cast<void*>(0x1000 * i); }

}  // namespace

TEST_CASE("stream slots: one per stream, made once", "[cuda][host][slots]") {
  stream_slots<counter_slot> slots;
  int made = 0;
  const auto make = [&] { return counter_slot{.id = ++made}; };
  const auto id_of = [&](void* s) { return slots.with_slot(s, make, [](counter_slot& c) { return c.id; }); };
  CHECK(id_of(nullptr) == 1);  // the default stream is a stream like any other
  CHECK(id_of(stream_at(1)) == 2);
  CHECK(id_of(nullptr) == 1);
  CHECK(id_of(stream_at(1)) == 2);
  CHECK(id_of(stream_at(2)) == 3);
  CHECK(made == 3);
  CHECK(slots.size() == 3);

  // a factory that throws (a failed workspace allocation) leaves no slot; the next use makes one
  CHECK_THROWS_AS(
      slots.with_slot(
          stream_at(9), []() -> counter_slot { throw std::runtime_error("out of memory"); }, [](counter_slot&) {}),
      std::runtime_error);
  CHECK(slots.size() == 3);
  CHECK(id_of(stream_at(9)) == 4);
  // erase: the slot goes (a released stream), the next use makes a new one; erasing a stream without one is a no-op
  CHECK(slots.erase(stream_at(1)));
  CHECK_FALSE(slots.erase(stream_at(1)));
  CHECK(slots.size() == 3);
  CHECK(id_of(stream_at(1)) == 5);
  CHECK(id_of(stream_at(2)) == 3);  // the others untouched
  slots.clear();
  CHECK(slots.size() == 0);
}

TEST_CASE("stream slots: readers see whole counters while threads run", "[cuda][host][slots]") {
  stream_slots<counter_slot> slots;
  std::atomic<int> made{0};
  const auto make = [&] { return counter_slot{.id = ++made}; };
  constexpr int threads = 4, uses_per_thread = 1000, streams = 3;
  std::atomic<bool> done{false};
  std::int64_t largest_seen = 0;
  bool went_down = false;
  std::thread reader([&] {  // cache_stats() in another thread
    while (!done.load()) {
      std::int64_t total = 0;
      slots.for_each([&](const counter_slot& c) { total += c.uses; });
      went_down = went_down || total < largest_seen;  // totals only grow
      largest_seen = total > largest_seen ? total : largest_seen;
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < uses_per_thread; ++i) {
        slots.with_slot(stream_at(static_cast<std::uintptr_t>((t + i) % streams)), make, slow_use);
      }
    });
  }
  for (std::thread& w : workers) w.join();
  done = true;
  reader.join();
  std::int64_t total = 0;
  bool overlapped = false;
  slots.for_each([&](const counter_slot& c) {
    total += c.uses;
    overlapped = overlapped || c.overlapped;
  });
  CHECK_FALSE(overlapped);                                  // one thread at a time in a slot
  CHECK(total == std::int64_t{threads} * uses_per_thread);  // no increment lost
  CHECK(made.load() == streams);                            // one slot per stream, even when threads raced
  CHECK_FALSE(went_down);
}

TEST_CASE("stream slots: an erase during a use leaves that use its slot", "[cuda][host][slots]") {
  // One thread is inside a use of stream 1's slot when another erases it: the slot is not destroyed under the use
  // (it is once the use ends), and the next use of stream 1 gets a new slot.
  struct tracked_slot {
    int id = 0;
    std::shared_ptr<std::atomic<int>> destroyed;  // counts this slot's destruction (a moved-from one holds none)
    tracked_slot(int i, std::shared_ptr<std::atomic<int>> d) : id(i), destroyed(std::move(d)) {}
    tracked_slot(tracked_slot&&) noexcept = default;
    tracked_slot& operator=(tracked_slot&&) noexcept = default;
    ~tracked_slot() {
      if (destroyed) ++*destroyed;
    }
  };
  stream_slots<tracked_slot> slots;
  const auto first = std::make_shared<std::atomic<int>>(0), second = std::make_shared<std::atomic<int>>(0);
  std::atomic<bool> inside{false}, erased{false};
  int destroyed_during_use = -1;
  std::thread user([&] {
    slots.with_slot(
        stream_at(1), [&] { return tracked_slot(1, first); },
        [&](tracked_slot&) {
          inside = true;
          while (!erased) std::this_thread::yield();
          destroyed_during_use = *first;
        });
  });
  while (!inside) std::this_thread::yield();
  CHECK(slots.erase(stream_at(1)));
  erased = true;
  user.join();
  CHECK(destroyed_during_use == 0);  // alive while in use
  CHECK(*first == 1);                // and destroyed once the use ended
  CHECK(slots.size() == 0);
  CHECK(slots.with_slot(
            stream_at(1), [&] { return tracked_slot(2, second); }, [](tracked_slot& t) { return t.id; }) == 2);
}

TEST_CASE("stream slots: the runtime's special handles are the ones the keys know", "[cuda][host][slots]") {
  // driver_types.h is the oracle: a key built from other values would mistake cudaStreamPerThread for a plain stream
  CHECK(reinterpret_cast<std::uintptr_t>(cudaStreamLegacy) == safeamp::cuda::legacy_stream_handle);
  CHECK(reinterpret_cast<std::uintptr_t>(cudaStreamPerThread) == safeamp::cuda::per_thread_stream_handle);
}

namespace {

// The slot id each of `threads` threads gets for `stream`, twice per thread (once before every thread has made its
// first use, once after: the threads wait for each other in between).
std::vector<std::pair<int, int>> ids_by_thread(stream_slots<counter_slot>& slots, void* stream, int threads,
                                               std::atomic<int>& made) {
  std::vector<std::pair<int, int>> ids(static_cast<std::size_t>(threads));
  std::atomic<int> first_done{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      const auto make = [&] { return counter_slot{.id = ++made}; };
      const auto use = [](counter_slot& c) {
        slow_use(c);
        return c.id;
      };
      auto& [first, second] = ids[static_cast<std::size_t>(t)];
      first = slots.with_slot(stream, make, use);
      ++first_done;
      while (first_done.load() < threads) std::this_thread::yield();
      second = slots.with_slot(stream, make, use);
    });
  }
  for (std::thread& w : workers) w.join();
  return ids;
}

}  // namespace

TEST_CASE("stream slots: cudaStreamPerThread is one stream per host thread", "[cuda][host][slots]") {
  // Before the fix the slot was keyed by the handle's value, so every thread's per-thread default stream shared one
  // workspace while the streams ran concurrently on the device.
  constexpr int threads = 4;
  void* const per_thread = cudaStreamPerThread;
  stream_slots<counter_slot> slots;
  std::atomic<int> made{0};
  const auto ids = ids_by_thread(slots, per_thread, threads, made);
  CHECK(made.load() == threads);  // one slot per thread
  CHECK(slots.size() == static_cast<std::size_t>(threads));
  std::vector<int> seen;
  for (const auto& [first, second] : ids) {
    CHECK(first == second);  // a thread keeps its slot
    seen.push_back(first);
  }
  std::sort(seen.begin(), seen.end());
  CHECK(std::adjacent_find(seen.begin(), seen.end()) == seen.end());  // no two threads share one

  // The legacy default stream is one stream for every thread, whether named null or cudaStreamLegacy.
  std::atomic<int> made_legacy{0};
  stream_slots<counter_slot> legacy;
  const auto null_ids = ids_by_thread(legacy, nullptr, threads, made_legacy);
  const auto legacy_ids = ids_by_thread(legacy, cudaStreamLegacy, threads, made_legacy);
  CHECK(made_legacy.load() == 1);
  for (std::size_t t = 0; t < null_ids.size(); ++t) {
    CHECK(null_ids[t].first == 1);
    CHECK(legacy_ids[t].second == 1);
  }
  CHECK(legacy.key_of(nullptr) == stream_key{});
  CHECK(legacy.key_of(cudaStreamLegacy) == stream_key{});

  // A created stream's handle is shared by every thread that passes it.
  std::atomic<int> made_plain{0};
  stream_slots<counter_slot> plain;
  (void)ids_by_thread(plain, stream_at(5), threads, made_plain);
  CHECK(made_plain.load() == 1);
}

TEST_CASE("stream slots: null as the per-thread default stream", "[cuda][host][slots]") {
  // Code compiled with --default-stream per-thread: its null handle is the calling thread's stream, the same stream
  // as cudaStreamPerThread on that thread; cudaStreamLegacy is still the one legacy stream.
  constexpr int threads = 3;
  stream_slots<counter_slot> slots(null_stream::per_thread);
  std::atomic<int> made{0};
  const auto ids = ids_by_thread(slots, nullptr, threads, made);
  CHECK(made.load() == threads);
  for (const auto& [first, second] : ids) CHECK(first == second);
  CHECK(slots.key_of(nullptr) == slots.key_of(cudaStreamPerThread));
  CHECK_FALSE(slots.key_of(nullptr) == stream_key{});
  CHECK(slots.key_of(cudaStreamLegacy) == stream_key{});
}

TEST_CASE("stream slots: per-thread slots are released by their thread; a new thread never inherits one",
          "[cuda][host][slots]") {
  void* const per_thread = cudaStreamPerThread;
  stream_slots<counter_slot> slots;
  int made = 0;  // threads below run one at a time
  const auto make = [&] { return counter_slot{.id = ++made}; };
  const auto id = [](counter_slot& c) { return c.id; };
  int id_a = 0, id_b = 0, id_c = 0;
  bool c_erased_its_slot = false, c_had_one_slot = false;
  std::thread a([&] { id_a = slots.with_slot(per_thread, make, id); });
  a.join();
  // Thread a has ended (its GEMMs may still be queued on its stream): a later thread, even one that reuses a's
  // std::thread::id, gets a slot of its own.
  std::thread b([&] { id_b = slots.with_slot(per_thread, make, id); });
  b.join();
  CHECK(id_a == 1);
  CHECK(id_b == 2);
  CHECK(slots.size() == 2);
  // erase(cudaStreamPerThread) drops the calling thread's slot only.
  std::thread c([&] {
    id_c = slots.with_slot(per_thread, make, id);
    c_erased_its_slot = slots.erase(per_thread);
    c_had_one_slot = !slots.erase(per_thread);  // nothing left for this thread
  });
  c.join();
  CHECK(id_c == 3);
  CHECK(c_erased_its_slot);
  CHECK(c_had_one_slot);
  CHECK(slots.size() == 2);              // a's and b's stay
  CHECK_FALSE(slots.erase(per_thread));  // this (main) thread never used its per-thread stream
  CHECK(slots.size() == 2);
}
