// The input/output foundation behind `safeamp plan --input` and every reader of outside files: the checked
// reader (regular files only, size cap), the JSON input parser (depth, duplicate keys, number range, bounded
// messages), the bounded value summary, and the sim's atomic writer with its stale-temporary cleanup.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "plan_inputs.hpp"
#include "safeamp/error.hpp"
#include "safeamp/sim/json_input.hpp"
#include "safeamp/sim/report_files.hpp"

namespace fs = std::filesystem;
using safeamp::error;
using namespace safeamp::sim;

namespace {

std::string message_of(const auto& call) {
  try {
    call();
  } catch (const error& e) {
    return e.what();
  }
  FAIL("no safeamp::error thrown");
  return {};
}

/// A folder of its own under the test's working directory, emptied first.
fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::path("plan_io_test") / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

/// The pid of a child that has exited and been reaped: no process has it (until the kernel reuses it).
long long dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

}  // namespace

TEST_CASE("summarize_json is bounded for deep, wide and long values") {
  // 100,000 levels: dump() would recurse 100,000 frames deep; the summary looks two levels in.
  const std::string deep_text = std::string(100000, '[') + std::string(100000, ']');
  const nlohmann::json deep = nlohmann::json::parse(deep_text);
  const std::string s = summarize_json(deep);
  CHECK(s == "an array of 1 item [[[...]]]");
  nlohmann::json wide = nlohmann::json::array();
  for (int i = 0; i < 100000; ++i) wide.push_back(i);
  CHECK(summarize_json(wide) == "an array of 100000 items [0, 1, 2, 3, ...]");
  const std::string long_text(1000000, 'x');
  CHECK(summarize_json(long_text).size() < 120);
  CHECK(summarize_json(nlohmann::json{{"a", 1}, {"b", {1, 2}}}) == "an object of 2 members {\"a\": 1, \"b\": [1, 2]}");
  CHECK(summarize_json(std::string("\xff\xfe")).size() < 20);  // invalid UTF-8: replaced, not thrown
}

TEST_CASE("parse_json_input refuses deep nesting, duplicate keys and out-of-range numbers with the location") {
  const auto msg = [](const std::string& text) {
    return message_of([&] { (void)parse_json_input(text, "--scenario", "s.json"); });
  };
  CHECK_THAT(msg(std::string(100000, '[') + std::string(100000, ']')),
             Catch::StartsWith("--scenario is 's.json' (nested deeper than 64 levels at /0/0/0"));
  CHECK_THAT(msg(R"({"a": {"b": 1, "b": 2}})"), Catch::Contains("(duplicate key \"b\" at /a/b)"));
  CHECK_THAT(msg(R"({"a": [1, 2, 1e400]})"), Catch::Contains("(a number outside double's range at /a/2)"));
  CHECK_THAT(msg(R"({"a/b~": -1e999})"), Catch::Contains("at /a~1b~0)"));
  CHECK_THAT(msg(R"({"a": [1, 2)"), Catch::Contains("not valid JSON"));
  CHECK_THAT(msg(""), Catch::Contains("not valid JSON"));
  // A huge malformed token is quoted only in part.
  CHECK(msg("{\"a\": \"" + std::string(1 << 20, 'x')).size() < 800);
  CHECK(msg("{\"" + std::string(1 << 20, 'k') + "\": 1, \"" + std::string(1 << 20, 'k') + "\": 2}").size() < 800);
  // Limits are parameters.
  CHECK_THAT(message_of([] { (void)parse_json_input("[[1]]", "f", "x", {.max_bytes = 100, .max_depth = 1}); }),
             Catch::Contains("nested deeper than 1 levels at /0"));
  CHECK_THAT(message_of([] { (void)parse_json_input("[1, 2, 3]", "f", "x", {.max_bytes = 4, .max_depth = 8}); }),
             Catch::Contains("9 bytes, over the limit"));
  // Good input parses unchanged, numbers and all.
  const nlohmann::json j = parse_json_input(R"({"a": [1, 2.5, "x", null, true], "b": {"c": 1e300}})", "f", "x");
  CHECK(j["a"][1] == 2.5);
  CHECK(j["b"]["c"] == 1e300);
}

