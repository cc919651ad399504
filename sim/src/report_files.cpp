// Atomic file writes and output-folder checks for the reference lock and the report.
#include "safeamp/sim/report_files.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <system_error>

#include "safeamp/error.hpp"

namespace safeamp::sim {

namespace fs = std::filesystem;

void write_file_atomically(const fs::path& path, std::string_view content) {
  const fs::path tmp = path.string() + ".tmp-" + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    throw error("output file", "'" + path.string() + "' (" + std::strerror(errno) + ")",
                "a path in an existing, writable directory");
  }
  const std::size_t written = std::fwrite(content.data(), 1, content.size(), f);
  const bool flushed = std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  const bool closed = std::fclose(f) == 0;
  if (written != content.size() || !flushed || !closed) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw error("output file", "'" + path.string() + "' (short write)", "a writable file system with free space");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw error("output file", "'" + path.string() + "' (" + ec.message() + ")", "a path that can be replaced");
  }
}

std::string read_whole_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw error("input file", "'" + path.string() + "' (cannot be opened)", "a readable file");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw error("input file", "'" + path.string() + "' (read error)", "a readable file");
  return ss.str();
}

void prepare_output_folder(const fs::path& dir) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) {
    throw error("--out", "'" + dir.string() + "' (exists and is not a directory)", "a writable directory");
  }
  fs::create_directories(dir, ec);
  if (ec) throw error("--out", "'" + dir.string() + "' (" + ec.message() + ")", "a writable directory");
  const fs::path probe = dir / (".safeamp-write-check-" + std::to_string(::getpid()));
  std::FILE* f = std::fopen(probe.c_str(), "wb");
  if (f == nullptr) {
    throw error("--out", "'" + dir.string() + "' (" + std::strerror(errno) + ")", "a writable directory");
  }
  std::fclose(f);
  fs::remove(probe, ec);
}

std::uint64_t fnv1a64(std::string_view bytes) noexcept {
  std::uint64_t h = 14695981039346656037ull;  // FNV-1a 64-bit offset basis
  for (const char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;  // FNV 64-bit prime
  }
  return h;
}

std::string hex64(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string utc_now_iso8601() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace safeamp::sim
