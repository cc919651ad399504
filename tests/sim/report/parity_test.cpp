// The parity gate on hand-built runs: limits from the unit roundoff and the sample count (hand-derived
// values), each check failing on its own, the INCONCLUSIVE rules, the curve's definition, and fallbacks.
#include "safeamp/sim/parity.hpp"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "report_fixtures.hpp"
#include "safeamp/error.hpp"
#include "safeamp/format/format_names.hpp"
#include "safeamp/policy/policy_string.hpp"
#include "safeamp/sim/parity_fallback.hpp"
#include "safeamp/sim/report_files.hpp"

using namespace safeamp::sim;
namespace fs = std::filesystem;

namespace {
// The fixtures: 5 classes (trivial loss ln 5 = 1.6094, chance accuracy 0.2); reference held-out loss 1.0,
// accuracy 0.8 (the first 80 of every slice right); 400 held-out predictions in four slices of 100.
locked_reference reference(double base_loss = 1.0) {
  return lock_reference(fixtures::make_run("reference fp32", 40, base_loss, 0.0), fixtures::make_manifest());
}
bool has_reason(const parity_result& r, const std::string& what) {
  for (const std::string& s : r.reasons) {
    if (s.find(what) != std::string::npos) return true;
  }
  return false;
}
const parity_check& check(const parity_result& r, const std::string& prefix) {
  for (const parity_check& c : r.checks) {
    if (c.name.rfind(prefix, 0) == 0) return c;
  }
  FAIL("no check named " << prefix);
  throw std::logic_error("unreachable");
}
gate_tolerances fp16_gate() { return gate_tolerances_for(safeamp::fp16); }
gate_tolerances bf16_gate() { return gate_tolerances_for(safeamp::bf16); }
}  // namespace

TEST_CASE("format terms are k * sqrt(unit roundoff) of the coarsest format, per-op formats included") {
  // fp16: u = 2^-11, sqrt(u) = 2^-5.5 = 0.02209708691207961; bf16: u = 2^-8, sqrt = 2^-4 = 0.0625.
  const parity_tolerances f16 = default_tolerances(safeamp::fp16);
  CHECK(f16.loss_rel == Approx(0.02209708691207961).epsilon(1e-12));
  CHECK(f16.logit_abs == Approx(4 * 0.02209708691207961).epsilon(1e-12));
  CHECK(f16.max_skip_fraction == 0.05);
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
  // A per-op-class format and the accumulation format count too.
  CHECK(coarsest_format(safeamp::parse_policy("preset=fp32,matmul=e2m1fn")) == safeamp::parse_format("e2m1fn"));
  CHECK(coarsest_format(safeamp::parse_policy("preset=fp32,softmax=bf16")) == safeamp::bf16);
  CHECK(coarsest_format(safeamp::parse_policy("preset=fp32,accumulate=fp16")) == safeamp::fp16);
  // A compute field that differs from the matmul format changes no rounding in the simulator (its matmuls run in
  // format_for(matmul), still fp16 here): it must not widen the limits (e5m2's are 16 times fp16's).
  safeamp::precision_policy compute_only = safeamp::presets::fp16_mixed;
  compute_only.compute = safeamp::fp8_e5m2;
  CHECK(coarsest_format(compute_only) == safeamp::fp16);
  // After a preset, a policy string's compute carries matmul with it, so this one rounds its GEMMs in e5m2.
  CHECK(coarsest_format(safeamp::parse_policy("preset=fp16-mixed,compute=e5m2")) == safeamp::fp8_e5m2);
  // E2M1: 1 mantissa bit, u = 2^-2, sqrt(u) = 0.5.
  CHECK(default_tolerances(safeamp::parse_format("e2m1fn")).accuracy_abs == 0.5);
}

TEST_CASE("an identical run passes every check with zero error") {
  const parity_result r = evaluate_parity(reference(), fixtures::make_run("same", 40, 1.0, 0.0), fp16_gate());
  CHECK(r.outcome == verdict::pass);
  CHECK(r.reasons.empty());
  CHECK(r.undecided.empty());
  // 2 held-out + non-finite + skipped + curve + 2 logits + 4 slices x 2 = 15 checks.
  CHECK(r.checks.size() == 15);
  for (const parity_check& c : r.checks) {
    CHECK(c.value <= 0.0);
    CHECK(c.status == verdict::pass);
    CHECK_FALSE(c.basis.empty());
  }
}

