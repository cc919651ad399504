// The .npy reader and writer (see npy.hpp). Layout (numpy/lib/format.py documents it):
//   "\x93NUMPY" | major (1 byte) | minor (1 byte) | header length (uint16 LE in 1.0, uint32 LE in 2.0/3.0)
//   | header: a Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), } padded with
//     spaces and ended by '\n' | the data, shape product x item size bytes.
#include "safeamp/sim/npy.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "safeamp/error.hpp"
#include "safeamp/sim/json_input.hpp"
#include "safeamp/sim/report_files.hpp"

namespace safeamp::sim {
namespace {

constexpr std::string_view magic = "\x93NUMPY";
constexpr std::size_t max_header_bytes = 1 << 16;  // numpy's own limit for reading untrusted headers is 10000
constexpr const char* accepted_dtypes =
    "float32 or float64 ('<f4', '>f4', '<f8', '>f8'), int32 or int64 "
    "('<i4', '>i4', '<i8', '>i8')";

[[noreturn]] void fail(std::string_view what, const std::string& field, const std::string& value,
                       const std::string& accepted) {
  throw error(std::string(what) + " " + field, value, accepted);
}

/// A cursor over the header dict text with the few token kinds it contains.
class header_reader {
 public:
  header_reader(std::string_view text, std::string_view what) : s_(text), what_(what) {}
  void skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool eat(char c) {
    skip_space();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) malformed(std::string("'") + c + "'");
  }
  std::string quoted() {
    skip_space();
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) malformed("a quoted string");
    const char q = s_[i_++];
    const std::size_t start = i_;
    while (i_ < s_.size() && s_[i_] != q) ++i_;
    if (i_ >= s_.size()) malformed("a closing quote");
    return std::string(s_.substr(start, i_++ - start));
  }
  bool boolean() {
    skip_space();
    for (const auto& [word, value] : {std::pair{std::string_view("True"), true}, {"False", false}}) {
      if (s_.substr(i_, word.size()) == word) {
        i_ += word.size();
        return value;
      }
    }
    malformed("True or False");
  }
  std::vector<std::int64_t> shape() {
    expect('(');
    std::vector<std::int64_t> dims;
    while (!eat(')')) {
      skip_space();
      std::int64_t v = 0;
      std::size_t digits = 0;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
        if (v > (std::numeric_limits<std::int64_t>::max() - 9) / 10) {
          fail(what_, "shape", "a dimension beyond 2^63", "dimensions that fit the element limit");
        }
        v = v * 10 + (s_[i_++] - '0');
        ++digits;
      }
      if (digits == 0) malformed("a dimension (a non-negative integer)");
      dims.push_back(v);
      if (!eat(',')) {
        expect(')');
        break;
      }
    }
    return dims;
  }
  [[noreturn]] void malformed(const std::string& wanted) const {
    fail(what_, "header", "malformed at character " + std::to_string(i_) + " ('" + bounded_text(s_, 80) + "')",
         wanted + " there: a dict {'descr': ..., 'fortran_order': ..., 'shape': (...)} as numpy.save writes it");
  }

 private:
  std::string_view s_;
  std::string_view what_;
  std::size_t i_ = 0;
};

struct dtype {
  char kind = 'f';  // 'f' float, 'i' signed integer
  std::size_t size = 4;
  bool big_endian = false;
};

dtype parse_descr(const std::string& d, std::string_view what) {
  const auto bad = [&] { fail(what, "dtype", "'" + bounded_text(d, 40) + "'", accepted_dtypes); };
  if (d.size() != 3) bad();
  dtype t;
  if (d[0] == '>') {
    t.big_endian = true;
  } else if (d[0] == '<' || (d[0] == '=' && std::endian::native == std::endian::little)) {
    t.big_endian = false;
  } else {
    bad();
  }
  t.kind = d[1];
  if (t.kind != 'f' && t.kind != 'i') bad();
  if (d[2] != '4' && d[2] != '8') bad();
  t.size = static_cast<std::size_t>(d[2] - '0');
  return t;
}

