// The parity gate on trained regressions (not fixtures): scenarios/seed-amp-step.json (Linear(16, 1), mse, 64
// rows). The reference stores the targets' variance as its trivial loss (checked against a test-side mean and
// variance of y.npy); fp16 and bf16 autocast PASS, E5M2 compute and outputs FAIL on the held-out loss, a run
// with injected overflows FAILs; under huber fp16 PASSes, under l1 the loss checks decide against the median.
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <sstream>

#include "safeamp/sim/npy.hpp"
#include "safeamp/sim/parity.hpp"
#include "safeamp/sim/reference.hpp"
#include "safeamp/sim/scenario.hpp"
#include "safeamp/sim/trainer.hpp"

using namespace safeamp::sim;

namespace {
const std::string scenario_path = std::string(SAFEAMP_SCENARIOS_DIR) + "/seed-amp-step.json";

scenario seed_scenario() {
  std::ifstream in(scenario_path);
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  return parse_scenario(text.str(), scenario_path);
}

parity_result gate(const scenario& s, const locked_reference& ref, const candidate_spec& c) {
  return evaluate_parity(ref, train(candidate_config(s, c)), tolerances_for(s, c));
}

void require_accuracy_not_applicable(const parity_result& r) {
  for (const parity_check& c : r.checks) {
    if (c.name.find("accuracy") != std::string::npos) CHECK(c.status == verdict::not_applicable);
  }
}
}  // namespace

TEST_CASE("trained regression: fp16 and bf16 pass, E5M2 outputs and injected overflows fail") {
  scenario s = seed_scenario();
  REQUIRE(s.candidates.size() == 3);
  const run_config rc = reference_config(s);
  const locked_reference ref = lock_reference(train(rc), manifest_for(s, rc));
  REQUIRE(ref.final_eval.regression.has_value());
  // The trivial loss of mse: the population variance of the 64 targets (two-pass, here), 0.0071543268535750664
  // by an independent Python computation on the same file.
  const npy_array y = read_npy(std::string(SAFEAMP_SCENARIOS_DIR) + "/seed-amp-step/y.npy", "y");
  double mean = 0.0;
  for (const float v : y.values) mean += v;
  mean /= static_cast<double>(y.values.size());
  double var = 0.0;
  for (const float v : y.values) var += (v - mean) * (v - mean);
  var /= static_cast<double>(y.values.size());
  CHECK(ref.final_eval.regression->loss == "mse");
  CHECK(ref.final_eval.regression->trivial_loss == Approx(var).epsilon(1e-12));
  CHECK(ref.final_eval.regression->trivial_loss == Approx(0.0071543268535750664).epsilon(1e-12));
  REQUIRE(ref.final_eval.regression->slice_trivial_loss.size() == 1);  // one slice, "all"
  // The reference learned: far below the constant prediction.
  REQUIRE(ref.final_eval.loss < 0.01 * ref.final_eval.regression->trivial_loss);

  for (std::size_t i = 0; i < 2; ++i) {  // fp16 autocast + GradScaler, bf16 autocast
    const parity_result r = gate(s, ref, s.candidates[i]);
    INFO(s.candidates[i].name);
    for (const std::string& why : r.reasons) INFO(why);
    for (const std::string& why : r.undecided) INFO(why);
    CHECK(r.outcome == verdict::pass);
    require_accuracy_not_applicable(r);
  }
  const parity_result e5m2 = gate(s, ref, s.candidates[2]);
  CHECK(e5m2.outcome == verdict::fail);
  bool loss_failed = false;
  for (const parity_check& c : e5m2.checks) {
    if (c.name == "held-out loss (rel. increase)") loss_failed = c.status == verdict::fail;
  }
  CHECK(loss_failed);

  // fp16 with 15 overflowing gradients (steps 20-34): the scaler skips them, 7.5 % > 5 % of the steps.
  candidate_spec faulted = s.candidates[0];
  faulted.name = "fp16 injected overflows";
  faulted.faults = {fault_spec{.kind = fault_kind::gradient_inf, .steps = {}, .target = {}, .factor = 1.0}};
  for (std::int64_t step = 20; step < 35; ++step) faulted.faults[0].steps.push_back(step);
  CHECK(gate(s, ref, faulted).outcome == verdict::fail);
}

TEST_CASE("trained regression under huber passes in fp16; under l1 its loss checks decide") {
  // Huber: the targets lie within 1 of their minimizer, so the trivial loss is half the mse one.
  scenario s = seed_scenario();
  s.base.loss = loss_kind::huber;
  run_config rc = reference_config(s);
  locked_reference ref = lock_reference(train(rc), manifest_for(s, rc));
  REQUIRE(ref.final_eval.regression.has_value());
  CHECK(ref.final_eval.regression->loss == "huber");
  CHECK(ref.final_eval.regression->trivial_loss == Approx(0.0071543268535750664 / 2).epsilon(1e-9));
  parity_result r = gate(s, ref, s.candidates[0]);
  CHECK(r.outcome == verdict::pass);
  require_accuracy_not_applicable(r);

  // l1: the mean absolute deviation from the median, 0.07649748018775426 by an independent Python computation.
  // AdamW's sign-like steps leave the l1 run jittering about its optimum, and the fp16 run's curve departs from
  // the reference's by more than the curve limit (measured 23 %): the verdict is the curve's, but the held-out
  // loss checks decide against the median baseline (fp16 ends below the reference).
  s.base.loss = loss_kind::l1;
  rc = reference_config(s);
  ref = lock_reference(train(rc), manifest_for(s, rc));
  REQUIRE(ref.final_eval.regression.has_value());
  CHECK(ref.final_eval.regression->loss == "l1");
  CHECK(ref.final_eval.regression->trivial_loss == Approx(0.07649748018775426).epsilon(1e-9));
  r = gate(s, ref, s.candidates[0]);
  require_accuracy_not_applicable(r);
  for (const parity_check& c : r.checks) {
    if (c.name.find("loss (rel. increase)") != std::string::npos) CHECK(c.status == verdict::pass);
  }
}
