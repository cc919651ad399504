// Host-side (no GPU): status codes -> names, and the error text naming the call and the call site.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>
#include <string>

#include "safeamp/cuda/device.hpp"
#include "safeamp/cuda/status.hpp"
#include "safeamp/cuda/telemetry_reader.hpp"

using namespace safeamp::cuda;

TEST_CASE("cuBLAS status names agree with cublasLtGetStatusName", "[cuda][host]") {
  // Our table is independent of the library; the library's own names are the oracle.
  for (int s : {0, 1, 3, 7, 8, 11, 13, 14, 15, 16}) {
    INFO("status " << s);
    CHECK(std::string(cublas_status_name(s)) == cublasLtGetStatusName(static_cast<cublasStatus_t>(s)));
  }
  CHECK(cublas_status_name(15) == "CUBLAS_STATUS_NOT_SUPPORTED");  // cublas_api.h: CUBLAS_STATUS_NOT_SUPPORTED = 15
  CHECK(cublas_status_name(12345) == "unrecognized cuBLAS status");
}

TEST_CASE("CUDA runtime status names", "[cuda][host]") {
  CHECK(cuda_status_name(cudaErrorMemoryAllocation) == "cudaErrorMemoryAllocation");
  CHECK(cuda_status_name(cudaErrorInvalidValue) == "cudaErrorInvalidValue");
  CHECK(cuda_status_name(cudaErrorNoDevice) == "cudaErrorNoDevice");
  CHECK(cuda_status_name(2) == "cudaErrorMemoryAllocation");  // driver_types.h: cudaErrorMemoryAllocation = 2
}

TEST_CASE("check_status throws cuda_error with name, call and site; success passes", "[cuda][host]") {
  CHECK_NOTHROW(check_status(status_source::cuda_runtime, 0, "cudaFree(p)", "x.cpp", 1));
  CHECK_NOTHROW(check_status(status_source::cublas, 0, "cublasLtCreate(&h)", "x.cpp", 1));
  try {
    check_status(status_source::cublas, 15, "cublasLtMatmul(h, ...)", "gemm.cpp", 42);
    FAIL("no exception");
  } catch (const cuda_error& e) {
    CHECK(e.source() == status_source::cublas);
    CHECK(e.status() == 15);
    CHECK(e.status_name() == "CUBLAS_STATUS_NOT_SUPPORTED");
    CHECK(e.call() == "cublasLtMatmul(h, ...)");
    CHECK(std::string(e.what()) ==
          "cublasLtMatmul(h, ...) failed with CUBLAS_STATUS_NOT_SUPPORTED (15) at gemm.cpp:42");
  }
  try {
    check_status(status_source::cuda_runtime, 2, "cudaMalloc(&p, n)", "mem.cpp", 7);
    FAIL("no exception");
  } catch (const safeamp::error& e) {  // cuda_error is a safeamp::error
    CHECK(std::string(e.what()) == "cudaMalloc(&p, n) failed with cudaErrorMemoryAllocation (2) at mem.cpp:7");
  }
  try {
    check_status(status_source::cublas, 999, "f()", "a.cpp", 3);
    FAIL("no exception");
  } catch (const cuda_error& e) {
    CHECK(e.status_name() == "unrecognized cuBLAS status 999");
  }
}

TEST_CASE("runtime device names map onto the device table", "[cuda][host]") {
  const auto row = [](std::string_view runtime) -> std::string {
    const safeamp::device_spec* d = find_device_for_runtime_name(runtime);
    return d == nullptr ? "(none)" : std::string(d->name);
  };
  CHECK(row("NVIDIA GeForce RTX 4090") == "RTX 4090");
  CHECK(row("NVIDIA GeForce RTX 3090") == "RTX 3090");
  CHECK(row("NVIDIA RTX A5000") == "RTX A5000");
  CHECK(row("NVIDIA A10") == "A10");
  CHECK(row("NVIDIA L4") == "L4");
  CHECK(row("NVIDIA L40S") == "L40S");                     // not L4: L4 must be a whole word
  CHECK(row("NVIDIA A100-SXM4-40GB") == "A100 40GB SXM");  // not A10
  CHECK(row("NVIDIA A100-SXM4-80GB") == "A100 80GB SXM");  // the size picks the row
  CHECK(row("NVIDIA A100 80GB PCIe") == "(none)");         // no PCIe A100 row: SXM figures would be wrong
  CHECK(row("NVIDIA H100 80GB HBM3") == "H100 SXM");
  CHECK(row("NVIDIA H200") == "H200 SXM");
  CHECK(row("NVIDIA H100 PCIe") == "H100 PCIe");
  CHECK(row("NVIDIA H100 NVL") == "(none)");  // neither the SXM nor the PCIe row's figures
  CHECK(row("NVIDIA H200 NVL") == "H200 NVL");
  CHECK(row("Tesla T4") == "(none)");
}

