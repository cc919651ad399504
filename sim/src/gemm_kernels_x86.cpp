// The AVX2 and AVX-512 back-ends of the fixed-order GEMM tiles (gemm_kernels.hpp), compiled inside the target
// regions of cpu_path.hpp (SAFEAMP_DETAIL_AVX2_BEGIN / SAFEAMP_DETAIL_AVX512_BEGIN ... SAFEAMP_DETAIL_TARGET_END,
// as the rounding kernels are) so that a build without -march has them; run only when active_cpu_path() selects
// them.
//
// Each k step broadcasts a(i, k) of the tile's rows and multiplies it with the row b(k, j0..j0+nr) of op(B),
// then adds the products to the accumulators: _mm*_mul_ps then _mm*_add_ps, two roundings, exactly the scalar
// acc = fl(acc + fl(a * b)) in every lane; or, on AVX-512 when every product is exact (tile_args::exact_products),
// one _mm512_fmadd_ps, whose single rounding of acc + a * b is then the same fl(acc + fl(a * b)). (Which input NaN
// a NaN result carries was never fixed: the compiler may swap the operands of the mul and the add.) The AVX2
// tile stays unfused: its dispatch (cpu_path.hpp) does not require the FMA extension. The epilogue is the scalar one
// per lane too: fl(alpha * acc), and when beta != 0 fl(fl(alpha * acc) + fl(beta * c)). Columns past `cols` are masked:
// not loaded from op(B) (unless it is a zero-padded panel), not loaded from C and not stored. A tile at the bottom or
// right edge of a block runs a kernel of just its rows (AVX-512: and of just the 16-column vectors that hold kept
// columns), so no row or vector past the kept ones is computed; which kernel computes an element does not change its
// bits.
#include <algorithm>

#include "gemm_kernels.hpp"

#if defined(SAFEAMP_X86_KERNELS)

#include <immintrin.h>

