// Per-phase peaks of a training step (forward, backward, optimizer step): the optimizer-step temporaries of PyTorch's
// foreach AdamW against fused and 8-bit AdamW, autocast's weight copies, gradients held while accumulating, and the
// issue's headline case worked by hand: a 1.3B GPT full fine-tune on a 24 GB RTX 4090 at microbatch 1 does not fit
// with foreach AdamW and fits with fused or 8-bit AdamW.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>

#include "rtx4090_planner.hpp"
#include "safeamp/memory/planner.hpp"
#include "safeamp/memory/step_phases.hpp"
#include "safeamp/policy/policy_string.hpp"

using namespace safeamp;

TEST_CASE("optimizer-step temporaries: foreach AdamW copies the second moments, fused and 8-bit do not") {
  // torch/optim/adam.py _multi_tensor_adam: exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs), one
  // fp32 tensor per parameter: 4 bytes per parameter; 1.3e9 parameters -> 5.2 GB (the figure).
  CHECK(optimizer_temporary_bytes_per_param({.optimizer = optimizer_kind::adam}) == 4.0);
  CHECK(optimizer_temporary_bytes_per_param({.optimizer = optimizer_kind::adam, .impl = optimizer_impl::fused}) == 0.0);
  CHECK(optimizer_temporary_bytes_per_param({.optimizer = optimizer_kind::adam_8bit}) == 0.0);
  CHECK(optimizer_temporary_bytes_per_param({.optimizer = optimizer_kind::sgd_momentum}) == 0.0);
  CHECK(optimizer_temporary_bytes_per_param({.optimizer = optimizer_kind::adam, .optimizer_state_format = bf16}) ==
        2.0);
  CHECK(1.3e9 * optimizer_temporary_bytes_per_param({}) == 5.2e9);
  CHECK(parse_optimizer_impl("fused") == optimizer_impl::fused);
  CHECK_THROWS_WITH(parse_optimizer_impl("apex"), Catch::Contains("optimizer-impl") && Catch::Contains("foreach"));
}

TEST_CASE("autocast weight copies: 2 bytes per fp32 parameter multiplied in bf16, none for stored-fp16 weights") {
  CHECK(weight_copy_bytes_per_param(presets::bf16_mixed) == 2.0);
  CHECK(weight_copy_bytes_per_param(presets::fp16_mixed) == 2.0);
  CHECK(weight_copy_bytes_per_param(presets::fp8_hybrid) == 1.0);
  CHECK(weight_copy_bytes_per_param(presets::fp16_pure_master) == 0.0);
  CHECK(weight_copy_bytes_per_param(presets::fp32) == 0.0);
  // The copies are in the matmul format the GEMMs read, not the compute field a policy string derives it from:
  // "matmul=bf16" keeps compute fp32 but multiplies fp32 weights in bf16 (until 2026-12-06: 0 bytes).
  const precision_policy bf16_gemms = parse_policy("matmul=bf16");
  REQUIRE(bf16_gemms.compute == fp32);
  CHECK(weight_copy_bytes_per_param(bf16_gemms) == 2.0);
  CHECK(other_matmul_format(bf16_gemms) == bf16);
  CHECK(lora_base_format(bf16_gemms) == bf16);
  precision_policy fp16_field_only = presets::fp32;  // a compute field no GEMM reads: no copies
  fp16_field_only.compute = fp16;
  CHECK(weight_copy_bytes_per_param(fp16_field_only) == 0.0);
  CHECK(other_matmul_format(fp16_field_only) == fp32);
}

// Issue 14: the step's counts and flags are named; the old positional list (three counts, then two flags) and a
// calibration with the byte count and the microbatch in either order no longer compile.
template <typename... A>
constexpr bool step_inputs_callable = requires(A... a) {
  step_inputs_for(a...);
};
static_assert(!step_inputs_callable<std::uint64_t, precision_policy, state_options, zero_stage, std::uint64_t,
                                    std::uint64_t, std::uint64_t, bool, bool>);
