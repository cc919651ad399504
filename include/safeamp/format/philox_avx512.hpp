// Philox4x32-10 (philox.hpp) with AVX-512 for 32 blocks (128 words) at a time: the generator of stochastic
// rounding on the avx512 kernel path, used in registers by the rounding kernels and as a block fill
// (philox_fill_avx512). The same words as philox4x32_10 and philox_fill (round_kernel.hpp), bit for bit.
#pragma once

#include "safeamp/format/cpu_path.hpp"

#if defined(SAFEAMP_X86_KERNELS)

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "safeamp/format/philox.hpp"
#include "safeamp/format/round_kernel.hpp"

SAFEAMP_DETAIL_AVX512_BEGIN

namespace safeamp::detail::avx512 {

/// Philox4x32-10 for 32 blocks at a time, as four independent groups of eight: 64-bit lanes hold the 32-bit words,
/// vpmuludq forms the 32 x 32 -> 64 products (it reads only the low halves, so no masking between rounds), and the
/// round keys, the same for every block, are broadcast once. Four groups because each round is a chain of three
/// dependent instructions (multiply, shuffle, xor): with two, Zen 4 waits on the chain (2.3 G words/s against 2.8
/// measured with three to eight groups, in one run on the benchmark machine).
struct philox32 {
  static constexpr std::size_t blocks = 32;
  static constexpr int groups = 4;
  __m512i key0[10], key1[10];
  __m512i m0 = _mm512_set1_epi64(philox_m0);
  __m512i m1 = _mm512_set1_epi64(philox_m1);
  __m512i stream;
  __m512i lanes = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
  // Interleave words 0,1 and 2,3 of each block (low dwords of the 64-bit lanes), then the pairs: block order.
  __m512i pick01 = _mm512_set_epi32(30, 14, 28, 12, 26, 10, 24, 8, 22, 6, 20, 4, 18, 2, 16, 0);
  __m512i first4 = _mm512_set_epi64(11, 3, 10, 2, 9, 1, 8, 0);
  __m512i last4 = _mm512_set_epi64(15, 7, 14, 6, 13, 5, 12, 4);

  philox32(std::uint64_t seed, std::uint32_t stream_id) noexcept : stream(_mm512_set1_epi64(stream_id)) {
    auto k0 = static_cast<std::uint32_t>(seed);
    auto k1 = static_cast<std::uint32_t>(seed >> 32);
    for (int round = 0; round < 10; ++round) {
      key0[round] = _mm512_set1_epi64(k0);
      key1[round] = _mm512_set1_epi64(k1);
      k0 += philox_w0;
      k1 += philox_w1;
    }
  }

  /// The high 32 bits of each 64-bit lane moved to its low half (the high half gets the low one: the products
  /// and xors that follow read only the low halves).
  SAFEAMP_DETAIL_ALWAYS_INLINE static __m512i high_to_low(__m512i v) noexcept {
    return _mm512_maskz_shuffle_epi32(all_lanes, v, _MM_PERM_CDAB);
  }

  /// Words of blocks first .. first + 31 in order (w[0]: words 0..15 = blocks first .. first + 3, ...).
  /// The low counter word must not wrap: (first & 0xFFFFFFFF) + 32 <= 2^32.
  SAFEAMP_DETAIL_ALWAYS_INLINE void operator()(std::uint64_t first, __m512i (&w)[8]) const noexcept {
    const auto lo = static_cast<long long>(first & 0xFFFFFFFFu);
    const __m512i hi = _mm512_set1_epi64(static_cast<long long>(first >> 32));
    // The loops are unrolled at -O2 too: g++ 12 keeps them rolled there otherwise (the AVX-512 generator then
    // ran at about a third of its -O3 rate in bench_format's bm_philox_words).
    __m512i x0[groups], x1[groups], x2[groups], x3[groups];
#pragma GCC unroll 4
    for (int g = 0; g < groups; ++g) {
      x0[g] = _mm512_add_epi64(_mm512_set1_epi64(lo + 8 * g), lanes);
      x1[g] = hi;
      x2[g] = stream;
      x3[g] = _mm512_setzero_si512();
    }
#pragma GCC unroll 10
    for (int round = 0; round < 10; ++round) {
#pragma GCC unroll 4
      for (int g = 0; g < groups; ++g) {
        const __m512i p0 = _mm512_maskz_mul_epu32(0xFF, x0[g], m0);
        const __m512i p1 = _mm512_maskz_mul_epu32(0xFF, x2[g], m1);
        x0[g] = _mm512_ternarylogic_epi64(high_to_low(p1), x1[g], key0[round], 0x96);  // xor of all three
        x2[g] = _mm512_ternarylogic_epi64(high_to_low(p0), x3[g], key1[round], 0x96);
        x1[g] = p1;
        x3[g] = p0;
      }
    }
#pragma GCC unroll 4
    for (int g = 0; g < groups; ++g) {
      const __m512i w01 = _mm512_permutex2var_epi32(x0[g], pick01, x1[g]);
      const __m512i w23 = _mm512_permutex2var_epi32(x2[g], pick01, x3[g]);
      w[2 * g] = _mm512_permutex2var_epi64(w01, first4, w23);
      w[2 * g + 1] = _mm512_permutex2var_epi64(w01, last4, w23);
    }
  }
};

/// philox_fill (round_kernel.hpp) with philox32: words[4 b + j] = word j of block first_block + b, b < blocks;
/// the portable loop where the low counter word would wrap (once per 2^34 words).
SAFEAMP_DETAIL_NOINLINE inline void philox_fill_avx512(std::uint32_t* words, std::uint64_t first_block,
                                                       std::size_t blocks, std::uint64_t seed,
                                                       std::uint32_t stream) noexcept {
  if ((first_block & 0xFFFFFFFFu) + blocks + philox32::blocks > (std::uint64_t{1} << 32)) {
    detail::philox_fill(words, first_block, blocks, seed, stream);
    return;
  }
  const philox32 gen(seed, stream);
  std::size_t b = 0;
  for (; b + philox32::blocks <= blocks; b += philox32::blocks) {
    __m512i w[8];
    gen(first_block + b, w);
    for (std::size_t j = 0; j < 8; ++j) _mm512_storeu_si512(words + 4 * b + 16 * j, w[j]);
  }
  if (b < blocks) {
    __m512i w[8];
    gen(first_block + b, w);
    const std::size_t n_words = 4 * (blocks - b);
    for (std::size_t j = 0; 16 * j < n_words; ++j) {
      const std::size_t left = n_words - 16 * j;
      const auto m = static_cast<__mmask16>(left >= 16 ? 0xFFFFu : (1u << left) - 1u);
      _mm512_mask_storeu_epi32(words + 4 * b + 16 * j, m, w[j]);
    }
  }
}

}  // namespace safeamp::detail::avx512

SAFEAMP_DETAIL_TARGET_END

#endif  // SAFEAMP_X86_KERNELS
