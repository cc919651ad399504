// The per-block pieces of quantize_blocks' fast path: the block scale from the bits of the block's largest
// magnitude, the scale-down into the L1 buffer, the rounding call into round_span's kernels, the scale-up and
// the (optionally non-temporal) copy out. Used by block_quantize.hpp; same bits as block_reference.hpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "safeamp/format/block_format.hpp"
#include "safeamp/format/block_reference.hpp"
#include "safeamp/format/round_avx512.hpp"
#include "safeamp/format/round_fast.hpp"
#include "safeamp/format/round_kernel.hpp"
#include "safeamp/format/round_span.hpp"

namespace safeamp::detail {

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
  const float s =
      round_to(fp8_e4m3, amax / (tensor_scale * nvfp4_element_max), round_options{.on_overflow = overflow::saturate});
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
#if defined(SAFEAMP_X86_KERNELS)
  if constexpr (Named) {
    if (const cpu_path path = kernel_path(); path != cpu_path::portable) {
      round_chunk_vector<R, F>(path, y, y, n, round_options{.mode = R, .on_overflow = overflow::saturate}, key, false,
                               false, c);
      return;
    }
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

/// Inputs this large or larger are written with non-temporal stores on the AVX-512 path
/// (as round_span does): the output is not read back soon, and streaming saves the read for ownership.
inline constexpr std::size_t block_stream_min_bytes = std::size_t{16} << 20;

/// out[0..n) = buffer[0..n); non-temporal 64-byte stores for the aligned middle when streaming.
SAFEAMP_DETAIL_ALWAYS_INLINE void copy_out(float* out, const float* buffer, std::size_t n, bool stream) noexcept {
#if defined(SAFEAMP_X86_KERNELS)
  if (stream && kernel_path() == cpu_path::avx512) {
    avx512::stream_copy(out, buffer, n);
    return;
  }
#endif
  (void)stream;
  for (std::size_t i = 0; i < n; ++i) out[i] = buffer[i];
}

}  // namespace safeamp::detail
