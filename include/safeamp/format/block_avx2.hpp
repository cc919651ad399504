// The AVX2 kernel of quantize_blocks for OCP MX blocks of 32 along rows (MXFP8, MXFP6, MXFP4): one pass over each
// block (four vectors of 8): its largest magnitude, the E8M0 scale (in scalar registers), then each vector
// rounded by round8's fixed cut applied to the inputs themselves when all 8 lie in the block's normal range,
// else scaled down, rounded by round_span's own round8 (round_avx2.hpp: the same instructions, so the same bits
// and counters) and scaled up. The AVX2 twin of block_avx512.hpp; chosen at run time (cpu_path.hpp) by
// block_quantize.hpp; same bits as quantize_blocks_reference.
#pragma once

#include "safeamp/format/cpu_path.hpp"

#if defined(SAFEAMP_X86_KERNELS)

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "safeamp/config.hpp"
#include "safeamp/format/block_format.hpp"
#include "safeamp/format/block_row_walk.hpp"
#include "safeamp/format/format_spec.hpp"
#include "safeamp/format/philox.hpp"
#include "safeamp/format/round_avx2.hpp"
#include "safeamp/format/round_kernel.hpp"

// Compiled for AVX2 whatever the build's -march (as round_avx2.hpp is); reached only when active_cpu_path() is
// avx2.
SAFEAMP_DETAIL_AVX2_BEGIN

namespace safeamp::detail::avx2 {

/// Every lane gets the largest of the 8 (unsigned): swap the 128-bit halves, then pairs of lanes, then lanes.
SAFEAMP_DETAIL_ALWAYS_INLINE vec broadcast_max(vec m) noexcept {
  m = _mm256_max_epu32(m, _mm256_permute2x128_si256(m, m, 0x01));
  m = _mm256_max_epu32(m, _mm256_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm256_max_epu32(m, _mm256_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
}

/// The largest of the 8 lanes (unsigned), as a scalar: the halves, then 128-bit steps.
SAFEAMP_DETAIL_ALWAYS_INLINE std::uint32_t max_lane(vec m) noexcept {
  __m128i h = _mm_max_epu32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
  h = _mm_max_epu32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(1, 0, 3, 2)));
  h = _mm_max_epu32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(2, 3, 0, 1)));
  return static_cast<std::uint32_t>(_mm_cvtsi128_si32(h));
}

/// The MX scale of a block from the bits of its largest magnitude, in scalar registers (the vector units are
/// the busy ones), as scale_of_block (block_kernels.hpp) computes it: with e the exponent field of amax (0 for
/// zero and float subnormals, whose floor(log2) the reference also clamps to -127), s = clamp(e - emax_element,
/// 0, 254) is the float exponent field of X = 2^shared_exp and 254 - s that of 1/X; a field of 0 stands for
/// 2^-127, the float subnormal 0x00400000 (as pow2f does). e = 255 (NaN or inf in the block): the NaN scale.
///
/// The block's normal range [lo, hi] in the bits of |x|: where x / X lies in F's normal range and both x and
/// P X are normal floats, x / X and P X differ from x and P only in the exponent field (by shared_exp), so P X
/// is round8's fixed cut applied to x itself, and nothing is counted (round8 counts nothing there either).
/// With shift = shared_exp << 23, lo = max(min_normal(F) + shift, the smallest normal float) and hi =
/// max_finite(F) + shift (>= lo, and a normal float: F's max is at least 2 and X at least 2^-127).
struct mx_block_scale {
  std::uint32_t x_bits;        // X (the NaN scale 0x7FC00000 for a block holding a NaN or an infinity)
  std::uint32_t inverse_bits;  // 1 / X, exact
  std::uint32_t range_bias;    // 2^31 - lo: |x| + range_bias > range_limit (signed) iff |x| is outside [lo, hi]
  std::uint32_t range_limit;   // (hi - lo) ^ 2^31
  bool finite;
};
template <format_spec F>
[[nodiscard]] constexpr mx_block_scale mx_scale_of(std::uint32_t amax_bits) noexcept {
  static_assert(max_finite(F) >= 2.0f, "hi = max_finite(F) X is a normal float for every X >= 2^-127");
  constexpr round_constants k = make_round_constants(F);
  const int field = static_cast<int>(amax_bits >> 23);  // 0..255
  int s = field - max_exponent(F);
  s = s < 0 ? 0 : s > 254 ? 254 : s;
  const auto pow2_bits = [](int exponent_field) {
    return exponent_field == 0 ? 0x00400000u : static_cast<std::uint32_t>(exponent_field) << 23;
  };
  const std::int32_t shift = (s - 127) * (std::int32_t{1} << 23);
  std::int32_t lo = static_cast<std::int32_t>(k.min_normal_bits) + shift;
  lo = lo < 0x00800000 ? 0x00800000 : lo;
  const std::int32_t hi = static_cast<std::int32_t>(k.max_bits) + shift;
  return {field == 255 ? 0x7FC00000u : pow2_bits(s), pow2_bits(254 - s), 0x80000000u - static_cast<std::uint32_t>(lo),
          static_cast<std::uint32_t>(hi - lo) ^ 0x80000000u, field != 255};
}

