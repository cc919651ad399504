// Tensor parallelism (Megatron-LM) in the training and inference ledgers, worked by hand on Korthikanti et al.'s 22B
// configuration (Table 3: TP = 8 on 8 GPUs) and Llama 3 8B: each rank's parameters, model states, FLOPs and KV cache,
// and the tensor-parallel sizes the heads refuse.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "published_shapes.hpp"
#include "safeamp/memory/inference.hpp"
#include "safeamp/memory/planner.hpp"
#include "toy_device.hpp"

using namespace safeamp;

namespace {
// 22B model of Table 3: s = 2048, h = 6144, a = 64, L = 48, v = 51200; TP = 8 with sequence parallelism.
constexpr transformer_shape model_22b{.sequence = 2048, .hidden = 6144, .heads = 64, .layers = 48, .vocabulary = 51200};

transformer_shape tp8() {
  transformer_shape t = model_22b;
  t.tensor_parallel = 8;
  t.sequence_parallel = true;
  return t;
}

// A device large enough for every candidate: only the states and the FLOPs are checked.
constexpr device_spec big = toy_device("big", 1'000'000'000'000ULL);

// bf16-mixed with selective recompute on `big`, no reserve, a window of 1e9 s and 1 TB of host memory.
planner_options big_options() {
  planner_options o;
  o.device = big;
  o.budget = {.device_bytes = 0, .reserve_fraction = 0.0};
  o.window_seconds = 1e9;
  o.policies = {{"bf16-mixed", presets::bf16_mixed}};
  o.recompute_modes = {recompute::selective};
  o.host_memory_bytes = 1'000'000'000'000ULL;
  return o;
}
}  // namespace

