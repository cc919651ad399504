// The INCOMPLETE marker and the previous/ folder of an output folder (see report_invocation.hpp).
#include "safeamp/sim/report_invocation.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <system_error>

#include "safeamp/error.hpp"
#include "safeamp/sim/report_files.hpp"

namespace safeamp::sim {
namespace fs = std::filesystem;

namespace {

const fs::path marker_file(incomplete_marker_name);
const fs::path previous_folder(previous_folder_name);

void move_file(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::create_directories(to.parent_path(), ec);
  if (!ec) fs::rename(from, to, ec);
  if (ec)
    throw error("output file '" + from.string() + "'", "not movable to '" + to.string() + "' (" + ec.message() + ")",
                "an output folder whose files safeamp sim may move");
}

void remove_file(const fs::path& p) {
  std::error_code ec;
  fs::remove(p, ec);
  if (ec)
    throw error("output file '" + p.string() + "'", "not removable (" + ec.message() + ")",
                "an output folder whose files safeamp sim may remove");
}

void remove_tree(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
  if (ec) {
    throw error("output folder '" + p.string() + "'", "not removable (" + ec.message() + ")",
                "a folder safeamp sim may replace");
  }
}

std::string marker_text(const fs::path& out, const invocation_start& start) {
  return "safeamp sim started writing into " + out.string() + " at " + utc_now_iso8601() + " (scenario '" +
         start.scenario +
         "') and has not finished: the outputs here are incomplete.\n"
         "- checkpoints/: where each run stopped; rerun with the same scenario and --out, adding --resume, to "
         "continue from them.\n"
         "- reference/reference.json: complete when present (it is written only once the reference has trained).\n"
         "- telemetry/*.jsonl: only the runs this invocation finished, and the locked reference's.\n"
         "- report.html, summary.json, data_parallel.json: not written yet; those of the last finished invocation, "
         "if any, are in previous/.\n"
         "A finished invocation removes this file.\n";
}

}  // namespace

std::vector<fs::path> invocation_outputs(const fs::path& out) {
  std::vector<fs::path> found;
  std::error_code ec;
  for (const char* name : {"report.html", "summary.json", "data_parallel.json"}) {
    if (fs::is_regular_file(out / name, ec)) found.emplace_back(name);
  }
  std::vector<fs::path> telemetry;
  for (fs::directory_iterator it(out / "telemetry", ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == ".jsonl" && it->is_regular_file(ec)) {
      telemetry.push_back(fs::path("telemetry") / it->path().filename());
    }
  }
  std::sort(telemetry.begin(), telemetry.end());  // directory order is the file system's
  found.insert(found.end(), telemetry.begin(), telemetry.end());
  return found;
}

invocation_cleanup begin_invocation(const fs::path& out, const invocation_start& start) {
  invocation_cleanup done;
  done.was_incomplete = invocation_incomplete(out);
  // The outputs move into previous.new/, which then replaces previous/: a kill while they move leaves previous/
  // as it was and every output either at its place or in previous.new/, never lost.
  const fs::path staging = out / (std::string(previous_folder_name) + ".new");
  std::error_code ec;
  const bool interrupted_move = done.was_incomplete && fs::is_directory(staging, ec);
  if (!done.was_incomplete) remove_tree(staging);  // a staging folder without the marker is no invocation's
  std::vector<fs::path> outputs = invocation_outputs(out);
  std::erase_if(outputs, [&start](const fs::path& p) {
    return p.parent_path() == "telemetry" && std::find(start.kept_telemetry.begin(), start.kept_telemetry.end(),
                                                       p.filename().string()) != start.kept_telemetry.end();
  });
  // The marker first: from here on a kill leaves a marked folder.
  write_file_atomically(out / marker_file, marker_text(out, start), "the INCOMPLETE marker");
  if (done.was_incomplete && !interrupted_move) {
    // An invocation that trained and did not finish: what it left at the top are its partial outputs.
    for (const fs::path& p : outputs) remove_file(out / p);
    done.removed = std::move(outputs);
    return done;
  }
  // A finished invocation's outputs, or the rest of them when an earlier start was killed while moving them
  // (nothing trains before the move is done, so the top still holds only the finished invocation's).
  if (!outputs.empty() || interrupted_move) {
    for (const fs::path& p : outputs) move_file(out / p, staging / p);
    remove_tree(out / previous_folder);
    fs::rename(staging, out / previous_folder, ec);
    if (ec) {
      throw error("output folder '" + staging.string() + "'",
                  "not renamable to '" + (out / previous_folder).string() + "' (" + ec.message() + ")",
                  "an output folder whose files safeamp sim may move");
    }
  }
  done.moved = std::move(outputs);
  return done;
}

output_folder_lock::output_folder_lock(const fs::path& out) {
  const fs::path file = out / lock_file_name;
  const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw error(
        "--out",
        "'" + out.string() + "' (cannot open its lock file " + file.string() + ": " + std::strerror(errno) + ")",
        "a writable directory");
  }
  struct flock whole {};
  whole.l_type = F_WRLCK;
  whole.l_whence = SEEK_SET;  // l_start 0 and l_len 0: the whole file
  int rc = 0;
  while ((rc = ::fcntl(fd, F_SETLK, &whole)) < 0 && errno == EINTR) {
  }
  if (rc == 0) {
    fd_ = fd;
    return;
  }
  const int lock_errno = errno;
  if (lock_errno == EACCES || lock_errno == EAGAIN) {
    struct flock holder {};
    holder.l_type = F_WRLCK;
    holder.l_whence = SEEK_SET;
    const bool named = ::fcntl(fd, F_GETLK, &holder) == 0 && holder.l_type != F_UNLCK && holder.l_pid > 0;
    ::close(fd);
    const std::string who = named ? "process " + std::to_string(holder.l_pid) : "another process";
    throw error("--out",
                "'" + out.string() + "' (another safeamp sim is writing into it: " + who + " holds " + file.string() +
                    "; nothing here was read or changed)",
                "an output folder no other invocation is writing into: wait for that one to finish, or pass another "
                "--out");
  }
  ::close(fd);
  std::fprintf(stderr,
               "safeamp sim: warning: %s cannot be locked (%s): a second invocation writing into the same folder "
               "would not be refused\n",
               file.c_str(), std::strerror(lock_errno));
}

output_folder_lock::~output_folder_lock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

void finish_invocation(const fs::path& out) { remove_file(out / marker_file); }

bool invocation_incomplete(const fs::path& out) {
  std::error_code ec;
  return fs::is_regular_file(out / marker_file, ec);
}

std::string incomplete_note(const fs::path& out) {
  return "safeamp sim: stopped before finishing: " + out.string() + " is marked " +
         std::string(incomplete_marker_name) +
         " (its report and summary are not written; the last finished "
         "invocation's, if any, are in " +
         (out / previous_folder).string() +
         "); the checkpoints and a locked reference are "
         "kept: rerun with --resume to continue";
}

}  // namespace safeamp::sim
