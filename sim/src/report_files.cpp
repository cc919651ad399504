// Atomic file writes, the checked reader of outside input and output-folder checks.
#include "safeamp/sim/report_files.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <limits>
#include <system_error>

#include "posix_fd.hpp"
#include "safeamp/error.hpp"
#include "safeamp/scaling/scaler_checkpoint.hpp"
#include "safeamp/sim/kill_point.hpp"

namespace safeamp::sim {

namespace fs = std::filesystem;

static_assert(default_max_input_bytes == safeamp::default_max_file_bytes, "one input cap for core and sim");

namespace {

/// The <pid> of a temporary of `target_name` ("<name>.tmp-<pid>" or "<name>.tmp-<pid>-<n>", digits only),
/// or -1 when `file_name` is anything else.
long long temporary_owner(std::string_view file_name, std::string_view target_name) {
  const std::string prefix = std::string(target_name) + ".tmp-";
  if (file_name.size() <= prefix.size() || file_name.substr(0, prefix.size()) != prefix) return -1;
  const std::string_view rest = file_name.substr(prefix.size());
  const std::size_t dash = rest.find('-');
  const std::string_view pid_text = rest.substr(0, dash);
  const std::string_view counter_text = dash == std::string_view::npos ? std::string_view{} : rest.substr(dash + 1);
  const auto all_digits = [](std::string_view t) {
    return !t.empty() && t.size() <= 18 && t.find_first_not_of("0123456789") == std::string_view::npos;
  };
  if (!all_digits(pid_text) || (dash != std::string_view::npos && !all_digits(counter_text))) return -1;
  return std::stoll(std::string(pid_text));
}

/// True only when no process `pid` exists on this machine (kill(pid, 0) fails with ESRCH); a process of another
/// user (EPERM) counts as alive.
bool process_is_gone(long long pid) noexcept {
  if (pid <= 0 || pid > std::numeric_limits<::pid_t>::max()) return false;
  return ::kill(static_cast<::pid_t>(pid), 0) != 0 && errno == ESRCH;
}

}  // namespace

std::size_t remove_stale_temporaries(const fs::path& path) noexcept {
  std::size_t removed = 0;
  try {
    const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
    const std::string target = path.filename().string();
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const long long pid = temporary_owner(it->path().filename().string(), target);
      if (pid < 0 || pid == static_cast<long long>(::getpid()) || !process_is_gone(pid)) continue;
      std::error_code rm;
      if (it->is_regular_file(rm) && fs::remove(it->path(), rm)) ++removed;
    }
  } catch (...) {  // cleaning up litter must never fail a write
  }
  return removed;
}

std::size_t remove_stale_temporaries_in(const fs::path& dir,
                                        const std::function<bool(std::string_view target)>& ours) noexcept {
  std::size_t removed = 0;
  try {
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      const std::size_t at = name.rfind(".tmp-");
      if (at == std::string::npos || at == 0) continue;
      if (ours && !ours(std::string_view(name).substr(0, at))) continue;
      const long long pid = temporary_owner(name, std::string_view(name).substr(0, at));
      if (pid < 0 || pid == static_cast<long long>(::getpid()) || !process_is_gone(pid)) continue;
      std::error_code rm;
      if (it->is_regular_file(rm) && fs::remove(it->path(), rm)) ++removed;
    }
  } catch (...) {  // cleaning up litter must never fail a run
  }
  return removed;
}

void write_file_atomically(const fs::path& path, std::string_view content, std::string_view field) {
  remove_stale_temporaries(path);
  safeamp::write_file_atomically(path.string(), content, field);
  kill_point("wrote " + path.filename().string());
}