TEST_CASE("plan inputs: every problem is a safeamp::error (exit 2) naming the input") {
  CHECK(safeamp::tool::parse_plan_json(R"({"reserve": 0.2, "capacity": "24GB"})", "in.json").at("reserve") == "0.2");
  CHECK_THAT(
      message_of([] { (void)safeamp::tool::parse_plan_json(R"({"reserve": [[["x"]]]})", "in.json"); }),
      Catch::Equals("input key reserve is an array of 1 item [[[...]]]; accepted: a string, a number or a boolean"));
  CHECK_THAT(message_of([] { (void)safeamp::tool::parse_plan_json(R"({"reserve": 1e400})", "in.json"); }),
             Catch::StartsWith("input is 'in.json' (a number outside double's range at /reserve)"));
  CHECK_THAT(message_of([] { (void)safeamp::tool::parse_plan_json(R"([1, 2])", "in.json"); }),
             Catch::StartsWith("input is 'in.json' (an array of 2 items [1, 2])"));
  CHECK_THAT(message_of([] { (void)safeamp::tool::parse_plan_json("{\"" + std::string(5000, 'z') + "\": 1}", "i"); }),
             Catch::StartsWith("input key is 'zzzz") && Catch::Contains("...'"));
}

TEST_CASE("--verified-by: a policy passes when any of its candidates passed, fails when only failures exist") {
  using safeamp::tool::parse_parity_summary;
  const nlohmann::json j = nlohmann::json::parse(R"({"candidates": [
      {"policy": "bf16-mixed", "verdict": "PASS"},
      {"policy": "fp16-mixed", "verdict": "FAIL"}, {"policy": "fp16-mixed", "verdict": "PASS"},
      {"policy": "fp16-pure-master", "verdict": "FAIL"}, {"policy": "fp16-pure-master", "verdict": "FAIL"},
      {"policy": "params=bf16,compute=bf16,output=bf16", "verdict": "INCONCLUSIVE"}]})");
  const safeamp::tool::parity_results r = parse_parity_summary(j, "s.json");
  REQUIRE(r.passed.size() == 2);  // bf16-mixed, fp16-mixed (its FAIL is outweighed by its PASS)
  CHECK(r.passed[0] == safeamp::presets::bf16_mixed);
  CHECK(r.passed[1] == safeamp::presets::fp16_mixed);
  REQUIRE(r.failed.size() == 2);  // fp16-pure-master, listed once per failing candidate
  CHECK(r.failed[0] == safeamp::presets::fp16_pure_master);
  CHECK(std::find(r.failed.begin(), r.failed.end(), safeamp::presets::fp16_mixed) == r.failed.end());
  CHECK_THAT(message_of([] { (void)parse_parity_summary(nlohmann::json::parse(R"({"candidates": 3})"), "s.json"); }),
             Catch::StartsWith("verified-by is 's.json' (an object of 1 member"));
  CHECK_THAT(message_of([] {
               (void)parse_parity_summary(nlohmann::json::parse(R"({"candidates": [{"policy": "fp9", "verdict": "PASS"}]})"),
                                          "s.json");
             }),
             Catch::StartsWith("verified-by is 's.json' candidate 0 (") && Catch::Contains("fp9"));
  CHECK_THAT(message_of([] {
               (void)parse_parity_summary(nlohmann::json::parse(R"({"candidates": [{"policy": "fp32"}]})"), "s.json");
             }),
             Catch::Contains("candidate 0") && Catch::Contains("a summary.json written by safeamp sim"));
}

TEST_CASE("--verified-by: candidates run with injected faults neither verify nor exclude their policy") {
  using safeamp::tool::parse_parity_summary;
  // As safeamp sim writes them: "faults" is the faults' description, empty without any. The bf16-mixed run with
  // injected NaN gradients failed as the scenario expected ("expect": "any"); the simulator calls the faults, not the
  // policy, the cause. Until 2026-12 that FAIL excluded bf16-mixed from the plan.
  const nlohmann::json j = nlohmann::json::parse(R"({"candidates": [
      {"name": "bf16-mixed with injected NaN", "policy": "bf16-mixed", "verdict": "FAIL",
       "faults": "gradient-nan in head.weight at steps 5,6,7"},
      {"name": "fp16-mixed dynamic", "policy": "fp16-mixed", "verdict": "PASS", "faults": ""},
      {"name": "fp16 faulted pass", "policy": "fp16-pure-master", "verdict": "PASS", "faults": ["gradient_inf"]},
      {"policy": "tf32", "verdict": "FAIL", "faults": null}]})");
  const safeamp::tool::parity_results r = parse_parity_summary(j, "s.json");
  REQUIRE(r.passed.size() == 1);  // fp16-mixed; the faulted PASS of fp16-pure-master is no evidence either
  CHECK(r.passed[0] == safeamp::presets::fp16_mixed);
  REQUIRE(r.failed.size() == 1);  // tf32 (null: no faults); not bf16-mixed
  CHECK(r.failed[0] == safeamp::presets::tf32);
  REQUIRE(r.faulted.size() == 2);
  CHECK(r.faulted[0] == "bf16-mixed with injected NaN");
  CHECK(r.faulted[1] == "fp16 faulted pass");
  CHECK_THAT(message_of([] {
               (void)parse_parity_summary(
                   nlohmann::json::parse(R"({"candidates": [{"policy": "fp32", "verdict": "PASS", "faults": 3}]})"),
                   "s.json");
             }),
             Catch::StartsWith("verified-by is 's.json' candidate 0 (faults ") &&
                 Catch::Contains("a description (empty: none) or a list"));
}

