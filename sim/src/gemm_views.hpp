// Internal to safeamp::sim: the emulated GEMM on strided views, so that callers holding blocks of larger
// matrices (attention's per-head Q, K, V and outputs) neither copy their operands nor their results. Same
// semantics, order and bits as gemm() (gemm.hpp), which is this on whole matrices.
#pragma once

#include "gemm_kernels.hpp"
#include "safeamp/sim/gemm.hpp"

namespace safeamp::sim::detail {

/// Operands the caller has already rounded to formats.compute as the GEMM would (round_operand), so the GEMM reads
/// them as they are: an operand used by several GEMMs is rounded once. Rounding to nearest is idempotent, so this
/// gives the bits of rounding in the GEMM. Ignored for block-scaled inputs (always quantized in the GEMM).
struct prerounded {
  bool a = false;
  bool b = false;
};

/// d = alpha a b + beta d, where a is op(A) (M, K), b is op(B) (K, N) and d (M, N) holds C on entry when
/// beta != 0. Transposition is in the views (strided_view::transposed); opt.trans_a and opt.trans_b are ignored.
/// The output cast keys element (i, j) as index i * N + j from opt.key, as for a contiguous d. Throws
/// safeamp::error on mismatched shapes or invalid formats.
cast_stats gemm_views(const gemm_formats& formats, const strided_view& a, const strided_view& b, const output_view& d,
                      const gemm_options& opt, prerounded done = {});

/// x rounded to f as the GEMM rounds its operands (a conversion: nearest even), into `scratch`; x itself when f is
/// fp32. For operands passed as prerounded. Large x is rounded in chunks on up to `threads` threads (same bits).
const matrix& round_operand(format_spec f, const matrix& x, matrix& scratch, int threads = 1);

/// x rounded to f in place, as round_operand rounds (nothing to do for fp32).
void round_operand_in_place(format_spec f, matrix& x, int threads = 1);

/// x as the operand of a GEMM computing in f, when its producer says every element of x is already a value of
/// x_format: x itself where that is f (or f is fp32), round_operand's copy into scratch otherwise. A format's values
/// are fixed points of rounding to it, so either way the bits are round_operand's. With format checks on
/// (format_checks_enabled, tensor.hpp), a promise that does not hold throws safeamp::error naming `what` instead.
const matrix& operand_from(format_spec f, format_spec x_format, const matrix& x, matrix& scratch, int threads,
                           const char* what);

/// operand_from's twin for an operand the caller keeps: x rounded to f in place, unless its producer says every
/// element is already a value of x_format == f (then only checked, as operand_from checks).
void operand_in_place(format_spec f, format_spec x_format, matrix& x, int threads, const char* what);

/// With format checks on: throws safeamp::error naming `what` if an element of x is not a value of f (NaN passes:
/// every format's rounding keeps a NaN a NaN). Nothing otherwise.
void check_format_promise(format_spec f, const matrix& x, const char* what);

/// Whether a GEMM in these formats rounds its operands element by element to formats.compute (so that prerounded
/// operands apply): a compute format other than fp32 and no block scaling.
[[nodiscard]] inline bool rounds_operands(const gemm_formats& f) noexcept {
  return f.compute != fp32 && !is_block_scaled(f.input_blocks);
}

/// The whole of x as the output of a GEMM.
[[nodiscard]] inline output_view output_of(matrix& x) noexcept { return {x.data(), x.rows(), x.cols(), x.cols()}; }

/// A whole row-major matrix as a view, transposed when asked.
[[nodiscard]] inline strided_view view_of(const matrix& x, transpose t = transpose::none) noexcept {
  const strided_view v{x.data(), x.rows(), x.cols(), x.cols(), 1};
  return t == transpose::transposed ? v.transposed() : v;
}

/// rows x cols of x from (row, col) on, as a view.
[[nodiscard]] inline strided_view block_of(const matrix& x, Eigen::Index row, Eigen::Index col, Eigen::Index rows,
                                           Eigen::Index cols) noexcept {
  return {x.data() + row * x.cols() + col, rows, cols, x.cols(), 1};
}

/// rows x cols of x from (row, col) on, writable.
[[nodiscard]] inline output_view output_block(matrix& x, Eigen::Index row, Eigen::Index col, Eigen::Index rows,
                                              Eigen::Index cols) noexcept {
  return {x.data() + row * x.cols() + col, rows, cols, x.cols()};
}

}  // namespace safeamp::sim::detail
