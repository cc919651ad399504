// Versioned checkpoints of FP8 delayed scaling: per tensor the config, the scale, the amax window (oldest first) and
// the counters, written as JSON that round-trips bit-exactly and read strictly against the configs of the tensors it
// is loaded into, so that a resumed run continues bit for bit. Both forms: delayed_scaling objects and the plain
// delayed_scaling_state with its ring (delayed_scaling_step.hpp; a device's state copied to the host).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "safeamp/error.hpp"
#include "safeamp/format/format_names.hpp"
#include "safeamp/quoted_input.hpp"
#include "safeamp/scaling/delayed_scaling_config.hpp"
#include "safeamp/scaling/delayed_scaling_step.hpp"
#include "safeamp/scaling/fp8_delayed_scaling.hpp"
#include "safeamp/telemetry/json.hpp"

namespace safeamp {

inline constexpr std::int32_t fp8_checkpoint_version = 1;
inline constexpr std::string_view fp8_checkpoint_format = "safeamp.fp8_delayed_scaling";

/// The delayed-scaling state of a model's FP8 tensors, in the caller's tensor order.
struct fp8_checkpoint {
  std::int32_t version = fp8_checkpoint_version;
  std::vector<delayed_scaling_snapshot> tensors{};
  friend bool operator==(const fp8_checkpoint&, const fp8_checkpoint&) = default;
};

namespace detail {
[[nodiscard]] inline std::string fp8_tensor_field(std::size_t i) {
  return "fp8 checkpoint.tensors[" + std::to_string(i) + "]";
}
}  // namespace detail

/// Throws safeamp::error unless `c` has this version, one tensor per config of `into`, and each tensor's snapshot
/// validates against its config (validate(snapshot, config), delayed_scaling_config.hpp).
inline void validate(const fp8_checkpoint& c, std::span<const delayed_scaling_config> into) {
  if (c.version != fp8_checkpoint_version) {
    throw error("fp8 checkpoint.version", std::to_string(c.version), std::to_string(fp8_checkpoint_version));
  }
  if (c.tensors.size() != into.size()) {
    throw error("fp8 checkpoint.tensors", std::to_string(c.tensors.size()) + " tensors",
                std::to_string(into.size()) + " (the tensors it is loaded into)");
  }
  for (std::size_t i = 0; i < into.size(); ++i) validate(c.tensors[i], into[i], detail::fp8_tensor_field(i));
}

/// The state of every tensor, between steps (delayed_scaling::snapshot() throws in the middle of a step).
[[nodiscard]] inline fp8_checkpoint checkpoint_of(std::span<const delayed_scaling> tensors) {
  fp8_checkpoint c;
  c.tensors.reserve(tensors.size());
  for (const delayed_scaling& t : tensors) c.tensors.push_back(t.snapshot());
  return c;
}

/// Restores every tensor from `c`: all validated against the tensors' configs first, so on any error (or a tensor in
/// the middle of a step) no tensor changes.
inline void restore(std::span<delayed_scaling> tensors, const fp8_checkpoint& c) {
  std::vector<delayed_scaling_config> configs;
  configs.reserve(tensors.size());
  for (const delayed_scaling& t : tensors) configs.push_back(t.config());
  validate(c, configs);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].in_step()) {
      throw error("delayed_scaling: restore() of tensor " + std::to_string(i) +
                  " in the middle of a step (an amax was recorded); call update() first");
    }
  }
  for (std::size_t i = 0; i < tensors.size(); ++i) tensors[i].restore(c.tensors[i]);
}

// ---- the plain-data form: a delayed_scaling_state and its ring of L - 1 amaxes ----------------------------------

