// Validation of scaler configs and states at the boundary (construction, checkpoint load): each check throws
// safeamp::error naming the field, the value and the accepted range. Host-only (it builds strings).
#pragma once

#include <charconv>
#include <cmath>
#include <string>

#include "safeamp/error.hpp"
#include "safeamp/scaling/scaler_config.hpp"
#include "safeamp/scaling/update_scale.hpp"

namespace safeamp {
namespace detail {

/// Shortest text that reads back to the same value (for messages), e.g. "65536", "1e-40", "inf", "nan".
template <class T>
[[nodiscard]] std::string number_text(T v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

/// The first float scale s in [cfg.min_scale, cfg.max_scale] for which `moves(s)` is false, or 0 when there is
/// none. Whether f32(s * factor) equals s depends only on the significand m of s = m * 2^e (scaling by 2^e is
/// exact in double and float), and a factor close to 1 leaves the smallest significands unchanged first: s
/// stays when |factor - 1| <= (half the gap to the neighbour) / s, i.e. 2^-24 / m, except that below a power of
/// two the gap is half as wide. So for growth the worst scale is the first of its binade, for backoff the first
/// above a power of two: the first scale of each binade in the range and the float after it stand for every
/// scale in the range (at most 2 x 254 calls).
template <class Moves>
[[nodiscard]] float first_unmoved_scale(const scaler_config& cfg, Moves moves) {
  for (float lo = cfg.min_scale; lo <= cfg.max_scale;) {
    if (!moves(lo)) return lo;
    const float next = std::nextafter(lo, float_max);
    if (next <= cfg.max_scale && !moves(next)) return next;
    int exponent = 0;
    (void)std::frexp(lo, &exponent);  // lo = m * 2^exponent, m in [0.5, 1)
    lo = std::ldexp(1.0f, exponent);  // the first float of the next binade (inf above the top one)
  }
  return 0.0f;
}

}  // namespace detail

/// Throws safeamp::error for the first bad field of `cfg`:
/// init_scale in [min_scale, max_scale] and finite; growth_factor finite and > 1; backoff_factor in (0, 1);
/// growth_interval >= 1; hysteresis >= 1; mode a known value; min_scale finite, normal (>= 2^-126);
/// max_scale finite and >= min_scale; max_overflows_at_min >= 0. A factor must also act in float32 at every
/// scale in [min_scale, max_scale]: an overflow that backs off must lower the scale (f32(s * backoff) < s; any
/// backoff <= 0.99999994 does) and a growth that is not refused must raise it (f32(s * growth) > s; any
/// growth >= 1.0000002 does), or the transition would report backed_off or grew with the scale unchanged.
inline void validate(const scaler_config& cfg) {
  using detail::number_text;
  if (!std::isfinite(cfg.min_scale) || !(cfg.min_scale >= float_min_normal)) {
    throw error("scaler min_scale", number_text(cfg.min_scale),
                "a finite normal float >= 1.17549435e-38 (2^-126); default 1");
  }
  if (!std::isfinite(cfg.max_scale) || !(cfg.max_scale >= cfg.min_scale)) {
    throw error("scaler max_scale", number_text(cfg.max_scale),
                "a finite float >= min_scale (" + number_text(cfg.min_scale) + ")");
  }
  if (!std::isfinite(cfg.init_scale) || !(cfg.init_scale >= cfg.min_scale) || !(cfg.init_scale <= cfg.max_scale)) {
    throw error("scaler init_scale", number_text(cfg.init_scale),
                "a finite float in [min_scale, max_scale] = [" + number_text(cfg.min_scale) + ", " +
                    number_text(cfg.max_scale) + "]");
  }
  if (!std::isfinite(cfg.growth_factor) || !(cfg.growth_factor > 1.0)) {
    throw error("scaler growth_factor", number_text(cfg.growth_factor), "a finite number > 1");
  }
  if (!(cfg.backoff_factor > 0.0) || !(cfg.backoff_factor < 1.0)) {
    throw error("scaler backoff_factor", number_text(cfg.backoff_factor), "a number in the open interval (0, 1)");
  }
  if (cfg.growth_interval < 1) {
    throw error("scaler growth_interval", std::to_string(cfg.growth_interval), "an integer >= 1");
  }
  if (cfg.hysteresis < 1) {
    throw error("scaler hysteresis", std::to_string(cfg.hysteresis), "an integer >= 1 (1: no hysteresis)");
  }
  if (cfg.mode != hysteresis_mode::consecutive && cfg.mode != hysteresis_mode::since_growth) {
    throw error("scaler mode", std::to_string(static_cast<int>(cfg.mode)), "consecutive or since_growth");
  }
  if (cfg.max_overflows_at_min < 0) {
    throw error("scaler max_overflows_at_min", std::to_string(cfg.max_overflows_at_min),
                "an integer >= 0 (0: never raise)");
  }
  const std::string range =
      "[min_scale, max_scale] = [" + number_text(cfg.min_scale) + ", " + number_text(cfg.max_scale) + "]";
  // Both through transition() itself, so the check does the arithmetic the update does (double, then float).
  const float backoff_stuck = detail::first_unmoved_scale(cfg, [&cfg](float s) {
    const scale_transition t = transition(cfg, scaler_state{.scale = s, .hysteresis_tracker = 0}, true);
    return !(t.event == scale_event::backed_off && t.next.scale == s);
  });
  if (backoff_stuck != 0.0f) {
    throw error("scaler backoff_factor",
                number_text(cfg.backoff_factor) + " (f32(" + number_text(backoff_stuck) + " * backoff_factor) is " +
                    number_text(backoff_stuck) + ": an overflow would not lower the scale)",
                "a number in (0, 1) with f32(s * backoff_factor) < s for every float scale s in " + range +
                    "; every backoff_factor <= 0.99999994 qualifies");
  }
  const float growth_stuck = detail::first_unmoved_scale(cfg, [&cfg](float s) {
    const scaler_state at_growth{
        .scale = s, .growth_tracker = cfg.growth_interval - 1, .hysteresis_tracker = cfg.hysteresis};
    const scale_transition t = transition(cfg, at_growth, false);
    return !(t.event == scale_event::grew && t.next.scale == s);
  });
  if (growth_stuck != 0.0f) {
    throw error("scaler growth_factor",
                number_text(cfg.growth_factor) + " (f32(" + number_text(growth_stuck) + " * growth_factor) is " +
                    number_text(growth_stuck) + ": a growth would not raise the scale)",
                "a finite number > 1 with f32(s * growth_factor) > s for every float scale s in " + range +
                    " that growth does not take past max_scale; every growth_factor >= 1.0000002 qualifies");
  }
}

/// Throws safeamp::error when `s` is not a state `cfg`'s transition can reach: scale finite in
/// [min_scale, max_scale] (init_scale is allowed too), growth_tracker in [0, growth_interval),
/// hysteresis_tracker in [0, hysteresis], overflows_at_min >= 0, and across fields:
///  - overflows_at_min > 0 only with scale == min_scale, growth_tracker 0 and hysteresis_tracker 0: it grows
///    only on an overflow that found the scale at min_scale and was not absorbed, which leaves exactly that
///    (the backoff from min_scale stays at min_scale), and only such overflows follow until a clean step
///    resets it;
///  - consecutive mode: growth_tracker > 0 only with hysteresis_tracker == hysteresis: only a clean step
///    raises growth_tracker, and in this mode every clean step refills the hysteresis.
/// (overflows_at_min may be INT32_MAX: the transition stops counting there.) `cfg` must already be valid.
inline void validate(const scaler_config& cfg, const scaler_state& s) {
  using detail::number_text;
  if (!std::isfinite(s.scale) || !(s.scale >= cfg.min_scale) || !(s.scale <= cfg.max_scale)) {
    throw error("scaler state scale", number_text(s.scale),
                "a finite float in [min_scale, max_scale] = [" + number_text(cfg.min_scale) + ", " +
                    number_text(cfg.max_scale) + "]");
  }
  if (s.growth_tracker < 0 || s.growth_tracker >= cfg.growth_interval) {
    throw error("scaler state growth_tracker", std::to_string(s.growth_tracker),
                "an integer in [0, growth_interval) = [0, " + std::to_string(cfg.growth_interval) + ")");
  }
  if (s.hysteresis_tracker < 0 || s.hysteresis_tracker > cfg.hysteresis) {
    throw error("scaler state hysteresis_tracker", std::to_string(s.hysteresis_tracker),
                "an integer in [0, hysteresis] = [0, " + std::to_string(cfg.hysteresis) + "]");
  }
  if (s.overflows_at_min < 0) {
    throw error("scaler state overflows_at_min", std::to_string(s.overflows_at_min), "an integer >= 0");
  }
  if (s.overflows_at_min > 0 && (s.scale != cfg.min_scale || s.growth_tracker != 0 || s.hysteresis_tracker != 0)) {
    throw error("scaler state overflows_at_min",
                std::to_string(s.overflows_at_min) + " with scale " + number_text(s.scale) + ", growth_tracker " +
                    std::to_string(s.growth_tracker) + ", hysteresis_tracker " + std::to_string(s.hysteresis_tracker),
                "0, or > 0 only with scale == min_scale (" + number_text(cfg.min_scale) +
                    "), growth_tracker 0 and hysteresis_tracker 0 (it counts overflows at min_scale)");
  }
  if (cfg.mode == hysteresis_mode::consecutive && s.growth_tracker > 0 && s.hysteresis_tracker != cfg.hysteresis) {
    throw error("scaler state hysteresis_tracker",
                std::to_string(s.hysteresis_tracker) + " with growth_tracker " + std::to_string(s.growth_tracker),
                "hysteresis (" + std::to_string(cfg.hysteresis) +
                    ") when growth_tracker > 0 in consecutive mode (every clean step refills it)");
  }
}

}  // namespace safeamp
