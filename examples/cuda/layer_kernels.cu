// Layer kernels of the GPU trainer example (see layer_kernels.hpp; not part of safeamp::cuda): the simulator's
// operations in its order, with
// __fmul_rn/__fadd_rn (never contracted into fma) and the core round_to for every cast.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "layer_kernels.hpp"
#include "safeamp/cuda/status.hpp"
#include "safeamp/error.hpp"
#include "safeamp/format/round.hpp"

#define SAFEAMP_LAYER_CHECK(call)                                                                                      \
  ::safeamp::cuda::check_status(::safeamp::cuda::status_source::cuda_runtime, static_cast<int>(call), #call, __FILE__, \
                                __LINE__)

namespace safeamp::cuda {
namespace detail {
namespace {

constexpr unsigned layer_threads = 256;

unsigned layer_blocks(std::uint64_t n) {
  constexpr std::uint64_t max_blocks = 2048;
  return static_cast<unsigned>(
      std::max<std::uint64_t>(1, std::min((n + layer_threads - 1) / layer_threads, max_blocks)));
}

// A local copy: the namespace-scope constant itself cannot be referenced from device code.
__device__ inline bool is_fp32(const format_spec& f) {
  constexpr format_spec f32 = safeamp::fp32;
  return f == f32;
}

__device__ inline float cast(const cast_spec& c, float x, std::uint64_t i) {
  if (is_fp32(c.format)) return x;  // the simulator's fp32 cast is the identity on values
  const std::uint32_t bits =
      c.rounding.mode == rounding::stochastic ? stochastic_bits(c.key.seed, c.key.stream, c.key.offset + i) : 0u;
  return round_to(c.format, x, c.rounding, bits);
}

// round_scalar of the simulator: nearest, identity for fp32.
__device__ inline float rs(format_spec f, float x) { return is_fp32(f) ? x : round_to(f, x); }

constexpr float gelu_c = 0.7978845608028654f;  // sqrt(2/pi), the simulator's constants
constexpr float gelu_a = 0.044715f;

__device__ inline float gelu_u(float x) {
  const float cube = __fmul_rn(__fmul_rn(__fmul_rn(gelu_a, x), x), x);
  return __fmul_rn(gelu_c, __fadd_rn(x, cube));
}

__device__ inline float gelu(float x) { return __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, tanhf(gelu_u(x)))); }

__device__ inline float gelu_derivative(float x) {
  const float t = tanhf(gelu_u(x));
  const float du = __fmul_rn(gelu_c, __fadd_rn(1.0f, __fmul_rn(__fmul_rn(__fmul_rn(3.0f, gelu_a), x), x)));
  const float left = __fmul_rn(0.5f, __fadd_rn(1.0f, t));
  const float right = __fmul_rn(__fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, -__fmul_rn(t, t))), du);
  return __fadd_rn(left, right);
}

__global__ void bias_cast_kernel(float* y, const float* bias, std::uint64_t rows, std::uint64_t cols, cast_spec out) {
  const std::uint64_t n = rows * cols;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = bias != nullptr ? __fadd_rn(y[i], bias[i % cols]) : y[i];
    y[i] = cast(out, v, i);
  }
}

__global__ void activation_forward_kernel(activation_fn fn, const float* x, float* y, std::uint64_t n, cast_spec op,
                                          cast_spec store) {
  const bool second = !(store.format == op.format);
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = fn == activation_fn::gelu ? gelu(x[i]) : (x[i] > 0.0f ? x[i] : 0.0f);
    const float r = cast(op, v, i);
    y[i] = second ? cast(store, r, i) : r;
  }
}

__global__ void activation_backward_kernel(activation_fn fn, const float* x, const float* dy, float* dx,
                                           std::uint64_t n, cast_spec op, cast_spec grad) {
  const bool second = !(grad.format == op.format);
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = fn == activation_fn::gelu ? __fmul_rn(dy[i], gelu_derivative(x[i])) : (x[i] > 0.0f ? dy[i] : 0.0f);
    const float r = cast(op, v, i);
    dx[i] = second ? cast(grad, r, i) : r;
  }
}

