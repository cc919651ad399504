// Trains the simulator's MLP classifier under the fp16-mixed policy with a dynamic loss scaler, with an
// injected inf gradient at step 10, and prints what happened at every fifth step and on the faulty one.
#include <cstdio>

#include "safeamp/policy.hpp"
#include "safeamp/scaling.hpp"
#include "safeamp/sim/trainer.hpp"

int main() {
  using namespace safeamp;
  sim::run_config cfg;
  cfg.label = "fp16-mixed dynamic";
  cfg.policy = presets::fp16_mixed;
  cfg.scaler.kind = sim::scaler_kind::dynamic;
  cfg.scaler.dynamic = scaler_presets::pytorch;
  cfg.optimizer.kind = sim::optimizer_kind::sgd_momentum;
  cfg.optimizer.learning_rate = 0.1;
  cfg.steps = 40;
  cfg.batch_size = 128;
  cfg.faults = {{.kind = sim::fault_kind::gradient_inf, .steps = {10}, .target = "head.weight", .factor = 1.0}};
  const sim::run_result r = sim::train(cfg);
  for (const sim::step_record& s : r.steps) {
    if (s.step % 5 == 0 || s.skipped) {
      std::printf("step %3lld  loss %.4f  scale %8.0f  %s\n", static_cast<long long>(s.step), s.loss,
                  static_cast<double>(s.scale), s.skipped ? "skipped (inf gradient)" : "applied");
    }
  }
  std::printf("held-out: loss %.4f, accuracy %.3f\n", r.final_eval.loss, r.final_eval.accuracy);
  const bool ok = r.steps[10].skipped && r.final_eval.loss < r.steps.front().loss;
  return ok ? 0 : 1;
}
