// `safeamp sim` under SIGKILL (issue 12): the real tool, started as a child process and killed with
// SIGKILL, never through a hook inside it.
//  - Kill and resume: a run killed once its checkpoints exist (inside the reference, inside a candidate)
//    continues with --resume to the result of the uninterrupted run: the same summary (verdicts, checks,
//    held-out metrics, weights hashes), the same telemetry step by step, the same reference numbers.
//  - Kills during writes: two dozen invocations killed while they train, lock the reference, checkpoint,
//    and write telemetry and the report (half at random times, half while a temporary file exists, i.e.
//    in the middle of a write); after each, every file that existed before is intact (unchanged, replaced by
//    a complete file, or an output of the finished invocation moved unchanged into previous/), every new file
//    is complete, and a folder without the INCOMPLETE marker has its report and summary. Each invocation is
//    then finished by an uninterrupted --resume, which must give the uninterrupted result.
//  - Two invocations into one folder: while one is writing into it (held stopped half-way), a second is refused
//    with exit code 2 naming the first's process, and changes no file; the first then finishes to the
//    uninterrupted result; the lock ends with the process that held it, killed or finished.
// The tool and the scenarios come from the environment (SAFEAMP_TOOL, SAFEAMP_TEST_DATA; CMake sets them).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// This process's scratch folder, removed when the process ends (the folders' contents are in the failure messages,
// so nothing is kept for debugging): every test case's invocations go under it.
const fs::path& scratch_root() {
  struct root {
    fs::path path = fs::temp_directory_path() / ("safeamp_kill_" + std::to_string(::getpid()));
    root() = default;
    root(const root&) = delete;
    root& operator=(const root&) = delete;
    ~root() {
      std::error_code ignored;
      fs::remove_all(path, ignored);
    }
  };
  static const root r;
  return r.path;
}

fs::path scratch(const std::string& name) {
  const fs::path dir = scratch_root() / name;
  fs::remove_all(dir);
  fs::create_directories(dir.parent_path());
  return dir;
}

// The tool as a child process, its output to a log file.
class child {
 public:
  child(const std::vector<std::string>& args, const fs::path& log) {
    std::vector<std::string> argv_text = {env("SAFEAMP_TOOL"), "sim"};
    argv_text.insert(argv_text.end(), args.begin(), args.end());
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (std::string& a : argv_text) argv.push_back(a.data());
      argv.push_back(nullptr);
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
  }
  child(const child&) = delete;
  child& operator=(const child&) = delete;
  ~child() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      (void)wait();
    }
  }
  void kill() { ::kill(pid_, SIGKILL); }
  // Stops the child (SIGSTOP) and returns once it is stopped; cont() lets it go on.
  void stop() {
    ::kill(pid_, SIGSTOP);
    int status = 0;
    while (::waitpid(pid_, &status, WUNTRACED) < 0 && errno == EINTR) {
    }
    REQUIRE(WIFSTOPPED(status));
  }
  void cont() { ::kill(pid_, SIGCONT); }
  [[nodiscard]] pid_t pid() const noexcept { return pid_; }
  // The wait status.
  int wait() {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
    return status;
  }
  // True once the child has exited (reaps it); the status in `status`.
  bool exited(int& status) {
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) reaped_ = true;
    return r == pid_;
  }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
};

