// A test hook for crash consistency: safeamp sim ends itself by SIGKILL, fails with an error, or pauses at a named
// point, so that a test can check what a kill or a failure there leaves in an output folder and what the next
// invocation makes of it, or what another invocation does meanwhile.
#pragma once

#include <string_view>

namespace safeamp::sim {

/// The environment variable that names the point to end at: "NAME" (its first time) or "NAME#N" (its N-th time,
/// N >= 1). Unset or empty: no point ends the process.
inline constexpr const char* kill_at_variable = "SAFEAMP_TEST_KILL_AT";
/// The environment variable that names the point to fail at, as kill_at_variable names one to end at: there
/// kill_point throws safeamp::error, as the next change would on a full disk or an I/O error.
inline constexpr const char* fail_at_variable = "SAFEAMP_TEST_FAIL_AT";
/// The environment variable that names a point to pause at: there the process stops itself (SIGSTOP) until it is
/// sent SIGCONT, then goes on (killed or failed there too when the other variables name the same point), so that a
/// test can act while it is held there, as another process would between two of its steps.
inline constexpr const char* pause_at_variable = "SAFEAMP_TEST_PAUSE_AT";
/// The environment variable that, set to 1, prints every point reached on stderr as "safeamp: kill point NAME#N".
inline constexpr const char* kill_trace_variable = "SAFEAMP_TEST_KILL_TRACE";

/// A point right after one change safeamp sim makes to the files of an output folder, named after the change:
/// "wrote <file name>" after each atomic write (summary.json, a checkpoint, the output record, the marker ...),
/// "linked reference-*.json" (the reference a --relock replaces, kept beside it under a name with its lock time),
/// "moved <file name>", "linked <file name>" (a kept telemetry file linked into previous.new/), "removed <file
/// name>", "withdrew decisions.jsonl", "renamed previous.new", "appended
/// decisions.jsonl", and "appended part of decisions.jsonl" between the two halves of that append, which is written
/// in two pieces only while the hook is set (a torn append, as a kill during a write() can leave one); and the
/// folder's lock: "opened .safeamp-lock" once the lock file is opened (or created), before it is locked, "locked
/// .safeamp-lock" once the invocation holds the lock and has checked it is the file at that name. When
/// SAFEAMP_TEST_KILL_AT names this point and this is its N-th time, the process raises SIGKILL: no destructor, no
/// flush, no clean-up, as `kill -9` at that instant. When SAFEAMP_TEST_FAIL_AT names it, the point throws
/// safeamp::error instead, naming the point and the variable: the invocation then takes the path of a change that
/// failed right after this one (its handlers and destructors run, and the tool exits 2). Counting is per name,
/// across threads. No variable set, a point costs a test of a flag read once. A malformed value of one of the three
/// ends the process with exit code 2 and a message saying what is accepted, at the first point
/// (the tool reaches "start" before it changes anything).
void kill_point(std::string_view name);

/// True when any of SAFEAMP_TEST_KILL_AT, SAFEAMP_TEST_FAIL_AT, SAFEAMP_TEST_PAUSE_AT or SAFEAMP_TEST_KILL_TRACE
/// is set: writers that are one piece in normal use may then write in pieces with a kill point between them (see
/// kill_point).
[[nodiscard]] bool kill_points_active() noexcept;

}  // namespace safeamp::sim
