// The reference lock: JSON round trip of every field, atomic writes that never leave a half-written file,
// refusal of corrupt, edited or other-version files, and the manifest comparison's messages.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "report_fixtures.hpp"
#include "safeamp/error.hpp"
#include "safeamp/sim/reference.hpp"
#include "safeamp/sim/report_files.hpp"

using namespace safeamp::sim;
namespace fs = std::filesystem;

namespace {
std::uint32_t bits(float f) {
  std::uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  return u;
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
  for (std::size_t i = 0; i < ref.probe_logits.size(); ++i) CHECK(bits(back.probe_logits[i]) == bits(ref.probe_logits[i]));
  CHECK(back.weights_hash == ref.weights_hash);
  CHECK(back.probe_rows == 3);
  CHECK(back.probe_cols == 5);
  // The manifest records the probe shape of the run.
  CHECK(ref.manifest.probe_rows == 3);
  CHECK(ref.manifest.probe_cols == 5);
}

TEST_CASE("an edited, truncated, corrupt or other-version reference is refused") {
  const locked_reference ref = lock_reference(fixtures::make_run("reference fp32", 10, 2.0, 0.0), fixtures::make_manifest());
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
  // Another format version.
  std::string v2 = text;
  const auto vpos = v2.find("\"format_version\": 1");
  REQUIRE(vpos != std::string::npos);
  v2.replace(vpos, 19, "\"format_version\": 2");
  CHECK_THROWS_WITH(reference_from_json_text(v2), Catch::Contains("format_version"));
}

TEST_CASE("lock_reference refuses a run that cannot be a reference") {
  run_result run = fixtures::make_run("reference fp32", 10, 2.0, 0.0);
  run_result nan_loss = run;
  nan_loss.steps[3].loss = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_AS(lock_reference(nan_loss, fixtures::make_manifest()), safeamp::error);
  run_result bad_shape = run;
  bad_shape.probe_cols = 4;  // 3 x 4 != 15 values
  CHECK_THROWS_WITH(lock_reference(bad_shape, fixtures::make_manifest()), Catch::Contains("probe"));
  run_result empty = run;
  empty.steps.clear();
  CHECK_THROWS_AS(lock_reference(empty, fixtures::make_manifest()), safeamp::error);
}

TEST_CASE("references are written atomically: a failed write leaves the old file and no temporary") {
  const fs::path dir = fs::temp_directory_path() / ("safeamp-ref-test-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  prepare_output_folder(dir);
  const fs::path file = dir / "reference.json";
  const locked_reference a = lock_reference(fixtures::make_run("reference fp32", 10, 2.0, 0.0), fixtures::make_manifest());
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

TEST_CASE("manifest comparison: identity fields refuse, environment fields are only reported") {
  const run_manifest ref = fixtures::make_manifest();
  run_manifest cand = ref;
  CHECK(compare_manifests(ref, cand).empty());
  CHECK_NOTHROW(require_matching_manifest(ref, cand));

  cand.seed = 8;
  cand.data_fingerprint = "00000000deadbeef";
  cand.compiler = "clang 14";
  const auto diffs = compare_manifests(ref, cand);
  REQUIRE(diffs.size() == 3);
  // Identity fields first.
  CHECK(diffs[0].refuses);
  CHECK(diffs[1].refuses);
  CHECK_FALSE(diffs[2].refuses);
  CHECK(diffs[2].field == "compiler");
  CHECK_THROWS_WITH(require_matching_manifest(ref, cand),
                    Catch::Contains("seed: reference '7', candidate '8'") && Catch::Contains("data_fingerprint"));

  run_manifest env_only = ref;
  env_only.hardware = "another CPU";
  env_only.threads = 1;
  CHECK_NOTHROW(require_matching_manifest(ref, env_only));
  CHECK(compare_manifests(ref, env_only).size() == 2);

  // The probe shape is compared only once both runs know it.
  run_manifest before_run = ref;
  before_run.probe_rows = 0;
  before_run.probe_cols = 0;
  CHECK_NOTHROW(require_matching_manifest(ref, before_run));
  run_manifest other_probe = ref;
  other_probe.probe_cols = 6;
  CHECK_THROWS_WITH(require_matching_manifest(ref, other_probe), Catch::Contains("probe_cols"));
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
