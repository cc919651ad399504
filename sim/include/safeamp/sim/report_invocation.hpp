// An output folder while `safeamp sim` writes into it: an INCOMPLETE marker from the moment the first run is
// about to train until the last output is written, and the outputs of the last finished invocation moved aside
// into previous/ first, so a failed or killed invocation never leaves a report, summary or telemetry that could
// be taken for its own. What --resume needs (checkpoints/, reference/) stays where it is. Only files safeamp sim
// can show it wrote are ever moved or removed: it keeps a record of them (.safeamp-outputs), and a folder holding
// a file of an output's name that it did not write is refused before anything trains or changes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace safeamp::sim {

/// The marker file in the output folder; its text says what the folder holds and how to continue.
inline constexpr std::string_view incomplete_marker_name = "INCOMPLETE";
/// Where begin_invocation moves the last finished invocation's outputs (replacing what was there).
inline constexpr std::string_view previous_folder_name = "previous";
/// The record of the outputs safeamp sim wrote into a folder (and into previous/): a JSON object
/// {"format": "safeamp sim outputs", "version": 1, "files": [{"path", "bytes", "fnv1a64"}...], "decisions":
/// {"offset", "text"}, "known_good": {"before", "bytes", "fnv1a64"}}, each file relative to the folder with its size
/// and FNV-1a 64 when written; "decisions", when present, is the last append to decisions.jsonl (its offset and
/// bytes), withdrawn by the next start when the invocation that made it did not finish; "known_good", when
/// present, is the last replacement of known_good.json: what it held before (its text, or null when there was
/// none) and the size and hash of what replaced it, put back by the next start when the invocation that replaced it
/// did not finish. Folders of safeamp before 2026-12-06 have none (see begin_invocation).
inline constexpr std::string_view outputs_record_name = ".safeamp-outputs";
/// The decisions file of an output folder (parity_fallback.hpp appends to it).
inline constexpr std::string_view decisions_file_name = "decisions.jsonl";
/// The known-good record of an output folder (parity_fallback.hpp reads and writes it).
inline constexpr std::string_view known_good_file_name = "known_good.json";

/// The names of an invocation's outputs, relative to the output folder: report.html, summary.json,
/// data_parallel.json and telemetry/<name>.jsonl. known_good.json and decisions.jsonl are records kept across
/// invocations, reference/ is the locked reference and checkpoints/ what --resume continues from: none of them is
/// moved. True for those names only (a path with another folder, "..", or another extension is not one).
[[nodiscard]] bool is_invocation_output_name(const std::filesystem::path& relative);

/// True when `file`, a regular file at `relative` (an invocation output name), holds what safeamp sim writes
/// there: report.html begins with its DOCTYPE and "<title>safeamp sim report: ", summary.json and
/// data_parallel.json are JSON objects with their members (scenario, decision, reference, candidates, preflight,
/// exit_code; ranks, micro_batches, reduction, reference_reduction, runs, reduction_error_vs_ranks), a telemetry
/// file's first line is an object whose keys begin step, loss, scale, found_inf, skipped. How the outputs of a
/// folder without a record (written before 2026-12-06) are recognised.
[[nodiscard]] bool looks_like_invocation_output(const std::filesystem::path& file,
                                                const std::filesystem::path& relative);

struct invocation_start {
  std::string scenario;                     // named in the marker
  std::vector<std::string> kept_telemetry;  // file names in telemetry/ that stay (the locked reference's)
  // The kept telemetry is also linked (or copied) into previous/ with the other outputs: under --relock, whose
  // new reference's telemetry replaces it once that reference has trained, while a relock that fails keeps it.
  bool kept_also_in_previous = false;
};

/// The lock file of an output folder (see output_folder_lock).
inline constexpr std::string_view lock_file_name = ".safeamp-lock";

/// An exclusive lock on an output folder for as long as the object lives, so that a second `safeamp sim` into the
/// same folder (a nightly job started again while the last one still runs, a second terminal) is refused before it
/// reads or changes anything, rather than the two moving, replacing and removing each other's outputs and
/// checkpoints. The lock is a POSIX record lock (fcntl F_SETLK) on `<out>/.safeamp-lock`, an empty file: the kernel
/// releases it when the process ends however it ends (SIGKILL included), so no stale lock is ever left, and it
/// names the process that holds it. Once the lock is taken, the file locked must still be the one at its path
/// (not removed or replaced meanwhile), or it is opened and locked again: so no invocation goes on holding the lock
/// of a removed file while another locks a new one. The file is never removed, but by remove_if_alone: by an
/// invocation that created it and is refused before it changed anything in the folder. Record locks belong to the
/// process: a second lock in the same process is not refused.
class output_folder_lock {
 public:
  /// Takes the lock, creating the lock file when there is none. Throws safeamp::error naming --out, the folder and
  /// the process that holds it when another process holds it, when the folder is gone (removed meanwhile: an
  /// invocation refused in a folder it created takes it back), and when the lock file cannot be opened or created.
  /// On a file system that has no record locks (ENOLCK, EINVAL, ENOTSUP), prints a warning on stderr that
  /// concurrent invocations go undetected and holds nothing (held() is false).
  explicit output_folder_lock(const std::filesystem::path& out);
  ~output_folder_lock();
  output_folder_lock(const output_folder_lock&) = delete;
  output_folder_lock& operator=(const output_folder_lock&) = delete;

  [[nodiscard]] bool held() const noexcept { return fd_ >= 0; }
  /// True when this object created the lock file (it did not exist when the lock was taken).
  [[nodiscard]] bool created_file() const noexcept { return created_file_; }

