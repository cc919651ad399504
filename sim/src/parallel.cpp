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
#include <chrono>
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

// How long a thread that waits for the pool spins before it sleeps on a condition variable. A step's loops
// follow each other a few microseconds apart, and waking a sleeping thread (a futex call, then the scheduler)
// took longer than many of the loops themselves: on the 2-vCPU VMs of docs/performance.md a two-thread
// training step was slower than a one-thread one until helpers spun between loops. Spinning that long costs
// at most this much of one core after the last loop of a burst (OpenMP runtimes spin for a comparable time).
constexpr std::chrono::microseconds spin_limit{200};

// One step of a busy wait: tells the core that this thread spins, so that it yields issue slots to the other
// hardware thread of the core, if any.
inline void spin_pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins until done() is true or spin_limit has passed; returns done().
template <class Done>
bool spin_until(Done done) {
  if (done()) return true;
  const auto deadline = std::chrono::steady_clock::now() + spin_limit;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      spin_pause();
      if (done()) return true;
    }
    if (std::chrono::steady_clock::now() >= deadline) return done();
  }
}

class worker_pool {
 public:
  worker_pool() : owner_(process_id()) {}
  worker_pool(const worker_pool&) = delete;
  worker_pool& operator=(const worker_pool&) = delete;
  ~worker_pool() {
    {
      const std::lock_guard<std::mutex> lock(m_);
      stop_.store(true);
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  /// Runs task(i) for every i in [0, tasks) on the caller and up to helpers pool threads; false (nothing run)
  /// when the pool cannot take the loop now.
  bool run(std::int64_t helpers, std::int64_t tasks, const task_fn& task) {
    if (process_id() != owner_ || !busy_.try_lock()) return false;
    const std::lock_guard<std::mutex> busy(busy_, std::adopt_lock);
    bool sleepers = false;
    {
      const std::lock_guard<std::mutex> lock(m_);
      while (static_cast<std::int64_t>(threads_.size()) < helpers) threads_.emplace_back([this] { work(); });
      task_ = &task;
      tasks_ = tasks;
      next_.store(0);
      wanted_ = helpers;
      joined_ = 0;
      failure_ = nullptr;
      generation_.fetch_add(1);  // spinning helpers see this without the lock
      sleepers = sleeping_ > 0;
    }
    if (sleepers) wake_.notify_all();
    drain();
    {
      const std::lock_guard<std::mutex> lock(m_);
      wanted_ = 0;  // closed: a helper that comes late does not join
    }
    if (!spin_until([this] { return active_.load() == 0; })) {
      std::unique_lock<std::mutex> lock(m_);
      done_.wait(lock, [this] { return active_.load() == 0; });
    }
    const std::lock_guard<std::mutex> lock(m_);
    task_ = nullptr;
    if (failure_) std::rethrow_exception(failure_);
    return true;
  }

 private:
  void work() {
    std::uint64_t seen = 0;
    for (;;) {
      spin_until([&] { return stop_.load() || generation_.load() != seen; });
      std::unique_lock<std::mutex> lock(m_);
      if (!stop_.load() && generation_.load() == seen) {
        ++sleeping_;
        wake_.wait(lock, [&] { return stop_.load() || generation_.load() != seen; });
        --sleeping_;
      }
      if (stop_.load()) return;
      seen = generation_.load();
      if (joined_ >= wanted_) continue;  // closed already, or enough helpers
      ++joined_;
      active_.fetch_add(1);
      lock.unlock();
      drain();
      lock.lock();
      if (active_.fetch_sub(1) == 1) done_.notify_all();
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
  std::mutex m_;     // guards everything below but the atomics, which are written under it and read without it
  std::condition_variable wake_, done_;
  std::vector<std::thread> threads_;
  const task_fn* task_ = nullptr;
  std::int64_t tasks_ = 0;
  std::atomic<std::int64_t> next_{0};
  std::int64_t wanted_ = 0;              // helpers the open loop asks for (0: none open)
  std::int64_t joined_ = 0;              // helpers that joined it
  std::int64_t sleeping_ = 0;            // helpers waiting on wake_
  std::atomic<std::int64_t> active_{0};  // helpers still draining it
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
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
