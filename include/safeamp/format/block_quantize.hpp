// quantize_blocks: block-scaled quantization (OCP MX v1.0, NVFP4) of a row-major matrix along rows or columns,
// the fast path. Chunks of whole blocks are scaled into an L1-resident buffer, rounded there by the vector
// kernels of round_span (round_fast.hpp for nearest even, round_kernel.hpp for stochastic), and scaled back.
// Same bits as quantize_blocks_reference (block_reference.hpp, where the scale rules are written out).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "safeamp/format/block_format.hpp"
#include "safeamp/format/block_reference.hpp"
#include "safeamp/format/round_avx512.hpp"
#include "safeamp/format/round_fast.hpp"
#include "safeamp/format/round_kernel.hpp"

namespace safeamp {
namespace detail {

inline constexpr std::uint32_t quiet_nan_bits = 0x7FC00000u;
inline constexpr std::size_t block_chunk = 512;  // elements scaled, rounded and scaled back in one go

/// 2^e as a float for -149 <= e <= 127.
[[nodiscard]] inline float pow2f(int e) noexcept {
  return e >= -126 ? safeamp::bit_cast<float>(static_cast<std::uint32_t>(e + 127) << 23)
                   : safeamp::bit_cast<float>(std::uint32_t{1} << (e + 149));
}

/// The scale of one block from the bits of its largest magnitude (NaN and inf have the largest bit patterns):
/// X (0 for an NVFP4 block that rounds to zero), NaN when the block or the tensor is not finite; also the
/// value stored in scales[]. MX: floor(log2 amax) from the exponent field.
struct block_scale {
  float x;        // the element scale X (out = P X)
  float stored;   // what scales[] holds: X (MX) or the E4M3 block scale S (NVFP4)
  float inverse;  // MX: 1 / X = 2^-k exactly (a normal float: -127 <= k <= 125); NVFP4: unused
};
[[nodiscard]] SAFEAMP_DETAIL_ALWAYS_INLINE block_scale scale_of_block(bool mx, int emax_element, float tensor_scale,
                                                std::uint32_t amax_bits) noexcept {
  const float nan = safeamp::bit_cast<float>(quiet_nan_bits);
  if (amax_bits >= 0x7F800000u || tensor_scale != tensor_scale) return {nan, nan, nan};
  if (mx) {
    // A zero or float-subnormal amax (< 2^-126) gives shared_exp < -126 - 2: clamped to -127 like any other.
    const int exponent_field = static_cast<int>(amax_bits >> 23);
    const int floor_log2 = exponent_field != 0 ? exponent_field - 127 : -127;
    int shared = floor_log2 - emax_element;
    shared = shared < -127 ? -127 : shared > 127 ? 127 : shared;
    const float x = pow2f(shared);
    return {x, x, pow2f(-shared)};
  }
  const float amax = safeamp::bit_cast<float>(amax_bits);
  const float s = round_to(fp8_e4m3, amax / (tensor_scale * nvfp4_element_max),
                           round_options{.on_overflow = overflow::saturate});
  return {s * tensor_scale, s, 0.0f};
}

/// Rounds y[0..n) in place to the element format (saturating) and counts; stochastic bits of logical indices
/// key.offset + first .. (the same bits round_span would use). Named formats take round_span's AVX-512 kernels
/// where they are compiled in, else the shift-free nearest-even loop (round_fast.hpp); others the generic loop.
/// Out of line, as round_floats_fast is: inlined into the block loops g++ does not always vectorise it.
template <rounding R, bool Named, format_spec F>
SAFEAMP_DETAIL_NOINLINE void round_scaled(format_spec element, float* y, std::size_t n, philox_key key,
                                          std::size_t first, local_counts& c) noexcept {
  key.offset += first;
#if defined(SAFEAMP_HAVE_AVX512_KERNELS)
  if constexpr (Named) {
    avx512::round_chunk<R, F>(y, y, n, overflow::saturate, false, key, false, c);
    return;
  }
#endif
  alignas(64) std::uint32_t buffer[block_chunk > 4096 ? block_chunk + 8 : 4096 + 8];
  const std::uint32_t* words = nullptr;
  if constexpr (R == rounding::stochastic) {
    const std::uint64_t base = key.offset & ~std::uint64_t{3};
    const std::size_t skip = static_cast<std::size_t>(key.offset - base);
    philox_fill(buffer, base >> 2, (skip + n + 3) / 4, key.seed, key.stream);
    words = buffer + skip;
  }
  if constexpr (R == rounding::nearest_even && Named) {
    constexpr round_constants k = make_round_constants(F);
    round_nearest_any<F>(k, y, y, n, overflow::saturate, false, c);
  } else {
    round_floats<R, Named, F>(element, y, y, n, overflow::saturate, false, words, c);
  }
}

/// y = x / X for n elements sharing the scale sc (MX: times 1/X, the same correctly rounded value); a NaN scale
/// gives 0 (the block's outputs are NaN, written afterwards, and the kernel counts nothing); X = 0 (NVFP4) gives
/// a zero of x's sign.
SAFEAMP_DETAIL_ALWAYS_INLINE void scale_down(const float* __restrict in, float* __restrict y, std::size_t n,
                                             block_scale sc, bool mx) noexcept {
  if (sc.x != sc.x) {
    for (std::size_t j = 0; j < n; ++j) y[j] = 0.0f;
  } else if (mx) {
    const float inverse = sc.inverse;
    for (std::size_t j = 0; j < n; ++j) y[j] = in[j] * inverse;
  } else if (sc.x != 0.0f) {
    for (std::size_t j = 0; j < n; ++j) y[j] = in[j] / sc.x;
  } else {
    for (std::size_t j = 0; j < n; ++j) y[j] = 0.0f * in[j];
  }
}

/// y = P X in place for n elements (a NaN scale: NaN) and the counts the kernel cannot see.
SAFEAMP_DETAIL_ALWAYS_INLINE void scale_up_in_place(const float* in, float* y, std::size_t n, block_scale sc, bool mx,
                                                    cast_stats& extra) noexcept {
  if (sc.x != sc.x) {
    for (std::size_t j = 0; j < n; ++j) y[j] = sc.x;
    extra.nan += n;
    return;
  }
  if (!mx && sc.x == 0.0f) {
    for (std::size_t j = 0; j < n; ++j) extra.underflow += in[j] != 0.0f ? 1u : 0u;
  }
  for (std::size_t j = 0; j < n; ++j) y[j] = y[j] * sc.x;
}

/// Inputs this large or larger are written with non-temporal stores where the AVX-512 kernels are compiled in
/// (as round_span does): the output is not read back soon, and streaming saves the read for ownership.
inline constexpr std::size_t block_stream_min_bytes = std::size_t{16} << 20;

/// out[0..n) = buffer[0..n); non-temporal 64-byte stores for the aligned middle when streaming.
SAFEAMP_DETAIL_ALWAYS_INLINE void copy_out(float* out, const float* buffer, std::size_t n, bool stream) noexcept {
#if defined(SAFEAMP_HAVE_AVX512_KERNELS)
  if (stream) {
    std::size_t i = 0;
    while (i < n && (reinterpret_cast<std::uintptr_t>(out + i) & 63u) != 0) {
      out[i] = buffer[i];
      ++i;
    }
    for (; i + 16 <= n; i += 16) _mm512_stream_ps(out + i, _mm512_loadu_ps(buffer + i));
    for (; i < n; ++i) out[i] = buffer[i];
    return;
  }
#endif
  (void)stream;
  for (std::size_t i = 0; i < n; ++i) out[i] = buffer[i];
}

/// out = P X for n elements (a NaN scale: NaN) and the counts the kernel cannot see.
SAFEAMP_DETAIL_ALWAYS_INLINE void scale_up(const float* in, const float* __restrict y, float* out, std::size_t n,
                                           block_scale sc, bool mx, cast_stats& extra) noexcept {
  if (sc.x != sc.x) {
    for (std::size_t j = 0; j < n; ++j) out[j] = sc.x;
    extra.nan += n;
    return;
  }
  if (!mx && sc.x == 0.0f) {
    for (std::size_t j = 0; j < n; ++j) extra.underflow += in[j] != 0.0f ? 1u : 0u;
  }
  for (std::size_t j = 0; j < n; ++j) out[j] = y[j] * sc.x;
}

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
      for (std::size_t j = 0; j < len; ++j) scale_up(x + j, buffer + j, o + j, 1, column_scales[start + j], mx, extra);
    }
  }
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
    for (std::size_t r = 0; r < rows; ++r) {
      quantize_row<R, Named, F>(b, tensor_scale, in + r * cols, out + r * cols, cols, r * cols, key,
                                scales + r * per_row, buffer, stream, c, stats);
      flush_counts(stats, c);  // a row of at most 2^20 scaled values per flush keeps the 32-bit counters safe
    }