/// The snapshot of a plain state (one tensor, between steps: amax_bits 0) whose ring is `window`, at least L - 1
/// floats (a device's window copied to the host). Checks the ring's bookkeeping before reading it (window_count in
/// [0, L - 1], window_oldest in [0, L - 1), padding 0, scale_inv = 1 / scale), then the snapshot as validate does.
[[nodiscard]] inline delayed_scaling_snapshot snapshot_of(const delayed_scaling_config& cfg,
                                                          const delayed_scaling_state& s,
                                                          std::span<const float> window) {
  validate(cfg);
  const std::int32_t keep = cfg.history_length - 1;
  if (s.amax_bits != 0) {
    throw error("delayed scaling state.amax_bits", std::to_string(s.amax_bits),
                "0 (between steps: take the snapshot after delayed_scaling_step)");
  }
  if (window.size() < static_cast<std::size_t>(keep)) {
    throw error("delayed scaling window", std::to_string(window.size()) + " floats",
                "at least history_length - 1 = " + std::to_string(keep));
  }
  if (s.window_count < 0 || s.window_count > keep) {
    throw error("delayed scaling state.window_count", std::to_string(s.window_count),
                "an integer in [0, history_length - 1] = [0, " + std::to_string(keep) + "]");
  }
  if (s.window_oldest < 0 || s.window_oldest >= (keep > 0 ? keep : 1)) {
    throw error("delayed scaling state.window_oldest", std::to_string(s.window_oldest),
                "a ring index in [0, history_length - 1) = [0, " + std::to_string(keep > 0 ? keep : 1) + ")");
  }
  if (s.padding != 0) throw error("delayed scaling state.padding", std::to_string(s.padding), "0");
  if (safeamp::bit_cast<std::uint32_t>(s.scale_inv) != safeamp::bit_cast<std::uint32_t>(1.0f / s.scale)) {
    throw error("delayed scaling state.scale_inv", detail::float_text(s.scale_inv),
                "1 / scale = " + detail::float_text(1.0f / s.scale));
  }
  delayed_scaling_snapshot out{.config = cfg, .scale = s.scale, .history = {}, .counters = s.counters};
  out.history.reserve(static_cast<std::size_t>(s.window_count));  // <= L - 1 <= 2^20 - 1, checked above
  for (std::int32_t i = 0; i < s.window_count; ++i) {
    out.history.push_back(window[static_cast<std::size_t>((s.window_oldest + i) % keep)]);
  }
  validate(out, cfg, "delayed scaling state");
  return out;
}

/// Sets a plain state and its ring (at least L - 1 floats) from a snapshot validated against `cfg`: the state and
/// the ring's used slots become those of the state the snapshot was taken from (the ring position follows from the
/// counters: the oldest amax sits at rolled updates mod (L - 1) once the window is full). Nothing is written on error.
inline void restore(const delayed_scaling_snapshot& snap, const delayed_scaling_config& cfg, delayed_scaling_state& s,
                    std::span<float> window) {
  validate(snap, cfg);
  const std::int32_t keep = cfg.history_length - 1;
  if (window.size() < static_cast<std::size_t>(keep)) {
    throw error("delayed scaling window", std::to_string(window.size()) + " floats",
                "at least history_length - 1 = " + std::to_string(keep));
  }
  const delayed_scaling_counters& c = snap.counters;
  const std::int64_t rolled = c.updates - c.unused_steps - c.non_finite_amax;
  const auto count = static_cast<std::int32_t>(snap.history.size());  // min(rolled, keep) (validate)
  const std::int32_t oldest = keep > 0 && rolled >= keep ? static_cast<std::int32_t>(rolled % keep) : 0;
  for (std::int32_t i = 0; i < count; ++i) {
    window[static_cast<std::size_t>((oldest + i) % keep)] = snap.history[static_cast<std::size_t>(i)];
  }
  s = delayed_scaling_state{.amax_bits = 0,
                            .scale = snap.scale,
                            .scale_inv = 1.0f / snap.scale,
                            .window_count = count,
                            .window_oldest = oldest,
                            .padding = 0,
                            .counters = c};
}

// ---- JSON -----------------------------------------------------------------------------------------------------

