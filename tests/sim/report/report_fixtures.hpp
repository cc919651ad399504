// Hand-built run results and manifests for the report/gate tests (no training needed): a loss curve
// loss(t) = base * (1 + offset) * (1 + 1/(1+t)), four slices, a 3 x 5 probe batch.
#pragma once

#include <cmath>
#include <string>

#include "safeamp/policy/precision_policy.hpp"
#include "safeamp/sim/parity.hpp"
#include "safeamp/sim/parity_fallback.hpp"
#include "safeamp/sim/reference.hpp"
#include "safeamp/sim/report.hpp"
#include "safeamp/sim/run_result.hpp"

namespace fixtures {

inline safeamp::sim::run_manifest make_manifest() {
  safeamp::sim::run_manifest m;
  m.scenario = "fixture";
  m.model = "mlp input_dim=4 hidden_dim=8 hidden_layers=1 classes=5 activation=gelu";
  m.data = "gaussian clusters";
  m.data_fingerprint = "0123456789abcdef";
  m.seed = 7;
  m.data_seed = 3;
  m.steps = 40;
  m.batch_size = 16;
  m.optimizer = "adamw lr=0.01";
  m.probe_rows = 3;
  m.probe_cols = 5;
  m.policy = "fp32";
  m.library_version = SAFEAMP_VERSION_STRING;
  m.compiler = "g++ 12";
  m.compiler_flags = "-O2";
  m.hardware = "test CPU";
  m.threads = 2;
  return m;
}

/// Recomputes the summary metrics of an evaluation (whole set and slices "a".."d") from its per-prediction
/// results, as a test-side computation independent of the trainer.
inline void summarize(safeamp::sim::eval_metrics& e) {
  const char* names[] = {"a", "b", "c", "d"};
  e.slices.clear();
  for (const char* n : names) e.slices.push_back({n, 0, 0.0, 0.0});
  double loss = 0.0, right = 0.0;
  for (std::size_t i = 0; i < e.rows.loss.size(); ++i) {
    auto& s = e.slices[static_cast<std::size_t>(e.rows.slice[i])];
    ++s.count;
    s.loss += e.rows.loss[i];
    s.accuracy += e.rows.correct[i];
    loss += e.rows.loss[i];
    right += e.rows.correct[i];
  }
  for (auto& s : e.slices) {
    s.loss /= static_cast<double>(s.count);
    s.accuracy /= static_cast<double>(s.count);
  }
  e.loss = loss / static_cast<double>(e.rows.loss.size());
  e.accuracy = right / static_cast<double>(e.rows.loss.size());
}

/// Adds `even` to the loss of every even-numbered prediction and `odd` to every odd one, in slice `slice`
/// (0..3) or everywhere (-1), then re-summarizes.
inline void add_to_losses(safeamp::sim::eval_metrics& e, int slice, float even, float odd) {
  for (std::size_t i = 0; i < e.rows.loss.size(); ++i) {
    if (slice < 0 || e.rows.slice[i] == slice) e.rows.loss[i] += i % 2 == 0 ? even : odd;
  }
  summarize(e);
}

/// Makes the first `count` correct predictions of slice `slice` (or of every slice, -1) wrong.
inline void lose_predictions(safeamp::sim::eval_metrics& e, int slice, int count) {
  for (int k = 0; k < 4; ++k) {
    if (slice >= 0 && k != slice) continue;
    int left = count;
    for (std::size_t i = 0; i < e.rows.loss.size() && left > 0; ++i) {
      if (e.rows.slice[i] == k && e.rows.correct[i] == 1) {
        e.rows.correct[i] = 0;
        --left;
      }
    }
  }
  summarize(e);
}

/// A run whose losses are (1 + loss_offset) times the reference's. Held-out set: 400 predictions in slices
/// "a".."d" of 100, losses alternating 0.5 and 1.5 times base_loss * (1 + loss_offset), the first 80 of
/// each slice correct (accuracy 0.8); 5 balanced classes, so the class frequencies predict loss ln 5 = 1.609 and
/// accuracy 0.2 (the gate's loss checks decide only for base_loss below ln 5).
inline safeamp::sim::run_result make_run(const std::string& label, int steps, double base_loss, double loss_offset,
                                         const safeamp::precision_policy& policy = safeamp::presets::fp32) {
  safeamp::sim::run_result r;
  r.label = label;
  r.policy = policy;
  for (int t = 0; t < steps; ++t) {
    safeamp::sim::step_record s;
    s.step = t;
    s.loss = base_loss * (1.0 + loss_offset) * (1.0 + 1.0 / (1.0 + t));
    s.scale = 1.0f;
    s.grad_norm_before_clip = 2.0;
    s.grad_norm_after_clip = 1.0;
    s.grads = {{"w1", 100, 0, 0, 0, 0}, {"w2", 50, 0, 0, 0, 0}};
    s.step_seconds = 0.001;
    r.steps.push_back(s);
  }
  const double mean = base_loss * (1.0 + loss_offset);
  for (int i = 0; i < 400; ++i) {
    r.final_eval.rows.loss.push_back(static_cast<float>(mean * (i % 2 == 0 ? 0.5 : 1.5)));
    r.final_eval.rows.correct.push_back(i % 100 < 80 ? 1 : 0);
    r.final_eval.rows.slice.push_back(i / 100);
  }
  summarize(r.final_eval);
  // The held-out labels: 5 classes, 20 of each in every slice, so their frequencies predict loss ln 5 and accuracy
  // 0.2, on the whole set and on each slice (as the gate's uniform fallback would).
  const double ln5 = std::log(5.0);
  r.final_eval.classes = safeamp::sim::class_prior{.classes = 5,
                                                   .trivial_loss = ln5,
                                                   .trivial_accuracy = 0.2,
                                                   .slice_trivial_loss = {ln5, ln5, ln5, ln5},
                                                   .slice_trivial_accuracy = {0.2, 0.2, 0.2, 0.2}};
  r.probe_rows = 3;
  r.probe_cols = 5;
  for (int i = 0; i < 15; ++i) r.probe_logits.push_back(static_cast<float>(i % 5) - 2.0f);  // -2..2, rms sqrt(2)
  r.weights_hash = 0x1234abcdull;
  r.wall_seconds = 2.0;
  r.samples_per_second = 320.0;
  return r;
}

/// A summary with one failing (expected) and one passing candidate with a skipped step.
inline safeamp::sim::sim_summary make_summary() {
  using namespace safeamp::sim;
  sim_summary s;
  s.scenario = "fixture <scenario>";
  s.reference = lock_reference(make_run("reference fp32", 40, 1.0, 0.0), make_manifest());
  candidate_outcome bad;
  bad.name = "fp16 no scaling";
  bad.scaler = "none";
  bad.run = make_run("fp16 no scaling", 40, 1.0, 0.3, safeamp::presets::fp16_mixed);
  for (auto& st : bad.run.steps) st.grads[0].underflow = 40;  // 40 % of w1 underflows
  bad.parity = evaluate_parity(s.reference, bad.run, gate_tolerances_for(safeamp::fp16));
  bad.expect = expectation::fail;
  candidate_outcome good;
  good.name = "fp16 dynamic";
  good.scaler = "dynamic (init 65536)";
  good.faults = "gradient_inf at step 5";
  good.run = make_run("fp16 dynamic", 40, 1.0, 0.0, safeamp::presets::fp16_mixed);
  good.run.steps[5].skipped = true;
  good.run.steps[5].found_inf = true;
  for (auto& st : good.run.steps) st.scale = st.step < 5 ? 65536.0f : 32768.0f;
  good.parity = evaluate_parity(s.reference, good.run, gate_tolerances_for(safeamp::fp16));
  std::vector<parity_result> all = {bad.parity, good.parity};
  bad.decision = decide_fallback(bad.parity, {"fp16 dynamic", "fp32"}, all, std::nullopt, "fp32");
  good.decision = decide_fallback(good.parity, {}, all, std::nullopt, "fp32");
  s.candidates = {bad, good};
  s.dollars_per_hour = 3.6;
  s.peak_rss_bytes = 50u << 20;
  return s;
}

}  // namespace fixtures
