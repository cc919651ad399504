// FP8 per-tensor delayed scaling (Transformer Engine's DelayedScaling recipe): the scale for the next step
// comes from a history of per-step amax values: scale = (fp8 max / amax) / 2^margin, amax being the max over
// the window (`max`) or this step's value (`most_recent`). Edge cases: amax 0 = the tensor was not used this
// step (history not rolled, scale kept); a non-finite amax keeps the previous scale, is counted as an event
// and does not enter the window; an infinite scale (tiny amax) is clamped to FLT_MAX.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "safeamp/error.hpp"
#include "safeamp/format/format_spec.hpp"
#include "safeamp/scaling/scaler_config.hpp"

namespace safeamp {

enum class amax_algorithm : std::uint8_t { max, most_recent };

/// Longest accepted amax history: 2^20 steps (a 4 MiB window per tensor; Transformer Engine's default is 1024).
/// It also keeps the ring arithmetic of delayed_scaling_step (indices below 2 L) far from int32 overflow.
inline constexpr std::int32_t max_history_length = std::int32_t{1} << 20;

struct delayed_scaling_config {
  format_spec format = fp8_e4m3;       // target format; its max_finite is the "fp8 max" (448 for E4M3)
  std::int32_t history_length = 1024;  // L in [1, 2^20]: this step's amax plus the previous L-1
  amax_algorithm algorithm = amax_algorithm::max;
  std::int32_t margin = 0;  // >= 0: scale divided by 2^margin for headroom
  friend constexpr bool operator==(const delayed_scaling_config&, const delayed_scaling_config&) = default;
};

inline void validate(const delayed_scaling_config& c) {
  if (!is_valid(c.format)) throw error("delayed scaling format", "an invalid descriptor", "a valid format_spec");
  if (c.history_length < 1 || c.history_length > max_history_length) {
    throw error("delayed scaling history_length", std::to_string(c.history_length),
                "an integer in [1, 1048576] (2^20; Transformer Engine's default is 1024)");
  }
  if (c.margin < 0 || c.margin > 126) throw error("delayed scaling margin", std::to_string(c.margin), "0..126");
  if (c.algorithm != amax_algorithm::max && c.algorithm != amax_algorithm::most_recent) {
    throw error("delayed scaling algorithm", std::to_string(static_cast<int>(c.algorithm)), "max or most_recent");
  }
}

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

struct delayed_scaling_counters {
  std::int64_t updates = 0;          // update() calls
  std::int64_t unused_steps = 0;     // updates with amax 0 (tensor not used): nothing rolled
  std::int64_t non_finite_amax = 0;  // updates whose amax was inf/NaN: scale kept, window untouched
  std::int64_t clamped_scales = 0;   // scales that were inf and were clamped to FLT_MAX
  friend constexpr bool operator==(const delayed_scaling_counters&, const delayed_scaling_counters&) = default;
};

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
    const float scaled_max = static_cast<float>(static_cast<double>(max_finite(cfg_.format)) /
                                                static_cast<double>(std::ldexp(1.0f, cfg_.margin)));
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

 private:
  delayed_scaling_config cfg_;
  std::vector<float> window_;
  float current_ = 0.0f;
  float scale_ = 1.0f;
  delayed_scaling_counters counters_{};
};

}  // namespace safeamp
