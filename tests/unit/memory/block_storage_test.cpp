// Block-scaled storage (OCP MX, NVFP4) in the memory model, worked by hand: bits per element from the specs (8-bit
// elements plus one 8-bit E8M0 scale per 32 = 8.25 bits; 4-bit elements + an E8M0 per 32 = 4.25; 4-bit elements + an
// E4M3 per 16 = 4.5, plus NVFP4's 4-byte fp32 scale per tensor), applied to weights, gradients and activations.
#include <catch2/catch.hpp>
#include <string>

#include "published_shapes.hpp"
#include "safeamp/memory/activations.hpp"
#include "safeamp/memory/model_states.hpp"
#include "safeamp/memory/step_phases.hpp"
#include "safeamp/policy/policy_presets.hpp"

using namespace safeamp;

namespace {
std::string message_of(auto&& f) {
  try {
    f();
  } catch (const safeamp::error& e) {
    return e.what();
  }
  return "no error";
}
}  // namespace

TEST_CASE("block formats cost their elements plus one scale per block") {
  CHECK(block_bytes_per_element(mxfp8_e4m3) == 1.03125);  // 8.25 / 8
  CHECK(block_bytes_per_element(mxfp4) == 0.53125);       // 4.25 / 8
  CHECK(block_bytes_per_element(nvfp4) == 0.5625);        // 4.5 / 8
  CHECK(block_bytes_per_element(mxfp6_e3m2) == 0.78125);  // 6.25 / 8
  CHECK(parse_block_storage("weight-format", "MXFP8") == mxfp8_e4m3);
  CHECK(parse_block_storage("weight-format", "nvfp4") == nvfp4);
  CHECK(parse_block_storage("weight-format", "none") == no_block_scaling);
  CHECK(message_of([] { (void)parse_block_storage("gradient-format", "fp8"); }).find("gradient-format is 'fp8'") == 0);
}

TEST_CASE("a 7B model's weights in MXFP8, MXFP4 and NVFP4") {
  const std::uint64_t psi = 7'000'000'000ULL;
  // 7e9 x 8.25 / 8 = 7 218 750 000 bytes; bf16-mixed keeps fp32 gradients (4 x 7e9) and AdamW's two fp32 states.
  const model_states mx8 = model_states_for(psi, presets::bf16_mixed, {.weight_blocks = mxfp8_e4m3});
  CHECK(mx8.weight_bytes == 7'218'750'000ULL);
  CHECK(mx8.gradient_bytes == 28'000'000'000ULL);
  CHECK(mx8.optimizer_bytes == 56'000'000'000ULL);
  // 7e9 x 4.25 / 8 = 3 718 750 000.
  CHECK(model_states_for(psi, presets::bf16_mixed, {.weight_blocks = mxfp4}).weight_bytes == 3'718'750'000ULL);
  // 7e9 x 4.5 / 8 = 3 937 500 000, plus 4 bytes for each of 225 tensors = 900.
  const state_options nv{.weight_blocks = nvfp4, .gradient_blocks = nvfp4, .weight_tensors = 225};
  const model_states n = model_states_for(psi, presets::fp16_pure_master, nv);
  CHECK(n.weight_bytes == 3'937'500'900ULL);
  CHECK(n.gradient_bytes == 3'937'500'900ULL);
  CHECK(n.master_bytes == 28'000'000'000ULL);  // the fp32 master copy is unchanged
  // ZeRO-2 over 8 devices: weights whole, gradients split (the tensor scales stay whole: 3 937 500 000 / 8 + 900).
  const model_states z2 = model_states_for(psi, presets::fp16_pure_master, nv, zero_stage::gradients, 8);
  CHECK(z2.weight_bytes == 3'937'500'900ULL);
  CHECK(z2.gradient_bytes == 492'187'500ULL + 900ULL);
  // Without block storage nothing moves: fp16 weights and gradients, 2 bytes each.
  const model_states plain = model_states_for(psi, presets::fp16_pure_master);
  CHECK(plain.weight_bytes == 14'000'000'000ULL);
  CHECK(plain.gradient_bytes == 14'000'000'000ULL);
}

TEST_CASE("block-scaled LoRA base, and the conflicts the model states refuse") {
  const std::uint64_t psi = 7'000'000'000ULL;
  // Frozen MXFP4 base (3 718 750 000) + 40e6 fp32 adapters (160 000 000).
  const model_states m =
      model_states_for(psi, presets::bf16_mixed, {.adapter_parameters = 40'000'000ULL, .weight_blocks = mxfp4});
  CHECK(m.weight_bytes == 3'718'750'000ULL + 160'000'000ULL);
  CHECK(message_of([&] {
          (void)model_states_for(psi, presets::bf16_mixed,
                                 {.adapter_parameters = 1000, .base_4bit = true, .weight_blocks = nvfp4});
        }).find("4-bit base (QLoRA) is with block-scaled weights (nvfp4)") == 0);
  CHECK(message_of([&] {
          (void)model_states_for(10, presets::bf16_mixed, {.weight_tensors = 11});
        }).find("weight tensors is 11") == 0);
}

TEST_CASE("activations stored in a block format, and a shape's weight tensors") {
  const transformer_shape t{.sequence = 2048, .hidden = 4096, .heads = 32, .layers = 32, .vocabulary = 50304};
  // Full recomputation keeps e sbh per layer: 2048 x 4096 x 1.03125 = 8 650 752 bytes in MXFP8 (bf16: 16 777 216).
  CHECK(activation_bytes_per_layer(t, 1, recompute::full, block_bytes_per_element(mxfp8_e4m3)) == 8'650'752ULL);
  CHECK(activation_bytes_per_layer(t, 1, recompute::full, 2) == 16'777'216ULL);
  // The element bytes the planner prices activations at: the block format's when set, else the policy's output.
  CHECK(activation_element_bytes(presets::bf16_mixed, {}) == 2.0);
  CHECK(activation_element_bytes(presets::bf16_mixed, {.activation_blocks = nvfp4}) == 0.5625);
  // GPT layout: 4 matrices a layer and one tied embedding; Llama 2 7B: 7 a layer, untied embedding and output.
  CHECK(weight_matrices(t) == 4 * 32 + 1);
  CHECK(weight_matrices(test_shapes::llama2_7b) == 7 * 32 + 2);
}

TEST_CASE("block-scaled weights make no compute-format copies; other policies keep theirs") {
  // bf16-mixed stores fp32 weights and autocast caches a bf16 copy: 2 x 1e9 bytes. MXFP8 weights are the GEMM's input.
  const step_inputs plain = step_inputs_for({.parameters = 1'000'000'000ULL, .policy = presets::bf16_mixed});
  CHECK(plain.weight_copy_bytes == 2'000'000'000ULL);
  const step_inputs blocks = step_inputs_for(
      {.parameters = 1'000'000'000ULL, .policy = presets::bf16_mixed, .states = {.weight_blocks = mxfp8_e4m3}});
  CHECK(blocks.weight_copy_bytes == 0u);
  CHECK(blocks.states.weight_bytes == 1'031'250'000ULL);
}
