// File helpers shared by the reference lock, the parity gate's records, the report and every reader of outside
// input: atomic writes (temporary file in the same folder + rename, so a failure never leaves a half-written
// file), one checked reader (regular files only, size cap), and an output folder checked before any run.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

namespace safeamp::sim {

/// Default cap of read_input_file: 64 MiB, far above any scenario, reference, record file or corpus safeamp
/// reads, far below the memory of the machines it runs on.
inline constexpr std::uintmax_t default_max_input_bytes = std::uintmax_t{64} << 20;

/// Writes `content` to `path` atomically with safeamp::write_file_atomically (unique temporary
/// `<path>.tmp-<pid>-<n>`, fsync of the file and the folder, rename; the temporary removed on every failure),
/// after removing the stale temporaries of `path` left by dead processes (`<name>.tmp-<pid>` and
/// `<name>.tmp-<pid>-<n>` in the same folder whose <pid> no longer runs on this machine). Throws
/// safeamp::error naming `field` and the path when the folder is missing or not writable or the disk is full;
/// an existing file at `path` is then left untouched.
void write_file_atomically(const std::filesystem::path& path, std::string_view content,
                           std::string_view field = "output file");

/// Removes the temporaries of `path` left by processes that no longer run (see write_file_atomically);
/// returns how many were removed. Other files, and temporaries of live processes, are never touched.
std::size_t remove_stale_temporaries(const std::filesystem::path& path) noexcept;

/// Removes every stale temporary in folder `dir` (`<name>.tmp-<pid>` or `<name>.tmp-<pid>-<n>` whose <pid> no
/// longer runs on this machine) of a target name `ours` accepts (every name when it is empty): the litter of a
/// killed writer whose target is not rewritten later. Returns how many were removed; never throws.
std::size_t remove_stale_temporaries_in(const std::filesystem::path& dir,
                                        const std::function<bool(std::string_view target)>& ours = {}) noexcept;

/// The whole file as bytes, for outside input. Accepts a regular file (or a link to one) of at most
/// `max_bytes`; a directory, FIFO, socket or device (/dev/zero) is refused before any byte is read, and
/// reading stops at the cap, so a growing file cannot exhaust memory. Throws safeamp::error naming `field`,
/// the path and what is accepted ("cannot be opened" when it does not exist or is unreadable).
[[nodiscard]] std::string read_input_file(const std::filesystem::path& path, std::string_view field,
                                          std::uintmax_t max_bytes = default_max_input_bytes);

/// The size and FNV-1a 64 of a whole input file, read in pieces with no size cap (a data file of many GiB hashes in
/// constant memory); the same refusals as read_input_file, naming `field`.
struct file_digest {
  std::uintmax_t bytes = 0;
  std::uint64_t fnv1a64 = 0;
};
[[nodiscard]] file_digest digest_input_file(const std::filesystem::path& path, std::string_view field);

/// read_input_file(path, "input file", default_max_input_bytes).
[[nodiscard]] std::string read_whole_file(const std::filesystem::path& path);

/// Creates `dir` (and parents) when missing and checks that a file can be created in it; throws
/// safeamp::error("--out", dir, "a writable directory") otherwise. Call before any run so a bad folder
/// is reported before minutes of training. The probe is a new file created with O_CREAT | O_EXCL | O_NOFOLLOW
/// under an unused name `.safeamp-write-check-<pid>-<n>` and removed at once: an existing file or symbolic link
/// of any name is never opened.
void prepare_output_folder(const std::filesystem::path& dir);

/// Checks, changing nothing, that `dir` is an existing directory this process may create files in: write and search
/// permission for its effective ids (faccessat with AT_EACCESS, which also reports a read-only mount or an immutable
/// directory). The check `safeamp sim` makes before it accepts an invocation, when a refusal must leave the folder
/// as it found it: prepare_output_folder's probe file changed the folder's modification time (until 2026-12-07).
/// What access() cannot see (a full disk, a quota) shows at the invocation's first write, which is undone.
/// Throws safeamp::error("--out") naming the folder and why.
void check_writable_folder(const std::filesystem::path& dir);

/// True when `file_name` is a temporary of `target_name` as write_file_atomically names them
/// (`<target>.tmp-<pid>` or `<target>.tmp-<pid>-<n>`, digits only), whatever process wrote it.
[[nodiscard]] bool is_temporary_of(std::string_view file_name, std::string_view target_name);

/// Checks, before any run, that `path` can take append_file_durably: absent (it will be created) or a regular
/// file (not a symbolic link, directory, FIFO or device) this user may write. Throws safeamp::error naming `field`
/// and the path otherwise. Its size is not limited: nothing reads it whole.
void check_appendable_file(const std::filesystem::path& path, std::string_view field);

/// Appends `text` to `path` (created 0644 when missing; a symbolic link or anything but a regular file is
/// refused) in one write() loop, then fsync: the file is never read or rewritten, so its size does not matter.
/// When the file does not end with a newline (a torn last line), a newline goes first. `before_write`, when
/// given, is called with the file's size before the append and the exact bytes about to be appended (a caller
/// records them, to withdraw them later). Throws safeamp::error naming `field` and the path.
void append_file_durably(const std::filesystem::path& path, std::string_view text, std::string_view field,
                         const std::function<void(std::uintmax_t offset, std::string_view written)>& before_write = {});

/// 64-bit FNV-1a of bytes (data fingerprints, reference ids); as 16 lowercase hex digits.
[[nodiscard]] std::uint64_t fnv1a64(std::string_view bytes) noexcept;
[[nodiscard]] std::string hex64(std::uint64_t v);
/// True for what hex64 writes: exactly 16 lowercase hex digits (how files that record a hash are read back).
[[nodiscard]] bool is_hex64(std::string_view text) noexcept;

/// Current UTC time as ISO 8601 ("2024-05-01T12:00:00Z").
[[nodiscard]] std::string utc_now_iso8601();
/// True for what utc_now_iso8601 writes: YYYY-MM-DDTHH:MM:SSZ, digits where it has digits.
[[nodiscard]] bool is_utc_iso8601(std::string_view text) noexcept;

}  // namespace safeamp::sim
