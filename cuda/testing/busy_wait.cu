// The busy-wait kernel of busy_wait.hpp.
#include <cuda_runtime.h>

#include <cstdint>

#include "busy_wait.hpp"
#include "safeamp/cuda/status.hpp"

namespace safeamp::cuda::testing {
namespace {

__device__ inline std::uint64_t global_nanoseconds() {
  std::uint64_t t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));  // PTX: a nanosecond wall clock
  return t;
}

__global__ void busy_wait_kernel(std::uint64_t nanoseconds) {
  const std::uint64_t start = global_nanoseconds();
  while (global_nanoseconds() - start < nanoseconds) __nanosleep(10'000);
}

}  // namespace

void launch_busy_wait(std::uint64_t nanoseconds, void* stream) {
  busy_wait_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(nanoseconds);
  check_status(status_source::cuda_runtime, static_cast<int>(cudaGetLastError()), "busy_wait_kernel launch", __FILE__,
               __LINE__);
}

}  // namespace safeamp::cuda::testing
