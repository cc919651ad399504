// Deterministic parallel loop: a fixed list of independent tasks (each writes its own output) spread
// over `threads` workers. Results never depend on the thread count because the task split does not.
#pragma once

#include <cstdint>
#include <functional>

namespace safeamp::sim {

/// Runs task(i) for i in [0, tasks) on up to `threads` threads (the caller's thread included).
/// Tasks must be independent; exceptions are rethrown on the calling thread.
void parallel_for(int threads, std::int64_t tasks, const std::function<void(std::int64_t)>& task);

}  // namespace safeamp::sim
