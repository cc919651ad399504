// A request to stop training at the end of the step in progress (a Ctrl-C, a batch system's SIGTERM or SIGUSR1 before
// its time limit), so that an interrupted run loses no step: the trainer saves its checkpoint there and throws
// run_stopped, and `--resume` continues from that step bit-identically. The ranks of a data-parallel run act on the
// MAX of their requests after each step, so a request on any one rank stops all of them after the same step.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace safeamp::sim {

/// Records a request to stop, naming the signal that asked (any non-zero number; a test may pass its own).
/// Async-signal-safe: one store into a lock-free atomic, so a signal handler may call it.
void request_stop(int signal) noexcept;

/// The signal of the pending request, 0 when none.
[[nodiscard]] int stop_requested() noexcept;

/// Withdraws the pending request (a test between two runs; the tool after it has acted on one).
void clear_stop_request() noexcept;

/// Thrown by train() when a stop was requested: after the step in progress, or before the first step of a run that
/// had not begun. What the caller needs to tell the user where the run stopped and how to continue.
class run_stopped : public std::runtime_error {
 public:
  run_stopped(int signal, std::string label, std::int64_t steps_done, std::int64_t steps, std::string checkpoint);

  [[nodiscard]] int signal() const noexcept { return signal_; }
  /// The run's label.
  [[nodiscard]] const std::string& label() const noexcept { return label_; }
  /// Steps the run has done, those before its checkpoint included (the step its resume begins at).
  [[nodiscard]] std::int64_t steps_done() const noexcept { return steps_done_; }
  /// The run's step count.
  [[nodiscard]] std::int64_t steps() const noexcept { return steps_; }
  /// The checkpoint file that holds step steps_done: written there, or, for a run stopped before its first step,
  /// the one it was resumed from (empty: the run saves none, or began at step 0).
  [[nodiscard]] const std::string& checkpoint() const noexcept { return checkpoint_; }

 private:
  int signal_;
  std::string label_;
  std::int64_t steps_done_;
  std::int64_t steps_;
  std::string checkpoint_;
};

}  // namespace safeamp::sim
