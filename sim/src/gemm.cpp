// Emulated GEMM (see gemm.hpp for the semantics and the accumulation order).
#include "safeamp/sim/gemm.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gemm_views.hpp"
#include "safeamp/error.hpp"
#include "safeamp/format/block_names.hpp"
#include "safeamp/format/block_quantize.hpp"
#include "safeamp/format/format_names.hpp"
#include "safeamp/sim/parallel.hpp"

namespace safeamp::sim {
namespace {

using detail::output_view;
using detail::strided_view;

std::string shape(Eigen::Index r, Eigen::Index c) { return std::to_string(r) + "x" + std::to_string(c); }

// Elements per task of a parallel operand rounding (round_operand).
constexpr std::int64_t round_chunk = 16384;

// Work (multiply-adds) below which threads are not started: their start-up costs more than they save.
constexpr double parallel_min_work = 1 << 18;

// The calling thread's rounded operands and packed op(B), kept between calls so that a training step does not
// allocate them again for every GEMM (the worker threads of one call only read them).
struct gemm_buffers {
  std::vector<float> a, b, packed_b;
};
gemm_buffers& thread_buffers() {
  thread_local gemm_buffers buffers;
  return buffers;
}

// v rounded to f (a conversion: round to nearest even) into `buffer`, returned as a view of the same orientation:
// a view whose rows (or columns) are contiguous is rounded line by line with round_span, one call when the lines
// are adjacent, so the kernels read the copy as they would have read v.
strided_view rounded_copy(format_spec f, const strided_view& v, std::vector<float>& buffer) {
  const auto size = static_cast<std::size_t>(v.rows * v.cols);
  if (buffer.size() < size) buffer.resize(size);
  float* out = buffer.data();
  const bool by_rows = v.col_stride == 1;
  if (by_rows || v.row_stride == 1) {
    const std::int64_t lines = by_rows ? v.rows : v.cols;
    const std::int64_t length = by_rows ? v.cols : v.rows;
    const std::int64_t stride = by_rows ? v.row_stride : v.col_stride;
    const auto line_span = [&](std::int64_t first, std::int64_t count) {
      (void)round_span(f, std::span<const float>(v.data + first * stride, static_cast<std::size_t>(count * length)),
                       std::span<float>(out + first * length, static_cast<std::size_t>(count * length)),
                       round_options{}, philox_key{});
    };
    if (stride == length) {
      line_span(0, lines);
    } else {
      for (std::int64_t line = 0; line < lines; ++line) line_span(line, 1);
    }
    return by_rows ? strided_view{out, v.rows, v.cols, v.cols, 1} : strided_view{out, v.rows, v.cols, 1, v.rows};
  }
  for (std::int64_t i = 0; i < v.rows; ++i) {
    for (std::int64_t j = 0; j < v.cols; ++j) out[i * v.cols + j] = v(i, j);
  }
  (void)round_span(f, std::span<float>(out, size), round_options{}, philox_key{});
  return {out, v.rows, v.cols, v.cols, 1};
}

// Rows of op(A) per task of row_major_copy.
constexpr std::int64_t transpose_rows = 64;
// Columns of D from which a strided op(A) is copied row-major first: the copy costs M x K once, the strided reads
// cost a cache line per k and tile; for a few panels of D the copy would not pay for itself.
constexpr std::int64_t copy_a_min_cols = 32;

// op(A) whose rows are not contiguous (op(A) = X^T of a row-major X, the weight gradients' dY^T) copied into
// `buffer` row-major, and rounded to f there when `round` is set (nearest even: each element on its own, so the
// same bits as rounding it in place). The tiles read op(A) a row at a time along k; read through the strides they
// would load a new cache line for every k of every tile (measured 0.5-0.7x the row-major rate on Zen 3, AVX2).
// Rows are cut into tasks of transpose_rows: the same floats on any thread count.
strided_view row_major_copy(format_spec f, bool round, const strided_view& v, std::vector<float>& buffer,
                            int threads) {
  const auto size = static_cast<std::size_t>(v.rows * v.cols);
  if (buffer.size() < size) buffer.resize(size);
  float* const out = buffer.data();
  const std::int64_t k_len = v.cols;
  const cpu_path path = active_cpu_path();
  parallel_chunks(threads, v.rows, transpose_rows, [&](std::int64_t begin, std::int64_t end) {
    detail::copy_rows(path, v, begin, end, out);
    if (round) {
      const auto count = static_cast<std::size_t>((end - begin) * k_len);
      (void)round_span(f, std::span<float>(out + begin * k_len, count), round_options{}, philox_key{});
    }
  });
  return {out, v.rows, v.cols, v.cols, 1};
}

// The smaller blocks of a GEMM run by several threads: 48 rows are whole tiles of every path (6, 8 and 4 rows),
// 64 columns whole panels (64, 32, 16, 8); until each thread has this many blocks. Tasks are taken in turn, so a
// loop ends when its last block does, and the other threads wait for it: with 16 blocks a thread rather than 4, the
// 4x wider peer shape (512-row GEMMs of 128, 384 and 512 columns) trained 1.5-2% faster on two threads of one
// core (Intel model 207, 4 interleaved A/B runs of 6-8 rounds; docs/performance.md).
constexpr std::int64_t parallel_min_row_block = 48;
constexpr std::int64_t parallel_min_col_block = 64;
constexpr std::int64_t parallel_blocks_per_thread = 16;

// Rows of D above which op(B) is packed even when its rows are contiguous: packing costs K x N once, reading
// op(B) in place costs a strided stream per tile, which pays off only for few row blocks.
constexpr std::int64_t pack_b_min_rows = 2 * gemm_row_block;

// ---- fp32 accumulation: fixed-order register tiles (gemm_kernels.hpp) ----------------------------------
// For a compute format other than fp32, op(A) and op(B) are rounded once into copies; the kernels read op(A) in
// place (or a row-major copy, when its rows are strided) and op(B) in place or from packed panels; the
// (gemm_row_block x gemm_col_block) blocks of D are independent tasks of whole tiles.
void tiled_fp32(strided_view a, strided_view b, const output_view& d, format_spec compute, float alpha, float beta,
                int threads, detail::prerounded done) {
  const cpu_path path = active_cpu_path();
  const detail::tile_shape t = detail::tile_for(path, d.cols);
  const std::int64_t m = d.rows, n = d.cols, k_len = a.cols;
  gemm_buffers& buffers = thread_buffers();
  const double work = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k_len);
  const int workers = work >= parallel_min_work ? threads : 1;
  if (a.col_stride != 1 && n >= copy_a_min_cols) {
    a = row_major_copy(compute, compute != fp32 && !done.a, a, buffers.a, workers);
  } else if (compute != fp32 && !done.a) {
    a = rounded_copy(compute, a, buffers.a);
  }
  if (compute != fp32 && !done.b) b = rounded_copy(compute, b, buffers.b);
  // The portable kernel reads whole panels; the vector kernels read op(B) in place when its rows are contiguous.
  const bool packed = path == cpu_path::portable || b.col_stride != 1 || m > pack_b_min_rows;
  if (packed) detail::pack_b(b, t.nr, buffers.packed_b, workers);
  const float* b_base = packed ? buffers.packed_b.data() : b.data;  // the caller's buffers, not the workers'
  const std::int64_t b_row_stride = packed ? t.nr : b.row_stride;
  // With more than one thread the blocks shrink until each thread has several (a 128 x 384 weight gradient is
  // three 128 x 128 blocks, which two threads would share 2:1); where a block ends changes no element's bits.
  std::int64_t row_block = gemm_row_block, col_block = gemm_col_block;
  const auto blocks = [&] { return ((m + row_block - 1) / row_block) * ((n + col_block - 1) / col_block); };
  if (workers > 1) {
    if (blocks() < parallel_blocks_per_thread * workers) col_block = parallel_min_col_block;
    if (blocks() < parallel_blocks_per_thread * workers) row_block = parallel_min_row_block;
  }
  const std::int64_t col_blocks = (n + col_block - 1) / col_block;
  // Both operands hold values of `compute` (rounded above or by the caller); fp16 products are exact in fp32.
  const bool exact = compute != fp32 && detail::products_exact_in_fp32(compute);
  auto run = [&](std::int64_t task) {
    const std::int64_t i_begin = task / col_blocks * row_block;
    const std::int64_t j_begin = task % col_blocks * col_block;
    const std::int64_t i_end = std::min(m, i_begin + row_block);
    const std::int64_t j_end = std::min(n, j_begin + col_block);
    // Tiles stop at the block's edges (128 rows are no multiple of 6), so each element has one task. The block's
    // last rows, when more than one tile's but less than two, go to two tiles of about half each (8 rows of the
    // 6-row tile: 4 + 4, not 6 + 2): a 2-row tile loads as much of op(B) per FMA as three times its rows would
    // need, and ran at half the 6-row tile's speed (1-thread profile of the 4x wider peer shape, Intel model 207).
    // The rows of a tile decide how many elements it computes at once, never how one is computed.
    for (std::int64_t i0 = i_begin, rows = 0; i0 < i_end; i0 += rows) {
      const std::int64_t left = i_end - i0;
      rows = left > t.mr && left < 2 * t.mr ? (left + 1) / 2 : std::min(t.mr, left);
      for (std::int64_t j0 = j_begin; j0 < j_end; j0 += t.nr) {
        detail::run_tile(path, t,
                         {.a = a,
                          .i0 = i0,
                          .b = b_base + (packed ? j0 * k_len : j0),
                          .b_row_stride = b_row_stride,
                          .b_padded = packed,
                          .d = &d(i0, j0),
                          .d_row_stride = d.row_stride,
                          .rows = rows,
                          .cols = std::min(t.nr, j_end - j0),
                          .alpha = alpha,
                          .beta = beta,
                          .c_row = d.c_row != nullptr ? d.c_row + j0 : nullptr,
                          .exact_products = exact});
      }
    }
  };
  parallel_for(workers, blocks(), run);
}

// A copy of a view as a row-major matrix.
matrix copy_of(const strided_view& v) {
  matrix out(v.rows, v.cols);
  for (std::int64_t i = 0; i < v.rows; ++i) {
    for (std::int64_t j = 0; j < v.cols; ++j) out(i, j) = v(i, j);
  }
  return out;
}

// Any other accumulation format: the same order, the sum rounded to acc_format after every addition.
void sequential_acc(format_spec acc_format, const matrix& a, const matrix& b, const output_view& d, float alpha,
                    float beta) {
  for (Eigen::Index i = 0; i < d.rows; ++i) {
    for (Eigen::Index j = 0; j < d.cols; ++j) {
      float acc = 0.0f;
      for (Eigen::Index k = 0; k < a.cols(); ++k) acc = round_scalar(acc_format, acc + a(i, k) * b(k, j));
      d(i, j) = beta == 0.0f ? alpha * acc : alpha * acc + beta * d(i, j);
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

// The output cast of D, element (i, j) keyed as index i * N + j. A D whose rows are not adjacent (a block of a
// larger matrix) is gathered into the calling thread's buffer, cast in one call and scattered back: the same
// keys and bits as row by row, in one round_span call instead of M short ones. A contiguous D is cast on the
// GEMM's threads (cast_span's chunks: the same keys and bits on any thread count).
cast_stats cast_output(const output_view& d, format_spec f, const round_options& opt, philox_key key, int threads) {
  const auto size = static_cast<std::size_t>(d.rows * d.cols);
  if (d.row_stride == d.cols || d.rows <= 1) return cast_span(threads, std::span<float>(d.data, size), f, opt, key);
  thread_local std::vector<float> gathered;
  if (gathered.size() < size) gathered.resize(size);
  const auto row_bytes = static_cast<std::size_t>(d.cols) * sizeof(float);
  for (std::int64_t i = 0; i < d.rows; ++i)
    std::memcpy(gathered.data() + i * d.cols, d.data + i * d.row_stride, row_bytes);
  const cast_stats s = cast_span(std::span<float>(gathered.data(), size), f, opt, key);
  for (std::int64_t i = 0; i < d.rows; ++i)
    std::memcpy(d.data + i * d.row_stride, gathered.data() + i * d.cols, row_bytes);
  return s;
}

void check_inner(const strided_view& a, const strided_view& b) {
  if (a.cols != b.rows) {
    throw error("gemm op(B) rows",
                std::to_string(b.rows) + " (op(A) " + shape(a.rows, a.cols) + ", op(B) " + shape(b.rows, b.cols) + ")",
                "the columns of op(A) (" + std::to_string(a.cols) + ")");
  }
}

void check_formats(const gemm_formats& f) {
  if (!is_valid(f.compute) || !is_valid(f.accumulate) || !is_valid(f.output)) {
    throw error("gemm formats", format_name(f.compute) + "/" + format_name(f.accumulate) + "/" + format_name(f.output),
                "valid formats");
  }
  if (is_block_scaled(f.input_blocks) && (!is_valid(f.input_blocks) || f.accumulate != fp32)) {
    throw error("gemm block-scaled inputs",
                block_format_name(f.input_blocks) + " accumulating in " + format_name(f.accumulate),
                "a valid block format (mxfp8, mxfp8_e5m2, mxfp6, mxfp6_e3m2, mxfp4, nvfp4) with fp32 accumulation");
  }
}

// -1: as the build and the environment decide (format_checks_by_default); 0 off, 1 on (set_format_checks).
std::atomic<int> format_checks{-1};

bool format_checks_by_default() noexcept {
#ifdef NDEBUG
  static const bool on = [] {
    const char* env = std::getenv("SAFEAMP_SIM_CHECK_FORMATS");
    return env != nullptr && std::string_view(env) == "1";
  }();
  return on;
#else
  return true;
#endif
}

}  // namespace

bool format_checks_enabled() noexcept {
  const int on = format_checks.load(std::memory_order_relaxed);
  return on < 0 ? format_checks_by_default() : on == 1;
}

void set_format_checks(bool on) noexcept { format_checks.store(on ? 1 : 0, std::memory_order_relaxed); }

namespace detail {

const matrix& round_operand(format_spec f, const matrix& x, matrix& scratch, int threads) {
  if (f == fp32) return x;
  scratch.resize(x.rows(), x.cols());
  // Nearest even without a key: each element on its own, so chunks are independent tasks with the same bits.
  parallel_chunks(threads, static_cast<std::int64_t>(x.size()), round_chunk, [&](std::int64_t begin, std::int64_t end) {
    const auto count = static_cast<std::size_t>(end - begin);
    (void)round_span(f, std::span<const float>(x.data() + begin, count),
                     std::span<float>(scratch.data() + begin, count), round_options{}, philox_key{});
  });
  return scratch;
}

void round_operand_in_place(format_spec f, matrix& x, int threads) {
  if (f == fp32) return;
  parallel_chunks(threads, static_cast<std::int64_t>(x.size()), round_chunk, [&](std::int64_t begin, std::int64_t end) {
    (void)round_span(f, std::span<float>(x.data() + begin, static_cast<std::size_t>(end - begin)), round_options{},
                     philox_key{});
  });
}

void check_format_promise(format_spec f, const matrix& x, const char* what) {
  if (f == fp32 || !format_checks_enabled()) return;
  // Bit for bit against round_span, not representable() (tensor.hpp): that one passes every inf and NaN, but
  // skipping the rounding of an inf the format has no code for (E4M3) would keep it where rounding makes a NaN.
  constexpr std::size_t chunk = 4096;
  std::vector<float> rounded(chunk);
  const auto n = static_cast<std::size_t>(x.size());
  for (std::size_t begin = 0; begin < n; begin += chunk) {
    const std::size_t count = std::min(chunk, n - begin);
    const std::span<const float> in(x.data() + begin, count);
    (void)round_span(f, in, std::span<float>(rounded.data(), count), round_options{}, philox_key{});
    if (std::memcmp(rounded.data(), in.data(), count * sizeof(float)) == 0) continue;
    std::size_t i = 0;
    while (std::memcmp(&rounded[i], &in[i], sizeof(float)) == 0) ++i;
    throw error(std::string(what) + " (format check)",
                "element " + std::to_string(begin + i) + " = " + std::to_string(in[i]) + ", not a value of " +
                    format_name(f),
                "every element a value of the format its producer declared (" + format_name(f) + ")");
  }
}

void operand_in_place(format_spec f, format_spec x_format, matrix& x, int threads, const char* what) {
  if (x_format == f) {
    check_format_promise(f, x, what);
  } else {
    round_operand_in_place(f, x, threads);
  }
}

const matrix& operand_from(format_spec f, format_spec x_format, const matrix& x, matrix& scratch, int threads,
                           const char* what) {
  if (f == fp32) return x;
  if (x_format == f) {
    check_format_promise(f, x, what);
    return x;
  }
  return round_operand(f, x, scratch, threads);
}

cast_stats gemm_views(const gemm_formats& f, const strided_view& a, const strided_view& b, const output_view& d,
                      const gemm_options& opt, prerounded done) {
  check_inner(a, b);
  if (d.rows != a.rows || d.cols != b.cols) {
    throw error("gemm D shape", shape(d.rows, d.cols), shape(a.rows, b.cols));
  }
  check_formats(f);
  if (f.accumulate == fp32 && !is_block_scaled(f.input_blocks)) {
    tiled_fp32(a, b, d, f.compute, opt.alpha, opt.beta, opt.threads, done);
    return cast_output(d, f.output, opt.rounding, opt.key, opt.threads);
  }
  // The other paths read C from D: a bias row is copied into every row first.
  if (d.c_row != nullptr && opt.beta != 0.0f) {
    for (std::int64_t i = 0; i < d.rows; ++i) {
      std::memcpy(d.data + i * d.row_stride, d.c_row, static_cast<std::size_t>(d.cols) * sizeof(float));
    }
  }
  output_view d_in_place = d;
  d_in_place.c_row = nullptr;
  if (is_block_scaled(f.input_blocks)) {
    // Block-quantized along K (in copies made in op() layout), then the fp32 path on the dequantized values.
    matrix a_q = copy_of(a), b_q = copy_of(b);
    quantize_operand(f.input_blocks, a_q, block_axis::rows);
    quantize_operand(f.input_blocks, b_q, block_axis::columns);
    tiled_fp32(view_of(a_q), view_of(b_q), d_in_place, fp32, opt.alpha, opt.beta, opt.threads, {});
  } else {
    // Inputs in the compute format (a conversion: round to nearest), in copies made in op() layout.
    matrix a_low = copy_of(a), b_low = copy_of(b);
    if (!done.a) (void)cast_in_place(a_low, f.compute, round_options{}, philox_key{});
    if (!done.b) (void)cast_in_place(b_low, f.compute, round_options{}, philox_key{});
    sequential_acc(f.accumulate, a_low, b_low, d_in_place, opt.alpha, opt.beta);
  }
  return cast_output(d, f.output, opt.rounding, opt.key, opt.threads);
}

}  // namespace detail

cast_stats gemm(const gemm_formats& f, const matrix& a, const matrix& b, matrix& d, const gemm_options& opt) {
  const strided_view op_a = detail::view_of(a, opt.trans_a);
  const strided_view op_b = detail::view_of(b, opt.trans_b);
  check_inner(op_a, op_b);  // before d is resized
  if (opt.beta != 0.0f && (d.rows() != op_a.rows || d.cols() != op_b.cols)) {
    throw error("gemm C shape", shape(d.rows(), d.cols()), shape(op_a.rows, op_b.cols) + " when beta != 0");
  }
  check_formats(f);
  if (opt.beta == 0.0f) d.resize(op_a.rows, op_b.cols);
  return detail::gemm_views(f, op_a, op_b, detail::output_of(d), opt);
}

void plain_gemm(const matrix& a, const matrix& b, matrix& d) {
  d.resize(a.rows(), b.cols());
  d.noalias() = a * b;
}

}  // namespace safeamp::sim
