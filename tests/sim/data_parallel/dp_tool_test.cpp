// The data-parallel scenario through the real tool, as a user runs it (no Python or jq: the outputs are read
// with nlohmann-json). Tagged [mpirun] (SAFEAMP_MPIEXEC set: real Open MPI processes, oversubscribed on CI's
// two cores) and [lock] (one process):
//  - mpirun -np 1, 2, 4 write the same weights hashes in summary.json and reference.json;
//  - the injected overflow of one rank (micro-batch 3: the last rank) is a skipped step of rank 0's telemetry,
//    whose own gradients were finite (data_parallel.json's overflow_ranks), and the job passed every step's
//    state check, so every rank skipped it;
//  - a rank that dies fails the job with no summary; --resume then continues on another rank count to the
//    uninterrupted run's hashes;
//  - a rank whose loss scale is corrupted fails the job with an error naming that rank;
//  - the locked reference holds the data-parallel settings (a bf16-wire run reuses it, other micro-batches are
//    refused by name), and report.html holds data_parallel.json's error table.
// SAFEAMP_TOOL, SAFEAMP_SCENARIO and SAFEAMP_MPIEXEC come from CMake.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

json read_json(const fs::path& p) {
  INFO("reading " << p);
  REQUIRE(fs::is_regular_file(p));
  return json::parse(read_text(p));
}

// A folder of this process's, removed at exit.
fs::path scratch() {
  static const struct folder {
    fs::path path = fs::temp_directory_path() / ("safeamp_dp_tool_" + std::to_string(::getpid()));
    folder() {
      fs::remove_all(path);
      fs::create_directories(path);
    }
    folder(const folder&) = delete;
    folder& operator=(const folder&) = delete;
    ~folder() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  } dir;
  return dir.path;
}

// The scenario with `changes` merged into its data_parallel block (and every candidate's verdict accepted when
// `any_verdict`), written to `name` in the scratch folder.
fs::path scenario_with(const std::string& name, const json& changes, bool any_verdict = false) {
  json s = json::parse(read_text(env("SAFEAMP_SCENARIO")));
  for (auto it = changes.begin(); it != changes.end(); ++it) s["data_parallel"][it.key()] = it.value();
  if (any_verdict) {
    for (json& c : s["candidates"]) c["expect"] = "any";
  }
  const fs::path p = scratch() / name;
  std::ofstream(p) << s.dump(2);
  return p;
}

std::string quoted(const std::string& s) { return "'" + s + "'"; }

struct invocation {
  int code = -1;  // the exit status (128 + signal when killed)
  std::string log;
  std::string out;  // stdout alone, when asked for (else it is in log)
};

// `safeamp sim --scenario S --out D [extra]`, under `mpirun --oversubscribe -np N` when ranks > 0; with
// `separate_stdout`, stdout goes to its own file (`out` of the result) and only stderr to the log. `environment`
// ("NAME=value ...") is set for each rank's safeamp.
invocation sim(int ranks, const fs::path& scenario, const fs::path& out, const std::string& extra = "",
               bool separate_stdout = false, const std::string& environment = "") {
  std::string cmd;
  if (ranks > 0) cmd = quoted(env("SAFEAMP_MPIEXEC")) + " --oversubscribe -np " + std::to_string(ranks) + " ";
  if (!environment.empty()) cmd += "env " + environment + " ";
  cmd += quoted(env("SAFEAMP_TOOL")) + " sim --scenario " + quoted(scenario.string()) + " --out " +
         quoted(out.string()) + " " + extra;
  const fs::path log = out.string() + ".log";
  const fs::path stdout_file = out.string() + ".stdout";
  const std::string redirect = separate_stdout ? " > " + quoted(stdout_file.string()) + " 2> " + quoted(log.string())
                                               : " > " + quoted(log.string()) + " 2>&1";
  const int status = std::system((cmd + redirect).c_str());
  invocation r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  r.log = read_text(log);
  if (separate_stdout) r.out = read_text(stdout_file);
  return r;
}

// What must be the same for every rank count: the reference's and each candidate's weights hash.
std::map<std::string, std::string> weights_hashes(const fs::path& out) {
  std::map<std::string, std::string> h;
  h["reference"] = read_json(out / "reference" / "reference.json").at("weights_hash").get<std::string>();
  const json summary = read_json(out / "summary.json");  // held: a range-for over a temporary's member dangles
  for (const json& c : summary.at("candidates")) {
    h[c.at("name").get<std::string>()] = c.at("weights_hash").get<std::string>();
  }
  return h;
}

