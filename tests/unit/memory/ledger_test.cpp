// Byte units and checked arithmetic, and model states against the ZeRO paper (Rajbhandari et al. 2020):
// 16 bytes/param for mixed-precision Adam, the 7.5B example (120 GB) and its Table 1 column.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>

#include "safeamp/memory/bytes.hpp"
#include "safeamp/memory/model_states.hpp"
#include "safeamp/policy/policy_presets.hpp"

using namespace safeamp;

TEST_CASE("sizes parse with decimal and binary units kept apart") {
  CHECK(parse_bytes("24GB") == 24'000'000'000ULL);
  CHECK(parse_bytes("24GiB") == 24ULL << 30);
  CHECK(parse_bytes("24 gib") == 24ULL << 30);
  CHECK(parse_bytes("3.2e9") == 3'200'000'000ULL);
  CHECK(parse_bytes("0.34GB") == 340'000'000ULL);
  CHECK(parse_bytes("512MiB") == 512ULL << 20);
  CHECK(parse_bytes("1.5KiB") == 1536);
  CHECK(parse_bytes("0") == 0);
  for (const char* bad : {"-1GB", "nan", "NaNGB", "inf", "24XB", "GB", "", "1e30", "5EiB", "24G B B", "1e400"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_bytes(bad, "capacity"), error);
  }
  CHECK_THROWS_WITH(parse_bytes("24XB", "capacity"), Catch::Contains("GiB") && Catch::Contains("GB"));
  CHECK_THROWS_WITH(parse_bytes("-3GB", "capacity"), Catch::Contains("capacity"));
}

TEST_CASE("printed sizes always carry their unit") {
  CHECK(format_bytes(21'600'000'000ULL, byte_unit::gb) == "21.60 GB");
  CHECK(format_bytes(24ULL << 30, byte_unit::gib) == "24.00 GiB");
  CHECK(format_bytes(24ULL << 30, byte_unit::gb, 3) == "25.770 GB");
  CHECK(format_bytes(512, byte_unit::byte) == "512 B");
}

TEST_CASE("byte arithmetic throws instead of wrapping around") {
  CHECK(checked_add(1, 2, "x") == 3);
  CHECK(checked_mul(1ULL << 31, 1ULL << 31, "x") == 1ULL << 62);
  CHECK_THROWS_AS(checked_mul(1ULL << 32, 1ULL << 31, "x"), error);
  CHECK_THROWS_AS(checked_add(max_ledger_bytes, 1, "x"), error);
  CHECK_THROWS_AS(checked_sub(1, 2, "x"), error);
  CHECK_THROWS_AS(bytes_from_real(-1.0, "x"), error);
  CHECK_THROWS_AS(bytes_from_real(1e30, "x"), error);
}

TEST_CASE("bytes per parameter: mixed-precision Adam is 16 as in ZeRO section 3.1") {
  // fp16 params 2 + fp16 grads 2 + fp32 master 4 + momentum 4 + variance 4.
  const state_bytes_per_param mp = bytes_per_param(presets::fp16_pure_master);
  CHECK(mp.weights == 2);
  CHECK(mp.gradients == 2);
  CHECK(mp.master == 4);
  CHECK(mp.optimizer == 8);
  CHECK(mp.total() == 16);
  CHECK(mp.zero_k() == 12);  // the paper's K
  // Autocast-style (fp32 parameters, .grad in fp32, no separate master): 4 + 4 + 8 = 16 as well.
  CHECK(bytes_per_param(presets::bf16_mixed).total() == 16);
  // SGD: weights + grads only; momentum adds one fp32 buffer (Transformer Math 101: SGD+momentum 4+4 optimizer side).
  CHECK(bytes_per_param(presets::fp32, {.optimizer = optimizer_kind::sgd}).total() == 8);
  CHECK(bytes_per_param(presets::fp32, {.optimizer = optimizer_kind::sgd_momentum}).total() == 12);
  // 8-bit Adam with a master copy: 2 + 2 + 4 + (1 + 1 + 8/2048 block absmax) = 10.0039 (reference: ~10 B/param).
  CHECK(bytes_per_param(presets::fp16_pure_master, {.optimizer = optimizer_kind::adam_8bit}).total() ==
        Approx(10.0 + 8.0 / 2048.0).epsilon(1e-15));
  // bf16 moments halve the optimizer states.
  CHECK(bytes_per_param(presets::bf16_mixed, {.optimizer = optimizer_kind::adam, .optimizer_state_format = bf16}).optimizer == 4);
}

TEST_CASE("ZeRO's 7.5B-parameter example: 120 GB, and stages 1/2/3 at N_d = 64 (Figure 1)") {
  constexpr std::uint64_t psi = 7'500'000'000ULL;
  const auto total = [&](zero_stage s, std::uint64_t n) {
    return model_states_for(psi, presets::fp16_pure_master, {}, s, n).total_bytes();
  };
  CHECK(total(zero_stage::none, 1) == 120'000'000'000ULL);   // 16 Psi
  CHECK(total(zero_stage::optimizer, 64) == 31'406'250'000ULL);  // 4 Psi + 12 Psi / 64 = 31.4 GB
  CHECK(total(zero_stage::gradients, 64) == 16'640'625'000ULL);  // 2 Psi + 14 Psi / 64 = 16.6 GB
  CHECK(total(zero_stage::parameters, 64) == 1'875'000'000ULL);  // 16 Psi / 64 = 1.88 GB
  // Table 1, 7.5B column, printed to 3 significant digits: one unit in the last printed digit.
  struct row { std::uint64_t n; double os, osg, osgp; };
  const row table1[] = {{1, 120, 120, 120}, {4, 52.5, 41.3, 30}, {16, 35.6, 21.6, 7.5},
                        {256, 30.4, 15.4, 0.47}, {1024, 30.1, 15.1, 0.12}};
  for (const row& r : table1) {
    INFO("N_d = " << r.n);
    CHECK(static_cast<double>(total(zero_stage::optimizer, r.n)) / 1e9 == Approx(r.os).margin(0.1));
    CHECK(static_cast<double>(total(zero_stage::gradients, r.n)) / 1e9 == Approx(r.osg).margin(0.1));
    CHECK(static_cast<double>(total(zero_stage::parameters, r.n)) / 1e9 == Approx(r.osgp).margin(0.01));
  }
  // Table 1, 1T column at N_d = 1024: P_os+g+p 15.6 GB.
  CHECK(static_cast<double>(model_states_for(1'000'000'000'000ULL, presets::fp16_pure_master, {}, zero_stage::parameters, 1024)
                                .total_bytes()) / 1e9 == Approx(15.6).margin(0.1));
}

TEST_CASE("DeepSpeed accounting: fp16 and fp32 gradients, the estimators' 2 + 18/N and the docs' older 4 + 16/N") {
  // DeepSpeed's ZeRO-2 estimator (stage_1_and_2.py after PR #5099): 2P + 18P/N with 18 = 2 fp16 gradients + 4 fp32
  // gradients + 4 fp32 parameters + 8 Adam. t5-3b (2851M parameters) on 8 GPUs: 5.702e9 + 6.41475e9 bytes =
  // 12,116,750,000 = 11.28 GiB, the current code's figure for docs/memory.rst's example.
  constexpr std::uint64_t p = 2'851'000'000ULL;
  const state_options ds{.fp32_gradient_copy = true};
  const model_states z2 = model_states_for(p, presets::fp16_pure_master, ds, zero_stage::gradients, 8);
  CHECK(z2.fp32_gradient_bytes == 4 * p / 8);
  CHECK(z2.total_bytes() == 12'116'750'000ULL);
  CHECK(static_cast<double>(z2.total_bytes()) / (1ULL << 30) == Approx(11.28).margin(0.005));
  // The docs' older 4P + 16P/N (15.93 GB printed) is the same count with the fp16 gradients unpartitioned, i.e.
  // stage 1: 11.404e9 + 5.702e9 = 17,106,000,000 bytes = 15.93 GiB.
  const model_states z1 = model_states_for(p, presets::fp16_pure_master, ds, zero_stage::optimizer, 8);
  CHECK(z1.total_bytes() == 17'106'000'000ULL);
  CHECK(static_cast<double>(z1.total_bytes()) / (1ULL << 30) == Approx(15.93).margin(0.005));
  // One device: 20 bytes per parameter (Megatron-LM counts 18: it keeps no fp16 gradients).
  CHECK(model_states_for(1'000'000, presets::fp16_pure_master, ds).total_bytes() == 20'000'000ULL);
  CHECK(model_states_for(1'000'000, presets::fp16_pure_master).fp32_gradient_bytes == 0);
}

TEST_CASE("model-state inputs are validated") {
  CHECK_THROWS_AS(model_states_for(0, presets::fp32), error);
  CHECK_THROWS_WITH(model_states_for(max_parameter_count + 1, presets::fp32), Catch::Contains("parameters"));
  CHECK_THROWS_AS(model_states_for(1000, presets::fp32, {}, zero_stage::optimizer, 0), error);
  CHECK_THROWS_AS(validate_parameter_count(1e30), error);
  CHECK_THROWS_AS(validate_parameter_count(-5), error);
  CHECK_THROWS_AS(validate_parameter_count(std::numeric_limits<double>::quiet_NaN()), error);
  CHECK(parse_optimizer("AdamW") == optimizer_kind::adam);
  CHECK(parse_optimizer("adam_8bit") == optimizer_kind::adam_8bit);
  CHECK_THROWS_WITH(parse_optimizer("lion"), Catch::Contains("sgd-momentum"));
}
