// The parity gate on a regression (training.loss mse, l1 or huber): the trivial predictor is the best constant
// per output column, its loss hand-computed here for small target sets; the loss checks measure learning from
// it, the accuracy checks are N/A and take no part in the verdict, so a regression can PASS and FAIL.
#include <catch2/catch.hpp>
#include <cmath>
#include <stdexcept>

#include "report_fixtures.hpp"
#include "safeamp/error.hpp"
#include "safeamp/sim/parity.hpp"
#include "safeamp/sim/reference.hpp"
#include "safeamp/sim/regression_baseline.hpp"

using namespace safeamp::sim;

namespace {
matrix column(std::initializer_list<float> values) {
  matrix m(static_cast<Eigen::Index>(values.size()), 1);
  Eigen::Index r = 0;
  for (const float v : values) m(r++, 0) = v;
  return m;
}

double trivial(loss_kind kind, const matrix& targets) {
  return trivial_regression_baseline(kind, targets,
                                     std::vector<std::int32_t>(static_cast<std::size_t>(targets.rows()), 0), 1)
      .trivial_loss;
}

/// The fixture run as a regression: no prediction is a right class (a regression has none), and the trivial
/// predictor's loss is `trivial_loss` on the whole set and on every slice. Reference held-out loss 1.0.
run_result regression_run(const std::string& label, double trivial_loss,
                          const safeamp::precision_policy& policy = safeamp::presets::fp32) {
  run_result r = fixtures::make_run(label, 40, 1.0, 0.0, policy);
  for (auto& k : r.final_eval.rows.correct) k = 0;
  fixtures::summarize(r.final_eval);
  r.final_eval.classes.reset();  // a regression has no class frequencies
  r.final_eval.regression =
      regression_baseline{.loss = "mse",
                          .trivial_loss = trivial_loss,
                          .slice_trivial_loss = {trivial_loss, trivial_loss, trivial_loss, trivial_loss}};
  return r;
}

locked_reference regression_reference(double trivial_loss = 4.0) {
  return lock_reference(regression_run("reference fp32", trivial_loss), fixtures::make_manifest());
}

const parity_check& check(const parity_result& r, const std::string& prefix) {
  for (const parity_check& c : r.checks) {
    if (c.name.rfind(prefix, 0) == 0) return c;
  }
  FAIL("no check named " << prefix);
  throw std::logic_error("unreachable");
}
}  // namespace

TEST_CASE("the best constant predictor's loss, hand-computed") {
  // {1,2,3,4}: mean 2.5, squared deviations 2.25 0.25 0.25 2.25 -> 1.25; median in [2, 3], |deviations| from 2:
  // 1 0 1 2 -> 1.0; huber minimizer 2.5 by symmetry, residuals 1.5 0.5 0.5 1.5 -> 1.0 0.125 0.125 1.0 -> 0.5625.
  const matrix a = column({1, 2, 3, 4});
  CHECK(trivial(loss_kind::mse, a) == 1.25);
  CHECK(trivial(loss_kind::l1, a) == 1.0);
  CHECK(trivial(loss_kind::huber, a) == Approx(0.5625).epsilon(1e-15));
  // {0,0,0,10}: mean 2.5, (3 * 6.25 + 56.25) / 4 = 18.75; median 0 -> 10 / 4 = 2.5. Huber: for c in (0, 1) the
  // slope 3c - 1 is 0 at c = 1/3: 3 * 0.5 / 9 + (10 - 1/3 - 0.5) = 56/6, mean 7/3.
  const matrix b = column({0, 0, 0, 10});
  CHECK(trivial(loss_kind::mse, b) == 18.75);
  CHECK(trivial(loss_kind::l1, b) == 2.5);
  CHECK(best_constant(loss_kind::huber, {0, 0, 0, 10}) == Approx(1.0 / 3.0).epsilon(1e-15));
  CHECK(trivial(loss_kind::huber, b) == Approx(7.0 / 3.0).epsilon(1e-14));
  // A constant target: the trivial loss is 0.
  CHECK(trivial(loss_kind::mse, column({3, 3, 3})) == 0.0);
  // The wrong loss kind, no targets, slices that do not fit: refused by name.
  CHECK_THROWS_WITH(trivial(loss_kind::cross_entropy, a), Catch::Contains("mse, l1 or huber"));
  CHECK_THROWS_AS(best_constant(loss_kind::l1, {}), safeamp::error);
  CHECK_THROWS_WITH(trivial_regression_baseline(loss_kind::mse, a, {0, 0, 2, 0}, 2), Catch::Contains("slice [2]"));
  CHECK_THROWS_WITH(trivial_regression_baseline(loss_kind::mse, a, {0, 0}, 1), Catch::Contains("one per target row"));
}