TEST_CASE("quality limits: the larger of the format term and the paired sampling term") {
  // Identical predictions: every paired difference is 0, so the limits are the format terms.
  const parity_result same = evaluate_parity(reference(), fixtures::make_run("same", 40, 1.0, 0.0), fp16_gate());
  CHECK(check(same, "held-out loss").limit == Approx(0.02209708691207961).epsilon(1e-12));
  CHECK(check(same, "slice a accuracy").limit == Approx(0.02209708691207961).epsilon(1e-12));
  // 10 of the 80 right predictions of every slice become wrong: paired differences are 1 on 10 of 100
  // (mean 0.1, sd sqrt(100/99 * 0.1 * 0.9) = 0.30151134457776363), on 40 of 400 overall (sd
  // sqrt(400/399 * 0.09) = 0.30037570459305225). Limits 3 sd / sqrt(n): 0.09045340337332909 per slice,
  // 0.045056355688957836 overall; both exceeded by 0.1.
  run_result cand = fixtures::make_run("worse", 40, 1.0, 0.0, safeamp::presets::fp16_mixed);
  fixtures::lose_predictions(cand.final_eval, -1, 10);
  parity_result r = evaluate_parity(reference(), cand, fp16_gate());
  CHECK(check(r, "slice a accuracy").value == Approx(0.1).epsilon(1e-12));
  CHECK(check(r, "slice a accuracy").limit == Approx(0.09045340337332909).epsilon(1e-12));
  CHECK(check(r, "held-out accuracy").limit == Approx(0.045056355688957836).epsilon(1e-12));
  CHECK(has_reason(r, "slice a accuracy"));
  CHECK(has_reason(r, "held-out accuracy"));
  // 5 per slice: 0.05 per slice is within its noise (3 sqrt(100/99 * 0.05 * 0.95) / 10 = 0.06571287),
  // but the same 0.05 over all 400 predictions is not (3 sqrt(400/399 * 0.0475) / 20 = 0.03273268).
  cand = fixtures::make_run("slightly worse", 40, 1.0, 0.0, safeamp::presets::fp16_mixed);
  fixtures::lose_predictions(cand.final_eval, -1, 5);
  r = evaluate_parity(reference(), cand, fp16_gate());
  CHECK(check(r, "slice a accuracy").limit == Approx(0.06571287).epsilon(1e-6));
  CHECK(check(r, "slice a accuracy").status == verdict::pass);
  CHECK(check(r, "held-out accuracy").limit == Approx(0.03273268).epsilon(1e-6));
  CHECK(check(r, "held-out accuracy").status == verdict::fail);
  // Loss, paired: +0.9 on even predictions and -0.7 on odd ones (mean +0.1, sd 0.8 sqrt(400/399)): limit
  // 3 * 0.8010020 / 20 / 1.0 = 0.1201503 > 0.1: passes. +0.5/-0.3 (sd 0.4 sqrt(400/399)): 0.0600751 < 0.1.
  cand = fixtures::make_run("noisy", 40, 1.0, 0.0, safeamp::presets::fp16_mixed);
  fixtures::add_to_losses(cand.final_eval, -1, 0.9f, -0.7f);
  r = evaluate_parity(reference(), cand, fp16_gate());
  CHECK(check(r, "held-out loss").limit == Approx(0.1201503).epsilon(1e-5));
  CHECK(check(r, "held-out loss").status == verdict::pass);
  cand = fixtures::make_run("biased", 40, 1.0, 0.0, safeamp::presets::fp16_mixed);
  fixtures::add_to_losses(cand.final_eval, -1, 0.5f, -0.3f);
  r = evaluate_parity(reference(), cand, fp16_gate());
  CHECK(check(r, "held-out loss").value == Approx(0.1).epsilon(1e-6));
  CHECK(check(r, "held-out loss").limit == Approx(0.0600751).epsilon(1e-5));
  CHECK(check(r, "held-out loss").status == verdict::fail);
  // Where the format term is larger it wins: an E2M1 candidate's accuracy term is 0.5.
  const parity_result e2 = evaluate_parity(reference(), fixtures::make_run("same", 40, 1.0, 0.0),
                                           gate_tolerances_for(safeamp::parse_format("e2m1fn")));
  CHECK(check(e2, "held-out accuracy").limit == 0.5);
  // The fidelity checks use the format term alone.
  CHECK(check(same, "loss-curve gap").limit == Approx(0.02209708691207961).epsilon(1e-12));
  CHECK(check(same, "golden logits max abs").limit == Approx(4 * 0.02209708691207961).epsilon(1e-12));
}

