// The scaler path of a training step on the device, with no host synchronisation: a multi-tensor
// unscale-in-place that raises a device-side found_inf flag, the optimizer step predicated on that flag,
// and a single-thread kernel that runs the core update_scale transition. All launchers are asynchronous
// on the given stream (a cudaStream_t as void*) and throw cuda_error only for launch failures.
#pragma once

#include <cstdint>
#include <span>

#include "safeamp/scaling/scaler_config.hpp"

namespace safeamp::cuda {

/// Scaler state kept in device memory (one per scaler). Plain data: copied to pinned memory for telemetry.
struct device_amp_state {
  scaler_state scaler{};            // the core state, advanced by update_scale on the device
  std::int32_t found_inf = 0;       // raised by the unscale kernels, cleared by the update kernel
  std::int32_t last_found_inf = 0;  // the previous step's flag (what telemetry reports as "skipped")
  std::int64_t steps = 0;           // updates run
  std::int64_t skipped_steps = 0;   // updates that found an overflow (the optimizer did not run)
};

/// One gradient buffer (device pointer, element count).
struct tensor_span {
  float* data = nullptr;
  std::uint64_t elements = 0;
};

/// Writes {initial_state(cfg), no flags, zero counters} into the device state (asynchronously).
void amp_reset(device_amp_state* state, const scaler_config& cfg, void* stream);

/// Multiplies every element of every buffer by inverse_scale(state->scaler.scale) in place and raises
/// state->found_inf when any result is inf or NaN (the core unscale_and_check semantics). One launch per
/// group of up to 64 buffers.
void multi_tensor_unscale(std::span<const tensor_span> buffers, device_amp_state* state, void* stream);

/// data[i] *= state->scaler.scale (scaling the loss gradient before backward).
void scale_by_loss_scale(tensor_span data, const device_amp_state* state, void* stream);

/// One thread: found = found_inf != 0; scaler = update_scale(cfg, scaler, found); counters; clears the flag.
void scale_update(const scaler_config& cfg, device_amp_state* state, void* stream);

struct sgd_options {
  float learning_rate = 0.01f;
  float momentum = 0.9f;
};

/// SGD with momentum as the simulator computes it (sim/src/optimizer.cpp), each operation rounded to fp32
/// separately (no contraction into fma):  v = momentum * v + g;  w = w + (-learning_rate * v).
/// Skipped on the device when state->found_inf is raised (weights and velocity unchanged).
void sgd_momentum_step(tensor_span weights, const float* gradients, float* velocity, const sgd_options& options,
                       const device_amp_state* state, void* stream);

struct adamw_options {
  float learning_rate = 1e-3f;
  double beta1 = 0.9;
  double beta2 = 0.999;
  float epsilon = 1e-8f;
  float weight_decay = 0.0f;  // decoupled
};

/// AdamW as the simulator computes it, with t = applied updates so far + 1 (state->steps -
/// state->skipped_steps + 1: skipped steps do not advance the bias correction), c1 = f32(1 / (1 - beta1^t)),
/// c2 = f32(1 / (1 - beta2^t)) in double (CUDA's pow: equal to the CPU's except, rarely, in the last bit):
///   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g g;  w = w + (-lr ((m c1) / (sqrt(v c2) + eps) + wd w)).
/// Skipped on the device when state->found_inf is raised. Call before scale_update of the same step.
void adamw_step(tensor_span weights, const float* gradients, float* first_moment, float* second_moment,
                const adamw_options& options, const device_amp_state* state, void* stream);

/// Test/benchmark helper: a kernel that keeps the stream busy for about `nanoseconds`, so a test can show
/// that enqueuing the scaler path returns while the device is still working (no host synchronisation).
void launch_busy_wait(std::uint64_t nanoseconds, void* stream);

}  // namespace safeamp::cuda
