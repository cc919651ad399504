// The INCOMPLETE marker and the previous/ folder of an output folder (see report_invocation.hpp).
#include "safeamp/sim/report_invocation.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <system_error>

#include "posix_fd.hpp"
#include "safeamp/error.hpp"
#include "safeamp/sim/json_input.hpp"
#include "safeamp/sim/kill_point.hpp"
#include "safeamp/sim/parity_fallback.hpp"
#include "safeamp/sim/report_files.hpp"

namespace safeamp::sim {
namespace fs = std::filesystem;

namespace {

using json = nlohmann::json;

const fs::path marker_file(incomplete_marker_name);
const fs::path previous_folder(previous_folder_name);
const fs::path record_file(outputs_record_name);
const fs::path known_good_file(known_good_file_name);
const std::string staging_name = std::string(previous_folder_name) + ".new";
constexpr std::string_view record_format = "safeamp sim outputs";
constexpr int record_version = 1;
// Every INCOMPLETE this tool wrote (this version and the ones before) begins with it (marker_text).
constexpr std::string_view marker_opening = "safeamp sim started writing into ";
const char* const top_outputs[] = {"report.html", "summary.json", "data_parallel.json"};
const std::string accepted_folder =
    "an empty folder, or one safeamp sim wrote: move that file out of the folder, or pass another --out";

void move_file(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::create_directories(to.parent_path(), ec);
  if (!ec) fs::rename(from, to, ec);
  if (ec)
    throw error("output file '" + from.string() + "'", "not movable to '" + to.string() + "' (" + ec.message() + ")",
                "an output folder whose files safeamp sim may move");
  kill_point("moved " + from.filename().string());
}

void remove_file(const fs::path& p) {
  std::error_code ec;
  fs::remove(p, ec);
  if (ec)
    throw error("output file '" + p.string() + "'", "not removable (" + ec.message() + ")",
                "an output folder whose files safeamp sim may remove");
  kill_point("removed " + p.filename().string());
}

std::string marker_text(const fs::path& out, const invocation_start& start) {
  return std::string(marker_opening) + out.string() + " at " + utc_now_iso8601() + " (scenario '" + start.scenario +
         "') and has not finished: the outputs here are incomplete.\n"
         "- checkpoints/: where each run stopped; rerun with the same scenario and --out, adding --resume, to "
         "continue from them.\n"
         "- reference/reference.json: complete when present (it is written only once the reference has trained, "
         "after its telemetry).\n"
         "- telemetry/*.jsonl: only the runs this invocation finished, and the locked reference's.\n"
         "- report.html, data_parallel.json, decisions, known_good.json, summary.json: written in this order "
         "once every run has trained, summary.json last; those of the last finished invocation, if any, are in "
         "previous/. The next start removes this invocation's partial outputs, withdraws the decisions it "
         "appended and puts back the known_good.json it replaced.\n"
         "A finished invocation removes this file.\n";
}

// ---- the record of outputs ---------------------------------------------------------------------------------

struct recorded_file {
  std::string path;  // relative to the folder, generic form ("telemetry/a.jsonl")
  std::uintmax_t bytes = 0;
  std::uint64_t fnv1a64 = 0;
};

struct decisions_append {
  std::uintmax_t offset = 0;
  std::string text;
};

// The last replacement of known_good.json: what it held before (nullopt: no file) and what replaced it.
struct known_good_replacement {
  std::optional<std::string> before;
  std::uintmax_t bytes = 0;
  std::uint64_t fnv1a64 = 0;
};

struct outputs_record {
  std::vector<recorded_file> files;
  std::optional<decisions_append> decisions;
  std::optional<known_good_replacement> known_good;
  // The outputs at the top are a finished invocation's, on their way into previous/ (begin_invocation): a start
  // into a marked folder moves them on instead of removing them as an unfinished invocation's partial outputs.
  bool finished_at_top = false;

