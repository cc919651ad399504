// Emulated GEMM as a GPU tensor-core GEMM does it (cuBLASLt semantics):
//   D = alpha * (op(A) op(B)) + beta * C,   op(A) (M, K), op(B) (K, N), C and D (M, N)
// A and B are rounded to the compute format, the exact products are summed in the accumulation format,
// alpha/beta are applied in fp32 (the scale type), and the result is rounded once to the output format.
//
// Accumulation order (the same bits for every thread count, vector width and compiler flag):
//   a' = round_to(compute, a), b' = round_to(compute, b)     (round to nearest even; identity for fp32)
//   for every d(i, j):  acc = +0.0f
//                       for k = 0, 1, ..., K-1 in this order:  acc = R(acc + fl32(a'(i, k) * b'(k, j)))
//                       d(i, j) = fl32(alpha * acc)                        when beta == 0 (C is not read)
//                       d(i, j) = fl32(fl32(alpha * acc) + fl32(beta * c(i, j)))  otherwise
//                       d(i, j) = round_to(output, d(i, j), rounding, key)   (the output cast, stochastic keyed)
// where fl32 is one IEEE float rounding (to nearest even) and R is fl32 for accumulate == fp32 and fl32 then
// round_to(accumulate) for any other accumulation format. Every product and every sum is rounded separately
// (no fma: the library is built with -ffp-contract=off). Inputs of <= 12 significant bits (fp16, bf16, tf32,
// fp8) have exact fp32 products wherever the product stays in fp32's range (always for fp16 and fp8; bf16 and
// tf32 products can overflow or fall below fp32's subnormals), so only the additions round, as on tensor cores
// (whose order within K differs: a GPU result is not expected to match these bits, only the error model).
// Block-scaled inputs (formats.input_blocks, e.g. OCP MXFP8 or NVFP4): instead of the compute cast, op(A) (M, K)
// is quantized in blocks along its rows and op(B) (K, N) down its columns, so every block runs along K as on
// the GPU (safeamp::quantize_blocks, nearest even), and the dequantized values P X are multiplied with fp32
// accumulation in the order above (accumulate must be fp32). Products of dequantized values are exact only for
// MX; for NVFP4 P X carries one fp32 rounding of the tensor scale, as the GPU's scale product does.
// The fp32 path packs op(A) and op(B) once (rounding the packed copies to the compute format), computes tiles of
// outputs with their accumulators in registers and vectorises over j (each lane does its column's scalar
// operations, as separate multiplies and adds, or on AVX-512 as one fma where the compute format's products are
// all exact in fp32, fp16 and the 8-, 6- and 4-bit formats at their usual bias: then fl32(acc + a b) is fl32(acc +
// fl32(a b)) and the bits are the same); the tile kernel is chosen at run time for the CPU (portable, AVX2 or AVX-512,
// as the rounding kernels: cpu_path.hpp, SAFEAMP_CPU_PATH), and every kernel gives the same bits. D is cut into blocks
// of gemm_row_block x gemm_col_block elements (with several threads, down to 48 x 64 until each thread has sixteen),
// the unit of parallel work, which only decides which thread computes an element, never how.
#pragma once

#include <cstdint>

#include "safeamp/format/block_format.hpp"
#include "safeamp/format/format_spec.hpp"
#include "safeamp/format/philox.hpp"
#include "safeamp/format/round_options.hpp"
#include "safeamp/format/round_span.hpp"
#include "safeamp/sim/tensor.hpp"

namespace safeamp::sim {

/// Output rows and columns per independent block of the fp32-accumulation path (the unit of parallel work).
inline constexpr std::int64_t gemm_row_block = 128;
inline constexpr std::int64_t gemm_col_block = 128;

struct gemm_formats {
  format_spec compute = fp32;                    // A and B are rounded here first
  format_spec accumulate = fp32;                 // products are summed here
  format_spec output = fp32;                     // D is rounded here
  block_format input_blocks = no_block_scaling;  // when block-scaled: A and B quantized in blocks along K instead
  friend constexpr bool operator==(const gemm_formats&, const gemm_formats&) = default;
};

enum class transpose : std::uint8_t { none, transposed };

struct gemm_options {
  float alpha = 1.0f;
  float beta = 0.0f;
  transpose trans_a = transpose::none;
  transpose trans_b = transpose::none;
  round_options rounding{};  // for the output cast (input casts are round-to-nearest, as conversions are)
  philox_key key{};          // stochastic bits of the output cast
  int threads = 1;
};

/// d = alpha op(a) op(b) + beta d (d holds C on entry; its shape must be (M, N) when beta != 0, and is
/// resized otherwise). Returns the counters of the output cast. Throws safeamp::error on shape mismatch.
cast_stats gemm(const gemm_formats& formats, const matrix& a, const matrix& b, matrix& d, const gemm_options& opt = {});

/// The baseline: plain Eigen float GEMM d = a b, compiled with the same flags as gemm() (benchmarks only: its
/// blocking and fma use depend on the ISA flags and the cache sizes, so its bits are not reproducible).
void plain_gemm(const matrix& a, const matrix& b, matrix& d);

}  // namespace safeamp::sim
