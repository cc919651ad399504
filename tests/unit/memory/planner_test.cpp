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
  // sample), then tf32, then fp32: one remedy per set of changes, the fastest policy's.
  REQUIRE(r.remedies.size() == 1);
  CHECK_THAT(r.remedies[0],
             Catch::StartsWith("with bf16-mixed (quality unverified), recompute full: offload the optimizer "
                               "to the CPU (ZeRO-Offload, 1.60 GB of host memory): fits, microbatch 1") &&
                 Catch::Contains("+0.081 s per optimizer step") && Catch::Contains("40 ms/sample"));
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
  // bf16 at 25 samples/s = 25 x 6e11 = 15 TFLOP/s of 40: efficiency 0.375.
  o.measured_samples_per_second = 25.0;
  const plan_result r = plan(toy_workload(), o);
  CHECK(r.efficiency == Approx(0.375).epsilon(1e-12));
  // 100 samples/s would be 60 TFLOP/s on a 40 TFLOP/s device: a timing bug, not a speedup.
  o.measured_samples_per_second = 100.0;
  CHECK_THROWS_WITH(plan(toy_workload(), o), Catch::Contains("impossible"));
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
