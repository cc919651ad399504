// The AVX2 kernels of quantize_blocks for NVFP4 along rows: the tensor's largest magnitude (the pass that
// gives the fp32 tensor scale), and one pass, in registers, over each block of 16 (two vectors of 8): its
// largest magnitude, the E4M3 block scale (round_avx2.hpp's round8, nearest and saturating: the same bits as
// the reference's round_to), X = S s, the division, round8 into E2M1, the product and the store. Chosen at run
// time (cpu_path.hpp) by block_quantize.hpp; same bits as quantize_blocks_reference (block_reference.hpp).
#pragma once

#include "safeamp/format/cpu_path.hpp"

#if defined(SAFEAMP_X86_KERNELS)

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "safeamp/format/block_avx2.hpp"
#include "safeamp/format/block_reference.hpp"
#include "safeamp/format/block_row_walk.hpp"
#include "safeamp/format/format_spec.hpp"
#include "safeamp/format/philox.hpp"
#include "safeamp/format/round_avx2.hpp"
#include "safeamp/format/round_kernel.hpp"

SAFEAMP_DETAIL_AVX2_BEGIN

namespace safeamp::detail::avx2 {

inline constexpr std::size_t nvfp4_block = 16;  // elements of an NVFP4 block: two vectors

/// The bits of the largest |x| of in[0..n) (NaN and inf have the largest bit patterns, as the scalar loop's).
SAFEAMP_DETAIL_NOINLINE inline std::uint32_t amax_bits(const float* in, std::size_t n) noexcept {
  const vec abs_mask = u32(0x7FFFFFFFu);
  vec m[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (std::size_t j = 0; j < 4; ++j) {
      const vec u = _mm256_loadu_si256(reinterpret_cast<const vec*>(in + i + 8 * j));
      m[j] = _mm256_max_epu32(m[j], _mm256_and_si256(u, abs_mask));
    }
  }
  const vec all = broadcast_max(_mm256_max_epu32(_mm256_max_epu32(m[0], m[1]), _mm256_max_epu32(m[2], m[3])));
  auto amax = static_cast<std::uint32_t>(_mm256_cvtsi256_si32(all));
  for (; i < n; ++i) {
    const std::uint32_t a = safeamp::bit_cast<std::uint32_t>(in[i]) & 0x7FFFFFFFu;
    amax = a > amax ? a : amax;
  }
  return amax;
}

/// The NVFP4 scales of a block from its largest magnitude (bits, broadcast): S = E4M3(amax / (6 s)), nearest and
/// saturating, and X = S s, in every lane. The scale's rounding counts nothing (its counters are dropped).
struct nvfp4_scale {
  __m256 x;  // X = S s: the element scale
  __m256 s;  // S: the stored E4M3 block scale
};
SAFEAMP_DETAIL_ALWAYS_INLINE nvfp4_scale nvfp4_scale_of(vec amax, __m256 denominator, __m256 tensor_scale) noexcept {
  counters8 dropped;
  const __m256 q = _mm256_div_ps(_mm256_castsi256_ps(amax), denominator);
  const __m256 s = _mm256_castsi256_ps(
      round8<rounding::nearest_even, fp8_e4m3, false, true>(_mm256_castps_si256(q), _mm256_setzero_si256(), dropped));
  return {_mm256_mul_ps(s, tensor_scale), s};
}

/// A block whose scale X is 0 (its largest magnitude rounds to a zero E4M3 scale): zeros of the inputs' signs,
/// each nonzero input counted as underflow (a zero result of a nonzero input; not a subnormal).
SAFEAMP_DETAIL_ALWAYS_INLINE __m256 nvfp4_zero_vector(vec u, vec lanes, counters8& acc) noexcept {
  const vec a = _mm256_and_si256(u, u32(0x7FFFFFFFu));
  const vec nonzero = _mm256_andnot_si256(_mm256_cmpeq_epi32(a, _mm256_setzero_si256()), lanes);
  acc.zero_results = count(acc.zero_results, nonzero);
  acc.below_normal = count(acc.below_normal, nonzero);
  return _mm256_castsi256_ps(_mm256_and_si256(u, u32(0x80000000u)));
}

/// One block of 16 at in, lanes [0, len) (len 1..16; loads past it read zeros, which change neither the
/// maximum nor the counters): out = P X with P = F(in / X) saturating (F is E2M1 in NVFP4), scale = S. The
/// tensor is finite.
template <rounding R, format_spec F, bool Whole>
SAFEAMP_DETAIL_ALWAYS_INLINE void nvfp4_block_at(const float* in, float* out, std::size_t len, float* scale,
                                                 const std::uint32_t* words, __m256 denominator, __m256 tensor_scale,
                                                 counters8& acc) noexcept {
  const vec abs_mask = u32(0x7FFFFFFFu);
  vec lanes[2], u[2];
  for (std::size_t j = 0; j < 2; ++j) {
    if constexpr (Whole) {
      lanes[j] = u32(0xFFFFFFFFu);
      u[j] = _mm256_loadu_si256(reinterpret_cast<const vec*>(in + 8 * j));
    } else {
      lanes[j] = first_lanes(len <= 8 * j ? 0 : len - 8 * j >= 8 ? 8 : len - 8 * j);
      u[j] = _mm256_maskload_epi32(reinterpret_cast<const int*>(in + 8 * j), lanes[j]);
    }
  }
  const vec amax = broadcast_max(_mm256_max_epu32(_mm256_and_si256(u[0], abs_mask), _mm256_and_si256(u[1], abs_mask)));
  const nvfp4_scale sc = nvfp4_scale_of(amax, denominator, tensor_scale);
  const bool zero_scale = _mm256_movemask_ps(_mm256_cmp_ps(sc.x, _mm256_setzero_ps(), _CMP_EQ_OQ)) != 0;
  for (std::size_t j = 0; j < 2; ++j) {
    __m256 o;
    if (zero_scale) {
      o = nvfp4_zero_vector(u[j], lanes[j], acc);
    } else {
      vec rnd = _mm256_setzero_si256();
      if constexpr (R == rounding::stochastic) {
        rnd = Whole ? _mm256_loadu_si256(reinterpret_cast<const vec*>(words + 8 * j))
                    : _mm256_maskload_epi32(reinterpret_cast<const int*>(words + 8 * j), lanes[j]);
      }
      const __m256 y = _mm256_div_ps(_mm256_castsi256_ps(u[j]), sc.x);  // one IEEE division, as the reference's
      const __m256 p = _mm256_castsi256_ps(round8<R, F, false, true>(_mm256_castps_si256(y), rnd, acc));
      o = _mm256_mul_ps(p, sc.x);
    }
    if constexpr (Whole) {
      _mm256_storeu_ps(out + 8 * j, o);
    } else {
      _mm256_maskstore_ps(out + 8 * j, lanes[j], o);
    }
  }
  _mm_store_ss(scale, _mm256_castps256_ps128(sc.s));
}

/// One row of n elements (blocks of 16 in F, E2M1 for NVFP4) of a finite tensor with scale tensor_scale (in,
/// out, scales at the row's start; element j has the logical stochastic index first_index + j of key).
template <rounding R, format_spec F>
SAFEAMP_DETAIL_NOINLINE void quantize_nvfp4_row(const float* in, float* out, std::size_t n, float* scales,
                                                std::uint64_t first_index, philox_key key, float tensor_scale,
                                                local_counts& c) noexcept {
  counters8 acc;
  const __m256 ts = _mm256_set1_ps(tensor_scale);
  const __m256 denominator = _mm256_set1_ps(tensor_scale * nvfp4_element_max);  // as the reference's
  walk_row<R, nvfp4_block, 32, philox_fill_avx2>(
      n, first_index, key,
      [&](std::size_t k, std::size_t i, const std::uint32_t* w) noexcept {
        nvfp4_block_at<R, F, true>(in + i, out + i, nvfp4_block, scales + k, w, denominator, ts, acc);
      },
      [] {}, [](std::size_t) {},
      [&](std::size_t k, std::size_t i, std::size_t len, const std::uint32_t* w) noexcept {
        nvfp4_block_at<R, F, false>(in + i, out + i, len, scales + k, w, denominator, ts, acc);
      });
  acc.add_to(c);
}

}  // namespace safeamp::detail::avx2

SAFEAMP_DETAIL_TARGET_END

#endif  // SAFEAMP_X86_KERNELS
