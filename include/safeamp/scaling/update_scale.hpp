// The one loss-scale transition, (config, state, found_inf) -> next state: constexpr and callable from
// CUDA device code, so the CPU scaler, the simulator and the device-side update kernel all run this code.
// Its table is in docs/loss_scaling.md. It assumes a validated config (validate() in scaler_validate.hpp).
#pragma once

#include <cstdint>
#include <limits>

#include "safeamp/config.hpp"
#include "safeamp/scaling/scaler_config.hpp"

namespace safeamp {
namespace detail {

/// Smallest double that rounds (to nearest even) to +inf as a float: 2^128 - 2^103, the midpoint between
/// FLT_MAX and 2^128 (it rounds up, to the even 2^128). Everything below rounds to a finite float.
inline constexpr double float_overflow_threshold = 340282356779733661637539395458142568448.0;

/// f32(x) for 0 < x: the float nearest to x, +inf where the conversion would overflow. Checking first
/// keeps the conversion defined (an out-of-range double-to-float conversion is undefined behaviour).
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr float to_float_or_inf(double x) noexcept {
  return x >= float_overflow_threshold ? std::numeric_limits<float>::infinity() : static_cast<float>(x);
}

[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr bool is_finite(float x) noexcept {
  return x <= float_max && x >= -float_max;  // false for +-inf and NaN
}

}  // namespace detail

/// What a transition did; reported by the stateful scaler and counted by telemetry.
enum class scale_event : std::uint8_t {
  none,            // clean step inside the growth window
  grew,            // clean step completed the window and the scale grew
  growth_refused,  // the window completed but growth would pass max_scale or leave the float range
  absorbed,        // overflow absorbed by the hysteresis (scale kept, step still skipped)
  backed_off,      // overflow: scale multiplied by backoff_factor
  clamped_at_min,  // overflow: backoff would go below min_scale, so the scale is min_scale (or stays there)
};

struct scale_transition {
  scaler_state next;
  scale_event event = scale_event::none;
  friend constexpr bool operator==(const scale_transition&, const scale_transition&) = default;
};

/// The transition with the event that happened. Rules (factors in double, result stored as float32):
///  overflow:  growth_tracker = 0; hysteresis_tracker = max(h - 1, 0);
///             if the tracker is still > 0 the overflow is absorbed, else scale = max(f32(s * backoff), min);
///             overflows_at_min counts overflows that find s == min and are not absorbed (up to INT32_MAX).
///  clean:     overflows_at_min = 0; consecutive mode refills the hysteresis; growth_tracker + 1 reaching
///             growth_interval is a growth event: tracker = 0, since_growth mode refills the hysteresis,
///             and s = f32(s * growth) unless that is > max_scale or not finite (then s is kept).
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr scale_transition transition(const scaler_config& cfg, scaler_state s,
                                                                        bool found_inf) noexcept {
  scale_transition t{s, scale_event::none};
  scaler_state& n = t.next;
  if (found_inf) {
    n.growth_tracker = 0;
    n.hysteresis_tracker = s.hysteresis_tracker > 0 ? s.hysteresis_tracker - 1 : 0;
    if (n.hysteresis_tracker > 0) {
      t.event = scale_event::absorbed;
      return t;
    }
    // Counts up to INT32_MAX and stays there (a wrap would be undefined and would disarm the floor check).
    if (s.scale <= cfg.min_scale && s.overflows_at_min < std::numeric_limits<std::int32_t>::max()) {
      n.overflows_at_min = s.overflows_at_min + 1;
    }
    const float reduced = static_cast<float>(static_cast<double>(s.scale) * cfg.backoff_factor);
    if (reduced < cfg.min_scale) {
      n.scale = cfg.min_scale;
      t.event = scale_event::clamped_at_min;
    } else {
      n.scale = reduced;
      t.event = scale_event::backed_off;
    }
    return t;
  }
  n.overflows_at_min = 0;
  if (cfg.mode == hysteresis_mode::consecutive) n.hysteresis_tracker = cfg.hysteresis;
  const std::int32_t successful = s.growth_tracker + 1;
  if (successful < cfg.growth_interval) {
    n.growth_tracker = successful;
    return t;
  }
  n.growth_tracker = 0;
  if (cfg.mode == hysteresis_mode::since_growth) n.hysteresis_tracker = cfg.hysteresis;
  const float grown = detail::to_float_or_inf(static_cast<double>(s.scale) * cfg.growth_factor);
  if (detail::is_finite(grown) && grown <= cfg.max_scale) {
    n.scale = grown;
    t.event = scale_event::grew;
  } else {
    t.event = scale_event::growth_refused;
  }
  return t;
}

/// The one transition: (config, state, found_inf) -> next state.
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr scaler_state update_scale(const scaler_config& cfg, scaler_state s,
                                                                      bool found_inf) noexcept {
  return transition(cfg, s, found_inf).next;
}

}  // namespace safeamp
