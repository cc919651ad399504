// The scaler path of a training step on the device, with no host synchronisation: kernels that act on a
// scaler_block (include/safeamp/scaling/scaler_block.hpp) kept in device memory: a multi-tensor unscale that
// raises its found_inf flag, the global norm and clip, the optimizer steps predicated on the flag, and a
// single-thread kernel that runs the core advance_step (the transition, the report and the counters). These
// are the passes of device_memory (device_scaler.hpp); use them directly only to build another scaler path.
// All launchers are asynchronous on the given stream (a cudaStream_t as void*) and throw cuda_error only for
// launch failures.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "safeamp/cuda/dtype.hpp"
#include "safeamp/scaling/scaler_block.hpp"
#include "safeamp/scaling/scaler_config.hpp"

namespace safeamp::cuda {

/// The scaler's memory on the device: the core scaler_block (state, this step's flags and norms, the last
/// report, the counters). The old name of the sync-free API, kept as an alias of the one block type.
using device_amp_state = scaler_block;

/// One gradient buffer of the type autograd left it in: a device pointer, the element count and the element
/// type, f32, f16 or bf16 (a libtorch tensor's data_ptr(), numel() and scalar type). The scaler's passes read
/// each element as a float and store their result rounded to the buffer's type (nearest even; a result that
/// overflows the type becomes inf and is caught by the check). fp8 gradients are refused (safeamp::error).
struct gradient_span {
  void* data = nullptr;
  std::uint64_t elements = 0;
  device_dtype type = device_dtype::f32;
};

/// One fp32 buffer (device pointer, element count): weights, optimizer state, fp32 gradients.
struct tensor_span {
  float* data = nullptr;
  std::uint64_t elements = 0;
  /// An fp32 buffer is an f32 gradient buffer.
  constexpr operator gradient_span() const noexcept {  // NOLINT(google-explicit-constructor): an fp32 gradient
    return gradient_span{.data = data, .elements = elements, .type = device_dtype::f32};
  }
};

/// Gradient buffers that one multi-tensor launch takes; longer lists are cut into consecutive groups
/// (tensor_groups.hpp), so a list of any length is one call.
inline constexpr std::size_t max_tensors_per_launch = 64;

/// Writes initial_block(cfg) into the device block (asynchronously).
void amp_reset(scaler_block* state, const scaler_config& cfg, void* stream);

/// Writes `value` into the device block (asynchronously; a restore).
void write_block(scaler_block* state, const scaler_block& value, void* stream);

/// Multiplies every element of every buffer by inverse_scale(state->state.scale) in place and raises
/// state->found_inf and state->gradient_inf when any result (as stored: rounded to the buffer's type) is inf or
/// NaN (the core unscale_and_check semantics). One launch per group of up to max_tensors_per_launch buffers.
/// Throws safeamp::error for an fp8 buffer or a null pointer with elements, before anything is enqueued.
void multi_tensor_unscale(std::span<const gradient_span> buffers, scaler_block* state, void* stream);

/// found_inf |= (*flag != 0), both in device memory (e.g. a flag all-reduced with MAX over ranks).
void record_found_inf(scaler_block* state, const std::int32_t* flag, void* stream);

/// data[i] *= state->state.scale (scaling the loss gradient before backward).
void scale_by_loss_scale(tensor_span data, const scaler_block* state, void* stream);

/// The most partial sums the norm keeps per buffer: a buffer of n elements is summed in min(1024, ceil(n / 4096))
/// parts, a partition fixed by n alone (not by the GPU), one partial sum each.
inline constexpr std::uint64_t norm_scratch_per_buffer = 1024;
/// Doubles of device scratch global_norm_and_clip needs, whatever the number of buffers: the partial sums of
/// one launch group and the running sum (65537 doubles, 512 KiB and 8 bytes).
inline constexpr std::uint64_t norm_scratch_doubles = max_tensors_per_launch * norm_scratch_per_buffer + 1;

/// The global L2 norm of the buffers (squares of the stored values summed in double: each buffer in parts fixed by
/// its element count, each part's 256 lane sums meeting in a fixed tree, the part sums in a fixed tree, then the
/// buffers' sums added in buffer order, group after group) into state->norm_before. The bits are the same on every
/// run, on every GPU and for every cut of the list into groups: only the number of blocks comes from the device
/// (its SM count), and it changes which block sums a part, never the part's sum. When max_norm > 0 (clipping on): a
/// finite norm above it multiplies every element by f32(max_norm / norm) (the result rounded to the buffer's type)
/// and norm_after = norm * f32(max_norm / norm) (the core clip_grad_norm), and a non-finite norm raises found_inf
/// and norm_non_finite (as loss_scaler::clip_grad_norm records an overflow); otherwise norm_after = norm.
/// scratch: norm_scratch_doubles doubles of device memory. Any number of buffers. Throws safeamp::error for an
/// fp8 buffer or a null pointer with elements, before anything is enqueued.
void global_norm_and_clip(std::span<const gradient_span> buffers, double max_norm, double* scratch, scaler_block* state,
                          void* stream);

/// One thread: advance_step(cfg, *state, stepped) (transition, report in state->last, counters, floor check,
/// flags cleared).
void advance_scaler(const scaler_config& cfg, scaler_block* state, bool stepped, void* stream);

/// advance_scaler(cfg, state, true): the update of a step whose optimizer was enqueued.
void scale_update(const scaler_config& cfg, scaler_block* state, void* stream);

/// *report = state->last (one slot per step of a run, read after the run).
void copy_last_report(const scaler_block* state, step_report* report, void* stream);

struct sgd_options {
  float learning_rate = 0.01f;
  float momentum = 0.9f;
};

/// SGD with momentum as the simulator computes it (sim/src/optimizer.cpp), each operation rounded to fp32
/// separately (no contraction into fma):  v = momentum * v + g;  w = w + (-learning_rate * v).
/// Skipped on the device when state->found_inf is raised (weights and velocity unchanged).
void sgd_momentum_step(tensor_span weights, const float* gradients, float* velocity, const sgd_options& options,
                       const scaler_block* state, void* stream);
/// The same with the gradient in its own type (f32, f16 or bf16: read as float): fp32 master weights updated
/// from a 16-bit model's gradients. gradients.elements must equal weights.elements (safeamp::error).
void sgd_momentum_step(tensor_span weights, gradient_span gradients, float* velocity, const sgd_options& options,
                       const scaler_block* state, void* stream);

struct adamw_options {
  float learning_rate = 1e-3f;
  double beta1 = 0.9;
  double beta2 = 0.999;
  float epsilon = 1e-8f;
  float weight_decay = 0.0f;  // decoupled
};

/// AdamW as the simulator computes it, with t = applied updates so far + 1 (state->stats.applied_steps + 1:
/// skipped steps do not advance the bias correction), c1 = f32(1 / (1 - beta1^t)),
/// c2 = f32(1 / (1 - beta2^t)) in double (CUDA's pow: equal to the CPU's except, rarely, in the last bit):
///   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g g;  w = w + (-lr ((m c1) / (sqrt(v c2) + eps) + wd w)).
/// Skipped on the device when state->found_inf is raised. Call before scale_update of the same step.
void adamw_step(tensor_span weights, const float* gradients, float* first_moment, float* second_moment,
                const adamw_options& options, const scaler_block* state, void* stream);
/// The same with the gradient in its own type (f32, f16 or bf16: read as float); elements must match.
void adamw_step(tensor_span weights, gradient_span gradients, float* first_moment, float* second_moment,
                const adamw_options& options, const scaler_block* state, void* stream);

}  // namespace safeamp::cuda
