// Layer kernels of the GPU trainer example (built with the example, not into the installed safeamp::cuda),
// rounded with the core routine as the simulator's layers are: bias + cast, GELU/ReLU, softmax cross-entropy
// scaled by the device loss scale, column sums, and per-step records kept on the device (no host waits).
// Asynchronous; launch failures throw cuda_error.
#pragma once

#include <cstdint>
#include <span>

#include "safeamp/cuda/amp_ops.hpp"
#include "safeamp/format/format_spec.hpp"
#include "safeamp/format/philox.hpp"
#include "safeamp/format/round_options.hpp"

namespace safeamp::cuda {

enum class activation_fn : std::uint8_t { gelu, relu };

/// One cast: the target format, how it rounds and (for stochastic rounding) the Philox key of element 0.
struct cast_spec {
  format_spec format = fp32;
  round_options rounding{};
  philox_key key{};
};

/// What a step leaves on the device for the host to read later (one slot per step).
/// (The norms, the flag and whether the step was applied are in the scaler's step_report, copied per step.)
struct device_step_record {
  double loss = 0.0;   // the (weighted) mean loss of the batch
  float scale = 0.0f;  // loss scale the backward used (read from the device scaler)
};

/// y(r, c) = round(out, y(r, c) + bias(c)) for a row-major (rows, cols) y: a linear layer's bias added in
/// fp32 to the fp32 GEMM result, then one cast into the layer's output format. bias may be nullptr (no bias).
void add_bias_and_cast(float* y, const float* bias, std::int64_t rows, std::int64_t cols, const cast_spec& out,
                       void* stream);

/// y = round(op, act(x)), then y = round(store, y) when store.format differs from op.format (the two casts
/// of the simulator's activation layer). GELU is the tanh approximation with the simulator's constants and
/// operation order (no fused multiply-adds); only tanhf may differ from the host's by an ulp or two.
void activation_forward(activation_fn fn, const float* x, float* y, std::uint64_t n, const cast_spec& op,
                        const cast_spec& store, void* stream);

/// dx = round(op, dy * act'(x)), then dx = round(gradient, dx) when the formats differ.
void activation_backward(activation_fn fn, const float* x, const float* dy, float* dx, std::uint64_t n,
                         const cast_spec& op, const cast_spec& gradient, void* stream);

/// Softmax cross-entropy of (rows, classes) row-major logits with targets in [0, classes), every operation
/// rounded to loss_format (nearest) as the simulator's cross_entropy. One block. Writes:
///   row_loss[r]      per-row loss (NaN for a row with a non-finite logit),
///   predicted[r]     argmax (-1 for a non-finite row), when not nullptr,
///   record->loss     = f64(round(loss, sum(row_loss) / rows)) * loss_factor, and record->scale,
///   dlogits          = round(loss, coef * round(loss, softmax - one_hot)), coef = f32(scale * loss_factor / rows),
/// where scale is state->state.scale read on the device (1 when state is nullptr). dlogits and record may
/// be nullptr (evaluation). Out-of-range targets give a NaN row.
void softmax_cross_entropy(const float* logits, const std::int32_t* targets, std::int64_t rows, std::int64_t classes,
                           format_spec loss_format, double loss_factor, const scaler_block* state, float* row_loss,
                           std::int32_t* predicted, float* dlogits, device_step_record* record, void* stream);

/// out(c) = sum over rows of in(r, c), left to right, each addition rounded to `sum_format` (nearest).
void column_sums(const float* in, std::int64_t rows, std::int64_t cols, format_spec sum_format, float* out,
                 void* stream);

/// *p = value (fault injection: an inf or NaN gradient element), asynchronously.
void write_value(float* p, float value, void* stream);

}  // namespace safeamp::cuda