// The step records of one telemetry file, by step.
std::map<std::int64_t, json> step_records(const fs::path& file) {
  std::map<std::int64_t, json> steps;
  std::istringstream lines(read_text(file));
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    const json j = json::parse(line);
    steps[j.at("step").get<std::int64_t>()] = j;
  }
  return steps;
}

const std::string overflow_candidate = "fp16-mixed injected overflow";
const std::vector<std::int64_t> fault_steps = {5, 17};  // the scenario's gradient_inf steps

// The folder of an uninterrupted run with N ranks (trained once per N and kept for the later cases).
fs::path trained(int ranks) {
  static std::map<int, fs::path> done;
  if (const auto it = done.find(ranks); it != done.end()) return it->second;
  const fs::path out = scratch() / ("np" + std::to_string(ranks));
  const invocation r = sim(ranks, env("SAFEAMP_SCENARIO"), out);
  INFO(r.log);
  REQUIRE(r.code == 0);
  done[ranks] = out;
  return out;
}

}  // namespace

TEST_CASE("mpirun -np 1, 2, 4: the same weights hashes in summary.json", "[mpirun]") {
  const std::map<std::string, std::string> one = weights_hashes(trained(1));
  CHECK(one.size() == 3);  // the reference and two candidates
  for (const int n : {2, 4}) {
    INFO(n << " ranks");
    CHECK(weights_hashes(trained(n)) == one);
    const json dp = read_json(trained(n) / "data_parallel.json");
    CHECK(dp.at("ranks") == n);
    for (const json& run : dp.at("runs")) {  // data_parallel.json lists the same hashes
      const std::string label = run.at("label").get<std::string>();
      const std::string name = one.count(label) != 0 ? label : "reference";
      CHECK(run.at("weights_hash") == one.at(name));
    }
  }
}

TEST_CASE("mpirun: the preflight holds every rank on this machine to its memory; rank 0 prints it", "[mpirun]") {
  // The -np 2 job's log: one preflight line (rank 0's), with both ranks' memory together.
  const fs::path np2 = trained(2);
  const std::string log = read_text(np2.string() + ".log");
  std::size_t lines = 0;
  for (std::size_t at = log.find("safeamp sim: preflight:"); at != std::string::npos;
       at = log.find("safeamp sim: preflight:", at + 1)) {
    ++lines;
  }
  INFO(log);
  CHECK(lines == 1);
  CHECK_THAT(log, Catch::Contains("per rank, ") && Catch::Contains(" for the 2 ranks on this machine"));
  // A budget that holds one rank's estimate but not two: refused before anything is written, naming both.
  const json pre = read_json(np2 / "summary.json").at("preflight");
  CHECK(pre.at("ranks_on_this_machine") == 2);
  CHECK(read_json(trained(1) / "summary.json").at("preflight").at("ranks_on_this_machine") == 1);
  CHECK_THAT(read_text(np2 / "report.html"), Catch::Contains(" MiB for the 2 ranks on this machine"));
  const double each = pre.at("estimated_peak_bytes").get<double>();
  REQUIRE(each > 0.0);
  const fs::path refused_out = scratch() / "np2_one_rank_budget";
  const invocation refused =
      sim(2, env("SAFEAMP_SCENARIO"), refused_out, "--memory-budget " + std::to_string(std::llround(1.5 * each)));
  INFO(refused.log);
  CHECK(refused.code == 2);
  CHECK_THAT(refused.log, Catch::Contains("scenario memory") && Catch::Contains("for the 2 ranks on this machine") &&
                              Catch::Contains("run fewer ranks on this machine"));
  CHECK_FALSE(fs::exists(refused_out));
  // Twice that holds both: the memory check passes (the time budget, checked next, stops it before training).
  const invocation fits = sim(2, env("SAFEAMP_SCENARIO"), scratch() / "np2_two_rank_budget",
                              "--memory-budget " + std::to_string(std::llround(3.0 * each)) + " --time-budget 1e-9s");
  INFO(fits.log);
  CHECK(fits.code == 2);
  CHECK_THAT(fits.log, Catch::Contains("scenario time"));
  CHECK_THAT(fits.log, !Catch::Contains("scenario memory"));
}