TEST_CASE("a slice regression fails at its own limit even when the overall metrics pass") {
  run_result cand = fixtures::make_run("slice c worse", 40, 1.0, 0.0, safeamp::presets::bf16_mixed);
  // Slice c loses 6 of 100 (0.06 < bf16's 0.0625, sampling 3 sqrt(100/99 * 0.06 * 0.94) / 10 = 0.0716): passes.
  fixtures::lose_predictions(cand.final_eval, 2, 6);
  CHECK(evaluate_parity(reference(), cand, bf16_gate()).outcome == verdict::pass);
  // 9 of 100: 0.09 > max(0.0625, 3 sqrt(100/99 * 0.09 * 0.91) / 10 = 0.0863): fails, only slice c is named.
  fixtures::lose_predictions(cand.final_eval, 2, 3);
  const parity_result r = evaluate_parity(reference(), cand, bf16_gate());
  CHECK(r.outcome == verdict::fail);
  REQUIRE(r.reasons.size() == 1);
  CHECK(has_reason(r, "slice c accuracy"));
  // A slice missing from the candidate fails too.
  cand.final_eval.slices.pop_back();
  CHECK(has_reason(evaluate_parity(reference(), cand, bf16_gate()), "slice d present"));
}

TEST_CASE("held-out loss: only an increase counts; non-finite fails") {
  // +0.02 on every prediction: 0.02 < fp16's 0.0221 passes; +0.03 fails; a declared 0.05 passes it.
  run_result cand = fixtures::make_run("b", 40, 1.0, 0.0);
  fixtures::add_to_losses(cand.final_eval, -1, 0.02f, 0.02f);
  CHECK(evaluate_parity(reference(), cand, fp16_gate()).outcome == verdict::pass);
  fixtures::add_to_losses(cand.final_eval, -1, 0.01f, 0.01f);
  CHECK(has_reason(evaluate_parity(reference(), cand, fp16_gate()), "held-out loss"));
  tolerance_overrides o;
  o.loss_rel = o.slice_loss_rel = 0.05;
  CHECK(evaluate_parity(reference(), cand, gate_tolerances_for(safeamp::fp16, o)).outcome == verdict::pass);
  run_result better = fixtures::make_run("c", 40, 1.0, 0.0);
  fixtures::add_to_losses(better.final_eval, -1, -0.2f, -0.2f);
  CHECK_FALSE(has_reason(evaluate_parity(reference(), better, fp16_gate()), "held-out loss"));
  run_result nan_eval = fixtures::make_run("nan eval", 40, 1.0, 0.0);
  nan_eval.final_eval.loss = std::numeric_limits<double>::quiet_NaN();
  CHECK(has_reason(evaluate_parity(reference(), nan_eval, bf16_gate()), "held-out loss"));
  run_result inf_row = fixtures::make_run("inf row", 40, 1.0, 0.0);
  inf_row.final_eval.rows.loss[7] = std::numeric_limits<float>::infinity();
  fixtures::summarize(inf_row.final_eval);
  CHECK(has_reason(evaluate_parity(reference(), inf_row, bf16_gate()), "held-out loss"));
}

TEST_CASE("relative losses divide by a floor: a near-zero reference loss does not fail on noise") {
  locked_reference ref = reference();
  run_result cand = fixtures::make_run("noise", 40, 1.0, 0.0, safeamp::presets::fp16_mixed);
  for (std::size_t i = 0; i < 100; ++i) {  // slice a: an easy class, nearly perfectly classified
    ref.final_eval.rows.loss[i] = 2.4e-5f;
    cand.final_eval.rows.loss[i] = 1.1e-4f;  // +358 % relative to 2.4e-5, but 8.6e-5 nats
  }
  fixtures::summarize(ref.final_eval);
  fixtures::summarize(cand.final_eval);
  const parity_result r = evaluate_parity(ref, cand, fp16_gate());
  // Floor 0.01 ln 5 = 0.016094379124341: (1.1e-4 - 2.4e-5) / 0.016094 = 0.0053435 < fp16's 0.0221.
  const double diff = static_cast<double>(1.1e-4f) - static_cast<double>(2.4e-5f);
  CHECK(check(r, "slice a loss").value == Approx(diff / 0.016094379124341).epsilon(1e-6));
  CHECK(check(r, "slice a loss").status == verdict::pass);
  // A real regression of the same slice still fails: 0.05 nats is 3.1 times the floor.
  for (std::size_t i = 0; i < 100; ++i) cand.final_eval.rows.loss[i] = 0.05f;
  fixtures::summarize(cand.final_eval);
  CHECK(check(evaluate_parity(ref, cand, fp16_gate()), "slice a loss").status == verdict::fail);
}

