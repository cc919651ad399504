// The GPU trainer's per-phase timing, held against the device's roofline. Each step is cut into phases by CUDA
// events recorded on the training stream (forward, backward, unscale+check+clip, optimizer, scaler update); a
// phase whose fastest time implies more FLOP/s than the device can deliver is a timing error (an event pair that
// did not bracket the work), never a speed-up. Host-only, no CUDA: tests/cuda/trainer checks it without a GPU.
//
// Only the compute roof is applied. A phase's inputs were written by the phase before it and can still sit in
// L2 (50 MB on an H100), so the compulsory DRAM bytes of a phase are not a lower bound on its time; its FLOPs are.
// The FLOPs counted are the ones no implementation can skip: the GEMMs (2mnk each) in the policy's matmul
// format, one multiply per gradient element for the unscale, and the optimizer's arithmetic per element on
// applied steps only (a skipped step's optimizer kernels return at once, by design).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "safeamp/error.hpp"
#include "safeamp/format/format_names.hpp"
#include "safeamp/format/format_spec.hpp"
#include "safeamp/memory/roofline.hpp"

namespace safeamp::gpu_trainer {

enum class step_phase : std::uint8_t { forward, backward, unscale_check_clip, optimizer, scaler_update };
inline constexpr std::size_t phase_count = 5;

[[nodiscard]] constexpr std::string_view phase_name(step_phase p) noexcept {
  switch (p) {
    case step_phase::forward:
      return "forward";
    case step_phase::backward:
      return "backward";
    case step_phase::unscale_check_clip:
      return "unscale+check+clip";
    case step_phase::optimizer:
      return "optimizer";
    case step_phase::scaler_update:
      return "scaler update";
  }
  return "?";
}

/// One linear layer of the MLP: y (rows x out) = x (rows x in) W (in x out) + b.
struct linear_shape {
  std::int64_t in = 0;
  std::int64_t out = 0;
};

/// The work a phase certainly does in one step, and the units it runs on.
struct phase_work {
  double flops = 0.0;               // 0: nothing to check (O(1) work)
  format_spec compute = fp32;       // the peak that bounds it: the matmul format for GEMM phases, fp32 CUDA cores else
  bool only_applied_steps = false;  // the work is skipped on a step the scaler skips
};

/// FLOPs per element of the optimizer's update that every implementation performs (a multiply-add counts 2):
/// SGD with momentum v = mu v + g (2), w -= lr v (2); AdamW m = b1 m + (1-b1) g (3), v = b2 v + (1-b2) g^2 (4),
/// w -= lr (m_hat / (sqrt(v_hat) + eps) + wd w) with the bias corrections folded into scalars (at least 5:
/// a divide, an add of eps, a multiply-add of the decay, the step's multiply-add; the square root not counted).
inline constexpr double sgd_flops_per_element = 4.0;
inline constexpr double adamw_flops_per_element = 12.0;

/// The per-step work of each phase of the GPU trainer's MLP step (the order of gpu_mlp_trainer.cpp).
[[nodiscard]] inline std::array<phase_work, phase_count> mlp_phase_work(std::span<const linear_shape> layers,
                                                                        std::int64_t rows, format_spec matmul,
                                                                        std::uint64_t parameter_elements, bool adamw) {
  if (rows < 1) throw error("phase work rows", std::to_string(rows), ">= 1 rows per step");
  std::array<phase_work, phase_count> w{};
  const auto r = static_cast<double>(rows);
  double forward = 0.0, backward = 0.0;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const linear_shape& l = layers[i];
    if (l.in < 1 || l.out < 1) {
      throw error("layer shape", std::to_string(l.in) + " x " + std::to_string(l.out), "in >= 1 and out >= 1");
    }
    const double gemm = 2.0 * r * static_cast<double>(l.in) * static_cast<double>(l.out);
    forward += gemm;               // y = x W
    backward += gemm;              // dW = x^T dy
    if (i != 0) backward += gemm;  // dx = dy W^T (not for the first layer: nothing below it)
  }
  const auto n = static_cast<double>(parameter_elements);
  w[static_cast<std::size_t>(step_phase::forward)] = {.flops = forward, .compute = matmul};
  w[static_cast<std::size_t>(step_phase::backward)] = {.flops = backward, .compute = matmul};
  w[static_cast<std::size_t>(step_phase::unscale_check_clip)] = {.flops = n, .compute = fp32};
  w[static_cast<std::size_t>(step_phase::optimizer)] = {
      .flops = n * (adamw ? adamw_flops_per_element : sgd_flops_per_element),
      .compute = fp32,
      .only_applied_steps = true};
  w[static_cast<std::size_t>(step_phase::scaler_update)] = {.flops = 0.0, .compute = fp32};
  return w;
}

