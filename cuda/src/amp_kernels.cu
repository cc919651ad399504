// Device kernels of the scaler path on a scaler_block in device memory: multi-tensor unscale with the block's
// found_inf flag, loss scaling, the global norm and clip, the single-thread advance (the core advance_step,
// unchanged), SGD and AdamW predicated on the flag.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "check.hpp"
#include "safeamp/cuda/amp_ops.hpp"
#include "safeamp/error.hpp"
#include "safeamp/scaling/scaler_block.hpp"
#include "safeamp/scaling/unscale.hpp"
#include "safeamp/scaling/update_scale.hpp"

namespace safeamp::cuda {
namespace detail {

inline constexpr int max_tensors_per_launch = 64;
inline constexpr unsigned unscale_threads = 512;

struct tensor_list {
  float* data[max_tensors_per_launch];
  std::uint64_t elements[max_tensors_per_launch];
  int count;
};

// Each block walks every tensor of the list with a grid-stride loop, four floats at a time where the
// pointer is 16-byte aligned. The flag is raised once per block that saw a non-finite result.
__global__ void unscale_kernel(tensor_list list, scaler_block* state) {
  const float inv = safeamp::inverse_scale(state->state.scale);
  std::uint32_t bad = 0;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  const std::uint64_t first = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int t = 0; t < list.count; ++t) {
    float* p = list.data[t];
    const std::uint64_t n = list.elements[t];
    std::uint64_t vec = (reinterpret_cast<std::uintptr_t>(p) % 16 == 0) ? n / 4 : 0;
    float4* p4 = reinterpret_cast<float4*>(p);
    for (std::uint64_t i = first; i < vec; i += stride) {
      float4 v = p4[i];
      v.x *= inv;
      v.y *= inv;
      v.z *= inv;
      v.w *= inv;
      p4[i] = v;
      bad |= safeamp::detail::non_finite_bit(v.x) | safeamp::detail::non_finite_bit(v.y) |
             safeamp::detail::non_finite_bit(v.z) | safeamp::detail::non_finite_bit(v.w);
    }
    for (std::uint64_t i = 4 * vec + first; i < n; i += stride) {
      const float y = p[i] * inv;
      p[i] = y;
      bad |= safeamp::detail::non_finite_bit(y);
    }
  }
  if (__syncthreads_or(static_cast<int>(bad)) && threadIdx.x == 0) {
    atomicOr(&state->found_inf, 1);
    atomicOr(&state->gradient_inf, 1);
  }
}

__global__ void write_block_kernel(scaler_block* state, scaler_block value) { *state = value; }

__global__ void record_flag_kernel(scaler_block* state, const std::int32_t* flag) {
  if (*flag != 0) {
    state->found_inf = 1;
    state->gradient_inf = 1;
  }
}

__global__ void scale_loss_kernel(float* p, std::uint64_t n, const scaler_block* state) {
  const float s = state->state.scale;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    p[i] *= s;
  }
}

__global__ void advance_kernel(scaler_config cfg, scaler_block* state, bool stepped) {
  safeamp::advance_step(cfg, *state, stepped);
}

__global__ void copy_report_kernel(const scaler_block* state, step_report* report) { *report = state->last; }

constexpr unsigned norm_threads = 256;
constexpr unsigned norm_blocks = static_cast<unsigned>(norm_scratch_per_buffer);

// Per-block sums of squares in double, reduced in shared memory in a fixed tree order.
__global__ void sum_squares_kernel(const float* p, std::uint64_t n, double* partial) {
  __shared__ double s[norm_threads];
  double acc = 0.0;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const double v = static_cast<double>(p[i]);
    acc = __dadd_rn(acc, __dmul_rn(v, v));
  }
  s[threadIdx.x] = acc;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) s[threadIdx.x] = __dadd_rn(s[threadIdx.x], s[threadIdx.x + half]);
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}

__global__ void norm_finish_kernel(const double* partial, std::uint64_t count, double max_norm, scaler_block* state) {
  double sum = 0.0;
  for (std::uint64_t i = 0; i < count; ++i) sum = __dadd_rn(sum, partial[i]);
  const double norm = sqrt(sum);
  state->norm_before = norm;
  if (max_norm > 0.0 && !isfinite(norm)) {
    state->found_inf = 1;
    state->norm_non_finite = 1;
  }
  if (max_norm > 0.0 && isfinite(norm) && norm > max_norm) {
    const auto factor = static_cast<float>(max_norm / norm);
    state->norm_after = norm * static_cast<double>(factor);
  } else {
    state->norm_after = norm;
  }
}

