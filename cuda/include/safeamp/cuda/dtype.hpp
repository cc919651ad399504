// Which device data types and cuBLASLt compute type a GEMM uses, chosen from the formats of a precision
// policy: fp32, TF32 (fp32 storage, TF32 tensor cores), fp16/bf16 inputs with fp32 accumulation, and fp8
// E4M3/E5M2 inputs with per-tensor scales. Host-only: the cudaDataType_t values live in dtype.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "safeamp/error.hpp"
#include "safeamp/format/block_names.hpp"
#include "safeamp/format/format_names.hpp"
#include "safeamp/format/format_spec.hpp"
#include "safeamp/policy/policy_value.hpp"

namespace safeamp::cuda {

/// A storage type on the device.
enum class device_dtype : std::uint8_t { f32, f16, bf16, f8_e4m3, f8_e5m2 };

/// How cuBLASLt accumulates: CUBLAS_COMPUTE_32F, _32F_FAST_TF32 (TF32 tensor cores on fp32 data), _16F.
enum class gemm_compute : std::uint8_t { f32, f32_fast_tf32, f16 };

[[nodiscard]] constexpr std::string_view dtype_name(device_dtype t) noexcept {
  switch (t) {
    case device_dtype::f32:
      return "f32";
    case device_dtype::f16:
      return "f16";
    case device_dtype::bf16:
      return "bf16";
    case device_dtype::f8_e4m3:
      return "f8_e4m3";
    case device_dtype::f8_e5m2:
      return "f8_e5m2";
  }
  return "?";
}

[[nodiscard]] constexpr int dtype_bytes(device_dtype t) noexcept {
  return t == device_dtype::f32 ? 4 : (t == device_dtype::f16 || t == device_dtype::bf16) ? 2 : 1;
}

[[nodiscard]] constexpr bool is_fp8(device_dtype t) noexcept {
  return t == device_dtype::f8_e4m3 || t == device_dtype::f8_e5m2;
}

/// The storage type that holds values of format f. TF32 is stored as fp32 (the tensor core reads the top
/// 19 bits). Throws safeamp::error for formats the device has no type for.
[[nodiscard]] inline device_dtype storage_dtype(format_spec f) {
  if (f == fp32 || f == tf32) return device_dtype::f32;
  if (f == fp16) return device_dtype::f16;
  if (f == bf16) return device_dtype::bf16;
  if (f == fp8_e4m3) return device_dtype::f8_e4m3;
  if (f == fp8_e5m2) return device_dtype::f8_e5m2;
  throw error("device format", format_name(f), "fp32, tf32, fp16, bf16, fp8_e4m3, fp8_e5m2");
}

/// Everything cuBLASLt needs to know about the types of one matmul D = alpha * op(A) op(B) + beta * C.
struct gemm_types {
  device_dtype a = device_dtype::f32;
  device_dtype b = device_dtype::f32;
  device_dtype c = device_dtype::f32;
  device_dtype d = device_dtype::f32;
  device_dtype bias = device_dtype::f32;  // epilogue bias vector type
  gemm_compute compute = gemm_compute::f32;
  device_dtype scale = device_dtype::f32;  // alpha/beta type (CUBLASLT_MATMUL_DESC_SCALE_TYPE)
  bool tensor_scales = false;              // fp8: per-tensor scale pointers for A, B (and D) are required
  int min_compute_capability = 80;         // 80: bf16/tf32 tensor cores (Ampere); 89: fp8 (Ada, Hopper)

