// NumPy .npy files (format versions 1.0, 2.0 and 3.0; what numpy.save writes): a checked reader for the
// simulator's data and initial weights, and a writer for fixtures. The reader refuses, naming the file and the
// field: a bad magic or version, a malformed or truncated header, an unsupported dtype (accepted: float32,
// float64, int32, int64, little- or big-endian), more than 2 dimensions, a data section shorter or longer than
// the header says, more than max_elements values, and (floats) NaN, inf or a float64 outside float's range.
// .npz archives of .npy members are read by npz.hpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace safeamp::sim {

struct npy_limits {
  std::int64_t max_elements = std::int64_t{1} << 26;  // 64 Mi values (256 MiB as float)
};

/// A 0-, 1- or 2-D array in C order. Floats are converted to float (float64 rounded to nearest); integers are
/// kept exactly in `integers` (and converted to float in `values` as well).
struct npy_array {
  std::vector<std::int64_t> shape;  // () scalar, (n), (rows, cols)
  bool is_integer = false;
  std::vector<float> values;
  std::vector<std::int64_t> integers;  // only when is_integer
  [[nodiscard]] std::int64_t rows() const noexcept { return shape.empty() ? 1 : shape[0]; }
  [[nodiscard]] std::int64_t cols() const noexcept { return shape.size() < 2 ? 1 : shape[1]; }
};

/// The largest .npy file `limits` admit: max_elements values of 8 bytes and the longest header. read_npy refuses
/// larger files before reading them, and read_npz refuses larger members before inflating them.
[[nodiscard]] std::uint64_t npy_max_file_bytes(const npy_limits& limits) noexcept;

/// Parses the bytes of a .npy file. `what` names it in errors: "data.inputs 'x.npy'".
[[nodiscard]] npy_array parse_npy(std::string_view bytes, std::string_view what, const npy_limits& limits = {});

/// Reads and parses `path` (refused before reading when the file is larger than the element cap allows).
[[nodiscard]] npy_array read_npy(const std::filesystem::path& path, std::string_view field,
                                 const npy_limits& limits = {});

/// The bytes of a version 1.0 little-endian float32 .npy file of `shape` (1 or 2 dimensions).
[[nodiscard]] std::string npy_bytes(std::span<const std::int64_t> shape, std::span<const float> values);
/// The same for int32 values (token ids, class indices): dtype '<i4'.
[[nodiscard]] std::string npy_bytes(std::span<const std::int64_t> shape, std::span<const std::int32_t> values);

}  // namespace safeamp::sim
