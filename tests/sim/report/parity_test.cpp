// The parity gate on hand-built runs: default tolerances from the unit roundoff, each check failing on
// its own (held-out metrics, loss curve, non-finite losses, golden logits, one slice), and fallbacks.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <limits>
#include <unistd.h>

#include "report_fixtures.hpp"
#include "safeamp/error.hpp"
#include "safeamp/sim/parity.hpp"
#include "safeamp/sim/parity_fallback.hpp"
#include "safeamp/sim/report_files.hpp"

using namespace safeamp::sim;
namespace fs = std::filesystem;

namespace {
locked_reference reference() {
  return lock_reference(fixtures::make_run("reference fp32", 40, 2.0, 0.0), fixtures::make_manifest());
}
bool has_reason(const parity_result& r, const std::string& what) {
  for (const std::string& s : r.reasons) {
    if (s.find(what) != std::string::npos) return true;
  }
  return false;
}
}  // namespace

TEST_CASE("default tolerances are k * sqrt(unit roundoff) of the coarsest format") {
  // fp16: u = 2^-11, sqrt(u) = 2^-5.5 = 0.02209708691207961; bf16: u = 2^-8, sqrt = 2^-4 = 0.0625.
  const parity_tolerances f16 = default_tolerances(safeamp::fp16);
  CHECK(f16.loss_rel == Approx(0.02209708691207961).epsilon(1e-12));
  CHECK(f16.logit_abs == Approx(4 * 0.02209708691207961).epsilon(1e-12));
  const parity_tolerances b16 = default_tolerances(safeamp::bf16);
  CHECK(b16.loss_rel == 0.0625);
  CHECK(b16.accuracy_abs == 0.0625);
  CHECK(b16.logit_rel == 0.25);
  // fp32: u = 2^-24, sqrt = 2^-12.
  CHECK(default_tolerances(safeamp::fp32).curve_gap_rel == std::ldexp(1.0, -12));
  CHECK(coarsest_format(safeamp::presets::fp32) == safeamp::fp32);
  CHECK(coarsest_format(safeamp::presets::bf16_mixed) == safeamp::bf16);
  CHECK(coarsest_format(safeamp::presets::fp16_mixed) == safeamp::fp16);
  // fp8-hybrid: E5M2 gradients (u = 2^-3) are coarser than E4M3 inputs (2^-4).
  CHECK(coarsest_format(safeamp::presets::fp8_hybrid) == safeamp::fp8_e5m2);
  tolerance_overrides o;
  o.loss_rel = 0.5;
  const parity_tolerances t = apply_overrides(f16, o);
  CHECK(t.loss_rel == 0.5);
  CHECK(t.accuracy_abs == f16.accuracy_abs);
}

TEST_CASE("an identical run passes every check with zero error") {
  const parity_result r = evaluate_parity(reference(), fixtures::make_run("same", 40, 2.0, 0.0),
                                          default_tolerances(safeamp::fp32));
  CHECK(r.outcome == verdict::pass);
  CHECK(r.reasons.empty());
  // 2 held-out + non-finite + curve + 2 logits + 4 slices x 2 = 14 checks.
  CHECK(r.checks.size() == 14);
  for (const parity_check& c : r.checks) CHECK(c.value <= 0.0);
}

TEST_CASE("a 10 % higher loss fails fp16's tolerance (2.2 %) but passes a declared 15 %") {
  const run_result cand = fixtures::make_run("worse", 40, 2.0, 0.10, safeamp::presets::fp16_mixed);
  const parity_result r = evaluate_parity(reference(), cand, default_tolerances(safeamp::fp16));
  CHECK(r.outcome == verdict::fail);
  CHECK(has_reason(r, "held-out loss"));
  // Every training loss is 1.1x the reference's: the smoothed relative gap is exactly 0.10.
  bool found = false;
  for (const parity_check& c : r.checks) {
    if (c.name.rfind("loss-curve gap", 0) == 0) {
      CHECK(c.value == Approx(0.10).epsilon(1e-9));
      found = true;
    }
  }
  CHECK(found);
  tolerance_overrides o;
  o.loss_rel = o.curve_gap_rel = o.slice_loss_rel = 0.15;
  CHECK(evaluate_parity(reference(), cand, apply_overrides(default_tolerances(safeamp::fp16), o)).outcome ==
        verdict::pass);
  // A lower loss is not a regression of the held-out metrics.
  const run_result better = fixtures::make_run("better", 40, 2.0, -0.10);
  const parity_result rb = evaluate_parity(reference(), better, default_tolerances(safeamp::bf16));
  CHECK_FALSE(has_reason(rb, "held-out loss"));
}

