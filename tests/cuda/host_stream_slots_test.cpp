// Host-side checks of stream_slots (cuda/include/safeamp/cuda/stream_slots.hpp), the per-stream state behind
// gemm_engine: one slot per stream made once, a throwing factory leaves nothing behind, and counters read by
// one thread while others run are never torn (every use happens under its slot's lock). No GPU needed.
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "safeamp/cuda/stream_slots.hpp"

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
