// Packing and the portable back-end of the fixed-order GEMM tiles, and the choice of back-end (gemm_kernels.hpp).
#include "gemm_kernels.hpp"

#include <algorithm>
#include <cstring>

#include "safeamp/sim/parallel.hpp"

namespace safeamp::sim::detail {
namespace {

constexpr tile_shape portable_tile{.mr = 4, .nr = 8};
constexpr tile_shape avx2_tile{.mr = 6, .nr = 16};
constexpr tile_shape avx512_wide_tile{.mr = 6, .nr = 64};
constexpr tile_shape avx512_narrow_tile{.mr = 8, .nr = 32};

// Rows of a panel transposed at a time by pack_b: 64 rows of a 64-column panel are 16 KiB, which L1 holds.
constexpr std::int64_t pack_k_block = 64;
// Floats of packed op(B) from which pack_b shares its panels among threads (a 128 x 256 operand and larger).
constexpr std::size_t pack_parallel_min_floats = std::size_t{1} << 15;

// The portable tile: plain loops the compiler vectorises over the columns with the build's own flags (SSE2 in
// a default x86-64 build); each lane does its column's scalar operations. It reads all nr columns of op(B), so
// the caller hands it packed panels (gemm.cpp packs op(B) on this path).
void run_tile_portable(const tile_args& t) noexcept {
  constexpr std::int64_t mr = portable_tile.mr;
  constexpr std::int64_t nr = portable_tile.nr;
  const float* a_row[mr];
  for (std::int64_t r = 0; r < mr; ++r) a_row[r] = t.a.data + std::min(t.i0 + r, t.a.rows - 1) * t.a.row_stride;
  float acc[mr][nr];
  for (auto& row : acc) {
    for (float& v : row) v = 0.0f;
  }
  for (std::int64_t k = 0; k < t.a.cols; ++k) {
    const float* bk = t.b + k * t.b_row_stride;
    for (std::int64_t r = 0; r < mr; ++r) {
      const float ark = a_row[r][k * t.a.col_stride];
      for (std::int64_t c = 0; c < nr; ++c) acc[r][c] = acc[r][c] + ark * bk[c];
    }
  }
  for (std::int64_t r = 0; r < t.rows; ++r) {
    for (std::int64_t c = 0; c < t.cols; ++c) {
      float& out = t.d[r * t.d_row_stride + c];
      const float cv = t.c_row != nullptr ? t.c_row[c] : out;
      out = t.beta == 0.0f ? t.alpha * acc[r][c] : t.alpha * acc[r][c] + t.beta * cv;
    }
  }
}

}  // namespace

tile_shape tile_for(cpu_path p, std::int64_t n) noexcept {
  switch (p) {
    case cpu_path::avx512:
      return n > avx512_narrow_tile.nr ? avx512_wide_tile : avx512_narrow_tile;
    case cpu_path::avx2:
      return avx2_tile;
    case cpu_path::portable:
      return portable_tile;
  }
  return portable_tile;
}

void pack_b(const strided_view& b, std::int64_t nr, std::vector<float>& out, int threads) {
  const std::int64_t k_len = b.rows;
  const std::int64_t panels = (b.cols + nr - 1) / nr;
  const auto size = static_cast<std::size_t>(panels * nr * k_len);
  if (out.size() < size) out.resize(size);
  float* const base = out.data();
  const auto pack_panel = [&](std::int64_t p) {
    const std::int64_t j0 = p * nr;
    float* panel = base + j0 * k_len;  // panel p follows p panels of K * nr floats
    const std::int64_t cols = std::min(nr, b.cols - j0);
    if (b.col_stride == 1) {  // rows of op(B) contiguous: copy each panel row, zero its padding
      for (std::int64_t k = 0; k < k_len; ++k) {
        float* dst = panel + k * nr;
        std::memcpy(dst, b.data + k * b.row_stride + j0, static_cast<std::size_t>(cols) * sizeof(float));
        std::fill(dst + cols, dst + nr, 0.0f);
      }
      return;
    }
    // e.g. op(B) = X^T of a row-major X: column j of op(B) is row j of X, read along k. A transpose in blocks of
    // pack_k_block rows of the panel, so that the lines it writes stay in L1 while its columns are filled.
    for (std::int64_t k0 = 0; k0 < k_len; k0 += pack_k_block) {
      const std::int64_t k1 = std::min(k_len, k0 + pack_k_block);
      for (std::int64_t c = 0; c < cols; ++c) {
        const float* src = b.data + (j0 + c) * b.col_stride;
        for (std::int64_t k = k0; k < k1; ++k) panel[k * nr + c] = src[k * b.row_stride];
      }
      for (std::int64_t k = k0; k < k1; ++k) std::fill(panel + k * nr + cols, panel + (k + 1) * nr, 0.0f);
    }
  };
  // Each panel is written by one task; which thread packs it changes no float.
  parallel_for(size >= pack_parallel_min_floats ? threads : 1, panels, pack_panel);
}

void copy_rows(cpu_path p, const strided_view& v, std::int64_t begin, std::int64_t end, float* out) noexcept {
#if defined(SAFEAMP_X86_KERNELS)
  if (p != cpu_path::portable && v.row_stride == 1) return avx2::copy_rows_transposing(v, begin, end, out);
#endif
  (void)p;
  // Blocks of 16 x 16: the 16 lines read and the 16 written stay in L1 while the block is filled.
  constexpr std::int64_t block = 16;
  const std::int64_t k_len = v.cols;
  for (std::int64_t i0 = begin; i0 < end; i0 += block) {
    const std::int64_t i1 = std::min(end, i0 + block);
    for (std::int64_t k0 = 0; k0 < k_len; k0 += block) {
      const std::int64_t k1 = std::min(k_len, k0 + block);
      for (std::int64_t k = k0; k < k1; ++k) {
        for (std::int64_t i = i0; i < i1; ++i) out[i * k_len + k] = v(i, k);
      }
    }
  }
}

void run_tile(cpu_path p, const tile_shape& s, const tile_args& t) noexcept {
#if defined(SAFEAMP_X86_KERNELS)
  if (p == cpu_path::avx512) return avx512::run_tile(t, s.nr);
  if (p == cpu_path::avx2) return avx2::run_tile(t);
#endif
  (void)p;
  (void)s;
  run_tile_portable(t);
}

}  // namespace safeamp::sim::detail
