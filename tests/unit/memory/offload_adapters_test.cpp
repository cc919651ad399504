// Offload and adapters beyond the basic cases (issue 14): LoRA's r-wide activations, parameter offload (ZeRO-3
// offload_param) against DeepSpeed's ZeRO-3 estimator, paged 8-bit AdamW (offload with an 8-bit optimizer) and an
// offloaded adapter optimizer, each worked by hand.
#include <catch2/catch.hpp>
#include <cstdint>

#include "published_shapes.hpp"
#include "safeamp/memory/activations.hpp"
#include "safeamp/memory/model_states.hpp"
#include "safeamp/memory/step_phases.hpp"
#include "safeamp/memory/step_time.hpp"
#include "safeamp/policy/policy_presets.hpp"

using namespace safeamp;

TEST_CASE("LoRA stores each adapted matrix's r-wide intermediate: e r s b per matrix") {
  // GPT-2 small, eager (89,653,248 bytes per layer, activations_test.cpp) with rank-16 adapters on its 4 linear layers
  // (c_attn, c_proj, c_fc, mlp.c_proj): + 4 x 2 x 16 x 1024 = 131,072 bytes per layer and sample.
  transformer_shape gpt2{.sequence = 1024, .hidden = 768, .heads = 12, .layers = 12, .vocabulary = 50257};
  gpt2.lora_rank = 16;
  CHECK(adapted_matrices_per_layer(gpt2) == 4);
  CHECK(activation_bytes_per_layer(gpt2, 1, recompute::none) == 89'653'248ULL + 131'072ULL);
  CHECK(activation_bytes_per_layer(gpt2, 3, recompute::none) == 3 * (89'653'248ULL + 131'072ULL));
  // Full recomputation stores only the layer input (2 s h = 1,572,864); recomputing one layer brings the adapters back.
  CHECK(activation_bytes_per_layer(gpt2, 1, recompute::full) == 1'572'864ULL);
  transformer_shape plain = gpt2;
  plain.lora_rank = 0;
  CHECK(activation_ledger_for(gpt2, 1, recompute::full).entries.back().block == "backward: recompute one layer");
  CHECK(activation_ledger_for(gpt2, 1, recompute::full).entries.back().bytes ==
        activation_ledger_for(plain, 1, recompute::full).entries.back().bytes + 131'072ULL);
  // Llama's layout (a gated MLP: q, k, v, o, gate, up, down = 7 matrices), s = 4096, r = 16: 7 x 2 x 16 x 4096 =
  // 917,504.
  transformer_shape llama = test_shapes::llama2_7b;
  const std::uint64_t base = activation_bytes_per_layer(llama, 1, recompute::none);
  llama.lora_rank = 16;
  CHECK(adapted_matrices_per_layer(llama) == 7);
  CHECK(activation_bytes_per_layer(llama, 1, recompute::none) - base == 917'504ULL);
  llama.lora_rank = 4097;
  CHECK_THROWS_WITH(validate(llama), Catch::Contains("lora_rank"));
}

TEST_CASE(
    "parameter offload: DeepSpeed's ZeRO-3 estimator with offload_param, 4 x largest layer on the GPU, 18 P on the "
    "CPU") {
  // deepspeed/runtime/zero/stage3.py estimate_zero3_model_states_mem_needs, cpu_offload and cpu_offload_params:
  //   gpu_mem = largest_layer_memory = 4 x largest_layer_params; cpu_mem = total_params x 18 x buffer factor 1.5.
  // Its docs' t5-3b example (2851M parameters, 32M largest layer): 0.12 GB per GPU, 71.71 GB of CPU memory.
  const state_options o{.optimizer = optimizer_kind::adam,
                        .impl = optimizer_impl::fused,
                        .offload_optimizer = true,
                        .offload_parameters = true};
  const model_states m = model_states_for(2'851'000'000ULL, presets::fp16_pure_master, o, zero_stage::parameters, 1);
  CHECK(m.total_bytes() == 0);               // nothing persistent on the device
  CHECK(m.host_bytes == 51'318'000'000ULL);  // 18 x 2851e6; x 1.5 = 76,977,000,000 B = 71.69 GiB
  CHECK(offloaded_layer_bytes(32'000'000ULL, presets::fp16_pure_master) == 128'000'000ULL);  // 4 x 32M
  // Over 8 ranks each holds an eighth of the CPU figure (DeepSpeed counts 18 P per node of 8 GPUs).
  CHECK(model_states_for(2'851'000'000ULL, presets::fp16_pure_master, o, zero_stage::parameters, 8).host_bytes ==
        6'414'750'000ULL);
  // bf16 autocast keeps fp32 weights, and those are the fp32 parameters the CPU update holds: host 4 + 8 + 4 = 16 per
  // parameter, not 4 + (4 + 8 + 4) = 20 (the weights counted twice); the device layer holds fp32 weights 4, fp32
  // gradients 4 and the bf16 copy 2: 10 x its parameters. With 16-bit weights the CPU keeps both: 2 + 16 = 18 (above).
  CHECK(model_states_for(1'000'000'000ULL, presets::bf16_mixed, o).host_bytes == 16'000'000'000ULL);
  CHECK(model_states_for(1'000'000'000ULL, presets::fp32, o).host_bytes == 16'000'000'000ULL);
  // 1e8 of the 1e9 frozen: 16 x 9e8 for what trains + the frozen fp32 weights 4 x 1e8 = 14.8e9.
  state_options frozen = o;
  frozen.frozen_parameters = 100'000'000ULL;
  CHECK(model_states_for(1'000'000'000ULL, presets::bf16_mixed, frozen).host_bytes == 14'800'000'000ULL);
  // fp16-pure-master with 1e8 frozen: 16 x 9e8 + the fp16 weights of all 1e9, 2e9: 16.4e9.
  CHECK(model_states_for(1'000'000'000ULL, presets::fp16_pure_master, frozen).host_bytes == 16'400'000'000ULL);
  CHECK(offloaded_layer_bytes(1'000'000ULL, presets::bf16_mixed) == 10'000'000ULL);
  // The phases hold no weight copies of their own: the layer term has them.
  const step_inputs in = step_inputs_for({.parameters = 1'000'000'000ULL, .policy = presets::bf16_mixed, .states = o});
  CHECK(in.weight_copy_bytes == 0);
  CHECK(in.optimizer_temporary_bytes == 0);
  // Each microbatch fetches every weight twice over PCIe: 2 x 4 x 1e9 / 32e9 = 0.25 s.
  CHECK(parameter_fetch_seconds(1'000'000'000ULL, presets::bf16_mixed, {}) == Approx(0.25).epsilon(1e-12));
}

TEST_CASE("parameter offload is refused, by design and by name, without an fp32 optimizer offload or with adapters") {
  // DeepSpeed's offload_param streams the parameters for its CPU Adam, which keeps fp32 (or 16-bit) states: an 8-bit
  // optimizer, adapters and a missing optimizer offload are refused with what is accepted instead.
  CHECK_THROWS_WITH(model_states_for(1000, presets::fp32, {.offload_parameters = true}),
                    Catch::Contains("parameter offload (offload_parameters)") &&
                        Catch::Contains("without optimizer offload") && Catch::Contains("offload_optimizer too"));
  CHECK_THROWS_WITH(
      model_states_for(1000, presets::fp32,
                       {.optimizer = optimizer_kind::adam_8bit, .offload_optimizer = true, .offload_parameters = true}),
      Catch::Contains("with 8-bit AdamW (adam_8bit)") && Catch::Contains("never 8-bit") &&
          Catch::Contains("paged 8-bit AdamW"));
  CHECK_THROWS_WITH(model_states_for(1000, presets::fp32,
                                     {.adapter_parameters = 10, .offload_optimizer = true, .offload_parameters = true}),
                    Catch::Contains("with adapters (LoRA/QLoRA)") && Catch::Contains("offload the optimizer only") &&
                        Catch::Contains("not modelled"));
  // The same through step_inputs_for, which the planner uses.
  CHECK_THROWS_WITH(
      step_inputs_for(
          {.parameters = 1000,
           .policy = presets::bf16_mixed,
           .states = {.optimizer = optimizer_kind::adam_8bit, .offload_optimizer = true, .offload_parameters = true}}),
      Catch::Contains("never 8-bit"));
}

TEST_CASE("offload with 8-bit AdamW is the paged optimizer: the 8-bit states on the CPU, the update on the GPU") {
  // 1.3B GPT (P = 1,310,885,888), bf16 autocast: weights 4 P = 5,243,543,552 and gradients 4 P stay on the device; the
  // states, (2 + 8/2048) P = 2 P + P/256 = 2,621,771,776 + 5,120,648 = 2,626,892,424 bytes, live in CPU memory.
  const std::uint64_t p = 1'310'885'888ULL;
  const state_options paged{
      .optimizer = optimizer_kind::adam_8bit, .impl = optimizer_impl::fused, .offload_optimizer = true};
  const model_states m = model_states_for(p, presets::bf16_mixed, paged);
  CHECK(m.weight_bytes == 5'243'543'552ULL);
  CHECK(m.gradient_bytes == 5'243'543'552ULL);
  CHECK(m.optimizer_bytes == 0);
  CHECK(m.host_bytes == 2'626'892'424ULL);
  // A policy with a master copy keeps it on the device (paging moves the states only): fp16-pure-master 2 + 2 + 4.
  CHECK(model_states_for(p, presets::fp16_pure_master, paged).total_bytes() == 8 * p);
  // One step pages the states out and back in, 2 x 2,626,892,424 / 32e9 = 0.16418 s, then the device's update.
  const state_bytes_per_param b = bytes_per_param(presets::bf16_mixed, paged);
  const device_spec d = find_device("RTX 4090");
  CHECK(optimizer_update_seconds(p, presets::bf16_mixed, paged, d, {}) ==
        Approx(2.0 * 2'626'892'424.0 / 32e9 + optimizer_step_seconds(p, b, d)).epsilon(1e-12));
}

TEST_CASE("an offloaded adapter optimizer: only the adapters' fp32 AdamW (or paged 8-bit states) on the CPU") {
  // QLoRA rank 16 on a 7B GPT shape: A = 33,554,432 adapters. With AdamW offloaded the CPU holds fp32 parameters 4,
  // states 8 and fp32 gradients 4: 16 A = 536,870,912; the device keeps the adapters' weights and gradients (4 + 4) A.
  const std::uint64_t p = 6'648'303'616ULL, a = 33'554'432ULL;
  const state_options offloaded{
      .impl = optimizer_impl::fused, .adapter_parameters = a, .base_4bit = true, .offload_optimizer = true};
  const model_states m = model_states_for(p, presets::bf16_mixed, offloaded);
  CHECK(m.host_bytes == 536'870'912ULL);
  CHECK(m.optimizer_bytes == 0);
  CHECK(m.gradient_bytes == 4 * a);
  // QLoRA's own recipe, paged 8-bit AdamW: (2 + 8/2048) A = 67,108,864 + 131,072 = 67,239,936 on the CPU.
  state_options paged = offloaded;
  paged.optimizer = optimizer_kind::adam_8bit;
  CHECK(model_states_for(p, presets::bf16_mixed, paged).host_bytes == 67'239'936ULL);
  // The update of the offloaded adapters: A (g + w) / PCIe + A (12 + 2 x 8) / host = 268,435,456 / 32e9 +
  // 939,524,096 / 50e9.
  CHECK(optimizer_update_seconds(p, presets::bf16_mixed, offloaded, find_device("RTX 4090"), {}) ==
        Approx(268'435'456.0 / 32e9 + 939'524'096.0 / 50e9).epsilon(1e-12));
}