__global__ void cross_entropy_kernel(const float* logits, const std::int32_t* targets, std::int64_t rows,
                                     std::int64_t classes, format_spec f, double factor, const scaler_block* state,
                                     float* row_loss, std::int32_t* predicted, float* dlogits,
                                     device_step_record* record) {
  const float scale = state != nullptr ? state->state.scale : 1.0f;
  const auto coef = static_cast<float>(static_cast<double>(scale) * factor / static_cast<double>(rows));
  const float nan = __int_as_float(0x7FC00000);
  for (std::int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const float* z = logits + r * classes;
    const std::int32_t t = targets[r];
    const bool target_ok = t >= 0 && t < classes;
    float m = -INFINITY;
    std::int32_t arg = -1;
    bool finite = target_ok;
    for (std::int64_t j = 0; j < classes; ++j) {
      const float v = rs(f, z[j]);
      finite = finite && isfinite(v);
      if (v > m) {
        m = v;
        arg = static_cast<std::int32_t>(j);
      }
    }
    float sum = 0.0f;
    for (std::int64_t j = 0; j < classes; ++j)
      sum = rs(f, __fadd_rn(sum, rs(f, expf(rs(f, __fadd_rn(rs(f, z[j]), -m))))));
    const float lse = rs(f, __fadd_rn(m, rs(f, logf(sum))));
    row_loss[r] = finite ? rs(f, __fadd_rn(lse, -rs(f, z[t]))) : nan;
    if (predicted != nullptr) predicted[r] = finite ? arg : -1;
    if (dlogits != nullptr) {
      for (std::int64_t j = 0; j < classes; ++j) {
        const float p = finite ? rs(f, expf(rs(f, __fadd_rn(rs(f, z[j]), -lse)))) : nan;
        const float target = j == t ? 1.0f : 0.0f;
        dlogits[r * classes + j] = rs(f, __fmul_rn(coef, rs(f, __fadd_rn(p, -target))));
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0 && record != nullptr) {
    float total = 0.0f;
    for (std::int64_t r = 0; r < rows; ++r) total = rs(f, __fadd_rn(total, row_loss[r]));
    record->loss = static_cast<double>(rs(f, __fdiv_rn(total, static_cast<float>(rows)))) * factor;
    record->scale = scale;
  }
}

__global__ void column_sums_kernel(const float* in, std::int64_t rows, std::int64_t cols, format_spec f, float* out) {
  for (std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < cols;
       c += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (std::int64_t r = 0; r < rows; ++r) s = rs(f, __fadd_rn(s, in[r * cols + c]));
    out[c] = s;
  }
}

__global__ void write_value_kernel(float* p, float value) { *p = value; }

}  // namespace
}  // namespace detail

void add_bias_and_cast(float* y, const float* bias, std::int64_t rows, std::int64_t cols, const cast_spec& out,
                       void* stream) {
  if (rows <= 0 || cols <= 0) return;
  const auto r = static_cast<std::uint64_t>(rows), c = static_cast<std::uint64_t>(cols);
  detail::
      bias_cast_kernel<<<detail::layer_blocks(r * c), detail::layer_threads, 0, static_cast<cudaStream_t>(stream)>>>(
          y, bias, r, c, out);
  SAFEAMP_LAYER_CHECK(cudaGetLastError());
}

void activation_forward(activation_fn fn, const float* x, float* y, std::uint64_t n, const cast_spec& op,
                        const cast_spec& store, void* stream) {
  if (n == 0) return;
  detail::activation_forward_kernel<<<detail::layer_blocks(n), detail::layer_threads, 0,
                                      static_cast<cudaStream_t>(stream)>>>(fn, x, y, n, op, store);
  SAFEAMP_LAYER_CHECK(cudaGetLastError());
}

void activation_backward(activation_fn fn, const float* x, const float* dy, float* dx, std::uint64_t n,
                         const cast_spec& op, const cast_spec& gradient, void* stream) {
  if (n == 0) return;
  detail::activation_backward_kernel<<<detail::layer_blocks(n), detail::layer_threads, 0,
                                       static_cast<cudaStream_t>(stream)>>>(fn, x, dy, dx, n, op, gradient);
  SAFEAMP_LAYER_CHECK(cudaGetLastError());
}

void softmax_cross_entropy(const float* logits, const std::int32_t* targets, std::int64_t rows, std::int64_t classes,
                           format_spec loss_format, double loss_factor, const scaler_block* state, float* row_loss,
                           std::int32_t* predicted, float* dlogits, device_step_record* record, void* stream) {
  if (rows <= 0 || classes <= 0) {
    throw error("cross_entropy shape", std::to_string(rows) + " x " + std::to_string(classes), "rows, classes >= 1");
  }
  detail::cross_entropy_kernel<<<1, detail::layer_threads, 0, static_cast<cudaStream_t>(stream)>>>(
      logits, targets, rows, classes, loss_format, loss_factor, state, row_loss, predicted, dlogits, record);
  SAFEAMP_LAYER_CHECK(cudaGetLastError());
}

void column_sums(const float* in, std::int64_t rows, std::int64_t cols, format_spec sum_format, float* out,
                 void* stream) {
  if (cols <= 0) return;
  detail::column_sums_kernel<<<detail::layer_blocks(static_cast<std::uint64_t>(cols)), detail::layer_threads, 0,
                               static_cast<cudaStream_t>(stream)>>>(in, rows, cols, sum_format, out);
  SAFEAMP_LAYER_CHECK(cudaGetLastError());
}

void write_value(float* p, float value, void* stream) {
  detail::write_value_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(p, value);
  SAFEAMP_LAYER_CHECK(cudaGetLastError());
}

}  // namespace safeamp::cuda
