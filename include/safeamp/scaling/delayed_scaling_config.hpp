// FP8 delayed scaling as values: the config (format, history length L, algorithm, margin), the counters, and the
// snapshot of one tensor's state between steps (config, scale, window, counters) with the validation that accepts
// exactly the states the updates produce under a given config (what fp8_checkpoint.hpp loads against).
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "safeamp/error.hpp"
#include "safeamp/format/format_names.hpp"
#include "safeamp/format/format_spec.hpp"
#include "safeamp/quoted_input.hpp"
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

[[nodiscard]] constexpr std::string_view amax_algorithm_name(amax_algorithm a) noexcept {
  return a == amax_algorithm::most_recent ? "most_recent" : "max";
}

struct delayed_scaling_counters {
  std::int64_t updates = 0;          // update() calls
  std::int64_t unused_steps = 0;     // updates with amax 0 (tensor not used): nothing rolled
  std::int64_t non_finite_amax = 0;  // updates whose amax was inf/NaN: scale kept, window untouched
  std::int64_t clamped_scales = 0;   // scales that were inf and were clamped to FLT_MAX
  friend constexpr bool operator==(const delayed_scaling_counters&, const delayed_scaling_counters&) = default;
};

/// One tensor's delayed-scaling state between steps, as a checkpoint keeps it (fp8_checkpoint.hpp): the config it ran
/// under, the scale for the next step, the previous amaxes in the window (oldest first) and the counters. A step's
/// pending amax is not part of it: snapshots are taken and restored between steps.
struct delayed_scaling_snapshot {
  delayed_scaling_config config{};
  float scale = 1.0f;
  std::vector<float> history{};
  delayed_scaling_counters counters{};
  friend bool operator==(const delayed_scaling_snapshot&, const delayed_scaling_snapshot&) = default;
};

namespace detail {
/// Shortest text that reads back to the same float ("inf" and "nan" included), for messages.
[[nodiscard]] inline std::string float_text(float v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}
/// fp8 max / 2^margin as delayed_scaling::update() computes it (2^margin is exact: margin <= 126).
[[nodiscard]] inline float delayed_scaled_max(const delayed_scaling_config& c) noexcept {
  return static_cast<float>(static_cast<double>(max_finite(c.format)) /
                            static_cast<double>(std::ldexp(1.0f, c.margin)));
}
/// The scale an update computes from a finite amax > 0: scaled_max / amax, an infinite quotient clamped to FLT_MAX.
[[nodiscard]] inline float delayed_scale_for(float scaled_max, float amax) noexcept {
  const float s = scaled_max / amax;
  return std::isinf(s) ? float_max : s;
}
/// Throws unless the config a snapshot was taken under is `into` (validated): a window of another length, or a scale
/// for another format, algorithm or margin, would change the numerics after the resume.
inline void check_same_config(const delayed_scaling_config& saved, const delayed_scaling_config& into,
                              const std::string& where) {
  const std::string tensor = " (the config of the tensor it is loaded into)";
  if (saved.format != into.format) {
    throw error(where + ".config.format", is_valid(saved.format) ? quoted_input(format_name(saved.format)) : "invalid",
                quoted_input(format_name(into.format)) + tensor);
  }
  if (saved.history_length != into.history_length) {
    throw error(where + ".config.history_length", std::to_string(saved.history_length),
                std::to_string(into.history_length) + tensor);
  }
  if (saved.algorithm != into.algorithm) {
    throw error(where + ".config.algorithm", std::to_string(static_cast<int>(saved.algorithm)),
                std::string(amax_algorithm_name(into.algorithm)) + tensor);
  }
  if (saved.margin != into.margin) {
    throw error(where + ".config.margin", std::to_string(saved.margin), std::to_string(into.margin) + tensor);
  }
}
}  // namespace detail

