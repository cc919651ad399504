// Deterministic parallel loop over independent tasks (see parallel.hpp), on worker threads kept for the whole
// process: a training step runs a few dozen loops of a few tens of microseconds each (small GEMMs, attention
// heads, GELU chunks), and starting and joining a thread for every loop cost about as much as the work.
//
// One loop runs on the pool at a time. A call made while another thread's loop holds the pool, or from inside a
// task, or in a child process after fork (the pool's threads are not there), runs its tasks on the calling thread
// alone: which thread runs a task never changes what it computes.
#include "safeamp/sim/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__unix__)
#include <unistd.h>
#endif

namespace safeamp::sim {
namespace {

using task_fn = std::function<void(std::int64_t)>;

thread_local bool inside_task = false;  // this thread is running a task of some loop

long process_id() noexcept {
#if defined(__unix__)
  return static_cast<long>(::getpid());
#else
  return 0;
#endif
}

class worker_pool {
 public:
  worker_pool() : owner_(process_id()) {}
  worker_pool(const worker_pool&) = delete;
  worker_pool& operator=(const worker_pool&) = delete;
  ~worker_pool() {
    {
      const std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  /// Runs task(i) for every i in [0, tasks) on the caller and up to helpers pool threads; false (nothing run)
  /// when the pool cannot take the loop now.
  bool run(std::int64_t helpers, std::int64_t tasks, const task_fn& task) {
    if (process_id() != owner_ || !busy_.try_lock()) return false;
    const std::lock_guard<std::mutex> busy(busy_, std::adopt_lock);
    {
      const std::lock_guard<std::mutex> lock(m_);
      while (static_cast<std::int64_t>(threads_.size()) < helpers) threads_.emplace_back([this] { work(); });
      task_ = &task;
      tasks_ = tasks;
      next_.store(0);
      wanted_ = helpers;
      joined_ = 0;
      failure_ = nullptr;
      ++generation_;
    }
    wake_.notify_all();
    drain();
    std::unique_lock<std::mutex> lock(m_);
    wanted_ = 0;  // closed: a helper that wakes up late does not join
    done_.wait(lock, [this] { return active_ == 0; });
    task_ = nullptr;
    const std::exception_ptr failure = failure_;
    lock.unlock();
    if (failure) std::rethrow_exception(failure);
    return true;
  }

 private:
  void work() {
    std::uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(m_);
    for (;;) {
      wake_.wait(lock, [&] { return stop_ || (generation_ != seen && joined_ < wanted_); });
      if (stop_) return;
      seen = generation_;
      ++joined_;
      ++active_;
      lock.unlock();
      drain();
      lock.lock();
      if (--active_ == 0) done_.notify_all();
    }
  }

  // Takes tasks until none is left; the first exception is kept for the caller.
  void drain() {
    inside_task = true;
    for (std::int64_t i = next_.fetch_add(1); i < tasks_; i = next_.fetch_add(1)) {
      try {
        (*task_)(i);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(m_);
        if (!failure_) failure_ = std::current_exception();
      }
    }
    inside_task = false;
  }

  const long owner_;
  std::mutex busy_;  // held by the caller whose loop the pool runs
  std::mutex m_;     // guards everything below but next_
  std::condition_variable wake_, done_;
  std::vector<std::thread> threads_;
  const task_fn* task_ = nullptr;
  std::int64_t tasks_ = 0;
  std::atomic<std::int64_t> next_{0};
  std::int64_t wanted_ = 0;  // helpers the open loop asks for (0: none open)
  std::int64_t joined_ = 0;  // helpers that joined it
  std::int64_t active_ = 0;  // helpers still draining it
  std::uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr failure_;
};

worker_pool& pool() {
  static worker_pool p;
  return p;
}

}  // namespace

void parallel_for(int threads, std::int64_t tasks, const std::function<void(std::int64_t)>& task) {
  if (tasks <= 0) return;
  const std::int64_t workers = std::min<std::int64_t>(threads < 1 ? 1 : threads, tasks);
  if (workers > 1 && !inside_task && pool().run(workers - 1, tasks, task)) return;
  for (std::int64_t i = 0; i < tasks; ++i) task(i);
}

void parallel_chunks(int threads, std::int64_t n, std::int64_t chunk,
                     const std::function<void(std::int64_t, std::int64_t)>& body) {
  if (n <= 0) return;
  const std::int64_t size = chunk < 1 ? n : chunk;
  parallel_for(n >= 2 * size ? threads : 1, (n + size - 1) / size, [&](std::int64_t c) {
    const std::int64_t begin = c * size;
    body(begin, std::min(n, begin + size));
  });
}

}  // namespace safeamp::sim
