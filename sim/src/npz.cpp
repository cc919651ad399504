// The .npz reader (see npz.hpp). Zip layout (PKWARE APPNOTE 6.3), every integer little-endian:
//   [local header 0x04034b50 (30 bytes) | name | extra | data] ...
//   central directory: [entry 0x02014b50 (46 bytes) | name | extra | comment] ...
//   [ZIP64 end record 0x06064b50 (56 bytes) | ZIP64 locator 0x07064b50 (20 bytes)]   (only in ZIP64 archives)
//   end of central directory 0x06054b50 (22 bytes) | archive comment (at most 65535 bytes)
// numpy's savez opens each member with zipfile's force_zip64=True, so its local header carries 0xFFFFFFFF
// sizes and a ZIP64 extra field while the central directory holds the real sizes (a ZIP64 extra there only
// past 4 GiB). The central directory is authoritative here (also for members written with a data descriptor,
// flag bit 3); the local header gives where the data starts and must name the same member.
#include "safeamp/sim/npz.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <set>

#include "safeamp/error.hpp"

namespace safeamp::sim {
namespace {

constexpr std::uint32_t local_signature = 0x04034b50;
constexpr std::uint32_t central_signature = 0x02014b50;
constexpr std::uint32_t zip64_end_signature = 0x06064b50;
constexpr std::uint32_t zip64_locator_signature = 0x07064b50;
constexpr std::uint32_t end_signature = 0x06054b50;
constexpr std::uint64_t local_bytes = 30, central_bytes = 46, zip64_end_bytes = 56, zip64_locator_bytes = 20,
                        end_bytes = 22, max_comment_bytes = 0xffff;
constexpr std::uint64_t max_central_directory_bytes = std::uint64_t{1} << 24;  // ~300k members of short names
constexpr std::uint32_t escape32 = 0xffffffff;  // "see the ZIP64 extra field"
constexpr std::uint16_t zip64_extra_id = 0x0001;
constexpr std::uint16_t method_stored = 0, method_deflated = 8;
constexpr std::uint16_t flag_encrypted = 0x0001;
constexpr const char* npz_accepted = "an .npz archive as numpy.savez or numpy.savez_compressed writes it";

/// The bytes of an archive, read by range: the whole archive in memory, or a file read with pread.
class byte_source {
 public:
  virtual ~byte_source() = default;
  [[nodiscard]] virtual std::uint64_t size() const = 0;
  /// `count` bytes at `offset`; the caller has checked offset + count <= size().
  [[nodiscard]] virtual std::string read(std::uint64_t offset, std::uint64_t count) const = 0;
};

class memory_source final : public byte_source {
 public:
  explicit memory_source(std::string_view bytes) : bytes_(bytes) {}
  [[nodiscard]] std::uint64_t size() const override { return bytes_.size(); }
  [[nodiscard]] std::string read(std::uint64_t offset, std::uint64_t count) const override {
    return std::string(bytes_.substr(static_cast<std::size_t>(offset), static_cast<std::size_t>(count)));
  }

 private:
  std::string_view bytes_;
};

class file_source final : public byte_source {
 public:
  file_source(const std::filesystem::path& path, const std::string& what) : path_(path), what_(what) {
    const char* accepted = "a readable regular file (not a directory, FIFO or device)";
    // O_NONBLOCK: opening a FIFO without a writer must not hang; it is refused below by fstat.
    fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd_ < 0) throw error(what_, std::string("not readable (") + std::strerror(errno) + ")", accepted);
    struct ::stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 0) {
      ::close(fd_);
      throw error(what_, S_ISDIR(st.st_mode) ? "a directory" : "not a regular file", accepted);
    }
    size_ = static_cast<std::uint64_t>(st.st_size);
  }
  file_source(const file_source&) = delete;
  file_source& operator=(const file_source&) = delete;
  ~file_source() override { ::close(fd_); }
  [[nodiscard]] std::uint64_t size() const override { return size_; }
  [[nodiscard]] std::string read(std::uint64_t offset, std::uint64_t count) const override {
    std::string out(static_cast<std::size_t>(count), '\0');
    std::uint64_t done = 0;
    while (done < count) {
      const ::ssize_t n = ::pread(fd_, out.data() + done, static_cast<std::size_t>(count - done),
                                  static_cast<::off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        throw error(what_, "unreadable at byte " + std::to_string(offset + done) + " (shorter than when opened?)",
                    "a file that does not change while it is read");
      }
      done += static_cast<std::uint64_t>(n);
    }
    return out;
  }

