// Main of the device tests: without a GPU it says so and exits with CTest's skip code (77); a GPU the runtime
// cannot use (e.g. a driver older than the runtime) is a failure with the reason, never a skip.
#include <cstdio>
#include <exception>

#include "catch_session.hpp"
#include "safeamp/cuda/device.hpp"

int main(int argc, char** argv) {
  try {
    if (safeamp::cuda::device_count() == 0) {
      std::printf(
          "SKIPPED: no CUDA device is present (or no driver); the device tests need a GPU. "
          "Host-side tests are in cuda_host_test.\n");
      return safeamp::cuda::ctest_skip_code;
    }
    const safeamp::cuda::device_info d = safeamp::cuda::current_device();
    std::printf("device: %s (sm_%d, %d SMs)\n", d.name.c_str(), d.compute_capability, d.multiprocessors);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAILED: the GPU cannot be used: %s\n", e.what());
    return 1;
  }
  return safeamp_test::run_catch(argc, argv);
}