namespace {
/// Reads outside input in pieces: a regular file (or a link to one) of at most `max_bytes`; a directory, FIFO,
/// socket or device is refused before any byte is read, and reading stops at the cap. Calls take(size) once with
/// the file's size, then take(piece) for each piece read. Throws safeamp::error naming `field` and the path.
template <class Size, class Take>
void read_input_pieces(const fs::path& path, std::string_view field, std::uintmax_t max_bytes, Size size, Take take) {
  const std::string accepted =
      "a readable regular file of at most " + std::to_string(max_bytes) + " bytes (not a directory, FIFO or device)";
  // O_NONBLOCK: opening a FIFO without a writer must not hang; it is refused below by fstat.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    throw error(field, "'" + path.string() + "' (cannot be opened: " + std::strerror(e) + ")", accepted);
  }
  const detail::fd_closer closer{fd};
  struct ::stat st {};
  if (::fstat(fd, &st) != 0) throw error(field, "'" + path.string() + "' (cannot be examined)", accepted);
  if (!S_ISREG(st.st_mode)) {
    const char* what = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                                              : "not a regular file";
    throw error(field, "'" + path.string() + "' (" + what + ")", accepted);
  }
  if (st.st_size < 0 || static_cast<std::uintmax_t>(st.st_size) > max_bytes) {
    throw error(field, "'" + path.string() + "' (" + std::to_string(st.st_size) + " bytes, over the limit)", accepted);
  }
  size(static_cast<std::uintmax_t>(st.st_size));
  std::uintmax_t total = 0;
  char buf[1 << 16];
  while (true) {
    const ::ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      throw error(field, "'" + path.string() + "' (read error: " + std::strerror(e) + ")", accepted);
    }
    if (n == 0) break;
    total += static_cast<std::uintmax_t>(n);
    if (total > max_bytes) throw error(field, "'" + path.string() + "' (grew over the limit)", accepted);
    take(std::string_view(buf, static_cast<std::size_t>(n)));
  }
}

constexpr std::uint64_t fnv_offset_basis = 14695981039346656037ull;  // FNV-1a 64-bit
constexpr std::uint64_t fnv_prime = 1099511628211ull;

std::uint64_t fnv1a64_from(std::uint64_t h, std::string_view bytes) noexcept {
  for (const char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= fnv_prime;
  }
  return h;
}
}  // namespace

std::string read_input_file(const fs::path& path, std::string_view field, std::uintmax_t max_bytes) {
  std::string out;
  read_input_pieces(
      path, field, max_bytes, [&out](std::uintmax_t size) { out.reserve(static_cast<std::size_t>(size)); },
      [&out](std::string_view piece) { out.append(piece); });
  return out;
}

file_digest digest_input_file(const fs::path& path, std::string_view field) {
  file_digest d{.bytes = 0, .fnv1a64 = fnv_offset_basis};
  read_input_pieces(
      path, field, std::numeric_limits<std::uintmax_t>::max(), [](std::uintmax_t) {},
      [&d](std::string_view piece) {
        d.bytes += piece.size();
        d.fnv1a64 = fnv1a64_from(d.fnv1a64, piece);
      });
  return d;
}

std::string read_whole_file(const fs::path& path) { return read_input_file(path, "input file"); }

void prepare_output_folder(const fs::path& dir) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) {
    throw error("--out", "'" + dir.string() + "' (exists and is not a directory)", "a writable directory");
  }
  fs::create_directories(dir, ec);
  if (ec) throw error("--out", "'" + dir.string() + "' (" + ec.message() + ")", "a writable directory");
  // The probe is a new file of this process's own (O_EXCL: an existing name, a symbolic link included, is never
  // opened; O_NOFOLLOW for the same reason), under a name not yet taken: fopen("wb") followed a link planted at
  // the predictable name and truncated its target.
  constexpr int probe_names_tried = 100;
  for (int n = 1; n <= probe_names_tried; ++n) {
    const fs::path probe = dir / (".safeamp-write-check-" + std::to_string(::getpid()) + "-" + std::to_string(n));
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) {
      ::close(fd);
      ::unlink(probe.c_str());
      return;
    }
    if (errno != EEXIST) {
      const int e = errno;
      throw error("--out", "'" + dir.string() + "' (" + std::strerror(e) + ")", "a writable directory");
    }
  }
  throw error("--out",
              "'" + dir.string() + "' (" + std::to_string(probe_names_tried) +
                  " names .safeamp-write-check-<pid>-<n> are all taken)",
              "a writable directory whose probe files can be created");
}

void check_writable_folder(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw error("--out",
                "'" + dir.string() + "' (" + (fs::exists(dir, ec) ? "not a directory" : "does not exist") + ")",
                "a writable directory");
  }
  if (::faccessat(AT_FDCWD, dir.c_str(), W_OK | X_OK, AT_EACCESS) != 0) {
    const int e = errno;
    throw error("--out", "'" + dir.string() + "' (" + std::strerror(e) + ")", "a writable directory");
  }
}