/// Throws safeamp::error (naming `where`'s field) unless `s` is a state that the updates of a tensor with config
/// `into` produce from the initial one: the same config; counters >= 0 with unused_steps + non_finite_amax <=
/// updates <= INT64_MAX - 1 and clamped_scales <= the rolled updates (the others); min(rolled, L - 1) amaxes in the
/// window, each finite and > 0; the scale 1 before any roll, otherwise in [scaled max / FLT_MAX, FLT_MAX], equal to
/// the newest amax's (most_recent), equal to the window maximum's while nothing has left the window and at most it
/// afterwards (max).
inline void validate(const delayed_scaling_snapshot& s, const delayed_scaling_config& into,
                     std::string_view where = "delayed scaling snapshot") {
  validate(into);
  const std::string at(where);
  detail::check_same_config(s.config, into, at);
  const delayed_scaling_counters& c = s.counters;
  const std::pair<std::int64_t, const char*> counts[] = {{c.updates, "updates"},
                                                         {c.unused_steps, "unused_steps"},
                                                         {c.non_finite_amax, "non_finite_amax"},
                                                         {c.clamped_scales, "clamped_scales"}};
  for (const auto& [v, field] : counts) {
    if (v < 0) throw error(at + ".counters." + field, std::to_string(v), "an integer >= 0");
  }
  constexpr std::int64_t max_updates = std::numeric_limits<std::int64_t>::max() - 1;
  if (c.updates > max_updates) {
    throw error(at + ".counters.updates", std::to_string(c.updates),
                "an integer in [0, 9223372036854775806] (INT64_MAX - 1, so the next update can be counted)");
  }
  // Each update is exactly one of: unused (amax 0), non-finite amax, or rolled into the window.
  if (c.unused_steps > c.updates) {
    throw error(at + ".counters.unused_steps", std::to_string(c.unused_steps),
                "an integer in [0, updates] = [0, " + std::to_string(c.updates) + "]");
  }
  if (c.non_finite_amax > c.updates - c.unused_steps) {
    throw error(at + ".counters.non_finite_amax", std::to_string(c.non_finite_amax),
                "an integer in [0, updates - unused_steps] = [0, " + std::to_string(c.updates - c.unused_steps) + "]");
  }
  const std::int64_t rolled = c.updates - c.unused_steps - c.non_finite_amax;
  if (c.clamped_scales > rolled) {
    throw error(at + ".counters.clamped_scales", std::to_string(c.clamped_scales),
                "an integer in [0, updates - unused_steps - non_finite_amax] = [0, " + std::to_string(rolled) +
                    "] (only an update that rolls computes a scale)");
  }
  const std::int64_t keep = into.history_length - 1;
  const std::int64_t window = rolled < keep ? rolled : keep;
  if (s.history.size() != static_cast<std::uint64_t>(window)) {
    throw error(at + ".history", std::to_string(s.history.size()) + " amaxes",
                "min(rolled updates, history_length - 1) = min(" + std::to_string(rolled) + ", " +
                    std::to_string(keep) + ") = " + std::to_string(window) + " amaxes");
  }
  float window_max = 0.0f;
  for (std::size_t i = 0; i < s.history.size(); ++i) {
    const float h = s.history[i];
    if (!(h > 0.0f && h <= float_max)) {
      throw error(at + ".history[" + std::to_string(i) + "]", detail::float_text(h),
                  "a finite amax > 0 (0, inf and NaN never enter the window)");
    }
    window_max = h > window_max ? h : window_max;
  }
  const std::string scale_field = at + ".scale";
  if (rolled == 0) {
    if (s.scale != 1.0f) {
      throw error(scale_field, detail::float_text(s.scale), "1 (the initial scale: no amax has entered the window)");
    }
    return;
  }
  const float scaled_max = detail::delayed_scaled_max(into);
  const float lowest = scaled_max / float_max;
  if (!(s.scale >= lowest && s.scale <= float_max)) {
    throw error(scale_field, detail::float_text(s.scale),
                "a float in [fp8 max / 2^margin / FLT_MAX, FLT_MAX] = [" + detail::float_text(lowest) + ", " +
                    detail::float_text(float_max) + "] (what an update computes)");
  }
  if (keep == 0) return;  // no window: the scale came from the step's amax alone
  if (into.algorithm == amax_algorithm::most_recent) {
    const float want = detail::delayed_scale_for(scaled_max, s.history.back());
    if (s.scale != want) {
      throw error(scale_field, detail::float_text(s.scale),
                  detail::float_text(want) + " (most_recent: fp8 max / 2^margin over the newest amax, " +
                      detail::float_text(s.history.back()) + ")");
    }
    return;
  }
  const float bound = detail::delayed_scale_for(scaled_max, window_max);
  if (rolled <= keep ? s.scale != bound : s.scale > bound) {
    throw error(scale_field, detail::float_text(s.scale),
                std::string(rolled <= keep ? "" : "at most ") + detail::float_text(bound) +
                    " (max: fp8 max / 2^margin over the window's largest amax, " + detail::float_text(window_max) +
                    (rolled <= keep ? ", while no amax has left the window)" : ")"));
  }
}

}  // namespace safeamp
