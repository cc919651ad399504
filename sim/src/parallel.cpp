// Deterministic parallel loop over independent tasks (see parallel.hpp).
#include "safeamp/sim/parallel.hpp"

#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace safeamp::sim {

void parallel_for(int threads, std::int64_t tasks, const std::function<void(std::int64_t)>& task) {
  if (tasks <= 0) return;
  const std::int64_t workers = std::min<std::int64_t>(threads < 1 ? 1 : threads, tasks);
  if (workers <= 1) {
    for (std::int64_t i = 0; i < tasks; ++i) task(i);
    return;
  }
  std::atomic<std::int64_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto work = [&] {
    for (std::int64_t i = next.fetch_add(1); i < tasks; i = next.fetch_add(1)) {
      try {
        task(i);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(failure_mutex);
        if (!failure) failure = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(workers - 1));
  for (std::int64_t w = 1; w < workers; ++w) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace safeamp::sim
