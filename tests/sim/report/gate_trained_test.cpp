// The parity gate on trained runs (not fixtures): an 8-class MLP trained in fp32 is the reference; the same
// fp32 run passes with zero error, bf16-mixed passes, and a catastrophic E2M1 matmul candidate is never
// PASS, nor is any of its slice checks.
#include <catch2/catch.hpp>

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