std::uint64_t load_bits(const unsigned char* p, std::size_t size, bool big_endian) {
  std::uint64_t v = 0;
  for (std::size_t k = 0; k < size; ++k) {
    const std::size_t byte = big_endian ? k : size - 1 - k;  // most significant byte first
    v = (v << 8) | p[byte];
  }
  return v;
}

/// The element at position `index` of the data as stored: row-major, or column-major for a Fortran-order array.
std::string element_name(const std::vector<std::int64_t>& shape, std::int64_t index, bool fortran) {
  if (shape.size() < 2) return "element [" + std::to_string(index) + "]";
  const std::int64_t row = fortran ? index % shape[0] : index / shape[1];
  const std::int64_t col = fortran ? index / shape[0] : index % shape[1];
  return "element [" + std::to_string(row) + ", " + std::to_string(col) + "]";
}

}  // namespace

npy_array parse_npy(std::string_view bytes, std::string_view what, const npy_limits& limits) {
  if (bytes.size() < magic.size() + 2 || bytes.substr(0, magic.size()) != magic) {
    fail(what, "magic", bytes.size() < 8 ? "missing (" + std::to_string(bytes.size()) + " bytes)" : "not \\x93NUMPY",
         "a .npy file as numpy.save writes it (an .npz archive is named as 'file.npz:array')");
  }
  const auto major = static_cast<unsigned char>(bytes[6]);
  const auto minor = static_cast<unsigned char>(bytes[7]);
  if (major < 1 || major > 3 || minor != 0) {
    fail(what, "version", std::to_string(major) + "." + std::to_string(minor), "1.0, 2.0 or 3.0");
  }
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  if (bytes.size() < 8 + len_bytes) fail(what, "header", "truncated (no header length)", "a complete .npy header");
  const auto* u = reinterpret_cast<const unsigned char*>(bytes.data());
  const std::uint64_t header_len = load_bits(u + 8, len_bytes, false);
  const std::size_t data_start = 8 + len_bytes + static_cast<std::size_t>(header_len);
  if (header_len > max_header_bytes) {
    fail(what, "header", std::to_string(header_len) + " bytes long", "at most " + std::to_string(max_header_bytes));
  }
  if (bytes.size() < data_start) {
    fail(what, "header",
         "truncated (" + std::to_string(header_len) + " bytes declared, " +
             std::to_string(bytes.size() - 8 - len_bytes) + " present)",
         "a complete .npy header");
  }
  header_reader h(bytes.substr(8 + len_bytes, static_cast<std::size_t>(header_len)), what);
  std::optional<std::string> descr;
  std::optional<bool> fortran;
  std::optional<std::vector<std::int64_t>> shape;
  h.expect('{');
  while (!h.eat('}')) {
    const std::string key = h.quoted();
    h.expect(':');
    if (key == "descr" && !descr) {
      descr = h.quoted();
    } else if (key == "fortran_order" && !fortran) {
      fortran = h.boolean();
    } else if (key == "shape" && !shape) {
      shape = h.shape();
    } else {
      fail(what, "header key", "'" + bounded_text(key, 40) + "' (unknown or repeated)",
           "descr, fortran_order and shape, once each");
    }
    if (!h.eat(',')) {
      h.expect('}');
      break;
    }
  }
  if (!descr || !fortran || !shape) {
    fail(what, "header",
         std::string("missing '") +
             (!descr     ? "descr"
              : !fortran ? "fortran_order"
                         : "shape") +
             "'",
         "descr, fortran_order and shape");
  }
  const dtype t = parse_descr(*descr, what);
  npy_array a;
  a.shape = *shape;
  if (a.shape.size() > 2) {
    fail(what, "shape", std::to_string(a.shape.size()) + " dimensions",
         "0, 1 or 2 dimensions (reshape to (rows, cols))");
  }
  std::int64_t count = 1;
  for (const std::int64_t d : a.shape) {
    if (d != 0 && count > limits.max_elements / d) {
      fail(what, "shape", "more than " + std::to_string(limits.max_elements) + " elements",
           "at most " + std::to_string(limits.max_elements) + " elements");
    }
    count *= d;
  }
  const std::uint64_t data_bytes = static_cast<std::uint64_t>(count) * t.size;
  const std::uint64_t present = bytes.size() - data_start;
  if (present != data_bytes) {
    fail(what, "data",
         (present < data_bytes ? "truncated: " : "longer than its header says: ") + std::to_string(present) + " bytes",
         std::to_string(data_bytes) + " bytes (" + std::to_string(count) + " elements of " + std::to_string(t.size) +
             " bytes)");
  }
  a.is_integer = t.kind == 'i';
  a.values.resize(static_cast<std::size_t>(count));
  if (a.is_integer) a.integers.resize(static_cast<std::size_t>(count));
  const unsigned char* p = u + data_start;
  for (std::int64_t k = 0; k < count; ++k, p += t.size) {
    const std::uint64_t bits = load_bits(p, t.size, t.big_endian);
    const auto i = static_cast<std::size_t>(k);
    if (a.is_integer) {
      const std::int64_t v =
          t.size == 4 ? static_cast<std::int32_t>(static_cast<std::uint32_t>(bits)) : static_cast<std::int64_t>(bits);
      a.integers[i] = v;
      a.values[i] = static_cast<float>(v);
      continue;
    }
    double v = 0.0;
    if (t.size == 4) {
      v = static_cast<double>(std::bit_cast<float>(static_cast<std::uint32_t>(bits)));
    } else {
      v = std::bit_cast<double>(bits);
    }
    if (!std::isfinite(v))
      fail(what, element_name(a.shape, k, *fortran), std::isnan(v) ? "NaN" : "infinite", "finite values");
    const auto f = static_cast<float>(v);
    if (!std::isfinite(f)) {
      fail(what, element_name(a.shape, k, *fortran), std::to_string(v) + " (beyond float's range)",
           "|x| <= 3.4028235e38");
    }
    a.values[i] = f;
  }
  if (*fortran && a.shape.size() == 2) {  // column-major: transpose into C order
    std::vector<float> v(a.values.size());
    std::vector<std::int64_t> n(a.integers.size());
    const std::int64_t rows = a.shape[0], cols = a.shape[1];
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) {
        v[static_cast<std::size_t>(r * cols + c)] = a.values[static_cast<std::size_t>(c * rows + r)];
        if (a.is_integer)
          n[static_cast<std::size_t>(r * cols + c)] = a.integers[static_cast<std::size_t>(c * rows + r)];
      }
    }
    a.values.swap(v);
    a.integers.swap(n);
  }
  return a;
}