/// The constants of the fixed cut at bit 23 - M (round8's normal-range path), kept in registers across a row:
/// with 16 vector registers g++ otherwise rebuilds each broadcast inside the loop.
template <format_spec F>
struct mx_cut {
  vec abs_mask = u32(0x7FFFFFFFu);
  vec one = u32(1);
  vec half_minus_one = u32(traits<F>::low >> 1);
  vec keep = u32(~traits<F>::low);
  mx_cut() noexcept { __asm__("" : "+x"(abs_mask), "+x"(one), "+x"(half_minus_one), "+x"(keep)); }
};

/// One vector of a finite block, a = |u|: when all 8 lie in the block's normal range [lo, hi], round8's fixed
/// cut applied to u itself (see mx_block_scale); else P = round8(u / X) saturating and out = P X.
template <rounding R, format_spec F>
SAFEAMP_DETAIL_ALWAYS_INLINE __m256 mx_vector(const mx_cut<F>& cut, vec u, vec a, const mx_block_scale& sc,
                                              vec range_bias, vec range_limit, vec rnd, counters8& acc) noexcept {
  const vec outside = _mm256_cmpgt_epi32(_mm256_add_epi32(a, range_bias), range_limit);
  if (!_mm256_testz_si256(outside, outside)) {
    const __m256 x = _mm256_castsi256_ps(u32(sc.x_bits));
    const __m256 y = _mm256_mul_ps(_mm256_castsi256_ps(u), _mm256_castsi256_ps(u32(sc.inverse_bits)));
    return _mm256_mul_ps(_mm256_castsi256_ps(round8<R, F, false, true>(_mm256_castps_si256(y), rnd, acc)), x);
  }
  vec bias;
  if constexpr (R == rounding::nearest_even) {
    bias = _mm256_add_epi32(_mm256_and_si256(_mm256_srli_epi32(u, traits<F>::sh), cut.one), cut.half_minus_one);
  } else {
    static_assert(R == rounding::stochastic, "quantize_blocks rounds to nearest even or stochastically");
    bias = _mm256_srli_epi32(rnd, 32 - traits<F>::sh);  // a carry past the cut iff frac32 > ~random
  }
  return _mm256_castsi256_ps(_mm256_and_si256(_mm256_add_epi32(u, bias), cut.keep));
}

/// Lanes [0, k) of a vector, as a load/store mask (k in 0..8).
SAFEAMP_DETAIL_ALWAYS_INLINE vec first_lanes(std::size_t k) noexcept {
  const vec index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(u32(static_cast<std::uint32_t>(k)), index);
}

