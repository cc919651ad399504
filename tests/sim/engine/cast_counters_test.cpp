// The cast counters' definition (docs/simulator.md, "Cast counters") on hand-picked values: every result counted
// once, under its op class, however many roundings it goes through (an activation computed in fp32 and stored in
// fp16; the loss gradient rounded in the loss format, then cast into policy.gradient; a backward's dx), and an
// underflow counted at the rounding that zeroed it. fp16: smallest subnormal 2^-24, smallest normal 2^-14, largest
// finite 65504; a value below 2^-25 (half the smallest subnormal) rounds to zero, one in [2^-24, 2^-14) is a
// subnormal, 1e5 overflows to inf.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <string>

#include "safeamp/format.hpp"
#include "safeamp/policy/policy_string.hpp"
#include "safeamp/sim/autocast.hpp"
#include "safeamp/sim/loss.hpp"
#include "safeamp/sim/report_diagnosis.hpp"

using namespace safeamp;
using namespace safeamp::sim;

namespace Catch {
template <>
struct StringMaker<cast_stats> {
  static std::string convert(const cast_stats& s) {
    return "{elements " + std::to_string(s.elements) + ", overflow " + std::to_string(s.overflow) + ", underflow " +
           std::to_string(s.underflow) + ", subnormal " + std::to_string(s.subnormal) + ", nan " +
           std::to_string(s.nan) + ", infinity " + std::to_string(s.infinity) + "}";
  }
};
}  // namespace Catch

namespace {

parameter row_of(float v, Eigen::Index width) {
  parameter p;
  p.value = matrix::Constant(1, width, v);
  return p;
}

}  // namespace

TEST_CASE("autocast backward: relu, gelu, layer_norm and softmax counted under their op class", "[counters]") {
  SECTION("relu and gelu: dx in fp16 (elementwise), then fp16 (gradient), under elementwise") {
    autocast ac(presets::fp16_mixed);
    matrix x(1, 7), dy(1, 7);
    x << 1.0f, 2.0f, 3.0f, -1.0f, 0.5f, 4.0f, 5.0f;
    dy << 0x1p-26f, -0x1p-26f, 1.0f, 0x1p-26f, 0x1p-24f, 0x1p-20f, 1e5f;
    // relu'(x) = 1, 1, 1, 0, 1, 1, 1: dx = 2^-26 (underflow), -2^-26 (underflow), 1, 0 (x < 0: a zero, not an
    // underflow), 2^-24 (subnormal), 2^-20 (subnormal), 1e5 (overflow to inf).
    const matrix dx = ac.activation_backward(activation_fn::relu, x, dy);
    CHECK(dx(0, 0) == 0.0f);
    CHECK(dx(0, 4) == 0x1p-24f);
    CHECK(std::isinf(dx(0, 6)));
    CHECK(ac.counts(op_class::elementwise) ==
          cast_stats{.elements = 7, .overflow = 1, .underflow = 2, .subnormal = 2, .nan = 0, .infinity = 1});

    // gelu'(10) is 1 exactly in float (tanh saturates to 1): dx = dy, so 2^-26 underflows.
    matrix x10 = matrix::Constant(1, 2, 10.0f), d10(1, 2);
    d10 << 0x1p-26f, 1.0f;
    const matrix g = ac.gelu_backward(x10, d10);
    CHECK(g(0, 0) == 0.0f);
    CHECK(g(0, 1) == 1.0f);
    CHECK(ac.counts(op_class::elementwise) ==
          cast_stats{.elements = 9, .overflow = 1, .underflow = 3, .subnormal = 2, .nan = 0, .infinity = 1});
  }

  SECTION("layer_norm: dx in fp32 (normalization), then fp16 (gradient), under normalization") {
    autocast ac(presets::fp16_mixed);
    parameter gain = row_of(1.0f, 3), bias = row_of(0.0f, 3);
    // Rows (-1, 0, 1): mean 0, x_hat = (-r, 0, r) with r = 1/sqrt(2/3 + 1e-5) = 1.2247, stored in fp16 (normal
    // values and an exact zero). A gradient (c, -2c, c) has mean(dy) = 0 and mean(dy x_hat) = 0 exactly, so
    // dx = r dy = (1.22c, -2.45c, 1.22c).
    matrix x(2, 3);
    x << -1.0f, 0.0f, 1.0f,  //
        -1.0f, 0.0f, 1.0f;
    layer_norm_saved saved;
    (void)ac.layer_norm(x, gain, bias, saved);
    CHECK(ac.counts(op_class::normalization) == cast_stats{.elements = 6});
    const float c0 = 0x1p-27f, c1 = 0x1p-20f;
    matrix dy(2, 3);
    dy << c0, -2.0f * c0, c0,  //
        c1, -2.0f * c1, c1;
    // Row 0: |dx| <= 2.45 * 2^-27 < 2^-25, all three underflow in fp16; row 1: 1.22 * 2^-20 and 2.45 * 2^-20 are
    // fp16 subnormals.
    const matrix dx = ac.layer_norm_backward(saved, gain, bias, dy);
    CHECK(dx(0, 1) == 0.0f);
    CHECK(dx(1, 1) == round_to(fp16, -2.0f * c1 * saved.rstd[1]));
    CHECK(ac.counts(op_class::normalization) == cast_stats{.elements = 12, .underflow = 3, .subnormal = 3});
    // The gain and bias gradients stay under reduction: (-r, 0, r) (c0 + c1) and (c0 + c1, -2 (c0 + c1), c0 + c1),
    // fp16 subnormals but for the gain's exact zero.
    CHECK(ac.counts(op_class::reduction) == cast_stats{.elements = 6, .subnormal = 5});
  }

  SECTION("softmax: ds in the softmax format, under softmax") {
    autocast ac(parse_policy("preset=fp16-mixed,softmax=fp16"));
    const matrix p = ac.softmax(matrix::Zero(2, 2));  // 0.5 everywhere
    REQUIRE(p(0, 0) == 0.5f);
    CHECK(ac.counts(op_class::softmax) == cast_stats{.elements = 4});
    matrix dp(2, 2);
    dp << 0x1p-16f, 0.0f,  //
        std::numeric_limits<float>::quiet_NaN(), 0.0f;
    // Row 0: sum(dp p) = 2^-17, ds = 0.5 (2^-16 - 2^-17, 0 - 2^-17) = (2^-18, -2^-18), fp16 subnormals; row 1: NaN.
    const matrix ds = ac.softmax_backward(p, dp);
    CHECK(ds(0, 0) == 0x1p-18f);
    CHECK(ds(0, 1) == -0x1p-18f);
    CHECK(ac.counts(op_class::softmax) == cast_stats{.elements = 8, .subnormal = 2, .nan = 2});
  }
}