TEST_CASE("a regression in one slice fails the gate even when the overall metrics pass") {
  run_result cand = fixtures::make_run("slice c worse", 40, 2.0, 0.0, safeamp::presets::bf16_mixed);
  // Slice c holds 25 of 100 samples: its tolerance is widened by sqrt(100/25) = 2 -> 0.125 for bf16.
  cand.final_eval.slices[2].accuracy = 0.8 - 0.10;  // within 0.125: passes
  CHECK(evaluate_parity(reference(), cand, default_tolerances(safeamp::bf16)).outcome == verdict::pass);
  cand.final_eval.slices[2].accuracy = 0.8 - 0.15;  // beyond 0.125: fails, and only slice c is named
  const parity_result r = evaluate_parity(reference(), cand, default_tolerances(safeamp::bf16));
  CHECK(r.outcome == verdict::fail);
  REQUIRE(r.reasons.size() == 1);
  CHECK(has_reason(r, "slice c accuracy"));
  // A slice missing from the candidate fails too.
  cand.final_eval.slices.pop_back();
  CHECK(has_reason(evaluate_parity(reference(), cand, default_tolerances(safeamp::bf16)), "slice d present"));
}

TEST_CASE("non-finite losses fail on applied steps, not on skipped ones; skips are summarized") {
  run_result cand = fixtures::make_run("nan", 40, 2.0, 0.0, safeamp::presets::fp16_mixed);
  cand.steps[5].loss = std::numeric_limits<double>::infinity();
  cand.steps[5].skipped = true;
  cand.steps[5].found_inf = true;
  cand.steps[5].scale = 32768.0f;
  cand.steps[6].scale = 65536.0f;
  const parity_result ok = evaluate_parity(reference(), cand, default_tolerances(safeamp::fp16));
  CHECK_FALSE(has_reason(ok, "non-finite loss"));
  CHECK(ok.skips.skipped == 1);
  CHECK(ok.skips.steps == std::vector<std::int64_t>{5});
  CHECK(ok.skips.min_scale == 1.0f);
  CHECK(ok.skips.max_scale == 65536.0f);
  cand.steps[7].loss = std::numeric_limits<double>::quiet_NaN();  // applied step
  CHECK(has_reason(evaluate_parity(reference(), cand, default_tolerances(safeamp::fp16)), "non-finite loss"));
  run_result nan_eval = fixtures::make_run("nan eval", 40, 2.0, 0.0);
  nan_eval.final_eval.loss = std::numeric_limits<double>::quiet_NaN();
  CHECK(has_reason(evaluate_parity(reference(), nan_eval, default_tolerances(safeamp::bf16)), "held-out loss"));
}

TEST_CASE("golden logits: max abs error over rms and the elementwise relative error") {
  run_result cand = fixtures::make_run("logits", 40, 2.0, 0.0, safeamp::presets::bf16_mixed);
  // Reference logits cycle -2,-1,0,1,2: rms = sqrt((4+1+0+1+4)/5) = sqrt(2). Element 2 (value 0) moves by 0.5.
  cand.probe_logits[2] += 0.5f;
  const parity_result r = evaluate_parity(reference(), cand, default_tolerances(safeamp::bf16));
  for (const parity_check& c : r.checks) {
    if (c.name.rfind("golden logits max abs", 0) == 0) CHECK(c.value == Approx(0.5 / std::sqrt(2.0)));
    if (c.name.rfind("golden logits max rel", 0) == 0) CHECK(c.value == Approx(0.5 / (0.0 + std::sqrt(2.0))));
  }
  // 0.354 > 4 sqrt(2^-8) = 0.25: fails both logit checks.
  CHECK(has_reason(r, "golden logits max abs"));
  CHECK(has_reason(r, "golden logits max rel"));
  cand.probe_logits[2] = std::numeric_limits<float>::quiet_NaN();
  CHECK(evaluate_parity(reference(), cand, default_tolerances(safeamp::bf16)).outcome == verdict::fail);
  cand.probe_logits.pop_back();
  CHECK(has_reason(evaluate_parity(reference(), cand, default_tolerances(safeamp::bf16)), "golden logits shape"));
}

