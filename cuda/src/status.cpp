// Status names and the cuda_error exception.
#include "safeamp/cuda/status.hpp"

#include <cuda_runtime_api.h>

#include <string>

namespace safeamp::cuda {

std::string cuda_status_name(int status) {
  // cudaGetErrorName needs no device; it returns "cudaErrorUnknown"-like text only for known values.
  const char* name = cudaGetErrorName(static_cast<cudaError_t>(status));
  if (name == nullptr || std::string_view(name) == "unrecognized error code") {
    return "unrecognized CUDA error " + std::to_string(status);
  }
  return name;
}

std::string_view cublas_status_name(int status) noexcept {
  // Values from cublas_api.h (cublasStatus_t), which cuBLASLt shares.
  switch (status) {
    case 0:
      return "CUBLAS_STATUS_SUCCESS";
    case 1:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case 3:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case 7:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case 8:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case 11:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case 13:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case 14:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case 15:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case 16:
      return "CUBLAS_STATUS_LICENSE_ERROR";
    default:
      return "unrecognized cuBLAS status";
  }
}

namespace {
std::string status_text(status_source source, int status) {
  if (source == status_source::cuda_runtime) return cuda_status_name(status);
  std::string name(cublas_status_name(status));
  if (name == "unrecognized cuBLAS status") {
    const std::string number = std::to_string(status);
    name.append(" ");
    name.append(number);
  }
  return name;
}
}  // namespace

std::string cuda_version_name(int version) {
  if (version == 0) return "none";
  // cuda.h: CUDA_VERSION is 1000 * major + 10 * minor
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

cuda_error::cuda_error(status_source source, int status, std::string_view call, std::string_view file, int line,
                       std::string_view explanation)
    : safeamp::error(std::string(call) + " failed with " + status_text(source, status) + " (" + std::to_string(status) +
                     ") at " + std::string(file) + ":" + std::to_string(line) +
                     (explanation.empty() ? std::string() : ": " + std::string(explanation))),
      source_(source),
      status_(status),
      name_(status_text(source, status)),
      call_(call) {}

void check_status(status_source source, int status, const char* call, const char* file, int line) {
  if (status != 0) throw cuda_error(source, status, call, file, line);
}

}  // namespace safeamp::cuda
