// An output folder while `safeamp sim` writes into it: an INCOMPLETE marker from the moment the first run is
// about to train until the last output is written, and the outputs of the last finished invocation moved aside
// into previous/ first, so a failed or killed invocation never leaves a report, summary or telemetry that could
// be taken for its own. What --resume needs (checkpoints/, reference/) stays where it is.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace safeamp::sim {

/// The marker file in the output folder; its text says what the folder holds and how to continue.
inline constexpr std::string_view incomplete_marker_name = "INCOMPLETE";
/// Where begin_invocation moves the last finished invocation's outputs (replacing what was there).
inline constexpr std::string_view previous_folder_name = "previous";

/// What an invocation's outputs are: report.html, summary.json, data_parallel.json and telemetry/*.jsonl
/// (relative to the output folder). known_good.json and decisions.jsonl are records kept across invocations,
/// reference/ is the locked reference and checkpoints/ what --resume continues from: none of them is moved.
[[nodiscard]] std::vector<std::filesystem::path> invocation_outputs(const std::filesystem::path& out);

struct invocation_start {
  std::string scenario;                     // named in the marker
  std::vector<std::string> kept_telemetry;  // file names in telemetry/ that stay (the locked reference's)
};

/// The lock file of an output folder (see output_folder_lock).
inline constexpr std::string_view lock_file_name = ".safeamp-lock";

/// An exclusive lock on an output folder for as long as the object lives, so that a second `safeamp sim` into the
/// same folder (a nightly job started again while the last one still runs, a second terminal) is refused before it
/// reads or changes anything, rather than the two moving, replacing and removing each other's outputs and
/// checkpoints. The lock is a POSIX record lock (fcntl F_SETLK) on `<out>/.safeamp-lock`, an empty file: the kernel
/// releases it when the process ends however it ends (SIGKILL included), so no stale lock is ever left, and it
/// names the process that holds it. The file is never removed (a third invocation could otherwise lock a new file
/// while a second still holds the removed one). Record locks belong to the process: a second lock in the same
/// process is not refused.
class output_folder_lock {
 public:
  /// Takes the lock. Throws safeamp::error naming --out, the folder and the process that holds it when another
  /// process holds it, and when the lock file cannot be opened or created. On a file system that has no record
  /// locks (ENOLCK, EINVAL, ENOTSUP), prints a warning on stderr that concurrent invocations go undetected and holds
  /// nothing (held() is false).
  explicit output_folder_lock(const std::filesystem::path& out);
  ~output_folder_lock();
  output_folder_lock(const output_folder_lock&) = delete;
  output_folder_lock& operator=(const output_folder_lock&) = delete;

  [[nodiscard]] bool held() const noexcept { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

/// What begin_invocation found and did.
struct invocation_cleanup {
  bool was_incomplete = false;                 // the folder was already marked: an earlier invocation did not finish
  std::vector<std::filesystem::path> moved;    // into previous/ (paths relative to the output folder)
  std::vector<std::filesystem::path> removed;  // partial outputs of an unfinished invocation
};

/// Marks `out` INCOMPLETE. A finished folder's outputs (invocation_outputs, less `kept_telemetry`) move into
/// previous.new/, which then replaces previous/ (so a kill while they move loses nothing: the next start finds
/// the marker and previous.new/ and completes the move); a folder that was already marked after training began
/// has no finished outputs to keep: the unfinished invocation's partial outputs are removed and previous/ is left
/// as it is. Call once every check
/// has passed, before the first run trains. Throws safeamp::error naming the path when a file cannot be moved,
/// removed or written.
invocation_cleanup begin_invocation(const std::filesystem::path& out, const invocation_start& start);

/// Removes the marker: call after the invocation's last output is written.
void finish_invocation(const std::filesystem::path& out);

/// True when `out` holds the marker.
[[nodiscard]] bool invocation_incomplete(const std::filesystem::path& out);

/// The line printed on stderr when an invocation stops after begin_invocation: what the folder holds and how to
/// continue.
[[nodiscard]] std::string incomplete_note(const std::filesystem::path& out);

}  // namespace safeamp::sim
