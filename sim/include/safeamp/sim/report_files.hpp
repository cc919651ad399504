// File helpers shared by the reference lock, the parity gate's records and the report: atomic writes
// (temporary file in the same folder + rename, so a failure never leaves a half-written file), reading a
// whole file, and an output folder that is created and checked for writability before any run starts.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace safeamp::sim {

/// Writes `content` to `path` atomically: `<path>.tmp-<pid>` is written, flushed and renamed over `path`.
/// Throws safeamp::error naming the path when the folder is missing or not writable; the temporary is
/// removed on failure and an existing file at `path` is left untouched.
void write_file_atomically(const std::filesystem::path& path, std::string_view content);

/// The whole file as bytes; throws safeamp::error naming the path when it cannot be read.
[[nodiscard]] std::string read_whole_file(const std::filesystem::path& path);

/// Creates `dir` (and parents) when missing and checks that a file can be created in it; throws
/// safeamp::error("--out", dir, "a writable directory") otherwise. Call before any run so a bad folder
/// is reported before minutes of training.
void prepare_output_folder(const std::filesystem::path& dir);

/// 64-bit FNV-1a of bytes (data fingerprints, reference ids); as 16 lowercase hex digits.
[[nodiscard]] std::uint64_t fnv1a64(std::string_view bytes) noexcept;
[[nodiscard]] std::string hex64(std::uint64_t v);

/// Current UTC time as ISO 8601 ("2024-05-01T12:00:00Z").
[[nodiscard]] std::string utc_now_iso8601();

}  // namespace safeamp::sim