TEST_CASE("INCONCLUSIVE: a slice too small to judge") {
  // Slice d keeps `n` predictions; the others move to slice c (same layout in reference and candidate).
  const auto with_slice_d = [](run_result run, int n) {
    for (std::size_t i = 0; i < 400; ++i) {
      if (run.final_eval.rows.slice[i] == 3 && i >= 300 + static_cast<std::size_t>(n)) run.final_eval.rows.slice[i] = 2;
    }
    fixtures::summarize(run.final_eval);
    return run;
  };
  const run_result base = fixtures::make_run("reference fp32", 40, 1.0, 0.0);
  locked_reference ref = lock_reference(with_slice_d(base, 29), fixtures::make_manifest());
  const parity_result r = evaluate_parity(ref, with_slice_d(fixtures::make_run("same", 40, 1.0, 0.0), 29), fp16_gate());
  CHECK(r.outcome == verdict::inconclusive);
  CHECK(r.reasons.empty());
  CHECK(check(r, "slice d accuracy").status == verdict::inconclusive);
  CHECK(check(r, "slice d accuracy").undecided.find("too small") != std::string::npos);
  CHECK(check(r, "slice d accuracy").why_undecided == undecided_reason::too_few_samples);
  CHECK(check(r, "slice d accuracy").tolerance_key == "slice_accuracy_abs");
  CHECK(check(r, "slice c accuracy").why_undecided == undecided_reason::none);
  CHECK(check(r, "slice c accuracy").status == verdict::pass);
  REQUIRE(r.undecided.size() == 2);  // loss and accuracy of slice d
  // Beyond even its limit a small slice still fails.
  run_result bad = with_slice_d(fixtures::make_run("bad", 40, 1.0, 0.0), 29);
  fixtures::lose_predictions(bad.final_eval, 3, 29);
  CHECK(evaluate_parity(ref, bad, fp16_gate()).outcome == verdict::fail);
  // 30 predictions are enough.
  ref = lock_reference(with_slice_d(base, 30), fixtures::make_manifest());
  CHECK(evaluate_parity(ref, with_slice_d(fixtures::make_run("same", 40, 1.0, 0.0), 30), fp16_gate()).outcome ==
        verdict::pass);
  // Without per-prediction results nothing can be paired: INCONCLUSIVE, never PASS.
  run_result no_rows = fixtures::make_run("no rows", 40, 1.0, 0.0);
  no_rows.final_eval.rows = {};
  const parity_result nr = evaluate_parity(reference(), no_rows, fp16_gate());
  CHECK(nr.outcome == verdict::inconclusive);
  CHECK(check(nr, "held-out loss").undecided.find("per-prediction") != std::string::npos);
  CHECK(check(nr, "held-out loss").why_undecided == undecided_reason::unpaired);
}

TEST_CASE("INCONCLUSIVE: a limit so wide that a candidate which lost half of what was learned passes") {
  // Accuracy: reference 0.8, chance 0.2: half of what was learned is 0.3. Declared 0.301 cannot decide, 0.299 can.
  tolerance_overrides o;
  o.accuracy_abs = 0.301;
  const run_result same = fixtures::make_run("same", 40, 1.0, 0.0);
  parity_result r = evaluate_parity(reference(), same, gate_tolerances_for(safeamp::fp16, o));
  CHECK(check(r, "held-out accuracy").status == verdict::inconclusive);
  CHECK(check(r, "held-out accuracy").why_undecided == undecided_reason::limit_too_wide);
  CHECK(check(r, "held-out accuracy").source == limit_source::declared);
  CHECK(check(r, "held-out accuracy").tolerance_key == "accuracy_abs");
  CHECK(check(r, "held-out loss").source == limit_source::format);  // fp16's 0.0221 beats sampling's 0 (no noise)
  CHECK(r.outcome == verdict::inconclusive);
  o.accuracy_abs = 0.299;
  CHECK(check(evaluate_parity(reference(), same, gate_tolerances_for(safeamp::fp16, o)), "held-out accuracy").status ==
        verdict::pass);
  // Loss: (ln 5 - 1.0) / 1.0 = 0.6094 from a uniform predictor; half is 0.3047.
  o = {};
  o.loss_rel = 0.305;
  CHECK(check(evaluate_parity(reference(), same, gate_tolerances_for(safeamp::fp16, o)), "held-out loss").status ==
        verdict::inconclusive);
  o.loss_rel = 0.304;
  CHECK(check(evaluate_parity(reference(), same, gate_tolerances_for(safeamp::fp16, o)), "held-out loss").status ==
        verdict::pass);
  // A reference no better than a uniform predictor (loss 2.0 > ln 5) cannot judge loss.
  r = evaluate_parity(reference(2.0), fixtures::make_run("same", 40, 2.0, 0.0), fp16_gate());
  CHECK(check(r, "held-out loss").status == verdict::inconclusive);
  CHECK(check(r, "held-out loss").why_undecided == undecided_reason::reference_untrained);  // ln 5 - 2 < 0
  // Logits -2..2, rms sqrt 2: all-zero logits give max rel 2 / (2 + sqrt 2) = 0.5858, half 0.2929.
  o = {};
  o.logit_rel = 0.293;
  CHECK(check(evaluate_parity(reference(), same, gate_tolerances_for(safeamp::fp16, o)), "golden logits max rel")
            .status == verdict::inconclusive);
  o.logit_rel = 0.292;
  CHECK(check(evaluate_parity(reference(), same, gate_tolerances_for(safeamp::fp16, o)), "golden logits max rel")
            .status == verdict::pass);
  // ... and max abs / rms 2 / sqrt 2 = 1.4142, half 0.7071.
  o = {};
  o.logit_abs = 0.708;
  CHECK(check(evaluate_parity(reference(), same, gate_tolerances_for(safeamp::fp16, o)), "golden logits max abs")
            .status == verdict::inconclusive);
  o.logit_abs = 0.707;
  CHECK(check(evaluate_parity(reference(), same, gate_tolerances_for(safeamp::fp16, o)), "golden logits max abs")
            .status == verdict::pass);
  // The curve: a run stuck at its first loss has gap 0.79995 (moving average of 4), half 0.39998.
  o = {};
  o.curve_gap_rel = 0.4;
  const parity_result wide_curve = evaluate_parity(reference(), same, gate_tolerances_for(safeamp::fp16, o));
  CHECK(check(wide_curve, "loss-curve gap").status == verdict::inconclusive);
  CHECK(check(wide_curve, "loss-curve gap").tolerance_key == "curve_gap_rel");
  CHECK(check(wide_curve, "loss-curve gap").source == limit_source::declared);
  CHECK(check(wide_curve, "golden logits max abs").source == limit_source::format);
  o.curve_gap_rel = 0.3999;
  CHECK(check(evaluate_parity(reference(), same, gate_tolerances_for(safeamp::fp16, o)), "loss-curve gap").status ==
        verdict::pass);
}