TEST_CASE("a tensor-parallel rank holds 1/t of the weight matrices and of the embedding") {
  // 12 L h^2 + v h = 12 x 48 x 37,748,736 + 51,200 x 6,144 = 21,743,271,936 + 314,572,800.
  CHECK(parameter_count(model_22b) == 22'057'844'736ULL);
  CHECK(rank_parameters(model_22b) == parameter_count(model_22b));  // t = 1: the whole model
  // t = 8: 21,743,271,936 / 8 + (51,200 / 8) x 6,144 = 2,717,908,992 + 39,321,600.
  CHECK(rank_parameters(tp8()) == 2'757'230'592ULL);
  CHECK(tensor_parallel_share(tp8(), 22'057'844'736ULL) == 2'757'230'592ULL);
  CHECK(tensor_parallel_share(tp8(), 22'057'844'744ULL) == 2'757'230'593ULL);  // a given count: 1/8, rounded up
  CHECK(tensor_parallel_share(model_22b, 12345) == 12345);
  // The largest layer on a rank: the embedding's 6,400 rows x 6,144 = 39,321,600 (the MLP's h x 4h / 8 is 18,874,368).
  CHECK(largest_layer_parameters(tp8()) == 39'321'600ULL);
}

TEST_CASE("training under tensor parallelism: per-rank model states and FLOPs") {
  const transformer_shape t = tp8();
  planner_options o = big_options();
  const plan_result r = plan({.shape = t, .samples = 1e5}, o);
  REQUIRE(r.candidates.size() == 1);
  const plan_candidate& c = r.candidates[0];
  // bf16-mixed AdamW: fp32 weights 4 + fp32 gradients 4 + two fp32 moments 8 = 16 bytes per parameter of the rank.
  CHECK(c.state_bytes == 16ULL * 2'757'230'592ULL);  // 44.116 GB (the whole model: 352.926 GB)
  // Korthikanti Appendix A per sample, selective recomputation: 72 L s h^2 (1 + s/(6h) + v/(12 h L)) + 12 L s^2 h,
  // split evenly over the 8 ranks.
  const double s = 2048, h = 6144, l = 48, v = 51200;
  const double whole = 72 * l * s * h * h * (1 + s / (6 * h) + v / (12 * h * l)) + 12 * l * s * s * h;
  CHECK(c.flops_per_sample == Approx(whole / 8).epsilon(1e-12));
  // The per-sample time follows: 8 ranks take less than a quarter of one device's time (the roofline of the f/t-wide
  // GEMM keeps it from exactly 1/8).
  transformer_shape one = t;
  one.tensor_parallel = 1;
  one.sequence_parallel = false;
  const plan_result single = plan({.shape = one, .samples = 1e5}, o);
  REQUIRE(single.candidates.size() == 1);
  CHECK(c.seconds_per_sample < single.candidates[0].seconds_per_sample / 4);
}

TEST_CASE("tensor parallelism must split the heads; K/V heads are split or replicated") {
  transformer_shape t = model_22b;
  t.tensor_parallel = 3;  // 64 heads over 3 ranks
  CHECK_THROWS_WITH(validate(t), Catch::Contains("tensor_parallel is 3; accepted: a divisor of heads (64)"));
  transformer_shape small{.sequence = 1024, .hidden = 1024, .heads = 32, .layers = 12, .vocabulary = 50257};
  small.tensor_parallel = 64;  // more ranks than heads
  CHECK_THROWS_WITH(validate(small), Catch::Contains("tensor_parallel is 64; accepted: a divisor of heads (32)"));
  transformer_shape gqa{.sequence = 128, .hidden = 4800, .heads = 48, .layers = 1, .vocabulary = 1000, .kv_heads = 8};
  gqa.tensor_parallel = 12;  // divides the 48 heads, but neither divides nor is a multiple of the 8 K/V heads
  CHECK_THROWS_WITH(validate(gqa), Catch::Contains("a divisor or a multiple of the K/V heads (8)"));
  gqa.tensor_parallel = 16;  // each rank holds one of the 8 K/V heads, replicated twice
  CHECK_NOTHROW(validate(gqa));
  CHECK(kv_heads_per_rank(gqa) == 1);
}

TEST_CASE("inference: each rank caches at least one K/V head") {
  transformer_shape t = test_shapes::llama3_8b;
  t.tensor_parallel = 16;  // 8 K/V heads: one per rank, each held by 2 ranks
  // 2 (K and V) x 32 layers x 1 head x 128 x 2 bytes = 16,384 per token (not 131,072 / 16 = 8,192: half a head).
  CHECK(kv_cache_bytes_per_token(t, 2) == 16'384);
  t.tensor_parallel = 4;  // 2 heads per rank
  CHECK(kv_cache_bytes_per_token(t, 2) == 32'768);
  // Weights per rank at t = 16: per layer Q, O 2 x 4096 x 256 + K, V 2 x 4096 x 128 + MLP 3 x 4096 x 896 = 14,155,776;
  // x 32 = 452,984,832, + untied embeddings 2 x 8,016 x 4,096 = 65,667,072: 518,651,904 parameters, 2 bytes each.
  t.tensor_parallel = 16;
  CHECK(rank_parameters(t) == 518'651'904ULL);
  const inference_needs n = inference_needs_for({.shape = t, .context_tokens = 4096});
  CHECK(n.weight_bytes == 2ULL * 518'651'904ULL);
}

TEST_CASE("more devices under tensor parallelism are counted as data-parallel replicas x t") {
  const transformer_shape t = tp8();
  const workload w{.shape = t, .parameters = parameter_count(t), .samples = 1e3};
  planner_options o = big_options();
  // The window: 60% of one replica's night. Two replicas take half of it (half the samples each, half the optimizer
  // steps), so the remedy is 2 replicas of the 8 ranks: 16 devices, where 8 are planned (2 and 1 were printed).
  o.window_seconds = 1e9;
  const plan_result one = plan(w, o);
  REQUIRE(one.chosen);
  o.window_seconds = 0.6 * one.chosen->total_seconds;
  const plan_result late = plan(w, o);
  REQUIRE_FALSE(late.chosen);
  const std::string two_replicas =
      "data parallel over 2 data-parallel replicas x 8 tensor-parallel ranks = 16 devices (NEEDS 16 devices; planned "
      "for 8): bf16-mixed takes ";
  CHECK(std::any_of(late.remedies.begin(), late.remedies.end(),
                    [&](const std::string& s) { return s.rfind(two_replicas, 0) == 0; }));
  // The ZeRO-3 fallback of a rank that fits nothing (QLoRA with fused AdamW, full recomputation, 1.5 GB usable): its
  // device count is replicas x 8, planned for 1 x 8.
  o.budget.device_bytes = 1'500'000'000ULL;
  const state_options qlora{.impl = optimizer_impl::fused,
                            .adapter_parameters = lora_parameters(t, 16),
                            .adapter_rank = 16,
                            .base_4bit = true};
  const plan_candidate from =
      detail::evaluate(w, o, {"bf16-mixed", presets::bf16_mixed}, recompute::full, 0.4, qlora, zero_stage::none, 1);
  REQUIRE_FALSE(from.fits_memory());
  const std::vector<remedy> r = memory_remedies(w, o, from, 0.4);
  const auto more = std::find_if(r.begin(), r.end(), [](const remedy& m) { return m.devices > 1; });
  REQUIRE(more != r.end());
  CHECK(more->devices % 8 == 0);
  const std::string replicas = std::to_string(more->devices / 8);
  const std::string devices = std::to_string(more->devices);
  const std::string label = "ZeRO stage 3 over " + replicas +
                            " data-parallel replicas x 8 tensor-parallel ranks = " + devices + " devices (NEEDS " +
                            devices + " devices; planned for 8)";
  CHECK_THAT(more->text(), Catch::Contains(label));
}

TEST_CASE("offloading under tensor parallelism: every rank's states go to the one host") {
  const transformer_shape t = tp8();
  planner_options o = big_options();
  o.states = {.impl = optimizer_impl::fused, .offload_optimizer = true};
  const plan_result r = plan({.shape = t, .samples = 1e3}, o);
  REQUIRE(r.candidates.size() == 1);
  // Each rank offloads 4 fp32 parameters + 8 states + 4 fp32 gradients for its 2,757,230,592 parameters; the 8 ranks
  // share the host: x 1.5 x 8 = 529,388,273,664 bytes (one rank's x 1.5, 66.174 GB, was counted).
  CHECK(r.candidates[0].host_bytes == 16ULL * 2'757'230'592ULL);
  CHECK(r.candidates[0].host_needed_bytes == 529'388'273'664ULL);
}

TEST_CASE("LoRA adapters and frozen parameters are split over the tensor-parallel ranks") {
  // 22B at t = 8, LoRA rank 16 on GPT's four matrices a layer, PEFT's layout (A whole, B split on the column-parallel
  // QKV and fc1; A split, B whole on the row-parallel projection and fc2), per layer and unit rank:
  //  QKV h + (h/8 + 2 x 768) = 6144 + 2304 = 8448; projection 768 + 6144 = 6912; fc1 6144 + 3072; fc2 3072 + 6144:
  //  33,792 (the whole layer's 16h = 98,304), x 16 x 48 = 25,952,256 of the model's 75,497,472.
  const transformer_shape t = tp8();
  CHECK(lora_parameters(t, 16) == 75'497'472ULL);
  CHECK(tensor_parallel_lora_parameters(t, 16) == 25'952'256ULL);
  CHECK(tensor_parallel_lora_parameters(model_22b, 16) == lora_parameters(model_22b, 16));  // t = 1
  CHECK(tensor_parallel_adapter_share(t, 75'497'472ULL) == 25'952'256ULL);
  // A given count: x 1,622,016 / 4,718,592 = 0.34375, rounded up: 4,718,593 -> 1,622,016.34 -> 1,622,017.
  CHECK(tensor_parallel_adapter_share(t, 4'718'593ULL) == 1'622'017ULL);
  CHECK(tensor_parallel_adapter_share(model_22b, 4'718'593ULL) == 4'718'593ULL);
  // Llama 3 8B at t = 4 (2 K/V heads a rank, 256 outputs each): q 4096 + 1024, k and v 2 x (4096 + 256), o 1024 +
  // 4096, gate and up 2 x (4096 + 3584), down 3584 + 4096: 41,984 a layer and unit rank, x 16 x 32 = 21,495,808 of
  // the model's 41,943,040.
  transformer_shape llama = test_shapes::llama3_8b;
  llama.tensor_parallel = 4;
  CHECK(lora_parameters(llama, 16) == 41'943'040ULL);
  CHECK(tensor_parallel_lora_parameters(llama, 16) == 21'495'808ULL);

  planner_options o = big_options();
  // LoRA on the fp32 base of bf16-mixed: 4 x 2,757,230,592 frozen + 16 x 25,952,256 fp32 adapters (weights,
  // gradients, AdamW) = 11,028,922,368 + 415,236,096 (the model's 75,497,472 adapters gave 12,236,881,920).
  o.states = {.adapter_parameters = lora_parameters(t, 16), .adapter_rank = 16};
  plan_result r = plan({.shape = t, .samples = 1e3}, o);
  REQUIRE(r.candidates.size() == 1);
  CHECK(r.candidates[0].state_bytes == 11'444'158'464ULL);
  // 1e10 of the 22,057,844,736 parameters frozen: the rank trains 12,057,844,736 / 8 = 1,507,230,592 (16 bytes each)
  // and holds 1,250,000,000 frozen (4 bytes each): 24,115,689,472 + 5,000,000,000. (The model's 1e10 frozen against
  // the rank's 2,757,230,592 parameters was refused as leaving nothing to train.)
  o.states = {.frozen_parameters = 10'000'000'000ULL};
  r = plan({.shape = t, .samples = 1e3}, o);
  REQUIRE(r.candidates.size() == 1);
  CHECK(r.candidates[0].state_bytes == 29'115'689'472ULL);
}
