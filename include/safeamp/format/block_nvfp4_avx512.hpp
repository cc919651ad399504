// The AVX-512 kernel of quantize_blocks for NVFP4 along rows: one pass, in registers, over each block of 16 (one
// vector): its largest magnitude broadcast across the lanes, the E4M3 block scale (block_nvfp4_avx2.hpp's
// nvfp4_scale_of on the low half: round_avx2.hpp's round8, the same bits as the reference's round_to), X = S s,
// the division, round_span's own 16-lane rounding into E2M1 (round_avx512.hpp's round16), the product and the
// store. Chosen at run time (cpu_path.hpp) by block_quantize.hpp; same bits as quantize_blocks_reference.
#pragma once

#include "safeamp/format/cpu_path.hpp"

#if defined(SAFEAMP_X86_KERNELS)

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "safeamp/format/block_avx512.hpp"
#include "safeamp/format/block_nvfp4_avx2.hpp"
#include "safeamp/format/block_reference.hpp"
#include "safeamp/format/block_row_walk.hpp"
#include "safeamp/format/format_spec.hpp"
#include "safeamp/format/philox.hpp"
#include "safeamp/format/round_avx512.hpp"
#include "safeamp/format/round_kernel.hpp"

SAFEAMP_DETAIL_AVX512_BEGIN

namespace safeamp::detail::avx512 {

/// One block of 16 at in, lanes m (a short last block: zeros past it, which change neither the maximum nor the
/// counters): out = P X with P = F(in / X) saturating, scale = S. The tensor is finite. A block whose scale X
/// is 0 gives zeros of the inputs' signs, each nonzero input counted as underflow.
template <rounding R, format_spec F, bool Always>
SAFEAMP_DETAIL_ALWAYS_INLINE void nvfp4_block(const vector_constants<F>& v, const float* in, float* out, float* scale,
                                              const std::uint32_t* words, __m256 denominator, __m256 tensor_scale,
                                              __mmask16 m, counters16& acc) noexcept {
  const __m512i u = _mm512_maskz_loadu_epi32(m, in);
  const __m512i amax = broadcast_max(_mm512_and_si512(u, v.abs_mask));
  const avx2::nvfp4_scale sc =
      avx2::nvfp4_scale_of(_mm512_maskz_extracti32x8_epi32(0xFF, amax, 0), denominator, tensor_scale);
  // The maskz forms with a full mask, as in round_avx512.hpp: g++ 12's unmasked forms warn where inlined.
  const __m512 x = _mm512_maskz_broadcastss_ps(all_lanes, _mm256_castps256_ps128(sc.x));
  __m512 o;
  if (_mm_cvtss_f32(_mm256_castps256_ps128(sc.x)) == 0.0f) {
    const __mmask16 nonzero = _mm512_mask_test_epi32_mask(m, u, v.abs_mask);
    acc.zero_results = count(acc.zero_results, nonzero);
    acc.below_normal = count(acc.below_normal, nonzero);
    o = _mm512_castsi512_ps(_mm512_and_si512(u, v.sign));
  } else {
    __m512i rnd = _mm512_setzero_si512();
    if constexpr (R == rounding::stochastic) rnd = _mm512_maskz_loadu_epi32(m, words);
    const __m512 y = _mm512_div_ps(_mm512_castsi512_ps(u), x);  // one IEEE division, as the reference's
    o = _mm512_mul_ps(_mm512_castsi512_ps(round16<R, F, false, true, Always>(v, _mm512_castps_si512(y), rnd, acc)), x);
  }
  _mm512_mask_storeu_ps(out, m, o);
  _mm_store_ss(scale, _mm256_castps256_ps128(sc.s));
}

/// One row of n elements (blocks of 16 in F, E2M1 for NVFP4) of a finite tensor with scale tensor_scale (in,
/// out, scales at the row's start; element j has the logical stochastic index first_index + j of key). Nearest
/// even chooses the all-normal shortcut per group of 64 blocks (64 vectors), as round_nearest_chunk does.
template <rounding R, format_spec F>
SAFEAMP_DETAIL_NOINLINE void quantize_nvfp4_row(const float* in, float* out, std::size_t n, float* scales,
                                                std::uint64_t first_index, philox_key key, float tensor_scale,
                                                local_counts& c) noexcept {
  vector_constants<F> v;
  counters16 acc;
  path_choice choice;
  bool always = false;
  const __m256 ts = _mm256_set1_ps(tensor_scale);
  const __m256 denominator = _mm256_set1_ps(tensor_scale * nvfp4_element_max);  // as the reference's
  walk_row<R, avx2::nvfp4_block, 64, philox_fill_avx512>(
      n, first_index, key,
      [&](std::size_t b, std::size_t i, const std::uint32_t* w) noexcept {
        if (always) {
          nvfp4_block<R, F, true>(v, in + i, out + i, scales + b, w, denominator, ts, all_lanes, acc);
        } else {
          nvfp4_block<R, F, false>(v, in + i, out + i, scales + b, w, denominator, ts, all_lanes, acc);
        }
      },
      [&] {
        acc.widen_codes();  // round16 counts in 16-bit lanes: a group is at most 64 vectors
        choice.start(acc);
        always = R == rounding::nearest_even && choice.always;
      },
      [&](std::size_t blocks) {
        if constexpr (R == rounding::nearest_even) choice.finish(acc, blocks);
      },
      [&](std::size_t b, std::size_t i, std::size_t len, const std::uint32_t* w) noexcept {
        nvfp4_block<R, F, false>(v, in + i, out + i, scales + b, w, denominator, ts, first_lanes(len), acc);
      });
  acc.add_to(c);
}

}  // namespace safeamp::detail::avx512

SAFEAMP_DETAIL_TARGET_END

#endif  // SAFEAMP_X86_KERNELS