TEST_CASE("per column constants fitted on every row, the loss per slice") {
  // Column 1: 1 3 5 7, mean 4, squared deviations 9 1 1 9; column 2: 10 10 10 30, mean 15, 25 25 25 225.
  // All 8 elements: 320 / 8 = 40. Slice 0 (rows 0, 1): (9 + 1 + 25 + 25) / 4 = 15; slice 1: (1 + 9 + 25 + 225) /
  // 4 = 65; slice 2 has no rows: 0.
  matrix t(4, 2);
  t << 1, 10, 3, 10, 5, 10, 7, 30;
  const regression_baseline b = trivial_regression_baseline(loss_kind::mse, t, {0, 0, 1, 1}, 3);
  CHECK(b.loss == "mse");
  CHECK(b.trivial_loss == 40.0);
  REQUIRE(b.slice_trivial_loss.size() == 3);
  CHECK(b.slice_trivial_loss[0] == 15.0);
  CHECK(b.slice_trivial_loss[1] == 65.0);
  CHECK(b.slice_trivial_loss[2] == 0.0);
  // l1: lower medians 3 and 10; |deviations| 2 0 2 4 and 0 0 0 20: 28 / 8 = 3.5.
  CHECK(trivial_regression_baseline(loss_kind::l1, t, {0, 0, 1, 1}, 2).trivial_loss == 3.5);
}

TEST_CASE("a regression that tracks its reference passes; its accuracy checks are N/A") {
  const locked_reference ref = regression_reference();
  const parity_result r = evaluate_parity(ref, regression_run("same", 4.0, safeamp::presets::fp16_mixed),
                                          gate_tolerances_for(safeamp::fp16));
  for (const std::string& u : r.undecided) INFO(u);
  CHECK(r.outcome == verdict::pass);
  CHECK(r.undecided.empty());
  CHECK(r.checks.size() == 15);  // the same checks as a classifier's, 5 of them N/A
  int not_applicable = 0;
  for (const parity_check& c : r.checks) {
    if (c.name.find("accuracy") != std::string::npos) {
      CHECK(c.status == verdict::not_applicable);
      CHECK(std::isnan(c.value));
      CHECK(c.basis.find("regression") != std::string::npos);
      ++not_applicable;
    } else {
      CHECK(c.status == verdict::pass);
    }
  }
  CHECK(not_applicable == 5);
  CHECK(std::string(verdict_name(verdict::not_applicable)) == "N/A");
  // The same predictions as a classifier without class frequencies (the gate's uniform fallback, accuracy 0 below
  // chance 0.2): INCONCLUSIVE, as before.
  locked_reference classifier = ref;
  classifier.final_eval.regression.reset();
  const parity_result c = evaluate_parity(classifier, regression_run("same", 4.0), gate_tolerances_for(safeamp::fp16));
  CHECK(c.outcome == verdict::inconclusive);
  CHECK(check(c, "held-out accuracy").undecided.find("not above chance") != std::string::npos);
}

TEST_CASE("a regression whose loss rose beyond its limit fails") {
  const locked_reference ref = regression_reference();
  // +0.03 on every prediction over a reference loss of 1.0: 0.03 > fp16's 0.0221 (paired sd 0: no sampling term).
  run_result worse = regression_run("worse", 4.0, safeamp::presets::fp16_mixed);
  fixtures::add_to_losses(worse.final_eval, -1, 0.03f, 0.03f);
  parity_result r = evaluate_parity(ref, worse, gate_tolerances_for(safeamp::fp16));
  CHECK(r.outcome == verdict::fail);
  CHECK(check(r, "held-out loss").status == verdict::fail);
  CHECK(check(r, "held-out loss").value == Approx(0.03).epsilon(1e-6));
  // +0.02 is within it.
  run_result close = regression_run("close", 4.0, safeamp::presets::fp16_mixed);
  fixtures::add_to_losses(close.final_eval, -1, 0.02f, 0.02f);
  CHECK(evaluate_parity(ref, close, gate_tolerances_for(safeamp::fp16)).outcome == verdict::pass);
  // Only slice b worse by 0.05: its own check fails (0.05 > 0.0221), the whole set (+0.0125) passes.
  run_result slice_b = regression_run("slice b", 4.0, safeamp::presets::fp16_mixed);
  fixtures::add_to_losses(slice_b.final_eval, 1, 0.05f, 0.05f);
  r = evaluate_parity(ref, slice_b, gate_tolerances_for(safeamp::fp16));
  CHECK(r.outcome == verdict::fail);
  CHECK(check(r, "slice b loss").status == verdict::fail);
  CHECK(check(r, "held-out loss").status == verdict::pass);
  // Corrupted outputs: probe predictions doubled fail the golden-output checks (max abs 2 / rms sqrt 2 = 1.41).
  run_result garbled = regression_run("garbled", 4.0, safeamp::presets::fp16_mixed);
  for (float& z : garbled.probe_logits) z *= 2.0f;
  r = evaluate_parity(ref, garbled, gate_tolerances_for(safeamp::fp16));
  CHECK(r.outcome == verdict::fail);
  CHECK(check(r, "golden logits max abs").status == verdict::fail);
}

