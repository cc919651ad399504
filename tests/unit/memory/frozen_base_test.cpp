// Frozen weights (issue 14): LoRA on a 16-bit frozen base, the usual setup (the base loaded in bf16, fp32 adapters),
// worked by hand for a 7B GPT on a 24 GB RTX 4090, its remedy lever, and frozen parameters of a full fine-tune
// (weights only: no gradients, master copy or optimizer states).
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "rtx4090_planner.hpp"
#include "safeamp/memory/planner.hpp"

using namespace safeamp;

namespace {
// A 7B GPT: s = 2048, h = 4096, a = 32, L = 32, v = 50257 (tied):
//  P = 12 L h^2 + v h = 32 x 12 x 16,777,216 + 50257 x 4096 = 6,442,450,944 + 205,852,672 = 6,648,303,616.
// LoRA rank 16 on every linear layer: A = 16 r h L = 16 x 16 x 4096 x 32 = 33,554,432 adapters.
constexpr transformer_shape gpt_7b{.sequence = 2048, .hidden = 4096, .heads = 32, .layers = 32, .vocabulary = 50257};
constexpr std::uint64_t p_7b = 6'648'303'616ULL;
constexpr std::uint64_t a_7b = 33'554'432ULL;

// The RTX 4090 with the tool's defaults (rtx4090_planner.hpp): 22,727,811,399 bytes usable by the step.
constexpr std::uint64_t rtx4090_usable = 22'727'811'399ULL;
using test_options::rtx4090;

state_options lora_7b(std::optional<format_spec> base) {
  return {.adapter_parameters = a_7b, .adapter_rank = 16, .base_format = base};
}

plan_candidate evaluate_7b(const planner_options& o, state_options states) {
  const workload w{.shape = gpt_7b, .parameters = p_7b, .tokens_per_sample = 2048, .samples = 1};
  return detail::evaluate(w, o, o.policies[0], recompute::full, 0.4, states, zero_stage::none, 1);
}
}  // namespace