/// The verdict on one phase over a run.
struct phase_check {
  step_phase phase = step_phase::forward;
  std::int64_t steps_timed = 0;  // steps whose time for this phase was checked
  double fastest_seconds = 0.0;  // the fastest of them: the most suspicious
  double median_seconds = 0.0;
  double flops = 0.0;    // per step
  bool checked = false;  // false: nothing to check (O(1) work, or no step did the work)
  bool plausible = true;
  double fraction_of_peak = 0.0;  // flops / fastest / peak of the compute units
  std::string note{};             // why unchecked, or the diagnosis when implausible
};

/// Checks every phase: `seconds` holds steps x phase_count times (step-major, as the events were recorded),
/// `applied[s]` whether step s was applied (not skipped). Times come from CUDA events, so a phase time of 0 with
/// work in it means the events did not bracket the work.
[[nodiscard]] inline std::vector<phase_check> check_phase_times(const device_spec& d,
                                                                const std::array<phase_work, phase_count>& work,
                                                                std::span<const double> seconds,
                                                                const std::vector<bool>& applied,
                                                                double tolerance = default_plausibility_tolerance) {
  if (seconds.size() != applied.size() * phase_count) {
    throw error("phase times", std::to_string(seconds.size()) + " values",
                std::to_string(applied.size() * phase_count) + " (steps x " + std::to_string(phase_count) + " phases)");
  }
  std::vector<phase_check> out;
  for (std::size_t p = 0; p < phase_count; ++p) {
    phase_check c;
    c.phase = static_cast<step_phase>(p);
    c.flops = work[p].flops;
    std::vector<double> times;
    for (std::size_t s = 0; s < applied.size(); ++s) {
      if (work[p].only_applied_steps && !applied[s]) continue;
      const double t = seconds[s * phase_count + p];
      if (!(t >= 0.0)) {
        throw error("phase time",
                    std::to_string(t) + " s (" + std::string(phase_name(c.phase)) + ", step " + std::to_string(s) + ")",
                    "a time >= 0 from a CUDA event pair");
      }
      times.push_back(t);
    }
    c.steps_timed = static_cast<std::int64_t>(times.size());
    if (!times.empty()) {
      std::sort(times.begin(), times.end());
      c.fastest_seconds = times.front();
      const std::size_t m = times.size();
      c.median_seconds = m % 2 == 1 ? times[m / 2] : 0.5 * (times[m / 2 - 1] + times[m / 2]);
    }
    if (!(c.flops > 0.0)) {
      c.note = "not checked: O(1) work, no FLOP bound";
    } else if (times.empty()) {
      c.note = "not checked: every step was skipped, so the phase did no work";
    } else {
      c.checked = true;
      const double peak = peak_flops_for(d, work[p].compute);
      if (!(peak > 0.0)) {
        throw error("compute format", format_name(work[p].compute) + " on " + std::string(d.name),
                    "a format the device has math units for");
      }
      if (c.fastest_seconds == 0.0) {
        c.plausible = false;
        c.note = "impossible result: 0 s for " + std::to_string(c.flops) +
                 " FLOP; the phase's event pair did not bracket its work";
      } else {
        const plausibility v = check_throughput(
            {.measured_flops = c.flops / c.fastest_seconds, .bound_flops = peak, .tolerance = tolerance});
        c.fraction_of_peak = v.ratio;
        c.plausible = v.plausible;
        c.note = v.diagnosis;
      }
    }
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace safeamp::gpu_trainer
