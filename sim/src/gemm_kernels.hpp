// Internal to safeamp::sim: the fp32-accumulation GEMM's packed operands and register-tile kernels, one
// back-end per CPU path (portable, AVX2, AVX-512; chosen at run time like the rounding kernels, cpu_path.hpp).
//
// Every back-end computes each output element as gemm.hpp documents: acc = +0, then for k = 0, 1, ..., K-1 in
// order acc = fl(acc + fl(a(i, k) * b(k, j))), then fl(alpha * acc) [+ fl(beta * c)]. A tile of mr x nr outputs
// keeps its accumulators in registers for the whole k loop and vectorises over the tile's columns, so a vector
// lane does exactly its column's scalar operations: the vector width cannot change a bit. Products and sums are
// separate instructions (mul, then add: the library is built with -ffp-contract=off and the kernels call the mul
// and add intrinsics explicitly), except where every product is exact in fp32 (tile_args::exact_products):
// there fl(a * b) = a * b, so an fma's fl(acc + a * b) is fl(acc + fl(a * b)) bit for bit and the AVX-512
// back-end uses one fma instead of the two instructions.
#pragma once

#include <cstdint>
#include <vector>

#include "safeamp/format/cpu_path.hpp"
#include "safeamp/format/format_spec.hpp"

namespace safeamp::sim::detail {

/// A read-only strided matrix: element (i, j) at data[i * row_stride + j * col_stride].
struct strided_view {
  const float* data = nullptr;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t row_stride = 0;
  std::int64_t col_stride = 1;
  [[nodiscard]] float operator()(std::int64_t i, std::int64_t j) const noexcept {
    return data[i * row_stride + j * col_stride];
  }
  /// The same memory read as the transposed matrix.
  [[nodiscard]] strided_view transposed() const noexcept { return {data, cols, rows, col_stride, row_stride}; }
};

/// A writable matrix with contiguous rows: element (i, j) at data[i * row_stride + j]. c_row, when not null: the
/// GEMM's C is this row of `cols` floats repeated down every row (a bias), read instead of D, so D need not be
/// filled with it first (beta still applies: fl(alpha * acc) + fl(beta * c_row[j])).
struct output_view {
  float* data = nullptr;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t row_stride = 0;
  const float* c_row = nullptr;
  [[nodiscard]] float& operator()(std::int64_t i, std::int64_t j) const noexcept { return data[i * row_stride + j]; }
};

/// The register tile of a back-end: mr output rows by nr output columns.
struct tile_shape {
  std::int64_t mr = 4;
  std::int64_t nr = 8;
};

/// The tile of path p for a D of n columns (portable 4 x 8, AVX2 4 x 16, AVX-512 6 x 64, or 8 x 32 when n <= 32).
[[nodiscard]] tile_shape tile_for(cpu_path p, std::int64_t n) noexcept;

/// What one tile reads and writes. Rows of op(A) are read in place through the view (row r of the tile is row
/// min(i0 + r, M - 1), so the tile's rows past M repeat the last row and are computed and never stored); the
/// tile's K x nr part of op(B) is read as K rows of floats `b_row_stride` apart, whose first `cols` columns are
/// the real ones (columns past `cols` are not read, or are the zero padding of a packed panel).
struct tile_args {
  strided_view a;                 // op(A), all of it
  std::int64_t i0 = 0;            // first row of the tile
  const float* b = nullptr;       // element (k, c) of the tile's part of op(B) at b[k * b_row_stride + c]
  std::int64_t b_row_stride = 0;  // >= nr when c < nr may be read; a packed panel has exactly nr
  bool b_padded = false;          // the nr - cols columns past `cols` may be read (a zero-padded panel)
  float* d = nullptr;             // element (r, c) of the tile's part of D at d[r * d_row_stride + c]
  std::int64_t d_row_stride = 0;
  std::int64_t rows = 0;  // rows of the tile that are kept (<= mr)
  std::int64_t cols = 0;  // columns of the tile that are kept (<= nr)
  float alpha = 1.0f;
  float beta = 0.0f;              // != 0: d holds C on entry, or c_row does
  const float* c_row = nullptr;   // not null: C's element (r, c) is c_row[c] for every row r (d is not read)
  // Every a(i, k) and b(k, j) is a value of a format whose products are exact in fp32
  // (products_exact_in_fp32), so the AVX-512 back-end may fuse the multiply and the add (same bits).
  bool exact_products = false;
};

/// Whether the product of any two values of f (finite, infinite or zero) is exactly an fp32 value. Values of f
/// have at most digits(f) significant bits and are multiples of its quantum 2^(min_exponent(f) - mantissa_bits),
/// so a product has at most 2 digits(f) bits and is a multiple of the quantum squared; it is a float when
/// 2 digits(f) <= 24 (fp32's precision), the quantum squared is a multiple of 2^-149 (fp32's smallest
/// subnormal: no product falls between floats below the normal range) and the largest product, below
/// 2^(2 max_exponent(f) + 2), is below 2^128. fp16 and the 8-, 6- and 4-bit formats at their usual bias qualify;
/// bf16 and tf32 do not (their products can overflow or be subnormal), nor does a small format whose bias_offset
/// puts its quantum below 2^-75 (e.g. 5 exponent bits, 2 mantissa bits and bias_offset 64: quantum 2^-80).
[[nodiscard]] constexpr bool products_exact_in_fp32(format_spec f) noexcept {
  return 2 * digits(f) <= 24 && 2 * (min_exponent(f) - f.mantissa_bits) >= -149 && 2 * max_exponent(f) + 2 <= 128;
}

/// op(B) (K, N) packed as panels of nr columns: panel p is K rows of nr floats, zero in the columns past N. Resizes
/// `out` only when it is too small (buffers are reused between calls). Large operands are packed by up to `threads`
/// threads, one panel per task.
void pack_b(const strided_view& b, std::int64_t nr, std::vector<float>& out, int threads = 1);

/// Rows [begin, end) of op(A) = v copied row-major into out (element (i, k) at out[i * v.cols + k]): the copy the
/// GEMM makes of an op(A) whose rows are strided. Plain copies of floats, the same on every path; on the vector
/// paths a v whose columns are contiguous (v.row_stride == 1, op(A) = X^T) moves in 8 x 8 blocks transposed in
/// registers.
void copy_rows(cpu_path p, const strided_view& v, std::int64_t begin, std::int64_t end, float* out) noexcept;

/// One tile of shape s (tile_for(p, n)) on path p: acc = +0, acc = fl(acc + fl(a(i, k) * b(k, j))) for
/// k = 0..K-1, then the epilogue.
void run_tile(cpu_path p, const tile_shape& s, const tile_args& t) noexcept;

namespace avx2 {
void run_tile(const tile_args& t) noexcept;
void copy_rows_transposing(const strided_view& v, std::int64_t begin, std::int64_t end, float* out) noexcept;
}
namespace avx512 {
void run_tile(const tile_args& t, std::int64_t nr) noexcept;
}

}  // namespace safeamp::sim::detail
