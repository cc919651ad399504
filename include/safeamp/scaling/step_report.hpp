// What one scaled training step did (step_report), and the running counters of a scaler (scaler_stats).
// A trainer advances its LR schedule only when report.applied is true.
#pragma once

#include <cstdint>
#include <string_view>

#include "safeamp/scaling/scaler_config.hpp"
#include "safeamp/scaling/update_scale.hpp"

namespace safeamp {

/// Why a step was (not) applied.
enum class skip_reason : std::uint8_t {
  none,             // applied: every gradient was finite
  found_inf,        // an unscaled gradient was inf or NaN
  non_finite_norm,  // the clip helper found an inf/NaN global norm
  not_stepped,      // update() ran after an inf check but the caller never called step()
};

[[nodiscard]] constexpr std::string_view skip_reason_name(skip_reason r) noexcept {
  switch (r) {
    case skip_reason::none:
      return "none";
    case skip_reason::found_inf:
      return "found_inf";
    case skip_reason::non_finite_norm:
      return "non_finite_norm";
    case skip_reason::not_stepped:
      return "not_stepped";
  }
  return "unknown";
}

[[nodiscard]] constexpr std::string_view scale_event_name(scale_event e) noexcept {
  switch (e) {
    case scale_event::none:
      return "none";
    case scale_event::grew:
      return "grew";
    case scale_event::growth_refused:
      return "growth_refused";
    case scale_event::absorbed:
      return "absorbed";
    case scale_event::backed_off:
      return "backed_off";
    case scale_event::clamped_at_min:
      return "clamped_at_min";
  }
  return "unknown";
}

struct step_report {
  std::int64_t step = 0;   // index of the step (0-based; every step counts, applied or not)
  bool applied = false;    // the update function ran
  bool found_inf = false;  // an overflow was recorded (gradient or norm)
  skip_reason reason = skip_reason::none;
  float scale_before = 0.0f;        // scale the loss was multiplied by in this step
  float scale_after = 0.0f;         // scale for the next step (after update())
  std::int32_t growth_tracker = 0;  // trackers after update()
  std::int32_t hysteresis_tracker = 0;
  std::int32_t overflows_at_min = 0;
  scale_event event = scale_event::none;  // what the transition did
  double grad_norm_before_clip = -1.0;    // -1 when the step did not clip
  double grad_norm_after_clip = -1.0;
  friend constexpr bool operator==(const step_report&, const step_report&) = default;
};

/// Running counters (telemetry; checkpointed with the scaler). Each stops at INT64_MAX instead of overflowing.
struct scaler_stats {
  std::int64_t steps = 0;  // updates completed
  std::int64_t applied_steps = 0;
  std::int64_t skipped_steps = 0;        // steps not applied: overflows, and update() without step() (not_stepped)
  std::int64_t consecutive_skips = 0;    // skipped steps since the last applied one
  std::int64_t growth_events = 0;        // the scale grew
  std::int64_t growth_refusals = 0;      // a window completed but growth was refused (max_scale / float range)
  std::int64_t backoff_events = 0;       // the scale was reduced (including reductions clamped at min_scale)
  std::int64_t absorbed_overflows = 0;   // overflows absorbed by the hysteresis
  std::int64_t floor_hits = 0;           // overflows that found the scale already at min_scale
  std::int64_t non_finite_norms = 0;     // clip-helper norms that were inf/NaN
  std::int64_t last_overflow_step = -1;  // step index of the last overflow, -1 if none
  friend constexpr bool operator==(const scaler_stats&, const scaler_stats&) = default;
};

}  // namespace safeamp
