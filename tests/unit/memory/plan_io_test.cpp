// The input/output foundation behind `safeamp plan --input` and every reader of outside files: the checked
// reader (regular files only, size cap), the JSON input parser (depth, duplicate keys, number range, bounded
// messages), the bounded value summary, and the sim's atomic writer with its stale-temporary cleanup.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "plan_inputs.hpp"
#include "plan_parity.hpp"
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

/// A summary as safeamp sim writes it: every candidate's model in a decision row of its own, here one of
/// `parameters` for all.
nlohmann::json with_model(nlohmann::json summary, std::uint64_t parameters) {
  nlohmann::json rows = nlohmann::json::array();
  for (const nlohmann::json& c : summary["candidates"]) {
    nlohmann::json row = {{"parameters", parameters}};
    if (c.contains("name")) row["name"] = c["name"];
    rows.push_back(row);
  }
  summary["decision"] = {{"candidates", rows}};
  return summary;
}

/// GPT-2 small (Radford et al. 2019): s = 1024, h = 768, a = 12, L = 12, v = 50257, tied embeddings, f = 4h.
safeamp::transformer_shape gpt2_small() {
  safeamp::transformer_shape t;
  t.sequence = 1024;
  t.hidden = 768;
  t.heads = 12;
  t.layers = 12;
  t.vocabulary = 50257;
  return t;
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
  const safeamp::tool::parity_results r =
      parse_parity_summary(with_model(j, 1000), "s.json", safeamp::tool::given_parameter_range(1000));
  REQUIRE(r.passed.size() == 2);  // bf16-mixed, fp16-mixed (its FAIL is outweighed by its PASS)
  CHECK(r.passed[0] == safeamp::presets::bf16_mixed);
  CHECK(r.passed[1] == safeamp::presets::fp16_mixed);
  REQUIRE(r.failed.size() == 2);  // fp16-pure-master, listed once per failing candidate
  CHECK(r.failed[0] == safeamp::presets::fp16_pure_master);
  CHECK(std::find(r.failed.begin(), r.failed.end(), safeamp::presets::fp16_mixed) == r.failed.end());
  CHECK_THAT(
      message_of([] { (void)parse_parity_summary(nlohmann::json::parse(R"({"candidates": 3})"), "s.json", {}); }),
      Catch::StartsWith("verified-by is 's.json' (an object of 1 member"));
  CHECK_THAT(message_of([] {
               (void)parse_parity_summary(
                   nlohmann::json::parse(R"({"candidates": [{"policy": "fp9", "verdict": "PASS"}]})"), "s.json", {});
             }),
             Catch::StartsWith("verified-by is 's.json' candidate 0 (") && Catch::Contains("fp9"));
  CHECK_THAT(message_of([] {
               (void)parse_parity_summary(nlohmann::json::parse(R"({"candidates": [{"policy": "fp32"}]})"), "s.json",
                                          {});
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
  const safeamp::tool::parity_results r =
      parse_parity_summary(with_model(j, 1000), "s.json", safeamp::tool::given_parameter_range(1000));
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
                   "s.json", {});
             }),
             Catch::StartsWith("verified-by is 's.json' candidate 0 (faults ") &&
                 Catch::Contains("a description (empty: none) or a list"));
}

