// NumPy .npz archives (what numpy.savez and numpy.savez_compressed write): a zip of .npy members, stored
// (method 0) or deflated (method 8, inflated with zlib), ZIP64 fields read where numpy's zipfile writes them.
// A checked reader: every offset and size is bounds-checked against the archive, a member's declared size is
// capped like a .npy file (npy_max_file_bytes), inflating never writes past the declared size (zip bomb), the
// CRC-32 is verified, and errors name the file, the member and the zip field with what is accepted.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "safeamp/sim/npy.hpp"

namespace safeamp::sim {

/// The arrays of an .npz in archive order, named as numpy.load(...).files names them (a member's file name
/// without ".npy"). Reads only the central directory. `what` names the archive in errors: "data.inputs 'x.npz'".
[[nodiscard]] std::vector<std::string> parse_npz_names(std::string_view bytes, std::string_view what);

/// The array `name` of an .npz (the member `name` + ".npy"), decompressed, CRC-checked and read by parse_npy.
[[nodiscard]] npy_array parse_npz(std::string_view bytes, std::string_view name, std::string_view what,
                                  const npy_limits& limits = {});

/// The same on a file, reading only the end records, the central directory and the one member (an archive may
/// be larger than any one array). `field` names the setting in errors: "data.inputs".
[[nodiscard]] std::vector<std::string> read_npz_names(const std::filesystem::path& path, std::string_view field);
[[nodiscard]] npy_array read_npz(const std::filesystem::path& path, std::string_view name, std::string_view field,
                                 const npy_limits& limits = {});

/// A data file named in a scenario: "x.npy", or "x.npz:name" for the array `name` of an archive (the split is at
/// the first ':' after a ".npz"; a path without one is a whole file).
struct array_file_ref {
  std::string path;
  std::string array;  // empty: the file itself is a .npy
  bool archive = false;
};
[[nodiscard]] array_file_ref parse_array_file_ref(const std::string& ref);

/// Reads a data file named by `ref` (as parse_array_file_ref splits it) with read_npy or read_npz. A path ending
/// in ".npz" without an array name is refused, listing the archive's arrays.
[[nodiscard]] npy_array read_array_file(const std::string& ref, std::string_view field,
                                        const npy_limits& limits = {});

}  // namespace safeamp::sim
