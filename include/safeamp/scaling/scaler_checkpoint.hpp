// Versioned loss-scaler checkpoints: every config field, every state field and the counters, written as JSON
// that round-trips bit-exactly (shortest round-trip float text) and read strictly: malformed or truncated
// text, a wrong format or version, unknown or missing members and out-of-range values are all rejected.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#if defined(__unix__) || defined(__APPLE__)
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#define SAFEAMP_DETAIL_POSIX_FILES 1
#else
#include <cerrno>
#define SAFEAMP_DETAIL_POSIX_FILES 0
#endif

#include "safeamp/error.hpp"
#include "safeamp/quoted_input.hpp"
#include "safeamp/scaling/scaler_config.hpp"
#include "safeamp/scaling/scaler_validate.hpp"
#include "safeamp/scaling/step_report.hpp"
#include "safeamp/telemetry/json.hpp"

namespace safeamp {

inline constexpr std::int32_t scaler_checkpoint_version = 1;
inline constexpr std::string_view scaler_checkpoint_format = "safeamp.loss_scaler";

struct scaler_checkpoint {
  std::int32_t version = scaler_checkpoint_version;
  scaler_config config{};
  scaler_state state = initial_state(scaler_config{});
  scaler_stats stats{};
  friend constexpr bool operator==(const scaler_checkpoint&, const scaler_checkpoint&) = default;
};

[[nodiscard]] constexpr std::string_view hysteresis_mode_name(hysteresis_mode m) noexcept {
  return m == hysteresis_mode::since_growth ? "since_growth" : "consecutive";
}

/// Throws safeamp::error when the checkpoint's config, state or counters are out of range: counters >= 0,
/// applied_steps + skipped_steps == steps <= INT64_MAX - 1, every event counter <= steps,
/// consecutive_skips <= skipped_steps, last_overflow_step -1 or in [0, steps).
inline void validate(const scaler_checkpoint& c) {
  if (c.version != scaler_checkpoint_version) {
    throw error("scaler checkpoint version", std::to_string(c.version), std::to_string(scaler_checkpoint_version));
  }
  validate(c.config);
  validate(c.config, c.state);
  const scaler_stats& s = c.stats;
  const auto non_negative = [](std::int64_t v, const char* field) {
    if (v < 0) throw error(std::string("scaler checkpoint counters.") + field, std::to_string(v), "an integer >= 0");
  };
  non_negative(s.steps, "steps");
  non_negative(s.applied_steps, "applied_steps");
  non_negative(s.skipped_steps, "skipped_steps");
  non_negative(s.consecutive_skips, "consecutive_skips");
  // The counters of events, at most one a step.
  const std::pair<std::int64_t, const char*> events[] = {
      {s.growth_events, "growth_events"},   {s.growth_refusals, "growth_refusals"},
      {s.backoff_events, "backoff_events"}, {s.absorbed_overflows, "absorbed_overflows"},
      {s.floor_hits, "floor_hits"},         {s.non_finite_norms, "non_finite_norms"}};
  for (const auto& [v, field] : events) non_negative(v, field);
  // Both are >= 0 here, so the sum overflows only past INT64_MAX (signed overflow is undefined): compare
  // without forming it.
  if (s.applied_steps > std::numeric_limits<std::int64_t>::max() - s.skipped_steps) {
    throw error("scaler checkpoint counters.applied_steps + skipped_steps",
                std::to_string(s.applied_steps) + " + " + std::to_string(s.skipped_steps),
                "a sum <= 9223372036854775807 (INT64_MAX) equal to steps");
  }
  if (s.applied_steps + s.skipped_steps != s.steps) {
    throw error("scaler checkpoint counters.steps", std::to_string(s.steps),
                "applied_steps + skipped_steps = " + std::to_string(s.applied_steps + s.skipped_steps));
  }
  // The next update must count exactly: steps stops at INT64_MAX (count_step saturates), and every other
  // counter counts at most one event per step, so none can pass steps.
  constexpr std::int64_t max_steps = std::numeric_limits<std::int64_t>::max() - 1;
  if (s.steps > max_steps) {
    throw error("scaler checkpoint counters.steps", std::to_string(s.steps),
                "an integer in [0, 9223372036854775806] (INT64_MAX - 1, so the next update can be counted)");
  }
  for (const auto& [v, field] : events) {
    if (v > s.steps) {
      throw error(std::string("scaler checkpoint counters.") + field, std::to_string(v),
                  "an integer in [0, steps] = [0, " + std::to_string(s.steps) + "] (at most one per step)");
    }
  }
  if (s.consecutive_skips > s.skipped_steps) {
    throw error("scaler checkpoint counters.consecutive_skips", std::to_string(s.consecutive_skips),
                "an integer in [0, skipped_steps]");
  }
  if (s.last_overflow_step < -1 || s.last_overflow_step >= s.steps) {
    throw error("scaler checkpoint counters.last_overflow_step", std::to_string(s.last_overflow_step),
                "-1 (none) or a step index in [0, steps)");
  }
}

[[nodiscard]] inline std::string to_json(const scaler_checkpoint& c) {
  const scaler_config& k = c.config;
  json::object_writer cfg;
  cfg.add("init_scale", k.init_scale).add("growth_factor", k.growth_factor).add("backoff_factor", k.backoff_factor);
  cfg.add("growth_interval", k.growth_interval).add("hysteresis", k.hysteresis);
  cfg.add("mode", hysteresis_mode_name(k.mode)).add("min_scale", k.min_scale).add("max_scale", k.max_scale);
  cfg.add("max_overflows_at_min", k.max_overflows_at_min);
  json::object_writer st;
  st.add("scale", c.state.scale).add("growth_tracker", c.state.growth_tracker);
  st.add("hysteresis_tracker", c.state.hysteresis_tracker).add("overflows_at_min", c.state.overflows_at_min);
  const scaler_stats& s = c.stats;
  json::object_writer ct;
  ct.add("steps", s.steps).add("applied_steps", s.applied_steps).add("skipped_steps", s.skipped_steps);
  ct.add("consecutive_skips", s.consecutive_skips).add("growth_events", s.growth_events);
  ct.add("growth_refusals", s.growth_refusals).add("backoff_events", s.backoff_events);
  ct.add("absorbed_overflows", s.absorbed_overflows).add("floor_hits", s.floor_hits);
  ct.add("non_finite_norms", s.non_finite_norms).add("last_overflow_step", s.last_overflow_step);
  json::object_writer top;
  top.add("format", scaler_checkpoint_format).add("version", c.version);
  top.add_raw("config", cfg.str()).add_raw("state", st.str()).add_raw("counters", ct.str());
  return top.str();
}

/// Parses and validates a checkpoint; throws safeamp::error naming the bad member or value.
[[nodiscard]] inline scaler_checkpoint checkpoint_from_json(std::string_view text) {
  const json::value doc = json::parse(text);
  json::check_envelope(doc, "scaler checkpoint", {"format", "version", "config", "state", "counters"},
                       scaler_checkpoint_format, scaler_checkpoint_version);
  scaler_checkpoint c;
  c.version = scaler_checkpoint_version;
  const json::value& cfg = json::member(doc, "config", "checkpoint");
  json::reject_unknown_members(cfg,
                               {"init_scale", "growth_factor", "backoff_factor", "growth_interval", "hysteresis",
                                "mode", "min_scale", "max_scale", "max_overflows_at_min"},
                               "checkpoint.config");
  const auto num_f = [](const json::value& o, std::string_view key, std::string_view where) {
    return json::to_number<float>(json::member(o, key, where), std::string(where) + "." + std::string(key));
  };
  const auto num_d = [](const json::value& o, std::string_view key, std::string_view where) {
    return json::to_number<double>(json::member(o, key, where), std::string(where) + "." + std::string(key));
  };
  const auto num_i = [](const json::value& o, std::string_view key, std::string_view where) {
    return json::to_number<std::int32_t>(json::member(o, key, where), std::string(where) + "." + std::string(key));
  };
  const auto num_l = [](const json::value& o, std::string_view key, std::string_view where) {
    return json::to_number<std::int64_t>(json::member(o, key, where), std::string(where) + "." + std::string(key));
  };
  c.config.init_scale = num_f(cfg, "init_scale", "checkpoint.config");
  c.config.growth_factor = num_d(cfg, "growth_factor", "checkpoint.config");
  c.config.backoff_factor = num_d(cfg, "backoff_factor", "checkpoint.config");
  c.config.growth_interval = num_i(cfg, "growth_interval", "checkpoint.config");
  c.config.hysteresis = num_i(cfg, "hysteresis", "checkpoint.config");
  const std::string& mode =
      json::to_string_value(json::member(cfg, "mode", "checkpoint.config"), "checkpoint.config.mode");
  if (mode == "consecutive") {
    c.config.mode = hysteresis_mode::consecutive;
  } else if (mode == "since_growth") {
    c.config.mode = hysteresis_mode::since_growth;
  } else {
    throw error("checkpoint.config.mode", quoted_input(mode), "consecutive or since_growth");
  }
  c.config.min_scale = num_f(cfg, "min_scale", "checkpoint.config");
  c.config.max_scale = num_f(cfg, "max_scale", "checkpoint.config");
  c.config.max_overflows_at_min = num_i(cfg, "max_overflows_at_min", "checkpoint.config");

  const json::value& st = json::member(doc, "state", "checkpoint");
  json::reject_unknown_members(st, {"scale", "growth_tracker", "hysteresis_tracker", "overflows_at_min"},
                               "checkpoint.state");
  c.state.scale = num_f(st, "scale", "checkpoint.state");
  c.state.growth_tracker = num_i(st, "growth_tracker", "checkpoint.state");
  c.state.hysteresis_tracker = num_i(st, "hysteresis_tracker", "checkpoint.state");
  c.state.overflows_at_min = num_i(st, "overflows_at_min", "checkpoint.state");

  const json::value& ct = json::member(doc, "counters", "checkpoint");
  json::reject_unknown_members(
      ct,
      {"steps", "applied_steps", "skipped_steps", "consecutive_skips", "growth_events", "growth_refusals",
       "backoff_events", "absorbed_overflows", "floor_hits", "non_finite_norms", "last_overflow_step"},
      "checkpoint.counters");
  scaler_stats& s = c.stats;
  s.steps = num_l(ct, "steps", "checkpoint.counters");
  s.applied_steps = num_l(ct, "applied_steps", "checkpoint.counters");
  s.skipped_steps = num_l(ct, "skipped_steps", "checkpoint.counters");
  s.consecutive_skips = num_l(ct, "consecutive_skips", "checkpoint.counters");
  s.growth_events = num_l(ct, "growth_events", "checkpoint.counters");
  s.growth_refusals = num_l(ct, "growth_refusals", "checkpoint.counters");
  s.backoff_events = num_l(ct, "backoff_events", "checkpoint.counters");
  s.absorbed_overflows = num_l(ct, "absorbed_overflows", "checkpoint.counters");
  s.floor_hits = num_l(ct, "floor_hits", "checkpoint.counters");
  s.non_finite_norms = num_l(ct, "non_finite_norms", "checkpoint.counters");
  s.last_overflow_step = num_l(ct, "last_overflow_step", "checkpoint.counters");
  validate(c);
  return c;
}

// ---- files: the one atomic writer and a capped reader (POSIX where available) --------------------------

/// Largest file read_file_text reads unless told otherwise: 64 MiB (a scaler checkpoint is < 1 KiB).
inline constexpr std::uintmax_t default_max_file_bytes = std::uintmax_t{64} << 20;

namespace detail {
[[nodiscard]] inline std::string errno_text(int e) { return std::system_category().message(e); }
/// Distinct per call in this process: two writers of one path (threads or processes) never share a temporary.
[[nodiscard]] inline std::string unique_temp_path(const std::string& path) {
  static std::atomic<std::uint64_t> counter{0};
#if SAFEAMP_DETAIL_POSIX_FILES
  const long long pid = static_cast<long long>(::getpid());
#else
  const long long pid = 0;
#endif
  return path + ".tmp-" + std::to_string(pid) + "-" + std::to_string(counter.fetch_add(1) + 1);
}
}  // namespace detail

/// Writes text to `path` atomically: a unique temporary `<path>.tmp-<pid>-<n>` beside it is written in full,
/// fsync-ed and renamed over `path`, then the folder is fsync-ed (where the file system supports it), so after
/// a crash `path` holds either the old or the new content. On every failure the temporary is removed, the old
/// file is left untouched, and safeamp::error names `field` (the caller's name for the path) and the reason.
inline void write_file_atomically(const std::string& path, std::string_view text,
                                  std::string_view field = "checkpoint path") {
  const std::string tmp = detail::unique_temp_path(path);
  const auto fail = [&](std::string_view what, int e, std::string_view accepted) {
    std::remove(tmp.c_str());
    throw error(field, "'" + path + "' (" + std::string(what) + ": " + detail::errno_text(e) + ")", accepted);
  };
#if SAFEAMP_DETAIL_POSIX_FILES
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) {
    const int e = errno;  // nothing was created: nothing to remove
    throw error(field, "'" + path + "' (cannot create '" + tmp + "': " + detail::errno_text(e) + ")",
                "a path in an existing, writable directory");
  }
  std::size_t done = 0;
  while (done < text.size()) {
    const ::ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = n < 0 ? errno : EIO;
      ::close(fd);
      fail("write failed", e, "a writable file system with free space");
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    fail("fsync failed", e, "a writable file system with free space");
  }
  if (::close(fd) != 0) fail("close failed", errno, "a writable file system with free space");
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("rename failed", errno, "a path that can be replaced");
  // Make the rename itself durable. Best effort: some file systems refuse fsync on a folder (EINVAL).
  const std::string::size_type slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
#else
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail("cannot create '" + tmp + "'", errno, "a path in an existing, writable directory");
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.flush();
    if (!out) fail("write failed", errno, "a writable file system with free space");
  }
  std::remove(path.c_str());  // std::rename does not replace on every platform
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail("rename failed", errno, "a path that can be replaced");
#endif
}

/// The whole file as text. Accepts a regular file (or a link to one) of at most `max_bytes`; anything else
/// (missing, a directory, a FIFO, a device such as /dev/zero, a larger file) throws safeamp::error naming
/// `field` and the path. Reading stops at the cap even when the file grows meanwhile.
[[nodiscard]] inline std::string read_file_text(const std::string& path,
                                                std::uintmax_t max_bytes = default_max_file_bytes,
                                                std::string_view field = "checkpoint path") {
  const std::string accepted = "an existing, readable regular file of at most " + std::to_string(max_bytes) + " bytes";
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) throw error(field, "'" + path + "' (cannot be opened)", accepted);
  if (!std::filesystem::is_regular_file(st)) throw error(field, "'" + path + "' (not a regular file)", accepted);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw error(field, "'" + path + "' (cannot be opened)", accepted);
  std::string out;
  char buf[1 << 16];
  while (in) {
    in.read(buf, sizeof buf);
    out.append(buf, static_cast<std::size_t>(in.gcount()));
    if (out.size() > max_bytes) throw error(field, "'" + path + "' (larger than the limit)", accepted);
  }
  if (in.bad()) throw error(field, "'" + path + "' (read error)", accepted);
  return out;
}

}  // namespace safeamp
