// The scalar reference of block quantization: the scale rules of OCP MX v1.0 and NVFP4 written out one block
// at a time, each element through the one rounding routine (encode/decode). quantize_blocks (block_quantize.hpp)
// must give the same bits; tests/unit/format/block_quantize_test.cpp checks both against hand-worked blocks.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>

#include "safeamp/error.hpp"
#include "safeamp/format/block_format.hpp"
#include "safeamp/format/block_names.hpp"
#include "safeamp/format/philox.hpp"
#include "safeamp/format/round.hpp"
#include "safeamp/format/round_span.hpp"

namespace safeamp {

struct block_options {
  std::size_t rows = 1;                    // the input is a row-major (rows, in.size() / rows) matrix
  block_axis axis = block_axis::rows;      // blocks along a row, or down a column
  rounding mode = rounding::nearest_even;  // element rounding: nearest_even or stochastic (scales: nearest)
  philox_key key{};                        // stochastic: the element at flat index i uses index key.offset + i
};

struct block_result {
  float tensor_scale = 1.0f;  // NVFP4's fp32 per-tensor scale (1 for MX)
  std::size_t blocks = 0;     // scales written
  cast_stats stats;           // of the element casts, counted on the scaled values x / X
};

// The scale rules, in the words of their sources:
//  MX (OCP MX v1.0 section 6.3, "Conversion from vector of FP32 to MX format"): shared_exp = floor(log2(max |V_i|))
//    - emax_elem, X = 2^shared_exp, P_i = quantize_to_element_format(V_i / X), where values beyond the element's
//    max normal are clamped to it (saturation). shared_exp is clamped to E8M0's range [-127, 127]. Our choices
//    where the spec leaves room: an all-zero block gets X = 2^-127; a block with a NaN or an infinity gets the
//    NaN scale (0xFF) and decodes to NaN throughout (E8M0 has no inf).
//  NVFP4 (NVIDIA's recipe as Transformer Engine implements it): tensor scale s = amax(tensor) / (448 * 6) (fp32;
//    1 for an all-zero tensor, at least 2^-126), block scale S = E4M3(amax(block) / (6 s)) rounded to nearest
//    and saturating, X = S s (fp32), P_i = quantize_to_E2M1(V_i / X) saturating; X = 0 gives zeros. A NaN or an
//    infinity anywhere gives NaN everywhere (the tensor scale is not finite).
// Output: out_i = P_i X (exact for MX: a power of two times a short significand; one float rounding for NVFP4),
// and scales[b] = X (MX) or S (NVFP4) as floats. Every division and product is one IEEE float operation.

namespace detail {

inline constexpr float nvfp4_element_max = 6.0f;            // max_finite(fp4_e2m1)
inline constexpr float nvfp4_scale_max = 448.0f;            // max_finite(fp8_e4m3)
inline constexpr float float_min_normal = 1.17549435e-38f;  // 2^-126

/// Checks what every quantize_blocks entry point checks; returns the number of columns.
inline std::size_t check_block_arguments(const block_format& b, std::size_t in_size, std::size_t out_size,
                                         std::size_t scales_size, const block_options& opt) {
  if (!is_valid(b.element) || b.element.is_unsigned || total_bits(b.element) > 8) {
    throw error("block element format", format_name(b.element),
                "a signed format of at most 8 bits (e4m3, e5m2, e2m3fn, e3m2fn, e2m1fn, ...)");
  }
  if (b.scale != e8m0 && b.scale != fp8_e4m3) {
    throw error("block scale format", is_valid(b.scale) ? format_name(b.scale) : std::string("invalid"),
                "e8m0fnu (OCP MX) or e4m3 (NVFP4)");
  }
  if (b.block_size < 1 || b.block_size > 4096) {
    throw error("block size", std::to_string(b.block_size), "1..4096 (MX: 32, NVFP4: 16)");
  }
  if (opt.rows == 0 || in_size % opt.rows != 0) {
    throw error("block_options rows", std::to_string(opt.rows),
                "a divisor of the input size (" + std::to_string(in_size) + ")");
  }
  if (out_size != in_size) {
    throw error("quantize_blocks output size", std::to_string(out_size),
                "the input size (" + std::to_string(in_size) + ")");
  }
  if (opt.mode != rounding::nearest_even && opt.mode != rounding::stochastic) {
    throw error("quantize_blocks rounding", std::to_string(static_cast<int>(opt.mode)), "nearest_even or stochastic");
  }
  const std::size_t cols = in_size / opt.rows;
  const std::size_t bs = static_cast<std::size_t>(b.block_size);
  const std::size_t blocks =
      opt.axis == block_axis::rows ? opt.rows * ((cols + bs - 1) / bs) : ((opt.rows + bs - 1) / bs) * cols;
  if (scales_size < blocks) {
    throw error("quantize_blocks scales size", std::to_string(scales_size),
                "at least the block count (" + std::to_string(blocks) + ")");
  }
  return cols;
}

/// Number of blocks for a (rows, cols) input.
[[nodiscard]] inline std::size_t block_count(const block_format& b, std::size_t rows, std::size_t cols,
                                             block_axis axis) noexcept {
  const std::size_t bs = static_cast<std::size_t>(b.block_size);
  return axis == block_axis::rows ? rows * ((cols + bs - 1) / bs) : ((rows + bs - 1) / bs) * cols;
}

/// NVFP4's tensor scale from the tensor's largest magnitude (NaN when it is not finite).
[[nodiscard]] inline float nvfp4_tensor_scale(float amax) noexcept {
  if (!(amax - amax == 0.0f)) return safeamp::bit_cast<float>(0x7FC00000u);
  if (amax == 0.0f) return 1.0f;
  const float s = amax / (nvfp4_scale_max * nvfp4_element_max);
  return s < float_min_normal ? float_min_normal : s;
}

}  // namespace detail

/// The scalar reference: one block at a time, one element at a time, in the words of the rules above.
inline block_result quantize_blocks_reference(const block_format& b, std::span<const float> in, std::span<float> out,
                                              std::span<float> scales, const block_options& opt = {}) {
  const std::size_t cols = detail::check_block_arguments(b, in.size(), out.size(), scales.size(), opt);
  const std::size_t rows = opt.rows;
  const std::size_t bs = static_cast<std::size_t>(b.block_size);
  const bool along_rows = opt.axis == block_axis::rows;
  const std::size_t blocks_per_row = (cols + bs - 1) / bs;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const round_options element_rounding{.mode = opt.mode, .on_overflow = overflow::saturate};

  block_result result;
  result.blocks = detail::block_count(b, rows, cols, opt.axis);
  result.stats.elements = in.size();
  float tensor_amax = 0.0f;
  bool tensor_finite = true;
  for (const float v : in) {
    tensor_finite = tensor_finite && std::isfinite(v);
    tensor_amax = std::fabs(v) > tensor_amax ? std::fabs(v) : tensor_amax;
  }
  if (!is_mx(b)) result.tensor_scale = detail::nvfp4_tensor_scale(tensor_finite ? tensor_amax : nan);

  for (std::size_t block = 0; block < result.blocks; ++block) {
    // The flat indices of this block's elements.
    const std::size_t outer = along_rows ? block / blocks_per_row : block / cols;  // row, or strip
    const std::size_t inner = along_rows ? block % blocks_per_row : block % cols;  // block in row, or column
    const std::size_t first = along_rows ? inner * bs : outer * bs;
    const std::size_t length =
        along_rows ? (cols - first < bs ? cols - first : bs) : (rows - first < bs ? rows - first : bs);
    auto index = [&](std::size_t j) { return along_rows ? outer * cols + first + j : (first + j) * cols + inner; };

    float amax = 0.0f;
    bool finite = true;
    for (std::size_t j = 0; j < length; ++j) {
      const float v = in[index(j)];
      finite = finite && std::isfinite(v);
      amax = std::fabs(v) > amax ? std::fabs(v) : amax;
    }
    float x_scale = 0.0f;  // X
    if (is_mx(b)) {
      if (!finite) {
        scales[block] = nan;
        for (std::size_t j = 0; j < length; ++j) out[index(j)] = nan;
        result.stats.nan += length;
        continue;
      }
      int shared_exp = amax == 0.0f ? -127 : std::ilogb(amax) - max_exponent(b.element);
      shared_exp = shared_exp < -127 ? -127 : shared_exp > 127 ? 127 : shared_exp;
      x_scale = std::ldexp(1.0f, shared_exp);
      scales[block] = x_scale;
    } else {
      if (!(result.tensor_scale == result.tensor_scale)) {
        scales[block] = nan;
        for (std::size_t j = 0; j < length; ++j) out[index(j)] = nan;
        result.stats.nan += length;
        continue;
      }
      const float block_scale = round_to(fp8_e4m3, amax / (result.tensor_scale * detail::nvfp4_element_max),
                                         round_options{.on_overflow = overflow::saturate});
      scales[block] = block_scale;
      x_scale = block_scale * result.tensor_scale;
    }
    for (std::size_t j = 0; j < length; ++j) {
      const std::size_t i = index(j);
      const float v = in[i];
      if (x_scale == 0.0f) {  // NVFP4 only: every element of the block is zero
        out[i] = std::copysign(0.0f, v);
        result.stats.underflow += v != 0.0f ? 1u : 0u;
        continue;
      }
      const float y = v / x_scale;
      const std::uint32_t rnd =
          opt.mode == rounding::stochastic ? stochastic_bits(opt.key.seed, opt.key.stream, opt.key.offset + i) : 0u;
      const detail::encode_result e = detail::encode_impl<float>(b.element, y, element_rounding, rnd);
      const float q = decode(b.element, e.code);
      out[i] = q * x_scale;
      result.stats.overflow += e.overflowed ? 1u : 0u;
      result.stats.underflow += y != 0.0f && q == 0.0f ? 1u : 0u;
      result.stats.subnormal += q != 0.0f && std::fabs(q) < min_normal(b.element) ? 1u : 0u;
    }
  }
  return result;
}

/// The spelling: element format, scale format and block size given separately.
inline block_result quantize_blocks_reference(format_spec element, format_spec scale, int block_size,
                                              std::span<const float> in, std::span<float> out, std::span<float> scales,
                                              const block_options& opt = {}) {
  return quantize_blocks_reference(block_format{element, scale, block_size}, in, out, scales, opt);
}

}  // namespace safeamp
