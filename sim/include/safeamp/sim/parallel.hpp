// Deterministic parallel loop: a fixed list of independent tasks (each writes its own output) spread
// over `threads` workers. Results never depend on the thread count because the task split does not.
#pragma once

#include <cstdint>
#include <functional>

namespace safeamp::sim {

/// Runs task(i) for i in [0, tasks) on up to `threads` threads (the caller's thread included).
/// Tasks must be independent; exceptions are rethrown on the calling thread.
void parallel_for(int threads, std::int64_t tasks, const std::function<void(std::int64_t)>& task);

/// Runs body(begin, end) over [0, n) cut into chunks of `chunk` elements (the last one shorter), as tasks of
/// parallel_for: the cut depends on n and chunk only, never on `threads`. One thread when n is under two chunks,
/// where starting helpers would cost more than they save.
void parallel_chunks(int threads, std::int64_t n, std::int64_t chunk,
                     const std::function<void(std::int64_t, std::int64_t)>& body);

}  // namespace safeamp::sim
