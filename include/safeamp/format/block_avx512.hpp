// The AVX-512 kernel of quantize_blocks for OCP MX blocks of 32 along rows (MXFP8, MXFP6, MXFP4): one pass, in
// registers, over each block: its largest magnitude, the E8M0 scale, the scale-down, round_span's own 16-lane
// rounding (round_avx512.hpp: the same instructions, so the same bits and counters), the scale-up and the store.
// Chosen at run time (cpu_path.hpp) by block_quantize.hpp; same bits as quantize_blocks_reference.
#pragma once

#include "safeamp/format/cpu_path.hpp"

#if defined(SAFEAMP_X86_KERNELS)

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "safeamp/format/block_format.hpp"
#include "safeamp/format/block_row_walk.hpp"
#include "safeamp/format/format_spec.hpp"
#include "safeamp/format/philox.hpp"
#include "safeamp/format/round_avx512.hpp"
#include "safeamp/format/round_kernel.hpp"

// Compiled for AVX-512 whatever the build's -march (as round_avx512.hpp is); reached only when
// active_cpu_path() is avx512.
SAFEAMP_DETAIL_AVX512_BEGIN

namespace safeamp::detail::avx512 {

// The maskz forms with a full mask, as in round_avx512.hpp: g++ 12's unmasked forms warn where inlined.
SAFEAMP_DETAIL_ALWAYS_INLINE __m512i max_u32(__m512i a, __m512i b) noexcept {
  return _mm512_maskz_max_epu32(all_lanes, a, b);
}

/// Every lane gets the largest of the 16 (unsigned): swap halves, quarters, pairs of lanes, lanes.
SAFEAMP_DETAIL_ALWAYS_INLINE __m512i broadcast_max(__m512i m) noexcept {
  m = max_u32(m, _mm512_maskz_shuffle_i32x4(all_lanes, m, m, _MM_SHUFFLE(1, 0, 3, 2)));
  m = max_u32(m, _mm512_maskz_shuffle_i32x4(all_lanes, m, m, _MM_SHUFFLE(2, 3, 0, 1)));
  m = max_u32(m, _mm512_maskz_shuffle_epi32(all_lanes, m, _MM_PERM_BADC));
  return max_u32(m, _mm512_maskz_shuffle_epi32(all_lanes, m, _MM_PERM_CDAB));
}

/// The MX scale of a block, lane-parallel, from the bits of its largest magnitude (broadcast). With the
/// exponent field e of amax (0 for zero and float subnormals, whose floor(log2) the reference also clamps to
/// -127), shared_exp = e - 127 - emax_element clamped to [-127, 127], so s = shared_exp + 127 = clamp(e -
/// emax_element, 0, 254) is the float exponent field of X = 2^shared_exp, and 254 - s that of 1/X; a field of 0
/// stands for 2^-127, the float subnormal 0x00400000 (as pow2f in block_kernels.hpp). e = 255 (NaN or inf in the
/// block): the NaN scale.
struct mx_scale_constants {
  __m512i emax_element;
  __m512i zero = _mm512_setzero_si512();
  __m512i top = u32(254);
  __m512i nan_field = u32(255);
  __m512i two_to_minus_127 = u32(0x00400000u);
  __m512 nan = _mm512_castsi512_ps(u32(0x7FC00000u));  // block_kernels.hpp's quiet_nan_bits