TEST_CASE("a regression's loss checks measure learning from the best constant prediction") {
  // Reference loss 1.0 against a trivial 4.0: losing half of what was learned is (4 - 1) / 1 / 2 = 1.5. A declared
  // limit of 1.5 cannot decide, 1.49 can.
  const locked_reference ref = regression_reference(4.0);
  const run_result same = regression_run("same", 4.0);
  tolerance_overrides o;
  o.loss_rel = 1.5;
  parity_result r = evaluate_parity(ref, same, gate_tolerances_for(safeamp::fp16, o));
  CHECK(check(r, "held-out loss").status == verdict::inconclusive);
  CHECK(check(r, "held-out loss").undecided.find("best constant prediction (mse): 4") != std::string::npos);
  o.loss_rel = 1.49;
  CHECK(check(evaluate_parity(ref, same, gate_tolerances_for(safeamp::fp16, o)), "held-out loss").status ==
        verdict::pass);
  // A reference no better than the constant (trivial 0.9 < 1.0) cannot judge loss: INCONCLUSIVE, saying why.
  r = evaluate_parity(regression_reference(0.9), regression_run("same", 0.9), gate_tolerances_for(safeamp::fp16));
  CHECK(r.outcome == verdict::inconclusive);
  CHECK(check(r, "held-out loss").undecided.find("not better than the best constant") != std::string::npos);
  // The slices use their own trivial loss: slice c's constant is as good as the reference (1.0): only it is undecided.
  run_result cut = regression_run("reference fp32", 4.0);
  cut.final_eval.regression->slice_trivial_loss[2] = 1.0;
  r = evaluate_parity(lock_reference(cut, fixtures::make_manifest()), same, gate_tolerances_for(safeamp::fp16));
  CHECK(check(r, "slice c loss").status == verdict::inconclusive);
  CHECK(check(r, "slice b loss").status == verdict::pass);
  CHECK(check(r, "held-out loss").status == verdict::pass);
  // A trivial loss of 0 (constant targets) keeps a positive floor: no division by zero.
  run_result zero = regression_run("reference fp32", 0.0);
  for (float& l : zero.final_eval.rows.loss) l = 0.0f;
  fixtures::summarize(zero.final_eval);
  run_result zero_cand = zero;
  zero_cand.label = "zero";
  r = evaluate_parity(lock_reference(zero, fixtures::make_manifest()), zero_cand, gate_tolerances_for(safeamp::fp16));
  CHECK(check(r, "held-out loss").value == 0.0);
  CHECK(check(r, "held-out loss").status == verdict::inconclusive);
  // A hand-built reference whose baseline lacks a slice is refused, not read out of bounds.
  locked_reference short_baseline = regression_reference();
  short_baseline.final_eval.regression->slice_trivial_loss.pop_back();
  CHECK_THROWS_WITH(evaluate_parity(short_baseline, same, gate_tolerances_for(safeamp::fp16)),
                    Catch::Contains("one per slice (4)"));
}

