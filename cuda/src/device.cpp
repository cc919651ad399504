// Device presence and properties, and the per-device geometry that sizes the norm's launches (cached).
#include "safeamp/cuda/device.hpp"

#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "check.hpp"
#include "norm_plan.hpp"

namespace safeamp::cuda {

namespace detail {

int device_count_from(const device_count_answer& answer) {
  if (answer.status == cudaSuccess) return answer.count;
  if (answer.status == cudaErrorNoDevice) return 0;
  const std::string driver = cuda_version_name(answer.driver_version);
  const std::string runtime = cuda_version_name(answer.runtime_version);
  const bool no_driver = answer.driver_version == 0;  // cudaDriverGetVersion: 0 when no driver is installed
  if (no_driver && (answer.status == cudaErrorInsufficientDriver || answer.status == cudaErrorStubLibrary)) return 0;
  const std::string versions = "driver CUDA " + driver + " (cudaDriverGetVersion " +
                               std::to_string(answer.driver_version) + "), runtime CUDA " + runtime +
                               " (cudaRuntimeGetVersion " + std::to_string(answer.runtime_version) + ")";
  if (answer.status == cudaErrorInsufficientDriver) {
    throw cuda_error(status_source::cuda_runtime, answer.status, "cudaGetDeviceCount(&n)", __FILE__, __LINE__,
                     "the NVIDIA driver is older than the CUDA runtime this program uses (" + versions +
                         "); needed: a driver that supports CUDA " + runtime +
                         " or newer (nvidia-smi shows the CUDA version a driver supports), or safeamp built with a "
                         "CUDA toolkit no newer than " +
                         driver);
  }
  throw cuda_error(status_source::cuda_runtime, answer.status, "cudaGetDeviceCount(&n)", __FILE__, __LINE__,
                   "a CUDA driver is installed but the runtime cannot use it (" + versions + ")");
}

}  // namespace detail

int device_count() {
  detail::device_count_answer answer;
  answer.status = static_cast<int>(cudaGetDeviceCount(&answer.count));
  if (answer.status == cudaSuccess) return answer.count;
  (void)cudaGetLastError();  // clear the sticky "no device / no driver" error
  answer.count = 0;
  // Neither call needs a driver or a device: with no driver the driver version is 0.
  SAFEAMP_CUDA_CHECK(cudaDriverGetVersion(&answer.driver_version));
  SAFEAMP_CUDA_CHECK(cudaRuntimeGetVersion(&answer.runtime_version));
  return detail::device_count_from(answer);
}

namespace {

// Device ordinals whose geometry is cached; a device beyond them (a machine with more GPUs) is queried at each call.
constexpr int max_cached_devices = 64;
// Per device: multiprocessors in the high 32 bits, max threads per multiprocessor in the low; 0 until queried.
std::array<std::atomic<std::uint64_t>, max_cached_devices> geometry_cache{};

}  // namespace

detail::device_geometry detail::current_device_geometry() {
  int device = 0;
  SAFEAMP_CUDA_CHECK(cudaGetDevice(&device));
  const bool cacheable = device >= 0 && device < max_cached_devices;
  if (cacheable) {
    const std::uint64_t packed = geometry_cache[static_cast<std::size_t>(device)].load(std::memory_order_relaxed);
    if (packed != 0) {
      return device_geometry{.multiprocessors = static_cast<int>(packed >> 32),
                             .max_threads_per_multiprocessor = static_cast<int>(packed & 0xFFFF'FFFFu)};
    }
  }
  device_geometry g;
  SAFEAMP_CUDA_CHECK(cudaDeviceGetAttribute(&g.multiprocessors, cudaDevAttrMultiProcessorCount, device));
  SAFEAMP_CUDA_CHECK(
      cudaDeviceGetAttribute(&g.max_threads_per_multiprocessor, cudaDevAttrMaxThreadsPerMultiProcessor, device));
  if (cacheable) {
    const std::uint64_t packed = static_cast<std::uint64_t>(static_cast<std::uint32_t>(g.multiprocessors)) << 32 |
                                 static_cast<std::uint32_t>(g.max_threads_per_multiprocessor);
    geometry_cache[static_cast<std::size_t>(device)].store(packed, std::memory_order_relaxed);
  }
  return g;
}

device_info current_device() {
  int device = 0;
  SAFEAMP_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  SAFEAMP_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return device_info{prop.name, 10 * prop.major + prop.minor, prop.multiProcessorCount};
}

}  // namespace safeamp::cuda
