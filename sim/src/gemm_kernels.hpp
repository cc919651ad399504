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

/// A writable matrix with contiguous rows: element (i, j) at data[i * row_stride + j].
struct output_view {
  float* data = nullptr;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t row_stride = 0;
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
  float beta = 0.0f;  // != 0: d holds C on entry
  // Every a(i, k) and b(k, j) is a value of a format whose products are exact in fp32
  // (products_exact_in_fp32), so the AVX-512 back-end may fuse the multiply and the add (same bits).
  bool exact_products = false;
};

/// Whether the product of any two values of f (finite, infinite or zero) is exactly an fp32 value: significands
/// of at most 12 bits (2 x 12 = 24, fp32's precision) and at most 5 exponent bits, so that a product's magnitude
/// lies between 2^-58 (fp32 normal from 2^-126) and 2^34 (fp32 finite below 2^128). fp16 (5, 10) and the
/// 8-, 6- and 4-bit formats qualify; bf16 (8 exponent bits) does not: its products can overflow or be subnormal.
[[nodiscard]] constexpr bool products_exact_in_fp32(int exponent_bits, int mantissa_bits) noexcept {
  return exponent_bits <= 5 && mantissa_bits <= 11;
}

/// op(B) (K, N) packed as panels of nr columns: panel p is K rows of nr floats, zero in the columns past N. Resizes
/// `out` only when it is too small (buffers are reused between calls).
void pack_b(const strided_view& b, std::int64_t nr, std::vector<float>& out);

/// One tile of shape s (tile_for(p, n)) on path p: acc = +0, acc = fl(acc + fl(a(i, k) * b(k, j))) for
/// k = 0..K-1, then the epilogue.
void run_tile(cpu_path p, const tile_shape& s, const tile_args& t) noexcept;

namespace avx2 {
void run_tile(const tile_args& t) noexcept;
}
namespace avx512 {
void run_tile(const tile_args& t, std::int64_t nr) noexcept;
}

}  // namespace safeamp::sim::detail
