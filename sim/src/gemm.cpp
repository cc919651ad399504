// Emulated GEMM (see gemm.hpp for the semantics and the accumulation order).
#include "safeamp/sim/gemm.hpp"

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "safeamp/error.hpp"
#include "safeamp/format/block_names.hpp"
#include "safeamp/format/block_quantize.hpp"
#include "safeamp/format/format_names.hpp"
#include "safeamp/sim/parallel.hpp"

namespace safeamp::sim {
namespace {

std::string shape(Eigen::Index r, Eigen::Index c) { return std::to_string(r) + "x" + std::to_string(c); }

// Work (multiply-adds) below which threads are not started: their start-up costs more than they save.
constexpr double parallel_min_work = 1 << 18;

// ---- fp32 accumulation: fixed-order register tiles ----------------------------------------------------
// Every d(i, j) is acc = +0; acc = fl(acc + fl(a(i, k) * b(k, j))) for k = 0, 1, ..., K-1 in order, then the
// epilogue below. A tile of tile_rows x tile_cols outputs keeps its accumulators in registers for the whole
// k loop; the loop over the tile's columns is what the compiler vectorises, and a vector lane does exactly
// the scalar operation of its column, so the vector width (SSE, AVX, AVX-512) cannot change a bit. The build
// uses -ffp-contract=off (cmake/SafeampFloatingPoint.cmake): products and sums are never fused into an fma.
constexpr Eigen::Index tile_rows = 4;
constexpr Eigen::Index tile_cols = 8;

// op(B) (K, N) packed as panels of tile_cols columns, each panel K rows of tile_cols floats (zero-padded at the
// right edge; padded columns are computed and discarded, so they cannot touch a kept column).
template <class B>
std::vector<float> pack_b(const B& b) {
  const Eigen::Index k_len = b.rows();
  const Eigen::Index panels = (b.cols() + tile_cols - 1) / tile_cols;
  std::vector<float> packed(static_cast<std::size_t>(panels * k_len * tile_cols), 0.0f);
  for (Eigen::Index p = 0; p < panels; ++p) {
    float* panel = packed.data() + p * k_len * tile_cols;
    const Eigen::Index cols = std::min(tile_cols, b.cols() - p * tile_cols);
    for (Eigen::Index k = 0; k < k_len; ++k) {
      for (Eigen::Index c = 0; c < cols; ++c) panel[k * tile_cols + c] = b(k, p * tile_cols + c);
    }
  }
  return packed;
}

// acc(r, c) = sum over k = 0..K-1, in order, of a_tile(k, r) * b_panel(k, c); a_tile is (K, tile_rows).
void tile_kernel(const float* a_tile, const float* b_panel, Eigen::Index k_len,
                 float (&acc)[tile_rows][tile_cols]) noexcept {
  for (auto& row : acc) {
    for (float& v : row) v = 0.0f;
  }
  for (Eigen::Index k = 0; k < k_len; ++k) {
    const float* bk = b_panel + k * tile_cols;
    for (Eigen::Index r = 0; r < tile_rows; ++r) {
      const float ark = a_tile[k * tile_rows + r];
      for (Eigen::Index c = 0; c < tile_cols; ++c) acc[r][c] = acc[r][c] + ark * bk[c];
    }
  }
}

// The epilogue shared by both paths: fl(alpha * acc), plus fl(beta * c) in one more rounding when beta != 0.
inline float epilogue(float acc, float alpha, float beta, float c) noexcept {
  return beta == 0.0f ? alpha * acc : alpha * acc + beta * c;
}

template <class A, class B>
void tiled_fp32(const A& a, const B& b, matrix& d, float alpha, float beta, int threads) {
  const Eigen::Index m = d.rows();
  const Eigen::Index n = d.cols();
  const Eigen::Index k_len = a.cols();
  const std::vector<float> packed_b = pack_b(b);
  const Eigen::Index panels = (n + tile_cols - 1) / tile_cols;
  const std::int64_t blocks = (m + gemm_row_block - 1) / gemm_row_block;
  auto run = [&](std::int64_t blk) {
    const Eigen::Index r_end = std::min<Eigen::Index>(m, (blk + 1) * gemm_row_block);
    std::vector<float> a_tile(static_cast<std::size_t>(k_len * tile_rows));
    float acc[tile_rows][tile_cols];
    for (Eigen::Index i0 = blk * gemm_row_block; i0 < r_end; i0 += tile_rows) {
      const Eigen::Index rows = std::min(tile_rows, r_end - i0);
      for (Eigen::Index k = 0; k < k_len; ++k) {  // (K, tile_rows), zero rows past the edge (discarded)
        for (Eigen::Index r = 0; r < tile_rows; ++r)
          a_tile[static_cast<std::size_t>(k * tile_rows + r)] = r < rows ? a(i0 + r, k) : 0.0f;
      }
      for (Eigen::Index p = 0; p < panels; ++p) {
        tile_kernel(a_tile.data(), packed_b.data() + p * k_len * tile_cols, k_len, acc);
        const Eigen::Index cols = std::min(tile_cols, n - p * tile_cols);
        for (Eigen::Index r = 0; r < rows; ++r) {
          for (Eigen::Index c = 0; c < cols; ++c) {
            float& out = d(i0 + r, p * tile_cols + c);
            out = epilogue(acc[r][c], alpha, beta, out);
          }
        }
      }
    }
  };
  const double work = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k_len);
  parallel_for(work >= parallel_min_work ? threads : 1, blocks, run);
}

// Any other accumulation format: the same order, the sum rounded to acc_format after every addition.
template <class A, class B>
void sequential_acc(format_spec acc_format, const A& a, const B& b, matrix& d, float alpha, float beta) {
  for (Eigen::Index i = 0; i < d.rows(); ++i) {
    for (Eigen::Index j = 0; j < d.cols(); ++j) {
      float acc = 0.0f;
      for (Eigen::Index k = 0; k < a.cols(); ++k) acc = round_scalar(acc_format, acc + a(i, k) * b(k, j));
      d(i, j) = epilogue(acc, alpha, beta, d(i, j));
    }
  }
}

// op(x) quantized in blocks along K in place: op(A) (M, K) along its rows, op(B) (K, N) down its columns.
void quantize_operand(const block_format& blocks, matrix& m, block_axis axis) {
  const std::size_t rows = static_cast<std::size_t>(m.rows());
  const std::size_t cols = static_cast<std::size_t>(m.cols());
  if (rows == 0 || cols == 0) return;
  const std::size_t bs = static_cast<std::size_t>(blocks.block_size);
  std::vector<float> scales(axis == block_axis::rows ? rows * ((cols + bs - 1) / bs) : ((rows + bs - 1) / bs) * cols);
  const std::span<float> data(m.data(), rows * cols);
  (void)quantize_blocks(blocks, data, data, scales, {.rows = rows, .axis = axis});
}

}  // namespace