namespace safeamp::sim::detail {

SAFEAMP_DETAIL_AVX2_BEGIN

// ---- AVX2: 6 rows x 16 columns (12 ymm accumulators) ---------------------------------------------------

namespace avx2 {
namespace {

constexpr int mr = 6;
constexpr int nr = 16;

// Lane c is all ones when c < n (n may be <= 0 or >= 8).
inline __m256i lanes_below(std::int64_t n) noexcept {
  const int kept = static_cast<int>(std::clamp<std::int64_t>(n, 0, 8));
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(kept), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// c: where C's 8 floats are (d itself, or the bias row's).
[[gnu::always_inline]] inline void store(float* d, const float* c, __m256 acc, __m256i keep, bool full, float alpha, float beta) noexcept {
  __m256 e = _mm256_mul_ps(_mm256_set1_ps(alpha), acc);
  if (full) {
    if (beta != 0.0f) e = _mm256_add_ps(e, _mm256_mul_ps(_mm256_set1_ps(beta), _mm256_loadu_ps(c)));
    _mm256_storeu_ps(d, e);
  } else {
    if (beta != 0.0f) e = _mm256_add_ps(e, _mm256_mul_ps(_mm256_set1_ps(beta), _mm256_maskload_ps(c, keep)));
    _mm256_maskstore_ps(d, keep, e);
  }
}

// Rows rows (<= mr) of the 6 x 16 tile.
template <int rows, bool Masked>
void tile(const tile_args& t) noexcept {
  const float* a_row[rows];
  for (int r = 0; r < rows; ++r) a_row[r] = t.a.data + std::min<std::int64_t>(t.i0 + r, t.a.rows - 1) * t.a.row_stride;
  const std::int64_t a_step = t.a.col_stride;
  const __m256i keep0 = lanes_below(t.cols), keep1 = lanes_below(t.cols - 8);
  // The loop's bounds and strides in locals: read through `t` they are reloaded every k step, and g++ then also
  // writes the accumulators back to the stack every step (measured 0.4x the in-register rate on Zen 3).
  const std::int64_t k_len = t.a.cols;
  const float* const b = t.b;
  const std::int64_t b_step = t.b_row_stride;
  __m256 acc[rows][2];
  for (auto& row : acc) row[0] = row[1] = _mm256_setzero_ps();
  for (std::int64_t k = 0; k < k_len; ++k) {
    const float* bk = b + k * b_step;
    const __m256 b0 = Masked ? _mm256_maskload_ps(bk, keep0) : _mm256_loadu_ps(bk);
    const __m256 b1 = Masked ? _mm256_maskload_ps(bk + 8, keep1) : _mm256_loadu_ps(bk + 8);
#pragma GCC unroll 6
    for (int r = 0; r < rows; ++r) {
      const __m256 ar = _mm256_broadcast_ss(a_row[r] + k * a_step);
      acc[r][0] = _mm256_add_ps(acc[r][0], _mm256_mul_ps(ar, b0));
      acc[r][1] = _mm256_add_ps(acc[r][1], _mm256_mul_ps(ar, b1));
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < rows; ++r) {
    float* dr = t.d + r * t.d_row_stride;
    const float* cr = t.c_row != nullptr ? t.c_row : dr;
    const __m256 lo = acc[r][0], hi = acc[r][1];  // both read here, not under the branch
    store(dr, cr, lo, keep0, t.cols >= 8, t.alpha, t.beta);
    if (t.cols > 8) store(dr + 8, cr + 8, hi, keep1, t.cols >= 16, t.alpha, t.beta);
  }
}

template <int rows>
void tile_rows(const tile_args& t) noexcept {
  if (t.cols >= nr || t.b_padded) {
    tile<rows, false>(t);
  } else {
    tile<rows, true>(t);
  }
}

// out[r * out_stride + c] = src[c * src_stride + r] for r, c < 8: eight loads, the 8 x 8 transpose in registers
// (unpack pairs, then quadruples, then the 128-bit halves), eight stores.
inline void transpose8x8(const float* src, std::int64_t src_stride, float* out, std::int64_t out_stride) noexcept {
  __m256 x[8];
  for (int c = 0; c < 8; ++c) x[c] = _mm256_loadu_ps(src + c * src_stride);
  __m256 t[8];
  for (int c = 0; c < 8; c += 2) {
    t[c] = _mm256_unpacklo_ps(x[c], x[c + 1]);
    t[c + 1] = _mm256_unpackhi_ps(x[c], x[c + 1]);
  }
  __m256 u[8];
  for (int c = 0; c < 8; c += 4) {
    u[c] = _mm256_shuffle_ps(t[c], t[c + 2], 0x44);
    u[c + 1] = _mm256_shuffle_ps(t[c], t[c + 2], 0xEE);
    u[c + 2] = _mm256_shuffle_ps(t[c + 1], t[c + 3], 0x44);
    u[c + 3] = _mm256_shuffle_ps(t[c + 1], t[c + 3], 0xEE);
  }
  for (int r = 0; r < 4; ++r) {
    _mm256_storeu_ps(out + r * out_stride, _mm256_permute2f128_ps(u[r], u[r + 4], 0x20));
    _mm256_storeu_ps(out + (r + 4) * out_stride, _mm256_permute2f128_ps(u[r], u[r + 4], 0x31));
  }
}

}  // namespace

void copy_rows_transposing(const strided_view& v, std::int64_t begin, std::int64_t end, float* out) noexcept {
  const std::int64_t k_len = v.cols;
  const std::int64_t k_stride = v.col_stride;
  std::int64_t i0 = begin;
  for (; i0 + 8 <= end; i0 += 8) {
    std::int64_t k0 = 0;
    for (; k0 + 8 <= k_len; k0 += 8) transpose8x8(v.data + i0 + k0 * k_stride, k_stride, out + i0 * k_len + k0, k_len);
    for (std::int64_t k = k0; k < k_len; ++k) {
      for (std::int64_t i = i0; i < i0 + 8; ++i) out[i * k_len + k] = v.data[i + k * k_stride];
    }
  }
  for (std::int64_t i = i0; i < end; ++i) {
    for (std::int64_t k = 0; k < k_len; ++k) out[i * k_len + k] = v.data[i + k * k_stride];
  }
}

void run_tile(const tile_args& t) noexcept {
  static_assert(mr == 6, "the switch below covers rows 1..mr");
  switch (t.rows) {
    case 1:
      return tile_rows<1>(t);
    case 2:
      return tile_rows<2>(t);
    case 3:
      return tile_rows<3>(t);
    case 4:
      return tile_rows<4>(t);
    case 5:
      return tile_rows<5>(t);
    default:
      return tile_rows<6>(t);
  }
}

}  // namespace avx2

SAFEAMP_DETAIL_TARGET_END

// ---- AVX-512: 8 rows x 32 columns (16 zmm accumulators) or 6 rows x 64 columns (24) ------------------

SAFEAMP_DETAIL_AVX512_BEGIN

namespace avx512 {
namespace {

// Bit c set when c < n (n may be <= 0 or >= 16).
inline __mmask16 lanes_below(std::int64_t n) noexcept {
  const auto kept = static_cast<unsigned>(std::clamp<std::int64_t>(n, 0, 16));
  return static_cast<__mmask16>((1u << kept) - 1u);
}

// c: where C's 16 floats are (d itself, or the bias row's).
inline void store(float* d, const float* c, __m512 acc, __mmask16 keep, float alpha, float beta) noexcept {
  __m512 e = _mm512_mul_ps(_mm512_set1_ps(alpha), acc);
  if (beta != 0.0f) e = _mm512_add_ps(e, _mm512_mul_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(keep, c)));
  _mm512_mask_storeu_ps(d, keep, e);
}

// mr rows x nv vectors of 16 columns. The wide tile (6 x 64) broadcasts one a(i, k) per 4 vector products, the
// narrow one (8 x 32) per 2, for op(B) of at most 32 columns; edge tiles have fewer rows or vectors.
template <int mr, int nv, bool Masked, bool Fused>
void tile(const tile_args& t) noexcept {
  const float* a_row[mr];
  for (int r = 0; r < mr; ++r) a_row[r] = t.a.data + std::min<std::int64_t>(t.i0 + r, t.a.rows - 1) * t.a.row_stride;
  const std::int64_t a_step = t.a.col_stride;
  __mmask16 keep[nv];
  for (int v = 0; v < nv; ++v) keep[v] = lanes_below(t.cols - 16 * v);
  __m512 acc[mr][nv];
  for (auto& row : acc) {
    for (__m512& x : row) x = _mm512_setzero_ps();
  }
  for (std::int64_t k = 0; k < t.a.cols; ++k) {
    const float* bk = t.b + k * t.b_row_stride;
    __m512 b[nv];
#pragma GCC unroll 4
    for (int v = 0; v < nv; ++v)
      b[v] = Masked ? _mm512_maskz_loadu_ps(keep[v], bk + 16 * v) : _mm512_loadu_ps(bk + 16 * v);
#pragma GCC unroll 8
    for (int r = 0; r < mr; ++r) {
      const __m512 ar = _mm512_set1_ps(a_row[r][k * a_step]);
#pragma GCC unroll 4
      for (int v = 0; v < nv; ++v) {
        if constexpr (Fused) {
          acc[r][v] = _mm512_fmadd_ps(ar, b[v], acc[r][v]);
        } else {
          acc[r][v] = _mm512_add_ps(acc[r][v], _mm512_mul_ps(ar, b[v]));
        }
      }
    }
  }
  for (int r = 0; r < mr; ++r) {
    float* dr = t.d + r * t.d_row_stride;
    const float* cr = t.c_row != nullptr ? t.c_row : dr;
    for (int v = 0; v < nv && 16 * v < t.cols; ++v) {
      store(dr + 16 * v, cr + 16 * v, acc[r][v], keep[v], t.alpha, t.beta);
    }
  }
}

// The kernel of `rows` rows and nv = ceil(cols / 16) vectors (nv <= max_nv); masked loads of op(B) unless every
// loaded column is a kept one or zero padding.
template <int rows, int nv, bool Fused>
void tile_masking(const tile_args& t) noexcept {
  if (t.cols >= 16 * nv || t.b_padded) {
    tile<rows, nv, false, Fused>(t);
  } else {
    tile<rows, nv, true, Fused>(t);
  }
}

template <int rows, int nv>
void tile_vectors(const tile_args& t) noexcept {
  if (t.exact_products) {
    tile_masking<rows, nv, true>(t);
  } else {
    tile_masking<rows, nv, false>(t);
  }
}

template <int rows, int max_nv>
void tile_rows(const tile_args& t) noexcept {
  const std::int64_t nv = (t.cols + 15) / 16;
  if constexpr (max_nv == 4) {
    if (nv >= 4) return tile_vectors<rows, 4>(t);
    if (nv == 3) return tile_vectors<rows, 3>(t);
  }
  if (nv >= 2) return tile_vectors<rows, 2>(t);
  tile_vectors<rows, 1>(t);
}

// The kernel of t.rows rows: 1..6 for the wide tile, 1..8 for the narrow one.
template <int max_nv>
void run_rows(const tile_args& t) noexcept {
  if constexpr (max_nv == 2) {
    if (t.rows >= 8) return tile_rows<8, max_nv>(t);
    if (t.rows == 7) return tile_rows<7, max_nv>(t);
  }
  switch (t.rows) {
    case 1:
      return tile_rows<1, max_nv>(t);
    case 2:
      return tile_rows<2, max_nv>(t);
    case 3:
      return tile_rows<3, max_nv>(t);
    case 4:
      return tile_rows<4, max_nv>(t);
    case 5:
      return tile_rows<5, max_nv>(t);
    default:
      return tile_rows<6, max_nv>(t);
  }
}

}  // namespace

void run_tile(const tile_args& t, std::int64_t nr) noexcept {
  if (nr == 64) {
    run_rows<4>(t);  // 6 x 64
  } else {
    run_rows<2>(t);  // 8 x 32
  }
}

}  // namespace avx512

SAFEAMP_DETAIL_TARGET_END

}  // namespace safeamp::sim::detail

#endif  // SAFEAMP_X86_KERNELS
