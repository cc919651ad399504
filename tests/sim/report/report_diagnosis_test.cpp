// The diagnosis of a run: hand-built step records whose underflow, overflow, skips and checks are known, and the
// cause, the field and the numbers it must report (each derived by hand below).
#include "safeamp/sim/report_diagnosis.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "report_fixtures.hpp"
#include "safeamp/sim/report.hpp"

using namespace safeamp::sim;

namespace {

// 40 steps, a loss gradient of 512 elements and two parameters (w1: 100, w2: 50 elements), nothing underflows.
run_result plain_run() {
  run_result r = fixtures::make_run("candidate", 40, 1.0, 0.0, safeamp::presets::fp16_mixed);
  for (step_record& st : r.steps) st.grads.insert(st.grads.begin(), layer_counts{loss_gradient_name, 512, 0, 0, 0, 0});
  return r;
}

parity_result gate(verdict outcome) {
  parity_result p;
  p.outcome = outcome;
  p.checks.push_back({.name = "non-finite losses",
                      .value = 0,
                      .limit = 0,
                      .status = verdict::pass,
                      .detail = {},
                      .basis = {},
                      .undecided = {}});
  if (outcome == verdict::fail) {
    p.checks.push_back({.name = "held-out loss (rel. increase)",
                        .value = 0.3,
                        .limit = 0.02,
                        .status = verdict::fail,
                        .detail = {},
                        .basis = {},
                        .undecided = {}});
  }
  if (outcome != verdict::pass) {
    p.checks.push_back({.name = "slice a accuracy (drop)",
                        .value = 0.1,
                        .limit = 0.2,
                        .status = verdict::inconclusive,
                        .detail = {},
                        .basis = {},
                        .undecided = "too small"});
  }
  return p;
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
    "no underflow, overflow or skip: a FAIL is rounding error, a PASS has no cause, INCONCLUSIVE names its check") {
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
  CHECK(has(undecided.text, "First undecided check: slice a accuracy (drop)"));
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
  const std::string html = render_html_report(s);
  const auto why = html.find("id=\"why\"");
  REQUIRE(why != std::string::npos);
  CHECK(why < html.find("id=\"gate\""));  // the diagnosis opens the report, before the gate's table
  CHECK(html.find("FAIL because gradients underflowed", why) != std::string::npos);
}