TEST_CASE("mpirun: an all-gather in pieces lands every rank's bytes where one call puts them", "[mpirun]") {
  // MPI's counts are int: past 2^31 - 1 bytes per rank the exchange goes in pieces of at most 2^30. A test hook
  // lowers the piece to 1000 bytes, so this scenario's gradients (a few kilobytes a rank) take that path.
  const fs::path out = scratch() / "np2_pieces";
  const invocation r = sim(2, env("SAFEAMP_SCENARIO"), out, "", false, "SAFEAMP_TEST_MPI_CHUNK_BYTES=1000");
  INFO(r.log);
  REQUIRE(r.code == 0);
  CHECK(weights_hashes(out) == weights_hashes(trained(1)));
  // The hook's value is checked like any input.
  const invocation bad =
      sim(2, env("SAFEAMP_SCENARIO"), scratch() / "np2_bad_piece", "", false, "SAFEAMP_TEST_MPI_CHUNK_BYTES=0x10");
  CHECK(bad.code != 0);
  CHECK_THAT(bad.log, Catch::Contains("SAFEAMP_TEST_MPI_CHUNK_BYTES") && Catch::Contains("1 .. 2^30"));
}

TEST_CASE("mpirun: an overflow on one rank is a skipped step on every rank", "[mpirun]") {
  for (const int n : {2, 4}) {
    INFO(n << " ranks");
    const fs::path out = trained(n);
    const json dp = read_json(out / "data_parallel.json");
    std::map<std::int64_t, std::vector<int>> own;  // step -> the ranks whose own gradients were not finite
    for (const json& run : dp.at("runs")) {
      if (run.at("label") != overflow_candidate) continue;
      for (const json& o : run.at("overflow_ranks"))
        own[o.at("step").get<std::int64_t>()] = o.at("ranks").get<std::vector<int>>();
    }
    std::string telemetry;
    const json summary = read_json(out / "summary.json");
    for (const json& c : summary.at("candidates")) {
      if (c.at("name") == overflow_candidate) telemetry = c.at("telemetry").get<std::string>();
    }
    REQUIRE_FALSE(telemetry.empty());
    const std::map<std::int64_t, json> steps = step_records(out / telemetry);
    for (const std::int64_t s : fault_steps) {
      INFO("step " << s);
      // The fault lands in micro-batch 3 of 4, computed by the last rank alone ...
      CHECK(own[s] == std::vector<int>{n - 1});
      // ... and rank 0, whose own gradients were finite, skipped the step and backed off its scale.
      REQUIRE(steps.count(s) == 1);
      REQUIRE(steps.count(s + 1) == 1);
      CHECK(steps.at(s).at("skipped") == true);
      CHECK(steps.at(s + 1).at("scale").get<double>() == 0.5 * steps.at(s).at("scale").get<double>());
    }
    // Every step passed the state check on every rank (the job succeeded), so every rank skipped with rank 0.
    CHECK(summary.at("exit_code") == 0);
  }
}

TEST_CASE("mpirun: a rank whose loss scale is corrupted fails the job, named", "[mpirun]") {
  // The fp16 candidate (the only run with a dynamic scaler) has rank 2 of 4 one ulp off from step 10 on.
  const fs::path out = scratch() / "corrupt";
  const invocation r = sim(4, scenario_with("corrupt.json", {{"corrupt_rank", 2}, {"corrupt_step", 10}}), out);
  INFO(r.log);
  CHECK(r.code != 0);
  CHECK_THAT(r.log, Catch::Contains("after step 10: rank(s) 2 differ from the other 3 of 4 ranks"));
  CHECK_FALSE(fs::exists(out / "summary.json"));
}

TEST_CASE("mpirun: a rank that dies fails the job; --resume continues on another rank count", "[mpirun]") {
  // Rank 1 of 2 ends abruptly at step 20 of the first run (the reference); its checkpoint after step 18 was
  // saved before step 19's collectives, which rank 1 joined.
  const fs::path out = scratch() / "dies";
  const invocation died = sim(2, scenario_with("dies.json", {{"exit_rank", 1}, {"exit_step", 20}}), out);
  INFO(died.log);
  CHECK(died.code != 0);
  CHECK_THAT(died.log, Catch::Contains("rank 1 ends abruptly at step 20"));
  CHECK_FALSE(fs::exists(out / "summary.json"));
  CHECK_FALSE(fs::exists(out / "data_parallel.json"));
  // Canonical fp32: the bits do not depend on the rank count, so 4 ranks continue what 2 began.
  const invocation resumed = sim(4, env("SAFEAMP_SCENARIO"), out, "--resume");
  INFO(resumed.log);
  REQUIRE(resumed.code == 0);
  CHECK_THAT(resumed.log, Catch::Contains("--resume: reference") && Catch::Contains("continues from"));
  CHECK(weights_hashes(out) == weights_hashes(trained(1)));
}