// Runs to completion; returns the exit code (-signal when killed).
int run_tool(const std::vector<std::string>& args, const fs::path& log) {
  child c(args, log);
  const int status = c.wait();
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

// Fields that differ between two identical runs: wall times and what derives from them, lock times and the
// reference id (a hash of the lock time), whether the lock was reused, the preflight (a measured rate), the
// per-phase step times (a resumed run times only the steps it trained).
// clang-format off
const std::vector<std::string> volatile_keys = {
    "wall_seconds", "total_wall_seconds", "samples_per_second", "peak_rss_bytes", "cost_per_sample_dollars",
    "step_seconds", "locked_utc", "id", "reused", "reference_id", "decided_utc", "recorded_utc", "compiler",
    "compiler_flags", "hardware", "threads", "preflight", "profile_seconds_per_step"};
// clang-format on

json strip(const json& j) {
  if (j.is_object()) {
    json out = json::object();
    for (const auto& [k, v] : j.items()) {
      if (std::find(volatile_keys.begin(), volatile_keys.end(), k) == volatile_keys.end()) out[k] = strip(v);
    }
    return out;
  }
  if (j.is_array()) {
    json out = json::array();
    for (const json& v : j) out.push_back(strip(v));
    return out;
  }
  return j;
}

std::vector<json> read_jsonl(const fs::path& p) {
  std::vector<json> lines;
  std::istringstream in(read_file(p));
  for (std::string line; std::getline(in, line);) lines.push_back(strip(json::parse(line)));
  return lines;
}

// The deterministic content of a finished output folder: summary, telemetry per run, the reference's numbers.
struct outcome {
  json summary;
  std::map<std::string, std::vector<json>> telemetry;
  json reference;
};

outcome read_outcome(const fs::path& out) {
  outcome o;
  o.summary = strip(json::parse(read_file(out / "summary.json")));
  for (const auto& e : fs::directory_iterator(out / "telemetry")) {
    if (e.path().extension() == ".jsonl") o.telemetry[e.path().filename().string()] = read_jsonl(e.path());
  }
  o.reference = strip(json::parse(read_file(out / "reference" / "reference.json")));
  return o;
}

void check_same_outcome(const outcome& expected, const outcome& got) {
  INFO("summary differences (JSON patch from expected): " << json::diff(expected.summary, got.summary).dump());
  CHECK(got.summary == expected.summary);
  REQUIRE(got.telemetry.size() == expected.telemetry.size());
  for (const auto& [name, records] : expected.telemetry) {
    INFO("telemetry " << name);
    REQUIRE(got.telemetry.count(name) == 1);
    const auto& other = got.telemetry.at(name);
    REQUIRE(other.size() == records.size());
    for (std::size_t i = 0; i < records.size(); ++i) {
      INFO("step " << i);
      CHECK(other[i] == records[i]);
    }
  }
  CHECK(got.reference == expected.reference);
}

// No checkpoint, no temporary file and no INCOMPLETE marker is left in a finished folder.
void check_no_leftovers(const fs::path& out) {
  for (const auto& e : fs::recursive_directory_iterator(out)) {
    const std::string name = e.path().filename().string();
    INFO(e.path());
    CHECK(name.find(".tmp-") == std::string::npos);
    CHECK(name.find(".ckpt") == std::string::npos);
    CHECK(name != "INCOMPLETE");
    CHECK(name != "previous.new");
  }
}

bool wait_for_file(const fs::path& p, child& c, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int status = 0;
  while (std::chrono::steady_clock::now() < until) {
    if (fs::exists(p)) return true;
    if (c.exited(status)) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

// A file the tool writes is complete: JSON parses, every JSON Lines line parses and the file ends with a
// newline, the report ends with its closing tag. Checkpoints are checked by resuming from them.
void check_complete(const fs::path& p) {
  INFO("file " << p);
  const std::string text = read_file(p);
  const std::string ext = p.extension().string();
  if (ext == ".json") {
    CHECK(json::accept(text));
  } else if (ext == ".jsonl") {
    REQUIRE(!text.empty());
    CHECK(text.back() == '\n');
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) CHECK(json::accept(line));
  } else if (ext == ".html") {
    CHECK(text.size() > 1000);
    CHECK(text.rfind("</html>") != std::string::npos);
    CHECK(text.find_last_not_of(" \n") == text.rfind("</html>") + 6);
  }
}

std::map<fs::path, std::string> snapshot(const fs::path& out) {
  std::map<fs::path, std::string> files;
  if (!fs::exists(out)) return files;
  for (const auto& e : fs::recursive_directory_iterator(out)) {
    if (e.is_regular_file() && e.path().filename().string().find(".tmp-") == std::string::npos) {
      files[e.path()] = read_file(e.path());
    }
  }
  return files;
}

}  // namespace

TEST_CASE("a run killed with SIGKILL continues with --resume to the uninterrupted run's result") {
  REQUIRE_FALSE(env("SAFEAMP_TOOL").empty());  // set by CMake
  const std::string scenario = env("SAFEAMP_TEST_DATA") + "/resume_mlp.json";
  const fs::path whole = scratch("whole");
  REQUIRE(run_tool({"--scenario", scenario, "--out", whole.string()}, whole.string() + ".log") == 0);
  const outcome expected = read_outcome(whole);
  check_no_leftovers(whole);

  // Killed inside the reference run, then inside the last candidate (whose loss scale has already backed off
  // from an injected overflow, so a resume that lost the scaler's state would diverge); each time the
  // checkpoint it waits for exists, so the kill comes after at least one save of that run.
  for (const std::string waited : {"checkpoints/reference-fp32.ckpt", "checkpoints/fp16-overflows.ckpt"}) {
    DYNAMIC_SECTION("killed after " << waited) {
      const fs::path out = scratch("killed");
      {
        child c({"--scenario", scenario, "--out", out.string()}, out.string() + ".log");
        REQUIRE(wait_for_file(out / waited, c, 120));
        c.kill();
        const int status = c.wait();
        REQUIRE(WIFSIGNALED(status));
      }
      CHECK_FALSE(fs::exists(out / "summary.json"));
      CHECK(fs::exists(out / "INCOMPLETE"));  // killed while training: the folder says it is unfinished
      const fs::path log = out.string() + ".resume.log";
      REQUIRE(run_tool({"--scenario", scenario, "--out", out.string(), "--resume"}, log) == 0);
      CHECK(read_file(log).find("continues from") != std::string::npos);
      check_same_outcome(expected, read_outcome(out));
      check_no_leftovers(out);
    }
  }
}

TEST_CASE("two dozen SIGKILLs during a run's writes leave every file intact or complete, and resume still agrees") {
  REQUIRE_FALSE(env("SAFEAMP_TOOL").empty());  // set by CMake
  const std::string scenario = env("SAFEAMP_TEST_DATA") + "/resume_mlp_short.json";
  const fs::path whole = scratch("whole_short");
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(run_tool({"--scenario", scenario, "--out", whole.string()}, whole.string() + ".log") == 0);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // The expected result is that of a second, uninterrupted invocation in the same folder: like the killed
  // ones below, it relocks and sees the known-good record of the first.
  REQUIRE(run_tool({"--scenario", scenario, "--out", whole.string(), "--relock"}, whole.string() + ".log") == 0);
  const outcome expected = read_outcome(whole);

  // Each invocation relocks, so reference.json (and its kept copy), the checkpoints, telemetry, summary,
  // report, known_good and decisions are all rewritten, and is killed at a random time. Then the folder is
  // checked, and an uninterrupted --resume must finish it with the uninterrupted result.
  const fs::path out = scratch("kills");
  fs::copy(whole, out, fs::copy_options::recursive);
  std::mt19937 rng(12345);
  std::uniform_real_distribution<double> when(0.0, 1.1 * seconds);
  int killed = 0;
  constexpr int kills = 24;
  for (int i = 0; i < kills; ++i) {
    const auto before = snapshot(out);
    // Even kills: at a random time. Odd kills: while a file is being written, at the k-th temporary file
    // seen (between its creation and its rename), k random, so that different writes are hit.
    const bool during_write = i % 2 == 1;
    const double delay = when(rng);
    const int kth_temporary = std::uniform_int_distribution<int>(1, 12)(rng);
    INFO("kill " << i
                 << (during_write ? " at temporary file " + std::to_string(kth_temporary)
                                  : " after " + std::to_string(delay) + " s"));
    int status = 0;
    {
      child c({"--scenario", scenario, "--out", out.string(), "--relock"}, out.string() + ".log");
      bool done = false;
      if (during_write) {
        std::set<std::string> seen;
        while (!(done = c.exited(status)) && static_cast<int>(seen.size()) < kth_temporary) {
          std::error_code ec;
          for (fs::recursive_directory_iterator it(out, ec), end; !ec && it != end; it.increment(ec)) {
            const std::string name = it->path().filename().string();
            if (name.find(".tmp-") != std::string::npos) seen.insert(name);
          }
        }
      } else {
        std::this_thread::sleep_for(std::chrono::duration<double>(delay));
        done = c.exited(status);
      }
      if (!done) {
        c.kill();
        status = c.wait();
      }
    }
    if (WIFSIGNALED(status)) {
      ++killed;
    } else {
      INFO(read_file(out.string() + ".log"));
      REQUIRE(WEXITSTATUS(status) == 0);  // finished before the kill: it must have succeeded
    }
    for (const auto& [path, text] : snapshot(out)) {
      const auto old = before.find(path);
      if (old != before.end() && old->second == text) continue;  // untouched
      check_complete(path);
    }
    // Nothing that existed disappeared: each file is where it was, or is one of the finished invocation's
    // outputs moved unchanged into previous.new/ (while they move) or previous/ (once previous.new/ replaced it).
    const auto moved_aside = [&](const fs::path& top, const char* folder) {
      const fs::path aside = out / folder / fs::relative(top, out);
      return before.count(top) == 1 && fs::exists(aside) && read_file(aside) == before.at(top);
    };
    for (const auto& [path, text] : before) {
      INFO("file " << path);
      if (fs::exists(path)) continue;
      if (*fs::relative(path, out).begin() == "previous") {  // replaced, or being replaced
        CHECK((fs::exists(out / "previous.new") || moved_aside(out / "report.html", "previous")));
      } else {
        CHECK((moved_aside(path, "previous.new") || moved_aside(path, "previous")));
      }
      (void)text;
    }
    // Without the marker the folder is a whole invocation's: its report and summary are there.
    if (!fs::exists(out / "INCOMPLETE")) {
      CHECK(fs::exists(out / "report.html"));
      CHECK(fs::exists(out / "summary.json"));
    }
    const fs::path log = out.string() + ".resume.log";
    const int rc = run_tool({"--scenario", scenario, "--out", out.string(), "--resume"}, log);
    INFO(read_file(log));
    REQUIRE(rc == 0);
    check_same_outcome(expected, read_outcome(out));
    check_no_leftovers(out);
  }
  WARN(killed << " of " << kills << " invocations were killed before they finished");
  CHECK(killed >= kills / 2);  // most invocations were really interrupted
  check_no_leftovers(out);
}

TEST_CASE("a second invocation into a folder another is writing into is refused and changes nothing") {
  REQUIRE_FALSE(env("SAFEAMP_TOOL").empty());  // set by CMake
  const std::string scenario = env("SAFEAMP_TEST_DATA") + "/resume_mlp.json";
  const fs::path whole = scratch("whole_locked");
  REQUIRE(run_tool({"--scenario", scenario, "--out", whole.string()}, whole.string() + ".log") == 0);
  const outcome expected = read_outcome(whole);

  const fs::path out = scratch("locked");
  const std::vector<std::string> args = {"--scenario", scenario, "--out", out.string()};
  {
    child first(args, out.string() + ".first.log");
    REQUIRE(wait_for_file(out / "INCOMPLETE", first, 120));  // past its checks, training
    first.stop();                                            // and held there while the second tries
    const auto before = snapshot(out);
    const fs::path log = out.string() + ".second.log";
    for (const std::vector<std::string>& extra :
         {std::vector<std::string>{}, std::vector<std::string>{"--resume"}, std::vector<std::string>{"--relock"}}) {
      std::vector<std::string> second = args;
      second.insert(second.end(), extra.begin(), extra.end());
      INFO("second invocation with " << (extra.empty() ? "the same arguments" : extra.front()));
      CHECK(run_tool(second, log) == 2);
      const std::string text = read_file(log);
      INFO(text);
      CHECK(text.find("another safeamp sim is writing into it: process " + std::to_string(first.pid()) + " holds " +
                      (out / ".safeamp-lock").string()) != std::string::npos);
      CHECK(snapshot(out) == before);  // not a file added, changed or removed
    }
    first.cont();
    const int status = first.wait();
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 0);
  }
  check_same_outcome(expected, read_outcome(out));
  check_no_leftovers(out);
  // The lock ends with the process: a finished one's folder takes the next invocation, and so does a killed one's.
  REQUIRE(run_tool(args, out.string() + ".next.log") == 0);
  {
    child killed(args, out.string() + ".killed.log");
    REQUIRE(wait_for_file(out / "INCOMPLETE", killed, 120));
    killed.kill();
    REQUIRE(WIFSIGNALED(killed.wait()));
  }
  std::vector<std::string> resume = args;
  resume.push_back("--resume");
  REQUIRE(run_tool(resume, out.string() + ".resume.log") == 0);
  check_no_leftovers(out);
}