TEST_CASE("a catastrophic E2M1 candidate is never PASS: its accuracy checks cannot decide at sqrt(u) = 0.5") {
  run_result cand = fixtures::make_run("e2m1 matmul", 40, 1.0, 0.0, safeamp::parse_policy("preset=fp32,matmul=e2m1fn"));
  fixtures::lose_predictions(cand.final_eval, -1, 25);  // 25 points lost everywhere
  const parity_result r = evaluate_parity(reference(), cand, gate_tolerances_for(coarsest_format(cand.policy)));
  CHECK(r.outcome != verdict::pass);
  for (const parity_check& c : r.checks) {
    if (c.name.find("accuracy") != std::string::npos) CHECK(c.status == verdict::inconclusive);
  }
}

TEST_CASE("loss-curve gap: mean over steps of the moving-average gap; skipped steps are left out") {
  // Reference l_t = 1 + 1/(1+t), 40 steps, moving average of 40/10 = 4 steps.
  CHECK(curve_smoothing_window(40) == 4);
  CHECK(curve_smoothing_window(5) == 1);
  // A finite spike on the applied step 38 (loss doubled) moves the averages of steps 38 and 39 by l_38 / 4.
  run_result cand = fixtures::make_run("spike", 40, 1.0, 0.0, safeamp::presets::fp16_mixed);
  const double l38 = 1.0 + 1.0 / 39.0;
  cand.steps[38].loss = 2.0 * l38;
  const double a38 = 1.0 + (1.0 / 36 + 1.0 / 37 + 1.0 / 38 + 1.0 / 39) / 4.0;
  const double a39 = 1.0 + (1.0 / 37 + 1.0 / 38 + 1.0 / 39 + 1.0 / 40) / 4.0;
  const double expected = (l38 / 4.0 / a38 + l38 / 4.0 / a39) / 40.0;  // = 0.012491...
  CHECK(check(evaluate_parity(reference(), cand, fp16_gate()), "loss-curve gap").value ==
        Approx(expected).epsilon(1e-9));
  // The same spike on a skipped step changed no weights: it is left out (the average of 38 uses 35..37).
  cand.steps[38].skipped = true;
  const double b38 = 1.0 + (1.0 / 36 + 1.0 / 37 + 1.0 / 38) / 3.0;
  const double b39 = 1.0 + (1.0 / 37 + 1.0 / 38 + 1.0 / 40) / 3.0;
  const double expected_skipped = (std::abs(b38 - a38) / a38 + std::abs(b39 - a39) / a39) / 40.0;
  CHECK(check(evaluate_parity(reference(), cand, fp16_gate()), "loss-curve gap").value ==
        Approx(expected_skipped).epsilon(1e-9));
  // Every training loss 1.1x the reference's: the gap is exactly 0.10 and fails fp16's 0.0221.
  const parity_result r = evaluate_parity(reference(), fixtures::make_run("worse", 40, 1.0, 0.10), fp16_gate());
  CHECK(check(r, "loss-curve gap").value == Approx(0.10).epsilon(1e-9));
  CHECK(has_reason(r, "loss-curve gap"));
}

