// The adapter example's stand-in backward (adapter_backward.hpp). Example-only: not in safeamp::cuda.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "adapter_backward.hpp"
#include "safeamp/cuda/status.hpp"
#include "safeamp/format/round.hpp"

namespace safeamp::cuda_adapter::demo {
namespace {

__global__ void fake_backward_kernel(void* grad, std::uint64_t n, cuda::device_dtype type, float magnitude,
                                     std::uint64_t seed, std::uint32_t parameter, std::uint32_t step, bool poison,
                                     const float* scale) {
  const float s = *scale;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float g = true_gradient(seed, parameter, step, i, magnitude) * s;
    if (poison && i == 0) g = std::numeric_limits<float>::quiet_NaN();
    if (type == cuda::device_dtype::f16) {
      static_cast<std::uint16_t*>(grad)[i] = static_cast<std::uint16_t>(encode<fp16>(g));
    } else if (type == cuda::device_dtype::bf16) {
      static_cast<std::uint16_t*>(grad)[i] = static_cast<std::uint16_t>(encode<bf16>(g));
    } else {
      static_cast<float*>(grad)[i] = g;
    }
  }
}

}  // namespace

void fake_backward(void* grad, std::uint64_t n, cuda::device_dtype type, float magnitude, std::uint64_t seed,
                   std::uint32_t parameter, std::uint32_t step, bool poison, const float* scale, void* stream) {
  constexpr unsigned threads = 256;
  const auto blocks = static_cast<unsigned>(std::clamp<std::uint64_t>((n + threads - 1) / threads, 1, 1024));
  fake_backward_kernel<<<blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(grad, n, type, magnitude, seed,
                                                                                  parameter, step, poison, scale);
  cuda::check_status(cuda::status_source::cuda_runtime, static_cast<int>(cudaGetLastError()), "fake_backward_kernel",
                     __FILE__, __LINE__);
}

}  // namespace safeamp::cuda_adapter::demo