/// The checkpoint as JSON (floats as the shortest text that reads back to the same bits). Refuses a checkpoint that
/// would not load: a wrong version, or a tensor that does not validate against its own config.
[[nodiscard]] inline std::string to_json(const fp8_checkpoint& c) {
  if (c.version != fp8_checkpoint_version) {
    throw error("fp8 checkpoint.version", std::to_string(c.version), std::to_string(fp8_checkpoint_version));
  }
  std::string tensors = "[";
  for (std::size_t i = 0; i < c.tensors.size(); ++i) {
    const delayed_scaling_snapshot& t = c.tensors[i];
    validate(t, t.config, detail::fp8_tensor_field(i));
    json::object_writer cfg;
    cfg.add("format", format_name(t.config.format)).add("history_length", t.config.history_length);
    cfg.add("algorithm", amax_algorithm_name(t.config.algorithm)).add("margin", t.config.margin);
    std::string history = "[";
    for (const float h : t.history) {
      if (history.size() > 1) history += ',';
      history += json::number_text(h);
    }
    history += ']';
    json::object_writer counters;
    counters.add("updates", t.counters.updates).add("unused_steps", t.counters.unused_steps);
    counters.add("non_finite_amax", t.counters.non_finite_amax).add("clamped_scales", t.counters.clamped_scales);
    json::object_writer tensor;
    tensor.add_raw("config", cfg.str()).add("scale", t.scale).add_raw("history", history);
    tensor.add_raw("counters", counters.str());
    if (i > 0) tensors += ',';
    tensors += tensor.str();
  }
  tensors += ']';
  json::object_writer top;
  top.add("format", fp8_checkpoint_format).add("version", c.version).add_raw("tensors", tensors);
  return top.str();
}

/// Longest text fp8_checkpoint_from_json reads for tensors of these configs, checked before parsing so that the
/// parser's allocations are bounded by the configs: 4 KiB, plus 1 KiB a tensor and 32 bytes an amax of its window
/// (to_json writes at most 16: the longest shortest float text, 14 characters, and a comma; the rest leaves room for
/// whitespace).
[[nodiscard]] inline std::uint64_t max_fp8_checkpoint_bytes(std::span<const delayed_scaling_config> into) noexcept {
  std::uint64_t bytes = 4096;
  for (const delayed_scaling_config& c : into) {
    const std::int32_t length = c.history_length < 1                    ? 1
                                : c.history_length > max_history_length ? max_history_length
                                                                        : c.history_length;
    bytes += 1024 + 32 * static_cast<std::uint64_t>(length - 1);
  }
  return bytes;
}

namespace detail {
[[nodiscard]] inline delayed_scaling_snapshot snapshot_from_json(const json::value& v,
                                                                 const delayed_scaling_config& into,
                                                                 const std::string& where) {
  if (v.type != json::kind::object) throw error(where, "not an object", "a JSON object");
  json::reject_unknown_members(v, {"config", "scale", "history", "counters"}, where);
  const auto num = [](const json::value& o, std::string_view key, const std::string& at, auto zero) {
    return json::to_number<decltype(zero)>(json::member(o, key, at), at + "." + std::string(key));
  };
  delayed_scaling_snapshot s;
  const std::string at_cfg = where + ".config";
  const json::value& cfg = json::member(v, "config", where);
  json::reject_unknown_members(cfg, {"format", "history_length", "algorithm", "margin"}, at_cfg);
  // The format by its canonical name (to_json writes format_name): the tensor's own, or refused.
  const std::string& format = json::to_string_value(json::member(cfg, "format", at_cfg), at_cfg + ".format");
  if (format != format_name(into.format)) {
    throw error(at_cfg + ".format", quoted_input(format),
                quoted_input(format_name(into.format)) + " (the config of the tensor it is loaded into)");
  }
  s.config.format = into.format;
  s.config.history_length = num(cfg, "history_length", at_cfg, std::int32_t{});
  const std::string& algorithm = json::to_string_value(json::member(cfg, "algorithm", at_cfg), at_cfg + ".algorithm");
  if (algorithm == amax_algorithm_name(amax_algorithm::max)) {
    s.config.algorithm = amax_algorithm::max;
  } else if (algorithm == amax_algorithm_name(amax_algorithm::most_recent)) {
    s.config.algorithm = amax_algorithm::most_recent;
  } else {
    throw error(at_cfg + ".algorithm", quoted_input(algorithm), "max or most_recent");
  }
  s.config.margin = num(cfg, "margin", at_cfg, std::int32_t{});
  check_same_config(s.config, into, where);  // before the window's length is read against it
  s.scale = num(v, "scale", where, float{});
  const std::string at_ct = where + ".counters";
  const json::value& ct = json::member(v, "counters", where);
  json::reject_unknown_members(ct, {"updates", "unused_steps", "non_finite_amax", "clamped_scales"}, at_ct);
  s.counters.updates = num(ct, "updates", at_ct, std::int64_t{});
  s.counters.unused_steps = num(ct, "unused_steps", at_ct, std::int64_t{});
  s.counters.non_finite_amax = num(ct, "non_finite_amax", at_ct, std::int64_t{});
  s.counters.clamped_scales = num(ct, "clamped_scales", at_ct, std::int64_t{});
  const json::value& history = json::member(v, "history", where);
  if (history.type != json::kind::array) {
    throw error(where + ".history", "not an array", "a JSON array of the window's amaxes, oldest first");
  }
  const auto keep = static_cast<std::size_t>(into.history_length - 1);
  if (history.items.size() > keep) {
    throw error(where + ".history", std::to_string(history.items.size()) + " amaxes",
                "at most history_length - 1 = " + std::to_string(keep));
  }
  s.history.reserve(history.items.size());
  for (std::size_t i = 0; i < history.items.size(); ++i) {
    s.history.push_back(json::to_number<float>(history.items[i], where + ".history[" + std::to_string(i) + "]"));
  }
  validate(s, into, where);
  return s;
}
}  // namespace detail

