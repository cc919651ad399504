// Implementation-only checking macros: wrap every CUDA runtime and cuBLASLt call so that a failure
// throws cuda_error with the status name, the call text and file:line. Never exit().
#pragma once

#include "safeamp/cuda/status.hpp"

#define SAFEAMP_CUDA_CHECK(call)                                                                                       \
  ::safeamp::cuda::check_status(::safeamp::cuda::status_source::cuda_runtime, static_cast<int>(call), #call, __FILE__, \
                                __LINE__)
#define SAFEAMP_CUBLAS_CHECK(call)                                                                               \
  ::safeamp::cuda::check_status(::safeamp::cuda::status_source::cublas, static_cast<int>(call), #call, __FILE__, \
                                __LINE__)
