// Device kernels of the scaler path: multi-tensor unscale with a device found_inf flag, loss scaling,
// the single-thread scale update (the core transition, unchanged), SGD predicated on the flag.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "check.hpp"
#include "safeamp/cuda/amp_ops.hpp"
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
__global__ void unscale_kernel(tensor_list list, device_amp_state* state) {
  const float inv = safeamp::inverse_scale(state->scaler.scale);
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
  if (__syncthreads_or(static_cast<int>(bad)) && threadIdx.x == 0) atomicOr(&state->found_inf, 1);
}

__global__ void reset_kernel(device_amp_state* state, scaler_state initial) {
  *state = device_amp_state{};
  state->scaler = initial;
}

__global__ void scale_loss_kernel(float* p, std::uint64_t n, const device_amp_state* state) {
  const float s = state->scaler.scale;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    p[i] *= s;
  }
}

__global__ void update_kernel(scaler_config cfg, device_amp_state* state) {
  const bool found = state->found_inf != 0;
  state->scaler = safeamp::update_scale(cfg, state->scaler, found);
  state->last_found_inf = found ? 1 : 0;
  state->steps += 1;
  state->skipped_steps += found ? 1 : 0;
  state->found_inf = 0;
}

// __fmul_rn / __fadd_rn are never contracted into an fma, so the arithmetic is the simulator's, op for op.
__global__ void sgd_kernel(float* w, const float* g, float* v, std::uint64_t n, sgd_options o,
                           const device_amp_state* state) {
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
                             const device_amp_state* state) {
  if (state->found_inf != 0) return;
  const double t = static_cast<double>(state->steps - state->skipped_steps + 1);
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

void amp_reset(device_amp_state* state, const scaler_config& cfg, void* stream) {
  detail::reset_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(state, initial_state(cfg));
  SAFEAMP_CUDA_CHECK(cudaGetLastError());
}

void multi_tensor_unscale(std::span<const tensor_span> buffers, device_amp_state* state, void* stream) {
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

void scale_by_loss_scale(tensor_span data, const device_amp_state* state, void* stream) {
  if (data.elements == 0) return;
  constexpr unsigned threads = 256;
  detail::
      scale_loss_kernel<<<detail::grid_for(data.elements, threads), threads, 0, static_cast<cudaStream_t>(stream)>>>(
          data.data, data.elements, state);
  SAFEAMP_CUDA_CHECK(cudaGetLastError());
}

void scale_update(const scaler_config& cfg, device_amp_state* state, void* stream) {
  detail::update_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(cfg, state);
  SAFEAMP_CUDA_CHECK(cudaGetLastError());
}

void sgd_momentum_step(tensor_span weights, const float* gradients, float* velocity, const sgd_options& options,
                       const device_amp_state* state, void* stream) {
  if (weights.elements == 0) return;
  constexpr unsigned threads = 256;
  detail::sgd_kernel<<<detail::grid_for(weights.elements, threads), threads, 0, static_cast<cudaStream_t>(stream)>>>(
      weights.data, gradients, velocity, weights.elements, options, state);
  SAFEAMP_CUDA_CHECK(cudaGetLastError());
}

void adamw_step(tensor_span weights, const float* gradients, float* first_moment, float* second_moment,
                const adamw_options& options, const device_amp_state* state, void* stream) {
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
