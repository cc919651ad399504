// The simulator's MLP classifier trained on the GPU from the same run_config: the same initial weights and
// batches (made by the simulator on the host), the same order of operations and the same step records
// (sim::run_result), so a GPU run and a simulator run can be compared step by step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "phase_timing.hpp"
#include "safeamp/sim/run_config.hpp"
#include "safeamp/sim/run_result.hpp"

namespace safeamp::gpu_trainer {

struct gpu_train_options {
  std::int64_t telemetry_every = 10;  // an asynchronous scaler snapshot every N steps (printed when it lands)
  bool print_progress = true;
};

struct gpu_run {
  sim::run_result result;                // step records, held-out metrics, probe logits, weights hash
  std::string device;                    // runtime device name
  std::int64_t telemetry_snapshots = 0;  // snapshots that landed during training
  std::int64_t telemetry_skipped_in_flight = 0;
  double gpu_seconds = 0.0;      // device time of the training loop (CUDA events)
  double enqueue_seconds = 0.0;  // host time spent enqueuing the loop (no waiting on the device)
  // Every phase's CUDA-event time against the device's roofline (empty when the device is not in the table,
  // with phase_check_note saying so). An implausible phase is a timing error, not a speed-up.
  std::vector<phase_check> phase_checks;
  std::string roofline_device;  // the device-table row the phases were checked against
  std::string phase_check_note;
};

/// Trains cfg on the current GPU. Throws safeamp::error for configurations the GPU trainer does not
/// support (check_gpu_supported) or sim::validate refuses, and cuda_error for device failures.
[[nodiscard]] gpu_run train_on_gpu(const sim::run_config& cfg, const gpu_train_options& options = {});

}  // namespace safeamp::gpu_trainer