  [[nodiscard]] const recorded_file* find(const std::string& path) const {
    for (const recorded_file& f : files) {
      if (f.path == path) return &f;
    }
    return nullptr;
  }
  void put(recorded_file f) {
    std::erase_if(files, [&f](const recorded_file& g) { return g.path == f.path; });
    files.push_back(std::move(f));
  }
};

std::optional<outputs_record> read_record(const fs::path& dir) {
  const fs::path file = dir / record_file;
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(file, ec))) return std::nullopt;
  const std::string accepted = "the record safeamp sim keeps of the outputs it wrote (format '" +
                               std::string(record_format) + "', version " + std::to_string(record_version) +
                               "); remove it only together with the files it lists";
  if (!fs::is_regular_file(fs::symlink_status(file, ec))) {
    throw error("output record", "'" + file.string() + "' (not a regular file)", accepted);
  }
  const std::string text = read_input_file(file, "output record");
  const json j = json::parse(text, nullptr, false);
  const auto bad = [&](const std::string& why) {
    return error("output record", "'" + file.string() + "' (" + why + ")", accepted);
  };
  // A byte count or offset: a whole number from 0, as written. (nlohmann's get<std::uintmax_t> converts whatever
  // number it finds: -1 became 2^64 - 1, and a number beyond the type's range, such as 1e122, is undefined behaviour;
  // the outputs_record fuzz target found the latter on 2026-12-07.)
  const auto whole = [&](const json& v, const std::string& what) -> std::uintmax_t {
    if (!v.is_number_unsigned()) throw bad(what + " is " + summarize_json(v) + ", not a whole number from 0");
    return v.get<std::uintmax_t>();
  };
  if (!j.is_object() || !j.contains("format") || j["format"] != record_format) throw bad("not such a record");
  if (!j.contains("version") || j["version"] != record_version) throw bad("another version");
  outputs_record r;
  try {
    for (const json& f : j.at("files")) {
      recorded_file e;
      e.path = f.at("path").get<std::string>();
      if (!is_invocation_output_name(e.path)) throw bad("it lists '" + e.path + "', which is no output's name");
      e.bytes = whole(f.at("bytes"), "the size of '" + e.path + "'");
      const std::string hash = f.at("fnv1a64").get<std::string>();
      if (!is_hex64(hash)) {
        throw bad("the hash of '" + e.path + "' is not 16 hex digits");
      }
      e.fnv1a64 = std::stoull(hash, nullptr, 16);
      r.put(std::move(e));
    }
    if (j.contains("decisions")) {
      r.decisions = decisions_append{.offset = whole(j["decisions"].at("offset"), "the decisions' offset"),
                                     .text = j["decisions"].at("text").get<std::string>()};
    }
    if (j.contains("known_good")) {
      const json& k = j["known_good"];
      known_good_replacement e;
      if (!k.at("before").is_null()) {
        e.before = k.at("before").get<std::string>();
        // What the next start may put back must be a record safeamp sim reads (refused here, before any change).
        (void)known_good_from_json_text(*e.before, file.string() + " (the known-good record kept to put back)");
      }
      e.bytes = whole(k.at("bytes"), "the size of the known-good record's replacement");
      const std::string hash = k.at("fnv1a64").get<std::string>();
      if (!is_hex64(hash)) throw bad("the hash of the known-good record's replacement is not 16 hex digits");
      e.fnv1a64 = std::stoull(hash, nullptr, 16);
      r.known_good = std::move(e);
    }
    if (j.contains("finished_outputs_at_top")) {
      if (!j["finished_outputs_at_top"].is_boolean()) throw bad("finished_outputs_at_top is not true or false");
      r.finished_at_top = j["finished_outputs_at_top"].get<bool>();
    }
  } catch (const json::exception& e) {
    throw bad(e.what());
  }
  return r;
}

void write_record(const fs::path& dir, const outputs_record& r) {
  json files = json::array();
  for (const recorded_file& f : r.files) {
    files.push_back({{"path", f.path}, {"bytes", f.bytes}, {"fnv1a64", hex64(f.fnv1a64)}});
  }
  json j = {{"format", record_format}, {"version", record_version}, {"files", files}};
  if (r.decisions) j["decisions"] = {{"offset", r.decisions->offset}, {"text", r.decisions->text}};
  if (r.known_good) {
    j["known_good"] = {{"before", r.known_good->before ? json(*r.known_good->before) : json(nullptr)},
                       {"bytes", r.known_good->bytes},
                       {"fnv1a64", hex64(r.known_good->fnv1a64)}};
  }
  if (r.finished_at_top) j["finished_outputs_at_top"] = true;
  write_file_atomically(dir / record_file, j.dump(1) + "\n", "output record");
}