TEST_CASE("LoRA on a bf16 base: 7B model states by hand, and the policy's fp32 base for comparison") {
  REQUIRE(parameter_count(gpt_7b) == p_7b);
  REQUIRE(lora_parameters(gpt_7b, 16) == a_7b);
  // bf16 base 2 P = 13,296,607,232; fp32 adapters: weights 4 A = 134,217,728, gradients 4 A, AdamW moments 8 A
  // = 268,435,456. Total 13,296,607,232 + 16 A (536,870,912) = 13,833,478,144: 2.08 bytes per base parameter.
  const model_states bf16_base = model_states_for(p_7b, presets::bf16_mixed, lora_7b(bf16));
  CHECK(bf16_base.weight_bytes == 13'296'607'232ULL + 134'217'728ULL);
  CHECK(bf16_base.gradient_bytes == 134'217'728ULL);
  CHECK(bf16_base.master_bytes == 0);
  CHECK(bf16_base.optimizer_bytes == 268'435'456ULL);
  CHECK(bf16_base.total_bytes() == 13'833'478'144ULL);
  // The policy's own parameter format (fp32 under bf16-mixed): 4 P = 26,593,214,464 + 4 A: more than the card.
  const model_states fp32_base = model_states_for(p_7b, presets::bf16_mixed, lora_7b(std::nullopt));
  CHECK(fp32_base.weight_bytes == 26'593'214'464ULL + 134'217'728ULL);
  // fp16 base under fp16 autocast: also 2 bytes; an fp32 base given explicitly: the same as the policy's.
  CHECK(model_states_for(p_7b, presets::fp16_mixed, lora_7b(fp16)).weight_bytes == 13'296'607'232ULL + 134'217'728ULL);
  CHECK(model_states_for(p_7b, presets::bf16_mixed, lora_7b(fp32)) == fp32_base);
  // Weight copies: a bf16 base under bf16 compute needs none (autocast returns it as it is); an fp32 base has its
  // bf16 cast cached, 2 P = 13,296,607,232. The foreach temporaries cover the adapters only: 4 A.
  const step_inputs in16 =
      step_inputs_for({.parameters = p_7b, .policy = presets::bf16_mixed, .states = lora_7b(bf16)});
  CHECK(in16.weight_copy_bytes == 0);
  CHECK(in16.optimizer_temporary_bytes == 4 * a_7b);
  const step_inputs in32 =
      step_inputs_for({.parameters = p_7b, .policy = presets::bf16_mixed, .states = lora_7b(std::nullopt)});
  CHECK(in32.weight_copy_bytes == 2 * p_7b);
}

TEST_CASE("LoRA on a bf16 base fits a 7B model on a 24 GB card at microbatch 4; the fp32 base does not fit at all") {
  const planner_options o = rtx4090({});
  REQUIRE(detail::phase_pool_bytes(o.budget) == rtx4090_usable);
  // Activations per sample, full recomputation, rank-16 adapters (sbh = 2048 x 4096 = 8,388,608):
  //  stored = embedding mask sbh 8,388,608 + 32 layer inputs x 2 sbh 536,870,912 + final norm and head input 4 sbh
  //           33,554,432 + fp32 logits 4 s v 411,705,344 = 990,519,296;
  //  peak   = stored + one layer recomputed: 34 sbh + 5 a s^2 (285,212,672 + 671,088,640) + the adapters' r-wide
  //           intermediates 4 x 2 x 16 x 2048 = 262,144, less its stored input 2 sbh = 16,777,216: 939,786,240
  //         = 1,930,305,536.
  const plan_candidate c = evaluate_7b(o, lora_7b(bf16));
  CHECK(c.activation_bytes_per_sample == 1'930'305'536ULL);
  // Backward: 13,833,478,144 (states) + b x 1,930,305,536: floor((22,727,811,399 - 13,833,478,144) / 1,930,305,536)
  //  = floor(8,894,333,255 / 1,930,305,536) = floor(4.61) = 4, headroom 8,894,333,255 - 4 x 1,930,305,536
  //  = 1,173,111,111.
  CHECK(c.max_microbatch == 4);
  CHECK(c.limiting_phase == step_phase::backward);
  CHECK(c.headroom_bytes == 1'173'111'111LL);
  // Forward at 4: states without the gradients, 13,699,260,416, + 4 x 990,519,296 = 17,661,337,600; the optimizer
  // step: 13,833,478,144 + foreach's 4 A = 13,967,695,872.
  CHECK(c.phase_peak_bytes[0] == 17'661'337'600ULL);
  CHECK(c.phase_peak_bytes[2] == 13'967'695'872ULL);
  // With the policy's fp32 base: the forward holds 4 P + 4 A (26,727,432,192), the moments 8 A, the bf16 copies 2 P
  // (13,296,607,232) and 990,519,296: 41,282,994,176, short by 18,555,182,777.
  const plan_candidate f = evaluate_7b(o, lora_7b(std::nullopt));
  CHECK(f.max_microbatch == 0);
  CHECK(f.limiting_phase == step_phase::forward);
  CHECK(f.phase_peak_bytes[0] == 41'282'994'176ULL);
  CHECK(f.shortfall_bytes == 18'555'182'777LL);
}

TEST_CASE("the remedies of a 7B full fine-tune on 24 GB offer LoRA on a bf16 base before QLoRA") {
  const workload w{.shape = gpt_7b, .parameters = p_7b, .tokens_per_sample = 2048, .samples = 1};
  planner_options o = rtx4090({});
  const plan_candidate full = evaluate_7b(o, {});
  REQUIRE(full.max_microbatch == 0);
  CHECK(lora_base_format(presets::bf16_mixed) == bf16);
  CHECK(lora_base_format(presets::fp16_mixed) == fp16);
  CHECK_FALSE(lora_base_format(presets::fp32));              // fp32 compute: a 16-bit base would change the math
  CHECK_FALSE(lora_base_format(presets::fp16_pure_master));  // already 16-bit parameters
  // Least intrusive first: LoRA (5) on the bf16 base at microbatch 4 (above), QLoRA (6) at 9, parameter offload (8)
  // at 10 with 16 P = 106,372,857,856 bytes on the host (x 1.5 = 159.56 GB <= 256 GB).
  std::vector<remedy> r = memory_remedies(w, o, full, 0.4);
  REQUIRE(r.size() == 3);
  CHECK_THAT(r[0].text(), Catch::StartsWith("LoRA rank 16 on every linear layer (33554432 adapters train, bf16 base "
                                            "frozen): fits, microbatch 4 x 1"));
  CHECK(r[0].intrusiveness == 5);
  CHECK_THAT(r[1].text(), Catch::StartsWith("QLoRA rank 16") && Catch::Contains("fits, microbatch 9 x 1"));
  CHECK_THAT(r[2].text(), Catch::StartsWith("offload the parameters and the optimizer to the CPU (ZeRO-3 "
                                            "offload_param, 106.37 GB of host memory): fits, microbatch 10"));
  // 128 GB of host memory cannot hold 159.56 GB: the parameter offload is no longer offered as fitting.
  o.host_memory_bytes = 128'000'000'000ULL;
  r = memory_remedies(w, o, full, 0.4);
  REQUIRE(r.size() == 2);
  for (const remedy& m : r) CHECK_THAT(m.text(), !Catch::Contains("offload"));
  // From a LoRA run on the policy's fp32 base, which does not fit: store the base in bf16, then QLoRA.
  const plan_candidate lora32 = evaluate_7b(o, lora_7b(std::nullopt));
  r = memory_remedies(w, o, lora32, 0.4);
  REQUIRE_FALSE(r.empty());
  CHECK_THAT(r[0].text(), Catch::StartsWith("frozen base in bf16 (loaded with torch_dtype=torch.bfloat16): fits, "
                                            "microbatch 4 x 1"));
  CHECK_THAT(r[0].time_cost, Catch::StartsWith("none"));
}

TEST_CASE("frozen parameters keep their weights and nothing else; only the trained ones are partitioned and updated") {
  // 1.3B GPT (P = 1,310,885,888) with its tied embedding frozen: F = 50257 x 2048 = 102,926,336, T = P - F =
  // 1,207,959,552. bf16-mixed, AdamW: weights 4 P = 5,243,543,552; gradients 4 T = 4,831,838,208; moments 8 T =
  // 9,663,676,416; total 19,739,058,176 (16 P would be 20,974,174,208).
  const std::uint64_t p = 1'310'885'888ULL, f = 102'926'336ULL, t = p - f;
  const state_options frozen{.frozen_parameters = f};
  const model_states m = model_states_for(p, presets::bf16_mixed, frozen);
  CHECK(m.weight_bytes == 5'243'543'552ULL);
  CHECK(m.gradient_bytes == 4'831'838'208ULL);
  CHECK(m.optimizer_bytes == 9'663'676'416ULL);
  CHECK(m.total_bytes() == 19'739'058'176ULL);
  // A master-copy policy: fp16 weights 2 P, fp16 gradients 2 T, fp32 master 4 T, moments 8 T.
  CHECK(model_states_for(p, presets::fp16_pure_master, frozen).total_bytes() == 2 * p + 14 * t);
  // ZeRO-1 over 2 devices partitions only what trains: 4 P + 4 T + 8 T / 2.
  CHECK(model_states_for(p, presets::bf16_mixed, frozen, zero_stage::optimizer, 2).total_bytes() == 4 * p + 8 * t);
  // The step: autocast still casts the frozen weights (copies 2 P); foreach's temporaries cover T only (4 T).
  const step_inputs in = step_inputs_for({.parameters = p, .policy = presets::bf16_mixed, .states = frozen});
  CHECK(in.weight_copy_bytes == 2 * p);
  CHECK(in.optimizer_temporary_bytes == 4 * t);
  // The optimizer pass reads and writes the trained parameters only.
  const device_spec& d = find_device("RTX 4090");
  CHECK(optimizer_update_seconds(p, presets::bf16_mixed, frozen, d, {}) ==
        Approx(optimizer_step_seconds(t, bytes_per_param(presets::bf16_mixed, frozen), d)).epsilon(1e-12));
  // Refused: nothing left to train, or frozen parameters with adapters (the base is frozen whole).
  CHECK_THROWS_WITH(model_states_for(p, presets::bf16_mixed, {.frozen_parameters = p}),
                    Catch::Contains("frozen parameters") && Catch::Contains("something must train"));
  CHECK_THROWS_WITH(model_states_for(p, presets::bf16_mixed, {.frozen_parameters = 1, .adapter_parameters = 10}),
                    Catch::Contains("frozen parameters") && Catch::Contains("with adapters"));
}

TEST_CASE("the 1.3B step with a frozen embedding on the RTX 4090: fused AdamW fits 2 samples instead of 1") {
  // Fused (no temporaries): backward 19,739,058,176 + b x 1,103,765,504 (phases_test.cpp's 1.3B activations):
  //  floor((22,727,811,399 - 19,739,058,176) / 1,103,765,504) = floor(2,988,753,223 / 1,103,765,504) = 2.
  // Foreach: the step adds 4 T = 4,831,838,208: 24,570,896,384, short by 1,843,084,985.
  constexpr transformer_shape gpt_1_3b{
      .sequence = 2048, .hidden = 2048, .heads = 16, .layers = 24, .vocabulary = 50257};
  const std::uint64_t p = 1'310'885'888ULL, f = 102'926'336ULL;
  const workload w{.shape = gpt_1_3b, .parameters = p, .tokens_per_sample = 2048, .samples = 1};
  const planner_options o = rtx4090({});
  const auto eval = [&](state_options s) {
    return detail::evaluate(w, o, o.policies[0], recompute::full, 0.4, s, zero_stage::none, 1);
  };
  const plan_candidate fused = eval({.impl = optimizer_impl::fused, .frozen_parameters = f});
  CHECK(fused.max_microbatch == 2);
  CHECK(fused.phase_peak_bytes[2] == 19'739'058'176ULL);
  const plan_candidate foreach = eval({.frozen_parameters = f});
  CHECK(foreach.max_microbatch == 0);
  CHECK(foreach.limiting_phase == step_phase::optimizer_step);
  CHECK(foreach.shortfall_bytes == 1'843'084'985LL);
}
