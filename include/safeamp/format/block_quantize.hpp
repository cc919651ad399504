// quantize_blocks: block-scaled quantization (OCP MX v1.0, NVFP4) of a row-major matrix along rows or columns,
// the fast path. Along rows on a vector path, MX blocks of 32 take the one-pass kernels of block_avx512.hpp and
// block_avx2.hpp, NVFP4 blocks of 16 those of block_nvfp4_avx512.hpp and block_nvfp4_avx2.hpp; otherwise chunks of
// whole blocks are scaled into an L1-resident buffer, rounded there by the vector kernels of round_span
// (round_fast.hpp for nearest even, round_kernel.hpp for stochastic), and scaled back. Same bits as
// quantize_blocks_reference (block_reference.hpp, where the scale rules are written out).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "safeamp/format/block_avx2.hpp"
#include "safeamp/format/block_avx512.hpp"
#include "safeamp/format/block_format.hpp"
#include "safeamp/format/block_kernels.hpp"
#include "safeamp/format/block_nvfp4_avx2.hpp"
#include "safeamp/format/block_nvfp4_avx512.hpp"
#include "safeamp/format/block_reference.hpp"

namespace safeamp {
namespace detail {

// Rows: each chunk holds whole blocks of one row. in/out/scales point at the row's start; n = cols.
template <rounding R, bool Named, format_spec F>
void quantize_row(const block_format& b, float tensor_scale, const float* in, float* out, std::size_t n,
                  std::size_t first_index, const philox_key& key, float* scales, float* buffer, bool stream,
                  local_counts& c, cast_stats& extra) noexcept {
  const bool mx = is_mx(b);
  const int emax_element = max_exponent(b.element);
  const std::size_t bs = static_cast<std::size_t>(b.block_size);
  const std::size_t chunk = bs >= block_chunk ? bs : (block_chunk / bs) * bs;
  block_scale chunk_scales[block_chunk];
  for (std::size_t start = 0; start < n; start += chunk) {
    const std::size_t len = n - start < chunk ? n - start : chunk;
    const std::size_t nblocks = (len + bs - 1) / bs;
    float* chunk_scale_out = scales + start / bs;  // one division a chunk, not one a block
    for (std::size_t k = 0; k < nblocks; ++k) {
      const std::size_t s = start + k * bs;
      const std::size_t m = n - s < bs ? n - s : bs;
      std::uint32_t amax = 0;
      for (std::size_t j = 0; j < m; ++j) {
        const std::uint32_t a = safeamp::bit_cast<std::uint32_t>(in[s + j]) & 0x7FFFFFFFu;
        amax = a > amax ? a : amax;
      }
      const block_scale sc = scale_of_block(mx, emax_element, tensor_scale, amax);
      chunk_scales[k] = sc;
      chunk_scale_out[k] = sc.stored;
      scale_down(in + s, buffer + k * bs, m, sc, mx);
    }
    round_scaled<R, Named, F>(b.element, buffer, len, key, first_index + start, c);
    for (std::size_t k = 0; k < nblocks; ++k) {
      const std::size_t s = start + k * bs;
      const std::size_t m = n - s < bs ? n - s : bs;
      scale_up_in_place(in + s, buffer + k * bs, m, chunk_scales[k], mx, extra);
    }
    copy_out(out + start, buffer, len, stream);
  }
}

// Columns: a strip of up to block_size rows; one scale per column, from the column's amax over the strip.
// in/out point at the strip's first row; scales at the strip's row of scales (cols of them).
template <rounding R, bool Named, format_spec F>
void quantize_strip(const block_format& b, float tensor_scale, const float* in, float* out, std::size_t strip_rows,
                    std::size_t cols, std::size_t first_index, const philox_key& key, float* scales,
                    std::vector<std::uint32_t>& amax, std::vector<block_scale>& column_scales, float* buffer,
                    local_counts& c, cast_stats& extra) noexcept {
  const bool mx = is_mx(b);
  const int emax_element = max_exponent(b.element);
  for (std::size_t j = 0; j < cols; ++j) amax[j] = 0u;
  for (std::size_t r = 0; r < strip_rows; ++r) {
    const float* row = in + r * cols;
    for (std::size_t j = 0; j < cols; ++j) {
      const std::uint32_t a = safeamp::bit_cast<std::uint32_t>(row[j]) & 0x7FFFFFFFu;
      amax[j] = a > amax[j] ? a : amax[j];
    }
  }
  for (std::size_t j = 0; j < cols; ++j) {
    column_scales[j] = scale_of_block(mx, emax_element, tensor_scale, amax[j]);
    scales[j] = column_scales[j].stored;
  }
  for (std::size_t r = 0; r < strip_rows; ++r) {
    for (std::size_t start = 0; start < cols; start += block_chunk) {
      const std::size_t len = cols - start < block_chunk ? cols - start : block_chunk;
      const float* x = in + r * cols + start;
      float* o = out + r * cols + start;
      for (std::size_t j = 0; j < len; ++j) scale_down(x + j, buffer + j, 1, column_scales[start + j], mx);
      round_scaled<R, Named, F>(b.element, buffer, len, key, first_index + r * cols + start, c);
      for (std::size_t j = 0; j < len; ++j)
        scale_up_in_place(x + j, buffer + j, 1, column_scales[start + j], mx, extra);
      copy_out(o, buffer, len, false);
    }
  }
}

#if defined(SAFEAMP_X86_KERNELS)
/// One row through the one-pass kernel of its scale rule and path (avx2 or avx512).
template <rounding R, format_spec F>
void one_pass_row(cpu_path path, bool mx, float tensor_scale, const float* in, float* out, std::size_t cols,
                  float* scales, std::size_t first_index, const philox_key& key, local_counts& c) noexcept {
  if (mx && path == cpu_path::avx512) {
    avx512::quantize_mx32_row<R, F>(in, out, cols, scales, first_index, key, c);
  } else if (mx) {
    avx2::quantize_mx32_row<R, F>(in, out, cols, scales, first_index, key, c);
  } else if (path == cpu_path::avx512) {
    avx512::quantize_nvfp4_row<R, F>(in, out, cols, scales, first_index, key, tensor_scale, c);
  } else {
    avx2::quantize_nvfp4_row<R, F>(in, out, cols, scales, first_index, key, tensor_scale, c);
  }
}
#endif

/// The bits of the largest |x| of in (NaN and inf have the largest patterns).
inline std::uint32_t tensor_amax_bits(std::span<const float> in) noexcept {
#if defined(SAFEAMP_X86_KERNELS)
  if (kernel_path() != cpu_path::portable) return avx2::amax_bits(in.data(), in.size());
#endif
  std::uint32_t amax = 0;
  for (const float v : in) {
    const std::uint32_t a = safeamp::bit_cast<std::uint32_t>(v) & 0x7FFFFFFFu;
    amax = a > amax ? a : amax;
  }
  return amax;
}

template <rounding R, bool Named, format_spec F>
void quantize_blocks_kernel(const block_format& b, float tensor_scale, const float* in, float* out, std::size_t rows,
                            std::size_t cols, block_axis axis, const philox_key& key, float* scales,
                            cast_stats& stats) {
  alignas(64) float buffer[block_chunk > 4096 ? block_chunk : 4096];
  local_counts c;
  const std::size_t bs = static_cast<std::size_t>(b.block_size);
  if (axis == block_axis::rows) {
    const std::size_t per_row = (cols + bs - 1) / bs;
    const bool stream = rows * cols * sizeof(float) >= block_stream_min_bytes;
#if defined(SAFEAMP_X86_KERNELS)
    // MX blocks of 32 and NVFP4 blocks of 16 (of a finite tensor) on a vector path: the one-pass kernels.
    if constexpr (Named) {
      const cpu_path path = kernel_path();
      const bool mx = is_mx(b);
      const bool one_pass = mx ? bs == mx_block : bs == avx2::nvfp4_block && tensor_scale == tensor_scale;
      if (one_pass && path != cpu_path::portable) {
        for (std::size_t r = 0; r < rows; ++r) {
          one_pass_row<R, F>(path, mx, tensor_scale, in + r * cols, out + r * cols, cols, scales + r * per_row,
                             r * cols, key, c);
          flush_counts(stats, c);
        }
        return;
      }
    }
#endif
    for (std::size_t r = 0; r < rows; ++r) {
      quantize_row<R, Named, F>(b, tensor_scale, in + r * cols, out + r * cols, cols, r * cols, key,
                                scales + r * per_row, buffer, stream, c, stats);
      flush_counts(stats, c);  // a row of at most 2^20 scaled values per flush keeps the 32-bit counters safe
    }
#if defined(SAFEAMP_X86_KERNELS)
    if (stream && kernel_path() == cpu_path::avx512)
      _mm_sfence();  // the streamed stores are visible before quantize_blocks returns
#endif
    return;
  }
  std::vector<std::uint32_t> amax(cols);
  std::vector<block_scale> column_scales(cols);
  for (std::size_t s = 0, strip = 0; s < rows; s += bs, ++strip) {
    const std::size_t strip_rows = rows - s < bs ? rows - s : bs;
    quantize_strip<R, Named, F>(b, tensor_scale, in + s * cols, out + s * cols, strip_rows, cols, s * cols, key,
                                scales + strip * cols, amax, column_scales, buffer, c, stats);
    flush_counts(stats, c);
  }
}

template <bool Named, format_spec F>
void quantize_blocks_dispatch(const block_format& b, float tensor_scale, const float* in, float* out, std::size_t rows,
                              std::size_t cols, const block_options& opt, float* scales, cast_stats& stats) {
  if (opt.mode == rounding::stochastic) {
    quantize_blocks_kernel<rounding::stochastic, Named, F>(b, tensor_scale, in, out, rows, cols, opt.axis, opt.key,
                                                           scales, stats);
  } else {
    quantize_blocks_kernel<rounding::nearest_even, Named, F>(b, tensor_scale, in, out, rows, cols, opt.axis, opt.key,
                                                             scales, stats);
  }
}

/// The kernels of every element format, chosen by b.element (arguments checked by the caller). A template only so
/// that it can be instantiated once (SAFEAMP_EXTERN_KERNELS, see round_span_formats in round_span.hpp).
template <int Once = 0>
void quantize_blocks_formats(const block_format& b, float ts, const float* src, float* dst, std::size_t rows,
                             std::size_t cols, const block_options& opt, float* sc, cast_stats& st) {
  if (b.element == fp8_e4m3)
    quantize_blocks_dispatch<true, fp8_e4m3>(b, ts, src, dst, rows, cols, opt, sc, st);
  else if (b.element == fp8_e5m2)
    quantize_blocks_dispatch<true, fp8_e5m2>(b, ts, src, dst, rows, cols, opt, sc, st);
  else if (b.element == fp6_e2m3)
    quantize_blocks_dispatch<true, fp6_e2m3>(b, ts, src, dst, rows, cols, opt, sc, st);
  else if (b.element == fp6_e3m2)
    quantize_blocks_dispatch<true, fp6_e3m2>(b, ts, src, dst, rows, cols, opt, sc, st);
  else if (b.element == fp4_e2m1)
    quantize_blocks_dispatch<true, fp4_e2m1>(b, ts, src, dst, rows, cols, opt, sc, st);
  else
    quantize_blocks_dispatch<false, format_spec{}>(b, ts, src, dst, rows, cols, opt, sc, st);
}

#if defined(SAFEAMP_EXTERN_KERNELS)
extern template void quantize_blocks_formats<0>(const block_format&, float, const float*, float*, std::size_t,
                                                std::size_t, const block_options&, float*, cast_stats&);
#endif

}  // namespace detail

/// Quantizes `in`, a row-major (opt.rows, in.size() / opt.rows) matrix, to the block format b along opt.axis:
/// out gets the dequantized values P X (out may be in itself), scales[block] the block scales as floats (X for
/// MX, the E4M3 scale S for NVFP4; blocks numbered row-major over (rows, blocks per row) or (strips, cols)).
/// Throws safeamp::error on a bad format, size or rounding mode. Same bits as quantize_blocks_reference.
inline block_result quantize_blocks(const block_format& b, std::span<const float> in, std::span<float> out,
                                    std::span<float> scales, const block_options& opt = {}) {
  const std::size_t cols = detail::check_block_arguments(b, in.size(), out.size(), scales.size(), opt);
  (void)active_cpu_path();  // a bad SAFEAMP_CPU_PATH is reported here, before the noexcept kernels run
  if (!in.empty() && in.data() != out.data() && in.data() < out.data() + out.size() &&
      out.data() < in.data() + in.size()) {
    throw error("quantize_blocks buffers", "partially overlapping", "disjoint spans, or out == in exactly");
  }
  // A row longer than 2^20 would let the 32-bit per-row counters wrap.
  if (opt.axis == block_axis::rows && cols > detail::count_chunk) {
    throw error("quantize_blocks columns", std::to_string(cols), "at most 2^20 along rows (split the matrix)");
  }
  block_result result;
  result.blocks = detail::block_count(b, opt.rows, cols, opt.axis);
  result.stats.elements = in.size();
  if (in.empty()) return result;
  if (!is_mx(b)) {
    const std::uint32_t amax = detail::tensor_amax_bits(in);
    result.tensor_scale =
        detail::nvfp4_tensor_scale(safeamp::bit_cast<float>(amax >= 0x7F800000u ? 0x7FC00000u : amax));
  }
  const float* src = in.data();
  float* dst = out.data();
  float* sc = scales.data();
  const std::size_t rows = opt.rows;
  const float ts = result.tensor_scale;
  cast_stats& st = result.stats;
  detail::quantize_blocks_formats(b, ts, src, dst, rows, cols, opt, sc, st);
  return result;
}

/// The spelling: element format, scale format and block size given separately.
inline block_result quantize_blocks(format_spec element, format_spec scale, int block_size, std::span<const float> in,
                                    std::span<float> out, std::span<float> scales, const block_options& opt = {}) {
  return quantize_blocks(block_format{element, scale, block_size}, in, out, scales, opt);
}

}  // namespace safeamp
