// Demonstrations on the shipped MLP classifier: fp16 gradients underflow without loss scaling and the
// loss misses fp32's, dynamic scaling fixes both; bf16 needs no scaling; fp16 parameters without master
// weights stagnate; and the model really learns.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>

#include "safeamp/format.hpp"
#include "sim/engine/sim_test_util.hpp"
#include "safeamp/sim/trainer.hpp"

using namespace safeamp;
using namespace safeamp::sim;
using sim_test::mlp_config;

namespace {

// Relative tolerance on held-out loss for a policy that should track fp32: 16 unit roundoffs of its
// low-precision format (fp16: 2^-7 = 0.78%, bf16: 2^-4 = 6.25%).
double tracking_tolerance(format_spec f) { return 16.0 * unit_roundoff(f); }

}  // namespace

TEST_CASE("the MLP really learns the clusters in fp32") {
  const run_result r = train(mlp_config(presets::fp32, 150));
  CHECK(r.steps.front().loss > 1.5);  // about ln(8) = 2.08 at initialisation
  CHECK(r.final_eval.loss < 0.05);
  CHECK(r.final_eval.accuracy > 0.95);
  REQUIRE(r.final_eval.slices.size() == 8);
  for (const slice_metrics& s : r.final_eval.slices) {
    INFO(s.name);
    CHECK(s.count > 0);
    CHECK(s.accuracy > 0.85);
  }
  CHECK(r.probe_rows == 8);
  CHECK(r.probe_cols == 8);
  CHECK(r.probe_logits.size() == 64);
}

TEST_CASE("fp16 without loss scaling loses gradients to underflow and misses the fp32 loss; dynamic scaling fixes it") {
  // A loss weighted by 2^-14 (an auxiliary-loss weight, or a tiny-loss phase) with the learning rate
  // multiplied by 2^14: in fp32 this is the same training up to rounding; in fp16 the loss gradient
  // (p - y) / 256 * 2^-14 sits at and below fp16's smallest subnormal (2^-24).
  auto cfg = mlp_config(presets::fp32, 150);
  cfg.loss_weight = std::ldexp(1.0, -14);
  cfg.optimizer.learning_rate = 0.1 * std::ldexp(1.0, 14);
  const run_result ref = train(cfg);

  cfg.policy = presets::fp16_mixed;
  cfg.label = "fp16-mixed none";
  const run_result none = train(cfg);

  cfg.label = "fp16-mixed dynamic";
  cfg.scaler.kind = scaler_kind::dynamic;
  cfg.scaler.dynamic = scaler_presets::pytorch;
  cfg.scaler.dynamic.growth_interval = 25;
  const run_result dynamic = train(cfg);

  const auto f_none = sim_test::underflow_fraction(none);
  const auto f_dyn = sim_test::underflow_fraction(dynamic);
  const auto f_ref = sim_test::underflow_fraction(ref);
  for (const auto& [name, fraction] : f_none) {
    std::printf("underflow %-14s fp16 none %.4f  fp16 dynamic %.4f  fp32 %.4f\n", name.c_str(), fraction,
                f_dyn.at(name), f_ref.at(name));
  }
  const double gap_none = sim_test::relative_gap(none.final_eval.loss, ref.final_eval.loss);
  const double gap_dyn = sim_test::relative_gap(dynamic.final_eval.loss, ref.final_eval.loss);
  std::printf("held-out loss: fp32 %.6f  fp16 none %.6f (gap %.2f%%)  fp16 dynamic %.6f (gap %.3f%%)\n",
              ref.final_eval.loss, none.final_eval.loss, 100 * gap_none, dynamic.final_eval.loss, 100 * gap_dyn);

  for (const char* layer : {"fc0.weight", "fc1.weight", "head.weight", "loss.dlogits"}) {
    INFO(layer);
    CHECK(f_ref.at(layer) == 0.0);           // fp32 gradients do not underflow here
    CHECK(f_none.at(layer) > 0.01);          // a measurable fraction is lost in fp16
    CHECK(f_dyn.at(layer) < f_none.at(layer));  // and scaling recovers most of it
  }
  CHECK(f_dyn.at("fc0.weight") < 0.1 * f_none.at("fc0.weight"));
  CHECK(gap_none > tracking_tolerance(fp16));
  CHECK(gap_dyn < tracking_tolerance(fp16));
  CHECK(dynamic.steps.back().scale > 65536.0f);  // the scale grew past its start: headroom was there
}

TEST_CASE("bf16 needs no loss scaling and tracks fp32 within its looser tolerance") {
  const run_result ref = train(mlp_config(presets::fp32, 150));
  const run_result bf = train(mlp_config(presets::bf16_mixed, 150));
  const auto f_bf = sim_test::underflow_fraction(bf);
  for (const auto& [name, fraction] : f_bf) {
    INFO(name);
    CHECK(fraction == 0.0);
  }
  const double gap = sim_test::relative_gap(bf.final_eval.loss, ref.final_eval.loss);
  std::printf("held-out loss: fp32 %.6f  bf16-mixed (no scaler) %.6f (gap %.3f%%, tolerance %.2f%%)\n",
              ref.final_eval.loss, bf.final_eval.loss, 100 * gap, 100 * tracking_tolerance(bf16));
  CHECK(gap < tracking_tolerance(bf16));
  CHECK(bf.final_eval.accuracy > ref.final_eval.accuracy - 0.01);
  for (const step_record& s : bf.steps) REQUIRE_FALSE(s.skipped);
}

TEST_CASE("fp16 parameters without master weights stagnate; fp32 master weights fix it") {
  // Updates lr * g of about 1e-6 against weights of about 0.1, whose half ulp in fp16 is 2^-15 or 2^-16:
  // rounded straight back to fp16 most updates are lost.
  auto cfg = mlp_config(presets::fp16_pure_master, 150);
  cfg.optimizer.learning_rate = 0.00025;
  cfg.optimizer.momentum = 0.0;
  cfg.scaler.kind = scaler_kind::dynamic;
  cfg.scaler.dynamic = scaler_presets::pytorch;
  cfg.optimizer.master_weights = master_weights_mode::on;
  const run_result master = train(cfg);
  cfg.optimizer.master_weights = master_weights_mode::off;
  const run_result direct = train(cfg);
  cfg.optimizer.stochastic_write_back = true;
  const run_result stochastic = train(cfg);
  cfg = mlp_config(presets::fp32, 150);
  cfg.optimizer.learning_rate = 0.00025;
  cfg.optimizer.momentum = 0.0;
  const run_result ref = train(cfg);
  const double start = ref.steps.front().loss;
  std::printf("held-out loss after 150 steps from %.4f: fp32 %.4f  fp16 params + master %.4f  fp16 params, no master %.4f"
              "  no master + stochastic write-back %.4f\n",
              start, ref.final_eval.loss, master.final_eval.loss, direct.final_eval.loss, stochastic.final_eval.loss);
  const double progress_ref = start - ref.final_eval.loss;
  const double progress_master = start - master.final_eval.loss;
  const double progress_direct = start - direct.final_eval.loss;
  CHECK(progress_ref > 0.05);
  CHECK(sim_test::relative_gap(master.final_eval.loss, ref.final_eval.loss) < tracking_tolerance(fp16));
  CHECK(progress_direct < 0.5 * progress_master);
  // Stochastic rounding keeps updates in expectation, so it progresses further than nearest rounding.
  CHECK(start - stochastic.final_eval.loss > progress_direct);
}
