// A request to stop training at a step boundary (stop_request.hpp).
#include "safeamp/sim/stop_request.hpp"

#include <atomic>
#include <utility>

namespace safeamp::sim {

namespace {

std::atomic<int> requested{0};
static_assert(std::atomic<int>::is_always_lock_free, "request_stop is called from signal handlers");

}  // namespace

void request_stop(int signal) noexcept { requested.store(signal, std::memory_order_relaxed); }

int stop_requested() noexcept { return requested.load(std::memory_order_relaxed); }

void clear_stop_request() noexcept { requested.store(0, std::memory_order_relaxed); }

run_stopped::run_stopped(int signal, std::string label, std::int64_t steps_done, std::int64_t steps,
                         std::string checkpoint)
    : std::runtime_error("run '" + label + "' stopped on request (signal " + std::to_string(signal) + ") after step " +
                         std::to_string(steps_done) + " of " + std::to_string(steps)),
      signal_(signal),
      label_(std::move(label)),
      steps_done_(steps_done),
      steps_(steps),
      checkpoint_(std::move(checkpoint)) {}

}  // namespace safeamp::sim
