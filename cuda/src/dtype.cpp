// Mapping of our device types onto cudaDataType_t and cublasComputeType_t.
#include "safeamp/cuda/dtype.hpp"

#include <cublasLt.h>
#include <library_types.h>

namespace safeamp::cuda {

int to_cuda_data_type(device_dtype t) noexcept {
  switch (t) {
    case device_dtype::f32:
      return CUDA_R_32F;
    case device_dtype::f16:
      return CUDA_R_16F;
    case device_dtype::bf16:
      return CUDA_R_16BF;
    case device_dtype::f8_e4m3:
      return CUDA_R_8F_E4M3;
    case device_dtype::f8_e5m2:
      return CUDA_R_8F_E5M2;
  }
  return -1;
}

int to_cublas_compute_type(gemm_compute c) noexcept {
  switch (c) {
    case gemm_compute::f32:
      return CUBLAS_COMPUTE_32F;
    case gemm_compute::f32_fast_tf32:
      return CUBLAS_COMPUTE_32F_FAST_TF32;
    case gemm_compute::f16:
      return CUBLAS_COMPUTE_16F;
  }
  return -1;
}

}  // namespace safeamp::cuda