  /// For an invocation refused before it changed anything in the folder: when the lock is held, this object
  /// created the lock file and the folder holds nothing else, removes the file, then releases the lock, and returns
  /// true (the folder is then as the invocation found it: empty). Otherwise changes nothing and returns false.
  /// Safe while the lock is held: an invocation that opened the file before it was removed finds, once it holds the
  /// lock, that the file is gone, and opens the path again.
  bool remove_if_alone() noexcept;

 private:
  std::filesystem::path file_;
  int fd_ = -1;
  bool created_file_ = false;
};

/// begin_invocation's checks alone, changing nothing: throws what begin_invocation would throw before it changes
/// anything (a file at an output's name that safeamp sim cannot show it wrote, a record that is not safeamp's...).
/// A folder that does not exist passes (it holds nothing). How `safeamp sim` refuses a folder before it creates
/// anything in it (the lock file, reference/, telemetry/, checkpoints/).
void check_invocation(const std::filesystem::path& out);

/// What begin_invocation found and did.
struct invocation_cleanup {
  bool was_incomplete = false;                 // the folder was already marked: an earlier invocation did not finish
  std::vector<std::filesystem::path> moved;    // into previous/ (paths relative to the output folder)
  std::vector<std::filesystem::path> removed;  // partial outputs of an unfinished invocation
  std::size_t withdrawn_decisions = 0;         // lines of decisions.jsonl an unfinished invocation appended, removed
  bool restored_known_good = false;  // known_good.json an unfinished invocation replaced was put back as it was
};

/// Checks `out` and marks it INCOMPLETE; call once every other check has passed, before the first run trains.
/// First, changing nothing: every file at an output's name (report.html, summary.json, data_parallel.json,
/// telemetry/*.jsonl), everything in previous/ and previous.new/, and INCOMPLETE must be safeamp sim's: listed in
/// the folder's record (outputs_record_name) with the size and hash it was written with, or, in a folder without
/// a record (safeamp before 2026-12-06) or one marked INCOMPLETE (a file written before the record was updated),
/// recognised by its content (looks_like_invocation_output). Anything else (a user's summary.json, a file edited
/// since, a directory or a link at an output's name, a stray file in previous/) throws safeamp::error("--out")
/// naming the file and what is accepted (an empty folder, or one safeamp sim wrote), and nothing is changed.
/// Then: a finished folder's outputs are listed in its record as a finished invocation's (before the marker is
/// written), and they (less `kept_telemetry`) move into previous.new/, which then replaces previous/ (whose own
/// files, and nothing else, are removed), so a kill while they move, or after the marker and before they begin to
/// move, loses nothing: the next start finds the marker with previous.new/ or that record and completes the move. A
/// folder that was already marked after training began has no finished outputs to keep: the unfinished invocation's
/// partial outputs are removed, the decisions it appended are withdrawn (only when decisions.jsonl still ends with
/// exactly those bytes) and previous/ is left as it is; a known_good.json it replaced is put back as it was (removed
/// when there was none), only when the file still holds exactly what that invocation wrote. Throws safeamp::error
/// naming the path when a file cannot be moved, removed or written.
invocation_cleanup begin_invocation(const std::filesystem::path& out, const invocation_start& start);

/// Writes `content` to out/relative (an invocation output name) atomically, then adds it to the folder's record
/// (a file the record already lists is taken out of it before the write, so the record never names content that
/// is no longer there).
void write_invocation_output(const std::filesystem::path& out, const std::filesystem::path& relative,
                             std::string_view content);

/// Adds out/relative, an output another writer just wrote (data_parallel.json), to the folder's record.
void record_invocation_output(const std::filesystem::path& out, const std::filesystem::path& relative);

/// Records, before they are written, the bytes about to be appended to decisions.jsonl at `offset` (the
/// before_write of append_decisions), so that the next start withdraws them if this invocation does not finish.
void record_decisions_append(const std::filesystem::path& out, std::uintmax_t offset, std::string_view written);

/// Records, before known_good.json is replaced, what it holds now (`before`: its text, or nullopt when there is no
/// such file) and the text about to replace it, so that the next start puts the old record back if this invocation
/// does not finish: a candidate that passed in an invocation that did not finish is no record the next one's
/// decisions may name. `before` must be a record known_good_from_json_text accepts (the one read at the start).
void record_known_good_replacement(const std::filesystem::path& out, const std::optional<std::string>& before,
                                   std::string_view written);

/// True when `telemetry` is the telemetry of a run whose training loss per step was `loss_curve`: one line per
/// step, each line's "loss" the curve's value ("nan", "inf", "-inf" for non-finite ones). How a locked reference
/// and telemetry/<reference>.jsonl are checked to belong together before the telemetry is kept: a --relock that
/// failed or was killed between the two used to leave another reference's telemetry beside reference.json. False
/// for a missing file or anything but a regular file.
[[nodiscard]] bool reference_telemetry_matches(const std::filesystem::path& telemetry,
                                               const std::vector<double>& loss_curve);

/// Removes the marker: call after the invocation's last output is written.
void finish_invocation(const std::filesystem::path& out);

/// True when `out` holds the marker.
[[nodiscard]] bool invocation_incomplete(const std::filesystem::path& out);

/// The line printed on stderr when an invocation stops after begin_invocation: what the folder holds and how to
/// continue.
[[nodiscard]] std::string incomplete_note(const std::filesystem::path& out);

}  // namespace safeamp::sim