bool is_temporary_of(std::string_view file_name, std::string_view target_name) {
  return temporary_owner(file_name, target_name) >= 0;
}

void check_appendable_file(const fs::path& path, std::string_view field) {
  const std::string accepted = "a regular file this user may append to, or no file (it is created)";
  struct ::stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return;
    const int e = errno;
    throw error(field, "'" + path.string() + "' (cannot be examined: " + std::strerror(e) + ")", accepted);
  }
  if (S_ISLNK(st.st_mode)) throw error(field, "'" + path.string() + "' (a symbolic link)", accepted);
  if (!S_ISREG(st.st_mode)) {
    throw error(field, "'" + path.string() + "' (" + (S_ISDIR(st.st_mode) ? "a directory" : "not a regular file") + ")",
                accepted);
  }
  if (::access(path.c_str(), W_OK) != 0) {
    const int e = errno;
    throw error(field, "'" + path.string() + "' (not writable: " + std::strerror(e) + ")", accepted);
  }
}

void append_file_durably(const fs::path& path, std::string_view text, std::string_view field,
                         const std::function<void(std::uintmax_t offset, std::string_view written)>& before_write) {
  const std::string accepted = "a regular file this user may append to, on a file system with free space";
  // Read and write, to see the last byte; a file this user may only write is appended to as it is.
  constexpr int flags = O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC;
  int fd = ::open(path.c_str(), O_RDWR | flags, 0644);
  const bool readable = fd >= 0;
  if (fd < 0 && errno == EACCES) fd = ::open(path.c_str(), O_WRONLY | flags, 0644);
  if (fd < 0) {
    const int e = errno;
    throw error(field, "'" + path.string() + "' (cannot be opened for appending: " + std::strerror(e) + ")", accepted);
  }
  const detail::fd_closer closer{fd};
  struct ::stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    throw error(field, "'" + path.string() + "' (not a regular file)", accepted);
  }
  const auto size = static_cast<std::uintmax_t>(st.st_size);
  // A line torn by a killed writer (or an editor that dropped the final newline) stays a line of its own.
  std::string written;
  char last = '\n';
  if (readable && size > 0 && ::pread(fd, &last, 1, static_cast<::off_t>(size - 1)) != 1) {
    const int e = errno;
    throw error(field, "'" + path.string() + "' (read error: " + std::strerror(e) + ")", accepted);
  }
  if (last != '\n') written += '\n';
  written += text;
  if (before_write) before_write(size, written);
  // Under the crash-consistency hook the text goes in two pieces with a kill point between: a torn append.
  const std::size_t first_piece = kill_points_active() ? written.size() / 2 : written.size();
  std::size_t done = 0;
  while (done < written.size()) {
    if (done == first_piece && done > 0) kill_point("appended part of " + path.filename().string());
    const std::size_t piece = (done < first_piece ? first_piece : written.size()) - done;
    const ::ssize_t n = ::write(fd, written.data() + done, piece);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = n < 0 ? errno : EIO;
      throw error(field, "'" + path.string() + "' (write failed: " + std::strerror(e) + ")", accepted);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int e = errno;
    throw error(field, "'" + path.string() + "' (fsync failed: " + std::strerror(e) + ")", accepted);
  }
  if (size == 0) {  // the file may be new: make its name durable too (best effort, as write_file_atomically)
    const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      (void)::fsync(dfd);
      ::close(dfd);
    }
  }
  kill_point("appended " + path.filename().string());
}

std::uint64_t fnv1a64(std::string_view bytes) noexcept { return fnv1a64_from(fnv_offset_basis, bytes); }

std::string hex64(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

bool is_hex64(std::string_view text) noexcept {
  return text.size() == 16 && text.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

bool is_utc_iso8601(std::string_view text) noexcept {
  constexpr std::string_view pattern = "0000-00-00T00:00:00Z";  // 0: a digit; anything else: itself
  if (text.size() != pattern.size()) return false;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const bool ok = pattern[i] == '0' ? text[i] >= '0' && text[i] <= '9' : text[i] == pattern[i];
    if (!ok) return false;
  }
  return true;
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