__global__ void clip_kernel(float* p, std::uint64_t n, double max_norm, const scaler_block* state) {
  const double norm = state->norm_before;
  if (!(isfinite(norm) && norm > max_norm)) return;
  const auto factor = static_cast<float>(max_norm / norm);
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    p[i] = __fmul_rn(p[i], factor);
  }
}

// __fmul_rn / __fadd_rn are never contracted into an fma, so the arithmetic is the simulator's, op for op.
__global__ void sgd_kernel(float* w, const float* g, float* v, std::uint64_t n, sgd_options o,
                           const scaler_block* state) {
  if (state->found_inf != 0) return;  // the step is skipped: weights and momentum stay as they are
  const float neg_lr = -o.learning_rate;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float vel = __fadd_rn(__fmul_rn(o.momentum, v[i]), g[i]);
    v[i] = vel;
    w[i] = __fadd_rn(w[i], __fmul_rn(neg_lr, vel));
  }
}

__global__ void adamw_kernel(float* w, const float* g, float* m, float* v, std::uint64_t n, adamw_options o,
                             const scaler_block* state) {
  if (state->found_inf != 0) return;
  const double t = static_cast<double>(state->stats.applied_steps + 1);
  const float c1 = static_cast<float>(1.0 / (1.0 - pow(o.beta1, t)));
  const float c2 = static_cast<float>(1.0 / (1.0 - pow(o.beta2, t)));
  const float b1 = static_cast<float>(o.beta1), b2 = static_cast<float>(o.beta2);
  const float one_minus_b1 = __fadd_rn(1.0f, -b1), one_minus_b2 = __fadd_rn(1.0f, -b2);
  const float neg_lr = -o.learning_rate;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float gi = g[i];
    const float mi = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(one_minus_b1, gi));
    const float vi = __fadd_rn(__fmul_rn(b2, v[i]), __fmul_rn(__fmul_rn(one_minus_b2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    const float ratio = __fdiv_rn(__fmul_rn(mi, c1), __fadd_rn(__fsqrt_rn(__fmul_rn(vi, c2)), o.epsilon));
    const float upd = __fmul_rn(neg_lr, __fadd_rn(ratio, __fmul_rn(o.weight_decay, w[i])));
    w[i] = __fadd_rn(w[i], upd);
  }
}

__device__ inline std::uint64_t global_nanoseconds() {
  std::uint64_t t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));  // PTX: a nanosecond wall clock
  return t;
}

__global__ void busy_wait_kernel(std::uint64_t nanoseconds) {
  const std::uint64_t start = global_nanoseconds();
  while (global_nanoseconds() - start < nanoseconds) __nanosleep(10'000);
}

unsigned grid_for(std::uint64_t elements, unsigned threads) {
  // Enough blocks to fill any of our target GPUs (132 SMs x 4) without one block per element.
  constexpr std::uint64_t max_blocks = 1056;
  const std::uint64_t want = (elements + threads - 1) / threads;
  return static_cast<unsigned>(std::max<std::uint64_t>(1, std::min(want, max_blocks)));
}

}  // namespace detail

void amp_reset(scaler_block* state, const scaler_config& cfg, void* stream) {
  write_block(state, initial_block(cfg), stream);
}

void write_block(scaler_block* state, const scaler_block& value, void* stream) {
  detail::write_block_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(state, value);
  SAFEAMP_CUDA_CHECK(cudaGetLastError());
}

void multi_tensor_unscale(std::span<const tensor_span> buffers, scaler_block* state, void* stream) {
  std::size_t i = 0;
  while (i < buffers.size()) {
    detail::tensor_list list{};
    std::uint64_t largest = 0;
    while (i < buffers.size() && list.count < detail::max_tensors_per_launch) {
      if (buffers[i].elements != 0) {
        list.data[list.count] = buffers[i].data;
        list.elements[list.count] = buffers[i].elements;
        largest = std::max(largest, buffers[i].elements);
        ++list.count;
      }
      ++i;
    }
    if (list.count == 0) continue;
    const unsigned blocks = detail::grid_for(largest / 4 + 1, detail::unscale_threads);
    detail::unscale_kernel<<<blocks, detail::unscale_threads, 0, static_cast<cudaStream_t>(stream)>>>(list, state);
    SAFEAMP_CUDA_CHECK(cudaGetLastError());
  }
}

