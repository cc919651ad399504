// FP8 delayed scaling on the device: a kernel folding max|x| of a tensor into a delayed_scaling_state (the
// core amax_fold; NaN sticky), and a one-thread kernel running the core delayed_scaling_step (history ring
// and margin) so the scale for the next step never leaves the device. The state's scale_inv is what an fp8
// GEMM takes as its per-tensor scale pointer (gemm_operands::a_scale / b_scale). amax_reference is the amax
// kernel's CPU reference; the update's reference is the core delayed_scaling class. Asynchronous launchers.
#pragma once

#include <cstdint>
#include <span>

#include "safeamp/scaling/delayed_scaling_step.hpp"

namespace safeamp::cuda {

/// CPU reference of launch_amax: the fold of every element, starting from `acc` (the bits already in the state).
[[nodiscard]] inline std::uint32_t amax_reference(std::span<const float> x, std::uint32_t acc = 0) noexcept {
  for (const float v : x) acc = amax_fold(acc, v);
  return acc;
}

/// state->amax_bits = amax_fold over x[0, n) and the bits already there (atomicMax per block): call once per
/// use of the tensor in the step; n = 0 does nothing.
void launch_amax(const float* x, std::uint64_t n, delayed_scaling_state* state, void* stream);

/// One thread: delayed_scaling_step(params, *state, window), window = history_length - 1 device floats.
void delayed_scaling_update(const delayed_scaling_params& params, delayed_scaling_state* state, float* window,
                            void* stream);

/// Writes a fresh state (scale 1, empty window and counters) into device memory.
void delayed_scaling_reset(delayed_scaling_state* state, void* stream);

}  // namespace safeamp::cuda
