// Device-side entry points that run the core headers' code unchanged on the GPU: this file is also the
// build-time proof that every core header compiles under nvcc.
#include <cstdint>

#include "safeamp/cuda/core_kernels.hpp"
#include "safeamp/safeamp.hpp"

namespace safeamp::cuda::detail {

__global__ void round_kernel(format_spec f, round_options opt, philox_key key, const float* in, float* out,
                             std::uint64_t n) {
  const std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const std::uint32_t rnd =
      opt.mode == rounding::stochastic ? stochastic_bits(key.seed, key.stream, key.offset + i) : 0u;
  out[i] = round_to(f, in[i], opt, rnd);
}

}  // namespace safeamp::cuda::detail

namespace safeamp::cuda {

int launch_round(format_spec f, round_options opt, philox_key key, const float* in, float* out, std::uint64_t n,
                 void* stream) {
  if (n == 0) return 0;
  constexpr unsigned threads = 256;
  const std::uint64_t blocks = (n + threads - 1) / threads;
  detail::round_kernel<<<static_cast<unsigned>(blocks), threads, 0, static_cast<cudaStream_t>(stream)>>>(
      f, opt, key, in, out, n);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace safeamp::cuda
