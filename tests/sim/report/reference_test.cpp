// The reference lock: JSON round trip of every field, atomic writes that never leave a half-written file,
// refusal of corrupt, edited or other-version files, the manifest comparison's messages, one refusal per
// setting that changes the reference's numbers (changed alone, in a scenario or a run configuration),
// candidates that differ only in their own numerics, and keeping the previous reference on --relock.
#include "safeamp/sim/reference.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "report_fixtures.hpp"
#include "safeamp/error.hpp"
#include "safeamp/sim/report_files.hpp"
#include "safeamp/sim/scenario.hpp"

using namespace safeamp::sim;
namespace fs = std::filesystem;

namespace {
std::uint32_t bits(float f) {
  std::uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
/// What reading `file` after `edit` says: the error's message, or "accepted".
std::string refusal(const nlohmann::json& file, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = file;
  edit(j);
  try {
    (void)reference_from_json_text(j.dump());
  } catch (const safeamp::error& e) {
    return e.what();
  }
  return "accepted";
}
}  // namespace

TEST_CASE("a locked reference round-trips through JSON bit for bit") {
  const run_result run = fixtures::make_run("reference fp32", 40, 2.0, 0.0);
  locked_reference ref = lock_reference(run, fixtures::make_manifest());
  const locked_reference back = reference_from_json_text(to_json_text(ref));
  CHECK(back.reference_id == ref.reference_id);
  CHECK(back.manifest == ref.manifest);
  CHECK(back.label == ref.label);
  REQUIRE(back.loss_curve.size() == ref.loss_curve.size());
  for (std::size_t i = 0; i < ref.loss_curve.size(); ++i) CHECK(back.loss_curve[i] == ref.loss_curve[i]);
  CHECK(back.final_eval == ref.final_eval);
  REQUIRE(back.probe_logits.size() == ref.probe_logits.size());
  for (std::size_t i = 0; i < ref.probe_logits.size(); ++i)
    CHECK(bits(back.probe_logits[i]) == bits(ref.probe_logits[i]));
  CHECK(back.weights_hash == ref.weights_hash);
  CHECK(back.probe_rows == 3);
  CHECK(back.probe_cols == 5);
  // The manifest records the probe shape of the run.
  CHECK(ref.manifest.probe_rows == 3);
  CHECK(ref.manifest.probe_cols == 5);
}

TEST_CASE("an edited, truncated, corrupt or other-version reference is refused") {
  const locked_reference ref =
      lock_reference(fixtures::make_run("reference fp32", 10, 2.0, 0.0), fixtures::make_manifest());
  const std::string text = to_json_text(ref);
  // Truncated in the middle.
  CHECK_THROWS_AS(reference_from_json_text(text.substr(0, text.size() / 2)), safeamp::error);
  // Not JSON at all.
  CHECK_THROWS_WITH(reference_from_json_text("garbage"), Catch::Contains("not valid JSON"));
  // An edited loss value: the content no longer hashes to the recorded id.
  std::string edited = text;
  const auto pos = edited.find("\"accuracy\"");
  REQUIRE(pos != std::string::npos);
  edited.insert(edited.find(':', pos) + 1, "0.0001+");  // breaks JSON or changes the value
  CHECK_THROWS_AS(reference_from_json_text(edited), safeamp::error);
  locked_reference other = ref;
  other.final_eval.accuracy += 0.25;
  std::string tampered = to_json_text(other);  // written with the old id
  CHECK_THROWS_WITH(reference_from_json_text(tampered), Catch::Contains("reference_id"));
  // Another format version: a newer one, a version-1 file (its manifest lacked most settings), a version-2
  // file (no regression baseline) and a version-3 file (no class frequencies), each refused with the way to lock
  // again.
  const auto vpos = text.find("\"format_version\": 4");
  REQUIRE(vpos != std::string::npos);
  for (const char* version : {"5", "3"}) {
    std::string other_version = text;
    other_version.replace(vpos, 19, std::string("\"format_version\": ") + version);
    CHECK_THROWS_WITH(reference_from_json_text(other_version),
                      Catch::Contains(std::string("format_version is ") + version) && Catch::Contains("--relock"));
  }
  for (const char* old_version : {"1", "2"}) {
    std::string old = text;
    old.replace(vpos, 19, std::string("\"format_version\": ") + old_version);
    CHECK_THROWS_WITH(reference_from_json_text(old), Catch::Contains(std::string("format_version is ") + old_version) &&
                                                         Catch::Contains("accepted: 4") && Catch::Contains("--relock"));
  }
}

TEST_CASE("a reference number outside its field's range is refused by name, never cast") {
  // nlohmann's get<T> casts a double to an integer or float without a range check (undefined for 1e113 as a
  // byte, found by fuzz_reference); each field is range-checked before the content hash is even looked at.
  const locked_reference ref =
      lock_reference(fixtures::make_run("reference fp32", 10, 2.0, 0.0), fixtures::make_manifest());
  const nlohmann::json good = nlohmann::json::parse(to_json_text(ref));
  REQUIRE(!good["final_eval"]["rows"]["correct"].empty());
  const auto refused = [&](const std::function<void(nlohmann::json&)>& edit) { return refusal(good, edit); };
  const std::string byte = refused([](nlohmann::json& j) { j["final_eval"]["rows"]["correct"][0] = 1.55556e113; });
  CHECK_THAT(byte, Catch::Contains("final_eval.rows.correct[0]") && Catch::Contains("an integer from 0 to 255"));
  CHECK_THAT(refused([](nlohmann::json& j) { j["final_eval"]["rows"]["correct"][0] = 256; }),
             Catch::Contains("correct[0]"));
  CHECK_THAT(refused([](nlohmann::json& j) { j["final_eval"]["rows"]["correct"][0] = -1; }),
             Catch::Contains("correct[0]"));
  CHECK_THAT(refused([](nlohmann::json& j) { j["final_eval"]["rows"]["slice"][0] = 0.5; }),
             Catch::Contains("slice[0]"));
  CHECK_THAT(refused([](nlohmann::json& j) { j["final_eval"]["rows"]["slice"][0] = 3000000000LL; }),
             Catch::Contains("slice[0]"));
  CHECK_THAT(refused([](nlohmann::json& j) { j["probe_logits"][1] = 1e300; }),
             Catch::Contains("probe_logits[1]") && Catch::Contains("float range"));
  CHECK_THAT(refused([](nlohmann::json& j) { j["scale_curve"][0] = -1e39; }), Catch::Contains("scale_curve[0]"));
  CHECK_THAT(refused([](nlohmann::json& j) { j["format_version"] = 1e20; }), Catch::Contains("format_version"));
  CHECK_THAT(refused([](nlohmann::json& j) { j["manifest"]["seed"] = -5; }), Catch::Contains("manifest.seed"));
  CHECK_THAT(refused([](nlohmann::json& j) { j["manifest"]["steps"] = 1e30; }), Catch::Contains("manifest.steps"));
  CHECK_THAT(refused([](nlohmann::json& j) { j["loss_curve"] = "x"; }), Catch::Contains("an array of numbers"));
  // The unedited file still reads: the checks refuse only what does not fit.
  CHECK(refused([](nlohmann::json&) {}) == "accepted");
}

TEST_CASE("a regression's baseline round-trips with the reference, is hashed and checked") {
  run_result run = fixtures::make_run("reference fp32", 10, 2.0, 0.0);
  // A classifier's reference records none: null in the file.
  const locked_reference classifier = lock_reference(run, fixtures::make_manifest());
  CHECK(nlohmann::json::parse(to_json_text(classifier))["final_eval"]["regression"].is_null());
  CHECK_FALSE(reference_from_json_text(to_json_text(classifier)).final_eval.regression.has_value());
  // Non-default values in every field, read back bit for bit (0.1 is not a short binary fraction).
  run.final_eval.classes.reset();
  run.final_eval.regression =
      regression_baseline{.loss = "huber", .trivial_loss = 0.1, .slice_trivial_loss = {0.3, 1e-9, 7.25, 0.0}};
  const locked_reference ref = lock_reference(run, fixtures::make_manifest());
  CHECK(ref.reference_id != classifier.reference_id);
  const locked_reference back = reference_from_json_text(to_json_text(ref));
  REQUIRE(back.final_eval.regression.has_value());
  CHECK(*back.final_eval.regression == *run.final_eval.regression);
  CHECK(back.final_eval == ref.final_eval);
  // Edited after locking: the id no longer matches.
  locked_reference edited = ref;
  edited.final_eval.regression->trivial_loss = 0.2;
  CHECK_THROWS_WITH(reference_from_json_text(to_json_text(edited)), Catch::Contains("reference_id"));
  // A baseline that does not fit is refused when locking and when reading, by field.
  run_result short_slices = run;
  short_slices.final_eval.regression->slice_trivial_loss.pop_back();
  CHECK_THROWS_WITH(lock_reference(short_slices, fixtures::make_manifest()),
                    Catch::Contains("slice_trivial_loss") && Catch::Contains("one per slice (4)"));
  run_result bad_name = run;
  bad_name.final_eval.regression->loss = "cross_entropy";
  CHECK_THROWS_WITH(lock_reference(bad_name, fixtures::make_manifest()), Catch::Contains("mse, l1 or huber"));
  run_result negative = run;
  negative.final_eval.regression->slice_trivial_loss[1] = -1.0;
  CHECK_THROWS_WITH(lock_reference(negative, fixtures::make_manifest()), Catch::Contains("slice_trivial_loss[1]"));
  nlohmann::json j = nlohmann::json::parse(to_json_text(ref));
  j["final_eval"]["regression"]["trivial_loss"] = "big";
  CHECK_THROWS_WITH(reference_from_json_text(j.dump()), Catch::Contains("final_eval.regression.trivial_loss"));
  j["final_eval"]["regression"] = 5;
  CHECK_THROWS_WITH(reference_from_json_text(j.dump()), Catch::Contains("null (a classifier) or an object"));
  j["final_eval"].erase("regression");
  CHECK_THROWS_WITH(reference_from_json_text(j.dump()), Catch::Contains("final_eval.regression"));
}

TEST_CASE("lock_reference refuses a run that cannot be a reference") {
  run_result run = fixtures::make_run("reference fp32", 10, 2.0, 0.0);
  run_result nan_loss = run;
  nan_loss.steps[3].loss = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_AS(lock_reference(nan_loss, fixtures::make_manifest()), safeamp::error);
  run_result bad_shape = run;
  bad_shape.probe_cols = 4;  // 3 x 4 != 15 values
  CHECK_THROWS_WITH(lock_reference(bad_shape, fixtures::make_manifest()), Catch::Contains("probe"));
  // A shape whose product wraps around 2^64 (2^32 x 2^32) to the size of an empty array is refused too.
  run_result wrapping = run;
  wrapping.probe_rows = std::int64_t{1} << 32;
  wrapping.probe_cols = std::int64_t{1} << 32;
  wrapping.probe_logits.clear();
  CHECK_THROWS_WITH(lock_reference(wrapping, fixtures::make_manifest()), Catch::Contains("probe"));
  run_result empty = run;
  empty.steps.clear();
  CHECK_THROWS_AS(lock_reference(empty, fixtures::make_manifest()), safeamp::error);
}

TEST_CASE("references are written atomically: a failed write leaves the old file and no temporary") {
  const fs::path dir = fs::temp_directory_path() / ("safeamp-ref-test-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  prepare_output_folder(dir);
  const fs::path file = dir / "reference.json";
  const locked_reference a =
      lock_reference(fixtures::make_run("reference fp32", 10, 2.0, 0.0), fixtures::make_manifest());
  write_reference(file, a);
  CHECK(read_reference(file).reference_id == a.reference_id);
  // Writing into a folder that does not exist fails with an error naming the path...
  CHECK_THROWS_WITH(write_reference(dir / "missing" / "reference.json", a), Catch::Contains("missing"));
  // ...and a write over an existing file that cannot be renamed (the target is a directory) keeps nothing half-written.
  fs::create_directories(dir / "blocked.json");
  CHECK_THROWS_AS(write_reference(dir / "blocked.json", a), safeamp::error);
  std::size_t temporaries = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().find(".tmp-") != std::string::npos) ++temporaries;
  }
  CHECK(temporaries == 0);
  CHECK(read_reference(file).reference_id == a.reference_id);
  // An output folder that is a file, or under /proc, is refused up front.
  CHECK_THROWS_WITH(prepare_output_folder(file), Catch::Contains("not a directory"));
  CHECK_THROWS_AS(prepare_output_folder("/proc/safeamp-cannot-exist"), safeamp::error);
  fs::remove_all(dir);
}