TEST_CASE("--policy takes anything the policy grammar takes") {
  CHECK(safeamp::tool::parse_policy_arg("policy", "bf16-mixed") == safeamp::presets::bf16_mixed);
  const safeamp::precision_policy bare = safeamp::tool::parse_policy_arg("policy", "bf16");
  CHECK(bare.param == safeamp::bf16);
  CHECK(bare.compute == safeamp::bf16);
  CHECK_THAT(message_of([] { (void)safeamp::tool::parse_policy_arg("policy", "bf17"); }),
             Catch::StartsWith("policy is 'bf17' (") && Catch::Contains("fp16-pure-master"));
}

TEST_CASE("read_input_file accepts regular files only, up to a cap") {
  const fs::path dir = fresh_dir("read");
  const fs::path file = dir / "ten.txt";
  write_file_atomically(file, "0123456789");
  CHECK(read_input_file(file, "--scenario", 10) == "0123456789");
  CHECK(read_whole_file(file) == "0123456789");
  CHECK_THAT(message_of([&] { (void)read_input_file(file, "--scenario", 9); }),
             Catch::Contains("(10 bytes, over the limit)") && Catch::Contains("at most 9 bytes"));
  CHECK_THAT(message_of([&] { (void)read_input_file(dir, "--corpus"); }),
             Catch::StartsWith("--corpus is '" + dir.string() + "' (a directory)"));
  CHECK_THAT(message_of([&] { (void)read_whole_file("/dev/zero"); }),
             Catch::Equals("input file is '/dev/zero' (a character device); accepted: a readable regular file of at "
                           "most 67108864 bytes (not a directory, FIFO or device)"));
  const fs::path fifo = dir / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THAT(message_of([&] { (void)read_whole_file(fifo); }), Catch::Contains("(a FIFO)"));
  CHECK_THAT(message_of([&] { (void)read_whole_file(dir / "absent"); }), Catch::Contains("(cannot be opened"));
  fs::remove_all(dir);
}

TEST_CASE("the sim's atomic writer removes stale temporaries of dead processes, and only those") {
  const fs::path dir = fresh_dir("stale");
  const fs::path target = dir / "summary.json";
  const std::string dead = std::to_string(dead_pid());
  const std::string alive = std::to_string(::getppid());  // the test runner's parent is running
  const std::vector<std::string> removed = {"summary.json.tmp-" + dead, "summary.json.tmp-" + dead + "-7"};
  const std::vector<std::string> kept = {"summary.json.tmp-" + alive,
                                         "summary.json.tmp-" + alive + "-2",
                                         "summary.json.tmp-abc",
                                         "summary.json.tmp-" + dead + "-x",
                                         "summary.json.tmp-" + dead + ".bak",
                                         "other.json.tmp-" + dead,
                                         "summary.json.tmp-",
                                         "notes.txt"};
  for (const auto& name : removed) write_file_atomically(dir / name, "old");
  for (const auto& name : kept) write_file_atomically(dir / name, "keep");
  write_file_atomically(target, "{}");
  for (const auto& name : removed) CHECK_FALSE(fs::exists(dir / name));
  for (const auto& name : kept) CHECK(fs::exists(dir / name));
  CHECK(read_whole_file(target) == "{}");
  fs::remove_all(dir);
}

TEST_CASE("the sim's atomic writer names the caller's field and leaves no temporary on failure") {
  const fs::path dir = fresh_dir("fail");
  fs::create_directories(dir / "busy" / "child");
  CHECK_THAT(message_of([&] { write_file_atomically(dir / "busy", "x", "--out"); }),
             Catch::StartsWith("--out is '") && Catch::Contains("rename failed"));
  CHECK_THAT(message_of([&] { write_file_atomically(dir / "missing" / "x.json", "x"); }),
             Catch::StartsWith("output file is '"));
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++entries;
  CHECK(entries == 1);  // only busy/
  fs::remove_all(dir);
}
