// Asynchronous telemetry of the device scaler: every N steps its scaler_block (device_amp_state) is copied into pinned
// host memory behind the step's work (cudaMemcpyAsync + an event); the host polls the event without
// blocking and reads the snapshot once the copy has landed. No host synchronisation in the step.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "safeamp/cuda/amp_ops.hpp"
#include "safeamp/error.hpp"

namespace safeamp::cuda {

struct amp_snapshot {
  std::int64_t requested_at_step = 0;  // the host's step counter when the copy was enqueued
  device_amp_state state{};            // the scaler_block: state, flags, last report, counters
};

/// True when a snapshot is due after `step` (steps 0, N, 2N, ...). N must be >= 1.
[[nodiscard]] constexpr bool snapshot_due(std::int64_t step, std::int64_t every_n_steps) noexcept {
  return every_n_steps > 0 && step % every_n_steps == 0;
}

class telemetry_reader {
 public:
  /// Throws safeamp::error when every_n_steps < 1; allocates pinned memory and an event (cuda_error).
  explicit telemetry_reader(std::int64_t every_n_steps);
  ~telemetry_reader();
  telemetry_reader(const telemetry_reader&) = delete;
  telemetry_reader& operator=(const telemetry_reader&) = delete;

  /// Call once per step after the scaler update is enqueued. Enqueues a copy when one is due and the
  /// previous copy has landed (a copy still in flight is never overwritten; that snapshot is skipped).
  void on_step(std::int64_t step, const device_amp_state* state, void* stream);

  /// The newest landed snapshot not yet returned, without blocking (cudaEventQuery).
  [[nodiscard]] std::optional<amp_snapshot> poll();

  [[nodiscard]] std::int64_t copies_enqueued() const noexcept;
  [[nodiscard]] std::int64_t copies_skipped_in_flight() const noexcept;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace safeamp::cuda
