// Device presence and properties.
#include "safeamp/cuda/device.hpp"

#include <cuda_runtime_api.h>

#include "check.hpp"

namespace safeamp::cuda {

int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device / no driver" error
    return 0;
  }
  return n;
}

device_info current_device() {
  int device = 0;
  SAFEAMP_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  SAFEAMP_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return device_info{prop.name, 10 * prop.major + prop.minor, prop.multiProcessorCount};
}

}  // namespace safeamp::cuda