/// One MX block of 32 at in, lanes [0, len) (Whole: len = 32; else masked loads read zeros past the end, which
/// change neither the maximum nor the counters): out = P X with P the element rounding of in / X (saturating),
/// scale = X. A NaN block is NaN throughout and counted as NaN (the chunked path rounds zeros for it first,
/// which counts nothing).
template <rounding R, format_spec F, bool Whole>
SAFEAMP_DETAIL_ALWAYS_INLINE void mx32_block(const mx_cut<F>& cut, const float* in, float* out, std::size_t len,
                                             float* scale, const std::uint32_t* words, counters8& acc) noexcept {
  vec lanes[4], u[4], a[4];
  for (std::size_t j = 0; j < 4; ++j) {
    if constexpr (Whole) {
      u[j] = _mm256_loadu_si256(reinterpret_cast<const vec*>(in + 8 * j));
    } else {
      lanes[j] = first_lanes(len <= 8 * j ? 0 : len - 8 * j >= 8 ? 8 : len - 8 * j);
      u[j] = _mm256_maskload_epi32(reinterpret_cast<const int*>(in + 8 * j), lanes[j]);
    }
    a[j] = _mm256_and_si256(u[j], cut.abs_mask);
  }
  const mx_block_scale sc =
      mx_scale_of<F>(max_lane(_mm256_max_epu32(_mm256_max_epu32(a[0], a[1]), _mm256_max_epu32(a[2], a[3]))));
  *scale = safeamp::bit_cast<float>(sc.x_bits);
  if (!sc.finite) {
    // A NaN block: NaN throughout (X's quiet NaN), each element counted as NaN.
    const vec nan = u32(sc.x_bits);
    for (std::size_t j = 0; j < 4; ++j) {
      if constexpr (Whole) {
        _mm256_storeu_si256(reinterpret_cast<vec*>(out + 8 * j), nan);
      } else {
        _mm256_maskstore_epi32(reinterpret_cast<int*>(out + 8 * j), lanes[j], nan);
      }
    }
    acc.nan = Whole ? _mm256_add_epi32(acc.nan, u32(4))
                    : count(count(count(count(acc.nan, lanes[0]), lanes[1]), lanes[2]), lanes[3]);
    return;
  }
  const vec range_bias = u32(sc.range_bias), range_limit = u32(sc.range_limit);
  // Unrolled by hand: g++ keeps a loop over the four vectors, with u and a in memory.
  const auto one = [&](std::size_t j) noexcept {
    vec rnd = _mm256_setzero_si256();
    if constexpr (R == rounding::stochastic) {
      rnd = Whole ? _mm256_loadu_si256(reinterpret_cast<const vec*>(words + 8 * j))
                  : _mm256_maskload_epi32(reinterpret_cast<const int*>(words + 8 * j), lanes[j]);
    }
    const __m256 o = mx_vector<R, F>(cut, u[j], a[j], sc, range_bias, range_limit, rnd, acc);
    if constexpr (Whole) {
      _mm256_storeu_ps(out + 8 * j, o);
    } else {
      _mm256_maskstore_ps(out + 8 * j, lanes[j], o);
    }
  };
  one(0);
  one(1);
  one(2);
  one(3);
}

/// One row of n elements (in, out, scales at the row's start; element j has the logical stochastic index
/// first_index + j of key). Ordinary stores: on the Zen 4 machine of docs/performance.md streaming stores
/// (through an L1 buffer, as std::vector's large buffers sit 16 bytes past a 64-byte boundary) made the MXFP8
/// row kernel slower on 64 Mi floats (0.49-0.67x memcpy against 0.63-0.88x).
template <rounding R, format_spec F>
SAFEAMP_DETAIL_NOINLINE void quantize_mx32_row(const float* in, float* out, std::size_t n, float* scales,
                                               std::uint64_t first_index, philox_key key, local_counts& c) noexcept {
  const mx_cut<F> cut;
  counters8 acc;
  walk_row<R, mx_block, 16, philox_fill_avx2>(
      n, first_index, key,
      [&](std::size_t k, std::size_t i, const std::uint32_t* w) noexcept {
        mx32_block<R, F, true>(cut, in + i, out + i, mx_block, scales + k, w, acc);
      },
      [] {}, [](std::size_t) {},
      [&](std::size_t k, std::size_t i, std::size_t len, const std::uint32_t* w) noexcept {
        mx32_block<R, F, false>(cut, in + i, out + i, len, scales + k, w, acc);
      });
  acc.add_to(c);
}

}  // namespace safeamp::detail::avx2

SAFEAMP_DETAIL_TARGET_END

#endif  // SAFEAMP_X86_KERNELS