TEST_CASE("check_writable_folder refuses what prepare_output_folder refuses and changes nothing") {
  const fs::path dir = fs::temp_directory_path() / ("safeamp-writable-check-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  // An old modification time, so that any change (a probe file created and removed) shows whatever the clock's
  // resolution.
  const struct ::timespec old_times[2] = {{1'500'000'000, 0}, {1'500'000'000, 0}};
  REQUIRE(::utimensat(AT_FDCWD, dir.c_str(), old_times, 0) == 0);
  check_writable_folder(dir);
  struct ::stat st {};
  REQUIRE(::stat(dir.c_str(), &st) == 0);
  CHECK(st.st_mtim.tv_sec == 1'500'000'000);
  CHECK(fs::is_empty(dir));
  // prepare_output_folder's probe does change it (what the check replaces before an invocation is accepted).
  prepare_output_folder(dir);
  REQUIRE(::stat(dir.c_str(), &st) == 0);
  CHECK(st.st_mtim.tv_sec != 1'500'000'000);
  const fs::path file = dir / "a-file";
  write_file_atomically(file, "x");
  CHECK_THROWS_WITH(check_writable_folder(file), Catch::Contains("--out") && Catch::Contains("not a directory"));
  CHECK_THROWS_WITH(check_writable_folder(dir / "missing"), Catch::Contains("does not exist"));
  // A directory no process may create files in (as root too: the kernel refuses writes into a process's /proc
  // folder), named with the reason.
  CHECK_THROWS_WITH(check_writable_folder("/proc/1"),
                    Catch::Contains("'/proc/1' (") && Catch::Contains("a writable directory"));
  fs::remove_all(dir);
}

TEST_CASE("manifest comparison: identity fields refuse, environment fields are only reported") {
  const run_manifest ref = fixtures::make_manifest();
  run_manifest cand = ref;
  CHECK(compare_manifests(ref, cand, manifest_check::reuse).empty());
  CHECK_NOTHROW(require_matching_manifest(ref, cand, manifest_check::reuse));

  cand.seed = 8;
  cand.data_fingerprint = "00000000deadbeef";
  cand.compiler = "clang 14";
  const auto diffs = compare_manifests(ref, cand, manifest_check::reuse);
  REQUIRE(diffs.size() == 3);
  // Refusing fields first.
  CHECK(diffs[0].refuses);
  CHECK(diffs[1].refuses);
  CHECK_FALSE(diffs[2].refuses);
  CHECK(diffs[2].field == "compiler");
  CHECK(diffs[2].scope == manifest_scope::environment);
  CHECK_THROWS_WITH(require_matching_manifest(ref, cand, manifest_check::reuse),
                    Catch::Contains("in 2 fields") && Catch::Contains("training.seed: reference '7', now '8'") &&
                        Catch::Contains("data.fingerprint: reference '0123456789abcdef', now '00000000deadbeef'") &&
                        Catch::Contains("--relock") && Catch::Contains("--out"));
  CHECK_THROWS_WITH(require_matching_manifest(ref, cand, manifest_check::candidate),
                    Catch::Contains("training.seed: reference '7', candidate '8'"));

  run_manifest env_only = ref;
  env_only.hardware = "another CPU";
  env_only.threads = 1;
  env_only.compiler_flags = "-O0 (not optimized)";
  env_only.scenario = "renamed";  // a label: not even reported
  CHECK_NOTHROW(require_matching_manifest(ref, env_only, manifest_check::reuse));
  CHECK(compare_manifests(ref, env_only, manifest_check::reuse).size() == 3);

  // The probe shape is compared only once both runs know it.
  run_manifest before_run = ref;
  before_run.probe_rows = 0;
  before_run.probe_cols = 0;
  CHECK_NOTHROW(require_matching_manifest(ref, before_run, manifest_check::reuse));
  run_manifest other_probe = ref;
  other_probe.probe_cols = 6;
  CHECK_THROWS_WITH(require_matching_manifest(ref, other_probe, manifest_check::candidate),
                    Catch::Contains("probe_logits.cols: reference '5', candidate '6'"));
}

TEST_CASE("hashes and the environment description") {
  // FNV-1a 64 of "" is the offset basis; of "a" is 0xaf63dc4c8601ec8c (published test vectors).
  CHECK(fnv1a64("") == 14695981039346656037ull);
  CHECK(hex64(fnv1a64("a")) == "af63dc4c8601ec8c");
  const build_environment env = current_environment();
  CHECK_FALSE(env.compiler.empty());
  CHECK(env.library_version == SAFEAMP_VERSION_STRING);
  CHECK(env.hardware.find("logical cores") != std::string::npos);
}

// ---------------------------------------------------------------------------------------------------------
// Every setting that changes the reference's numbers, changed alone.

namespace {

using json = nlohmann::json;

// The scratch folder of this test process (corpus files, kept references).
fs::path scratch() {
  static const fs::path dir = [] {
    const fs::path d = fs::temp_directory_path() / ("safeamp-lock-test-" + std::to_string(::getpid()));
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

fs::path write_text(const std::string& name, const std::string& text) {
  fs::create_directories(scratch());  // again: the last test case removes the folder
  const fs::path p = scratch() / name;
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

// A small MLP scenario with a value in every setting that differs from its default, so a case that sets a
// setting back to its default changes it too.
json mlp_scenario() {
  return json::parse(R"({
    "name": "lock-mlp",
    "model": {"kind": "mlp", "input_dim": 16, "hidden_dim": 32, "hidden_layers": 1, "classes": 4, "activation": "gelu"},
    "data": {"seed": 2, "train_samples": 512, "eval_samples": 256, "cluster_spread": 1.5, "input_scale": 2,
             "probe_rows": 4},
    "training": {"steps": 40, "batch_size": 32, "seed": 3, "threads": 1, "clip_norm": 1, "loss_multiplier": 1,
                 "optimizer": {"kind": "adamw", "learning_rate": 0.01, "momentum": 0.9, "beta1": 0.9, "beta2": 0.999,
                               "epsilon": 1e-08, "weight_decay": 0.01, "stochastic_write_back": false}},
    "reference": {"policy": "fp32"},
    "candidates": [{"name": "bf16-mixed", "policy": "bf16-mixed"}]
  })");
}

// A small transformer scenario on a corpus file of this test.
json transformer_scenario() {
  json j = json::parse(R"({
    "name": "lock-transformer",
    "model": {"kind": "transformer", "context": 8, "width": 16, "heads": 2, "layers": 1, "ffn_multiplier": 2},
    "data": {"seed": 2, "eval_fraction": 0.25, "eval_samples": 8, "probe_rows": 2},
    "training": {"steps": 4, "batch_size": 4, "seed": 3},
    "candidates": [{"name": "bf16-mixed", "policy": "bf16-mixed"}]
  })");
  j["data"]["corpus_path"] = write_text("corpus-a.txt", std::string(400, 'a') + std::string(400, 'b')).string();
  return j;
}

run_manifest reference_manifest_of(const json& j) {
  const scenario s = parse_scenario(j.dump(), "test");
  return manifest_for(s, reference_config(s));
}

// One setting changed alone: the field the refusal must name, its value in the lock and now.
struct setting_case {
  std::string field;
  std::string locked_value;
  std::string now_value;
  bool shared = true;  // false: the reference's own numerics (refuses reuse, not a candidate)
  std::function<json()> base;
  std::function<void(json&)> edit;
};

std::vector<setting_case> scenario_cases() {
  const auto mlp = [] { return mlp_scenario(); };
  const auto tf = [] { return transformer_scenario(); };
  const auto set = [](std::string section, std::string key, json value) {
    return [section, key, value](json& j) { j[section][key] = value; };
  };
  const auto opt = [](std::string key, json value) {
    return [key, value](json& j) { j["training"]["optimizer"][key] = value; };
  };
  return {
      {"model.kind", "mlp", "transformer", true, mlp,
       [](json& j) {
         j["model"] = json{{"kind", "transformer"}, {"context", 8}, {"width", 16}, {"heads", 2}, {"layers", 1}};
         j["data"] = json{{"seed", 2}, {"corpus_path", transformer_scenario()["data"]["corpus_path"]}};
       }},
      {"model.input_dim", "16", "17", true, mlp, set("model", "input_dim", 17)},
      {"model.hidden_dim", "32", "24", true, mlp, set("model", "hidden_dim", 24)},
      {"model.hidden_layers", "1", "2", true, mlp, set("model", "hidden_layers", 2)},
      {"model.classes", "4", "5", true, mlp, set("model", "classes", 5)},
      {"model.activation", "gelu", "relu", true, mlp, set("model", "activation", "relu")},
      {"model.context", "8", "12", true, tf, set("model", "context", 12)},
      {"model.width", "16", "32", true, tf, set("model", "width", 32)},
      {"model.heads", "2", "4", true, tf, set("model", "heads", 4)},
      {"model.layers", "1", "2", true, tf, set("model", "layers", 2)},
      {"model.ffn_multiplier", "2", "3", true, tf, set("model", "ffn_multiplier", 3)},
      {"data.seed", "2", "5", true, mlp, set("data", "seed", 5)},
      {"data.train_samples", "512", "500", true, mlp, set("data", "train_samples", 500)},
      {"data.eval_samples", "256", "128", true, mlp, set("data", "eval_samples", 128)},
      {"data.cluster_spread", "1.5", "0.75", true, mlp, set("data", "cluster_spread", 0.75)},
      {"data.input_scale", "2", "1e+20", true, mlp, set("data", "input_scale", 1e20)},
      {"data.probe_rows", "4", "6", true, mlp, set("data", "probe_rows", 6)},
      {"data.eval_fraction", "0.25", "0.125", true, tf, set("data", "eval_fraction", 0.125)},
      {"data.corpus_bytes", "800", "801", true, tf,
       [](json& j) { j["data"]["corpus_path"] = write_text("corpus-b.txt", std::string(801, 'a')).string(); }},
      // The same path and size with other bytes: only the fingerprint tells.
      {"data.fingerprint", "", "", true, tf,
       [](json& j) {
         write_text("corpus-c.txt", std::string(400, 'a') + std::string(400, 'b'));
         j["data"]["corpus_path"] = (scratch() / "corpus-c.txt").string();
       }},
      {"training.seed", "3", "4", true, mlp, set("training", "seed", 4)},
      {"training.steps", "40", "41", true, mlp, set("training", "steps", 41)},
      {"training.batch_size", "32", "16", true, mlp, set("training", "batch_size", 16)},
      {"training.clip_norm", "1", "0.5", true, mlp, set("training", "clip_norm", 0.5)},
      {"training.loss_multiplier", "1", "0.0009765625", true, mlp, set("training", "loss_multiplier", 0.0009765625)},
      {"optimizer.kind", "adamw", "sgd-momentum", true, mlp, opt("kind", "sgd-momentum")},
      {"optimizer.learning_rate", "0.01", "0.003", true, mlp, opt("learning_rate", 0.003)},
      {"optimizer.momentum", "0.9", "0.95", true, mlp, opt("momentum", 0.95)},
      {"optimizer.beta1", "0.9", "0.8", true, mlp, opt("beta1", 0.8)},
      {"optimizer.beta2", "0.999", "0.99", true, mlp, opt("beta2", 0.99)},
      // 0.9999999999999999 and 1 - 2^-52 are different doubles; %g would print both as "1".
      {"optimizer.epsilon", "1e-08", "1.0000000000000002e-08", true, mlp, opt("epsilon", 1.0000000000000002e-08)},
      {"optimizer.weight_decay", "0.01", "0", true, mlp, opt("weight_decay", 0.0)},
      {"optimizer.stochastic_write_back", "false", "true", true, mlp, opt("stochastic_write_back", true)},
      {"optimizer.master_weights", "from_policy", "on", false, mlp, opt("master_weights", true)},
      {"reference.policy", "fp32", "bf16-mixed", false, mlp, set("reference", "policy", "bf16-mixed")},
  };
}

std::string refusal(const run_manifest& locked, const run_manifest& now, manifest_check check) {
  try {
    require_matching_manifest(locked, now, check);
  } catch (const safeamp::error& e) {
    return e.what();
  }
  return "(not refused)";
}

void check_refusal(const std::string& field, const std::string& locked_value, const std::string& now_value, bool shared,
                   const run_manifest& locked, const run_manifest& now) {
  INFO("field " << field);
  bool named = false;
  for (const manifest_difference& d : compare_manifests(locked, now, manifest_check::reuse)) {
    if (d.field != field) continue;
    named = true;
    CHECK(d.refuses);
    CHECK(d.scope == (shared ? manifest_scope::shared : manifest_scope::reference_only));
    if (!locked_value.empty()) {
      CHECK(d.reference_value == locked_value);
      CHECK(d.candidate_value == now_value);
    }
  }
  CHECK(named);
  const std::string reuse = refusal(locked, now, manifest_check::reuse);
  const std::string expected = locked_value.empty()
                                   ? field + ": reference '"
                                   : field + ": reference '" + locked_value + "', now '" + now_value + "'";
  CHECK_THAT(reuse, Catch::Contains(expected) && Catch::Contains("--relock"));
  // A candidate must share the shared fields; the reference-only ones are its own to choose.
  const std::string candidate = refusal(locked, now, manifest_check::candidate);
  if (shared) {
    CHECK_THAT(candidate, Catch::Contains(field + ": reference '"));
  } else {
    CHECK_THAT(candidate, !Catch::Contains(field));
  }
}

}  // namespace

TEST_CASE("each scenario setting that changes the reference's numbers refuses a locked reference by name") {
  for (const setting_case& c : scenario_cases()) {
    const json base = c.base();
    json edited = base;
    c.edit(edited);
    const run_manifest locked = reference_manifest_of(base);
    const run_manifest now = reference_manifest_of(edited);
    check_refusal(c.field, c.locked_value, c.now_value, c.shared, locked, now);
  }
  // The unchanged scenario reuses its lock, whatever its thread count (runs are bit-identical across
  // thread counts: tests/sim/engine/faults_determinism_test.cpp) and name.
  json other_threads = mlp_scenario();
  other_threads["training"]["threads"] = 2;
  other_threads["name"] = "renamed";
  const run_manifest locked = reference_manifest_of(mlp_scenario());
  CHECK_NOTHROW(require_matching_manifest(locked, reference_manifest_of(mlp_scenario()), manifest_check::reuse));
  CHECK_NOTHROW(require_matching_manifest(locked, reference_manifest_of(other_threads), manifest_check::reuse));
  const auto notes = compare_manifests(locked, reference_manifest_of(other_threads), manifest_check::reuse);
  REQUIRE(notes.size() == 1);
  CHECK(notes[0].field == "threads");
  CHECK_FALSE(notes[0].refuses);
}

TEST_CASE("several changed settings are all named in one refusal") {
  json edited = mlp_scenario();
  edited["training"]["optimizer"]["beta2"] = 0.99;
  edited["training"]["optimizer"]["weight_decay"] = 0.1;
  edited["training"]["batch_size"] = 8;
  const std::string what =
      refusal(reference_manifest_of(mlp_scenario()), reference_manifest_of(edited), manifest_check::reuse);
  CHECK_THAT(what, Catch::Contains("in 3 fields") &&
                       Catch::Contains("optimizer.beta2: reference '0.999', now '0.99'") &&
                       Catch::Contains("optimizer.weight_decay: reference '0.01', now '0.1'") &&
                       Catch::Contains("training.batch_size: reference '32', now '8'"));
}

TEST_CASE("run settings outside the scenario file refuse by name: rounding, loss weight, scaler, faults") {
  const scenario s = parse_scenario(mlp_scenario().dump(), "test");
  const run_config base = reference_config(s);
  const run_manifest locked = manifest_for(s, base);
  struct config_case {
    std::string field, locked_value, now_value;
    bool shared;
    std::function<void(run_config&)> edit;
  };
  const std::vector<config_case> cases = {
      {"rounding.mode", "nearest_even", "stochastic", false,
       [](run_config& c) { c.rounding.mode = safeamp::rounding::stochastic; }},
      {"rounding.overflow", "to_infinity", "saturate", false,
       [](run_config& c) { c.rounding.on_overflow = safeamp::overflow::saturate; }},
      {"rounding.flush_subnormals", "false", "true", false, [](run_config& c) { c.rounding.flush_subnormals = true; }},
      {"training.loss_weight", "1", "0.25", true, [](run_config& c) { c.loss_weight = 0.25; }},
      {"reference.scaler", "none", "static scale=1024", false,
       [](run_config& c) {
         c.scaler.kind = scaler_kind::static_scale;
         c.scaler.static_scale = 1024.0f;
       }},
      {"reference.faults", "none", "gradient_nan factor=1 target='fc0.weight' steps=1-3,7", false,
       [](run_config& c) {
         c.faults = {{.kind = fault_kind::gradient_nan, .steps = {1, 2, 3, 7}, .target = "fc0.weight"}};
       }},
  };
  for (const config_case& c : cases) {
    run_config edited = base;
    c.edit(edited);
    check_refusal(c.field, c.locked_value, c.now_value, c.shared, locked, manifest_for(s, edited));
  }
  // The loss multiplier reaches the reference run as a tiny_loss fault at every step: recorded too.
  json small_loss = mlp_scenario();
  small_loss["training"]["loss_multiplier"] = 0.0009765625;
  const scenario s2 = parse_scenario(small_loss.dump(), "test");
  check_refusal("reference.faults", "none", "tiny_loss factor=0.0009765625 target='' steps=0-39", false, locked,
                manifest_for(s2, reference_config(s2)));
}

TEST_CASE(
    "build and probe fields refuse by name: library version, bit-changing flags, probe shape") {
  const run_manifest locked = reference_manifest_of(mlp_scenario());
  run_manifest now = locked;
  now.library_version = "9.9.9";
  check_refusal("library_version", locked.library_version, "9.9.9", true, locked, now);
  now = locked;
  now.float_flags = locked.float_flags + " -ffast-math";
  check_refusal("build.float_flags", locked.float_flags, locked.float_flags + " -ffast-math", true, locked, now);
  run_manifest ran = locked;
  ran.probe_rows = 4;
  ran.probe_cols = 4;
  now = ran;
  now.probe_rows = 5;
  check_refusal("probe_logits.rows", "4", "5", true, ran, now);
  now = ran;
  now.probe_cols = 3;
  check_refusal("probe_logits.cols", "4", "3", true, ran, now);
  // The flags recorded are the ones this build was compiled with (this test shares the library's flags).
  const std::string flags = current_environment().float_flags;
#if defined(__FAST_MATH__)
  CHECK_THAT(flags, Catch::Contains("-ffast-math"));
#else
  CHECK_THAT(flags, !Catch::Contains("fast-math"));
#endif
  // The ISA does not change bits (sim_bits_flag_independence): it is not part of the identity.
  CHECK_THAT(flags, !Catch::Contains("fma") && !Catch::Contains("avx"));
  CHECK(locked.library_version == SAFEAMP_VERSION_STRING);
}

TEST_CASE("a candidate differing only in policy, scaler, faults and master weights is not refused") {
  json j = mlp_scenario();
  j["training"]["loss_multiplier"] = 0.5;  // every run carries it: not a candidate difference
  j["candidates"] = json::parse(R"([
    {"name": "fp16 static", "policy": "fp16-mixed", "scaler": {"kind": "static", "static_scale": 1024},
     "master_weights": false,
     "faults": [{"kind": "gradient_inf", "steps": [5], "target": "fc0.weight"}]},
    {"name": "bf16 dynamic", "policy": "bf16-mixed", "scaler": {"kind": "dynamic", "preset": "pytorch"},
     "master_weights": true, "faults": [{"kind": "input_nan", "steps": [2]}]}
  ])");
  const scenario s = parse_scenario(j.dump(), "test");
  run_manifest locked = manifest_for(s, reference_config(s));
  locked.probe_rows = 4;  // as lock_reference records them
  locked.probe_cols = 4;
  for (const candidate_spec& c : s.candidates) {
    INFO("candidate " << c.name);
    run_manifest m = manifest_for(s, candidate_config(s, c));
    m.probe_rows = 4;
    m.probe_cols = 4;
    CHECK_NOTHROW(require_matching_manifest(locked, m, manifest_check::candidate));
    CHECK(compare_manifests(locked, m, manifest_check::candidate).empty());
    // The same differences do refuse reusing the lock for such a run: they are recorded, not ignored.
    const std::string reuse = refusal(locked, m, manifest_check::reuse);
    for (const char* field : {"reference.policy", "reference.scaler", "reference.faults", "optimizer.master_weights"}) {
      CHECK_THAT(reuse, Catch::Contains(std::string(field) + ": reference '"));
    }
  }
  // A candidate run with another shared setting (e.g. a batch size changed behind the scenario's back) is.
  run_manifest other_batch = manifest_for(s, candidate_config(s, s.candidates[0]));
  other_batch.batch_size = 64;
  CHECK_THAT(refusal(locked, other_batch, manifest_check::candidate),
             Catch::Contains("training.batch_size: reference '32', candidate '64'"));
}

TEST_CASE("a manifest with every setting round-trips through the reference file") {
  json j = transformer_scenario();
  j["training"]["clip_norm"] = 0.1;
  j["training"]["optimizer"] = json{{"kind", "sgd-momentum"},
                                    {"learning_rate", 0.1},
                                    {"momentum", 0.7},
                                    {"master_weights", true},
                                    {"stochastic_write_back", true}};
  const scenario s = parse_scenario(j.dump(), "test");
  run_config cfg = reference_config(s);
  cfg.rounding = {
      .mode = safeamp::rounding::toward_zero, .on_overflow = safeamp::overflow::saturate, .flush_subnormals = true};
  const run_manifest m = manifest_for(s, cfg);
  const locked_reference ref = lock_reference(fixtures::make_run("reference fp32", 4, 2.0, 0.0), m);
  const locked_reference back = reference_from_json_text(to_json_text(ref));
  CHECK(back.manifest == ref.manifest);
  CHECK(compare_manifests(ref.manifest, back.manifest, manifest_check::reuse).empty());
  // One field per setting, none twice.
  std::set<std::string> names;
  for (const manifest_setting& x : back.manifest.settings) CHECK(names.insert(x.field).second);
  CHECK(names.count("optimizer.momentum") == 1);
  CHECK(names.count("rounding.flush_subnormals") == 1);

  // A setting with an unknown scope, or given twice, is a damaged file.
  json file = json::parse(to_json_text(ref));
  json bad_scope = file;
  bad_scope["manifest"]["settings"][0]["scope"] = "sometimes";
  CHECK_THROWS_WITH(reference_from_json_text(bad_scope.dump()),
                    Catch::Contains("scope") && Catch::Contains("sometimes"));
  json twice = file;
  twice["manifest"]["settings"].push_back(twice["manifest"]["settings"][0]);
  CHECK_THROWS_WITH(reference_from_json_text(twice.dump()), Catch::Contains("twice"));
}

TEST_CASE("--relock keeps the previous reference beside the new one, never over another kept file") {
  const fs::path dir = scratch() / "relock";
  fs::create_directories(dir);
  const fs::path file = dir / "reference.json";
  // A reference whose id and lock time are known (the content need not hash to the id: it is kept as is).
  const std::string old_text =
      R"({"format_version": 1, "reference_id": "00000000deadbeef", "locked_utc": "2024-05-01T12:00:00Z"})";
  std::ofstream(file, std::ios::binary) << old_text;
  const fs::path kept = keep_previous_reference(file);
  CHECK(kept == dir / "reference-00000000deadbeef-20240501T120000Z.json");
  CHECK(read_whole_file(kept) == old_text);
  CHECK(read_whole_file(file) == old_text);  // still in place until the caller replaces it atomically
  // The same reference kept again (a relock that failed after keeping it) gets a new name.
  const fs::path again = keep_previous_reference(file);
  CHECK(again == dir / "reference-00000000deadbeef-20240501T120000Z-2.json");
  CHECK(read_whole_file(kept) == old_text);
  // A damaged file is kept too, under a name that says its id is unknown.
  std::ofstream(file, std::ios::binary | std::ios::trunc) << "{ truncated";
  const fs::path damaged = keep_previous_reference(file);
  CHECK(damaged == dir / "reference-unknown-id-unknown-time.json");
  CHECK(read_whole_file(damaged) == "{ truncated");
  fs::remove_all(scratch());
}

TEST_CASE("a classifier's class frequencies round-trip with the reference, are hashed and checked") {
  run_result run = fixtures::make_run("reference fp32", 10, 2.0, 0.0);
  // Non-default values in every field, read back bit for bit.
  run.final_eval.classes = class_prior{.classes = 3,
                                       .trivial_loss = 0.1,
                                       .trivial_accuracy = 0.7,
                                       .slice_trivial_loss = {0.3, 1e-9, 7.25, 0.0},
                                       .slice_trivial_accuracy = {0.1, 1.0, 0.35, 0.0}};
  const locked_reference ref = lock_reference(run, fixtures::make_manifest());
  const std::string text = to_json_text(ref);
  const locked_reference back = reference_from_json_text(text);
  REQUIRE(back.final_eval.classes.has_value());
  CHECK(*back.final_eval.classes == *run.final_eval.classes);
  CHECK(nlohmann::json::parse(text)["final_eval"]["class_prior"]["classes"] == 3);
  // Part of the content the id hashes.
  run_result other = run;
  other.final_eval.classes->trivial_accuracy = 0.71;
  CHECK(lock_reference(other, fixtures::make_manifest()).reference_id != ref.reference_id);
  // A classifier without them, or a regression with them, is not locked.
  run_result none = run;
  none.final_eval.classes.reset();
  CHECK_THROWS_WITH(lock_reference(none, fixtures::make_manifest()), Catch::Contains("class frequencies is missing"));
  run_result both = run;
  both.final_eval.regression =
      regression_baseline{.loss = "mse", .trivial_loss = 1.0, .slice_trivial_loss = {1, 1, 1, 1}};
  CHECK_THROWS_WITH(lock_reference(both, fixtures::make_manifest()), Catch::Contains("beside a regression baseline"));
  // An edited file is refused naming the field (its fields are checked before the content hash).
  const nlohmann::json good = nlohmann::json::parse(text);
  const auto refused = [&](const std::function<void(nlohmann::json&)>& edit) { return refusal(good, edit); };
  CHECK(refused([](nlohmann::json&) {}) == "accepted");
  CHECK_THAT(refused([](nlohmann::json& j) { j["final_eval"].erase("class_prior"); }), Catch::Contains("class_prior"));
  CHECK_THAT(refused([](nlohmann::json& j) { j["final_eval"]["class_prior"] = nullptr; }),
             Catch::Contains("class_prior is missing"));
  CHECK_THAT(refused([](nlohmann::json& j) { j["final_eval"]["class_prior"]["trivial_accuracy"] = 0.0; }),
             Catch::Contains("trivial_accuracy is 0"));
  CHECK_THAT(refused([](nlohmann::json& j) { j["final_eval"]["class_prior"]["slice_trivial_accuracy"][2] = 1.5; }),
             Catch::Contains("slice_trivial_accuracy[2] is 1.5"));
  CHECK_THAT(refused([](nlohmann::json& j) { j["final_eval"]["class_prior"]["slice_trivial_loss"] = {1.0}; }),
             Catch::Contains("slice_trivial_loss is 1 values"));
  CHECK_THAT(refused([](nlohmann::json& j) { j["final_eval"]["class_prior"]["trivial_loss"] = -1.0; }),
             Catch::Contains("trivial_loss is -1"));
}
