// Compile-time checks of the policy and scaling constants against hand-derived numbers.
#include <catch2/catch.hpp>
#include <cfloat>

#include "safeamp/policy.hpp"
#include "safeamp/scaling.hpp"
#include "safeamp/scaling/delayed_scaling_step.hpp"
#include "safeamp/scaling/scaler_block.hpp"

using namespace safeamp;

// Policies: presets, derived defaults and the grammar run at compile time.
static_assert(op_class_count == 7);
static_assert(all_op_classes[6] == op_class::optimizer_update);
static_assert(presets::fp16_mixed.format_for(op_class::softmax) == fp32);
static_assert(presets::fp16_mixed.format_for(op_class::matmul) == fp16);
static_assert(parse_policy("p=fp16,m=true") == presets::fp16_pure_master);
static_assert(parse_policy("preset=bf16-mixed,loss=bf16").format_for(op_class::loss) == bf16);
static_assert(parse_policy("c=e3m2fnnan").compute == format_spec{3, 2, special_values::finite_nan});
static_assert(!needs_loss_scaling(presets::bf16_mixed));
static_assert(needs_loss_scaling(presets::fp16_mixed));
static_assert(preset_name_of(presets::tf32) == "tf32");

// Scaler constants: 2^128 - 2^103 is FLT_MAX + half an ulp of FLT_MAX (ulp = 2^104).
static_assert(detail::float_overflow_threshold == 340282346638528859811704183484516925440.0 + 0x1p103);
static_assert(float_min_normal == 0x1p-126f);
static_assert(scaler_presets::megatron.init_scale == 0x1p32f);
static_assert(initial_state(scaler_presets::deepspeed).hysteresis_tracker == 2);
static_assert(inverse_scale(65536.0f) == 0x1p-16f);

// The transition at compile time: three PyTorch-preset overflows from 2^16 give 2^13.
constexpr scaler_state after_three(scaler_config c) {
  scaler_state s = initial_state(c);
  for (int i = 0; i < 3; ++i) s = update_scale(c, s, true);
  return s;
}
static_assert(after_three(scaler_presets::pytorch).scale == 8192.0f);
static_assert(after_three(scaler_presets::nemo).scale == 16384.0f);  // the first overflow is absorbed (H = 2)
static_assert(transition(scaler_presets::pytorch, {FLT_MAX, 1999, 1, 0}, false).event == scale_event::growth_refused);

// The block's step (what the device update kernel runs) at compile time: with the PyTorch preset, a clean
// step then two overflows: 2^16 -> 2^16 -> 2^15 -> 2^14; 1 applied, 2 skipped, 2 backoffs, last overflow step 2.
constexpr scaler_block after_clean_and_two_overflows() {
  const scaler_config c = scaler_presets::pytorch;
  scaler_block b = initial_block(c);
  for (const bool found : {false, true, true}) {
    b.found_inf = found ? 1 : 0;
    advance_step(c, b, true);
  }
  return b;
}
static_assert(after_clean_and_two_overflows().state.scale == 16384.0f);
static_assert(after_clean_and_two_overflows().stats.applied_steps == 1);
static_assert(after_clean_and_two_overflows().stats.skipped_steps == 2);
static_assert(after_clean_and_two_overflows().stats.backoff_events == 2);
static_assert(after_clean_and_two_overflows().stats.last_overflow_step == 2);
static_assert(after_clean_and_two_overflows().last.scale_before == 32768.0f);
static_assert(after_clean_and_two_overflows().found_inf == 0);  // the flag is cleared for the next step
// amax on bits: |-3| = 3.0f = 0x40400000; a NaN beats +inf.
static_assert(amax_fold(0, -3.0f) == 0x40400000u);
static_assert(amax_fold(amax_fold(0, __builtin_huge_valf()), __builtin_nanf("")) == amax_nan_bits);

TEST_CASE("the compile-time values hold at run time too") {
  scaler_config c = scaler_presets::pytorch;  // not constexpr: evaluated at run time
  CHECK(after_three(c).scale == 8192.0f);
  CHECK(update_scale(c, {FLT_MAX, 1999, 1, 0}, false).scale == FLT_MAX);
}