 private:
  std::filesystem::path path_;
  std::string what_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

std::uint64_t le(std::string_view b, std::size_t at, std::size_t bytes) {
  std::uint64_t v = 0;
  for (std::size_t k = bytes; k-- > 0;) v = (v << 8) | static_cast<unsigned char>(b[at + k]);
  return v;
}

std::string hex32(std::uint64_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08llx", static_cast<unsigned long long>(v));
  return buf;
}

/// A name from the archive as it may be quoted in a message: printable ASCII kept, other bytes as \xNN, cut.
std::string printable(std::string_view s, std::size_t max_chars = 80) {
  std::string out;
  for (const char c : s.substr(0, max_chars)) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f && c != '\\') {
      out += c;
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    }
  }
  return s.size() > max_chars ? out + "..." : out;
}

/// numpy.load's name for a member: its file name without ".npy".
std::string array_name(std::string_view file_name) {
  constexpr std::string_view suffix = ".npy";
  if (file_name.size() >= suffix.size() && file_name.substr(file_name.size() - suffix.size()) == suffix) {
    file_name.remove_suffix(suffix.size());
  }
  return std::string(file_name);
}

/// Array names for a message: at most 16, about 400 characters.
std::string name_list(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t k = 0; k < names.size(); ++k) {
    if (k == 16 || out.size() > 400) return out + ", ... (" + std::to_string(names.size()) + " in all)";
    out += (out.empty() ? "" : ", ") + printable(names[k], 40);
  }
  return out.empty() ? "(none: the archive is empty)" : out;
}

struct member {
  std::string file_name;
  std::uint16_t flags = 0;
  std::uint16_t method = 0;
  std::uint32_t crc32 = 0;
  std::uint64_t compressed_bytes = 0;
  std::uint64_t uncompressed_bytes = 0;
  std::uint64_t local_offset = 0;
};

class archive_reader {
 public:
  archive_reader(const byte_source& src, std::string_view what) : src_(src), what_(what) { read_directory(); }

