// FP8 per-tensor delayed scaling (Transformer Engine's DelayedScaling recipe): the scale for the next step
// comes from a history of per-step amax values: scale = (fp8 max / amax) / 2^margin, amax being the max over
// the window (`max`) or this step's value (`most_recent`). Edge cases: amax 0 = the tensor was not used this
// step (history not rolled, scale kept); a non-finite amax keeps the previous scale, is counted as an event
// and does not enter the window; an infinite scale (tiny amax) is clamped to FLT_MAX. Between steps the state
// is a delayed_scaling_snapshot (delayed_scaling_config.hpp) that fp8_checkpoint.hpp saves and loads.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "safeamp/error.hpp"
#include "safeamp/format/format_spec.hpp"
#include "safeamp/scaling/delayed_scaling_config.hpp"
#include "safeamp/scaling/scaler_config.hpp"

namespace safeamp {

/// max |x| over a tensor; NaN when any element is NaN (so the update can see it).
[[nodiscard]] inline float tensor_amax(std::span<const float> x) noexcept {
  float amax = 0.0f;
  bool nan = false;
  for (const float v : x) {
    const float a = std::fabs(v);
    nan = nan || (a != a);
    amax = a > amax ? a : amax;
  }
  return nan ? std::nanf("") : amax;
}

/// The delayed-scaling state of one tensor.
class delayed_scaling {
 public:
  delayed_scaling() : delayed_scaling(delayed_scaling_config{}) {}
  explicit delayed_scaling(const delayed_scaling_config& cfg) : cfg_(cfg) {
    validate(cfg);
    window_.reserve(static_cast<std::size_t>(cfg.history_length));
  }

  /// Folds an observed amax into this step's slot (max of all observations since the last update()).
  /// NaN is sticky for the step.
  void record_amax(float amax) noexcept {
    const float a = std::fabs(amax);
    if (a != a || current_ != current_) {
      current_ = a != a ? a : current_;
      return;
    }
    current_ = a > current_ ? a : current_;
  }
  void record(std::span<const float> tensor) noexcept { record_amax(tensor_amax(tensor)); }

  /// Ends the step: rolls this step's amax into the window and computes the scale for the next step.
  float update() noexcept {
    ++counters_.updates;
    const float last = current_;
    current_ = 0.0f;
    if (last == 0.0f) {
      ++counters_.unused_steps;
      return scale_;
    }
    if (!(std::fabs(last) <= float_max)) {
      ++counters_.non_finite_amax;
      return scale_;
    }
    // Window of the previous L-1 amaxes, oldest first.
    const std::size_t keep = static_cast<std::size_t>(cfg_.history_length - 1);
    float amax = last;
    if (cfg_.algorithm == amax_algorithm::max) {
      for (const float h : window_) amax = h > amax ? h : amax;
    }
    if (keep > 0) {
      if (window_.size() == keep) window_.erase(window_.begin());
      window_.push_back(last);
    }
    const float scaled_max = detail::delayed_scaled_max(cfg_);
    float s = scaled_max / amax;
    if (std::isinf(s)) {
      s = float_max;
      ++counters_.clamped_scales;
    }
    scale_ = s;
    return scale_;
  }

  [[nodiscard]] float scale() const noexcept { return scale_; }
  [[nodiscard]] float scale_inv() const noexcept { return 1.0f / scale_; }
  /// The previous amaxes in the window (at most L-1, oldest first).
  [[nodiscard]] const std::vector<float>& history() const noexcept { return window_; }
  [[nodiscard]] const delayed_scaling_counters& counters() const noexcept { return counters_; }
  [[nodiscard]] const delayed_scaling_config& config() const noexcept { return cfg_; }

  /// True between a record of a non-zero (or NaN) amax and the update() that ends the step.
  [[nodiscard]] bool in_step() const noexcept { return current_ != 0.0f; }
  /// The state between steps (fp8_checkpoint.hpp saves it). Throws safeamp::error in the middle of a step.
  [[nodiscard]] delayed_scaling_snapshot snapshot() const {
    if (in_step()) {
      throw error("delayed_scaling: snapshot() in the middle of a step (an amax was recorded); call update() first");
    }
    return {.config = cfg_, .scale = scale_, .history = window_, .counters = counters_};
  }
  /// Continues from a snapshot taken under this config, bit for bit as the tensor it was taken from. Validated first
  /// (validate(snapshot, config())); on any error, or in the middle of a step, nothing changes.
  void restore(const delayed_scaling_snapshot& s) {
    if (in_step()) {
      throw error("delayed_scaling: restore() in the middle of a step (an amax was recorded); call update() first");
    }
    validate(s, cfg_);
    window_.assign(s.history.begin(), s.history.end());  // at most L - 1 amaxes (validated)
    scale_ = s.scale;
    counters_ = s.counters;
  }

 private:
  delayed_scaling_config cfg_;
  std::vector<float> window_;
  float current_ = 0.0f;
  float scale_ = 1.0f;
  delayed_scaling_counters counters_{};
};

}  // namespace safeamp