void record_found_inf(scaler_block* state, const std::int32_t* flag, void* stream) {
  detail::record_flag_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(state, flag);
  SAFEAMP_CUDA_CHECK(cudaGetLastError());
}

void global_norm_and_clip(std::span<const tensor_span> buffers, double max_norm, double* scratch, scaler_block* state,
                          void* stream) {
  constexpr std::size_t max_buffers = 64;
  if (buffers.size() > max_buffers) {
    throw error("global_norm_and_clip buffers", std::to_string(buffers.size()), "at most 64");
  }
  const auto s = static_cast<cudaStream_t>(stream);
  SAFEAMP_CUDA_CHECK(cudaMemsetAsync(scratch, 0, buffers.size() * norm_scratch_per_buffer * sizeof(double), s));
  for (std::size_t t = 0; t < buffers.size(); ++t) {
    if (buffers[t].elements == 0) continue;
    detail::sum_squares_kernel<<<detail::norm_blocks, detail::norm_threads, 0, s>>>(
        buffers[t].data, buffers[t].elements, scratch + t * norm_scratch_per_buffer);
    SAFEAMP_CUDA_CHECK(cudaGetLastError());
  }
  detail::norm_finish_kernel<<<1, 1, 0, s>>>(scratch, buffers.size() * norm_scratch_per_buffer, max_norm, state);
  SAFEAMP_CUDA_CHECK(cudaGetLastError());
  if (max_norm > 0.0) {
    for (const tensor_span& b : buffers) {
      if (b.elements == 0) continue;
      detail::clip_kernel<<<detail::grid_for(b.elements, detail::norm_threads), detail::norm_threads, 0, s>>>(
          b.data, b.elements, max_norm, state);
      SAFEAMP_CUDA_CHECK(cudaGetLastError());
    }
  }
}

void scale_by_loss_scale(tensor_span data, const scaler_block* state, void* stream) {
  if (data.elements == 0) return;
  constexpr unsigned threads = 256;
  detail::
      scale_loss_kernel<<<detail::grid_for(data.elements, threads), threads, 0, static_cast<cudaStream_t>(stream)>>>(
          data.data, data.elements, state);
  SAFEAMP_CUDA_CHECK(cudaGetLastError());
}

void advance_scaler(const scaler_config& cfg, scaler_block* state, bool stepped, void* stream) {
  detail::advance_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(cfg, state, stepped);
  SAFEAMP_CUDA_CHECK(cudaGetLastError());
}

void scale_update(const scaler_config& cfg, scaler_block* state, void* stream) {
  advance_scaler(cfg, state, true, stream);
}

void copy_last_report(const scaler_block* state, step_report* report, void* stream) {
  detail::copy_report_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(state, report);
  SAFEAMP_CUDA_CHECK(cudaGetLastError());
}

void sgd_momentum_step(tensor_span weights, const float* gradients, float* velocity, const sgd_options& options,
                       const scaler_block* state, void* stream) {
  if (weights.elements == 0) return;
  constexpr unsigned threads = 256;
  detail::sgd_kernel<<<detail::grid_for(weights.elements, threads), threads, 0, static_cast<cudaStream_t>(stream)>>>(
      weights.data, gradients, velocity, weights.elements, options, state);
  SAFEAMP_CUDA_CHECK(cudaGetLastError());
}

void adamw_step(tensor_span weights, const float* gradients, float* first_moment, float* second_moment,
                const adamw_options& options, const scaler_block* state, void* stream) {
  if (weights.elements == 0) return;
  constexpr unsigned threads = 256;
  detail::adamw_kernel<<<detail::grid_for(weights.elements, threads), threads, 0, static_cast<cudaStream_t>(stream)>>>(
      weights.data, gradients, first_moment, second_moment, weights.elements, options, state);
  SAFEAMP_CUDA_CHECK(cudaGetLastError());
}

void launch_busy_wait(std::uint64_t nanoseconds, void* stream) {
  detail::busy_wait_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(nanoseconds);
  SAFEAMP_CUDA_CHECK(cudaGetLastError());
}

}  // namespace safeamp::cuda