  [[nodiscard]] std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const member& m : members_) out.push_back(array_name(m.file_name));
    return out;
  }

  [[nodiscard]] npy_array array(std::string_view name, const npy_limits& limits) const {
    const auto it = std::find_if(members_.begin(), members_.end(),
                                 [&](const member& m) { return array_name(m.file_name) == name; });
    if (it == members_.end()) {
      // (appended, not "'" + text: g++ 12 warns falsely about that form here, its bug 105329)
      fail("array", std::string(1, '\'').append(printable(name)).append("' (not in the archive)"),
           "one of its arrays: " + name_list(names()));
    }
    const member& m = *it;
    const std::string label = "member '" + printable(m.file_name) + "'";
    if (m.file_name.size() < 4 || m.file_name.substr(m.file_name.size() - 4) != ".npy") {
      fail(label, "not a .npy file (its name does not end in .npy)", "an array numpy.savez wrote (<array>.npy)");
    }
    const std::string data = member_data(m, label, limits);
    return parse_npy(data, what_ + " " + label, limits);
  }

 private:
  [[noreturn]] void fail(const std::string& field, const std::string& value, const std::string& accepted) const {
    throw error(what_ + " " + field, value, accepted);
  }

  /// `count` bytes at `offset`, refused (naming `field`) unless they lie within [0, end).
  [[nodiscard]] std::string bytes_at(std::uint64_t offset, std::uint64_t count, std::uint64_t end,
                                     const std::string& field) const {
    if (offset > end || count > end - offset) {
      fail(field, "bytes [" + std::to_string(offset) + ", " + std::to_string(offset) + " + " + std::to_string(count) +
                      ")",
           "a range within bytes [0, " + std::to_string(end) + ") of the archive");
    }
    return src_.read(offset, count);
  }

  void read_directory() {
    const std::uint64_t size = src_.size();
    if (size < end_bytes) {
      fail("zip end of central directory", "missing (the file has " + std::to_string(size) + " bytes)",
           npz_accepted);
    }
    // The end record is the last 22 bytes plus the archive comment: search back at most 64 KiB.
    const std::uint64_t tail_bytes = std::min(size, end_bytes + max_comment_bytes);
    const std::string tail = src_.read(size - tail_bytes, tail_bytes);
    std::size_t at = tail.size() - end_bytes + 1;
    bool found = false;
    while (at-- > 0) {
      if (le(tail, at, 4) == end_signature && le(tail, at + 20, 2) == tail.size() - at - end_bytes) {
        found = true;
        break;
      }
    }
    if (!found) {
      fail("zip end of central directory", "not found (no end record in the last " + std::to_string(tail_bytes) +
                                               " bytes: not a zip archive, or truncated)",
           npz_accepted);
    }
    const std::uint64_t end_offset = size - tail_bytes + at;
    const std::string_view end(tail.data() + at, end_bytes);
    if (le(end, 4, 2) != 0 || le(end, 6, 2) != 0 || le(end, 8, 2) != le(end, 10, 2)) {
      fail("zip disk numbers", std::to_string(le(end, 4, 2)) + " and " + std::to_string(le(end, 6, 2)),
           "0: a single-file archive (split archives are not read)");
    }
    std::uint64_t entries = le(end, 10, 2);
    std::uint64_t directory_bytes = le(end, 12, 4);
    std::uint64_t directory_offset = le(end, 16, 4);
    std::uint64_t directory_end = end_offset;
    // ZIP64: a locator right before the end record points at the ZIP64 end record, which holds the 64-bit
    // count, size and offset (zipfile writes it past 65535 members or 4 GiB).
    if (end_offset >= zip64_locator_bytes) {
      const std::string loc = src_.read(end_offset - zip64_locator_bytes, zip64_locator_bytes);
      if (le(loc, 0, 4) == zip64_locator_signature) {
        if (le(loc, 4, 4) != 0 || le(loc, 16, 4) > 1) {
          fail("zip64 locator disk numbers", std::to_string(le(loc, 4, 4)) + " of " + std::to_string(le(loc, 16, 4)),
               "disk 0 of 1: a single-file archive");
        }
        const std::uint64_t record_offset = le(loc, 8, 8);
        directory_end = end_offset - zip64_locator_bytes;
        const std::string rec = bytes_at(record_offset, zip64_end_bytes, directory_end, "zip64 end record offset");
        if (le(rec, 0, 4) != zip64_end_signature) {
          fail("zip64 end record", "missing at byte " + std::to_string(record_offset) + " (bad signature)",
               "the record the ZIP64 locator points at (signature 0x06064b50)");
        }
        if (le(rec, 16, 4) != 0 || le(rec, 20, 4) != 0 || le(rec, 24, 8) != le(rec, 32, 8)) {
          fail("zip64 disk numbers", std::to_string(le(rec, 16, 4)) + " and " + std::to_string(le(rec, 20, 4)),
               "0: a single-file archive");
        }
        entries = le(rec, 32, 8);
        directory_bytes = le(rec, 40, 8);
        directory_offset = le(rec, 48, 8);
        directory_end = record_offset;
      }
    }
    if (directory_bytes > max_central_directory_bytes) {
      fail("zip central directory size", std::to_string(directory_bytes) + " bytes",
           "at most " + std::to_string(max_central_directory_bytes) + " bytes");
    }
    if (entries > directory_bytes / central_bytes) {
      fail("zip entry count", std::to_string(entries),
           "at most " + std::to_string(directory_bytes / central_bytes) + " (46 bytes per entry in the " +
               std::to_string(directory_bytes) + "-byte central directory)");
    }
    directory_offset_ = directory_offset;
    const std::string dir = bytes_at(directory_offset, directory_bytes, directory_end, "zip central directory");
    std::set<std::string> seen;
    std::size_t pos = 0;
    for (std::uint64_t k = 0; k < entries; ++k) {
      const std::string field = "zip central directory entry " + std::to_string(k);
      if (dir.size() - pos < central_bytes || le(dir, pos, 4) != central_signature) {
        fail(field, dir.size() - pos < central_bytes ? "truncated" : "missing (bad signature)",
             std::to_string(entries) + " entries of signature 0x02014b50 within the central directory");
      }
      member m;
      m.flags = static_cast<std::uint16_t>(le(dir, pos + 8, 2));
      m.method = static_cast<std::uint16_t>(le(dir, pos + 10, 2));
      m.crc32 = static_cast<std::uint32_t>(le(dir, pos + 16, 4));
      m.compressed_bytes = le(dir, pos + 20, 4);
      m.uncompressed_bytes = le(dir, pos + 24, 4);
      const std::size_t name_len = le(dir, pos + 28, 2), extra_len = le(dir, pos + 30, 2),
                        comment_len = le(dir, pos + 32, 2);
      m.local_offset = le(dir, pos + 42, 4);
      if (dir.size() - pos - central_bytes < name_len + extra_len + comment_len) {
        fail(field + " name, extra and comment lengths", std::to_string(name_len + extra_len + comment_len) + " bytes",
             "at most the " + std::to_string(dir.size() - pos - central_bytes) + " left in the central directory");
      }
      m.file_name = dir.substr(pos + central_bytes, name_len);
      read_zip64_extra(std::string_view(dir).substr(pos + central_bytes + name_len, extra_len), m,
                       "member '" + printable(m.file_name) + "'");
      if (!seen.insert(m.file_name).second) {
        fail("member '" + printable(m.file_name) + "'", "in the archive twice", "each member name once");
      }
      members_.push_back(std::move(m));
      pos += central_bytes + name_len + extra_len + comment_len;
    }
    if (pos != dir.size()) {
      fail("zip central directory size", std::to_string(dir.size()) + " bytes",
           std::to_string(pos) + " bytes: what its " + std::to_string(entries) + " entries occupy");
    }
  }

  /// Replaces the 0xFFFFFFFF sizes and offset of `m` by the ZIP64 extra field's 64-bit values (in the order
  /// uncompressed, compressed, offset; only those that are escaped are present).
  void read_zip64_extra(std::string_view extra, member& m, const std::string& label) const {
    const bool need[3] = {m.uncompressed_bytes == escape32, m.compressed_bytes == escape32,
                          m.local_offset == escape32};
    if (!need[0] && !need[1] && !need[2]) return;
    std::size_t p = 0;
    while (extra.size() - p >= 4) {
      const auto id = le(extra, p, 2);
      const std::size_t len = le(extra, p + 2, 2);
      if (extra.size() - p - 4 < len) break;
      if (id == zip64_extra_id) {
        std::uint64_t* fields[3] = {&m.uncompressed_bytes, &m.compressed_bytes, &m.local_offset};
        std::size_t q = p + 4;
        for (int f = 0; f < 3; ++f) {
          if (!need[f]) continue;
          if (q + 8 > p + 4 + len) {
            fail(label + " zip64 extra field", std::to_string(len) + " bytes long",
                 "8 bytes for each size or offset the central directory marks 0xFFFFFFFF");
          }
          *fields[f] = le(extra, q, 8);
          q += 8;
        }
        return;
      }
      p += 4 + len;
    }
    fail(label + " zip64 extra field", "missing", "one (id 0x0001) where a size or offset is 0xFFFFFFFF");
  }

  [[nodiscard]] std::string member_data(const member& m, const std::string& label, const npy_limits& limits) const {
    if ((m.flags & flag_encrypted) != 0) fail(label + " zip flags", "encrypted", "unencrypted members");
    if (m.method != method_stored && m.method != method_deflated) {
      fail(label + " zip compression method", std::to_string(m.method),
           "0 (stored: numpy.savez) or 8 (deflated: numpy.savez_compressed)");
    }
    const std::uint64_t cap = npy_max_file_bytes(limits);
    if (m.uncompressed_bytes > cap) {
      fail(label + " uncompressed size", std::to_string(m.uncompressed_bytes) + " bytes",
           "at most " + std::to_string(cap) + " bytes (" + std::to_string(limits.max_elements) +
               " values of 8 bytes and a .npy header)");
    }
    // Deflate expands incompressible data by a few bytes per 16 KiB block at most (zlib's compressBound).
    const std::uint64_t compressed_cap =
        m.method == method_stored ? m.uncompressed_bytes : compressBound(static_cast<uLong>(m.uncompressed_bytes));
    if (m.method == method_stored ? m.compressed_bytes != compressed_cap : m.compressed_bytes > compressed_cap) {
      fail(label + " compressed size", std::to_string(m.compressed_bytes) + " bytes",
           (m.method == method_stored ? "" : "at most ") + std::to_string(compressed_cap) + " bytes for " +
               std::to_string(m.uncompressed_bytes) + " uncompressed bytes");
    }
    const std::string local = bytes_at(m.local_offset, local_bytes, directory_offset_, label + " local header offset");
    if (le(local, 0, 4) != local_signature) {
      fail(label + " local header", "missing at byte " + std::to_string(m.local_offset) + " (bad signature)",
           "a local header (signature 0x04034b50) where the central directory says");
    }
    const std::uint64_t name_len = le(local, 26, 2), extra_len = le(local, 28, 2);
    const std::string local_name =
        bytes_at(m.local_offset + local_bytes, name_len, directory_offset_, label + " local header name");
    if (local_name != m.file_name) {
      fail(label + " local header name", "'" + printable(local_name) + "'", "the central directory's name");
    }
    const std::uint64_t data_offset = m.local_offset + local_bytes + name_len + extra_len;
    const std::string packed = bytes_at(data_offset, m.compressed_bytes, directory_offset_, label + " data");
    std::string data = m.method == method_stored ? packed : inflate(packed, m, label);
    std::uint64_t crc = ::crc32(0L, Z_NULL, 0);
    for (std::size_t at = 0; at < data.size(); at += 1u << 30) {
      const std::size_t n = std::min<std::size_t>(data.size() - at, 1u << 30);
      crc = ::crc32(crc, reinterpret_cast<const Bytef*>(data.data() + at), static_cast<uInt>(n));
    }
    if (crc != m.crc32) {
      fail(label + " CRC-32", hex32(crc) + " (computed over its " + std::to_string(data.size()) + " bytes)",
           hex32(m.crc32) + " as the central directory records it (the member is corrupt)");
    }
    return data;
  }

  /// Raw deflate into exactly the declared size: one byte of room beyond it detects a stream that would
  /// inflate further (a zip bomb) without ever writing more.
  [[nodiscard]] std::string inflate(const std::string& packed, const member& m, const std::string& label) const {
    const std::string field = label + " deflate data";
    std::string out(static_cast<std::size_t>(m.uncompressed_bytes) + 1, '\0');
    z_stream zs{};
    if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) fail(field, "not decodable (zlib could not start)", "deflate data");
    struct ender {
      z_stream* zs;
      ~ender() { inflateEnd(zs); }
    } end{&zs};
    std::uint64_t in_done = 0, out_done = 0;
    int rc = Z_OK;
    while (rc != Z_STREAM_END) {
      const auto in_now = static_cast<uInt>(std::min<std::uint64_t>(packed.size() - in_done, UINT_MAX));
      const auto out_now = static_cast<uInt>(std::min<std::uint64_t>(out.size() - out_done, UINT_MAX));
      zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(packed.data() + in_done));
      zs.avail_in = in_now;
      zs.next_out = reinterpret_cast<Bytef*>(out.data() + out_done);
      zs.avail_out = out_now;
      rc = ::inflate(&zs, Z_NO_FLUSH);
      in_done += in_now - zs.avail_in;
      out_done += out_now - zs.avail_out;
      if (out_done > m.uncompressed_bytes) {
        fail(field, "inflating past the declared " + std::to_string(m.uncompressed_bytes) + " bytes",
             "data that inflates to exactly the central directory's uncompressed size");
      }
      if (rc == Z_STREAM_END) break;
      if (rc == Z_BUF_ERROR || (rc == Z_OK && in_done == packed.size() && zs.avail_out != 0)) {
        fail(field, "truncated (the deflate stream does not end within its " + std::to_string(packed.size()) +
                        " compressed bytes)",
             "a complete deflate stream");
      }
      if (rc != Z_OK) {
        fail(field, std::string("corrupt (zlib: ") + (zs.msg != nullptr ? zs.msg : "error " + std::to_string(rc)) +
                        ")",
             "a valid deflate stream");
      }
    }
    if (out_done != m.uncompressed_bytes || in_done != packed.size()) {
      fail(field,
           "inflating to " + std::to_string(out_done) + " bytes from " + std::to_string(in_done) + " of " +
               std::to_string(packed.size()) + " compressed bytes",
           "a stream that inflates to the declared " + std::to_string(m.uncompressed_bytes) +
               " bytes and ends with the compressed data");
    }
    out.resize(static_cast<std::size_t>(out_done));
    return out;
  }

  const byte_source& src_;
  std::string what_;
  std::vector<member> members_;
  std::uint64_t directory_offset_ = 0;
};