TEST_CASE("a classifier's trivial predictor: the held-out labels' class frequencies, hand-computed") {
  // Labels 0 0 0 1 in slices 0 0 1 1: p(0) = 3/4, p(1) = 1/4. Whole set: loss -(3 ln 3/4 + ln 1/4) / 4 =
  // (0.863046 + 1.386294) / 4 = 0.562335 (the labels' entropy), accuracy (3 * 3/4 + 1/4) / 4 = 0.625 (3/4^2 + 1/4^2).
  // Slice 0 (two 0s): -ln 3/4 = 0.287682, 3/4. Slice 1 (a 0 and a 1): (0.287682 + 1.386294) / 2 = 0.836988, 1/2.
  // Slice 2 is empty: 0 and 0.
  const class_prior c = trivial_class_prior({0, 0, 0, 1}, {0, 0, 1, 1}, 3);
  CHECK(c.classes == 2);
  CHECK(c.trivial_loss == Approx(0.562335).epsilon(1e-6));
  CHECK(c.trivial_accuracy == Approx(0.625).epsilon(1e-12));
  REQUIRE(c.slice_trivial_loss.size() == 3);
  REQUIRE(c.slice_trivial_accuracy.size() == 3);
  CHECK(c.slice_trivial_loss[0] == Approx(0.287682).epsilon(1e-6));
  CHECK(c.slice_trivial_loss[1] == Approx(0.836988).epsilon(1e-6));
  CHECK(c.slice_trivial_loss[2] == 0.0);
  CHECK(c.slice_trivial_accuracy[0] == Approx(0.75).epsilon(1e-12));
  CHECK(c.slice_trivial_accuracy[1] == Approx(0.5).epsilon(1e-12));
  CHECK(c.slice_trivial_accuracy[2] == 0.0);
  // Labels need not start at 0 nor be consecutive: 1-based labels {1, 2} are two classes, not three.
  const class_prior one_based = trivial_class_prior({1, 2, 2, 7}, {0, 0, 0, 0}, 1);
  CHECK(one_based.classes == 3);
  CHECK(one_based.trivial_accuracy == Approx((0.25 * 0.25 * 2 + 0.5 * 0.5)).epsilon(1e-12));
  CHECK_THROWS_WITH(trivial_class_prior({}, {}, 1), Catch::Contains("at least one held-out label"));
  CHECK_THROWS_WITH(trivial_class_prior({0, -1}, {0, 0}, 1), Catch::Contains("label [1] is -1"));
  CHECK_THROWS_WITH(trivial_class_prior({0, 1}, {0, 1}, 1), Catch::Contains("slice [1] is 1"));
  CHECK_THROWS_WITH(trivial_class_prior({0, 1}, {0}, 1), Catch::Contains("one per label (2)"));
}

// A classifier that learned only how often each class occurs (9 in 10 predictions of class 0): its loss, the labels'
// entropy 0.3251 nats, is what a uniform predictor's ln 5 = 1.609 (the fixture's 5 columns) would call well learned.
// Measured from the frequencies it learned nothing, so no check of its loss can decide: INCONCLUSIVE, where the uniform
// baseline passed it (as the gate did before 2026-12-06, the defect this test is for).
TEST_CASE("a classifier no better than its labels' class frequencies is INCONCLUSIVE, not PASS") {
  const double p = 0.9, entropy = -(p * std::log(p) + (1 - p) * std::log(1 - p));  // 0.325083
  run_result r = fixtures::make_run("reference fp32", 40, entropy, 0.0);
  for (std::size_t i = 0; i < r.final_eval.rows.correct.size(); ++i) r.final_eval.rows.correct[i] = i % 10 != 9;
  fixtures::summarize(r.final_eval);               // accuracy 0.9: the majority class every time
  const double guess = p * p + (1 - p) * (1 - p);  // 0.82
  r.final_eval.classes = class_prior{.classes = 2,
                                     .trivial_loss = entropy,
                                     .trivial_accuracy = guess,
                                     .slice_trivial_loss = {entropy, entropy, entropy, entropy},
                                     .slice_trivial_accuracy = {guess, guess, guess, guess}};
  const locked_reference ref = lock_reference(r, fixtures::make_manifest());
  run_result same = r;
  same.label = "bf16";
  same.policy = safeamp::presets::bf16_mixed;
  const parity_result g = evaluate_parity(ref, same, gate_tolerances_for(safeamp::bf16));
  CHECK(g.outcome == verdict::inconclusive);
  const parity_check& loss = check(g, "held-out loss");
  CHECK(loss.status == verdict::inconclusive);
  CHECK(loss.undecided.find("not better than the held-out labels' class frequencies (0.3251 nats)") !=
        std::string::npos);
  // The same reference measured from uniform probabilities (ln 5: no class frequencies): every check decides, PASS.
  locked_reference uniform = ref;
  uniform.final_eval.classes.reset();
  CHECK(evaluate_parity(uniform, same, gate_tolerances_for(safeamp::bf16)).outcome == verdict::pass);
  // A reference that learned beyond the frequencies (loss 0.2 < 0.3251) with the same candidate decides again.
  run_result learned = fixtures::make_run("reference fp32", 40, 0.2, 0.0);
  learned.final_eval.classes = r.final_eval.classes;
  learned.final_eval.rows.correct = r.final_eval.rows.correct;
  fixtures::summarize(learned.final_eval);
  run_result learned_same = learned;
  learned_same.policy = safeamp::presets::bf16_mixed;
  const parity_result g2 = evaluate_parity(lock_reference(learned, fixtures::make_manifest()), learned_same,
                                           gate_tolerances_for(safeamp::bf16));
  CHECK(check(g2, "held-out loss").status == verdict::pass);
}