#if defined(SAFEAMP_HAVE_AVX512_KERNELS)
    if (stream) _mm_sfence();  // the streamed stores are visible before quantize_blocks returns
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

}  // namespace detail

/// Quantizes `in`, a row-major (opt.rows, in.size() / opt.rows) matrix, to the block format b along opt.axis:
/// out gets the dequantized values P X (out may be in itself), scales[block] the block scales as floats (X for
/// MX, the E4M3 scale S for NVFP4; blocks numbered row-major over (rows, blocks per row) or (strips, cols)).
/// Throws safeamp::error on a bad format, size or rounding mode. Same bits as quantize_blocks_reference.
inline block_result quantize_blocks(const block_format& b, std::span<const float> in, std::span<float> out,
                                    std::span<float> scales, const block_options& opt = {}) {
  const std::size_t cols = detail::check_block_arguments(b, in.size(), out.size(), scales.size(), opt);
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
    std::uint32_t amax = 0;
    for (const float v : in) {
      const std::uint32_t a = safeamp::bit_cast<std::uint32_t>(v) & 0x7FFFFFFFu;
      amax = a > amax ? a : amax;
    }
    result.tensor_scale = detail::nvfp4_tensor_scale(safeamp::bit_cast<float>(amax >= 0x7F800000u ? 0x7FC00000u : amax));
  }
  const float* src = in.data();
  float* dst = out.data();
  float* sc = scales.data();
  const std::size_t rows = opt.rows;
  const float ts = result.tensor_scale;
  cast_stats& st = result.stats;
  if (b.element == fp8_e4m3)
    detail::quantize_blocks_dispatch<true, fp8_e4m3>(b, ts, src, dst, rows, cols, opt, sc, st);
  else if (b.element == fp8_e5m2)
    detail::quantize_blocks_dispatch<true, fp8_e5m2>(b, ts, src, dst, rows, cols, opt, sc, st);
  else if (b.element == fp6_e2m3)
    detail::quantize_blocks_dispatch<true, fp6_e2m3>(b, ts, src, dst, rows, cols, opt, sc, st);
  else if (b.element == fp6_e3m2)
    detail::quantize_blocks_dispatch<true, fp6_e3m2>(b, ts, src, dst, rows, cols, opt, sc, st);
  else if (b.element == fp4_e2m1)
    detail::quantize_blocks_dispatch<true, fp4_e2m1>(b, ts, src, dst, rows, cols, opt, sc, st);
  else
    detail::quantize_blocks_dispatch<false, format_spec{}>(b, ts, src, dst, rows, cols, opt, sc, st);
  return result;
}

/// The spelling: element format, scale format and block size given separately.
inline block_result quantize_blocks(format_spec element, format_spec scale, int block_size, std::span<const float> in,
                                    std::span<float> out, std::span<float> scales, const block_options& opt = {}) {
  return quantize_blocks(block_format{element, scale, block_size}, in, out, scales, opt);
}

}  // namespace safeamp
