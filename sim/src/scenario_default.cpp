// The embedded default scenario of `safeamp sim` (also shipped as scenarios/default.json): the small
// decoder-only transformer on a corpus every Debian machine has, trained with a small-loss objective so
// fp16 gradients underflow without loss scaling while dynamic scaling and bf16 keep fp32 parity.
#include "safeamp/sim/scenario.hpp"

namespace safeamp::sim {

std::string_view default_scenario_json() noexcept {
  return R"json({
  "name": "default",
  "description": "Small transformer on /usr/share/common-licenses/GPL-3 with a small-loss objective: fp16 without loss scaling loses its gradients to underflow; dynamic scaling and bf16 keep parity with fp32. The injected-overflow run skips 4 updates, so its trajectory and golden logits legitimately move (measured: max error 0.51 rms, 0.33 relative): its logit limits are declared looser (0.75 and 0.35), still below half of what all-zero logits would show (1.68 and 0.385), so both checks decide; every other check keeps fp16's derived limits.",
  "model": {"kind": "transformer", "context": 32, "width": 32, "heads": 2, "layers": 2, "ffn_multiplier": 4},
  "data": {"seed": 1, "corpus_path": "/usr/share/common-licenses/GPL-3", "eval_fraction": 0.1,
           "eval_samples": 64, "probe_rows": 2},
  "training": {"steps": 150, "batch_size": 16, "seed": 1, "threads": 2, "clip_norm": 1.0,
               "loss_multiplier": 1e-4,
               "optimizer": {"kind": "adamw", "learning_rate": 3e-3, "epsilon": 1e-12, "weight_decay": 0.0}},
  "reference": {"policy": "fp32"},
  "candidates": [
    {"name": "fp16 no scaling", "policy": "fp16-mixed", "scaler": {"kind": "none"}, "expect": "fail"},
    {"name": "fp16-mixed dynamic", "policy": "fp16-mixed", "scaler": {"kind": "dynamic", "preset": "pytorch", "growth_interval": 50}},
    {"name": "bf16-mixed", "policy": "bf16-mixed", "scaler": {"kind": "none"}},
    {"name": "fp16-mixed injected overflows", "policy": "fp16-mixed",
     "scaler": {"kind": "dynamic", "preset": "pytorch", "growth_interval": 50},
     "faults": [{"kind": "gradient_inf", "steps": [40, 41, 90]}, {"kind": "loss_spike", "steps": [120], "factor": 1e6}],
     "tolerances": {"logit_abs": 0.75, "logit_rel": 0.35}}
  ],
  "baselines": ["bf16-mixed", "fp32"],
  "cost": {"dollars_per_hour": 0.10}
})json";
}

}  // namespace safeamp::sim
