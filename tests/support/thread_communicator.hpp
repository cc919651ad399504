// A test double of safeamp::rank_communicator: N ranks as N threads of one process. Every collective is a
// real exchange: each rank writes its bytes into its slot, all ranks meet at a barrier, each reads every slot
// and combines them (integer MAX, MIN, ...), and a second barrier keeps a fast rank from overwriting a slot
// another rank has not read yet. Used by the scaling unit tests and the simulator's data-parallel tests.
#pragma once

#include <algorithm>
#include <barrier>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

namespace safeamp::testing {

class thread_world {
 public:
  explicit thread_world(int ranks) : size_(ranks), sync_(ranks), slots_(static_cast<std::size_t>(ranks)) {}

  /// One rank's view: satisfies safeamp::rank_communicator.
  class rank_handle {
   public:
    rank_handle(thread_world& w, int r) : w_(&w), rank_(r) {}
    [[nodiscard]] int rank() const { return rank_; }
    [[nodiscard]] int size() const { return w_->size_; }
    std::int32_t max_i32(std::int32_t v) {
      const auto all = w_->exchange_value(rank_, v);
      return *std::max_element(all.begin(), all.end());
    }
    std::uint64_t min_u64(std::uint64_t v) {
      const auto all = w_->exchange_value(rank_, v);
      return *std::min_element(all.begin(), all.end());
    }
    std::uint64_t max_u64(std::uint64_t v) {
      const auto all = w_->exchange_value(rank_, v);
      return *std::max_element(all.begin(), all.end());
    }
    void allgather(std::span<const std::byte> mine, std::span<std::byte> all) { w_->exchange(rank_, mine, all); }

   private:
    thread_world* w_;
    int rank_;
  };

  /// Runs body(handle) on every rank, one thread each, and rethrows the first exception any rank threw.
  /// A body that throws on some ranks only must not enter another collective (the others would wait). Test
  /// assertions (Catch2 is not thread-safe) belong after run(), on the main thread.
  void run(const std::function<void(rank_handle&)>& body) {
    std::vector<std::thread> threads;
    std::exception_ptr first;
    std::mutex m;
    for (int r = 0; r < size_; ++r) {
      threads.emplace_back([&, r] {
        rank_handle h(*this, r);
        try {
          body(h);
        } catch (...) {
          const std::lock_guard<std::mutex> lock(m);
          if (!first) first = std::current_exception();
        }
      });
    }
    for (std::thread& t : threads) t.join();
    if (first) std::rethrow_exception(first);
  }

 private:
  void exchange(int rank, std::span<const std::byte> mine, std::span<std::byte> all) {
    slots_[static_cast<std::size_t>(rank)].assign(mine.begin(), mine.end());
    sync_.arrive_and_wait();
    std::size_t at = 0;
    for (const std::vector<std::byte>& s : slots_) {
      std::memcpy(all.data() + at, s.data(), s.size());
      at += s.size();
    }
    sync_.arrive_and_wait();
  }
  template <class T>
  std::vector<T> exchange_value(int rank, T v) {
    std::vector<T> all(static_cast<std::size_t>(size_));
    exchange(rank, std::as_bytes(std::span<const T>(&v, 1)), std::as_writable_bytes(std::span<T>(all)));
    return all;
  }

  int size_;
  std::barrier<> sync_;
  std::vector<std::vector<std::byte>> slots_;
};

}  // namespace safeamp::testing