  explicit mx_scale_constants(int emax) noexcept : emax_element(u32(static_cast<std::uint32_t>(emax))) {}
};

struct mx_scale {
  __m512 x;          // X = 2^shared_exp (NaN for a NaN block)
  __m512 inverse;    // 1 / X, exact
  __mmask16 finite;  // all lanes, or none for a block holding a NaN or an infinity
};

SAFEAMP_DETAIL_ALWAYS_INLINE mx_scale mx_scale_of(const mx_scale_constants& k, __m512i amax) noexcept {
  const __m512i field = srl32<23>(amax);
  const __mmask16 finite = _mm512_cmplt_epu32_mask(field, k.nan_field);
  const __m512i s = _mm512_maskz_min_epi32(
      all_lanes, _mm512_maskz_max_epi32(all_lanes, _mm512_sub_epi32(field, k.emax_element), k.zero), k.top);
  const __m512i t = _mm512_sub_epi32(k.top, s);
  const __m512i x_bits = _mm512_mask_mov_epi32(_mm512_maskz_slli_epi32(all_lanes, s, 23), _mm512_testn_epi32_mask(s, s),
                                               k.two_to_minus_127);
  const __m512i inverse_bits = _mm512_mask_mov_epi32(_mm512_maskz_slli_epi32(all_lanes, t, 23),
                                                     _mm512_testn_epi32_mask(t, t), k.two_to_minus_127);
  return {_mm512_mask_mov_ps(k.nan, finite, _mm512_castsi512_ps(x_bits)), _mm512_castsi512_ps(inverse_bits), finite};
}

/// One MX block of 32 at in (lanes m0, m1: a short last block reads zeros, which change neither the maximum nor
/// the counters): out = P X with P the element rounding of in / X (saturating), scale = X. A NaN block rounds
/// zeros (nothing counted), then is NaN throughout and counted as NaN, as the chunked path does.
template <rounding R, format_spec F, bool Always>
SAFEAMP_DETAIL_ALWAYS_INLINE void mx32_block(const vector_constants<F>& v, const mx_scale_constants& k, const float* in,
                                             float* out, float* scale, const std::uint32_t* words, __mmask16 m0,
                                             __mmask16 m1, counters16& acc) noexcept {
  const __m512i u0 = _mm512_maskz_loadu_epi32(m0, in);
  const __m512i u1 = _mm512_maskz_loadu_epi32(m1, in + 16);
  const __m512i amax = broadcast_max(max_u32(_mm512_and_si512(u0, v.abs_mask), _mm512_and_si512(u1, v.abs_mask)));
  const mx_scale sc = mx_scale_of(k, amax);
  const __m512i y0 = _mm512_castps_si512(_mm512_maskz_mul_ps(sc.finite, _mm512_castsi512_ps(u0), sc.inverse));
  const __m512i y1 = _mm512_castps_si512(_mm512_maskz_mul_ps(sc.finite, _mm512_castsi512_ps(u1), sc.inverse));
  __m512i rnd0 = _mm512_setzero_si512(), rnd1 = _mm512_setzero_si512();
  if constexpr (R == rounding::stochastic) {
    rnd0 = _mm512_maskz_loadu_epi32(m0, words);
    rnd1 = _mm512_maskz_loadu_epi32(m1, words + 16);
  }
  const __m512 p0 = _mm512_castsi512_ps(round16<R, F, false, true, Always>(v, y0, rnd0, acc));
  const __m512 p1 = _mm512_castsi512_ps(round16<R, F, false, true, Always>(v, y1, rnd1, acc));
  const __m512 o0 = _mm512_mask_mul_ps(k.nan, sc.finite, p0, sc.x);
  const __m512 o1 = _mm512_mask_mul_ps(k.nan, sc.finite, p1, sc.x);
  if (sc.finite == 0) acc.nan = count(count(acc.nan, m0), m1);
  _mm512_mask_storeu_ps(out, m0, o0);
  _mm512_mask_storeu_ps(out + 16, m1, o1);
  _mm512_mask_storeu_ps(scale, 1, sc.x);
}

/// One row of n elements (in, out, scales at the row's start; element j has the logical stochastic index
/// first_index + j of key). Nearest even chooses the all-normal shortcut per group of 32 blocks (64 vectors) as
/// round_nearest_chunk does (path_choice). Ordinary stores, as in block_avx2.hpp (streaming stores made it
/// slower on the machine of docs/performance.md).
template <rounding R, format_spec F>
SAFEAMP_DETAIL_NOINLINE void quantize_mx32_row(const float* in, float* out, std::size_t n, float* scales,
                                               std::uint64_t first_index, philox_key key, local_counts& c) noexcept {
  vector_constants<F> v;
  const mx_scale_constants k(max_exponent(F));
  counters16 acc;
  path_choice choice;
  bool always = false;
  walk_row<R, mx_block, 32, philox_fill_avx512>(
      n, first_index, key,
      [&](std::size_t b, std::size_t i, const std::uint32_t* w) noexcept {
        if (always) {
          mx32_block<R, F, true>(v, k, in + i, out + i, scales + b, w, all_lanes, all_lanes, acc);
        } else {
          mx32_block<R, F, false>(v, k, in + i, out + i, scales + b, w, all_lanes, all_lanes, acc);
        }
      },
      [&] {
        acc.widen_codes();  // round16 counts in 16-bit lanes: a group is at most 64 vectors
        choice.start(acc);
        always = R == rounding::nearest_even && choice.always;
      },
      [&](std::size_t blocks) {
        if constexpr (R == rounding::nearest_even) choice.finish(acc, 2 * blocks);
      },
      [&](std::size_t b, std::size_t i, std::size_t len, const std::uint32_t* w) noexcept {
        const __mmask16 m0 = first_lanes(len < 16 ? len : 16);
        const __mmask16 m1 = len > 16 ? first_lanes(len - 16) : 0;
        mx32_block<R, F, false>(v, k, in + i, out + i, scales + b, w, m0, m1, acc);
      });
  acc.add_to(c);
}

}  // namespace safeamp::detail::avx512

SAFEAMP_DETAIL_TARGET_END

#endif  // SAFEAMP_X86_KERNELS