TEST_CASE("the lock records the data-parallel settings; the report has the error table", "[lock]") {
  const fs::path out = scratch() / "lock";
  const invocation first = sim(0, scenario_with("fp32.json", json::object(), true), out);
  INFO(first.log);
  REQUIRE(first.code == 0);
  const std::string id = read_json(out / "reference" / "reference.json").at("reference_id").get<std::string>();
  {  // report.html's "Data parallel" section holds every number of data_parallel.json's table (%.2e)
    const std::string html = read_text(out / "report.html");
    const std::size_t at = html.find("<h2 id=\"data_parallel\">Data parallel</h2>");
    REQUIRE(at != std::string::npos);
    const json rows = read_json(out / "data_parallel.json").at("reduction_error_vs_ranks").at("rows");
    CHECK(rows.size() == 132);  // 12 reductions x 11 rank counts
    std::size_t missing = 0;
    for (const json& row : rows) {
      char cell[64];
      std::snprintf(cell, sizeof cell, "<td>%.2e</td>", row.at("relative_error").get<double>());
      if (html.find(cell, at) == std::string::npos) ++missing;
    }
    CHECK(missing == 0);
  }
  // bf16 on the wire: the candidates' numerics; the reference is reduced in fp32, so the lock is reused.
  const invocation wire = sim(0, scenario_with("wire.json", {{"reduction", "bf16-wire"}}, true), out);
  INFO(wire.log);
  REQUIRE(wire.code == 0);
  CHECK(read_json(out / "reference" / "reference.json").at("reference_id") == id);
  const json runs = read_json(out / "data_parallel.json").at("runs");
  // The reused reference is listed first (fp32, marked reused, its locked weights hash), then the candidates.
  REQUIRE(runs.size() == 3);
  CHECK(runs[0].at("reused") == true);
  CHECK(runs[0].at("reduction") == "fp32");
  CHECK(runs[0].at("weights_hash") == read_json(out / "reference" / "reference.json").at("weights_hash"));
  for (std::size_t i = 1; i < runs.size(); ++i) {
    CHECK(runs[i].at("reduction") == "bf16-wire");
    CHECK_FALSE(runs[i].contains("reused"));
  }
  {
    // E4M3 on the wire saturates: the inf of the faulted micro-batch arrives as 448. The step is still skipped
    // (the sender's own check), data_parallel.json says which rank sent it; with --json, stdout is the summary
    // alone (the error table goes to stderr).
    const invocation fp8 = sim(0, scenario_with("e4m3.json", {{"reduction", "e4m3-wire"}}, true), out, "--json", true);
    INFO(fp8.log);
    REQUIRE(fp8.code == 0);
    const json printed = json::parse(fp8.out);  // throws (fails) on anything but one JSON value
    CHECK(printed == read_json(out / "summary.json"));
    CHECK_THAT(fp8.log, Catch::Contains("reduction error of the mean gradient vs ranks"));
    std::string telemetry;
    for (const json& c : printed.at("candidates")) {
      if (c.at("name") == overflow_candidate) telemetry = c.at("telemetry").get<std::string>();
    }
    REQUIRE_FALSE(telemetry.empty());
    const std::map<std::int64_t, json> steps = step_records(out / telemetry);
    for (const std::int64_t s : fault_steps) {
      INFO("step " << s);
      REQUIRE(steps.count(s) == 1);
      CHECK(steps.at(s).at("skipped") == true);
    }
    for (const json& run : read_json(out / "data_parallel.json").at("runs")) {
      if (run.at("label") != overflow_candidate) continue;
      CHECK(run.at("reduction") == "e4m3-wire");
      std::vector<std::int64_t> own;
      for (const json& o : run.at("overflow_ranks")) {
        own.push_back(o.at("step").get<std::int64_t>());
        CHECK(o.at("ranks") == json::array({0}));  // one process: rank 0 computes every micro-batch
      }
      CHECK(own == fault_steps);
      CHECK(run.at("skipped_steps").get<std::int64_t>() >= 2);
    }
  }
  // Other micro-batches change the reference's sums: refused by name, exit code 2, the lock kept.
  const invocation k2 = sim(0, scenario_with("k2.json", {{"micro_batches", 2}, {"fault_micro_batch", 1}}, true), out);
  INFO(k2.log);
  CHECK(k2.code == 2);
  CHECK_THAT(k2.log, Catch::Contains("data_parallel.micro_batches: reference '4', now '2'"));
  CHECK(read_json(out / "reference" / "reference.json").at("reference_id") == id);
}