std::uint64_t npy_max_file_bytes(const npy_limits& limits) noexcept {
  return static_cast<std::uint64_t>(limits.max_elements) * 8u + max_header_bytes + 16u;
}

npy_array read_npy(const std::filesystem::path& path, std::string_view field, const npy_limits& limits) {
  const std::string what = std::string(field) + " '" + path.string() + "'";
  return parse_npy(read_input_file(path, what, npy_max_file_bytes(limits)), what, limits);
}

namespace {

// A version 1.0 .npy file: magic, version, header length, the header dict padded with spaces to a multiple of
// 64 bytes (numpy's alignment) and a newline, then each value's 4 bytes, little-endian.
template <class T>
std::string npy_file_bytes(std::span<const std::int64_t> shape, const char* descr, std::span<const T> values) {
  static_assert(sizeof(T) == 4);
  std::string dims;
  for (const std::int64_t d : shape) dims += std::to_string(d) + ", ";
  if (shape.size() != 1) dims.resize(dims.size() - 1);  // "(3,)" for one dimension, "(3, 4)" for two
  if (shape.size() > 1) dims.resize(dims.size() - 1);
  std::string header = "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  const std::size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out(magic);
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  for (const T v : values) {
    const auto w = std::bit_cast<std::uint32_t>(v);
    for (int k = 0; k < 4; ++k) out += static_cast<char>((w >> (8 * k)) & 0xff);
  }
  return out;
}

}  // namespace

std::string npy_bytes(std::span<const std::int64_t> shape, std::span<const float> values) {
  return npy_file_bytes(shape, "<f4", values);
}

std::string npy_bytes(std::span<const std::int64_t> shape, std::span<const std::int32_t> values) {
  return npy_file_bytes(shape, "<i4", values);
}

}  // namespace safeamp::sim
