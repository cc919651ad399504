// Main of the device tests: without a GPU it says so and exits with CTest's skip code (77).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>

#include "safeamp/cuda/device.hpp"

int main(int argc, char** argv) {
  if (safeamp::cuda::device_count() == 0) {
    std::printf(
        "SKIPPED: no CUDA device is present (or no driver); the device tests need a GPU. "
        "Host-side tests are in cuda_host_test.\n");
    return safeamp::cuda::ctest_skip_code;
  }
  const safeamp::cuda::device_info d = safeamp::cuda::current_device();
  std::printf("device: %s (sm_%d, %d SMs)\n", d.name.c_str(), d.compute_capability, d.multiprocessors);
  return Catch::Session().run(argc, argv);
}
