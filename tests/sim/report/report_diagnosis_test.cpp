// The diagnosis of a run: hand-built step records whose underflow, overflow, skips and checks are known, and the
// cause, the field and the numbers it must report (each derived by hand below).
#include "safeamp/sim/report_diagnosis.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "report_fixtures.hpp"
#include "safeamp/format/format_names.hpp"
#include "safeamp/policy/policy_string.hpp"
#include "safeamp/sim/report.hpp"

using namespace safeamp::sim;

namespace {

// 40 steps, a loss gradient of 512 elements and two parameters (w1: 100, w2: 50 elements), nothing underflows.
run_result plain_run() {
  run_result r = fixtures::make_run("candidate", 40, 1.0, 0.0, safeamp::presets::fp16_mixed);
  for (step_record& st : r.steps) st.grads.insert(st.grads.begin(), layer_counts{loss_gradient_name, 512, 0, 0, 0, 0});
  return r;
}

parity_check make_check(std::string name, double value, double limit, verdict status) {
  parity_check c;
  c.name = std::move(name);
  c.value = value;
  c.limit = limit;
  c.status = status;
  return c;
}

// A gate with a passing check, a failed one (FAIL only) and an undecided one (not PASS): slice a's accuracy, whose
// declared limit would pass a candidate that lost half of what the reference learned.
parity_result gate(verdict outcome) {
  parity_result p;
  p.outcome = outcome;
  p.checks.push_back(make_check("non-finite losses", 0, 0, verdict::pass));
  if (outcome == verdict::fail)
    p.checks.push_back(make_check("held-out loss (rel. increase)", 0.3, 0.02, verdict::fail));
  if (outcome != verdict::pass) {
    parity_check c = make_check("slice a accuracy (drop)", 0.1, 0.2, verdict::inconclusive);
    c.undecided = "limit 0.2 would pass a candidate that lost half of what the reference learned (0.15)";
    c.why_undecided = undecided_reason::limit_too_wide;
    c.source = limit_source::declared;
    c.tolerance_key = "slice_accuracy_abs";
    p.checks.push_back(c);
  }
  return p;
}

// The fixture's reference (5 classes, held-out loss 1.0, accuracy 0.8, four slices of 100) and the gate on a
// candidate under fp16's limits and `declared` ones.
locked_reference reference() {
  return lock_reference(fixtures::make_run("reference fp32", 40, 1.0, 0.0), fixtures::make_manifest());
}
run_diagnosis diagnose_gate(const locked_reference& ref, const run_result& cand, const tolerance_overrides& declared) {
  const parity_result p = evaluate_parity(ref, cand, gate_tolerances_for(coarsest_format(cand.policy), declared));
  REQUIRE(p.outcome == verdict::inconclusive);
  return diagnose_run({.run = cand, .parity = p, .scaler = scaler_kind::dynamic, .faults = {}});
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("gradient underflow with scaling off: fractions, onset, zero-gradient steps, the field and the check") {
  run_result r = plain_run();
  // From step 10 on, 400 of the 512 loss-gradient elements underflow and the whole gradient is zero; w2 loses 5 of
  // 50 at every step (10 %). Loss gradient over the run: 30 * 400 / (40 * 512) = 12000 / 20480 = 0.5859375.
  for (step_record& st : r.steps) {
    st.grads[2].underflow = 5;
    if (st.step >= 10) {
      st.grads[0].underflow = 400;
      st.grad_norm_before_clip = 0.0;
    }
  }
  const parity_result p = gate(verdict::fail);
  const run_diagnosis d = diagnose_run({.run = r, .parity = p, .scaler = scaler_kind::none, .faults = {}});
  CHECK(d.cause == diagnosed_cause::gradient_underflow);
  CHECK(d.likely_field == "scaler.kind");
  CHECK(d.loss_gradient_underflow == Approx(0.5859375));
  CHECK(d.underflow_began == 0);  // w2's 10 % is significant from step 0
  REQUIRE(d.worst_layers.size() == 2);
  CHECK(d.worst_layers[0].name == loss_gradient_name);
  CHECK(d.worst_layers[0].first_step == 10);
  CHECK(d.worst_layers[1].name == "w2");
  CHECK(d.worst_layers[1].fraction == Approx(0.1));
  CHECK(d.zero_norm_steps == 30);
  CHECK(d.skipped == 0);
  CHECK(d.first_check == "held-out loss (rel. increase)");  // the failed check comes before an undecided one
  CHECK(d.first_check_status == verdict::fail);
  CHECK(has(d.text, "FAIL because gradients underflowed in fp16"));
  CHECK(has(d.text, "59% of the loss gradient"));
  CHECK(has(d.text, "10% of w2"));
  CHECK(has(d.text, "exactly zero in 30 of 40 steps"));
  CHECK(has(d.text, "loss scaling is off"));
  CHECK(has(d.text, "scaler.kind = none"));
  CHECK(has(d.text, "0.3 against a limit of 0.02 (15x the limit)"));  // 0.3 / 0.02 = 15
}

TEST_CASE("underflow under a dynamic scaler names the scale, with its trajectory") {
  run_result r = plain_run();
  for (step_record& st : r.steps) {
    st.scale = st.step < 20 ? 8.0f : 2.0f;
    st.grads[1].underflow = st.step >= 30 ? 50 : 0;  // w1: 10 steps x 50 / (40 x 100) = 0.125, from step 30
  }
  const run_diagnosis d =
      diagnose_run({.run = r, .parity = gate(verdict::fail), .scaler = scaler_kind::dynamic, .faults = {}});
  CHECK(d.cause == diagnosed_cause::gradient_underflow);
  CHECK(d.likely_field == "scaler.min_scale");
  CHECK(d.underflow_began == 30);
  CHECK(d.loss_gradient_underflow == 0.0);
  REQUIRE(d.worst_layers.size() == 1);
  CHECK(d.worst_layers[0].fraction == Approx(0.125));
  CHECK(has(d.text, "from 2^3 to 2^1"));
}

TEST_CASE("skips at injected faults are diagnosed as overflow skips caused by the faults") {
  run_result r = plain_run();
  for (const int at : {5, 6}) {
    r.steps[static_cast<std::size_t>(at)].found_inf = true;
    r.steps[static_cast<std::size_t>(at)].skipped = true;
  }
  for (step_record& st : r.steps) st.scale = st.step <= 5 ? 65536.0f : (st.step == 6 ? 32768.0f : 16384.0f);
  fault_spec inf{.kind = fault_kind::gradient_inf, .steps = {5, 6}, .target = "", .factor = 1.0};
  const run_diagnosis d =
      diagnose_run({.run = r, .parity = gate(verdict::pass), .scaler = scaler_kind::dynamic, .faults = {inf}});
  CHECK(d.cause == diagnosed_cause::overflow_skips);
  CHECK(d.likely_field == "faults");
  CHECK(d.skipped == 2);
  CHECK(d.skipped_at_faults == 2);
  CHECK(d.overflow_steps == 2);
  CHECK(d.first_overflow == 5);
  CHECK(d.scale_first == 65536.0f);
  CHECK(d.scale_last == 16384.0f);
  CHECK(d.first_check.empty());
  CHECK(has(d.text, "PASS with skipped steps: 2 of 40 optimizer steps (5%)"));  // 2 / 40 = 5 %
  CHECK(has(d.text, "from 2^16 to 2^14"));
  CHECK(has(d.text, "every one a step where the scenario injects a fault"));

  // The same skips without the faults: the scaler's starting scale is the field to change.
  const run_diagnosis own =
      diagnose_run({.run = r, .parity = gate(verdict::pass), .scaler = scaler_kind::dynamic, .faults = {}});
  CHECK(own.cause == diagnosed_cause::overflow_skips);
  CHECK(own.skipped_at_faults == 0);
  CHECK(own.likely_field == "scaler.init_scale");
}

TEST_CASE(
    "no underflow, overflow or skip: a FAIL is rounding error, a PASS has no cause, INCONCLUSIVE names the field") {
  const run_result r = plain_run();
  const run_diagnosis fail =
      diagnose_run({.run = r, .parity = gate(verdict::fail), .scaler = scaler_kind::none, .faults = {}});
  CHECK(fail.cause == diagnosed_cause::rounding_error);
  CHECK(has(fail.text, "rounding in fp16"));
  const run_diagnosis pass =
      diagnose_run({.run = r, .parity = gate(verdict::pass), .scaler = scaler_kind::none, .faults = {}});
  CHECK(pass.cause == diagnosed_cause::none);
  CHECK(pass.likely_field.empty());
  const run_diagnosis undecided =
      diagnose_run({.run = r, .parity = gate(verdict::inconclusive), .scaler = scaler_kind::none, .faults = {}});
  CHECK(undecided.first_check == "slice a accuracy (drop)");
  CHECK(undecided.first_check_status == verdict::inconclusive);
  // Nothing failed: the cause is the check that could not decide, and the field is its declared limit, not the
  // policy's formats.
  CHECK(undecided.cause == diagnosed_cause::undecided_checks);
  CHECK(undecided.likely_field == "tolerances.slice_accuracy_abs");
  REQUIRE(undecided.undecided.size() == 1);
  CHECK(undecided.undecided[0].checks == std::vector<std::string>{"slice a accuracy (drop)"});
  CHECK(has(undecided.text, "INCONCLUSIVE: no check failed, but 1 of 2 checks could not decide."));
  CHECK(has(undecided.text, "declare a tighter tolerances.slice_accuracy_abs"));
  CHECK_FALSE(has(undecided.text, "rounding"));
  CHECK(has(undecided.text, "First undecided check: slice a accuracy (drop)"));
}

TEST_CASE("INCONCLUSIVE from the gate itself: each reason names the field that would let the check decide") {
  const run_result same = fixtures::make_run("same", 40, 1.0, 0.0, safeamp::presets::fp16_mixed);

  SECTION("a slice too small to judge: data.eval_samples, with how many more") {
    // Slice d keeps 12 of its 100 predictions (the rest move to c), in the reference and the candidate alike.
    const auto shrink_d = [](run_result run) {
      for (std::size_t i = 312; i < 400; ++i) run.final_eval.rows.slice[i] = 2;
      fixtures::summarize(run.final_eval);
      return run;
    };
    const locked_reference ref =
        lock_reference(shrink_d(fixtures::make_run("reference fp32", 40, 1.0, 0.0)), fixtures::make_manifest());
    const run_diagnosis d = diagnose_gate(ref, shrink_d(same), {});
    CHECK(d.cause == diagnosed_cause::undecided_checks);
    CHECK(d.likely_field == "data.eval_samples");
    REQUIRE(d.undecided.size() == 1);
    CHECK(d.undecided[0].checks == std::vector<std::string>{"slice d loss (rel. increase)", "slice d accuracy (drop)"});
    CHECK(has(d.text, "slice d loss (rel. increase) and 1 more (12 predictions: too small to judge"));
    CHECK(has(d.text, "about 2.5x as many"));  // 30 / 12
  }
  SECTION("a sampling term wider than half of what was learned: data.eval_samples") {
    // Slice a's paired loss differences alternate +-1.1: mean 0, sd 1.1 * sqrt(100/99) = 1.1055, sampling term
    // 3 * 1.1055 / sqrt(100) / 1.0 = 0.332, above half of (ln 5 - 1) / 1 = 0.305 and fp16's 0.0221.
    run_result noisy = same;
    fixtures::add_to_losses(noisy.final_eval, 0, 1.1f, -1.1f);
    const run_diagnosis d = diagnose_gate(reference(), noisy, {});
    CHECK(d.likely_field == "data.eval_samples");
    CHECK(has(d.text, "slice a loss (rel. increase) (limit 0.33"));
    CHECK(has(d.text, "the sampling term 3*s/sqrt(n)"));
    CHECK(has(d.text, "or for .npy data more rows in data.eval_inputs"));  // the remedy for data from files
  }
  SECTION("a declared limit too wide: that tolerances key; two reasons make two groups, in gate order") {
    tolerance_overrides o;
    o.logit_abs = 0.708;     // all-zero logits: 2 / sqrt 2 = 1.414, half 0.707
    o.accuracy_abs = 0.301;  // half of 0.8 - 0.2
    const run_diagnosis d = diagnose_gate(reference(), same, o);
    CHECK(d.likely_field == "tolerances.accuracy_abs");  // the held-out checks come first
    REQUIRE(d.undecided.size() == 2);
    CHECK(d.undecided[1].field == "tolerances.logit_abs");
    // held-out loss and accuracy, non-finite loss, skipped steps, curve, two logit checks, 4 slices x 2: 15
    CHECK(has(d.text, "2 of 15 checks could not decide"));
    CHECK(has(d.text, "declare a tighter tolerances.logit_abs"));
  }
  SECTION("a format term too wide: its tolerances key, naming the format") {
    const run_result e2m1 =
        fixtures::make_run("e2m1", 40, 1.0, 0.0, safeamp::parse_policy("preset=fp32,matmul=e2m1fn"));
    const run_diagnosis d = diagnose_gate(reference(), e2m1, {});
    CHECK(d.likely_field == "tolerances.loss_rel");  // sqrt(u) = 0.5 > 0.305, the first check's limit
    CHECK(has(d.text, "the format term k*sqrt(u) of " + safeamp::format_name(safeamp::fp4_e2m1)));
  }
  SECTION("a reference no better than the trivial predictor: training.steps") {
    // Reference and candidate loss 2.0, above ln 5 = 1.609: no loss limit could tell learning from none.
    const locked_reference ref =
        lock_reference(fixtures::make_run("reference fp32", 40, 2.0, 0.0), fixtures::make_manifest());
    const run_diagnosis d =
        diagnose_gate(ref, fixtures::make_run("same", 40, 2.0, 0.0, safeamp::presets::fp16_mixed), {});
    CHECK(d.likely_field == "training.steps");
    CHECK(has(d.text, "learned nothing measurable"));
  }
  SECTION("no per-prediction results: --relock") {
    locked_reference ref = reference();
    ref.final_eval.rows = {};
    const run_diagnosis d = diagnose_gate(ref, same, {});
    CHECK(d.likely_field == "--relock");
  }
}

TEST_CASE("an INCONCLUSIVE run with underflow names the undecided field and reports the underflow beside it") {
  run_result r = plain_run();
  for (step_record& st : r.steps) st.grads[1].underflow = 20;  // w1: 20 % at every step
  const run_diagnosis d =
      diagnose_run({.run = r, .parity = gate(verdict::inconclusive), .scaler = scaler_kind::none, .faults = {}});
  CHECK(d.cause == diagnosed_cause::undecided_checks);
  CHECK(d.likely_field == "tolerances.slice_accuracy_abs");
  CHECK(has(d.text, "Also seen: gradients underflowed in fp16"));
  CHECK(has(d.text, "20% of w1"));
}

TEST_CASE("a non-finite loss at an applied step is its own cause; at a skipped step it is not") {
  run_result r = plain_run();
  r.steps[7].loss = std::numeric_limits<double>::quiet_NaN();
  CHECK(diagnose_run({.run = r, .parity = gate(verdict::fail), .scaler = scaler_kind::none, .faults = {}}).cause ==
        diagnosed_cause::nonfinite_loss);
  r.steps[7].skipped = true;
  r.steps[7].found_inf = true;
  CHECK(diagnose_run({.run = r, .parity = gate(verdict::fail), .scaler = scaler_kind::dynamic, .faults = {}}).cause ==
        diagnosed_cause::overflow_skips);
}

TEST_CASE("the diagnosis reaches the terminal summary, summary.json and the top of the HTML report") {
  sim_summary s = fixtures::make_summary();
  s.candidates[0].scaler_type = scaler_kind::none;  // fp16 no scaling: 40 % of w1 underflows at every step
  const std::string term = render_terminal_summary(s);
  CHECK(has(term, "  why: FAIL because gradients underflowed in fp16"));
  const auto j = nlohmann::json::parse(render_summary_json(s));
  CHECK(j["candidates"][0]["diagnosis"]["cause"] == "gradient underflow");
  CHECK(j["candidates"][0]["diagnosis"]["likely_field"] == "scaler.kind");
  CHECK(j["candidates"][0]["diagnosis"]["worst_layers"][0]["fraction"].get<double>() == Approx(40.0 / 100.0));
  CHECK(j["candidates"][0]["diagnosis"]["undecided"].empty());
  const std::string html = render_html_report(s);
  const auto why = html.find("id=\"why\"");
  REQUIRE(why != std::string::npos);
  CHECK(why < html.find("id=\"gate\""));  // the diagnosis opens the report, before the gate's table
  CHECK(html.find("FAIL because gradients underflowed", why) != std::string::npos);
}

// The field named follows the scaler: a static scale is scaler.static_scale (there is no scaler.scale), a dynamic
// scale that never moved from its initial value is scaler.init_scale; a PASS with underflow passed despite it.
TEST_CASE("underflow: the static scale's field, a dynamic scale that never moved, and a PASS despite it") {
  run_result r = plain_run();
  for (step_record& st : r.steps) {
    st.scale = 4.0f;
    st.grads[1].underflow = 50;  // w1: half of its 100 elements at every step
  }
  run_diagnosis d =
      diagnose_run({.run = r, .parity = gate(verdict::fail), .scaler = scaler_kind::static_scale, .faults = {}});
  CHECK(d.cause == diagnosed_cause::gradient_underflow);
  CHECK(d.likely_field == "scaler.static_scale");
  d = diagnose_run({.run = r, .parity = gate(verdict::fail), .scaler = scaler_kind::dynamic, .faults = {}});
  CHECK(d.likely_field == "scaler.init_scale");
  CHECK(has(d.text, "which never moved"));
  d = diagnose_run({.run = r, .parity = gate(verdict::pass), .scaler = scaler_kind::none, .faults = {}});
  CHECK(d.cause == diagnosed_cause::gradient_underflow);
  CHECK(has(d.text, "PASS despite this: gradients underflowed"));
  CHECK_FALSE(has(d.text, "because"));
  CHECK(has(d.text, "To look at: scaler.kind = none"));
}

// A fault injected at a step the run applied (a loss spike without a scaler to skip it) moved the run: the cause
// is the faults, not the policy's rounding.
TEST_CASE("a failed run whose injected faults were applied is diagnosed as the faults, not rounding") {
  run_result r = plain_run();
  const std::vector<fault_spec> faults = {
      {.kind = fault_kind::loss_spike, .steps = {39}, .target = "", .factor = 1e30}};
  const run_diagnosis d =
      diagnose_run({.run = r, .parity = gate(verdict::fail), .scaler = scaler_kind::none, .faults = faults});
  CHECK(d.cause == diagnosed_cause::injected_faults);
  CHECK(d.likely_field == "faults");
  CHECK(d.applied_faults == 1);
  CHECK(has(d.text, "because of the injected faults: 1 step(s) with a fault were applied"));
  CHECK(std::string(diagnosed_cause_name(d.cause)) == "injected faults");
  // Without the fault the same failure is the formats' rounding.
  CHECK(diagnose_run({.run = r, .parity = gate(verdict::fail), .scaler = scaler_kind::none, .faults = {}}).cause ==
        diagnosed_cause::rounding_error);
}

// With the dynamic scaler's configuration the diagnosis replays its transitions over the recorded found_inf flags
// (the records hold the scale each step used, set below to what the rules give, worked by hand). Until 2026-12-06 an
// overflow at the last step read "the loss scale stayed 2^3 ... skipped exactly those updates and recovered", a cap
// that refused every growth was blamed on scaler.min_scale or scaler.init_scale, and the floor was never mentioned.
namespace {
safeamp::scaler_config replay_config(float init, std::int32_t growth_interval, float max_scale) {
  safeamp::scaler_config c;
  c.init_scale = init;
  c.growth_interval = growth_interval;
  c.max_scale = max_scale;
  return c;  // backoff 0.5, growth 2, hysteresis 1, floor 1
}
}  // namespace

TEST_CASE("the replayed scaler: the last step's backoff, the floor, the cap, and a run with nothing after a skip") {
  // Init 8, growth every 1000 clean steps: 2^3 at every step; the overflow at the last step (39) halves it to 2^2
  // after the run's last update, and no applied step follows the skip.
  run_result last = plain_run();
  for (step_record& st : last.steps) st.scale = 8.0f;
  last.steps.back().found_inf = last.steps.back().skipped = true;
  const fault_spec inf{.kind = fault_kind::gradient_inf, .steps = {39}, .target = "", .factor = 1.0};
  run_diagnosis d = diagnose_run({.run = last,
                                  .parity = gate(verdict::pass),
                                  .scaler = scaler_kind::dynamic,
                                  .faults = {inf},
                                  .dynamic_config = replay_config(8.0f, 1000, safeamp::float_max)});
  REQUIRE(d.replay.matched);
  CHECK(d.replay.scale_after == 4.0f);
  CHECK(d.replay.backoffs == 1);
  CHECK_FALSE(d.applied_after_last_skip);
  CHECK(has(d.text, "the loss scale stayed 2^3, and 2^2 after the last step's update"));
  CHECK(has(d.text, "no applied step followed the last of them"));
  CHECK_FALSE(has(d.text, "recovered"));
  // The same overflow at step 5: 2^3 for steps 0..5, 2^2 after; training went on.
  run_result mid = plain_run();
  for (step_record& st : mid.steps) st.scale = st.step <= 5 ? 8.0f : 4.0f;
  mid.steps[5].found_inf = mid.steps[5].skipped = true;
  const fault_spec inf5{.kind = fault_kind::gradient_inf, .steps = {5}, .target = "", .factor = 1.0};
  d = diagnose_run({.run = mid,
                    .parity = gate(verdict::pass),
                    .scaler = scaler_kind::dynamic,
                    .faults = {inf5},
                    .dynamic_config = replay_config(8.0f, 1000, safeamp::float_max)});
  REQUIRE(d.replay.matched);
  CHECK(d.replay.scale_after == 4.0f);
  CHECK(d.applied_after_last_skip);
  CHECK(has(d.text, "the scaler skipped exactly those updates and training went on."));
  CHECK_FALSE(has(d.text, "after the last step's update"));  // it used 2^2 itself: nothing moved after it

  // The cap: init 1, growth after every clean step, max 2: step 0 uses 2^0 and grows, steps 1..39 use 2^1 and each
  // growth is refused (39). Half of w1 underflows at every step: the cap is the field, not the floor or the start.
  run_result capped = plain_run();
  for (step_record& st : capped.steps) {
    st.scale = st.step == 0 ? 1.0f : 2.0f;
    st.grads[1].underflow = 50;
  }
  d = diagnose_run({.run = capped,
                    .parity = gate(verdict::fail),
                    .scaler = scaler_kind::dynamic,
                    .faults = {},
                    .dynamic_config = replay_config(1.0f, 1, 2.0f)});
  REQUIRE(d.replay.matched);
  CHECK(d.replay.grew == 1);
  CHECK(d.replay.growth_refused == 39);
  CHECK(d.likely_field == "scaler.max_scale");
  CHECK(has(d.text, "its cap 2^1 (scaler.max_scale) refused 39 growth(s)"));

  // The floor: init 2, overflows at steps 0, 1, 2 (2^1 -> 2^0, then twice at the floor 2^0), underflow throughout.
  run_result floored = plain_run();
  for (step_record& st : floored.steps) {
    st.scale = st.step == 0 ? 2.0f : 1.0f;
    st.found_inf = st.skipped = st.step <= 2;
    st.grads[1].underflow = 50;
  }
  d = diagnose_run({.run = floored,
                    .parity = gate(verdict::fail),
                    .scaler = scaler_kind::dynamic,
                    .faults = {},
                    .dynamic_config = replay_config(2.0f, 1000, safeamp::float_max)});
  REQUIRE(d.replay.matched);
  CHECK(d.replay.backoffs == 3);
  CHECK(d.replay.at_floor == 2);
  CHECK(d.likely_field == "scaler.min_scale");
  CHECK(has(d.text, "2 overflow(s) found it at its floor 2^0 (scaler.min_scale)"));

  // Backoffs above the floor while other gradients underflow: fp16's range cannot hold both at one scale.
  run_result both = plain_run();
  for (step_record& st : both.steps) {
    st.scale = st.step <= 5 ? 8.0f : 4.0f;
    st.grads[1].underflow = 50;
  }
  both.steps[5].found_inf = both.steps[5].skipped = true;
  d = diagnose_run({.run = both,
                    .parity = gate(verdict::fail),
                    .scaler = scaler_kind::dynamic,
                    .faults = {},
                    .dynamic_config = replay_config(8.0f, 1000, safeamp::float_max)});
  REQUIRE(d.replay.matched);
  CHECK(d.likely_field == "policy.gradient");

  // A recorded scale the replay does not give (here 2^3 -> 2^1 with no overflow): the replay is not trusted and the
  // recorded scales alone speak, as without a configuration.
  run_result odd = plain_run();
  for (step_record& st : odd.steps) {
    st.scale = st.step < 20 ? 8.0f : 2.0f;
    st.grads[1].underflow = 50;
  }
  d = diagnose_run({.run = odd,
                    .parity = gate(verdict::fail),
                    .scaler = scaler_kind::dynamic,
                    .faults = {},
                    .dynamic_config = replay_config(8.0f, 1000, safeamp::float_max)});
  CHECK_FALSE(d.replay.matched);
  CHECK(d.likely_field == "scaler.min_scale");
  CHECK_FALSE(has(d.text, "after the last step's update"));
}
