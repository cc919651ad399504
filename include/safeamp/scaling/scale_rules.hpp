// The three scale rules a basic_loss_scaler can run: dynamic (the update_scale transition), static (a fixed
// scale) and none (scale 1). Each exposes the same small interface: scale(), preview(found_inf), commit().
#pragma once

#include <cmath>
#include <string>

#include "safeamp/error.hpp"
#include "safeamp/scaling/scaler_config.hpp"
#include "safeamp/scaling/scaler_validate.hpp"
#include "safeamp/scaling/update_scale.hpp"

namespace safeamp {

/// Dynamic loss scaling: config (validated on construction) and state, advanced by transition().
struct dynamic_scale_rule {
  scaler_config config{};
  scaler_state state = initial_state(scaler_config{});

  dynamic_scale_rule() = default;
  dynamic_scale_rule(const scaler_config& cfg)
      : config(cfg), state(initial_state(cfg)) {  // NOLINT: implicit on purpose
    validate(cfg);
  }
  [[nodiscard]] float scale() const noexcept { return state.scale; }
  [[nodiscard]] scale_transition preview(bool found_inf) const noexcept { return transition(config, state, found_inf); }
  void commit(const scale_transition& t) noexcept { state = t.next; }
};

/// A fixed scale (finite, normal, > 0): overflowing steps are still detected and skipped; the scale never moves.
struct static_scale_rule {
  float value = 1.0f;

  static_scale_rule() = default;
  explicit static_scale_rule(float scale) : value(scale) {
    if (!std::isfinite(scale) || !(scale >= float_min_normal)) {
      throw error("static scale", detail::number_text(scale), "a finite normal float >= 2^-126");
    }
  }
  [[nodiscard]] float scale() const noexcept { return value; }
  [[nodiscard]] scale_transition preview(bool) const noexcept {
    return {scaler_state{.scale = value, .growth_tracker = 0, .hysteresis_tracker = 0, .overflows_at_min = 0},
            scale_event::none};
  }
  void commit(const scale_transition&) noexcept {}
};

/// No scaling (bf16, fp32): scale 1, unscale is only the inf/NaN check; non-finite steps are still skipped.
struct no_scale_rule {
  [[nodiscard]] float scale() const noexcept { return 1.0f; }
  [[nodiscard]] scale_transition preview(bool) const noexcept {
    return {scaler_state{.scale = 1.0f, .growth_tracker = 0, .hysteresis_tracker = 0, .overflows_at_min = 0},
            scale_event::none};
  }
  void commit(const scale_transition&) noexcept {}
};

}  // namespace safeamp
