// Host-side tests of the GPU trainer's step comparison (examples/cuda/step_compare.*) on hand-written step
// records, and of the check of which runs the GPU trainer supports (examples/cuda/gpu_support.hpp).
#include "step_compare.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "gpu_support.hpp"
#include "safeamp/error.hpp"
#include "safeamp/policy.hpp"
#include "safeamp/scaling/update_scale.hpp"
#include "safeamp/sim/report.hpp"

namespace {

using safeamp::gpu_trainer::compare_steps;
using safeamp::gpu_trainer::comparison;
using safeamp::gpu_trainer::parse_step_records;
using safeamp::sim::step_record;

constexpr double inf = std::numeric_limits<double>::infinity();

step_record rec(std::int64_t step, double loss, bool overflow) {
  step_record r;
  r.step = step;
  r.loss = loss;
  r.scale = 1024.0f;
  r.found_inf = overflow;
  r.skipped = overflow;
  r.grad_norm_before_clip = overflow ? inf : 1.0;
  r.grad_norm_after_clip = r.grad_norm_before_clip;
  return r;
}

std::string error_text(const std::string& jsonl) {
  try {
    (void)parse_step_records(jsonl, "t.jsonl");
  } catch (const safeamp::error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("parse_step_records reads the simulator's JSON Lines fields, including non-finite text", "[trainer]") {
  const std::string text =
      R"({"step":0,"loss":2.5,"scale":65536.0,"found_inf":false,"skipped":false,"grad_norm_before_clip":1.5,)"
      R"("grad_norm_after_clip":1.0,"layers":[{"name":"loss.dlogits","elements":8,"overflow":0,"underflow":3,)"
      R"("subnormal":2,"nan":0}],"step_seconds":0.25})"
      "\n\n"
      R"({"step":1,"loss":"nan","scale":32768.0,"found_inf":true,"skipped":true,"grad_norm_before_clip":"inf",)"
      R"("grad_norm_after_clip":"-inf","layers":[],"step_seconds":0.5})"
      "\n";
  const std::vector<step_record> r = parse_step_records(text, "t.jsonl");
  REQUIRE(r.size() == 2);
  CHECK(r[0].step == 0);
  CHECK(r[0].loss == 2.5);
  CHECK(r[0].scale == 65536.0f);
  CHECK_FALSE(r[0].found_inf);
  CHECK(r[0].grad_norm_before_clip == 1.5);
  CHECK(r[0].grad_norm_after_clip == 1.0);
  REQUIRE(r[0].grads.size() == 1);
  CHECK(r[0].grads[0].name == "loss.dlogits");
  CHECK(r[0].grads[0].elements == 8);
  CHECK(r[0].grads[0].underflow == 3);
  CHECK(r[0].grads[0].subnormal == 2);
  CHECK(r[0].step_seconds == 0.25);
  CHECK(r[1].step == 1);
  CHECK(std::isnan(r[1].loss));
  CHECK(r[1].found_inf);
  CHECK(r[1].skipped);
  CHECK(r[1].grad_norm_before_clip == inf);
  CHECK(r[1].grad_norm_after_clip == -inf);
}

TEST_CASE("parse_step_records reads back what the simulator's writer writes", "[trainer]") {
  step_record a = rec(7, 1.25, false);
  a.grads.push_back({.name = "fc0.weight", .elements = 64, .overflow = 1, .underflow = 2, .subnormal = 3, .nan = 4});
  step_record b = rec(8, inf, true);
  const std::string text = safeamp::sim::step_json_line(a) + safeamp::sim::step_json_line(b);
  const std::vector<step_record> r = parse_step_records(text, "sim");
  REQUIRE(r.size() == 2);
  CHECK(r[0] == a);  // deterministic fields (step_seconds excluded)
  CHECK(r[1] == b);
}

TEST_CASE("parse_step_records names the source, line and field of bad input", "[trainer]") {
  const std::string good =
      R"({"step":0,"loss":1,"scale":1,"found_inf":false,"skipped":false,"grad_norm_before_clip":0,"grad_norm_after_clip":0})";
  CHECK(parse_step_records(good, "t.jsonl").size() == 1);
  const std::string e1 = error_text(good + "\n{not json\n");
  CHECK(e1.find("t.jsonl line 2") != std::string::npos);
  const std::string e2 = error_text(R"({"step":0,"scale":1,"found_inf":false,"skipped":false})");
  CHECK(e2.find("'loss'") != std::string::npos);
  CHECK(e2.find("missing") != std::string::npos);
  const std::string e3 = error_text(
      R"({"step":0,"loss":"big","scale":1,"found_inf":false,"skipped":false,"grad_norm_before_clip":0,"grad_norm_after_clip":0})");
  CHECK(e3.find("'big'") != std::string::npos);
  const std::string e4 = error_text(
      R"({"step":0,"loss":1,"scale":1,"found_inf":1,"skipped":false,"grad_norm_before_clip":0,"grad_norm_after_clip":0})");
  CHECK(e4.find("found_inf") != std::string::npos);
  CHECK(error_text("[1,2]").find("JSON object") != std::string::npos);
}

TEST_CASE("compare_steps reports overflow steps of each run and the loss gap", "[trainer]") {
  // a overflowed at step 2 (its loss there is inf), b at steps 2 and 3.
  const std::vector<step_record> a = {rec(0, 2.0, false), rec(1, 1.8, false), rec(2, inf, true), rec(3, 1.5, false),
                                      rec(4, 1.4, false)};
  const std::vector<step_record> b = {rec(0, 2.0, false), rec(1, 1.9, false), rec(2, 1.7, true), rec(3, 1.5, true),
                                      rec(4, 1.54, false)};
  const comparison c = compare_steps(a, b, {.max_relative_loss_gap = 0.05});
  CHECK(c.steps_a == 5);
  CHECK(c.steps_b == 5);
  CHECK(c.common_steps == 5);
  CHECK(c.overflow_steps_a == std::vector<std::int64_t>{2});
  CHECK(c.overflow_steps_b == std::vector<std::int64_t>{2, 3});
  CHECK(c.overflow_only_in_a.empty());
  CHECK(c.overflow_only_in_b == std::vector<std::int64_t>{3});
  CHECK(c.non_finite_loss_steps == std::vector<std::int64_t>{2});
  // Hand-derived gaps over the finite steps 0, 1, 3, 4: 0, 0.1, 0, 0.14; relative to the larger loss:
  // 0, 0.1/1.9 = 0.0526, 0, 0.14/1.54 = 0.0909.
  CHECK(c.max_abs_loss_gap == Approx(0.14).epsilon(1e-12));
  CHECK(c.max_relative_loss_gap == Approx(0.14 / 1.54).epsilon(1e-12));
  CHECK(c.max_gap_step == 4);
  CHECK(c.mean_abs_loss_gap == Approx(0.24 / 4.0).epsilon(1e-12));
  CHECK(c.final_loss_a == 1.4);
  CHECK(c.final_loss_b == 1.54);
  CHECK(c.steps_over_tolerance == std::vector<std::int64_t>{1, 4});
  CHECK_FALSE(c.overflow_steps_agree);
  CHECK_FALSE(c.loss_within_tolerance);
  CHECK_FALSE(c.agree);

  // A looser tolerance accepts the gap; the overflow disagreement still makes the runs differ.
  const comparison loose = compare_steps(a, b, {.max_relative_loss_gap = 0.1});
  CHECK(loose.loss_within_tolerance);
  CHECK_FALSE(loose.agree);

  const std::string json = safeamp::gpu_trainer::comparison_json(c, "sim", "gpu");
  CHECK(json.find(R"("overflow_only_in_b":[3])") != std::string::npos);
  CHECK(json.find(R"("agree":false)") != std::string::npos);
  const std::string text = safeamp::gpu_trainer::comparison_text(c, "sim", "gpu");
  CHECK(text.find("overflow steps in gpu: 2,3") != std::string::npos);
  CHECK(text.find("DIFFER") != std::string::npos);
}

TEST_CASE("compare_steps: identical runs agree; steps are matched by number", "[trainer]") {
  const std::vector<step_record> a = {rec(0, 2.0, false), rec(1, 1.0, true), rec(2, 0.5, false)};
  const comparison same = compare_steps(a, a);
  CHECK(same.agree);
  CHECK(same.max_abs_loss_gap == 0.0);
  CHECK(same.overflow_steps_a == std::vector<std::int64_t>{1});

  // b lacks step 1 and has an extra step 5: only steps 0 and 2 are compared.
  const std::vector<step_record> b = {rec(0, 2.0, false), rec(2, 0.5, false), rec(5, 9.0, true)};
  const comparison c = compare_steps(a, b);
  CHECK(c.common_steps == 2);
  CHECK(c.overflow_only_in_a.empty());  // a's overflow at step 1 has no counterpart to disagree with
  CHECK(c.overflow_only_in_b.empty());
  CHECK(c.agree);

  CHECK_FALSE(compare_steps(a, std::vector<step_record>{}).agree);  // nothing in common: no verdict of agreement
  CHECK_THROWS_AS(compare_steps(a, a, {.max_relative_loss_gap = -1.0}), safeamp::error);
}

TEST_CASE("check_gpu_supported accepts the simulator's MLP presets and names what it refuses", "[trainer]") {
  using safeamp::gpu_trainer::check_gpu_supported;
  safeamp::sim::run_config cfg;
  for (const auto& p : {safeamp::presets::fp32, safeamp::presets::tf32, safeamp::presets::bf16_mixed,
                        safeamp::presets::fp16_mixed, safeamp::presets::fp16_pure_master}) {
    cfg.policy = p;
    CHECK_NOTHROW(check_gpu_supported(cfg));
  }
  const auto message = [](const safeamp::sim::run_config& c) -> std::string {
    try {
      check_gpu_supported(c);
    } catch (const safeamp::error& e) {
      return e.what();
    }
    return "accepted";
  };
  safeamp::sim::run_config fp8 = cfg;
  fp8.policy = safeamp::presets::fp8_hybrid;
  CHECK(message(fp8).find("matmul") != std::string::npos);
  safeamp::sim::run_config tr = cfg;
  tr.model = safeamp::sim::model_kind::transformer;
  CHECK(message(tr).find("model") != std::string::npos);
  safeamp::sim::run_config ck = cfg;
  ck.checkpoint.save_path = "x.json";
  CHECK(message(ck).find("checkpoint") != std::string::npos);
}

TEST_CASE("device_scaler_config: static and no scaling never move the scale; dynamic is the run's config",
          "[trainer]") {
  using safeamp::gpu_trainer::device_scaler_config;
  safeamp::sim::scaler_choice dyn;
  dyn.kind = safeamp::sim::scaler_kind::dynamic;
  dyn.dynamic.growth_interval = 7;
  CHECK(device_scaler_config(dyn) == dyn.dynamic);

  safeamp::sim::scaler_choice fixed;
  fixed.kind = safeamp::sim::scaler_kind::static_scale;
  fixed.static_scale = 8.0f;
  safeamp::sim::scaler_choice none;
  none.kind = safeamp::sim::scaler_kind::none;
  for (const auto& [choice, want] : {std::pair{fixed, 8.0f}, std::pair{none, 1.0f}}) {
    const safeamp::scaler_config cfg = device_scaler_config(choice);
    safeamp::scaler_state st = safeamp::initial_state(cfg);
    CHECK(st.scale == want);
    // 5000 steps (more than two default growth intervals of clean steps), then bursts of overflows.
    for (int i = 0; i < 5000; ++i) {
      st = safeamp::update_scale(cfg, st, false);
      REQUIRE(st.scale == want);
    }
    for (int i = 0; i < 3000; ++i) {
      st = safeamp::update_scale(cfg, st, i % 3 != 0);
      REQUIRE(st.scale == want);
    }
  }
}