static_assert(step_inputs_callable<step_request>);
template <typename... A>
constexpr bool calibrate_callable = requires(A... a) {
  calibrate_peak(a...);
};
static_assert(!calibrate_callable<step_needs, std::uint64_t, std::uint64_t>);
static_assert(calibrate_callable<step_needs, peak_measurement>);
template <typename... A>
constexpr bool headroom_callable = requires(A... a) {
  phase_headroom_bytes(a...);
};
static_assert(!headroom_callable<std::uint64_t, step_needs, std::uint64_t>);
static_assert(headroom_callable<step_needs, phase_point>);
template <typename... A>
constexpr bool flops_callable = requires(A... a) {
  training_flops_per_sample(a...);
};
static_assert(!flops_callable<std::uint64_t, std::uint64_t, recompute, std::uint64_t>);
static_assert(flops_callable<counted_model, recompute>);
template <typename... A>
constexpr bool gemm_callable = requires(A... a) {
  dominant_gemm(a...);
};
static_assert(!gemm_callable<transformer_shape, std::uint64_t, format_spec, format_spec>);
static_assert(gemm_callable<transformer_shape, std::uint64_t, gemm_formats>);

namespace {
// 1e9 parameters, bf16-mixed, AdamW foreach: weights 4e9, gradients 4e9, moments 8e9, weight copies 2e9,
// temporaries 4e9; activations 1e9 stored and 1.5e9 at the backward peak, per sample.
step_inputs round_inputs(bool accumulating, bool full) {
  return step_inputs_for({.parameters = 1'000'000'000ULL,
                          .policy = presets::bf16_mixed,
                          .states = {},
                          .forward_bytes_per_sample = 1'000'000'000ULL,
                          .backward_bytes_per_sample = 1'500'000'000ULL,
                          .accumulating = accumulating,
                          .full_recompute = full});
}
constexpr std::uint64_t gb = 1'000'000'000ULL;
}  // namespace

