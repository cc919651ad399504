// Calibration of the per-phase model from a measured peak: torch.cuda.max_memory_allocated() after one step of the
// same configuration, against the model's largest phase peak; every allocation is then scaled by the ratio.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "safeamp/error.hpp"
#include "safeamp/memory/bytes.hpp"
#include "safeamp/memory/step_phases.hpp"

namespace safeamp {

/// A measured peak against the model's: ratio = measured / predicted at the measured microbatch.
struct peak_calibration {
  std::uint64_t measured_bytes = 0;
  std::uint64_t predicted_bytes = 0;  // the largest phase peak at the measured microbatch
  double ratio = 1.0;
};

/// Widest accepted disagreement between a measurement and the model: beyond 4x either way the measurement is of
/// something else (another configuration, or max_memory_reserved / nvidia-smi instead of max_memory_allocated).
inline constexpr double max_calibration_ratio = 4.0;

/// A peak measured after one whole step: torch.cuda.max_memory_allocated() at `microbatch` samples (named fields: a
/// byte count and a sample count side by side would compile when swapped).
struct peak_measurement {
  std::uint64_t measured_bytes = 0;
  std::uint64_t microbatch = 1;
};

/// Calibrates the model with the measured peak (torch.cuda.max_memory_allocated(): tensors only, without the CUDA
/// context or the allocator's cached slack, which the budget counts separately). Throws safeamp::error for 0 bytes, a
/// microbatch of 0, or a ratio outside [1/4, 4].
[[nodiscard]] inline peak_calibration calibrate_peak(const step_needs& needs, const peak_measurement& measurement) {
  const std::uint64_t microbatch = measurement.microbatch;
  const std::uint64_t measured_bytes = measurement.measured_bytes;
  if (microbatch == 0) throw error("measured-microbatch", "0", ">= 1 (the microbatch the peak was measured at)");
  if (measured_bytes == 0) throw error("measured-peak", "0 bytes", "> 0 bytes (torch.cuda.max_memory_allocated())");
  peak_calibration c;
  c.measured_bytes = measured_bytes;
  for (const phase_need& p : needs) c.predicted_bytes = std::max(c.predicted_bytes, p.bytes_at(microbatch));
  c.ratio = static_cast<double>(measured_bytes) / static_cast<double>(c.predicted_bytes);
  if (!(c.ratio <= max_calibration_ratio && c.ratio >= 1.0 / max_calibration_ratio)) {
    throw error("measured-peak",
                std::to_string(measured_bytes) + " bytes, " + std::to_string(c.ratio) + "x the model's " +
                    std::to_string(c.predicted_bytes) + " at microbatch " + std::to_string(microbatch),
                "within 4x of the model: the peak of the same configuration from torch.cuda.max_memory_allocated()");
  }
  return c;
}

/// The needs with every allocation multiplied by `ratio` (to the nearest byte): the model calibrated to a
/// measurement, on the assumption that its error is proportional (the same in every phase and per sample).
[[nodiscard]] inline step_needs scaled(const step_needs& needs, double ratio) {
  if (!(ratio > 0.0) || !std::isfinite(ratio))
    throw error("calibration ratio", std::to_string(ratio), "a finite number > 0");
  step_needs out = needs;
  for (phase_need& p : out) {
    for (phase_item& i : p.items) {
      i.fixed_bytes = bytes_from_real(std::round(static_cast<double>(i.fixed_bytes) * ratio), "calibrated bytes");
      i.bytes_per_sample =
          bytes_from_real(std::round(static_cast<double>(i.bytes_per_sample) * ratio), "calibrated bytes");
    }
  }
  return out;
}

}  // namespace safeamp
