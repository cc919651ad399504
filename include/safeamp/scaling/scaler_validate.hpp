// Validation of scaler configs and states at the boundary (construction, checkpoint load): each check throws
// safeamp::error naming the field, the value and the accepted range. Host-only (it builds strings).
#pragma once

#include <charconv>
#include <cmath>
#include <string>

#include "safeamp/error.hpp"
#include "safeamp/scaling/scaler_config.hpp"

namespace safeamp {
namespace detail {

/// Shortest text that reads back to the same value (for messages), e.g. "65536", "1e-40", "inf", "nan".
template <class T>
[[nodiscard]] std::string number_text(T v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

}  // namespace detail

/// Throws safeamp::error for the first bad field of `cfg`:
/// init_scale in [min_scale, max_scale] and finite; growth_factor finite and > 1; backoff_factor in (0, 1);
/// growth_interval >= 1; hysteresis >= 1; mode a known value; min_scale finite, normal (>= 2^-126);
/// max_scale finite and >= min_scale; max_overflows_at_min >= 0.
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
}

/// Throws safeamp::error when `s` is not a state `cfg`'s transition can reach: scale finite in
/// [min_scale, max_scale] (init_scale is allowed too), growth_tracker in [0, growth_interval),
/// hysteresis_tracker in [0, hysteresis], overflows_at_min >= 0. `cfg` must already be valid.
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
}

}  // namespace safeamp
