// A thin adapter between a CUDA training loop that owns its tensors (a libtorch loop, or hand-written kernels)
// and safeamp's device loss scaler. The loop hands over its parameters as raw device pointers, one
// (value, gradient, element count, type) per tensor, which is what libtorch gives for each parameter p:
//     p.data_ptr(), p.grad().data_ptr(), p.numel(), p.scalar_type() (kFloat, kHalf or kBFloat16).
// Per step the loop runs its backward on (loss * scale), reading the scale on the device from loss_scale(),
// and calls step(): unscale-and-check of every gradient, the optional reduce hook (flag consensus across
// ranks), the global norm and clip, AdamW on fp32 master weights predicated on the device flag, the
// write-back into 16-bit parameters (predicated too), and the scale update. Nothing in step() waits for the
// GPU; stats(), last_report() and save_checkpoint() are the lazy reads (one wait each, outside the step).
// Each phase is an NVTX range: "unscale+check", "reduce", "clip", "optimizer", "scaler update".
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "safeamp/cuda/amp_ops.hpp"
#include "safeamp/cuda/device_scaler.hpp"
#include "safeamp/cuda/dtype.hpp"
#include "safeamp/cuda/memory_probe.hpp"
#include "safeamp/scaling/scaler_config.hpp"
#include "safeamp/scaling/scaler_presets.hpp"

namespace safeamp::cuda_adapter {

/// One parameter of the loop's model, in device memory the loop owns.
struct parameter_view {
  std::string name;                                   // for error messages
  void* value = nullptr;                              // what the forward reads, in `type`
  void* grad = nullptr;                               // its gradient, in `type` (autograd keeps the parameter's type)
  std::uint64_t elements = 0;                         // numel(), >= 1
  cuda::device_dtype type = cuda::device_dtype::f32;  // f32, f16 or bf16
};

struct adapter_options {
  scaler_config scaler = scaler_presets::pytorch;  // validated by the scaler (safeamp::error)
  double max_grad_norm = 1.0;                      // > 0: clip to it; 0: no clip
  cuda::adamw_options adamw{};
  void* stream = nullptr;  // the stream the loop's backward runs on (a cudaStream_t; nullptr = the default one)
  /// Called between the unscale and the clip, under the "reduce" range: where a data-parallel loop makes the
  /// ranks agree on the flag (e.g. issue 17's agree_found_inf: ncclAllReduce MAX into record_found_inf) and
  /// reduces whatever gradients its backward did not. Must only enqueue work on `stream`.
  std::function<void(cuda::device_loss_scaler&, std::span<const cuda::gradient_span>)> reduce{};
};

/// Refuses, before anything touches the device, parameters the adapter cannot take: safeamp::error naming
/// the parameter (by name and position), the field, the value and what is accepted. Types must be f32, f16
/// or bf16, pointers non-null, value and gradient distinct, elements >= 1, names unique.
void check_parameters(std::span<const parameter_view> params);

class amp_adapter {
 public:
  /// Checks the parameters and the options, builds the scaler (its config validated once), allocates the
  /// AdamW moments and, for 16-bit parameters, fp32 master copies initialised from the parameters' current
  /// values (read once, here: construction is outside the training loop).
  amp_adapter(std::vector<parameter_view> params, adapter_options options);

  /// The loss scale in device memory: the backward scales the loss gradient by *loss_scale() on the device.
  [[nodiscard]] const float* loss_scale() { return scaler_.scale_in_memory(); }
  /// The step's found_inf flag in device memory (raised by the unscale, the reduce hook or the clip).
  [[nodiscard]] const std::int32_t* found_inf_flag() { return scaler_.found_inf_flag(); }

  /// The scaler path of one step after the backward: enqueues only (see the file comment).
  void step();

  // ---- lazy reads (each waits for the stream once; never inside the step) -----------------------------------
  [[nodiscard]] scaler_stats stats() { return scaler_.stats(); }
  [[nodiscard]] step_report last_report() { return scaler_.last_report(); }
  [[nodiscard]] std::string save_checkpoint() { return scaler_.save_json(); }
  void load_checkpoint(std::string_view json) { scaler_.load_json(json); }

  [[nodiscard]] cuda::device_loss_scaler& scaler() noexcept { return scaler_; }
  [[nodiscard]] std::span<const cuda::gradient_span> gradients() const noexcept { return grads_; }
  /// The fp32 weights AdamW updates for parameter i: its master copy (16-bit) or the parameter itself (f32).
  [[nodiscard]] const float* master_weights(std::size_t i) const noexcept { return state_[i].weights; }

 private:
  struct parameter_state {
    cuda::device_buffer master;  // fp32 copy of a 16-bit parameter (empty for f32)
    cuda::device_buffer first, second;
    float* weights = nullptr;  // master or the f32 parameter
  };
  std::vector<parameter_view> params_;
  adapter_options options_;
  cuda::device_loss_scaler scaler_;
  std::vector<cuda::gradient_span> grads_;
  std::vector<parameter_state> state_;
};

}  // namespace safeamp::cuda_adapter
