// The nightly-window planner on small scenarios worked by hand: a round-number device, a 1e8-parameter model
// with a given activation figure, and windows that make the answer change.
#include "safeamp/memory/planner.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <limits>
#include <string>
#include <vector>

#include "safeamp/policy/policy_string.hpp"
#include "toy_device.hpp"

using namespace safeamp;

namespace {
// 10 GB, 1 TB/s, 10 TFLOPS fp32, 20 tf32, 40 fp16/bf16, no fp8: every figure chosen to divide evenly.
constexpr device_spec toy = toy_device("toy", 10'000'000'000ULL);

// 1e8 parameters, 1000 tokens and 1 GB of activations per sample, 1e5 samples a night.
workload toy_workload() {
  return {.shape = std::nullopt,
          .parameters = 100'000'000,
          .tokens_per_sample = 1000,
          .activation_bytes_per_sample = 1'000'000'000ULL,
          .samples = 1e5,
          .global_batch = 0};
}

planner_options toy_options(double window_seconds) {
  planner_options o;
  o.device = toy;
  o.budget = {.device_bytes = 0, .reserve_fraction = 0.0};
  o.window_seconds = window_seconds;
  o.efficiency = 0.5;
  o.policies = {{"fp32", presets::fp32},
                {"tf32", presets::tf32},
                {"bf16-mixed", presets::bf16_mixed},
                {"fp8-hybrid", presets::fp8_hybrid}};
  o.host_memory_bytes = 64'000'000'000ULL;  // every offload here fits: 16 x 1e8 x 1.5 = 2.4 GB of host memory
  return o;
}
}  // namespace

// By hand (Adam, 16 bytes/param under every policy here: 1.6 GB of states; 10 - 1.6 = 8.4 GB -> microbatch 8):
//  FLOPs/sample 6 x 1e8 x 1000 = 6e11; at 50% of the peak: bf16 0.03 s, tf32 0.06 s, fp32 0.12 s; full recompute x 4/3.
//  Optimizer step: 1e8 x (2x4 + 4 + 2x8) = 2.8e9 bytes / 1e12 B/s = 2.8 ms, ceil(1e5 / 8) = 12500 steps = 35 s.
//  bf16 none: 1e5 x 0.03 + 35 = 3035 s; bf16 full: 4035 s; tf32 none: 6035 s; tf32 full 8035 s; fp32 none 12035 s.
TEST_CASE("the fastest fitting policy wins, the runner-up is the next fastest") {
  const plan_result r = plan(toy_workload(), toy_options(7200));
  REQUIRE(r.chosen);
  CHECK(r.chosen->policy_name == "bf16-mixed");
  CHECK(r.chosen->mode == recompute::none);
  CHECK(r.chosen->max_microbatch == 8);
  CHECK(r.chosen->state_bytes == 1'600'000'000ULL);
  CHECK(r.chosen->seconds_per_sample == Approx(0.03).epsilon(1e-12));
  CHECK(r.chosen->total_seconds == Approx(3035.0).epsilon(1e-12));
  CHECK(r.chosen->margin_seconds == Approx(7200.0 - 3035.0).epsilon(1e-12));
  REQUIRE(r.runner_up);
  CHECK(r.runner_up->policy_name == "bf16-mixed");
  CHECK(r.runner_up->mode == recompute::full);
  CHECK(r.runner_up->total_seconds == Approx(4035.0).epsilon(1e-12));
  // fp8 is listed but the toy device has no fp8 units: never chosen, reported as unsupported.
  const auto fp8 = std::find_if(r.candidates.begin(), r.candidates.end(),
                                [](const plan_candidate& c) { return c.policy_name == "fp8-hybrid"; });
  REQUIRE(fp8 != r.candidates.end());
  CHECK_FALSE(fp8->supported);
  CHECK_FALSE(fp8->fits());
  // Selective recomputation needs a shape: not tried here.
  CHECK(std::none_of(r.candidates.begin(), r.candidates.end(),
                     [](const plan_candidate& c) { return c.mode == recompute::selective; }));
}

TEST_CASE("support and speed follow the matmul format the GEMMs read, not the compute field") {
  planner_options o = toy_options(7200);
  // bf16 GEMMs with fp32 compute/output fields ("matmul=bf16") run at the bf16 rate: 0.03 s per sample as bf16-mixed
  // (until 2026-12-06 the planner read compute and gave fp32's 0.12 s).
  o.policies = {{"bf16 gemms", parse_policy("matmul=bf16")},
                {"e4m3 gemms", parse_policy("preset=bf16-mixed,matmul=e4m3")}};
  const plan_result r = plan(toy_workload(), o);
  const auto named = [&r](const char* name) {
    return std::find_if(r.candidates.begin(), r.candidates.end(),
                        [name](const plan_candidate& c) { return c.policy_name == name && c.mode == recompute::none; });
  };
  REQUIRE(named("bf16 gemms") != r.candidates.end());
  CHECK(named("bf16 gemms")->supported);
  CHECK(named("bf16 gemms")->seconds_per_sample == Approx(0.03).epsilon(1e-12));
  // E4M3 GEMMs on a device without fp8 units: unsupported, naming E4M3 (compute says bf16).
  REQUIRE(named("e4m3 gemms") != r.candidates.end());
  CHECK_FALSE(named("e4m3 gemms")->supported);
  CHECK(named("e4m3 gemms")->unsupported_format == fp8_e4m3);
}

TEST_CASE("a tighter window leaves one configuration; a price gives the cost per sample") {
  planner_options o = toy_options(3600);
  o.price_per_hour = 2.0;
  const plan_result r = plan(toy_workload(), o);
  REQUIRE(r.chosen);
  CHECK(r.chosen->policy_name == "bf16-mixed");
  CHECK_FALSE(r.runner_up);  // bf16 full takes 4035 s > 3600 s
  CHECK(r.chosen->cost_per_sample == Approx(2.0 * 3035.0 / 3600.0 / 1e5).epsilon(1e-12));
}

TEST_CASE("a target global batch sets the accumulation and the optimizer-step count") {
  workload w = toy_workload();
  w.global_batch = 64;  // 8 steps of 8: 1e5 / 64 = 1563 optimizer steps x 2.8 ms = 4.3764 s
  const plan_result r = plan(w, toy_options(7200));
  REQUIRE(r.chosen);
  CHECK(r.chosen->accumulation == accumulation_plan{.microbatch = 8, .steps = 8, .global_batch = 64});
  CHECK(r.chosen->total_seconds == Approx(3000.0 + 1563 * 2.8e-3).epsilon(1e-12));
}

TEST_CASE("when the window is too short the planner says which constraint fails by how much") {
  const plan_result r = plan(toy_workload(), toy_options(1800));
  CHECK_FALSE(r.chosen);
  REQUIRE_FALSE(r.failures.empty());
  const std::string all = r.failures.back();
  CHECK_THAT(all, Catch::Contains("window") && Catch::Contains("bf16-mixed") && Catch::Contains("0.34 h over"));
  // 3035 - 1800 = 1235 s = 0.343 h over the 0.50 h window.
}

TEST_CASE("when nothing fits in memory the planner names the shortfall and what would fit") {
  workload w = toy_workload();
  w.activation_bytes_per_sample = 9'000'000'000ULL;  // 1.6 + 9 = 10.6 GB > 10 GB: short by 0.6 GB
  const plan_result r = plan(w, toy_options(7200));
  CHECK_FALSE(r.chosen);
  REQUIRE_FALSE(r.failures.empty());
  CHECK_THAT(r.failures.back(), Catch::Contains("memory") && Catch::Contains("short by 0.60 GB"));
  // Each policy's closest configuration is searched: fp32 (no autocast weight copies) needs 1.6 + 9 = 10.6 GB in
  // backward; bf16-mixed with full recomputation too (its copies are not saved). Fused AdamW only shrinks the step;
  // 8-bit AdamW: 4 + 4 + 2.004 bytes -> 1.0004 GB + 9 GB, still short. Offloading the optimizer leaves weights and
  // gradients, 0.8 GB + 9 GB: fits. Its cost: P (g + w) / 32e9 + P (12 + 2 x 8) / 50e9 = 0.025 + 0.056 = 0.081 s per
  // optimizer step; host memory (4 + 8 + 4) x 1e8 = 1.6 GB. bf16-mixed is the fastest (0.03 x 4/3 = 40 ms per
  // sample), then tf32, then fp32: one remedy per set of changes, the fastest policy's. Its time per sample counts
  // the offloaded step: microbatch 1 and no target batch is one step a sample, 40 + 81 = 121 ms (40 until 2026-12).
  REQUIRE(r.remedies.size() == 1);
  CHECK_THAT(r.remedies[0],
             Catch::StartsWith("with bf16-mixed (quality unverified), recompute full: offload the optimizer "
                               "to the CPU (ZeRO-Offload, 1.60 GB of host memory): fits, microbatch 1") &&
                 Catch::Contains("+0.081 s per optimizer step") &&
                 Catch::Contains("121 ms/sample with the optimizer step"));
  for (const std::string& s : r.remedies) CHECK_THAT(s, !Catch::Contains("sgd"));
}

namespace {
// The toy device made compute-bound everywhere (1 PB/s) with fp8 at twice bf16 (80 TFLOPS) and 100 GB.
device_spec fp8_toy() {
  device_spec d = toy;
  d.name = "fp8 toy";
  d.capacity_bytes = 100'000'000'000ULL;
  d.memory_bytes_per_second = 1e15;
  d.peak_fp8_flops = 80e12;
  return d;
}
constexpr transformer_shape round_shape{
    .sequence = 1000, .hidden = 1000, .heads = 10, .layers = 10, .vocabulary = 10000};

planner_options fp8_options() {
  planner_options o;
  o.device = fp8_toy();
  o.window_seconds = 1e6;
  o.efficiency = 0.5;
  o.policies = {{"fp32", presets::fp32}, {"bf16-mixed", presets::bf16_mixed}, {"fp8-hybrid", presets::fp8_hybrid}};
  o.recompute_modes = {recompute::none};
  return o;
}

const plan_candidate& find_candidate(const plan_result& r, std::string_view name) {
  const auto it = std::find_if(r.candidates.begin(), r.candidates.end(),
                               [&](const plan_candidate& c) { return c.policy_name == name; });
  REQUIRE(it != r.candidates.end());
  return *it;
}
}  // namespace

TEST_CASE("fp8 is credited on the linear-layer GEMMs only (Korthikanti Appendix A's three terms)") {
  // linear 72 L s h^2 = 72 x 10 x 1000 x 1e6 = 7.2e11; attention 12 L s^2 h = 1.2e11; logits 6 s h v = 6e10.
  // bf16: 9e11 / (0.5 x 40e12) = 0.045 s. fp8: (7.2e11 / 80e12 + 1.8e11 / 40e12) / 0.5 = 0.027 s
  // (crediting every FLOP with the fp8 peak would give 0.0225 s).
  const workload w{.shape = round_shape, .samples = 100};
  const plan_result r = plan(w, fp8_options());
  CHECK(find_candidate(r, "bf16-mixed").seconds_per_sample == Approx(0.045).epsilon(1e-12));
  CHECK(find_candidate(r, "fp8-hybrid").seconds_per_sample == Approx(0.027).epsilon(1e-12));
  const flops_split f = training_flops_split(round_shape, recompute::none);
  CHECK(f.linear == 7.2e11);
  CHECK(f.other == 1.8e11);
  CHECK(f.total() == Approx(training_flops_per_sample(round_shape, recompute::none)).epsilon(1e-15));
  CHECK(training_flops_split(round_shape, recompute::selective).other == Approx(3.0e11).epsilon(1e-15));
}

TEST_CASE("a recommendation says whether its quality was verified; a failed parity result is never chosen") {
  const workload w{.shape = round_shape, .samples = 100};
  planner_options o = fp8_options();
  plan_result r = plan(w, o);
  REQUIRE(r.chosen);
  CHECK(r.chosen->policy_name == "fp8-hybrid");
  CHECK(r.chosen->quality == quality_status::unverified);
  REQUIRE(r.fastest_verified);
  CHECK(r.fastest_verified->policy_name == "fp32");  // the reference needs no parity result
  CHECK(r.fastest_verified->quality == quality_status::reference);
  // A parity PASS for bf16-mixed and a FAIL for fp8-hybrid: fp8 is listed but excluded, bf16 is chosen, verified.
  o.verified_policies = {presets::bf16_mixed};
  o.failed_policies = {presets::fp8_hybrid};
  r = plan(w, o);
  REQUIRE(r.chosen);
  CHECK(r.chosen->policy_name == "bf16-mixed");
  CHECK(r.chosen->quality == quality_status::verified);
  CHECK(r.fastest_verified->policy_name == "bf16-mixed");
  const plan_candidate& fp8 = find_candidate(r, "fp8-hybrid");
  CHECK(fp8.fits_memory());
  CHECK_FALSE(fp8.fits());
  CHECK(fp8.quality == quality_status::failed);
}

TEST_CASE("among equally fast candidates the verified one ranks first") {
  // bf16-mixed and fp16-mixed run at the same 40 TFLOPS with the same 28-byte optimizer pass: the same total time to
  // the bit. With a parity PASS for fp16-mixed only it is chosen, though listed second (until 2026-12 the listed
  // order decided, and the unverified bf16-mixed was chosen); bf16-mixed is the runner-up.
  const workload w{.shape = round_shape, .samples = 100};
  planner_options o = fp8_options();
  o.policies = {{"bf16-mixed", presets::bf16_mixed}, {"fp16-mixed", presets::fp16_mixed}};
  o.verified_policies = {presets::fp16_mixed};
  const plan_result r = plan(w, o);
  REQUIRE(r.chosen);
  REQUIRE(r.runner_up);
  CHECK(r.chosen->total_seconds == r.runner_up->total_seconds);
  CHECK(r.chosen->policy_name == "fp16-mixed");
  CHECK(r.chosen->quality == quality_status::verified);
  CHECK(r.runner_up->policy_name == "bf16-mixed");
  // A time longer by more than equal_time_tolerance still ranks by time: fp32 (reference) is not chosen.
  o.policies.push_back({"fp32", presets::fp32});
  o.verified_policies = {};
  CHECK(plan(w, o).chosen->policy_name == "bf16-mixed");
}

TEST_CASE("remedies rank by the time per sample with the optimizer step, offloaded steps included") {
  // 9 GB of activations a sample: neither bf16-mixed (1.6 GB of states + 0.2 GB of weight copies + 9 GB) nor
  // fp16-pure-master (1.6 + 9 GB) fits 10 GB; for both only the optimizer offload fits, at microbatch 1 (one step a
  // sample without a target batch), with 1.6 GB (16 bytes a parameter) on the host. The compute is the same, 0.03 s a
  // sample at 40 TFLOPS; the offloaded step is P (g + w) / 32e9 + P (12 + 16) / 50e9: bf16-mixed's fp32 weights and
  // gradients 8 bytes, 0.025 + 0.056 = 0.081 s; fp16-pure-master's 4 bytes, 0.0125 + 0.056 = 0.0685 s. So
  // fp16-pure-master's offload is the faster, 98.5 against 111 ms a sample, and the one listed for that set of
  // changes, though listed second (until 2026-12 the two tied on 30 ms without the step, and the first was listed).
  workload w = toy_workload();
  w.activation_bytes_per_sample = 9'000'000'000ULL;
  planner_options o = toy_options(7200);
  o.policies = {{"bf16-mixed", presets::bf16_mixed}, {"fp16-pure-master", presets::fp16_pure_master}};
  o.recompute_modes = {recompute::none};
  const plan_result r = plan(w, o);
  REQUIRE(r.remedies.size() == 1);
  CHECK_THAT(r.remedies[0],
             Catch::StartsWith("with fp16-pure-master (quality unverified), recompute none: offload the optimizer "
                               "to the CPU (ZeRO-Offload, 1.60 GB of host memory): fits, microbatch 1") &&
                 Catch::Contains("98.5 ms/sample with the optimizer step"));
}

TEST_CASE("remedies of one intrusiveness order by the time per sample with the optimizer step") {
  // Two recomputation remedies, no target batch (a step per microbatch): selective at microbatch 1, 50 ms of compute a
  // sample and a 36.4 ms step each sample, 86.4 ms; full at microbatch 4, 60 ms and a quarter step, 60 + 9.1 = 69.1
  // ms: full goes first, though its compute alone (60 > 50 ms) ranked it second until 2026-12.
  remedy selective, full;
  selective.intrusiveness = full.intrusiveness = 1;
  selective.changes = {"recompute selective"};
  full.changes = {"recompute full"};
  selective.result.seconds_per_sample = 0.050;
  selective.result.optimizer_seconds_per_step = 0.0364;
  selective.result.accumulation = {.microbatch = 1, .steps = 1, .global_batch = 1};
  full.result.seconds_per_sample = 0.060;
  full.result.optimizer_seconds_per_step = 0.0364;
  full.result.accumulation = {.microbatch = 4, .steps = 1, .global_batch = 4};
  CHECK(selective.result.full_seconds_per_sample() == Approx(0.0864).epsilon(1e-12));
  CHECK(full.result.full_seconds_per_sample() == Approx(0.0691).epsilon(1e-12));
  CHECK(detail::remedy_before(full, selective));
  CHECK_FALSE(detail::remedy_before(selective, full));
  // Over 2 replicas sharing a batch of 8 (4 each), one step per 8 samples of the job, 2 per 8 of a replica's time.
  full.result.data_parallel = 2;
  full.result.accumulation = {.microbatch = 4, .steps = 1, .global_batch = 8};
  CHECK(full.result.full_seconds_per_sample() == Approx(0.060 + 0.0364 * 2 / 8).epsilon(1e-12));
}

TEST_CASE("a missed window says how many samples fit and which card would finish") {
  const plan_result r = plan(toy_workload(), toy_options(1800));
  REQUIRE_FALSE(r.chosen);
  REQUIRE_FALSE(r.remedies.empty());
  // bf16 none takes 3035 s for 1e5 samples: floor(1e5 x 1800 / 3035) = floor(59308.07) = 59308 fit.
  CHECK_THAT(r.remedies[0], Catch::Contains("about 59308 of the 100000 (59%)"));
  // Two toy devices: 1e5 x 0.03 / 2 = 1500 s, + ceil(1e5 / 16) = 6250 optimizer steps (8 samples on each of 2
  // devices) x 2.8 ms = 17.5 s: 1517.5 s = 0.42 h < 0.5 h, labelled with what it needs.
  CHECK_THAT(r.remedies[1],
             Catch::StartsWith("data parallel over 2 devices (NEEDS 2 devices; planned for 1): bf16-mixed "
                               "takes 0.42 h"));
  // On an RTX 4090 bf16 runs 6e11 / (0.5 x 165.2e12) = 7.3 ms per sample: the night takes ~0.2 h.
  CHECK(std::any_of(r.remedies.begin(), r.remedies.end(),
                    [](const std::string& s) { return s.find("a different card (RTX 4090)") != std::string::npos; }));
}

TEST_CASE("--rounding exact: device counts that do not divide the global batch are named, never abort the plan") {
  // A target batch of 96 kept exactly: microbatch 8 x 12 steps on one device; 1e5 x 0.03 s + ceil(1e5 / 96) = 1042
  // optimizer steps x 2.8 ms = 3002.92 s. Over n devices 3000 / n + 2.92 s (the step is not partitioned at stage 0):
  // 32 devices take 96.67 s, 64 would take 49.8 s, but 96 is not a multiple of 64. Until 2026-12 the remedy search
  // evaluated 64 devices with the user's rule and the whole plan threw "a multiple of the data-parallel size 64".
  workload w = toy_workload();
  w.global_batch = 96;
  planner_options o = toy_options(60);
  o.policies = {{"bf16-mixed", presets::bf16_mixed}};
  o.recompute_modes = {recompute::none};
  o.rounding = accumulation_rounding::exact_divisor;
  plan_result r = plan(w, o);
  REQUIRE_FALSE(r.chosen);
  REQUIRE(r.candidates[0].accumulation == accumulation_plan{.microbatch = 8, .steps = 12, .global_batch = 96});
  CHECK(r.candidates[0].total_seconds == Approx(3000.0 + 1042 * 2.8e-3).epsilon(1e-12));
  // floor(1e5 x 60 / 3002.9176) = 1998 samples fit.
  CHECK_THAT(r.remedies[0], Catch::Contains("about 1998 of the 100000"));
  CHECK_THAT(r.remedies[1], Catch::StartsWith("data parallel over 64 devices or more: NOT EVALUATED: --rounding exact "
                                              "keeps the global batch of 96 only over a data-parallel size that "
                                              "divides it (up to 32 devices none finishes in time)"));
  // A 100 s window: 32 devices (3 samples each, 96 exactly) take 93.75 + 2.92 = 96.67 s = 0.03 h.
  o.window_seconds = 100;
  r = plan(w, o);
  CHECK_THAT(r.remedies[1], Catch::StartsWith("data parallel over 32 devices (NEEDS 32 devices; planned for 1): "
                                              "bf16-mixed takes 0.03 h"));
}

TEST_CASE("when one device cannot fit at all, the closest combination is listed and more devices are labelled") {
  workload w = toy_workload();
  w.activation_bytes_per_sample = 9'500'000'000ULL;
  // One device: offload 0.8 + 9.5 = 10.3 GB (0.3 short), 8-bit 1.0004 + 9.5 (0.5004 short): offload is closest.
  const plan_result r = plan(w, toy_options(7200));
  REQUIRE(r.remedies.size() == 2);
  CHECK_THAT(r.remedies[0],
             Catch::StartsWith("offload the optimizer to the CPU") && Catch::Contains("still short by 0.30 GB"));
  // ZeRO stage 3 over 2 devices would hold 0.8 GB / 2 = 0.4 GB + 9.5 GB = 9.9 GB and the layer it gathers, whose
  // size nobody gave: not offered as fitting (it was, with the layer left out), but said to be unevaluated.
  CHECK_THAT(r.remedies[1], Catch::StartsWith("ZeRO stage 3 over more devices: NOT EVALUATED") &&
                                Catch::Contains("--largest-layer N") && !Catch::Contains("fits"));
}

TEST_CASE("the ZeRO-3 fallback counts the gathered layer when its size is known") {
  // The case above with the optimizer offloaded already (fp32, fused AdamW: 0.8 GB of fp32 weights and gradients on
  // the device) and a largest layer of 2.5e7 parameters. The one lever left, paged 8-bit AdamW, keeps the same 0.8 GB:
  // 10.3 GB, 0.3 short. ZeRO-3 gathers the layer's fp32 weights and gradients, 8 x 2.5e7 = 0.2 GB:
  //  over 2 devices 0.8 / 2 + 0.2 + 9.5 = 10.1 GB > 10 GB (without the layer 9.9 GB would fit);
  //  over 4 devices 0.8 / 4 + 0.2 + 9.5 = 9.9 GB: fits.
  workload w = toy_workload();
  w.activation_bytes_per_sample = 9'500'000'000ULL;
  w.largest_layer_parameters = 25'000'000;
  planner_options o = toy_options(7200);
  o.budget.device_bytes = toy.capacity_bytes;  // what plan() fills in
  const state_options offloaded{.impl = optimizer_impl::fused, .offload_optimizer = true};
  const plan_candidate from =
      detail::evaluate(w, o, {"fp32", presets::fp32}, recompute::none, 0.5, offloaded, zero_stage::none, 1);
  REQUIRE_FALSE(from.fits_memory());
  const std::vector<remedy> r = memory_remedies(w, o, from, 0.5);
  REQUIRE(r.size() == 2);
  CHECK_THAT(r[0].text(), Catch::Contains("still short by 0.30 GB"));
  CHECK(r[1].devices == 4);
  CHECK_THAT(r[1].text(), Catch::Contains("ZeRO stage 3 over 4 devices (NEEDS 4 devices; planned for 1): fits"));
  CHECK(r[1].result.phase_peak_bytes[1] <= 10'000'000'000ULL);
}

TEST_CASE("--rounding exact: the ZeRO-3 fallback stops at the first device count that does not divide the batch") {
  // The fallback case above (over 2 devices 10.1 GB, short by 0.1 GB; over 4 devices 9.9 GB, fits) with a target
  // batch of 6 kept exactly: 6 splits over 2 devices (evaluated, short) but not over 4, which is named instead of
  // evaluated (until 2026-12 it was evaluated with the user's rule and threw).
  workload w = toy_workload();
  w.activation_bytes_per_sample = 9'500'000'000ULL;
  w.largest_layer_parameters = 25'000'000;
  w.global_batch = 6;
  planner_options o = toy_options(7200);
  o.budget.device_bytes = toy.capacity_bytes;
  o.rounding = accumulation_rounding::exact_divisor;
  const state_options offloaded{.impl = optimizer_impl::fused, .offload_optimizer = true};
  const plan_candidate from =
      detail::evaluate(w, o, {"fp32", presets::fp32}, recompute::none, 0.5, offloaded, zero_stage::none, 1);
  const std::vector<remedy> r = memory_remedies(w, o, from, 0.5);
  REQUIRE(r.size() == 3);
  CHECK_THAT(r[1].text(), Catch::Contains("ZeRO stage 3 over 2 devices (NEEDS 2 devices; planned for 1): still "
                                          "short by 0.10 GB"));
  CHECK_FALSE(r[2].evaluated);
  CHECK_THAT(r[2].text(), Catch::StartsWith("ZeRO stage 3 over 4 devices or more") &&
                              Catch::Contains("NOT EVALUATED: --rounding exact keeps the global batch of 6"));
}

TEST_CASE("a measured peak's ratio scales every candidate's phases") {
  // bf16-mixed on the toy: backward 1.6 GB states + 0.2 GB weight copies + 1 GB per sample: floor(8.2) = 8. With
  // the model 10% low (ratio 1.1): 1.98 GB + 1.1 GB per sample: floor(8.02 / 1.1) = floor(7.29) = 7.
  planner_options o = toy_options(7200);
  o.policies = {{"bf16-mixed", presets::bf16_mixed}};
  o.recompute_modes = {recompute::none};
  CHECK(plan(toy_workload(), o).candidates[0].max_microbatch == 8);
  o.peak_calibration_ratio = 1.1;
  CHECK(plan(toy_workload(), o).candidates[0].max_microbatch == 7);
  o.peak_calibration_ratio = 5.0;
  CHECK_THROWS_WITH(plan(toy_workload(), o), Catch::Contains("peak calibration ratio"));
}

TEST_CASE("a given parameter count overrides the shape's estimate in the planner") {
  planner_options o = fp8_options();
  o.policies = {{"bf16-mixed", presets::bf16_mixed}};
  workload w{.shape = round_shape, .samples = 100};
  CHECK(plan(w, o).candidates[0].state_bytes == 16 * parameter_count(round_shape));
  w.parameters = 200'000'000;
  CHECK(plan(w, o).candidates[0].state_bytes == 3'200'000'000ULL);
}

TEST_CASE("a measured throughput calibrates the efficiency, and an impossible one is rejected") {
  planner_options o = toy_options(7200);
  // bf16-mixed (the default measured policy), no recomputation, microbatch 8 (no target batch: 8 a step): 1e5
  // samples at 25 samples/s are 4000 s, of which the 12500 optimizer steps take 35 s; the compute, 1e5 x 6e11 / 40e12
  // = 1500 s at the roofline, takes the other 3965 s: efficiency 1500 / 3965 (0.375 until 2026-12, from the FLOPs
  // alone, which planned the measured configuration at 1e5 / (4000 + 35) = 24.8 samples/s).
  o.measured_samples_per_second = 25.0;
  const plan_result r = plan(toy_workload(), o);
  CHECK(r.efficiency == Approx(1500.0 / 3965.0).epsilon(1e-12));
  REQUIRE(r.calibrated_on);
  CHECK(r.calibrated_on->total_seconds == Approx(4000.0).epsilon(1e-12));
  CHECK(find_candidate(r, "bf16-mixed").total_seconds == Approx(4000.0).epsilon(1e-12));
  // 100 samples/s: 1000 s, 965 s of compute, efficiency 1500 / 965 = 1.55 > 1.1: a timing bug, not a speedup. The
  // bound is 1e5 / (1500 + 35) = 65.1 samples/s, 1e5 / (1500 / 1.1 + 35) = 71.5 with the 10% for boost clocks.
  o.measured_samples_per_second = 100.0;
  CHECK_THROWS_WITH(plan(toy_workload(), o), Catch::Contains("impossible") &&
                                                 Catch::Contains("at most 71.498 samples/s") &&
                                                 Catch::Contains("roofline bound is 65.147 samples/s"));
}

namespace {
// The planned rate of the measured configuration: samples over its total time.
double planned_rate(const workload& w, const plan_candidate& c) { return w.samples / c.total_seconds; }
}  // namespace

TEST_CASE("a measured throughput is reproduced by the plan for the configuration that was measured") {
  // fp8-hybrid on the compute-bound fp8 toy (round_shape: P = 10 x 12e6 + 1e4 x 1e3 = 1.3e8): linear 7.2e11 FLOPs at
  // 80 TFLOPS and the rest, 1.8e11, at bf16's 40: 0.0135 s a sample at the roofline. A target batch of 1 makes every
  // sample an optimizer step, 1.3e8 x 28 bytes / 1e15 B/s = 3.64e-6 s. 50 samples/s over 100 samples is 2 s:
  // efficiency 1.35 / (2 - 3.64e-4). (Until 2026-12: 50 x 9e11 / 80e12 = 0.5625 against the fp8 peak, and the
  // measured configuration planned at 100 / 2.4 s = 41.7 samples/s.)
  workload w{.shape = round_shape, .samples = 100, .global_batch = 1};
  planner_options o = fp8_options();
  o.measured_samples_per_second = 50.0;
  o.measured_policy = {"fp8-hybrid", presets::fp8_hybrid};
  plan_result r = plan(w, o);
  CHECK(r.efficiency == Approx(1.35 / (2.0 - 3.64e-4)).epsilon(1e-12));
  CHECK(planned_rate(w, find_candidate(r, "fp8-hybrid")) == Approx(50.0).epsilon(1e-12));
  // bf16-mixed at that efficiency: 100 x 9e11 / 40e12 / e + 3.64e-4 s.
  CHECK(find_candidate(r, "bf16-mixed").total_seconds ==
        Approx(2.25 * (2.0 - 3.64e-4) / 1.35 + 3.64e-4).epsilon(1e-12));

  // LoRA rank 16 under bf16-mixed: 2.56e6 adapters (16 r h L); the base's weight gradients are not computed:
  // linear 2 x 2 s L 12 h^2 + 6 A s = 4.8e11 + 1.536e10, the rest 3 x 4 L s^2 h + 2 x 2 s h v = 1.6e11: 6.5536e11
  // FLOPs, 0.016384 s at 40 TFLOPS; the adapters' fp32 AdamW step 2.56e6 x 28 / 1e15 s. At 40 samples/s (2.5 s):
  // efficiency 1.6384 / (2.5 - 100 x 7.168e-8) (until 2026-12 the full fine-tune's 9e11 FLOPs: 0.9, 55 samples/s).
  o.measured_policy = {"bf16-mixed", presets::bf16_mixed};
  o.policies = {{"bf16-mixed", presets::bf16_mixed}};
  o.states = {.adapter_parameters = 2'560'000, .adapter_rank = 16};
  o.measured_samples_per_second = 40.0;
  r = plan(w, o);
  CHECK(r.candidates[0].flops_per_sample == 6.5536e11);
  CHECK(r.efficiency == Approx(1.6384 / (2.5 - 100 * 7.168e-8)).epsilon(1e-12));
  CHECK(planned_rate(w, r.candidates[0]) == Approx(40.0).epsilon(1e-12));

  // Full recomputation (the measured run's): 9e11 x 4/3 = 1.2e12 FLOPs, 0.03 s at 40 TFLOPS; 20 samples/s (5 s):
  // efficiency 3 / (5 - 3.64e-4) (until 2026-12: 20 x 9e11 / 40e12 = 0.45, and 15 samples/s planned).
  o.states = {};
  o.recompute_modes = {recompute::full};
  o.measured_recompute = recompute::full;
  o.measured_samples_per_second = 20.0;
  r = plan(w, o);
  CHECK(r.efficiency == Approx(3.0 / (5.0 - 3.64e-4)).epsilon(1e-12));
  CHECK(planned_rate(w, r.candidates[0]) == Approx(20.0).epsilon(1e-12));
}

TEST_CASE("a measured throughput of a memory-bound configuration is checked against its own roofline") {
  // A small GPT on an RTX 4090 (s 128, h 256, a 4, L 2, v 1000) with a target batch of 1: microbatch 1, whose MLP
  // GEMM 128 x 1024 x 256 in bf16 moves 2 (128 x 256 + 256 x 1024 + 128 x 1024) = 851,968 bytes for 67,108,864 FLOPs:
  // 1024/13 FLOP/B, under the ridge (165.2e12 / 1008e9 = 163.9): 1024/13 x 1008e9 = 79.4 TFLOP/s. FLOPs a sample
  // 72 x 2 x 128 x 256^2 (1 + 1/12 + 1000/6144) = 1,505,230,848: 1.8958e-5 s at the roofline. Every sample is an
  // optimizer step: P = 2 x 12 x 256^2 + 1000 x 256 = 1,828,864 parameters x 28 bytes / 1008e9 = 5.0802e-5 s.
  const transformer_shape small{.sequence = 128, .hidden = 256, .heads = 4, .layers = 2, .vocabulary = 1000};
  const workload w{.shape = small, .samples = 1e6, .global_batch = 1};
  planner_options o;
  o.device = find_device("RTX 4090");
  o.window_seconds = 1e6;
  o.policies = {{"bf16-mixed", presets::bf16_mixed}};
  o.recompute_modes = {recompute::none};
  const double roofline = 1'505'230'848.0 * 13.0 / (1024.0 * 1008e9);
  const double step = 1'828'864.0 * 28.0 / 1008e9;
  // 10000 samples/s: 1e-4 s a sample, 4.9198e-5 of it compute: efficiency 0.3853 (until 2026-12 10000 x 1.505e9 /
  // 165.2e12 = 0.091 against the compute peak, and 3863 samples/s planned).
  o.measured_samples_per_second = 10000.0;
  plan_result r = plan(w, o);
  CHECK(r.efficiency == Approx(roofline / (1e-4 - step)).epsilon(1e-12));
  CHECK(planned_rate(w, r.candidates[0]) == Approx(10000.0).epsilon(1e-12));
  // 14500 samples/s needs efficiency 1.044: within the 10% for boost clocks, used as it is (not clamped to 1).
  o.measured_samples_per_second = 14500.0;
  r = plan(w, o);
  CHECK(r.efficiency == Approx(roofline / (1.0 / 14500.0 - step)).epsilon(1e-12));
  CHECK(r.efficiency > 1.04);
  CHECK(planned_rate(w, r.candidates[0]) == Approx(14500.0).epsilon(1e-12));
  // 15000 samples/s needs 1.195: impossible. The bound: 1 / (1.8958e-5 + 5.0802e-5) = 14335 samples/s; with 10% on the
  // compute 1 / (1.8958e-5 / 1.1 + 5.0802e-5) = 14698. (Accepted until 2026-12: 2.3e13 FLOP/s < the 165.2e12 peak.)
  o.measured_samples_per_second = 15000.0;
  CHECK_THROWS_WITH(plan(w, o), Catch::Contains("at most 14698 samples/s") &&
                                    Catch::Contains("microbatch 1 x 1 steps") &&
                                    Catch::Contains("roofline bound is 14335 samples/s"));
}

TEST_CASE("a measured throughput with an offloaded optimizer, and over replicas, is the whole job's") {
  // Optimizer offload on the toy (no shape): 6e11 FLOPs at 40 TFLOPS, 0.015 s a sample at the roofline; a target
  // batch of 8 (microbatch 8) is 12500 offloaded steps of 1e8 (8 / 32e9 + 28 / 50e9) = 0.081 s, 1012.5 s. 25
  // samples/s (4000 s): efficiency 1500 / (4000 - 1012.5) (until 2026-12 0.375 from the FLOPs, 19.95 samples/s).
  workload w = toy_workload();
  w.global_batch = 8;
  planner_options o = toy_options(1e5);
  o.policies = {{"bf16-mixed", presets::bf16_mixed}};
  o.recompute_modes = {recompute::none};
  o.states = {.impl = optimizer_impl::fused, .offload_optimizer = true};
  o.measured_samples_per_second = 25.0;
  plan_result r = plan(w, o);
  REQUIRE(r.candidates[0].accumulation.microbatch == 8);
  CHECK(r.candidates[0].optimizer_seconds == Approx(1012.5).epsilon(1e-12));
  CHECK(r.efficiency == Approx(1500.0 / 2987.5).epsilon(1e-12));
  CHECK(planned_rate(w, r.candidates[0]) == Approx(25.0).epsilon(1e-12));
  // Two replicas, a target batch of 16 (8 each), the step on the device (2.8 ms, not partitioned at stage 0): 6250
  // steps, 17.5 s. 50 samples/s is the whole job's rate (2000 s): 1500 / (2 e) = 1982.5 s, e = 750 / 1982.5. (Until
  // 2026-12 it was taken as one replica's: 50 x 6e11 / 40e12 = 0.75, and the job planned at 98 samples/s.)
  w.global_batch = 16;
  o.states = {};
  o.data_parallel = 2;
  o.measured_samples_per_second = 50.0;
  r = plan(w, o);
  CHECK(r.efficiency == Approx(750.0 / 1982.5).epsilon(1e-12));
  CHECK(planned_rate(w, r.candidates[0]) == Approx(50.0).epsilon(1e-12));
}

TEST_CASE("planner inputs are validated") {
  planner_options o = toy_options(7200);
  workload w = toy_workload();
  w.samples = 0;
  CHECK_THROWS_WITH(plan(w, o), Catch::Contains("samples"));
  w = toy_workload();
  w.parameters = 0;
  CHECK_THROWS_WITH(plan(w, o), Catch::Contains("parameters"));
  o.window_seconds = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_WITH(plan(toy_workload(), o), Catch::Contains("window"));
  o = toy_options(7200);
  o.efficiency = 1.5;
  CHECK_THROWS_WITH(plan(toy_workload(), o), Catch::Contains("efficiency"));
  o = toy_options(7200);
  o.budget.reserve_fraction = 1.0;
  CHECK_THROWS_WITH(plan(toy_workload(), o), Catch::Contains("reserve"));
}

TEST_CASE("with flash attention the planner does not try selective recomputation (nothing left to drop)") {
  workload w{.shape = round_shape, .samples = 100};
  planner_options o = fp8_options();
  o.recompute_modes = {recompute::none, recompute::selective, recompute::full};
  const auto selective = [](const plan_result& r) {
    return std::count_if(r.candidates.begin(), r.candidates.end(),
                         [](const plan_candidate& c) { return c.mode == recompute::selective; });
  };
  CHECK(selective(plan(w, o)) == 3);  // one per policy with eager attention
  w.shape->attention = attention_kernel::flash;
  const plan_result r = plan(w, o);
  CHECK(selective(r) == 0);
  CHECK(r.candidates.size() == 6);
}

TEST_CASE("selective recomputation asked for alone is planned: with flash attention as none, without a shape refused") {
  // Until 2026-12 the planner left selective out even when it was the one mode asked for (--recompute selective
  // under --window), and the plan had no candidate at all.
  workload w{.shape = round_shape, .samples = 100};
  w.shape->attention = attention_kernel::flash;
  planner_options o = fp8_options();
  o.recompute_modes = {recompute::selective};
  const plan_result sel = plan(w, o);
  o.recompute_modes = {recompute::none};
  const plan_result none = plan(w, o);
  REQUIRE(sel.candidates.size() == 3);  // one per policy
  REQUIRE(none.candidates.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    const plan_candidate& a = sel.candidates[i];
    const plan_candidate& b = none.candidates[i];
    CHECK(a.mode == recompute::selective);
    CHECK(a.policy_name == b.policy_name);
    // Nothing to drop or recompute: none's bytes and time, bit for bit.
    CHECK(a.accumulation.microbatch == b.accumulation.microbatch);
    CHECK(a.phase_peak_bytes == b.phase_peak_bytes);
    CHECK(a.seconds_per_sample == b.seconds_per_sample);
    CHECK(a.total_seconds == b.total_seconds);
  }
  // With eager attention selective is its own configuration: slower per sample than none (the core again).
  w.shape->attention = attention_kernel::eager;
  o.recompute_modes = {recompute::selective};
  const plan_result eager_sel = plan(w, o);
  o.recompute_modes = {recompute::none};
  const plan_result eager_none = plan(w, o);
  CHECK(find_candidate(eager_sel, "bf16-mixed").seconds_per_sample >
        find_candidate(eager_none, "bf16-mixed").seconds_per_sample);
  // Without a shape the step time knows only none and full: alone, selective is refused, naming why; beside
  // another mode it is left out.
  workload flat = toy_workload();
  o.recompute_modes = {recompute::selective};
  CHECK_THROWS_WITH(plan(flat, o), Catch::Contains("selective") && Catch::Contains("no transformer shape"));
  o.recompute_modes = {recompute::selective, recompute::full};
  const plan_result flat_r = plan(flat, o);
  CHECK(flat_r.candidates.size() == 3);
  CHECK(std::none_of(flat_r.candidates.begin(), flat_r.candidates.end(),
                     [](const plan_candidate& c) { return c.mode == recompute::selective; }));
  // With flash attention and full beside it (no none to stand for it) selective is planned too.
  w.shape->attention = attention_kernel::flash;
  o.recompute_modes = {recompute::selective, recompute::full};
  CHECK(plan(w, o).candidates.size() == 6);
}

TEST_CASE("an offloading configuration fits only when the host memory holds its states x 1.5") {
  // Optimizer offload on the toy: 1e8 parameters x (4 fp32 parameters + 8 states + 4 fp32 gradients) = 1.6 GB to the
  // CPU; with DeepSpeed's buffer factor 1.5 that is 2.4 GB of host memory. 2.4 GB exactly fits, one byte less does not.
  CHECK(host_memory_needed(1'600'000'000ULL, 1) == 2'400'000'000ULL);
  CHECK(host_memory_needed(800'000'000ULL, 2) == 2'400'000'000ULL);  // two devices' halves on one machine
  planner_options o = toy_options(7200);
  o.policies = {{"bf16-mixed", presets::bf16_mixed}};
  o.recompute_modes = {recompute::none};
  o.states = {.impl = optimizer_impl::fused, .offload_optimizer = true};
  o.host_memory_bytes = 2'400'000'000ULL;
  plan_result r = plan(toy_workload(), o);
  REQUIRE(r.chosen);
  CHECK(r.chosen->host_bytes == 1'600'000'000ULL);
  CHECK(r.chosen->host_needed_bytes == 2'400'000'000ULL);
  CHECK(r.chosen->host_shortfall_bytes == 0);
  o.host_memory_bytes = 2'399'999'999ULL;
  r = plan(toy_workload(), o);
  CHECK_FALSE(r.chosen);
  REQUIRE(r.candidates.size() == 1);
  CHECK(r.candidates[0].max_microbatch >= 1);        // the device holds it ...
  CHECK(r.candidates[0].host_shortfall_bytes == 1);  // ... the host does not, by one byte
  CHECK_FALSE(r.candidates[0].fits_memory());
  // Host memory unknown (0): nothing offloaded is accepted.
  o.host_memory_bytes = 0;
  r = plan(toy_workload(), o);
  CHECK_FALSE(r.chosen);
  CHECK(r.candidates[0].host_shortfall_bytes == 2'400'000'000ULL);
  // 1 GB of host memory: short by 1.4 GB, and the failure says so.
  o.host_memory_bytes = 1'000'000'000ULL;
  r = plan(toy_workload(), o);
  REQUIRE_FALSE(r.failures.empty());
  CHECK_THAT(r.failures.back(), Catch::Contains("host memory") &&
                                    Catch::Contains("1.60 GB to the CPU (x 1.5 = 2.40 GB of host memory needed, "
                                                    "1.00 GB available)") &&
                                    Catch::Contains("short by 1.40 GB"));
  // The remedy: bitsandbytes' paged 8-bit AdamW, (2 + 8/2048) x 1e8 = 200,390,625 bytes on the host, x 1.5 =
  // 300,585,938 <= 1 GB; the device keeps weights and gradients as before. No ZeRO-3 line: more devices on one
  // machine need the same host memory.
  REQUIRE_FALSE(r.remedies.empty());
  CHECK_THAT(r.remedies[0], Catch::Contains("8-bit AdamW (bitsandbytes, paged): fits"));
  for (const std::string& s : r.remedies) CHECK_THAT(s, !Catch::Contains("ZeRO stage 3"));
  // Without that lever (1 byte of host memory is too little even for it) the closest is listed once, host-bound.
  o.host_memory_bytes = 1;
  r = plan(toy_workload(), o);
  REQUIRE(r.remedies.size() == 1);
  CHECK_THAT(r.remedies[0], Catch::Contains("fits the device, but host memory is short by"));
}

TEST_CASE("an offload remedy that the host memory cannot hold is not offered as fitting") {
  // The remedy case above (9 GB per sample: 10.6 GB > 10 GB), where only optimizer offload fits the device (0.8 GB of
  // weights and gradients + 9 GB). With 2 GB of host memory the offload needs 2.4 GB: no single-device remedy fits,
  // and 8-bit AdamW, 0.0004 GB short (1.0004 + 9), is now the closest (the offload is 0.4 GB short on the host).
  workload w = toy_workload();
  w.activation_bytes_per_sample = 9'000'000'000ULL;
  planner_options o = toy_options(7200);
  o.host_memory_bytes = 2'000'000'000ULL;
  const plan_result r = plan(w, o);
  CHECK_FALSE(r.chosen);
  REQUIRE_FALSE(r.remedies.empty());
  for (const std::string& s : r.remedies)
    CHECK_THAT(s, !Catch::Contains("ZeRO-Offload, 1.60 GB of host memory): fits"));
  CHECK_THAT(r.remedies[0], Catch::StartsWith("8-bit AdamW (bitsandbytes): still short by"));
}

TEST_CASE("vanishing inputs are refused, and no verdict is printed from a time that is not finite") {
  planner_options o = toy_options(7200);
  o.efficiency = 1e-300;  // below min_efficiency (0.1% of the roofline bound)
  CHECK_THROWS_WITH(plan(toy_workload(), o), Catch::Contains("efficiency"));
  o = toy_options(0.5);  // under the 1 s minimum window
  CHECK_THROWS_WITH(plan(toy_workload(), o), Catch::Contains("1 s <= window <= 1e9 s"));
  // 6e11 FLOPs a sample at 50% of 40 TFLOPS is 0.03 s, so 0.01 samples/s is 0.03% of the bound: refused.
  o = toy_options(7200);
  o.measured_samples_per_second = 0.01;
  CHECK_THROWS_WITH(plan(toy_workload(), o), Catch::Contains("0.1% of the roofline bound"));
  // Hours past a million keep their unit; a time that is not finite is an error.
  CHECK(detail::hours_text(3.6e306) == "1e+303 h");
  CHECK(detail::hours_text(7200.0) == "2.00 h");
  CHECK_THROWS(detail::hours_text(std::numeric_limits<double>::infinity()));
}

TEST_CASE("a window shorter than one sample says so instead of 'about 0 of the N'") {
  // 1e8 tokens a sample: 6 x 1e8 x 1e8 = 6e16 FLOPs, 3000 s at 50% of 40 TFLOPS; 10 samples, a 1000 s window.
  workload w = toy_workload();
  w.tokens_per_sample = 100'000'000;
  w.samples = 10;
  const plan_result r = plan(w, toy_options(1000));
  REQUIRE_FALSE(r.chosen);
  REQUIRE_FALSE(r.remedies.empty());
  CHECK_THAT(r.remedies[0], Catch::Contains("not even one sample fits in the window"));
}

TEST_CASE("a measured time whose rate overflows names the time") {
  const kernel_cost cost =
      gemm_cost({.m = 8192, .n = 8192, .k = 8192, .a_element_bytes = 2, .b_element_bytes = 2, .c_element_bytes = 2});
  CHECK_THROWS_WITH(check_measurement(toy, fp16, cost, 1e-300), Catch::StartsWith("measured seconds is"));
}