cast_stats gemm(const gemm_formats& f, const matrix& a, const matrix& b, matrix& d, const gemm_options& opt) {
  const bool ta = opt.trans_a == transpose::transposed;
  const bool tb = opt.trans_b == transpose::transposed;
  const Eigen::Index m = ta ? a.cols() : a.rows();
  const Eigen::Index ka = ta ? a.rows() : a.cols();
  const Eigen::Index kb = tb ? b.cols() : b.rows();
  const Eigen::Index n = tb ? b.rows() : b.cols();
  if (ka != kb) {
    throw error("gemm op(B) rows", std::to_string(kb) + " (op(A) " + shape(m, ka) + ", op(B) " + shape(kb, n) + ")",
                "the columns of op(A) (" + std::to_string(ka) + ")");
  }
  if (opt.beta != 0.0f && (d.rows() != m || d.cols() != n)) {
    throw error("gemm C shape", shape(d.rows(), d.cols()), shape(m, n) + " when beta != 0");
  }
  if (!is_valid(f.compute) || !is_valid(f.accumulate) || !is_valid(f.output)) {
    throw error("gemm formats", format_name(f.compute) + "/" + format_name(f.accumulate) + "/" + format_name(f.output),
                "valid formats");
  }
  const bool blocked = is_block_scaled(f.input_blocks);
  if (blocked && (!is_valid(f.input_blocks) || f.accumulate != fp32)) {
    throw error("gemm block-scaled inputs",
                block_format_name(f.input_blocks) + " accumulating in " + format_name(f.accumulate),
                "a valid block format (mxfp8, mxfp8_e5m2, mxfp6, mxfp6_e3m2, mxfp4, nvfp4) with fp32 accumulation");
  }
  if (opt.beta == 0.0f) d.resize(m, n);

  // Inputs in the compute format (a conversion: round to nearest), or block-quantized along K. Copies are
  // made in op() layout.
  matrix a_low, b_low;
  const bool round_inputs = blocked || f.compute != fp32;
  // op(x): a copy of x, transposed when the GEMM reads it transposed.
  const auto op_copy = [](const matrix& x, bool transposed, matrix& out) {
    if (transposed) {
      out = x.transpose();
    } else {
      out = x;
    }
  };
  if (blocked) {
    op_copy(a, ta, a_low);
    op_copy(b, tb, b_low);
    quantize_operand(f.input_blocks, a_low, block_axis::rows);
    quantize_operand(f.input_blocks, b_low, block_axis::columns);
  } else if (round_inputs) {
    if (ta) {
      a_low = a.transpose();
      (void)cast_in_place(a_low, f.compute, round_options{}, philox_key{});
    } else {
      (void)cast_copy(a, a_low, f.compute, round_options{}, philox_key{});
    }
    if (tb) {
      b_low = b.transpose();
      (void)cast_in_place(b_low, f.compute, round_options{}, philox_key{});
    } else {
      (void)cast_copy(b, b_low, f.compute, round_options{}, philox_key{});
    }
  }

  if (f.accumulate == fp32) {
    if (round_inputs) {
      tiled_fp32(a_low, b_low, d, opt.alpha, opt.beta, opt.threads);
    } else if (!ta && !tb) {
      tiled_fp32(a, b, d, opt.alpha, opt.beta, opt.threads);
    } else if (ta && !tb) {
      tiled_fp32(a.transpose(), b, d, opt.alpha, opt.beta, opt.threads);
    } else if (!ta && tb) {
      tiled_fp32(a, b.transpose(), d, opt.alpha, opt.beta, opt.threads);
    } else {
      tiled_fp32(a.transpose(), b.transpose(), d, opt.alpha, opt.beta, opt.threads);
    }
  } else {
    if (!round_inputs) {
      op_copy(a, ta, a_low);
      op_copy(b, tb, b_low);
    }
    sequential_acc(f.accumulate, a_low, b_low, d, opt.alpha, opt.beta);
  }
  return cast_in_place(d, f.output, opt.rounding, opt.key);
}

void plain_gemm(const matrix& a, const matrix& b, matrix& d) {
  d.resize(a.rows(), b.cols());
  d.noalias() = a * b;
}

}  // namespace safeamp::sim
