// A scaler's running counters (steps, skipped steps, consecutive skips, growth and backoff events, floor hits,
// ...) as one JSON object, for logs and dashboards next to the per-step JSON Lines records.
#pragma once

#include <string>

#include "safeamp/scaling/step_report.hpp"
#include "safeamp/telemetry/json.hpp"

namespace safeamp::telemetry {

[[nodiscard]] inline std::string to_json(const scaler_stats& s) {
  json::object_writer w;
  w.add("steps", s.steps).add("applied_steps", s.applied_steps).add("skipped_steps", s.skipped_steps);
  w.add("consecutive_skips", s.consecutive_skips).add("growth_events", s.growth_events);
  w.add("growth_refusals", s.growth_refusals).add("backoff_events", s.backoff_events);
  w.add("absorbed_overflows", s.absorbed_overflows).add("floor_hits", s.floor_hits);
  w.add("non_finite_norms", s.non_finite_norms).add("last_overflow_step", s.last_overflow_step);
  return w.str();
}

}  // namespace safeamp::telemetry
