// Phase 2 of the fp32-accumulating wire reduction on the device (see wire_sum.hpp): each thread sums one
// element of this rank's chunk over the ranks in rank order in fp32, with the same wire_accumulate and
// wire_finish as the CPU reference wire_sum_reference.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "wire_sum.hpp"

namespace safeamp::cuda {
namespace {

// (count) codes of this rank's chunk, in place; received: (ranks, stride) codes, row `rank` unused.
template <class Code>
__global__ void wire_sum_kernel(device_dtype t, Code* chunk, const Code* received, std::size_t count,
                                std::size_t stride, int ranks, int rank) {
  const std::size_t step = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t e = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < count; e += step) {
    float sum = 0.0f;
    for (int i = 0; i < ranks; ++i) {
      const Code code = i == rank ? chunk[e] : received[static_cast<std::size_t>(i) * stride + e];
      sum = wire_accumulate(t, sum, code);
    }
    chunk[e] = static_cast<Code>(wire_finish(t, sum));
  }
}

constexpr unsigned wire_threads = 256;

unsigned wire_blocks(std::size_t n) {
  constexpr std::size_t max_blocks = 4096;
  return static_cast<unsigned>(std::max<std::size_t>(1, std::min((n + wire_threads - 1) / wire_threads, max_blocks)));
}

}  // namespace

int launch_wire_sum(device_dtype t, void* chunk, const void* received, std::size_t count, std::size_t stride, int ranks,
                    int rank, void* stream) {
  if (t == device_dtype::f32 || ranks < 1 || rank < 0 || rank >= ranks) return static_cast<int>(cudaErrorInvalidValue);
  if (count == 0) return 0;
  const auto s = static_cast<cudaStream_t>(stream);
  if (dtype_bytes(t) == 2) {
    wire_sum_kernel<std::uint16_t><<<wire_blocks(count), wire_threads, 0, s>>>(
        t, static_cast<std::uint16_t*>(chunk), static_cast<const std::uint16_t*>(received), count, stride, ranks, rank);
  } else {
    wire_sum_kernel<std::uint8_t><<<wire_blocks(count), wire_threads, 0, s>>>(
        t, static_cast<std::uint8_t*>(chunk), static_cast<const std::uint8_t*>(received), count, stride, ranks, rank);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace safeamp::cuda
