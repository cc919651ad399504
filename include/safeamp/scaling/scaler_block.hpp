// The scaler's memory: everything one step of a loss scaler reads and writes (state, this step's flags and
// norms, the last report, the counters) as one plain block, and the functions that end a step on it. A host
// scaler keeps the block in host memory; a device scaler keeps it in device memory and runs the same
// advance_step() in a one-thread kernel, so both produce the same bits (the block is trivially copyable).
#pragma once

#include <cstdint>
#include <limits>

#include "safeamp/config.hpp"
#include "safeamp/scaling/scaler_config.hpp"
#include "safeamp/scaling/step_report.hpp"
#include "safeamp/scaling/update_scale.hpp"

namespace safeamp {

struct scaler_block {
  scaler_state state{};  // the dynamic rule's state (a host scaler with a static rule keeps its scale in the rule)
  scaler_stats stats{};  // running counters
  step_report last{};    // report of the last finished step
  std::int32_t found_inf = 0;        // any overflow in this step: a gradient check or the norm
  std::int32_t gradient_inf = 0;     // an unscale or a recorded flag saw inf/NaN
  std::int32_t norm_non_finite = 0;  // the clip computed an inf/NaN norm
  std::int32_t padding = 0;          // keeps the doubles 8-byte aligned on every compiler; always 0
  double norm_before = -1.0;         // -1: no clip in this step
  double norm_after = -1.0;
  std::int64_t floor_error_step = -1;  // the last step whose update left overflows_at_min >= max_overflows_at_min > 0
  friend constexpr bool operator==(const scaler_block&, const scaler_block&) = default;
};

/// The block before the first step of a dynamic scaler with config `cfg`.
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr scaler_block initial_block(const scaler_config& cfg) noexcept {
  scaler_block b{};
  b.state = initial_state(cfg);
  return b;
}

/// The report of the step recorded in `b`, whose loss was scaled by `scale_before` and whose transition is `t`.
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr step_report make_step_report(const scaler_block& b, float scale_before,
                                                                         const scale_transition& t,
                                                                         bool stepped) noexcept {
  const bool found = b.found_inf != 0;
  // non_finite_norm only when every gradient check was finite and the norm alone was not.
  const bool norm_only = b.norm_non_finite != 0 && b.gradient_inf == 0;
  step_report r{};
  r.step = b.stats.steps;
  r.applied = stepped && !found;
  r.found_inf = found;
  r.reason = !found      ? (stepped ? skip_reason::none : skip_reason::not_stepped)
             : norm_only ? skip_reason::non_finite_norm
                         : skip_reason::found_inf;
  r.scale_before = scale_before;
  r.scale_after = t.next.scale;
  r.growth_tracker = t.next.growth_tracker;
  r.hysteresis_tracker = t.next.hysteresis_tracker;
  r.overflows_at_min = t.next.overflows_at_min;
  r.event = t.event;
  r.grad_norm_before_clip = b.norm_before;
  r.grad_norm_after_clip = b.norm_after;
  return r;
}

namespace detail {
/// ++counter, staying at INT64_MAX instead of overflowing (undefined behaviour). Unreachable in practice (2^63
/// steps are 292 years at 10^9 a second); a checkpoint with steps at INT64_MAX is refused on load.
SAFEAMP_HOST_DEVICE constexpr void count_one(std::int64_t& counter) noexcept {
  if (counter < std::numeric_limits<std::int64_t>::max()) ++counter;
}
}  // namespace detail

/// Adds one finished step to the counters (each saturates at INT64_MAX).
SAFEAMP_HOST_DEVICE constexpr void count_step(scaler_stats& s, const step_report& r,
                                              const scale_transition& t) noexcept {
  detail::count_one(s.steps);
  if (r.applied) {
    detail::count_one(s.applied_steps);
    s.consecutive_skips = 0;
  } else {
    detail::count_one(s.skipped_steps);
    detail::count_one(s.consecutive_skips);
  }
  if (r.found_inf) s.last_overflow_step = r.step;
  if (r.reason == skip_reason::non_finite_norm) detail::count_one(s.non_finite_norms);
  switch (t.event) {
    case scale_event::grew:
      detail::count_one(s.growth_events);
      break;
    case scale_event::growth_refused:
      detail::count_one(s.growth_refusals);
      break;
    case scale_event::absorbed:
      detail::count_one(s.absorbed_overflows);
      break;
    case scale_event::backed_off:
    case scale_event::clamped_at_min:
      detail::count_one(s.backoff_events);
      break;
    case scale_event::none:
      break;
  }
  // overflows_at_min only grows on a non-absorbed overflow at the floor (a clean step resets it).
  if (r.found_inf && t.event != scale_event::absorbed && t.next.overflows_at_min > 0) detail::count_one(s.floor_hits);
}

/// Ends the step recorded in `b`: its report (kept in b.last), the counters, the floor check against
/// max_overflows_at_min (0: never), and clears the step's flags and norms. Does not touch b.state: the
/// caller commits t.next (advance_step does it for the dynamic rule).
SAFEAMP_HOST_DEVICE constexpr void finish_step(scaler_block& b, float scale_before, const scale_transition& t,
                                               bool stepped, std::int32_t max_overflows_at_min) noexcept {
  b.last = make_step_report(b, scale_before, t, stepped);
  count_step(b.stats, b.last, t);
  if (max_overflows_at_min > 0 && t.next.overflows_at_min >= max_overflows_at_min) b.floor_error_step = b.last.step;
  b.found_inf = 0;
  b.gradient_inf = 0;
  b.norm_non_finite = 0;
  b.norm_before = -1.0;
  b.norm_after = -1.0;
}

/// One update of a dynamic scaler whose state is b.state: the transition on this step's flag, the report,
/// the counters, the floor check, and the next state. The host scaler and the device update kernel both run it.
SAFEAMP_HOST_DEVICE constexpr void advance_step(const scaler_config& cfg, scaler_block& b, bool stepped) noexcept {
  const scale_transition t = transition(cfg, b.state, b.found_inf != 0);
  finish_step(b, b.state.scale, t, stepped, cfg.max_overflows_at_min);
  b.state = t.next;
}

}  // namespace safeamp