TEST_CASE("fallback: the first baseline that did not fail, else the last known-good, else the reference") {
  parity_result bad;
  bad.candidate = "fp16 no scaling";
  bad.policy = "fp16-mixed";
  bad.outcome = verdict::fail;
  bad.reasons = {"held-out loss ..."};
  parity_result bf16;
  bf16.candidate = "bf16-mixed";
  bf16.policy = "bf16-mixed";
  bf16.outcome = verdict::pass;
  const std::vector<std::string> baselines = {"bf16-mixed", "fp32"};

  fallback_decision d = decide_fallback(bad, baselines, {bad, bf16}, std::nullopt, "fp32");
  CHECK(d.run_instead == "bf16-mixed");
  CHECK(d.source.find("PASS in this run") != std::string::npos);
  CHECK(d.reasons == bad.reasons);

  bf16.outcome = verdict::fail;
  d = decide_fallback(bad, baselines, {bad, bf16}, std::nullopt, "fp32");
  CHECK(d.run_instead == "fp32");
  CHECK(d.source.find("bf16-mixed failed") != std::string::npos);

  const known_good_record good{"fp16-mixed dynamic", "fp16-mixed", "default", "abc", "2024-01-01T00:00:00Z"};
  d = decide_fallback(bad, {}, {bad}, good, "fp32");
  CHECK(d.run_instead == "fp16-mixed");
  CHECK(d.source.find("last known-good") != std::string::npos);
  d = decide_fallback(bad, {"bf16-mixed"}, {bad, bf16}, std::nullopt, "fp32");
  CHECK(d.run_instead == "fp32");
  // A baseline not run in this scenario is named but marked unverified.
  d = decide_fallback(bad, {"tf32"}, {bad}, std::nullopt, "fp32");
  CHECK(d.run_instead == "tf32");
  CHECK(d.source.find("verify") != std::string::npos);
  // A PASS needs no fallback.
  bf16.outcome = verdict::pass;
  CHECK(decide_fallback(bf16, baselines, {bad, bf16}, std::nullopt, "fp32").run_instead.empty());
}

TEST_CASE("known-good records and decisions persist in the output folder") {
  const fs::path dir = fs::temp_directory_path() / ("safeamp-fallback-test-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  prepare_output_folder(dir);
  CHECK_FALSE(read_known_good(dir / "known_good.json").has_value());
  const known_good_record good{"bf16 run", "bf16-mixed", "scn", "0123", "2024-05-01T10:00:00Z"};
  write_known_good(dir / "known_good.json", good);
  const auto back = read_known_good(dir / "known_good.json");
  REQUIRE(back.has_value());
  CHECK(*back == good);
  write_file_atomically(dir / "broken.json", "{\"candidate\": 1}");
  CHECK_THROWS_AS(read_known_good(dir / "broken.json"), safeamp::error);

  fallback_decision d;
  d.candidate = "x";
  d.run_instead = "fp32";
  append_decisions(dir / "decisions.jsonl", {d});
  append_decisions(dir / "decisions.jsonl", {d, d});
  const std::string text = read_whole_file(dir / "decisions.jsonl");
  CHECK(std::count(text.begin(), text.end(), '\n') == 3);
  CHECK(text.find("\"run_instead\":\"fp32\"") != std::string::npos);
  fs::remove_all(dir);
}