std::string file_what(const std::filesystem::path& path, std::string_view field) {
  return std::string(field) + " '" + path.string() + "'";
}

}  // namespace

std::vector<std::string> parse_npz_names(std::string_view bytes, std::string_view what) {
  const memory_source src(bytes);
  return archive_reader(src, what).names();
}

npy_array parse_npz(std::string_view bytes, std::string_view name, std::string_view what, const npy_limits& limits) {
  const memory_source src(bytes);
  return archive_reader(src, what).array(name, limits);
}

std::vector<std::string> read_npz_names(const std::filesystem::path& path, std::string_view field) {
  const std::string what = file_what(path, field);
  const file_source src(path, what);
  return archive_reader(src, what).names();
}

npy_array read_npz(const std::filesystem::path& path, std::string_view name, std::string_view field,
                   const npy_limits& limits) {
  const std::string what = file_what(path, field);
  const file_source src(path, what);
  return archive_reader(src, what).array(name, limits);
}

array_file_ref parse_array_file_ref(const std::string& ref) {
  constexpr std::string_view ext = ".npz";
  const std::size_t at = ref.find(".npz:");
  if (at != std::string::npos) return {ref.substr(0, at + ext.size()), ref.substr(at + ext.size() + 1), true};
  const bool archive = ref.size() >= ext.size() && ref.compare(ref.size() - ext.size(), ext.size(), ext) == 0;
  return {ref, "", archive};
}

npy_array read_array_file(const std::string& ref, std::string_view field, const npy_limits& limits) {
  const array_file_ref r = parse_array_file_ref(ref);
  if (!r.archive) return read_npy(r.path, field, limits);
  if (r.array.empty()) {
    throw error(file_what(r.path, field), "an archive without an array name",
                "'" + r.path + ":NAME' with NAME one of its arrays: " + name_list(read_npz_names(r.path, field)));
  }
  return read_npz(r.path, r.array, field, limits);
}

}  // namespace safeamp::sim