TEST_CASE("elementwise=fp32: an activation computed in fp32 and stored in fp16 is one result", "[counters]") {
  const precision_policy pol = parse_policy("preset=fp16-mixed,elementwise=fp32");
  REQUIRE(pol.format_for(op_class::elementwise) == fp32);
  REQUIRE(pol.output == fp16);
  matrix x(1, 6);
  x << 0x1p-26f, -1.0f, 1.0f, 0x1p-20f, 1e5f, -3.0f;
  const cast_stats once{.elements = 6, .overflow = 1, .underflow = 1, .subnormal = 1, .nan = 0, .infinity = 1};

  SECTION("autocast, both directions") {
    autocast ac(pol);
    // relu: 2^-26 (underflows in fp16), 0, 1, 2^-20 (subnormal), 1e5 (overflows to inf), 0.
    const matrix y = ac.activation(activation_fn::relu, x);
    CHECK(y(0, 0) == 0.0f);
    CHECK(y(0, 3) == 0x1p-20f);
    CHECK(ac.counts(op_class::elementwise) == once);
    // The backward: dx = dy relu'(x) = 1, 0, 2^-26 (underflows), 1, 1, 0 in fp32, then fp16: again once.
    matrix dy = matrix::Ones(1, 6);
    dy(0, 2) = 0x1p-26f;
    (void)ac.activation_backward(activation_fn::relu, x, dy);
    CHECK(ac.counts(op_class::elementwise) ==
          cast_stats{.elements = 12, .overflow = 1, .underflow = 2, .subnormal = 1, .nan = 0, .infinity = 1});
  }

  SECTION("the simulator's layers: the activation elements the memory estimate reads") {
    exec_context ctx;
    matrix y;
    residual_add(ctx, pol, x, matrix::Zero(1, 6), y);  // x + 0: relu's events (-1 and -3 are no event either)
    CHECK(ctx.activation_stats == once);
    activation_layer gelu_layer;  // its table and kernel path
    gelu_layer.fn = activation_fn::gelu;
    gelu_layer.forward(ctx, pol, matrix::Constant(1, 3, 10.0f), y);
    CHECK(ctx.activation_stats.elements == 9);
    // fp16-mixed (elementwise is the storage format): one cast, as before.
    exec_context mixed;
    residual_add(mixed, presets::fp16_mixed, x, matrix::Zero(1, 6), y);
    CHECK(mixed.activation_stats == once);
  }
}

