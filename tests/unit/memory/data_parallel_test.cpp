// The per-rank ledger of data parallelism (issue 14, for issue 17's `safeamp plan --devices N`): plain DDP with its
// gradient buckets, ZeRO-1/2/3 against the ZeRO paper's Figure 1, ZeRO-1 against Megatron-LM's distributed-optimizer
// table, and ZeRO-3's gathered layer against DeepSpeed's 4 x largest-layer term.
#include "safeamp/memory/data_parallel.hpp"

#include <catch2/catch.hpp>
#include <cstdint>

#include "safeamp/policy/policy_presets.hpp"

using namespace safeamp;

namespace {
constexpr std::uint64_t gb = 1'000'000'000ULL;
}

TEST_CASE("per-rank bytes of DDP and ZeRO-1/2/3: the ZeRO paper's 7.5B model on 64 GPUs") {
  // ZeRO (Rajbhandari et al. 2020), Figure 1: Psi = 7.5B, K = 12 (mixed-precision Adam: 2 + 2 + 12 bytes), N_d = 64:
  //   baseline (2 + 2 + K) Psi = 120 GB; P_os 2Psi + 2Psi + K Psi / N = 15 + 15 + 1.40625 = 31.4 GB;
  //   P_os+g 2Psi + (2 + K) Psi / N = 15 + 1.640625 = 16.6 GB; P_os+g+p (2 + 2 + K) Psi / N = 1.875 = 1.88 GB.
  const rank_ledger l =
      rank_ledger_for({.parameters = 7'500'000'000ULL, .policy = presets::fp16_pure_master, .ranks = 64});
  CHECK(l[0].states.total_bytes() == 120 * gb);
  CHECK(l[1].states.total_bytes() == 31'406'250'000ULL);
  CHECK(l[2].states.total_bytes() == 16'640'625'000ULL);
  CHECK(l[3].states.total_bytes() == 1'875'000'000ULL);
  // DDP's buckets: a second copy of the fp16 gradients, 2 Psi = 15 GB, so a DDP rank holds 135 GB; with
  // gradient_as_bucket_view=True the gradients live in the buckets: 120 GB.
  CHECK(l[0].bucket_bytes == 15 * gb);
  CHECK(l[0].total_bytes() == 135 * gb);
  CHECK(l[1].bucket_bytes == 0);
  CHECK(rank_ledger_for({.parameters = 7'500'000'000ULL,
                         .policy = presets::fp16_pure_master,
                         .ranks = 64,
                         .gradient_as_bucket_view = true})[0]
            .total_bytes() == 120 * gb);
  // One rank all-reduces nothing: no buckets, and every stage is the baseline.
  const rank_ledger one = rank_ledger_for({.parameters = 7'500'000'000ULL, .policy = presets::fp16_pure_master});
  CHECK(one[0].bucket_bytes == 0);
  CHECK(one[3].total_bytes() == 120 * gb);
}

TEST_CASE("ZeRO-1 is Megatron-LM's distributed optimizer: 4 + 16/d, 6 + 12/d, 8 + 8/d bytes per parameter") {
  // Megatron-LM README, "Distributed Optimizer": fp16 param and grads 20 -> 4 + 16/d; bf16 param with fp32 grads
  // 18 -> 6 + 12/d; fp32 param and grads 16 -> 8 + 8/d. With 1e9 parameters and d = 8: 6, 7.5 and 9 GB per rank.
  const std::uint64_t p = 1'000'000'000ULL;
  // fp16: fp16 parameters and gradients (2 + 2) kept whole; fp32 main parameters and main gradients (4 + 4) and Adam
  // (8) partitioned: DeepSpeed's accounting (fp32_gradient_copy).
  CHECK(
      rank_ledger_for(
          {.parameters = p, .policy = presets::fp16_pure_master, .states = {.fp32_gradient_copy = true}, .ranks = 8})[1]
          .states.total_bytes() == 6 * gb);
  CHECK(
      rank_ledger_for(
          {.parameters = p, .policy = presets::fp16_pure_master, .states = {.fp32_gradient_copy = true}, .ranks = 1})[1]
          .states.total_bytes() == 20 * gb);
  // bf16 parameters (2) with fp32 gradients (4) kept whole, fp32 main parameters (4) and Adam (8) partitioned.
  precision_policy bf16_fp32_grads = presets::fp16_pure_master;
  bf16_fp32_grads.param = bf16;
  bf16_fp32_grads.compute = bf16;
  bf16_fp32_grads.gradient = fp32;
  CHECK(rank_ledger_for({.parameters = p, .policy = bf16_fp32_grads, .ranks = 8})[1].states.total_bytes() ==
        7'500'000'000ULL);
  CHECK(rank_ledger_for({.parameters = p, .policy = bf16_fp32_grads, .ranks = 1})[1].states.total_bytes() == 18 * gb);
  // fp32: parameters and gradients (4 + 4) whole, Adam (8) partitioned: 8 + 1 = 9 GB.
  CHECK(rank_ledger_for({.parameters = p, .policy = presets::fp32, .ranks = 8})[1].states.total_bytes() == 9 * gb);
}

TEST_CASE("ZeRO-3 gathers the largest layer: DeepSpeed's 4 x largest-layer parameters with fp16") {
  // deepspeed/runtime/zero/stage3.py, estimate_zero3_model_states_mem_needs: largest_layer_memory = 4 * params; its
  // docs' example has a 32M largest layer: 128 MB on every rank on top of the partitioned 16/N.
  const rank_ledger l = rank_ledger_for({.parameters = 2'851'000'000ULL,
                                         .policy = presets::fp16_pure_master,
                                         .ranks = 8,
                                         .largest_layer_parameters = 32'000'000ULL});
  CHECK(l[3].gathered_bytes == 128'000'000ULL);
  CHECK(l[3].total_bytes() == 128'000'000ULL + 2'851'000'000ULL * 16 / 8);
  CHECK(l[2].gathered_bytes == 0);
  CHECK_THROWS_WITH(rank_ledger_for({.parameters = 1000, .policy = presets::fp32, .ranks = 0}),
                    Catch::Contains("data_parallel"));
}