TEST_CASE("skipped steps: at most 5 % by default, a declared fraction otherwise") {
  run_result cand = fixtures::make_run("skips", 40, 1.0, 0.0, safeamp::presets::fp16_mixed);
  cand.steps[10].skipped = cand.steps[20].skipped = true;  // 2 of 40 = 0.05: allowed
  CHECK_FALSE(has_reason(evaluate_parity(reference(), cand, fp16_gate()), "skipped steps"));
  cand.steps[30].skipped = true;  // 3 of 40 = 0.075
  const parity_result r = evaluate_parity(reference(), cand, fp16_gate());
  CHECK(has_reason(r, "skipped steps"));
  CHECK(check(r, "skipped steps").value == 0.075);
  tolerance_overrides o;
  o.max_skip_fraction = 0.1;
  CHECK_FALSE(has_reason(evaluate_parity(reference(), cand, gate_tolerances_for(safeamp::fp16, o)), "skipped steps"));
}

TEST_CASE("non-finite losses fail on applied steps, not on skipped ones; skips are summarized") {
  run_result cand = fixtures::make_run("nan", 40, 1.0, 0.0, safeamp::presets::fp16_mixed);
  cand.steps[5].loss = std::numeric_limits<double>::infinity();
  cand.steps[5].skipped = true;
  cand.steps[5].found_inf = true;
  cand.steps[5].scale = 32768.0f;
  cand.steps[6].scale = 65536.0f;
  const parity_result ok = evaluate_parity(reference(), cand, fp16_gate());
  CHECK_FALSE(has_reason(ok, "non-finite loss"));
  CHECK(ok.skips.skipped == 1);
  CHECK(ok.skips.steps == std::vector<std::int64_t>{5});
  CHECK(ok.skips.min_scale == 1.0f);
  CHECK(ok.skips.max_scale == 65536.0f);
  cand.steps[7].loss = std::numeric_limits<double>::quiet_NaN();  // applied step
  CHECK(has_reason(evaluate_parity(reference(), cand, fp16_gate()), "non-finite loss"));
}

TEST_CASE("a run whose every step was skipped has no loss curve to compare, and says so") {
  run_result cand = fixtures::make_run("all skipped", 40, 1.0, 0.0, safeamp::presets::fp16_mixed);
  for (step_record& s : cand.steps) s.skipped = true;
  const parity_result r = evaluate_parity(reference(), cand, fp16_gate());
  CHECK(r.outcome == verdict::fail);
  const parity_check& gap = check(r, "loss-curve gap");
  CHECK(gap.status == verdict::fail);
  CHECK(gap.detail ==
        "no candidate step with a finite loss to compare (40 of 40 steps skipped, 0 applied with a "
        "non-finite loss)");
  CHECK(check(r, "skipped steps").value == 1.0);
}

TEST_CASE("golden logits: max abs error over rms and the elementwise relative error") {
  run_result cand = fixtures::make_run("logits", 40, 1.0, 0.0, safeamp::presets::bf16_mixed);
  // Reference logits cycle -2,-1,0,1,2: rms = sqrt((4+1+0+1+4)/5) = sqrt(2). Element 2 (value 0) moves by 0.5.
  cand.probe_logits[2] += 0.5f;
  const parity_result r = evaluate_parity(reference(), cand, bf16_gate());
  CHECK(check(r, "golden logits max abs").value == Approx(0.5 / std::sqrt(2.0)));
  CHECK(check(r, "golden logits max rel").value == Approx(0.5 / (0.0 + std::sqrt(2.0))));
  // 0.354 > 4 sqrt(2^-8) = 0.25: fails both logit checks.
  CHECK(has_reason(r, "golden logits max abs"));
  CHECK(has_reason(r, "golden logits max rel"));
  cand.probe_logits[2] = std::numeric_limits<float>::quiet_NaN();
  CHECK(evaluate_parity(reference(), cand, bf16_gate()).outcome == verdict::fail);
  cand.probe_logits.pop_back();
  CHECK(has_reason(evaluate_parity(reference(), cand, bf16_gate()), "golden logits shape"));
}

