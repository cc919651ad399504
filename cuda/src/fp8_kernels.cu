// FP8 delayed-scaling kernels (see fp8_scaling.hpp): amax of a tensor into the state, the one-thread update.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "check.hpp"
#include "safeamp/cuda/fp8_scaling.hpp"

namespace safeamp::cuda {
namespace detail {
namespace {

constexpr unsigned amax_threads = 256;

// Each thread folds a grid-stride slice, the block reduces in shared memory, one atomicMax per block. The
// fold is a max on bits, so the result does not depend on the order or the geometry.
__global__ void amax_kernel(const float* x, std::uint64_t n, delayed_scaling_state* state) {
  __shared__ std::uint32_t s[amax_threads];
  std::uint32_t acc = 0;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    acc = safeamp::amax_fold(acc, x[i]);
  }
  s[threadIdx.x] = acc;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) s[threadIdx.x] = std::max(s[threadIdx.x], s[threadIdx.x + half]);
    __syncthreads();
  }
  if (threadIdx.x == 0 && s[0] != 0) atomicMax(&state->amax_bits, s[0]);
}

__global__ void update_kernel(delayed_scaling_params p, delayed_scaling_state* state, float* window) {
  safeamp::delayed_scaling_step(p, *state, window);
}

__global__ void reset_kernel(delayed_scaling_state* state) { *state = delayed_scaling_state{}; }

}  // namespace
}  // namespace detail

void launch_amax(const float* x, std::uint64_t n, delayed_scaling_state* state, void* stream) {
  if (n == 0) return;
  constexpr std::uint64_t max_blocks = 1024;
  const auto blocks = static_cast<unsigned>(
      std::max<std::uint64_t>(1, std::min((n + detail::amax_threads - 1) / detail::amax_threads, max_blocks)));
  detail::amax_kernel<<<blocks, detail::amax_threads, 0, static_cast<cudaStream_t>(stream)>>>(x, n, state);
  SAFEAMP_CUDA_CHECK(cudaGetLastError());
}

void delayed_scaling_update(const delayed_scaling_params& params, delayed_scaling_state* state, float* window,
                            void* stream) {
  detail::update_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(params, state, window);
  SAFEAMP_CUDA_CHECK(cudaGetLastError());
}

void delayed_scaling_reset(delayed_scaling_state* state, void* stream) {
  detail::reset_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(state);
  SAFEAMP_CUDA_CHECK(cudaGetLastError());
}

}  // namespace safeamp::cuda