TEST_CASE("device_count is 0, not an error, without a GPU", "[cuda][host]") {
  int n = -1;
  CHECK_NOTHROW(n = device_count());  // a build machine without a GPU or a driver skips; it does not fail
  CHECK(n >= 0);
  if (n == 0) CHECK_THROWS_AS(current_device(), cuda_error);
}

TEST_CASE("CUDA versions are written major.minor", "[cuda][host]") {
  // 1000 * major + 10 * minor (the runtime API's cudaDriverGetVersion / cudaRuntimeGetVersion), worked by hand
  CHECK(cuda_version_name(12020) == "12.2");
  CHECK(cuda_version_name(13000) == "13.0");
  CHECK(cuda_version_name(11080) == "11.8");
  CHECK(cuda_version_name(12090) == "12.9");
  CHECK(cuda_version_name(0) == "none");
}

TEST_CASE("device_count: no device or no driver is 0 GPUs; an old driver is an error", "[cuda][host]") {
  using detail::device_count_from;
  // The runtime's answers on machines these tests do not run on (statuses from driver_types.h).
  CHECK(device_count_from({.status = cudaSuccess, .count = 2, .driver_version = 13000, .runtime_version = 13000}) == 2);
  CHECK(device_count_from({.status = cudaErrorNoDevice, .driver_version = 13000, .runtime_version = 13000}) == 0);
  // no driver installed (this build machine: cudaErrorInsufficientDriver with driver version 0), or only the stub
  CHECK(device_count_from({.status = cudaErrorInsufficientDriver, .driver_version = 0, .runtime_version = 13000}) == 0);
  CHECK(device_count_from({.status = cudaErrorStubLibrary, .driver_version = 0, .runtime_version = 13000}) == 0);

  // A GPU whose driver (CUDA 12.2) is older than the runtime (CUDA 13.0): before the fix this was "0 devices", so
  // device tests skipped and the user was told there was no GPU.
  try {
    (void)device_count_from({.status = cudaErrorInsufficientDriver, .driver_version = 12020, .runtime_version = 13000});
    FAIL("an old driver was taken for no GPU");
  } catch (const cuda_error& e) {
    CHECK(e.status() == cudaErrorInsufficientDriver);
    CHECK(e.status_name() == "cudaErrorInsufficientDriver");
    const std::string what = e.what();
    INFO(what);
    CHECK_THAT(what, Catch::Contains("cudaGetDeviceCount"));
    CHECK_THAT(what, Catch::Contains("driver CUDA 12.2 (cudaDriverGetVersion 12020)"));
    CHECK_THAT(what, Catch::Contains("runtime CUDA 13.0 (cudaRuntimeGetVersion 13000)"));
    CHECK_THAT(what, Catch::Contains("a driver that supports CUDA 13.0 or newer"));
  }
  // Any other failure with a driver present is named, not hidden as "no GPU".
  try {
    (void)device_count_from(
        {.status = cudaErrorSystemDriverMismatch, .driver_version = 13000, .runtime_version = 13000});
    FAIL("a driver mismatch was taken for no GPU");
  } catch (const cuda_error& e) {
    CHECK(e.status_name() == "cudaErrorSystemDriverMismatch");
    CHECK_THAT(std::string(e.what()), Catch::Contains("driver CUDA 13.0"));
  }
  // Without a driver, a status other than "no driver" is still an error (not a guess that there is no GPU).
  CHECK_THROWS_AS(device_count_from({.status = cudaErrorInitializationError, .runtime_version = 13000}), cuda_error);
}

TEST_CASE("cuda_error: an explanation follows the call site", "[cuda][host]") {
  const cuda_error e(status_source::cuda_runtime, 2, "cudaMalloc(&p, n)", "mem.cpp", 7, "1 GiB asked, 10 MiB free");
  CHECK(std::string(e.what()) ==
        "cudaMalloc(&p, n) failed with cudaErrorMemoryAllocation (2) at mem.cpp:7: 1 GiB asked, 10 MiB free");
}

TEST_CASE("telemetry snapshots are due every N steps", "[cuda][host]") {
  CHECK(snapshot_due(0, 10));
  CHECK_FALSE(snapshot_due(9, 10));
  CHECK(snapshot_due(10, 10));
  CHECK(snapshot_due(7, 1));
  CHECK_FALSE(snapshot_due(5, 0));
}
