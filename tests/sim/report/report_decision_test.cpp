// The decision section (memory per the ledger, GEMM time per the roofline, quality risk, one recommendation) and
// the profile section (per-phase step time from the trainer's hooks): structure and consistency, never absolute
// times.
#include "safeamp/sim/report_decision.hpp"

#include <catch2/catch.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "report_fixtures.hpp"
#include "safeamp/sim/report.hpp"
#include "safeamp/sim/trainer.hpp"

using namespace safeamp::sim;

namespace {
bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("the trainer times every phase of every step: all present, none negative, together within the step") {
  run_config c;
  c.label = "tiny";
  c.model = model_kind::mlp;
  c.mlp.input_dim = 16;
  c.mlp.hidden_dim = 64;
  c.mlp.hidden_layers = 2;
  c.mlp.classes = 4;
  c.data.train_samples = 256;
  c.data.eval_samples = 64;
  c.policy = safeamp::presets::fp16_mixed;
  // Stochastic rounding takes the core's exact cast path with Philox bits: the casts become a large share of the
  // step, far more than the untimed rest, so counting them twice (in their phase and in `casts`) would show as
  // phases adding up to more than the step.
  c.rounding.mode = safeamp::rounding::stochastic;
  c.steps = 6;
  c.batch_size = 64;
  c.scaler.kind = scaler_kind::dynamic;
  std::vector<std::int64_t> seen;
  const run_result r = train(c, [&](std::int64_t done, std::int64_t total) {
    CHECK(total == 6);
    seen.push_back(done);
  });
  CHECK(seen == std::vector<std::int64_t>{1, 2, 3, 4, 5, 6});
  const step_phase_seconds& p = r.phases;
  CHECK(p.steps == 6);
  double step_sum = 0.0;
  for (const step_record& s : r.steps) step_sum += s.step_seconds;
  CHECK(p.step_total == Approx(step_sum));
  for (const double v : {p.forward, p.loss, p.backward, p.casts, p.unscale_check, p.clip, p.optimizer}) CHECK(v >= 0.0);
  // Work happens in these phases at every step, so their clocks cannot read zero.
  CHECK(p.forward > 0.0);
  CHECK(p.backward > 0.0);
  CHECK(p.casts > 0.0);  // fp16-mixed rounds activations and gradients
  CHECK(p.optimizer > 0.0);
  const double timed = p.forward + p.loss + p.backward + p.casts + p.unscale_check + p.clip + p.optimizer;
  CHECK(timed <= p.step_total * (1.0 + 1e-12));
  const std::vector<phase_share> means = phase_means(p);
  REQUIRE(means.size() == 8);  // seven timed phases and the untimed rest
  double per_step = 0.0;
  for (const phase_share& m : means) per_step += m.seconds_per_step;
  CHECK(per_step == Approx(p.step_total / 6.0));  // with the rest, the phases add up to the step
  CHECK(r.activation_elements > 0);
}

TEST_CASE("decision: memory per the ledger, GEMM time per the roofline, and one recommended policy") {
  sim_summary s = fixtures::make_summary();  // fp16 no scaling FAILs, fp16 dynamic PASSes; 150 parameters
  for (candidate_outcome& k : s.candidates) k.run.activation_elements = 1000;
  const policy_decision d = decide_policy(s);
  REQUIRE(d.rows.size() == 2);
  const decision_row& good = d.rows[1];
  CHECK(good.parameters == 150);  // w1 (100) + w2 (50)
  // Adam model states are 16 bytes per parameter both in fp32 (4 + 4 + 8) and in mixed precision with an fp32
  // master copy (2 + 2 + 4 + 8): ZeRO (Rajbhandari et al. 2020), section 3.1. Activations: 1000 elements at 2
  // bytes (fp16) against 4 (fp32). Saved: 1 - (2400 + 2000) / (2400 + 4000) = 0.3125.
  CHECK(good.state_bytes == 2400.0);
  CHECK(good.reference_state_bytes == 2400.0);
  CHECK(good.activation_bytes == 2000.0);
  CHECK(good.memory_saved_fraction == Approx(0.3125));
  // RTX 4090 (Ada whitepaper, appendix A): fp32 82.6 TFLOPS, fp16 tensor cores with fp32 accumulation 165.2.
  CHECK(good.gemm_time_ratio == Approx(82.6 / 165.2));
  CHECK(good.skip_fraction == Approx(1.0 / 40.0));  // one skipped step of 40
  // Its predictions, logits and losses are the reference's (headroom 1 in those checks, the curve's window around
  // the skipped step aside, ~0.96); its one skip of 40 against the default 5 % limit is the tightest:
  // (0.05 - 1/40) / 0.05 = 0.5.
  CHECK(good.min_headroom == Approx((default_max_skip_fraction - 1.0 / 40.0) / default_max_skip_fraction));
  CHECK(good.min_headroom == Approx(0.5));
  CHECK(good.headroom_check == "skipped steps (fraction)");
  CHECK(d.recommended == "fp16 dynamic");
  CHECK(has(d.reason, "31% less memory"));

  // Injected faults make a run a robustness test, not a choice: with no other PASS, the reference is recommended.
  s.candidates[1].fault_list.push_back(
      fault_spec{.kind = fault_kind::gradient_inf, .steps = {5}, .target = "", .factor = 1.0});
  CHECK(decide_policy(s).recommended == "fp32");
  s.candidates[1].fault_list.clear();

  // A candidate that saves no memory and is not faster gains nothing over the reference policy: against a
  // bf16-mixed reference, the passing fp32 run (16 bytes of states either way, 4-byte activations against 2,
  // GEMMs at 165.2 / 82.6 = 2x the time) is not recommended; the reference policy is.
  {
    sim_summary bf16_reference = s;
    bf16_reference.reference.manifest.policy = "bf16-mixed";
    bf16_reference.candidates[1].run.policy = safeamp::presets::fp32;
    const policy_decision no_gain = decide_policy(bf16_reference);
    CHECK(no_gain.rows[1].memory_saved_fraction < 0.0);
    CHECK(no_gain.rows[1].gemm_time_ratio > 1.0);
    CHECK(no_gain.recommended == "bf16-mixed");
    CHECK(has(no_gain.reason, "with less memory or faster GEMMs than the reference policy (bf16-mixed)"));
  }

  const std::string html = render_html_report(s);
  REQUIRE(has(html, "id=\"decision\""));
  CHECK(has(html, "Recommended: fp16 dynamic."));
  const auto j = nlohmann::json::parse(render_summary_json(s));
  CHECK(j["decision"]["recommended"] == "fp16 dynamic");
  CHECK(j["decision"]["candidates"][1]["memory_saved_fraction"].get<double>() == Approx(0.3125));
  CHECK(has(render_terminal_summary(s), "recommended: fp16 dynamic"));
}

TEST_CASE("profile section: a table and a chart with every phase for each timed run") {
  sim_summary s = fixtures::make_summary();
  step_phase_seconds p;
  p.steps = 4;
  p.step_total = 4.0;
  p.forward = 1.0;
  p.casts = 0.8;
  p.loss = 0.2;
  p.backward = 1.2;
  p.unscale_check = 0.1;
  p.clip = 0.004;
  p.optimizer = 0.4;  // 3.704 s timed: 0.296 s (0.074 s per step) is the untimed rest
  s.candidates[1].run.phases = p;
  const std::string html = render_html_report(s);
  const auto at = html.find("id=\"profile\"");
  REQUIRE(at != std::string::npos);
  for (const phase_share& m : phase_means({})) CHECK(html.find(m.name, at) != std::string::npos);
  CHECK(html.find("<svg", at) != std::string::npos);
  CHECK(html.find(">250 (25%)<", at) != std::string::npos);   // forward: 1.0 s / 4 steps of 1 s, in ms
  CHECK(html.find(">74 (7%)<", at) != std::string::npos);     // the rest: 0.296 s / 4
  CHECK(html.find(">1 (&lt;1%)<", at) != std::string::npos);  // clip: 0.004 s / 4 = 1 ms, 0.1 % of the step
  const auto j = nlohmann::json::parse(render_summary_json(s));
  CHECK(j["candidates"][1]["profile_seconds_per_step"]["step"].get<double>() == Approx(1.0));
  CHECK(j["candidates"][1]["profile_seconds_per_step"]["backward"].get<double>() == Approx(0.3));
}