TEST_CASE(
    "the planned model's parameter count: a shape's, up to its biases, norms and positions, with 1% either side") {
  using namespace safeamp::tool;
  // GPT-2 small by hand: 12 x 12 x 768^2 + 50257 x 768 = 84,934,656 + 38,597,376 = 123,532,032; left out per layer
  // 768 (Q) + 2 x 768 (K, V) + 768 (out) + 3072 + 768 (MLP) + 4 x 768 (two norms) = 9,984, then 2 x 768 (final norm)
  // and 1024 x 768 = 786,432 positions: 119,808 + 1,536 + 786,432 = 907,776 (Hugging Face's gpt2: 124,439,808).
  const safeamp::transformer_shape gpt2 = gpt2_small();
  CHECK(neglected_parameters(gpt2) == 907'776);
  const parameter_range r = shape_parameter_range(gpt2);
  CHECK(r.low == 123'532'032);
  CHECK(r.high == 124'439'808);
  // 1%: 123,532,032 - 1,235,320 and 124,439,808 + 1,244,398.
  CHECK(lowest_agreeing(r) == 122'296'712);
  CHECK(highest_agreeing(r) == 125'684'206);
  CHECK(agrees(r, 122'296'712));
  CHECK_FALSE(agrees(r, 122'296'711));
  CHECK(agrees(r, 125'684'206));
  CHECK_FALSE(agrees(r, 125'684'207));
  CHECK_FALSE(agrees(r, 676));
  // Llama 2 7B (SwiGLU f = 11008, untied, s = 4096): per layer 4096 + 2 x 4096 + 4096 + 2 x 11008 + 4096 + 4 x 4096 =
  // 58,880 left out; x 32 + 2 x 4096 + 4096 x 4096 + 32000 (the output layer's bias) = 18,701,568.
  safeamp::transformer_shape llama = gpt2;
  llama.sequence = 4096;
  llama.hidden = 4096;
  llama.heads = 32;
  llama.layers = 32;
  llama.vocabulary = 32000;
  llama.ffn_hidden = 11008;
  llama.gated_mlp = true;
  llama.tied_embeddings = false;
  CHECK(neglected_parameters(llama) == 18'701'568);
  CHECK(shape_parameter_range(llama).low == 6'738'149'376);
  CHECK_FALSE(agrees(shape_parameter_range(llama), 7'000'000'000));  // "7B" names it, does not count it
  const parameter_range given = given_parameter_range(1'000'000'000);
  CHECK(agreeing_text(given) == "990000000 .. 1010000000");
  CHECK(given.basis == "--params 1000000000");
}

TEST_CASE("--verified-by: a parity result counts only for the model it was measured on") {
  using namespace safeamp::tool;
  const parameter_range planned = shape_parameter_range(gpt2_small());
  // Three models: GPT-2 small's own count (counted), mlp-quick's 676 parameters (another model), and none recorded
  // (0: the candidate recorded no step).
  const nlohmann::json j = nlohmann::json::parse(R"({"scenario": "mixed", "decision": {"candidates": [
      {"name": "a", "parameters": 124439808}, {"name": "b", "parameters": 676}, {"name": "c", "parameters": 0},
      {"name": "d", "parameters": 676}]},
      "candidates": [{"name": "a", "policy": "bf16-mixed", "verdict": "PASS"},
                     {"name": "b", "policy": "fp16-pure-master", "verdict": "FAIL"},
                     {"name": "c", "policy": "fp16-mixed", "verdict": "PASS"},
                     {"name": "d", "policy": "tf32", "verdict": "PASS"}]})");
  const parity_results r = parse_parity_summary(j, "s.json", planned);
  REQUIRE(r.passed.size() == 1);
  CHECK(r.passed[0] == safeamp::presets::bf16_mixed);
  CHECK(r.failed.empty());  // fp16-pure-master failed on another model: not excluded here
  CHECK(r.counted_parameters == 124'439'808);
  REQUIRE(r.other_model.size() == 2);
  CHECK(r.other_model[0].name == "b");
  CHECK(r.other_model[0].parameters == 676);
  CHECK(r.other_model[1].name == "d");
  REQUIRE(r.model_unknown.size() == 1);
  CHECK(r.model_unknown[0].name == "c");
  CHECK(uncounted_result_for(r, safeamp::presets::fp16_mixed));
  CHECK_FALSE(uncounted_result_for(r, safeamp::presets::bf16_mixed));
  const std::vector<std::string> notes = parity_notes(r);
  REQUIRE(notes.size() == 3);  // counted, another model, no model
  CHECK_THAT(notes[0], Catch::Contains("counted: measured on a model of 124439808 parameters (scenario 'mixed')"));
  CHECK_THAT(notes[1],
             Catch::Contains("2 candidate(s) ran on another model, scenario 'mixed': 676 parameters: b (FAIL), "
                             "d (PASS); this plan's model: the shape's 123532032 parameters (up to "
                             "124439808 with biases, norms and learned positions), 122296712 .. 125684206"));
  CHECK_THAT(notes[2], Catch::Contains("1 candidate(s) without a recorded model") && Catch::Contains("c (PASS)"));

  // Without decision rows (a summary by hand, or before 2026-12) nothing can be compared, and nothing is assumed.
  const parity_results none = parse_parity_summary(
      nlohmann::json::parse(R"({"candidates": [{"policy": "bf16-mixed", "verdict": "PASS"}]})"), "s.json", planned);
  CHECK(none.passed.empty());
  CHECK(none.model_unknown.size() == 1);
  CHECK(none.scenario.empty());

  // Decision rows that are not safeamp sim's: refused, naming the place (exit 2), never read as some model.
  const auto message_for = [&planned](const char* text) {
    return message_of([&] { (void)parse_parity_summary(nlohmann::json::parse(text), "s.json", planned); });
  };
  CHECK_THAT(message_for(R"({"decision": {"candidates": []}, "candidates": [{"policy": "fp32", "verdict": "PASS"}]})"),
             Catch::StartsWith("verified-by is 's.json' (decision ") && Catch::Contains("one row per candidate"));
  CHECK_THAT(message_for(R"({"decision": {"candidates": [{"name": "x", "parameters": 5}]},
                             "candidates": [{"name": "y", "policy": "fp32", "verdict": "PASS"}]})"),
             Catch::StartsWith("verified-by is 's.json' decision row 0 ("));
  CHECK_THAT(message_for(R"({"decision": {"candidates": [{"parameters": -5}]},
                             "candidates": [{"policy": "fp32", "verdict": "PASS"}]})"),
             Catch::StartsWith("verified-by is 's.json' decision row 0 ("));
  CHECK_THAT(message_for(R"({"decision": {"candidates": [{"parameters": "124439808"}]},
                             "candidates": [{"policy": "fp32", "verdict": "PASS"}]})"),
             Catch::StartsWith("verified-by is 's.json' decision row 0 ("));
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