/// Parses and validates a checkpoint for tensors with the configs `into` (in the order it was saved): refuses text
/// longer than max_fp8_checkpoint_bytes(into), malformed or truncated JSON, a wrong format or version, unknown,
/// missing or duplicate members, another tensor count, a config other than the tensor's, and any snapshot validate
/// refuses. Throws safeamp::error naming the field, its value and what is accepted.
[[nodiscard]] inline fp8_checkpoint fp8_checkpoint_from_json(std::string_view text,
                                                             std::span<const delayed_scaling_config> into) {
  for (const delayed_scaling_config& c : into) validate(c);
  const std::uint64_t cap = max_fp8_checkpoint_bytes(into);
  if (text.size() > cap) {
    throw error("fp8 checkpoint", std::to_string(text.size()) + " bytes",
                "at most " + std::to_string(cap) + " bytes for " + std::to_string(into.size()) +
                    " tensors of these history lengths (4096 + 1024 a tensor + 32 an amax of its window)");
  }
  const json::value doc = json::parse(text);
  json::check_envelope(doc, "fp8 checkpoint", {"format", "version", "tensors"}, fp8_checkpoint_format,
                       fp8_checkpoint_version);
  fp8_checkpoint c;  // its version is fp8_checkpoint_version, checked above
  const json::value& tensors = json::member(doc, "tensors", "fp8 checkpoint");
  if (tensors.type != json::kind::array) {
    throw error("fp8 checkpoint.tensors", "not an array", "a JSON array of one object per tensor");
  }
  if (tensors.items.size() != into.size()) {
    throw error("fp8 checkpoint.tensors", std::to_string(tensors.items.size()) + " tensors",
                std::to_string(into.size()) + " (the tensors it is loaded into)");
  }
  c.tensors.reserve(into.size());
  for (std::size_t i = 0; i < into.size(); ++i) {
    c.tensors.push_back(detail::snapshot_from_json(tensors.items[i], into[i], detail::fp8_tensor_field(i)));
  }
  return c;
}

/// save_fp8_json(tensors) = to_json(checkpoint_of(tensors)); write it with write_file_atomically.
[[nodiscard]] inline std::string save_fp8_json(std::span<const delayed_scaling> tensors) {
  return to_json(checkpoint_of(tensors));
}

/// Loads a checkpoint into `tensors` (each keeps its config; the checkpoint must match them). On any error no
/// tensor changes.
inline void load_fp8_json(std::string_view text, std::span<delayed_scaling> tensors) {
  std::vector<delayed_scaling_config> configs;
  configs.reserve(tensors.size());
  for (const delayed_scaling& t : tensors) configs.push_back(t.config());
  restore(tensors, fp8_checkpoint_from_json(text, configs));
}

}  // namespace safeamp
