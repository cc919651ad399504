// The parity gate on trained runs (not fixtures): an 8-class MLP trained in fp32 is the reference; the same
// fp32 run passes with zero error, bf16-mixed passes, and a catastrophic E2M1 matmul candidate is never
// PASS, nor is any of its slice checks. And a classifier trained on noise with imbalanced labels, which can learn
// only how often each class occurs: never PASS.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "safeamp/sim/npy.hpp"
#include "safeamp/sim/parity.hpp"
#include "safeamp/sim/reference.hpp"
#include "safeamp/sim/scenario.hpp"
#include "safeamp/sim/trainer.hpp"

using namespace safeamp::sim;

namespace {
constexpr const char* scenario_json = R"({
  "name": "gate-8class",
  "model": {"kind": "mlp", "input_dim": 16, "hidden_dim": 64, "hidden_layers": 1, "classes": 8},
  "data": {"seed": 2, "train_samples": 2048, "eval_samples": 1024, "probe_rows": 8},
  "training": {"steps": 60, "batch_size": 64, "seed": 3, "threads": 1,
               "optimizer": {"kind": "adamw", "learning_rate": 0.01}},
  "candidates": [
    {"name": "fp32 again", "policy": "fp32"},
    {"name": "bf16-mixed", "policy": "bf16-mixed"},
    {"name": "e2m1 matmul", "policy": "preset=fp32,matmul=e2m1fn"}
  ]
})";

struct gated {
  parity_result result;
  run_result run;
};

gated gate(const scenario& s, const locked_reference& ref, std::size_t i) {
  const candidate_spec& c = s.candidates[i];
  gated g{.result = {}, .run = train(candidate_config(s, c))};
  g.result = evaluate_parity(ref, g.run, tolerances_for(s, c));
  return g;
}
}  // namespace

TEST_CASE("trained runs: identical passes, bf16 passes, an E2M1 matmul is never PASS") {
  const scenario s = parse_scenario(scenario_json, "gate test");
  const run_config rc = reference_config(s);
  const locked_reference ref = lock_reference(train(rc), manifest_for(s, rc));
  // The reference learned: well above the chance accuracy of 1/8, every slice large enough to judge.
  REQUIRE(ref.final_eval.accuracy > 0.5);
  for (const slice_metrics& sl : ref.final_eval.slices) REQUIRE(sl.count >= gate_min_samples);

  const gated same = gate(s, ref, 0);
  CHECK(same.result.outcome == verdict::pass);
  for (const parity_check& c : same.result.checks) {
    INFO(c.name << " " << c.value << " / " << c.limit << " " << c.undecided);
    CHECK(c.status == verdict::pass);
    CHECK(c.value <= 0.0);
  }

  const gated bf16 = gate(s, ref, 1);
  for (const std::string& why : bf16.result.reasons) INFO(why);
  CHECK(bf16.result.outcome == verdict::pass);

  const gated e2m1 = gate(s, ref, 2);
  CHECK(e2m1.result.outcome != verdict::pass);
  std::size_t slice_checks = 0;
  for (const parity_check& c : e2m1.result.checks) {
    if (c.name.rfind("slice ", 0) != 0) continue;
    ++slice_checks;
    INFO(c.name << " " << c.value << " / " << c.limit);
    CHECK(c.status != verdict::pass);
  }
  CHECK(slice_checks == 16);  // 8 classes x (loss, accuracy)
}

// 512 rows of 4 Gaussian noise features; labels 1 (59 rows: 11.5 %) and 0 otherwise, drawn independently of the
// features, so the best any model can do is predict the labels' frequencies; the reference is trained on them (all
// rows are both the training and the held-out set). Before 2026-12-06 the gate measured it from uniform
// probabilities (ln 2) and PASSed bf16 and fp16 candidates; from the labels' frequencies it cannot judge the loss.
TEST_CASE("trained runs: a classifier that can learn only its labels' frequencies is never PASS") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("safeamp-gate-prior-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  constexpr std::int64_t rows = 512, features = 4, positives = 59;
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(rows * features);
  for (float& v : x) v = normal(rng);
  std::vector<std::int32_t> y(rows, 0);
  for (std::int64_t i = 0; i < positives; ++i) y[static_cast<std::size_t>((i * 97) % rows)] = 1;  // 97 odd: distinct
  std::ofstream(dir / "x.npy", std::ios::binary) << npy_bytes(std::vector<std::int64_t>{rows, features}, x);
  std::ofstream(dir / "y.npy", std::ios::binary) << npy_bytes(std::vector<std::int64_t>{rows}, y);
  const std::string text = R"({"name": "noise", "model": {"kind": "stack", "input_dim": 4,
      "layers": [{"type": "linear", "out": 16}, {"type": "gelu"}, {"type": "linear"}]},
    "data": {"inputs": "x.npy", "targets": "y.npy"},
    "training": {"steps": 60, "batch_size": 64, "threads": 1, "optimizer": {"kind": "adamw", "learning_rate": 0.01}},
    "candidates": [{"name": "bf16", "policy": "bf16-mixed"}, {"name": "fp16", "policy": "fp16-mixed"}]})";
  const scenario s = parse_scenario(text, (dir / "s.json").string());
  const run_config rc = reference_config(s);
  const run_result reference_run = train(rc);
  // The trainer's class frequencies, by hand: p = 59/512 and 453/512.
  REQUIRE(reference_run.final_eval.classes.has_value());
  const double p = static_cast<double>(positives) / rows, q = 1.0 - p;
  CHECK(reference_run.final_eval.classes->classes == 2);
  CHECK(reference_run.final_eval.classes->trivial_loss == Approx(-(p * std::log(p) + q * std::log(q))).epsilon(1e-12));
  CHECK(reference_run.final_eval.classes->trivial_accuracy == Approx(p * p + q * q).epsilon(1e-12));
  const locked_reference ref = lock_reference(reference_run, manifest_for(s, rc));
  INFO("reference loss " << ref.final_eval.loss << ", accuracy " << ref.final_eval.accuracy);
  for (std::size_t i = 0; i < s.candidates.size(); ++i) {
    const gated g = gate(s, ref, i);
    for (const std::string& why : g.result.undecided) INFO(why);
    CHECK(g.result.outcome == verdict::inconclusive);
    // Measured from uniform probabilities, the same runs would pass: the baseline is what decides.
    locked_reference uniform = ref;
    uniform.final_eval.classes.reset();
    CHECK(evaluate_parity(uniform, g.run, tolerances_for(s, s.candidates[i])).outcome == verdict::pass);
  }
  fs::remove_all(dir);
}