TEST_CASE("each phase holds what exists at its peak") {
  const step_needs n = step_needs_for(round_inputs(false, false));
  // forward: weights 4 + moments 8 + copies 2 = 14 GB, + 1 GB per sample; no gradients before the first backward.
  CHECK(n[0].fixed_bytes() == 14 * gb);
  CHECK(n[0].bytes_per_sample() == 1 * gb);
  // backward: 4 + 8 + gradients 4 + copies 2 = 18 GB, + 1.5 GB per sample.
  CHECK(n[1].fixed_bytes() == 18 * gb);
  CHECK(n[1].bytes_per_sample() == 1'500'000'000ULL);
  // optimizer step: 4 + 8 + 4 + temporaries 4 = 20 GB, no activations.
  CHECK(n[2].fixed_bytes() == 20 * gb);
  CHECK(n[2].bytes_per_sample() == 0);
  CHECK(n[1].bytes_at(3) == 18 * gb + 4'500'000'000ULL);
  // Accumulating: the summed gradients are held through later forwards: 14 + 4 = 18 GB.
  CHECK(step_needs_for(round_inputs(true, false))[0].fixed_bytes() == 18 * gb);
  // Full recomputation: the checkpointed layers saved no weight copies for backward: 18 - 2 = 16 GB.
  CHECK(step_needs_for(round_inputs(false, true))[1].fixed_bytes() == 16 * gb);
}

TEST_CASE("the largest microbatch is the smallest any phase allows; the step can fail on its own") {
  const step_needs n = step_needs_for(round_inputs(false, false));
  // 21 GB: forward floor((21 - 14) / 1) = 7, backward floor((21 - 18) / 1.5) = 2, the step fits (20 <= 21).
  phase_fit f = fit_phases(21 * gb, n);
  CHECK(f.max_microbatch == 2);
  CHECK(f.limiting == step_phase::backward);
  CHECK(f.shortfall_bytes == 0);
  CHECK(phase_headroom_bytes(n, {.available_bytes = 21 * gb, .microbatch = 2}) == 0);  // backward at 2: 18 + 3 = 21
  // At 1 the optimizer step's 20 GB is the tightest (backward 19.5): 1 GB left.
  CHECK(phase_headroom_bytes(n, {.available_bytes = 21 * gb, .microbatch = 1}) == 1'000'000'000LL);
  // 19.9 GB: backward at 1 is 19.5 (fits) but the step's 20 GB does not: short by 0.1 GB in the optimizer step.
  f = fit_phases(19'900'000'000ULL, n);
  CHECK(f.max_microbatch == 0);
  CHECK(f.limiting == step_phase::optimizer_step);
  CHECK(f.shortfall_bytes == 100'000'000LL);
  // Fused AdamW: the step holds 16 GB; backward allows floor((19.9 - 18) / 1.5) = 1.
  const step_needs fused = step_needs_for(step_inputs_for({.parameters = 1'000'000'000ULL,
                                                           .policy = presets::bf16_mixed,
                                                           .states = {.impl = optimizer_impl::fused},
                                                           .forward_bytes_per_sample = 1'000'000'000ULL,
                                                           .backward_bytes_per_sample = 1'500'000'000ULL}));
  CHECK(fused[2].fixed_bytes() == 16 * gb);
  CHECK(fit_phases(19'900'000'000ULL, fused).max_microbatch == 1);
}

namespace {
// A 1.3B GPT (GPT-3 XL shape, as in the README's A10 example): s = 2048, h = 2048, a = 16, L = 24, v = 50257.
//  P = 12 L h^2 + v h = 1,207,959,552 + 102,926,336 = 1,310,885,888.
constexpr transformer_shape gpt_1_3b{.sequence = 2048, .hidden = 2048, .heads = 16, .layers = 24, .vocabulary = 50257};
constexpr std::uint64_t p_1_3b = 1'310'885'888ULL;

// The RTX 4090 with the tool's defaults (rtx4090_planner.hpp): 22,727,811,399 bytes usable by the step.
planner_options rtx4090_options(state_options states) { return test_options::rtx4090(states); }

plan_candidate evaluate_1_3b(state_options states) {
  const workload w{.shape = gpt_1_3b, .parameters = p_1_3b, .tokens_per_sample = 2048, .samples = 1};
  const planner_options o = rtx4090_options(states);
  return detail::evaluate(w, o, o.policies[0], recompute::full, 0.4, states, zero_stage::none, 1);
}
}  // namespace

TEST_CASE("1.3B full fine-tune on a 24 GB RTX 4090, full recomputation: foreach AdamW does not fit at microbatch 1") {
  REQUIRE(parameter_count(gpt_1_3b) == p_1_3b);
  REQUIRE(detail::phase_pool_bytes(rtx4090_options({}).budget) == 22'727'811'399ULL);
  // Activations per sample with full recomputation (sbh = 2048 x 2048 = 4,194,304):
  //  stored = embedding sbh 4,194,304 + 24 layers x 2sbh 201,326,592 + head 4sbh 16,777,216
  //           + fp32 logits 4sv 411,705,344 = 634,003,456;
  //  peak   = stored + recomputing one layer (34sbh + 5as^2 - 2sbh = 469,762,048) = 1,103,765,504.
  const plan_candidate c = evaluate_1_3b({});
  // Optimizer step: 16 P (weights 4 + gradients 4 + moments 8) + foreach temporaries 4 P = 20 P
  //  = 26,217,717,760 > 22,727,811,399: short by 3,489,906,361 bytes.
  CHECK(c.max_microbatch == 0);
  CHECK(c.limiting_phase == step_phase::optimizer_step);
  CHECK(c.phase_peak_bytes[2] == 20 * p_1_3b);
  CHECK(c.shortfall_bytes == 3'489'906'361LL);
  // The other phases fit at microbatch 1: forward 14 P + 634,003,456 (the autocast copies, no gradients yet);
  // backward 16 P + 1,103,765,504 (no copies saved under full recomputation).
  CHECK(c.phase_peak_bytes[0] == 14 * p_1_3b + 634'003'456ULL);
  CHECK(c.phase_peak_bytes[1] == 16 * p_1_3b + 1'103'765'504ULL);
}

TEST_CASE("the same 1.3B fits at microbatch 1 with fused AdamW and at 8 with 8-bit AdamW") {
  const plan_candidate fused = evaluate_1_3b({.impl = optimizer_impl::fused});
  // Step 16 P = 20,974,174,208 fits; backward 22,077,939,712 fits with 649,871,687 to spare; 2 samples would need
  // 23,181,705,216 > 22,727,811,399.
  CHECK(fused.max_microbatch == 1);
  CHECK(fused.limiting_phase == step_phase::backward);
  CHECK(fused.headroom_bytes == 649'871'687LL);
  CHECK(fused.phase_peak_bytes[2] == 16 * p_1_3b);
  // 8-bit AdamW: 4 + 4 + 2 (+ 8/2048 absmax) bytes per parameter = 10 P + P/256 = 13,113,979,528;
  // backward floor((22,727,811,399 - 13,113,979,528) / 1,103,765,504) = floor(8.71) = 8.
  const plan_candidate eight = evaluate_1_3b({.optimizer = optimizer_kind::adam_8bit});
  CHECK(eight.state_bytes == 10 * p_1_3b + p_1_3b / 256);
  CHECK(eight.max_microbatch == 8);
}

TEST_CASE("combined remedies for the 1.3B foreach case: fused first (no time cost), never SGD, no extra devices") {
  const workload w{.shape = gpt_1_3b, .parameters = p_1_3b, .tokens_per_sample = 2048, .samples = 1};
  const planner_options o = rtx4090_options({});
  const std::vector<remedy> r = memory_remedies(w, o, evaluate_1_3b({}), 0.4);
  REQUIRE(r.size() == 3);
  // The order, least intrusive first: fused AdamW (no time, no quality question), 8-bit AdamW, then LoRA
  // (rank 16 on every linear layer: 16 x 16 x 2048 x 24 = 12,582,912 adapters), which is faster but changes what
  // is trained.
  CHECK(r[0].changes == std::vector<std::string>{"fused AdamW (fused=True)"});
  CHECK(r[0].result.max_microbatch == 1);
  CHECK(r[1].changes == std::vector<std::string>{"8-bit AdamW (bitsandbytes)"});
  CHECK_THAT(r[1].time_cost, Catch::Contains("quality unverified"));
  REQUIRE(r[2].changes.size() == 1);
  CHECK_THAT(r[2].changes[0], Catch::StartsWith("LoRA rank 16 on every linear layer (12582912 adapters train"));
  CHECK(r[2].result.seconds_per_sample < r[0].result.seconds_per_sample);
  for (const remedy& m : r) {
    CHECK(m.devices == 1);
    CHECK_THAT(m.text(), !Catch::Contains("sgd") && !Catch::Contains("SGD"));
  }
}

TEST_CASE("a target batch that needs accumulation puts the gradients into the forward pass") {
  // 1e9 parameters in fp16-pure-master (no weight copies): weights 2, gradients 2, master 4, moments 8 GB; without a
  // shape the per-sample figure (1.5 GB) serves forward and backward. Fused AdamW on 20 GB: forward 14 + 1.5 b,
  // backward 16 + 1.5 b (allows 2), step 16. A target of 4 needs accumulation: forward becomes 16 + 1.5 b: 2 x 2.
  device_spec d = find_device("A100");
  planner_options o;
  o.device = d;
  o.budget = {.device_bytes = 20 * gb, .reserve_fraction = 0.0};
  o.window_seconds = 1e9;
  const state_options fused{.impl = optimizer_impl::fused};
  const named_policy p{"fp16-pure-master", presets::fp16_pure_master};
  workload w{.parameters = 1'000'000'000ULL,
             .tokens_per_sample = 100,
             .activation_bytes_per_sample = 1'500'000'000ULL,
             .samples = 8};
  plan_candidate c = detail::evaluate(w, o, p, recompute::none, 0.4, fused, zero_stage::none, 1);
  CHECK(c.max_microbatch == 2);  // (20 - 16) / 1.5
  CHECK(c.needs[0].fixed_bytes() == 14 * gb);
  w.global_batch = 4;
  c = detail::evaluate(w, o, p, recompute::none, 0.4, fused, zero_stage::none, 1);
  CHECK(c.needs[0].fixed_bytes() == 16 * gb);
  CHECK(c.accumulation == accumulation_plan{.microbatch = 2, .steps = 2, .global_batch = 4});
}

TEST_CASE("a measured peak calibrates every phase by the same ratio") {
  const step_needs n = step_needs_for(round_inputs(false, false));
  // At microbatch 2 the model's peak is the backward's 18 + 2 x 1.5 = 21 GB; a measured 23.1 GB is 1.1x.
  const peak_calibration c = calibrate_peak(n, {.measured_bytes = 23'100'000'000ULL, .microbatch = 2});
  CHECK(c.predicted_bytes == 21 * gb);
  CHECK(c.ratio == Approx(1.1).epsilon(1e-12));
  // Calibrated: backward 19.8 GB + 1.65 GB per sample, forward 15.4 + 1.1, step 22. With 25 GB usable: backward
  // floor((25 - 19.8) / 1.65) = floor(3.15) = 3 (the model alone: floor(7 / 1.5) = 4).
  const step_needs k = scaled(n, c.ratio);
  CHECK(k[1].fixed_bytes() == 19'800'000'000ULL);
  CHECK(k[1].bytes_per_sample() == 1'650'000'000ULL);
  CHECK(k[2].fixed_bytes() == 22 * gb);
  CHECK(fit_phases(25 * gb, n).max_microbatch == 4);
  CHECK(fit_phases(25 * gb, k).max_microbatch == 3);
  // A measurement of something else (5x the model, e.g. nvidia-smi of a different run) is refused, not used.
  CHECK_THROWS_WITH(calibrate_peak(n, {.measured_bytes = 105 * gb, .microbatch = 2}),
                    Catch::Contains("measured-peak") && Catch::Contains("within 4x"));
  CHECK_THROWS_WITH(calibrate_peak(n, {.measured_bytes = 21 * gb, .microbatch = 0}),
                    Catch::Contains("measured-microbatch"));
  CHECK_THROWS_AS(calibrate_peak(n, {.measured_bytes = 0, .microbatch = 1}), error);
}

TEST_CASE("LoRA and QLoRA: a frozen base keeps only its weights; the adapters train in fp32") {
  CHECK(lora_parameters(gpt_1_3b, 16) == 12'582'912ULL);  // 16 r h L = 16 x 16 x 2048 x 24
  // 1e9 base parameters (bf16-mixed: fp32 storage), 1e7 adapters with AdamW: base 4e9; adapters 4 + 4 + 8 bytes.
  const state_options lora{.adapter_parameters = 10'000'000};
  const model_states m = model_states_for(1'000'000'000ULL, presets::bf16_mixed, lora);
  CHECK(m.weight_bytes == 4'040'000'000ULL);
  CHECK(m.gradient_bytes == 40'000'000ULL);
  CHECK(m.master_bytes == 0);
  CHECK(m.optimizer_bytes == 80'000'000ULL);
  // QLoRA: NF4 with double quantization is 4 + 8/64 + 32/(64 x 256) = 4.126953125 bits = 0.515869140625 bytes.
  CHECK(nf4_bytes_per_param == 0.515869140625);
  const state_options qlora{.adapter_parameters = 10'000'000, .base_4bit = true};
  CHECK(model_states_for(1'000'000'000ULL, presets::bf16_mixed, qlora).weight_bytes == 515'869'141ULL + 40'000'000ULL);
  // Phases: LoRA keeps autocast's copies of the fp32 base (2 bytes); QLoRA dequantizes per matmul (none);
  // foreach's temporaries cover the adapters only (4 x 1e7).
  const step_inputs li =
      step_inputs_for({.parameters = 1'000'000'000ULL, .policy = presets::bf16_mixed, .states = lora});
  CHECK(li.weight_copy_bytes == 2'000'000'000ULL);
  CHECK(li.optimizer_temporary_bytes == 40'000'000ULL);
  CHECK(step_inputs_for({.parameters = 1'000'000'000ULL, .policy = presets::bf16_mixed, .states = qlora})
            .weight_copy_bytes == 0);
  CHECK_THROWS_WITH(model_states_for(1000, presets::fp32, {.adapter_parameters = 2000}), Catch::Contains("adapter"));
  CHECK_THROWS_WITH(model_states_for(1000, presets::fp32, {.base_4bit = true}), Catch::Contains("QLoRA"));
}

TEST_CASE("a frozen base skips the weight-gradient GEMMs: 2 passes instead of 3 (+1 with full recomputation)") {
  // s = h = 1000, a = 10, L = 10, v = 10000 (one forward pass: linear 24 L s h^2 = 2.4e11, attention 4 L s^2 h = 4e10,
  // logits 2 s h v = 2e10). Full fine-tune: 7.2e11 + (1.2e11 + 6e10). LoRA with 1e6 adapters: linear 2 x 2.4e11
  // + 6 x 1e6 x 1000 = 4.86e11; attention still 3 passes 1.2e11; logits 2 passes 4e10.
  const transformer_shape t{.sequence = 1000, .hidden = 1000, .heads = 10, .layers = 10, .vocabulary = 10000};
  const flops_split f = training_flops_split(t, recompute::none, 1'000'000);
  CHECK(f.linear == Approx(4.86e11).epsilon(1e-12));
  CHECK(f.other == Approx(1.6e11).epsilon(1e-12));
  CHECK(training_flops_per_sample(t, recompute::none, 1'000'000) == Approx(6.46e11).epsilon(1e-12));
  // Full recomputation: linear 3 x 2.4e11 + 6e9, attention 4 x 4e10, logits 3 x 2e10.
  const flops_split full = training_flops_split(t, recompute::full, 1'000'000);
  CHECK(full.linear == Approx(7.26e11).epsilon(1e-12));
  CHECK(full.other == Approx(2.2e11).epsilon(1e-12));
  // Without a shape: 4PD + 6AD.
  CHECK(training_flops_per_sample(
            {.parameters = 1'000'000'000ULL, .tokens_per_sample = 100, .adapter_parameters = 1'000'000},
            recompute::none) == Approx(4e11 + 6e8).epsilon(1e-12));
}

TEST_CASE("optimizer offload: the device keeps weights and gradients; the CPU holds 16 bytes per parameter") {
  // 1e9 parameters, bf16-mixed (fp32 weights and gradients), AdamW offloaded (ZeRO-Offload, DeepSpeed's CPU Adam):
  // device 4e9 + 4e9; host fp32 parameters 4 + moments 8 + fp32 gradients 4 = 16e9 (DeepSpeed's estimator's 16 per
  // parameter before its 1.5 buffer factor).
  const state_options off{.impl = optimizer_impl::fused, .offload_optimizer = true};
  const model_states m = model_states_for(1'000'000'000ULL, presets::bf16_mixed, off);
  CHECK(m.total_bytes() == 8'000'000'000ULL);
  CHECK(m.host_bytes == 16'000'000'000ULL);
  CHECK(step_inputs_for(
            {.parameters = 1'000'000'000ULL, .policy = presets::bf16_mixed, .states = {.offload_optimizer = true}})
            .optimizer_temporary_bytes == 0);  // the CPU runs the update
  // One step: P (g + w) / 32 GB/s = 8e9 / 32e9 = 0.25 s over PCIe, P (12 + 2 x 8) / 50 GB/s = 0.56 s on the CPU.
  CHECK(offload_step_seconds(1'000'000'000ULL, bytes_per_param(presets::bf16_mixed), {}) ==
        Approx(0.81).epsilon(1e-12));
  // With 8-bit AdamW the offload is the paged optimizer (offload_adapters_test.cpp): the states alone on the host.
  CHECK(model_states_for(1000, presets::fp32, {.optimizer = optimizer_kind::adam_8bit, .offload_optimizer = true})
            .host_bytes == 2004);  // 1000 x (2 + 8/2048) = 2003.9, rounded up
}

TEST_CASE("ZeRO stage 3 gathers the largest layer: DeepSpeed's 4 x largest-layer term and 18/N (t5-3b, 8 GPUs)") {
  // The shape's largest layer: the tied embedding v h = 50257 x 2048 = 102,926,336 > the MLP's 4 h^2 = 16,777,216.
  CHECK(largest_layer_parameters(gpt_1_3b) == 102'926'336ULL);
  // DeepSpeed's memory docs, t5-3b on 1 node x 8 GPUs ("2851M total params, 32M largest layer params"), no offload:
  // largest_layer_memory 4 x 32M = 128,000,000 + 18 x 2851M / 8 = 6,414,750,000 -> 6,542,750,000 bytes = 6.09 GiB.
  constexpr std::uint64_t p = 2'851'000'000ULL, largest = 32'000'000ULL;
  const state_options ds{.impl = optimizer_impl::fused, .fp32_gradient_copy = true};
  const model_states m = model_states_for(p, presets::fp16_pure_master, ds, zero_stage::parameters, 8);
  CHECK(m.total_bytes() == 6'414'750'000ULL);
  CHECK(m.gradient_bytes == 0);  // reduce-scattered straight into the fp32 partition
  const std::uint64_t gathered = gathered_layer_bytes(largest, presets::fp16_pure_master, zero_stage::parameters, 8);
  CHECK(gathered == 128'000'000ULL);
  CHECK(static_cast<double>(m.total_bytes() + gathered) / (1ULL << 30) == Approx(6.09).margin(0.005));
  // Not below stage 3, nor on one device.
  CHECK(gathered_layer_bytes(largest, presets::fp16_pure_master, zero_stage::gradients, 8) == 0);
  CHECK(gathered_layer_bytes(largest, presets::fp16_pure_master, zero_stage::parameters, 1) == 0);
  // In the phases: forward and backward hold the gathered layer.
  planner_options o;
  o.device = find_device("A100");
  o.budget = {.device_bytes = 40 * gb, .reserve_fraction = 0.0};
  o.window_seconds = 1e9;
  const workload w{.parameters = p,
                   .tokens_per_sample = 512,
                   .activation_bytes_per_sample = gb,
                   .largest_layer_parameters = largest,
                   .samples = 1};
  const plan_candidate c = detail::evaluate(w, o, {"fp16-pure-master", presets::fp16_pure_master}, recompute::none, 0.4,
                                            ds, zero_stage::parameters, 8);
  for (const std::size_t phase : {std::size_t{0}, std::size_t{1}}) {
    const auto& items = c.needs[phase].items;
    CHECK(std::any_of(items.begin(), items.end(), [](const phase_item& i) {
      return i.name == "gathered layer (ZeRO-3)" && i.fixed_bytes == 128'000'000ULL;
    }));
  }
}

TEST_CASE("plain data parallelism holds DDP's gradient buckets in every phase, unless they are the gradients") {
  // 1e9 parameters, bf16 autocast, fused AdamW, 4 ranks at stage 0: the fp32 gradients (4 GB) are copied into DDP's
  // buckets, which live as long as the wrapped model: forward 4 + 8 + 2 (copies) + 4 = 18 GB, backward 4 + 8 + 4 + 2
  // + 4 = 22 GB, optimizer step 4 + 8 + 4 + 4 = 20 GB.
  const step_request ddp{.parameters = 1'000'000'000ULL,
                         .policy = presets::bf16_mixed,
                         .states = {.impl = optimizer_impl::fused},
                         .data_parallel = 4};
  const step_needs n = step_needs_for(step_inputs_for(ddp));
  CHECK(n[0].fixed_bytes() == 18 * gb);
  CHECK(n[1].fixed_bytes() == 22 * gb);
  CHECK(n[2].fixed_bytes() == 20 * gb);
  // gradient_as_bucket_view=True: the gradients are the buckets, 4 GB less in every phase; one rank has no buckets;
  // ZeRO-1 reduce-scatters instead (no DDP).
  step_request view = ddp;
  view.gradient_as_bucket_view = true;
  CHECK(step_needs_for(step_inputs_for(view))[1].fixed_bytes() == 18 * gb);
  step_request one = ddp;
  one.data_parallel = 1;
  CHECK(step_inputs_for(one).bucket_bytes == 0);
  step_request zero1 = ddp;
  zero1.stage = zero_stage::optimizer;
  CHECK(step_inputs_for(zero1).bucket_bytes == 0);
}