TEST_CASE("the loss gradient: the loss format's zeros are loss-gradient underflow", "[counters]") {
  const precision_policy loss16 = parse_policy("preset=fp16-mixed,loss=fp16");
  REQUIRE(loss16.format_for(op_class::loss) == fp16);
  REQUIRE(loss16.gradient == fp16);
  // Two equal logits per row: p = 0.5 (in fp16 too: ln 2 rounds to 0.69336 and exp(-0.69336) = 0.49989 rounds to
  // 0.5), so d logits = (p - onehot) grad_scale / rows = +-0.5 grad_scale / 2.
  const matrix logits = matrix::Zero(2, 2);
  const std::vector<std::int32_t> targets = {0, 1};
  exec_context ctx;
  matrix d;

  SECTION("cross-entropy, every element below half of fp16's smallest subnormal") {
    const loss_result r = cross_entropy(ctx, loss16, logits, targets, 0x1p-25, &d);  // +-2^-27
    CHECK(d.cwiseAbs().maxCoeff() == 0.0f);
    CHECK(r.gradient_stats == cast_stats{.elements = 4, .underflow = 4});  // zeroed by the loss format
    // With the loss in fp32 the gradient cast zeroes the same four.
    const loss_result wide = cross_entropy(ctx, presets::fp16_mixed, logits, targets, 0x1p-25, &d);
    CHECK(wide.gradient_stats == r.gradient_stats);
  }

  SECTION("cross-entropy, every element an fp16 subnormal: counted once, not once per rounding") {
    const loss_result r = cross_entropy(ctx, loss16, logits, targets, 0x1p-15, &d);  // +-2^-17
    CHECK(d(0, 0) == -0x1p-17f);
    CHECK(d(0, 1) == 0x1p-17f);
    CHECK(r.gradient_stats == cast_stats{.elements = 4, .subnormal = 4});
  }

  SECTION("mse through autocast: one underflow, one subnormal, one normal value, one exact zero") {
    autocast ac(loss16);
    matrix y = matrix::Ones(1, 4), t(1, 4);
    t << 1.0f - 0x1p-11f, 1.0f - 0x1p-7f, -1.0f, 1.0f;
    // d = y - t = 2^-11, 2^-7, 2, 0 (fp16 values); gradient 2 d grad_scale / 4 with grad_scale 2^-14:
    // 2^-26 (underflows), 2^-22 (subnormal), 2^-14 (normal), 0.
    (void)ac.mse_loss(y, t, 0x1p-14, &d);
    CHECK(d(0, 0) == 0.0f);
    CHECK(d(0, 1) == 0x1p-22f);
    CHECK(d(0, 2) == 0x1p-14f);
    CHECK(ac.counts(op_class::loss) == cast_stats{.elements = 4, .underflow = 1, .subnormal = 1});
  }
}

TEST_CASE("the diagnosis names the format that zeroed the loss gradient", "[counters]") {
  // 4 steps, a loss gradient of 100 elements of which 50 underflow at every step: 50 %, from step 0.
  run_result r;
  for (std::int64_t i = 0; i < 4; ++i) {
    step_record st;
    st.step = i;
    st.loss = 1.0;
    st.grad_norm_before_clip = 1.0;
    st.grads.push_back(layer_counts{.name = loss_gradient_name, .elements = 100, .underflow = 50});
    r.steps.push_back(st);
  }
  parity_result failed;
  failed.outcome = verdict::fail;
  const auto diagnose = [&](const char* policy) {
    r.policy = parse_policy(policy);
    return diagnose_run({.run = r, .parity = failed, .scaler = scaler_kind::none, .faults = {}});
  };
  // bf16-mixed with an fp16 loss: bf16 (smallest subnormal 9.2e-41) cannot have zeroed them, fp16 (5.96e-08) did.
  const run_diagnosis loss16 = diagnose("preset=bf16-mixed,loss=fp16");
  CHECK(loss16.cause == diagnosed_cause::gradient_underflow);
  CHECK(loss16.loss_gradient_underflow == 0.5);
  CHECK_THAT(loss16.text, Catch::Contains("underflowed in the loss format fp16 (values below its smallest subnormal "
                                          "5.96e-08 become zero): 50% of the loss gradient's elements"));
  CHECK_THAT(loss16.text, Catch::Contains("scaler.kind = none with gradients in the loss format fp16: turn on"));
  CHECK(loss16.likely_field == "scaler.kind");
  // fp16-mixed (loss in fp32): the gradient format, as before.
  const run_diagnosis mixed = diagnose("fp16-mixed");
  CHECK_THAT(mixed.text, Catch::Contains("underflowed in fp16 (values below its smallest subnormal 5.96e-08"));
}
