// The GPU trainer's per-phase roofline check (examples/cuda/phase_timing.hpp), without a GPU: the FLOPs each
// phase of the MLP step certainly performs, worked by hand below, and the verdicts on made-up event times
// (an impossible phase is flagged, a skipped step's empty optimizer phase is not held against the roofline).
#include "phase_timing.hpp"

#include <catch2/catch.hpp>
#include <vector>

#include "safeamp/memory/devices.hpp"

using namespace safeamp;
using namespace safeamp::gpu_trainer;

namespace {

constexpr std::size_t at(step_phase p) { return static_cast<std::size_t>(p); }

// Two layers, 16 -> 32 -> 4, 8 rows per step: 16*32 + 32 + 32*4 + 4 = 676 parameter elements.
const std::vector<linear_shape> two_layers{{.in = 16, .out = 32}, {.in = 32, .out = 4}};
constexpr std::uint64_t elements = 676;

// steps x phases times, every phase taking `t` except the given overrides.
std::vector<double> uniform(std::size_t steps, double t) { return std::vector<double>(steps * phase_count, t); }

}  // namespace

TEST_CASE("phase work of the MLP step, by hand", "[cuda][trainer][timing]") {
  const auto w = mlp_phase_work(two_layers, 8, fp16, elements, /*adamw=*/true);
  // forward: x W for each layer, 2 * rows * in * out: 2*8*16*32 = 8192, 2*8*32*4 = 2048.
  CHECK(w[at(step_phase::forward)].flops == 10240.0);
  CHECK(w[at(step_phase::forward)].compute == fp16);
  // backward: dW for both (10240) and dx for the second layer only (2048); the first has nothing below it.
  CHECK(w[at(step_phase::backward)].flops == 12288.0);
  CHECK(w[at(step_phase::backward)].compute == fp16);
  // unscale: one multiply per gradient element, on the fp32 CUDA cores.
  CHECK(w[at(step_phase::unscale_check_clip)].flops == 676.0);
  CHECK(w[at(step_phase::unscale_check_clip)].compute == fp32);
  // AdamW: 3 + 4 + 5 = 12 FLOPs per element (see the header), only on applied steps.
  CHECK(w[at(step_phase::optimizer)].flops == 676.0 * 12.0);
  CHECK(w[at(step_phase::optimizer)].only_applied_steps);
  CHECK_FALSE(w[at(step_phase::forward)].only_applied_steps);
  CHECK(w[at(step_phase::scaler_update)].flops == 0.0);
  // SGD with momentum: 4 per element.
  CHECK(mlp_phase_work(two_layers, 8, bf16, elements, false)[at(step_phase::optimizer)].flops == 676.0 * 4.0);
  CHECK_THROWS_AS(mlp_phase_work(two_layers, 0, fp16, elements, true), safeamp::error);
  CHECK_THROWS_AS(mlp_phase_work(std::vector<linear_shape>{{.in = 0, .out = 4}}, 8, fp16, elements, true),
                  safeamp::error);
}

