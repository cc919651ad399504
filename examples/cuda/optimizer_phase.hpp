// The optimizer phase of one GPU trainer step, written once over a backend: per parameter, the optimizer
// step (on the master copy when one is kept) and the write-back cast of the updated weights into the
// parameter format. Every write of the phase is handed the scaler's found_inf flag, so that a skipped step
// writes nothing: not the weights, not the master copy, not the optimizer state. The GPU backend launches
// the predicated kernels; tests/cuda/trainer runs the phase on a host backend to check exactly that.
#pragma once

#include <cstdint>
#include <span>

namespace safeamp::gpu_trainer {

/// One parameter's buffers (device pointers on the GPU). second is null for SGD, master without master weights.
struct parameter_buffers {
  float* value = nullptr;   // the parameter in its format (what the forward reads)
  float* grad = nullptr;    // its unscaled, clipped gradient
  float* first = nullptr;   // momentum (SGD) or first moment (AdamW)
  float* second = nullptr;  // AdamW's second moment
  float* master = nullptr;  // fp32 master copy
  std::uint64_t elements = 0;
};

struct optimizer_phase_options {
  bool adamw = false;
  bool master_weights = false;
  bool param_is_fp32 = true;  // without master weights an fp32 parameter needs no write-back cast
};

/// Backend: sgd(weights, grad, velocity, n, skip_if), adamw(weights, grad, m, v, n, skip_if),
/// write_back(from, to, n, skip_if): each does nothing when *skip_if != 0 at the point it runs.
template <class Backend>
void optimizer_phase(Backend& backend, std::span<const parameter_buffers> params, const optimizer_phase_options& o,
                     const std::int32_t* skip_if) {
  for (const parameter_buffers& p : params) {
    float* w = o.master_weights ? p.master : p.value;
    if (o.adamw) {
      backend.adamw(w, p.grad, p.first, p.second, p.elements, skip_if);
    } else {
      backend.sgd(w, p.grad, p.first, p.elements, skip_if);
    }
    if (o.master_weights || !o.param_is_fp32) backend.write_back(w, p.value, p.elements, skip_if);
  }
}

}  // namespace safeamp::gpu_trainer