  friend constexpr bool operator==(const gemm_types&, const gemm_types&) = default;
};

/// Types for a GEMM whose A and B inputs are in formats a_format / b_format, accumulating in `accumulate`
/// and writing D (and reading C) in `output`. Supported (cuBLASLt's cublasLtMatmul type table):
///   fp32 x fp32 -> fp32, accumulate fp32                 (CUBLAS_COMPUTE_32F)
///   tf32 x tf32 -> fp32, accumulate fp32                 (CUBLAS_COMPUTE_32F_FAST_TF32, fp32 storage)
///   fp16 x fp16 -> fp16 | fp32, accumulate fp32          (CUBLAS_COMPUTE_32F)
///   fp16 x fp16 -> fp16, accumulate fp16                 (CUBLAS_COMPUTE_16F)
///   bf16 x bf16 -> bf16 | fp32, accumulate fp32          (CUBLAS_COMPUTE_32F)
///   E4M3 x E4M3 | E4M3 x E5M2 | E5M2 x E4M3 -> fp32 | fp16 | bf16, accumulate fp32, per-tensor scales
/// Anything else throws safeamp::error naming the field, the value and what is accepted.
[[nodiscard]] inline gemm_types gemm_types_for(format_spec a_format, format_spec b_format, format_spec accumulate,
                                               format_spec output) {
  const auto name = [](format_spec f) { return std::string(format_name(f)); };
  gemm_types t;
  t.a = storage_dtype(a_format);
  t.b = storage_dtype(b_format);
  const bool a8 = is_fp8(t.a), b8 = is_fp8(t.b);
  if (a8 != b8 || (!a8 && !(a_format == b_format))) {
    throw error("gemm input formats", name(a_format) + " x " + name(b_format),
                "equal formats, or two fp8 formats (E4M3 x E4M3, E4M3 x E5M2, E5M2 x E4M3)");
  }
  if (a8 && t.a == device_dtype::f8_e5m2 && t.b == device_dtype::f8_e5m2) {
    throw error("gemm input formats", "fp8_e5m2 x fp8_e5m2", "at least one E4M3 input (cuBLASLt has no E5M2 x E5M2)");
  }
  const bool half_accumulate = accumulate == fp16;
  if (!(accumulate == fp32) && !(half_accumulate && a_format == fp16)) {
    throw error("gemm accumulate format", name(accumulate), "fp32 (or fp16 with fp16 inputs)");
  }
  t.d = storage_dtype(output);
  if (a_format == fp32 || a_format == tf32) {
    if (!(output == fp32)) throw error("gemm output format", name(output), "fp32 for fp32/tf32 inputs");
    t.compute = a_format == tf32 ? gemm_compute::f32_fast_tf32 : gemm_compute::f32;
  } else if (a_format == fp16 || a_format == bf16) {
    if (half_accumulate) {
      if (!(output == fp16)) throw error("gemm output format", name(output), "fp16 with fp16 accumulation");
      t.compute = gemm_compute::f16;
      t.scale = device_dtype::f16;
    } else if (!(output == fp32) && !(output == a_format)) {
      throw error("gemm output format", name(output),
                  "fp32 or " + name(a_format) + " for " + name(a_format) + " inputs");
    }
  } else {  // fp8
    if (!(output == fp32) && !(output == fp16) && !(output == bf16)) {
      throw error("gemm output format", name(output), "fp32, fp16 or bf16 for fp8 inputs");
    }
    t.tensor_scales = true;
    t.min_compute_capability = 89;
  }
  t.c = t.d;
  // The bias vector has C's type, except fp8 GEMMs with fp32 output, whose bias is bf16 (cuBLASLt docs).
  t.bias = (a8 && t.d == device_dtype::f32) ? device_dtype::bf16 : t.c;
  return t;
}

/// The format a policy's GEMM inputs are in: format_for(matmul), which the simulator and the planner read too (the
/// `compute` field only seeds it in a policy string). Block-scaled inputs (MX, NVFP4) are refused: this backend's
/// GEMMs take per-tensor formats.
[[nodiscard]] inline format_spec matmul_input_format(const precision_policy& p) {
  if (is_block_scaled(p.matmul_blocks)) {
    throw error("policy matmul", std::string(block_format_name(p.matmul_blocks)),
                "a per-tensor format (the CUDA backend's GEMMs have no block scaling)");
  }
  return p.format_for(op_class::matmul);
}

/// The forward GEMM of a layer under a policy: inputs in its matmul format (matmul_input_format).
[[nodiscard]] inline gemm_types forward_gemm_types(const precision_policy& p) {
  const format_spec in = matmul_input_format(p);
  return gemm_types_for(in, in, p.accumulate, p.output);
}

/// A backward GEMM (data or weight gradient): the incoming gradient is the A operand. It is in the
/// policy's gradient format when that is fp8 (E5M2 in fp8-hybrid), otherwise in the matmul format.
[[nodiscard]] inline gemm_types backward_gemm_types(const precision_policy& p) {
  const format_spec in = matmul_input_format(p);
  const bool fp8_grad = p.gradient == fp8_e4m3 || p.gradient == fp8_e5m2;
  return gemm_types_for(fp8_grad ? p.gradient : in, in, p.accumulate, p.output);
}

/// cudaDataType_t value of a device type (CUDA_R_32F, ...), and cublasComputeType_t of a compute mode.
[[nodiscard]] int to_cuda_data_type(device_dtype t) noexcept;
[[nodiscard]] int to_cublas_compute_type(gemm_compute c) noexcept;

}  // namespace safeamp::cuda
