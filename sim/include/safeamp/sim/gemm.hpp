// Emulated GEMM as a GPU tensor-core GEMM does it (cuBLASLt semantics):
//   D = alpha * (op(A) op(B)) + beta * C,   op(A) (M, K), op(B) (K, N), C and D (M, N)
// A and B are rounded to the compute format, the exact products are summed in the accumulation format,
// alpha/beta are applied in fp32 (the scale type), and the result is rounded once to the output format.
//
// Accumulation order (fixed for a given build, the same for every thread count):
//  - accumulate == fp32: the output is cut into row blocks of gemm_row_block rows (independent of the
//    thread count); each block is one Eigen float GEMM, C_blk = beta*C_blk, then C_blk += alpha*A_blk*B.
//    Eigen sums K in panels of kc (chosen from K and the cache sizes only) in registers and adds each
//    panel into C: a blocked fp32 order. Inputs of <= 12 significant bits (fp16, bf16, tf32, fp8) have
//    exact fp32 products, so every product is exact and only the additions round, as on tensor cores.
//  - any other accumulation format: k = 0..K-1 in order, acc = round_acc(acc + a*b) (slow, reference).
#pragma once

#include <cstdint>

#include "safeamp/format/format_spec.hpp"
#include "safeamp/format/philox.hpp"
#include "safeamp/format/round_options.hpp"
#include "safeamp/format/round_span.hpp"
#include "safeamp/sim/tensor.hpp"

namespace safeamp::sim {

/// Output rows per independent block of the fp32-accumulation path (the unit of parallel work).
inline constexpr std::int64_t gemm_row_block = 128;

struct gemm_formats {
  format_spec compute = fp32;     // A and B are rounded here first
  format_spec accumulate = fp32;  // products are summed here
  format_spec output = fp32;      // D is rounded here
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

/// The baseline: plain Eigen float GEMM d = a b, compiled with the same flags as gemm() (benchmarks).
void plain_gemm(const matrix& a, const matrix& b, matrix& d);

}  // namespace safeamp::sim
