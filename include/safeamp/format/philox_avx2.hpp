// Philox4x32-10 (philox.hpp) with AVX2 for 16 blocks (64 words) at a time: the generator of stochastic rounding
// on the avx2 kernel path, used in registers by the rounding kernels and as a block fill (philox_fill_avx2). The
// same words as philox4x32_10 and philox_fill (round_kernel.hpp), bit for bit.
#pragma once

#include "safeamp/format/cpu_path.hpp"

#if defined(SAFEAMP_X86_KERNELS)

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "safeamp/format/philox.hpp"
#include "safeamp/format/round_kernel.hpp"

SAFEAMP_DETAIL_AVX2_BEGIN

namespace safeamp::detail::avx2 {

/// Philox4x32-10 for 16 blocks at a time, as four independent groups of four: 64-bit lanes hold the 32-bit words
/// and vpmuludq forms the 32 x 32 -> 64 products (it reads only the low halves, so no masking between rounds).
/// Four groups so that the chains of dependent multiplies, shuffles and xors of a round overlap.
struct philox16 {
  static constexpr std::size_t blocks = 16;
  static constexpr int groups = 4;
  __m256i key0[10], key1[10];
  __m256i m0 = _mm256_set1_epi64x(philox_m0);
  __m256i m1 = _mm256_set1_epi64x(philox_m1);
  __m256i stream;
  __m256i lanes = _mm256_set_epi64x(3, 2, 1, 0);

  philox16(std::uint64_t seed, std::uint32_t stream_id) noexcept : stream(_mm256_set1_epi64x(stream_id)) {
    auto k0 = static_cast<std::uint32_t>(seed);
    auto k1 = static_cast<std::uint32_t>(seed >> 32);
    for (int round = 0; round < 10; ++round) {
      key0[round] = _mm256_set1_epi64x(k0);
      key1[round] = _mm256_set1_epi64x(k1);
      k0 += philox_w0;
      k1 += philox_w1;
    }
  }

  /// The high 32 bits of each 64-bit lane moved to its low half (the products and xors read only low halves).
  SAFEAMP_DETAIL_ALWAYS_INLINE static __m256i high_to_low(__m256i v) noexcept { return _mm256_shuffle_epi32(v, 0xB1); }

  /// Words of blocks first .. first + 15 in order (w[0]: words 0..7 = blocks first, first + 1, ...).
  /// The low counter word must not wrap: (first & 0xFFFFFFFF) + 16 <= 2^32.
  SAFEAMP_DETAIL_ALWAYS_INLINE void operator()(std::uint64_t first, __m256i (&w)[8]) const noexcept {
    const auto lo = static_cast<long long>(first & 0xFFFFFFFFu);
    const __m256i hi = _mm256_set1_epi64x(static_cast<long long>(first >> 32));
    // The loops are unrolled at -O2 too: g++ 12 keeps them rolled there otherwise (the AVX-512 generator then
    // ran at about a third of its -O3 rate in bench_format's bm_philox_words).
    __m256i x0[groups], x1[groups], x2[groups], x3[groups];
#pragma GCC unroll 4
    for (int g = 0; g < groups; ++g) {
      x0[g] = _mm256_add_epi64(_mm256_set1_epi64x(lo + 4 * g), lanes);
      x1[g] = hi;
      x2[g] = stream;
      x3[g] = _mm256_setzero_si256();
    }
#pragma GCC unroll 10
    for (int round = 0; round < 10; ++round) {
#pragma GCC unroll 4
      for (int g = 0; g < groups; ++g) {
        const __m256i p0 = _mm256_mul_epu32(x0[g], m0);
        const __m256i p1 = _mm256_mul_epu32(x2[g], m1);
        x0[g] = _mm256_xor_si256(_mm256_xor_si256(high_to_low(p1), x1[g]), key0[round]);
        x2[g] = _mm256_xor_si256(_mm256_xor_si256(high_to_low(p0), x3[g]), key1[round]);
        x1[g] = p1;
        x3[g] = p0;
      }
    }
#pragma GCC unroll 4
    for (int g = 0; g < groups; ++g) {
      // Words 0 and 1 of the four blocks side by side (dwords b0w0 b0w1 b1w0 b1w1 | b2w0 b2w1 b3w0 b3w1), same for
      // 2 and 3, then the 64-bit pairs of one block together, then the 128-bit halves in block order.
      const __m256i w01 = _mm256_blend_epi32(x0[g], _mm256_slli_epi64(x1[g], 32), 0xAA);
      const __m256i w23 = _mm256_blend_epi32(x2[g], _mm256_slli_epi64(x3[g], 32), 0xAA);
      const __m256i blocks02 = _mm256_unpacklo_epi64(w01, w23);
      const __m256i blocks13 = _mm256_unpackhi_epi64(w01, w23);
      w[2 * g] = _mm256_permute2x128_si256(blocks02, blocks13, 0x20);
      w[2 * g + 1] = _mm256_permute2x128_si256(blocks02, blocks13, 0x31);
    }
  }
};

/// philox_fill (round_kernel.hpp) with philox16: words[4 b + j] = word j of block first_block + b, b < blocks;
/// the portable loop where the low counter word would wrap (once per 2^34 words).
SAFEAMP_DETAIL_NOINLINE inline void philox_fill_avx2(std::uint32_t* words, std::uint64_t first_block,
                                                     std::size_t blocks, std::uint64_t seed,
                                                     std::uint32_t stream) noexcept {
  if ((first_block & 0xFFFFFFFFu) + blocks + philox16::blocks > (std::uint64_t{1} << 32)) {
    detail::philox_fill(words, first_block, blocks, seed, stream);
    return;
  }
  const philox16 gen(seed, stream);
  std::size_t b = 0;
  for (; b + philox16::blocks <= blocks; b += philox16::blocks) {
    __m256i w[8];
    gen(first_block + b, w);
    for (std::size_t j = 0; j < 8; ++j) _mm256_storeu_si256(reinterpret_cast<__m256i*>(words + 4 * b + 8 * j), w[j]);
  }
  if (b < blocks) {
    __m256i w[8];
    gen(first_block + b, w);
    alignas(32) std::uint32_t tail[64];
    for (std::size_t j = 0; j < 8; ++j) _mm256_store_si256(reinterpret_cast<__m256i*>(tail + 8 * j), w[j]);
    for (std::size_t j = 0; j < 4 * (blocks - b); ++j) words[4 * b + j] = tail[j];
  }
}

}  // namespace safeamp::detail::avx2

SAFEAMP_DETAIL_TARGET_END

#endif  // SAFEAMP_X86_KERNELS