// ---- what a folder holds -----------------------------------------------------------------------------------

// The first `max_bytes` of a regular file (never through a link).
std::string read_head(const fs::path& file, std::size_t max_bytes) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return {};
  std::string out(max_bytes, '\0');
  std::size_t done = 0;
  while (done < max_bytes) {
    const ::ssize_t n = ::read(fd, out.data() + done, max_bytes - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  out.resize(done);
  return out;
}

bool has_members(const json& j, std::initializer_list<const char*> names) {
  if (!j.is_object()) return false;
  return std::all_of(names.begin(), names.end(), [&j](const char* n) { return j.contains(n); });
}

std::string kind_of(const fs::file_status& st) {
  switch (st.type()) {
    case fs::file_type::directory:
      return "a directory";
    case fs::file_type::symlink:
      return "a symbolic link";
    case fs::file_type::regular:
      return "a regular file";
    default:
      return "not a regular file";
  }
}

[[noreturn]] void refuse(const fs::path& out, const fs::path& file, const std::string& why) {
  throw error("--out", "'" + out.string() + "', which holds '" + file.string() + "' (" + why + ")", accepted_folder);
}

// A file at an output's name, checked: its record's size and hash when `record` lists it, else (when `may_guess`)
// its content. Returns its entry; refuses (naming it) anything safeamp sim cannot show it wrote.
recorded_file verified(const fs::path& out, const fs::path& dir, const fs::path& relative,
                       const std::optional<outputs_record>& record, bool may_guess) {
  const fs::path file = dir / relative;
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(file, ec);
  if (!fs::is_regular_file(st)) refuse(out, file, kind_of(st) + " where safeamp sim writes a file");
  const file_digest d = digest_input_file(file, "output file");
  recorded_file entry{.path = relative.generic_string(), .bytes = d.bytes, .fnv1a64 = d.fnv1a64};
  if (const recorded_file* r = record ? record->find(entry.path) : nullptr) {
    if (r->bytes != d.bytes || r->fnv1a64 != d.fnv1a64) {
      refuse(out, file,
             "changed since safeamp sim wrote it: " + std::to_string(d.bytes) + " bytes, FNV-1a " + hex64(d.fnv1a64) +
                 ", recorded " + std::to_string(r->bytes) + " bytes, " + hex64(r->fnv1a64) + " in " +
                 (dir / record_file).string());
    }
    return entry;
  }
  if (may_guess && looks_like_invocation_output(file, relative)) return entry;
  refuse(out, file,
         record ? "not written by safeamp sim: " + (dir / record_file).string() + " does not list it"
                : "not written by safeamp sim: it does not hold what safeamp sim writes there");
}

// The invocation outputs in `dir` (the output folder itself): report.html, summary.json, data_parallel.json and
// telemetry/*.jsonl, each verified. Other names (a user's notes.txt, telemetry/x.csv) are not outputs and stay.
std::vector<recorded_file> survey_top(const fs::path& out, const std::optional<outputs_record>& record,
                                      bool incomplete) {
  const bool may_guess = !record || incomplete;
  std::vector<recorded_file> found;
  std::error_code ec;
  for (const char* name : top_outputs) {
    if (fs::exists(fs::symlink_status(out / name, ec))) found.push_back(verified(out, out, name, record, may_guess));
  }
  std::vector<fs::path> telemetry;
  for (fs::directory_iterator it(out / "telemetry", ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == ".jsonl") telemetry.push_back(fs::path("telemetry") / it->path().filename());
  }
  std::sort(telemetry.begin(), telemetry.end());  // directory order is the file system's
  for (const fs::path& p : telemetry) found.push_back(verified(out, out, p, record, may_guess));
  return found;
}

// Everything in previous/ (or previous.new/): its record, report.html, summary.json, data_parallel.json and
// telemetry/*.jsonl, each verified against its own record (or, without one, by content); anything else there is
// refused, since the folder is replaced as a whole. Sets `exists`.
std::vector<recorded_file> survey_moved(const fs::path& out, const fs::path& dir, bool& exists) {
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(dir, ec);
  exists = fs::exists(st);
  if (!exists) return {};
  if (!fs::is_directory(st)) refuse(out, dir, kind_of(st) + " where safeamp sim keeps the previous outputs");
  const std::optional<outputs_record> record = read_record(dir);
  std::vector<recorded_file> found;
  const auto check = [&](const fs::path& relative) {
    if (!is_invocation_output_name(relative)) {
      refuse(out, dir / relative, "not an output safeamp sim keeps in " + dir.filename().string() + "/");
    }
    found.push_back(verified(out, dir, relative, record, !record.has_value()));
  };
  std::vector<fs::path> names;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    names.push_back(it->path().filename());
  }
  std::sort(names.begin(), names.end());
  for (const fs::path& name : names) {
    // The record, and a temporary of it a killed writer left (removed with the folder).
    if (name == record_file || is_temporary_of(name.string(), outputs_record_name)) continue;
    if (name == "telemetry" && fs::is_directory(fs::symlink_status(dir / name, ec))) {
      std::vector<fs::path> inner;
      for (fs::directory_iterator it(dir / name, ec), end; !ec && it != end; it.increment(ec)) {
        inner.push_back(name / it->path().filename());
      }
      std::sort(inner.begin(), inner.end());
      for (const fs::path& p : inner) check(p);
    } else {
      check(name);
    }
  }
  return found;
}

