// Timing on a stream with CUDA events: each repeat records a start and a stop event around the enqueued
// work, the host waits on the stop event before reading it (never reads an unfinished interval), after
// warm-up runs. check_timing() holds the result against the device's roofline (core roofline headers):
// a throughput above the bound is reported as a timing error, not a speedup.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "safeamp/error.hpp"
#include "safeamp/format/format_spec.hpp"
#include "safeamp/memory/roofline.hpp"

namespace safeamp::cuda {

struct timing_options {
  int warmup = 3;    // runs before measuring (clocks, caches, lazy module loading, cuBLASLt heuristics)
  int repeats = 10;  // measured runs, each timed by its own event pair
};

struct timing_result {
  std::vector<double> seconds;  // one per repeat, in order
  double median_seconds = 0.0;
  double min_seconds = 0.0;
  double max_seconds = 0.0;
};

/// Summary statistics of repeat times (throws safeamp::error for an empty list or a non-positive time).
[[nodiscard]] timing_result summarize(std::vector<double> seconds);

class stream_timer {
 public:
  explicit stream_timer(void* stream);  // creates the events (throws cuda_error)
  ~stream_timer();
  stream_timer(const stream_timer&) = delete;
  stream_timer& operator=(const stream_timer&) = delete;

  /// Runs `enqueue` warmup + 2 x repeats times on the stream: each timed run follows an untimed lead-in that keeps
  /// the stream busy while the host enqueues it, so no repeat includes host enqueue time. Returns the per-repeat
  /// device times.
  [[nodiscard]] timing_result measure(const std::function<void()>& enqueue, timing_options options = {});

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// A timed kernel checked against the roofline: what it achieved and whether that is possible.
struct timing_check {
  double seconds = 0.0;                    // the time checked (the fastest repeat: the most suspicious one)
  double achieved_flops = 0.0;             // cost.flops / seconds
  double achieved_bytes_per_second = 0.0;  // cost.bytes / seconds
  double fraction_of_peak = 0.0;           // achieved_flops / the device's peak in `compute`
  double fraction_of_bandwidth = 0.0;      // achieved bytes/s / the device's DRAM bandwidth
  plausibility verdict{};                  // from check_measurement: plausible, ratio, diagnosis
};

/// Checks the fastest repeat of `t` for `cost` on device `d` in format `compute`.
[[nodiscard]] inline timing_check check_timing(const device_spec& d, format_spec compute, kernel_cost cost,
                                               const timing_result& t,
                                               double tolerance = default_plausibility_tolerance) {
  timing_check c;
  c.seconds = t.min_seconds;
  c.verdict = check_measurement(d, compute, cost, c.seconds, tolerance);
  c.achieved_flops = cost.flops / c.seconds;
  c.achieved_bytes_per_second = cost.bytes / c.seconds;
  c.fraction_of_peak = c.achieved_flops / peak_flops_for(d, compute);
  c.fraction_of_bandwidth = c.achieved_bytes_per_second / d.memory_bytes_per_second;
  return c;
}

/// A measurement the roofline says cannot be real.
class timing_error : public safeamp::error {
 public:
  explicit timing_error(const std::string& what) : safeamp::error(what) {}
};

/// Throws timing_error with the diagnosis when the check is not plausible; returns it otherwise.
inline const timing_check& require_plausible(const timing_check& c, std::string_view what) {
  if (!c.verdict.plausible) throw timing_error(std::string(what) + ": " + c.verdict.diagnosis);
  return c;
}

}  // namespace safeamp::cuda
