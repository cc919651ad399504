// CUDA runtime and cuBLASLt statuses as named errors: every call into either library is checked, and a
// failure throws safeamp::cuda::cuda_error carrying the status name, the call text and the call site.
#pragma once

#include <string>
#include <string_view>

#include "safeamp/error.hpp"

namespace safeamp::cuda {

/// Which library produced a status code.
enum class status_source : unsigned char { cuda_runtime, cublas };

/// Name of a cudaError_t value ("cudaErrorMemoryAllocation"); "unrecognized CUDA error <n>" when unknown.
[[nodiscard]] std::string cuda_status_name(int status);
/// Name of a cublasStatus_t value ("CUBLAS_STATUS_NOT_SUPPORTED"); "unrecognized cuBLAS status <n>" when unknown.
/// The table is our own (tests compare it with cublasLtGetStatusName).
[[nodiscard]] std::string_view cublas_status_name(int status) noexcept;

/// A CUDA version as cudaDriverGetVersion and cudaRuntimeGetVersion report it (1000 * major + 10 * minor) written
/// "major.minor": 12020 -> "12.2", 13000 -> "13.0"; 0 (what cudaDriverGetVersion gives without a driver) -> "none".
[[nodiscard]] std::string cuda_version_name(int version);

/// A failed CUDA runtime or cuBLASLt call: "<call> failed with <name> (<code>) at <file>:<line>", followed by
/// ": <explanation>" when the thrower knows what the status means there and what would fix it.
class cuda_error : public safeamp::error {
 public:
  cuda_error(status_source source, int status, std::string_view call, std::string_view file, int line,
             std::string_view explanation = {});

  [[nodiscard]] status_source source() const noexcept { return source_; }
  [[nodiscard]] int status() const noexcept { return status_; }
  [[nodiscard]] const std::string& status_name() const noexcept { return name_; }
  [[nodiscard]] const std::string& call() const noexcept { return call_; }

 private:
  status_source source_;
  int status_;
  std::string name_;
  std::string call_;
};

/// Throws cuda_error when `status` is not success (0 for both libraries). Used through the
/// SAFEAMP_CUDA_CHECK / SAFEAMP_CUBLAS_CHECK macros of the implementation.
void check_status(status_source source, int status, const char* call, const char* file, int line);

}  // namespace safeamp::cuda
