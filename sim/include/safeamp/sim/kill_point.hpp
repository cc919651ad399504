// A test hook for crash consistency: safeamp sim ends itself by SIGKILL at a named point, so that a test can
// check what a kill there leaves in an output folder and what the next invocation makes of it.
#pragma once

#include <string_view>

namespace safeamp::sim {

/// The environment variable that names the point to end at: "NAME" (its first time) or "NAME#N" (its N-th time,
/// N >= 1). Unset or empty: no point ends the process.
inline constexpr const char* kill_at_variable = "SAFEAMP_TEST_KILL_AT";
/// The environment variable that, set to 1, prints every point reached on stderr as "safeamp: kill point NAME#N".
inline constexpr const char* kill_trace_variable = "SAFEAMP_TEST_KILL_TRACE";

/// A point right after one change safeamp sim makes to the files of an output folder, named after the change:
/// "wrote <file name>" after each atomic write (summary.json, a checkpoint, the output record, the marker ...),
/// "linked reference-*.json" (the reference a --relock replaces, kept beside it under a name with its lock time),
/// "moved <file name>", "linked <file name>" (a kept telemetry file linked into previous.new/), "removed <file
/// name>", "withdrew decisions.jsonl", "renamed previous.new", "appended
/// decisions.jsonl", and "appended part of decisions.jsonl" between the two halves of that append, which is written
/// in two pieces only while the hook is set (a torn append, as a kill during a write() can leave one). When
/// SAFEAMP_TEST_KILL_AT names this point and this is its N-th time, the process raises SIGKILL: no destructor, no
/// flush, no clean-up, as `kill -9` at that instant. Counting is per name, across threads. Neither variable set,
/// a point costs a test of a flag read once. A malformed SAFEAMP_TEST_KILL_AT ends the process with exit code 2
/// and a message saying what is accepted, at the first point (the tool reaches "start" before it changes anything).
void kill_point(std::string_view name) noexcept;

/// True when SAFEAMP_TEST_KILL_AT or SAFEAMP_TEST_KILL_TRACE is set: writers that are one piece in normal use may
/// then write in pieces with a kill point between them (see kill_point).
[[nodiscard]] bool kill_points_active() noexcept;

}  // namespace safeamp::sim
