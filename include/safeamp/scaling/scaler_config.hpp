// Dynamic loss-scaler configuration and state: plain constexpr values shared by the CPU scaler, the CUDA
// update kernel and checkpoints. The transition between states is update_scale() in update_scale.hpp.
#pragma once

#include <cstdint>
#include <limits>

#include "safeamp/config.hpp"

namespace safeamp {

/// Which overflows the hysteresis counts before the scale backs off.
///  consecutive:  `hysteresis` overflows in a row; every clean step refills the budget (DeepSpeed
///                consecutive_hysteresis, the Apex update_scale_hysteresis kernel used by NeMo).
///  since_growth: `hysteresis` overflows since the last growth event; only a growth event (every
///                growth_interval clean steps) refills it (Megatron-LM, DeepSpeed's default).
enum class hysteresis_mode : std::uint8_t { consecutive, since_growth };

inline constexpr float float_max = std::numeric_limits<float>::max();         // FLT_MAX
inline constexpr float float_min_normal = std::numeric_limits<float>::min();  // FLT_MIN = 2^-126

struct scaler_config {
  float init_scale = 65536.0f;          // scale before the first step (2^16)
  double growth_factor = 2.0;           // > 1: applied after growth_interval clean steps
  double backoff_factor = 0.5;          // in (0, 1): applied on an overflow the hysteresis does not absorb
  std::int32_t growth_interval = 2000;  // >= 1 consecutive clean steps per growth
  std::int32_t hysteresis = 1;          // >= 1 overflows before a backoff (1: every overflow backs off)
  hysteresis_mode mode = hysteresis_mode::consecutive;
  float min_scale = 1.0f;                 // floor: normal, finite, > 0; backoff never goes below it
  float max_scale = float_max;            // ceiling: growth that would pass it is refused
  std::int32_t max_overflows_at_min = 0;  // K > 0: error after K consecutive overflows at min_scale; 0: never

  friend constexpr bool operator==(const scaler_config&, const scaler_config&) = default;
};

struct scaler_state {
  float scale = 65536.0f;               // current loss scale (finite, normal, in [min_scale, max_scale])
  std::int32_t growth_tracker = 0;      // clean steps since the last overflow or growth event, < growth_interval
  std::int32_t hysteresis_tracker = 1;  // overflows still absorbed before a backoff, in [0, hysteresis]
  std::int32_t overflows_at_min = 0;    // consecutive overflows that found the scale already at min_scale

  friend constexpr bool operator==(const scaler_state&, const scaler_state&) = default;
};

/// The state before the first step: init_scale, trackers empty, a full hysteresis budget.
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr scaler_state initial_state(const scaler_config& cfg) noexcept {
  return scaler_state{
      .scale = cfg.init_scale, .growth_tracker = 0, .hysteresis_tracker = cfg.hysteresis, .overflows_at_min = 0};
}

}  // namespace safeamp
