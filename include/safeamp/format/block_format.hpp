// Block-scaled formats: small elements that share one scale per block of consecutive values. OCP Microscaling
// (MX v1.0: 32 elements, a power-of-two E8M0 scale) and NVIDIA NVFP4 (16 E2M1 elements, an E4M3 scale, plus
// one fp32 scale per tensor). Descriptors (constexpr, host/device neutral); names are in block_names.hpp,
// quantize_blocks in block_quantize.hpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "safeamp/format/format_spec.hpp"

namespace safeamp {

/// Which way a block runs through a row-major (rows, cols) matrix: along a row (block_size consecutive
/// elements of one row; the left operand of a GEMM, blocked along K) or down a column (block_size consecutive
/// rows of one column; the right operand).
enum class block_axis : std::uint8_t { rows, columns };

/// A block-scaled format: elements in `element`, one scale per block_size elements in `scale`. The scale rule
/// follows from the scale format: E8M0 is OCP MX (the shared exponent of the block's largest magnitude),
/// OCP E4M3 is NVFP4 (the block's largest magnitude over the element maximum, in E4M3, times an fp32
/// per-tensor scale).
struct block_format {
  format_spec element = fp8_e4m3;
  format_spec scale = e8m0;
  int block_size = 32;

  friend constexpr bool operator==(const block_format&, const block_format&) = default;
};

// OCP MX v1.0 section 5 ("concrete MX-compliant formats", table 1): k = 32, scale E8M0.
inline constexpr block_format mxfp8_e4m3{fp8_e4m3, e8m0, 32};
inline constexpr block_format mxfp8_e5m2{fp8_e5m2, e8m0, 32};
inline constexpr block_format mxfp6_e2m3{fp6_e2m3, e8m0, 32};
inline constexpr block_format mxfp6_e3m2{fp6_e3m2, e8m0, 32};
inline constexpr block_format mxfp4{fp4_e2m1, e8m0, 32};
// NVIDIA NVFP4 (Blackwell): 16 E2M1 elements, an E4M3 block scale, an fp32 tensor scale.
inline constexpr block_format nvfp4{fp4_e2m1, fp8_e4m3, 16};
namespace detail {
/// Elements of an OCP MX block (MX v1.0 section 5, table 1): the block size the one-pass kernels take
/// (block_avx512.hpp: two vectors of 16; block_avx2.hpp: four of 8).
inline constexpr std::size_t mx_block = 32;
}  // namespace detail
/// "Not block-scaled": what a policy or a GEMM holds when its inputs are plain per-element casts.
inline constexpr block_format no_block_scaling{fp32, fp32, 0};

/// True unless b is no_block_scaling (block size 0).
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr bool is_block_scaled(const block_format& b) noexcept {
  return b.block_size != 0;
}

/// True for an MX scale rule (E8M0 scales); false for NVFP4's (E4M3 scales and a tensor scale).
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr bool is_mx(const block_format& b) noexcept { return b.scale == e8m0; }

/// What quantize_blocks accepts: a block size of 1..4096, an element format of at most 8 bits with a sign,
/// and E8M0 or OCP E4M3 as the scale format.
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr bool is_valid(const block_format& b) noexcept {
  return is_valid(b.element) && !b.element.is_unsigned && total_bits(b.element) <= 8 && b.block_size >= 1 &&
         b.block_size <= 4096 && (b.scale == e8m0 || b.scale == fp8_e4m3);
}

/// Memory of a block-scaled tensor of n elements: packed elements plus one scale byte per block (and 4 bytes
/// of tensor scale for NVFP4). For the memory planner: MXFP8 is 8.25 bits an element, MXFP4 4.25, NVFP4 4.5.
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr std::uint64_t block_storage_bytes(const block_format& b,
                                                                              std::uint64_t n) noexcept {
  const std::uint64_t bs = static_cast<std::uint64_t>(b.block_size);
  const std::uint64_t element_bits = n * static_cast<std::uint64_t>(total_bits(b.element));
  const std::uint64_t blocks = (n + bs - 1) / bs;
  return (element_bits + 7) / 8 + blocks * static_cast<std::uint64_t>(storage_bytes(b.scale)) + (is_mx(b) ? 0u : 4u);
}

}  // namespace safeamp