TEST_CASE("phase times against the roofline", "[cuda][trainer][timing]") {
  const device_spec& h100 = find_device("h100");
  const double fp16_peak = h100.peak_fp16_flops;  // the datasheet's dense FP16 figure, FP32 accumulate
  const double fp32_peak = h100.peak_fp32_flops;
  const auto w = mlp_phase_work(two_layers, 8, fp16, elements, true);
  const double fwd = w[at(step_phase::forward)].flops;
  const double opt = w[at(step_phase::optimizer)].flops;

  SECTION("a forward at half the peak is plausible and reported as such; the fastest step is the one checked") {
    std::vector<double> t = uniform(3, 1e-3);
    t[0 * phase_count + at(step_phase::forward)] = fwd / (0.25 * fp16_peak);
    t[1 * phase_count + at(step_phase::forward)] = fwd / (0.5 * fp16_peak);  // the fastest
    t[2 * phase_count + at(step_phase::forward)] = fwd / (0.4 * fp16_peak);
    const auto c = check_phase_times(h100, w, t, std::vector<bool>{true, true, true});
    REQUIRE(c.size() == phase_count);
    const phase_check& f = c[at(step_phase::forward)];
    CHECK(f.checked);
    CHECK(f.plausible);
    CHECK(f.steps_timed == 3);
    CHECK(f.fastest_seconds == fwd / (0.5 * fp16_peak));
    CHECK(f.median_seconds == fwd / (0.4 * fp16_peak));
    CHECK(f.fraction_of_peak == Approx(0.5).epsilon(1e-12));
    CHECK(f.note.empty());
  }
  SECTION("one step's forward at 1.5x the peak is a timing error, whatever the others did") {
    std::vector<double> t = uniform(3, 1e-3);
    t[2 * phase_count + at(step_phase::forward)] = fwd / (1.5 * fp16_peak);
    const auto c = check_phase_times(h100, w, t, std::vector<bool>{true, true, true});
    CHECK_FALSE(c[at(step_phase::forward)].plausible);
    CHECK(c[at(step_phase::forward)].note.find("impossible") != std::string::npos);
    CHECK(c[at(step_phase::backward)].plausible);
    // Within the clock tolerance (5 % over the datasheet peak): still plausible.
    t[2 * phase_count + at(step_phase::forward)] = fwd / (1.05 * fp16_peak);
    CHECK(check_phase_times(h100, w, t, std::vector<bool>{true, true, true})[at(step_phase::forward)].plausible);
  }
  SECTION("a phase time of 0 with work in it is a timing error") {
    std::vector<double> t = uniform(2, 1e-3);
    t[1 * phase_count + at(step_phase::backward)] = 0.0;
    const auto c = check_phase_times(h100, w, t, std::vector<bool>{true, true});
    CHECK_FALSE(c[at(step_phase::backward)].plausible);
    CHECK(c[at(step_phase::forward)].plausible);
  }
  SECTION("a skipped step's optimizer phase does no work and is not held against the roofline") {
    std::vector<double> t = uniform(3, 1e-3);
    // Step 1 was skipped: its optimizer kernels returned at once. At the full AdamW count this time would be
    // 100x the fp32 peak.
    t[1 * phase_count + at(step_phase::optimizer)] = opt / (100.0 * fp32_peak);
    const auto c = check_phase_times(h100, w, t, std::vector<bool>{true, false, true});
    CHECK(c[at(step_phase::optimizer)].plausible);
    CHECK(c[at(step_phase::optimizer)].steps_timed == 2);
    CHECK(c[at(step_phase::optimizer)].fastest_seconds == 1e-3);
    // ... but the same time on an applied step is impossible.
    const auto applied = check_phase_times(h100, w, t, std::vector<bool>{true, true, true});
    CHECK_FALSE(applied[at(step_phase::optimizer)].plausible);
    // The other phases count every step, skipped or not.
    CHECK(c[at(step_phase::forward)].steps_timed == 3);
  }
  SECTION("phases with nothing to check say why") {
    const auto c = check_phase_times(h100, w, uniform(2, 1e-3), std::vector<bool>{false, false});
    CHECK_FALSE(c[at(step_phase::optimizer)].checked);
    CHECK(c[at(step_phase::optimizer)].plausible);
    CHECK(c[at(step_phase::optimizer)].note.find("skipped") != std::string::npos);
    CHECK_FALSE(c[at(step_phase::scaler_update)].checked);
    CHECK(c[at(step_phase::scaler_update)].note.find("O(1)") != std::string::npos);
  }
  SECTION("bad input") {
    CHECK_THROWS_AS(check_phase_times(h100, w, uniform(2, 1e-3), std::vector<bool>{true}), safeamp::error);
    std::vector<double> t = uniform(1, 1e-3);
    t[0] = -1.0;
    CHECK_THROWS_AS(check_phase_times(h100, w, t, std::vector<bool>{true}), safeamp::error);
    // fp8 GEMMs on a device without FP8 units: refused, not checked against a zero peak.
    const auto fp8_work = mlp_phase_work(two_layers, 8, fp8_e4m3, elements, true);
    CHECK_THROWS_AS(check_phase_times(find_device("a100"), fp8_work, uniform(1, 1e-3), std::vector<bool>{true}),
                    safeamp::error);
  }
}
