// Precision policy values and presets: every preset field against the formats docs/policies.md gives it,
// which presets need loss scaling, and use as a compile-time template argument.
#include "safeamp/policy.hpp"

#include <catch2/catch.hpp>

using namespace safeamp;

namespace {
template <precision_policy P>
struct kernel_for {
  // A trainer's hot loop specialised on a policy: the format is a compile-time constant.
  static constexpr format_spec matmul_format = P.format_for(op_class::matmul);
  static constexpr bool scaled = needs_loss_scaling(P);
};
}  // namespace

TEST_CASE("presets hold the formats their rationale describes") {
  // fp32: everything fp32.
  for (op_class c : all_op_classes) CHECK(presets::fp32.format_for(c) == fp32);
  CHECK(presets::fp32.gradient == fp32);

  CHECK(presets::tf32.format_for(op_class::matmul) == tf32);
  CHECK(presets::tf32.compute == tf32);
  CHECK(presets::tf32.output == fp32);
  CHECK(presets::tf32.format_for(op_class::elementwise) == fp32);

  // Autocast-like: matmul and elementwise in the low format, softmax/norm/reduction/loss/update in fp32.
  for (const precision_policy& p : {presets::bf16_mixed, presets::fp16_mixed}) {
    const format_spec low = p.compute;
    CHECK(p.param == fp32);
    CHECK(p.accumulate == fp32);
    CHECK(p.format_for(op_class::matmul) == low);
    CHECK(p.format_for(op_class::elementwise) == low);
    CHECK(p.format_for(op_class::softmax) == fp32);
    CHECK(p.format_for(op_class::normalization) == fp32);
    CHECK(p.format_for(op_class::reduction) == fp32);
    CHECK(p.format_for(op_class::loss) == fp32);
    CHECK(p.format_for(op_class::optimizer_update) == fp32);
    CHECK_FALSE(p.master_weights);
  }
  CHECK(presets::bf16_mixed.compute == bf16);
  CHECK(presets::fp16_mixed.compute == fp16);

  CHECK(presets::fp16_pure_master.param == fp16);
  CHECK(presets::fp16_pure_master.master_weights);
  CHECK(update_format(presets::fp16_pure_master) == fp32);
  CHECK(update_format(presets::fp16_mixed) == fp32);

  CHECK(presets::fp8_hybrid.format_for(op_class::matmul) == fp8_e4m3);
  CHECK(presets::fp8_hybrid.gradient == fp8_e5m2);
  CHECK(presets::fp8_hybrid.accumulate == fp32);
}

TEST_CASE("which presets need loss scaling follows the gradient format's exponent range") {
  CHECK_FALSE(needs_loss_scaling(presets::fp32));
  CHECK_FALSE(needs_loss_scaling(presets::tf32));
  CHECK_FALSE(needs_loss_scaling(presets::bf16_mixed));  // bf16 has fp32's 8 exponent bits
  CHECK(needs_loss_scaling(presets::fp16_mixed));
  CHECK(needs_loss_scaling(presets::fp16_pure_master));
  CHECK(needs_loss_scaling(presets::fp8_hybrid));
  CHECK(required_scaling(presets::fp16_mixed) == gradient_scaling::dynamic_loss_scale);
  CHECK(required_scaling(presets::fp8_hybrid) == gradient_scaling::per_tensor_scaling);
  CHECK(required_scaling(presets::bf16_mixed) == gradient_scaling::none);
}

TEST_CASE("policies are structural values usable as template arguments") {
  STATIC_REQUIRE(kernel_for<presets::fp16_mixed>::matmul_format == fp16);
  STATIC_REQUIRE(kernel_for<presets::fp16_mixed>::scaled);
  STATIC_REQUIRE_FALSE(kernel_for<presets::bf16_mixed>::scaled);
  // A string parsed at compile time is a template argument too.
  STATIC_REQUIRE(kernel_for<parse_policy("params=fp32,compute=e5m2")>::matmul_format == fp8_e5m2);
  STATIC_REQUIRE(parse_policy("fp16-mixed") == presets::fp16_mixed);
}

TEST_CASE("with_op returns a modified copy and equality sees every field") {
  const precision_policy p = presets::fp16_mixed.with_op(op_class::softmax, fp16);
  CHECK(p.format_for(op_class::softmax) == fp16);
  CHECK(presets::fp16_mixed.format_for(op_class::softmax) == fp32);
  CHECK(p != presets::fp16_mixed);
  precision_policy q = presets::fp16_mixed;
  q.master_weights = true;
  CHECK(q != presets::fp16_mixed);
}

TEST_CASE("preset_by_name finds every preset and lists the names on error") {
  CHECK(preset_by_name("fp32") == presets::fp32);
  CHECK(preset_by_name("tf32") == presets::tf32);
  CHECK(preset_by_name("bf16-mixed") == presets::bf16_mixed);
  CHECK(preset_by_name("FP16_Mixed") == presets::fp16_mixed);
  CHECK(preset_by_name("fp16-pure-master") == presets::fp16_pure_master);
  CHECK(preset_by_name("fp8-hybrid") == presets::fp8_hybrid);
  try {
    (void)preset_by_name("fp12");
    FAIL("no error");
  } catch (const error& e) {
    const std::string m = e.what();
    CHECK(m.find("fp12") != std::string::npos);
    CHECK(m.find("fp16-pure-master") != std::string::npos);
    CHECK(e.field() == "policy preset");
  }
  // A policy string's bad token and the whole string are each quoted cut (quoted_input.hpp): the message of a
  // 3000-character token is as long as that of a 300-character one.
  const auto message_for = [](std::size_t n) -> std::string {
    try {
      (void)parse_policy("params=fp32,compute=" + std::string(n, 'z'));
    } catch (const error& e) {
      return e.what();
    }
    return "(no error)";
  };
  const std::string m = message_for(3000);
  CHECK(m.find("'" + std::string(80, 'z') + "...' in policy 'params=fp32,compute=") != std::string::npos);
  CHECK(m.size() == message_for(300).size());
  CHECK(m.size() < 1000);
}