// Removes a previous/ (or previous.new/) that survey_moved verified: its files, its record, then its folders
// (which must then be empty: nothing else is removed).
void remove_moved(const fs::path& dir, const std::vector<recorded_file>& files) {
  for (const recorded_file& f : files) remove_file(dir / f.path);
  std::error_code ec;
  std::vector<fs::path> litter;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (is_temporary_of(it->path().filename().string(), outputs_record_name)) litter.push_back(it->path());
  }
  for (const fs::path& p : litter) remove_file(p);
  remove_file(dir / record_file);
  if (fs::exists(fs::symlink_status(dir / "telemetry", ec))) remove_file(dir / "telemetry");
  remove_file(dir);
}

// Removes the bytes an unfinished invocation appended to decisions.jsonl, when the file still ends with exactly
// (a prefix of) them; returns how many lines went.
std::size_t withdraw_decisions(const fs::path& out, const decisions_append& appended) {
  const fs::path file = out / decisions_file_name;
  const int fd = ::open(file.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return 0;  // nothing was appended (or the file is gone)
  const detail::fd_closer closer{fd};
  struct ::stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
  const auto size = static_cast<std::uintmax_t>(st.st_size);
  if (size <= appended.offset || size - appended.offset > appended.text.size()) return 0;  // none, or changed since
  std::string tail(static_cast<std::size_t>(size - appended.offset), '\0');
  std::size_t done = 0;
  while (done < tail.size()) {
    const ::ssize_t n =
        ::pread(fd, tail.data() + done, tail.size() - done, static_cast<::off_t>(appended.offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return 0;
    done += static_cast<std::size_t>(n);
  }
  if (appended.text.compare(0, tail.size(), tail) != 0) return 0;  // another's bytes: leave them
  if (::ftruncate(fd, static_cast<::off_t>(appended.offset)) != 0 || ::fsync(fd) != 0) {
    const int e = errno;
    throw error("decisions file",
                "'" + file.string() + "' (cannot withdraw the unfinished invocation's lines: " + std::strerror(e) + ")",
                "a decisions.jsonl safeamp sim may truncate to where the unfinished invocation began appending");
  }
  kill_point("withdrew " + file.filename().string());
  return static_cast<std::size_t>(std::count(tail.begin(), tail.end(), '\n'));
}

// Puts back the known_good.json an unfinished invocation replaced (removes it when there was none), when the file
// still holds exactly what that invocation wrote; returns whether it did.
bool restore_known_good(const fs::path& out, const known_good_replacement& replaced) {
  const fs::path file = out / known_good_file;
  std::error_code ec;
  if (!fs::is_regular_file(fs::symlink_status(file, ec))) return false;  // never written, or gone since
  const file_digest now = digest_input_file(file, "known-good record");
  if (now.bytes != replaced.bytes || now.fnv1a64 != replaced.fnv1a64) return false;  // not (or no longer) its text
  if (replaced.before) {
    write_file_atomically(file, *replaced.before, "known-good record");
  } else {
    remove_file(file);
  }
  return true;
}

}  // namespace

bool is_invocation_output_name(const fs::path& relative) {
  const std::string p = relative.generic_string();
  for (const char* name : top_outputs) {
    if (p == name) return true;
  }
  const std::string folder = "telemetry/";
  if (p.size() <= folder.size() || p.compare(0, folder.size(), folder) != 0) return false;
  const std::string name = p.substr(folder.size());
  // One file name ("<slug>.jsonl"; a slug of safeamp before 2026-12-07 may begin with a dot): no folder, so never ".."
  // or a path elsewhere.
  return name.find('/') == std::string::npos && name.size() > 6 && name.ends_with(".jsonl");
}

bool looks_like_invocation_output(const fs::path& file, const fs::path& relative) {
  const std::string p = relative.generic_string();
  if (p == "report.html") {
    const std::string head = read_head(file, 512);
    return head.starts_with("<!DOCTYPE html>") && head.find("<title>safeamp sim report: ") != std::string::npos;
  }
  if (p == "summary.json" || p == "data_parallel.json") {
    std::string text;
    try {
      text = read_input_file(file, "output file");
    } catch (const error&) {
      return false;
    }
    const json j = json::parse(text, nullptr, false);
    return p == "summary.json"
               ? has_members(j, {"scenario", "decision", "reference", "candidates", "preflight", "exit_code"})
               : has_members(j, {"ranks", "micro_batches", "reduction", "reference_reduction", "runs",
                                 "reduction_error_vs_ranks"});
  }
  if (!is_invocation_output_name(relative)) return false;
  // Telemetry: the first line, in its documented key order.
  constexpr std::size_t longest_first_line = std::size_t{1} << 20;
  std::string head = read_head(file, longest_first_line);
  const std::size_t newline = head.find('\n');
  if (newline == std::string::npos) return false;
  head.resize(newline);
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(head, nullptr, false);
  if (!j.is_object()) return false;
  const char* const keys[] = {"step", "loss", "scale", "found_inf", "skipped"};
  auto it = j.begin();
  for (const char* k : keys) {
    if (it == j.end() || it.key() != k) return false;
    ++it;
  }
  return true;
}

namespace {

// What begin_invocation's checks found in an output folder: every file it may move or remove, verified.
struct folder_survey {
  bool was_incomplete = false;  // marked INCOMPLETE
  std::optional<outputs_record> record;
  std::vector<recorded_file> top;  // the outputs at the top
  bool previous_exists = false;
  bool staging_exists = false;
  std::vector<recorded_file> in_previous;
  std::vector<recorded_file> in_staging;
};

// begin_invocation's checks, changing nothing: refuses (naming it) anything safeamp sim cannot show it wrote.
folder_survey survey_folder(const fs::path& out) {
  folder_survey s;
  std::error_code ec;
  const fs::file_status marker_status = fs::symlink_status(out / marker_file, ec);
  if (fs::exists(marker_status)) {
    if (!fs::is_regular_file(marker_status) || !read_head(out / marker_file, 256).starts_with(marker_opening)) {
      refuse(out, out / marker_file, "not the marker safeamp sim writes there");
    }
    s.was_incomplete = true;
  }
  s.record = read_record(out);
  s.top = survey_top(out, s.record, s.was_incomplete);
  s.in_previous = survey_moved(out, out / previous_folder, s.previous_exists);
  s.in_staging = survey_moved(out, out / staging_name, s.staging_exists);
  return s;
}

}  // namespace

void check_invocation(const fs::path& out) { (void)survey_folder(out); }

invocation_cleanup begin_invocation(const fs::path& out, const invocation_start& start) {
  invocation_cleanup done;
  std::error_code ec;
  // ---- checks: nothing changes until every file here is known to be safeamp sim's ----
  folder_survey survey = survey_folder(out);
  done.was_incomplete = survey.was_incomplete;
  std::optional<outputs_record>& record = survey.record;
  const std::vector<recorded_file>& top = survey.top;
  const bool previous_exists = survey.previous_exists;
  const bool staging_exists = survey.staging_exists;
  const fs::path previous = out / previous_folder;
  const fs::path staging = out / staging_name;
  const std::vector<recorded_file>& in_previous = survey.in_previous;
  const std::vector<recorded_file>& in_staging = survey.in_staging;
  // The outputs move into previous.new/, which then replaces previous/: a kill while they move leaves previous/
  // as it was and every output either at its place or in previous.new/, never lost. A kill after the marker and
  // before the first move leaves them all at the top, recorded as a finished invocation's (below).
  const bool interrupted_move = done.was_incomplete && (staging_exists || (record && record->finished_at_top));
  outputs_record kept;
  std::vector<recorded_file> outputs;
  for (const recorded_file& f : top) {
    const fs::path p(f.path);
    const bool keep = p.parent_path() == "telemetry" &&
                      std::find(start.kept_telemetry.begin(), start.kept_telemetry.end(), p.filename().string()) !=
                          start.kept_telemetry.end();
    (keep ? kept.files : outputs).push_back(f);
  }

  // ---- changes ----
  // Before the marker exists: a finished invocation's outputs at the top are recorded as such (with their sizes
  // and hashes, also where a folder of safeamp before 2026-12-06 had no record), so that a kill between the marker
  // and their move into previous/ does not leave them to be removed as an unfinished invocation's partial outputs
  // (until 2026-12-07 the next start did remove them). And its decisions and known-good record stay: the record
  // forgets them, so no later start can take them for an unfinished invocation's.
  if (!done.was_incomplete && (!outputs.empty() || (record && (record->decisions || record->known_good)))) {
    outputs_record finished;
    finished.files = top;
    finished.finished_at_top = !outputs.empty();
    write_record(out, finished);
  }
  // The marker first: from here on a kill leaves a marked folder.
  write_file_atomically(out / marker_file, marker_text(out, start), "the INCOMPLETE marker");
  if (done.was_incomplete && !interrupted_move) {
    // An invocation that trained and did not finish: what it left at the top are its partial outputs, and what
    // it appended to decisions.jsonl goes too.
    if (record && record->decisions) done.withdrawn_decisions = withdraw_decisions(out, *record->decisions);
    if (record && record->known_good) done.restored_known_good = restore_known_good(out, *record->known_good);
    for (const recorded_file& f : outputs) {
      remove_file(out / f.path);
      done.removed.emplace_back(f.path);
    }
    write_record(out, kept);
    return done;
  }
  if (!done.was_incomplete && staging_exists) remove_moved(staging, in_staging);  // no invocation's: a marker gone
  // A finished invocation's outputs, or the rest of them when an earlier start was killed while moving them
  // (nothing trains before the move is done, so the top still holds only the finished invocation's).
  if (!outputs.empty() || interrupted_move) {
    outputs_record moving;
    if (interrupted_move) moving.files = in_staging;
    for (const recorded_file& f : outputs) moving.put(f);
    std::vector<recorded_file> linked;  // kept at the top, and in previous/ too
    if (start.kept_also_in_previous) {
      for (const recorded_file& f : kept.files) {
        if (moving.find(f.path) == nullptr) {
          moving.put(f);
          linked.push_back(f);
        }
      }
    }
    fs::create_directories(staging, ec);
    write_record(staging, moving);  // before anything moves: previous.new/ holds only files it lists
    for (const recorded_file& f : outputs) move_file(out / f.path, staging / f.path);
    for (const recorded_file& f : linked) {
      fs::create_directories((staging / f.path).parent_path(), ec);
      fs::create_hard_link(out / f.path, staging / f.path, ec);
      if (ec) fs::copy_file(out / f.path, staging / f.path, fs::copy_options::overwrite_existing, ec);
      if (ec) {
        throw error("output file '" + (out / f.path).string() + "'",
                    "not linkable or copyable into '" + staging.string() + "' (" + ec.message() + ")",
                    "an output folder whose files safeamp sim may link or copy");
      }
      kill_point("linked " + fs::path(f.path).filename().string());
    }
    write_record(out, kept);
    if (previous_exists) remove_moved(previous, in_previous);
    fs::rename(staging, previous, ec);
    if (ec) {
      throw error("output folder '" + staging.string() + "'",
                  "not renamable to '" + previous.string() + "' (" + ec.message() + ")",
                  "an output folder whose files safeamp sim may move");
    }
    kill_point("renamed " + staging.filename().string());
  } else {
    write_record(out, kept);
  }
  for (const recorded_file& f : outputs) done.moved.emplace_back(f.path);
  return done;
}

void write_invocation_output(const fs::path& out, const fs::path& relative, std::string_view content) {
  outputs_record r = read_record(out).value_or(outputs_record{});
  const std::string path = relative.generic_string();
  // A file the record lists (the reference's telemetry a --relock replaces) leaves the record first: a kill
  // between the write and the record's update must not leave the record naming the old content (the next start
  // would refuse the file as changed); unlisted in a marked folder, it is recognised by its content.
  if (r.find(path) != nullptr) {
    std::erase_if(r.files, [&path](const recorded_file& f) { return f.path == path; });
    write_record(out, r);
  }
  write_file_atomically(out / relative, content);
  r.put({.path = path, .bytes = content.size(), .fnv1a64 = fnv1a64(content)});
  write_record(out, r);
}

void record_invocation_output(const fs::path& out, const fs::path& relative) {
  const file_digest d = digest_input_file(out / relative, "output file");
  outputs_record r = read_record(out).value_or(outputs_record{});
  r.put({.path = relative.generic_string(), .bytes = d.bytes, .fnv1a64 = d.fnv1a64});
  write_record(out, r);
}

void record_decisions_append(const fs::path& out, std::uintmax_t offset, std::string_view written) {
  outputs_record r = read_record(out).value_or(outputs_record{});
  r.decisions = decisions_append{.offset = offset, .text = std::string(written)};
  write_record(out, r);
}

void record_known_good_replacement(const fs::path& out, const std::optional<std::string>& before,
                                   std::string_view written) {
  outputs_record r = read_record(out).value_or(outputs_record{});
  r.known_good = known_good_replacement{.before = before, .bytes = written.size(), .fnv1a64 = fnv1a64(written)};
  write_record(out, r);
}

bool reference_telemetry_matches(const fs::path& telemetry, const std::vector<double>& loss_curve) {
  std::error_code ec;
  if (!fs::is_regular_file(fs::symlink_status(telemetry, ec))) return false;
  std::ifstream in(telemetry, std::ios::binary);
  std::string line;
  std::size_t step = 0;
  while (std::getline(in, line)) {
    if (step == loss_curve.size()) return false;  // more steps than the reference trained
    const json j = json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("loss")) return false;
    const json& loss = j["loss"];
    const double want = loss_curve[step];
    bool same = false;
    if (loss.is_number()) {
      same = std::isfinite(want) && loss.get<double>() == want;
    } else if (loss.is_string()) {
      const std::string t = loss.get<std::string>();
      same = (t == "nan" && std::isnan(want)) || (t == "inf" && want == std::numeric_limits<double>::infinity()) ||
             (t == "-inf" && want == -std::numeric_limits<double>::infinity());
    }
    if (!same) return false;
    ++step;
  }
  return !in.bad() && step == loss_curve.size();
}

namespace {

// True when `fd` is still the file at `path`: not removed, not replaced by another.
bool still_at_path(int fd, const fs::path& path) {
  struct ::stat held {};
  struct ::stat named {};
  if (::fstat(fd, &held) != 0 || ::stat(path.c_str(), &named) != 0) return false;
  return held.st_nlink > 0 && held.st_dev == named.st_dev && held.st_ino == named.st_ino;
}

}  // namespace

output_folder_lock::output_folder_lock(const fs::path& out) : file_(out / lock_file_name) {
  // Each try opens the path again: the file locked was removed (remove_if_alone) or replaced after it was opened.
  // A removal takes a refused invocation, so a few tries are plenty; the bound only keeps a loop finite.
  constexpr int opens_tried = 100;
  for (int attempt = 0; attempt < opens_tried; ++attempt) {
    // O_EXCL first, to know whether this object created the file; an existing one (a link to one included) is
    // opened as it always was.
    int fd = ::open(file_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    created_file_ = fd >= 0;
    if (fd < 0 && errno == EEXIST) fd = ::open(file_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 && errno == ENOENT) {
      // The folder was there when the caller checked or created it, and is gone: removed meanwhile, as an invocation
      // refused in a folder it created takes it back (remove_if_alone, then its new folders) while this one waits
      // for the lock (until 2026-12-07: "cannot open its lock file ..., accepted: a writable directory").
      throw error("--out",
                  "'" + out.string() +
                      "' (removed while this invocation was taking its lock, as another safeamp sim refused in a "
                      "folder it had created takes it back; nothing here was changed)",
                  "an output folder that stays while it is locked: run again (the folder is then created anew), or "
                  "pass another --out");
    }
    if (fd < 0) {
      const int e = errno;
      throw error("--out",
                  "'" + out.string() + "' (cannot open its lock file " + file_.string() + ": " + std::strerror(e) + ")",
                  "a writable directory");
    }
    // The test hooks' point between opening and locking (tests/sim/report/lock_race.sh holds an invocation here
    // while another removes the file). A failure there closes the file and leaves it: only the lock's holder may
    // remove it (remove_if_alone).
    try {
      kill_point("opened " + std::string(lock_file_name));
    } catch (...) {
      ::close(fd);
      throw;
    }
    struct flock whole {};
    whole.l_type = F_WRLCK;
    whole.l_whence = SEEK_SET;  // l_start 0 and l_len 0: the whole file
    int rc = 0;
    while ((rc = ::fcntl(fd, F_SETLK, &whole)) < 0 && errno == EINTR) {
    }
    if (rc == 0) {
      if (still_at_path(fd, file_)) {
        fd_ = fd;
        return;
      }
      ::close(fd);  // the lock of a file no longer in the folder: another try
      continue;
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
                  "'" + out.string() + "' (another safeamp sim is writing into it: " + who + " holds " +
                      file_.string() + "; nothing here was changed)",
                  "an output folder no other invocation is writing into: wait for that one to finish, or pass "
                  "another --out");
    }
    ::close(fd);
    std::fprintf(stderr,
                 "safeamp sim: warning: %s cannot be locked (%s): a second invocation writing into the same folder "
                 "would not be refused\n",
                 file_.c_str(), std::strerror(lock_errno));
    return;
  }
  throw error("--out",
              "'" + out.string() + "' (its lock file " + file_.string() + " was removed or replaced each of " +
                  std::to_string(opens_tried) + " times it was locked)",
              "an output folder whose lock file stays while it is locked");
}

output_folder_lock::~output_folder_lock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

bool output_folder_lock::remove_if_alone() noexcept {
  if (fd_ < 0 || !created_file_) return false;
  // Only a file this object created goes, from a folder that holds nothing else: no output, checkpoint or
  // reference of another invocation depends on it, and the folder is left as this invocation found it. It is
  // removed while the lock is held: another invocation that opened it meanwhile is refused, or locks it only after
  // this one released it, and then finds it gone (still_at_path) and opens the path anew. (A safeamp sim without
  // that check, before 2026-12-06, started into the same folder in the same instant could still lock the removed
  // file: the folder is one this invocation found empty, so no earlier job of it runs there.)
  std::error_code ec;
  std::size_t entries = 0;  // the lock file alone
  for (fs::directory_iterator it(file_.parent_path(), ec), end; !ec && it != end; it.increment(ec)) ++entries;
  if (ec || entries != 1 || ::unlink(file_.c_str()) != 0) return false;
  ::close(fd_);  // releases the lock
  fd_ = -1;
  return true;
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