// A slice with no held-out predictions (a class the held-out set lacks) is N/A, not an undecided check that would
// keep every candidate INCONCLUSIVE.
TEST_CASE("a slice without predictions is not applicable, and the verdict is decided by the others") {
  run_result ref_run = fixtures::make_run("reference fp32", 40, 1.0, 0.0);
  for (auto& k : ref_run.final_eval.rows.slice) k = k == 3 ? 2 : k;  // slice d empty, c holds 200
  fixtures::summarize(ref_run.final_eval);
  REQUIRE(ref_run.final_eval.slices[3].count == 0);
  const locked_reference ref = lock_reference(ref_run, fixtures::make_manifest());
  run_result cand = ref_run;
  cand.policy = safeamp::presets::bf16_mixed;
  const parity_result r = evaluate_parity(ref, cand, bf16_gate());
  for (const std::string& u : r.undecided) INFO(u);
  CHECK(r.outcome == verdict::pass);
  int not_applicable = 0;
  for (const parity_check& c : r.checks) {
    if (c.name.rfind("slice d ", 0) != 0) continue;
    CHECK(c.status == verdict::not_applicable);
    CHECK(c.basis.find("no predictions in this slice") != std::string::npos);
    ++not_applicable;
  }
  CHECK(not_applicable == 2);
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
  // A baseline that could not be verified is passed over too, and says so.
  bf16.outcome = verdict::inconclusive;
  d = decide_fallback(bad, baselines, {bad, bf16}, std::nullopt, "fp32");
  CHECK(d.run_instead == "fp32");
  CHECK(d.source.find("bf16-mixed was inconclusive") != std::string::npos);
  // An INCONCLUSIVE candidate gets a fallback too, with the undecided checks as its reasons.
  parity_result undecided = bad;
  undecided.outcome = verdict::inconclusive;
  undecided.reasons.clear();
  undecided.undecided = {"slice d accuracy (drop): 12 predictions: too small to judge"};
  d = decide_fallback(undecided, {"fp32"}, {undecided}, std::nullopt, "fp32");
  CHECK(d.run_instead == "fp32");
  REQUIRE(d.reasons.size() == 1);
  CHECK(d.reasons[0].find("too small") != std::string::npos);
  bf16.outcome = verdict::fail;

  bad.scaler = "none";
  const known_good_record good{"fp16-mixed dynamic", "fp16-mixed", "dynamic", "default", "abc", "2024-01-01T00:00:00Z"};
  d = decide_fallback(bad, {}, {bad}, good, "fp32");
  CHECK(d.run_instead == "fp16-mixed");
  CHECK(d.source.find("last known-good") != std::string::npos);
  CHECK(d.source.find("scaler dynamic") != std::string::npos);
  // A known-good record of the very policy and scaler that just failed is passed over, saying so.
  known_good_record same = good;
  same.scaler = "none";
  d = decide_fallback(bad, {}, {bad}, same, "fp32");
  CHECK(d.run_instead == "fp32");
  CHECK(d.source.find("is this candidate's own policy and scaler") != std::string::npos);
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

// A baseline named by policy never sends a failed candidate back to its own policy: the candidate's own run is
// not a run "of that policy in this scenario" that could vouch for it, and a run with injected faults vouches for
// nothing. Another run of the policy that passed under another scaler is named with that scaler.
TEST_CASE("fallback by policy name: not the failing candidate's own policy, not a faulted run; the scaler is named") {
  parity_result bad;
  bad.candidate = "fp16 no scaling";
  bad.policy = "fp16-mixed";
  bad.scaler = "none";
  bad.outcome = verdict::fail;
  // Baselines fp16-mixed then fp32, and no other fp16-mixed run: fp16-mixed is what failed, so fp32.
  fallback_decision d = decide_fallback(bad, {"fp16-mixed", "fp32"}, {bad}, std::nullopt, "fp32");
  CHECK(d.run_instead == "fp32");
  CHECK(d.source.find("fp16-mixed failed in this run (as fp16 no scaling)") != std::string::npos);
  CHECK(d.source.find("not run in this scenario") == std::string::npos);
  // Alone, the baseline falls through to the reference policy.
  CHECK(decide_fallback(bad, {"fp16-mixed"}, {bad}, std::nullopt, "fp32").run_instead == "fp32");
  // Another fp16-mixed run passed, but with injected faults: no evidence, passed over.
  parity_result faulted;
  faulted.candidate = "fp16-mixed injected overflows";
  faulted.policy = "fp16-mixed";
  faulted.scaler = "dynamic";
  faulted.faulted = true;
  faulted.outcome = verdict::pass;
  d = decide_fallback(bad, {"fp16-mixed", "fp32"}, {bad, faulted}, std::nullopt, "fp32");
  CHECK(d.run_instead == "fp32");
  CHECK(d.source.find("ran otherwise only with injected faults") != std::string::npos);
  // bf16-mixed as a baseline, run only with faults: passed over, saying so.
  parity_result bf16_faulted = faulted;
  bf16_faulted.candidate = "bf16 spikes";
  bf16_faulted.policy = "bf16-mixed";
  d = decide_fallback(bad, {"bf16-mixed", "fp32"}, {bad, bf16_faulted}, std::nullopt, "fp32");
  CHECK(d.run_instead == "fp32");
  CHECK(d.source.find("bf16-mixed ran only with injected faults in this run") != std::string::npos);
  // The same faulted run named as a baseline by its label: passed over as well.
  d = decide_fallback(bad, {"fp16-mixed injected overflows", "fp32"}, {bad, faulted}, std::nullopt, "fp32");
  CHECK(d.run_instead == "fp32");
  // Without faults it vouches for the policy, under its own scaler, which the source names.
  faulted.faulted = false;
  d = decide_fallback(bad, {"fp16-mixed", "fp32"}, {bad, faulted}, std::nullopt, "fp32");
  CHECK(d.run_instead == "fp16-mixed");
  CHECK(d.source.find("PASS in this run as fp16-mixed injected overflows, scaler dynamic") != std::string::npos);
}

TEST_CASE("a known-good record is checked as safeamp sim writes it: what it names reaches terminals and reports") {
  const known_good_record good{"fp16 run",
                               "params=fp32,compute=fp16,output=fp16",
                               "dynamic (init 65536)",
                               "scn",
                               "e216af836a523c4b",
                               "2026-12-07T03:30:00Z"};
  CHECK(known_good_from_json_text(known_good_json_text(good), "k.json") == good);
  const auto with = [&good](const char* key, const nlohmann::json& value) {
    nlohmann::json j = nlohmann::json::parse(known_good_json_text(good));
    if (value.is_discarded()) {
      j.erase(key);
    } else {
      j[key] = value;
    }
    return j.dump();
  };
  const nlohmann::json missing = nlohmann::json::value_t::discarded;
  const auto refused = [](const std::string& text, const std::string& field, const std::string& why) {
    try {
      (void)known_good_from_json_text(text, "out/known_good.json");
      FAIL_CHECK("accepted: " << text);
    } catch (const safeamp::error& e) {
      const std::string m = e.what();
      CHECK_THAT(m, Catch::Contains("known-good record 'out/known_good.json' " + field) && Catch::Contains(why) &&
                        Catch::Contains("a known_good.json written by safeamp sim (delete it to start afresh)"));
    }
  };
  refused(with("candidate", missing), "candidate", "missing");
  refused(with("candidate", ""), "candidate", "empty");
  refused(with("candidate", 7), "candidate", "not a string");
  refused(with("candidate", "run\x1b[2J"), "candidate", "control characters");
  refused(with("candidate", std::string(129, 'c')), "candidate", "129 bytes, at most 128");
  CHECK(known_good_from_json_text(with("candidate", std::string(128, 'c')), "k").candidate.size() == 128);
  refused(with("policy", "fp17-mixed"), "policy", "not a preset or a policy string");
  refused(with("policy", missing), "policy", "missing");
  refused(with("scaler", "dynamic\n"), "scaler", "control characters");
  CHECK(known_good_from_json_text(with("scaler", missing), "k").scaler.empty());  // records before 2026-12-06
  refused(with("scenario", std::string(257, 's')), "scenario", "257 bytes, at most 256");
  refused(with("reference_id", "E216AF836A523C4B"), "reference_id", "not 16 lowercase hex digits");
  refused(with("reference_id", "e216af836a523c4"), "reference_id", "not 16 lowercase hex digits");
  refused(with("reference_id", "e216af836a523c4g"), "reference_id", "not 16 lowercase hex digits");
  refused(with("recorded_utc", "2026-12-07 03:30:00Z"), "recorded_utc", "not a UTC time");
  refused(with("recorded_utc", "2026-12-07T03:30:0xZ"), "recorded_utc", "not a UTC time");
  refused(with("recorded_utc", "2026-12-07T03:30:00+"), "recorded_utc", "not a UTC time");
  refused("[1, 2]", "(the file)", "not a JSON object");
  CHECK_THROWS_WITH(known_good_from_json_text("{", "k"), Catch::Contains("known-good record"));
}

TEST_CASE("known-good records and decisions persist in the output folder") {
  const fs::path dir = fs::temp_directory_path() / ("safeamp-fallback-test-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  prepare_output_folder(dir);
  CHECK_FALSE(read_known_good(dir / "known_good.json").has_value());
  const known_good_record good{"bf16 run", "bf16-mixed", "none", "scn", "e216af836a523c4b", "2024-05-01T10:00:00Z"};
  write_known_good(dir / "known_good.json", good);
  const auto back = read_known_good(dir / "known_good.json");
  REQUIRE(back.has_value());
  CHECK(*back == good);
  // A record written before it carried the scaler reads with an empty one.
  write_file_atomically(dir / "old.json", R"({"candidate": "a", "policy": "fp32", "scenario": "s",
                                              "reference_id": "0a30c632d0cfd3e8",
                                              "recorded_utc": "2024-05-01T10:00:00Z"})");
  CHECK(read_known_good(dir / "old.json")->scaler.empty());
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
