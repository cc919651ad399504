// AVX2 + F16C back-end of round_span for the named formats narrower than float (fp16, bf16, tf32, E4M3, E5M2),
// every rounding mode, and of the Philox block fill. Compiled on every x86 build with GCC or Clang under a target
// pragma (no -march needed) and run when active_cpu_path() is avx2, or on the avx512 path for the directed modes
// (cpu_path.hpp). Results, counters included, are those of round_floats (round_kernel.hpp) bit for bit.
//
// Eight lanes at a time. A vector whose lanes all lie in the target's normal range [min normal, max finite] is
// rounded by the fixed cut at bit 23 - M (round_fast.hpp explains why that is exact) and changes no counter.
// Any other vector takes exact8: round_float_bits (round_kernel.hpp) lane for lane, with AVX2's per-lane shifts
// (vpsrlvd/vpsllvd give 0 for counts of 32 or more, which the stochastic fraction relies on), or for fp16 nearest
// even the CPU's own conversion (F16C: rounding from the immediate, never MXCSR).
#pragma once

#include "safeamp/format/cpu_path.hpp"

#if defined(SAFEAMP_X86_KERNELS)

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "safeamp/config.hpp"
#include "safeamp/format/format_spec.hpp"
#include "safeamp/format/philox.hpp"
#include "safeamp/format/round_kernel.hpp"
#include "safeamp/format/round_options.hpp"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,f16c,bmi2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,f16c,bmi2")
#endif

namespace safeamp::detail::avx2 {

using vec = __m256i;

SAFEAMP_DETAIL_ALWAYS_INLINE vec u32(std::uint32_t v) noexcept { return _mm256_set1_epi32(static_cast<int>(v)); }
SAFEAMP_DETAIL_ALWAYS_INLINE vec select(vec m, vec x, vec y) noexcept { return _mm256_blendv_epi8(y, x, m); }
/// Unsigned x > y (AVX2 compares are signed: flip both sign bits).
SAFEAMP_DETAIL_ALWAYS_INLINE vec greater_u(vec x, vec y) noexcept {
  const vec s = u32(0x80000000u);
  return _mm256_cmpgt_epi32(_mm256_xor_si256(x, s), _mm256_xor_si256(y, s));
}
/// acc += 1 in the lanes where m is all ones.
SAFEAMP_DETAIL_ALWAYS_INLINE vec count(vec acc, vec m) noexcept { return _mm256_sub_epi32(acc, m); }

/// Vector accumulators of the counters (summed once per chunk). Underflow and subnormal are formed from
/// zero/below-normal results and zero inputs, as in the AVX-512 kernels.
struct counters8 {
  vec overflow, nan, infinity, below_normal, zero_results, zero_inputs;
  counters8() noexcept
      : overflow(_mm256_setzero_si256()),
        nan(overflow),
        infinity(overflow),
        below_normal(overflow),
        zero_results(overflow),
        zero_inputs(overflow) {}

  static std::uint32_t sum(vec v) noexcept {
    alignas(32) std::uint32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<vec*>(lanes), v);
    std::uint32_t s = 0;
    for (std::uint32_t x : lanes) s += x;
    return s;
  }
  void add_to(local_counts& c) const noexcept {
    c.add_vector_counts(sum(overflow), sum(nan), sum(infinity), sum(below_normal), sum(zero_results), sum(zero_inputs));
  }
};

/// The per-format constants, as compile-time values (broadcasts of them are cheap and hoisted by the compiler).
template <format_spec F>
struct traits {
  static constexpr round_constants k = make_round_constants(F);
  static constexpr bool float_range = k.emin_src <= 1u;  // bf16, tf32
  static constexpr std::uint32_t sh = 23u - k.mantissa_bits;
  static constexpr std::uint32_t low = (std::uint32_t{1} << sh) - 1u;
  // |x| in [min normal, max finite] iff |x| + range_bias > range_limit is false (signed compare of the
  // unsigned test |x| - min normal <= max - min normal).
  static constexpr std::uint32_t range_bias = 0x80000000u - k.min_normal_bits;
  static constexpr std::uint32_t range_limit = (k.max_bits - k.min_normal_bits) ^ 0x80000000u;
};

/// Every lane of one vector, exactly (round_float_bits of round_kernel.hpp): u input bits, a = |u|.
template <rounding R, format_spec F, bool Ftz, bool Sat>
SAFEAMP_DETAIL_ALWAYS_INLINE vec exact8(vec u, vec a, vec rnd, counters8& acc) noexcept {
  using t = traits<F>;
  constexpr round_constants k = t::k;
  const vec zero = _mm256_setzero_si256();
  const vec inf = u32(0x7F800000u);
  const vec max_bits = u32(k.max_bits);
  const vec negative = _mm256_srai_epi32(u, 31);  // all ones for negative inputs
  vec r;
  vec over;  // lanes whose rounded magnitude exceeds max finite (+-inf and NaN inputs among them)
  if constexpr (R == rounding::nearest_even && F == fp16) {
    const __m128i h = _mm256_cvtps_ph(_mm256_castsi256_ps(a), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_castps_si256(_mm256_cvtph_ps(h));
    over = _mm256_cmpgt_epi32(r, max_bits);
  } else {
    const vec ex = _mm256_srli_epi32(a, 23);
    const vec sig = _mm256_or_si256(_mm256_and_si256(a, u32(0x7FFFFFu)),
                                    _mm256_andnot_si256(_mm256_cmpeq_epi32(ex, zero), u32(0x800000u)));
    vec sh = u32(t::sh);
    if constexpr (!t::float_range) {
      const vec ex1 = _mm256_max_epi32(ex, u32(1));
      const vec below = _mm256_max_epi32(_mm256_sub_epi32(u32(k.emin_src), ex1), zero);
      sh = _mm256_add_epi32(sh, below);
    }
    const vec sh_c = _mm256_min_epi32(sh, u32(31));
    const vec one = u32(1);
    const vec q = _mm256_srlv_epi32(sig, sh_c);
    const vec rem = _mm256_and_si256(sig, _mm256_sub_epi32(_mm256_sllv_epi32(one, sh_c), one));
    const vec inexact = _mm256_andnot_si256(_mm256_cmpeq_epi32(rem, zero), u32(0xFFFFFFFFu));
    vec up = zero;  // all ones where the magnitude rounds up
    if constexpr (R == rounding::nearest_even) {
      const vec half = _mm256_srli_epi32(_mm256_sllv_epi32(one, sh_c), 1);
      const vec odd = _mm256_sub_epi32(zero, _mm256_and_si256(q, one));
      up = _mm256_or_si256(_mm256_cmpgt_epi32(rem, half),
                           _mm256_and_si256(_mm256_and_si256(_mm256_cmpeq_epi32(rem, half), inexact), odd));
    } else if constexpr (R == rounding::toward_pos_inf) {
      up = _mm256_andnot_si256(negative, inexact);
    } else if constexpr (R == rounding::toward_neg_inf) {
      up = _mm256_and_si256(negative, inexact);
    } else if constexpr (R == rounding::stochastic) {
      // frac32 = floor(2^32 rem / 2^sh): rem << (32 - sh) for sh <= 32, sig >> (sh - 32) above (one of the two
      // shift counts is out of range and gives 0; at sh = 32 both give sig, as rem = sig there).
      const vec frac32 = _mm256_or_si256(_mm256_sllv_epi32(rem, _mm256_sub_epi32(u32(32), sh)),
                                         _mm256_srlv_epi32(sig, _mm256_sub_epi32(sh, u32(32))));
      up = greater_u(frac32, _mm256_xor_si256(rnd, u32(0xFFFFFFFFu)));
    }
    r = _mm256_sllv_epi32(_mm256_sub_epi32(_mm256_srlv_epi32(a, sh_c), up), sh_c);  // - (-1) adds one
    if constexpr (!t::float_range) {
      // Cut below the float's significand (only in the target's subnormal range): 0 or one quantum.
      r = select(_mm256_cmpgt_epi32(sh, u32(23)), _mm256_and_si256(up, u32(k.quantum_bits)), r);
    }
    over = _mm256_cmpgt_epi32(r, max_bits);
  }
  if constexpr (Ftz) r = _mm256_andnot_si256(_mm256_cmpgt_epi32(u32(k.min_normal_bits), r), r);
  constexpr bool nearest_like = R == rounding::nearest_even || R == rounding::stochastic;
  const vec inf_or_nan = u32(k.inf_or_nan);
  vec overflow_bits = Sat ? max_bits : inf_or_nan;
  if constexpr (!Sat && R == rounding::toward_zero) overflow_bits = max_bits;
  if constexpr (!Sat && R == rounding::toward_pos_inf) overflow_bits = select(negative, max_bits, inf_or_nan);
  if constexpr (!Sat && R == rounding::toward_neg_inf) overflow_bits = select(negative, inf_or_nan, max_bits);
  r = select(over, overflow_bits, r);
  if constexpr (!nearest_like) r = select(_mm256_cmpeq_epi32(a, inf), Sat ? max_bits : inf_or_nan, r);
  const vec nan_in = _mm256_cmpgt_epi32(a, inf);
  r = select(nan_in, _mm256_or_si256(_mm256_and_si256(a, u32(k.payload_mask)), u32(k.nan_fill)), r);

  acc.overflow = count(acc.overflow, _mm256_and_si256(over, _mm256_cmpgt_epi32(inf, a)));
  acc.nan = count(acc.nan, _mm256_cmpgt_epi32(r, inf));
  acc.infinity = count(acc.infinity, _mm256_cmpeq_epi32(r, inf));
  acc.below_normal = count(acc.below_normal, _mm256_cmpgt_epi32(u32(k.min_normal_bits), r));
  acc.zero_results = count(acc.zero_results, _mm256_cmpeq_epi32(r, zero));
  acc.zero_inputs = count(acc.zero_inputs, _mm256_cmpeq_epi32(a, zero));
  return _mm256_or_si256(r, _mm256_and_si256(u, u32(0x80000000u)));
}

/// Eight elements: the fixed cut when every lane lies in the normal range, else exact8.
template <rounding R, format_spec F, bool Ftz, bool Sat>
SAFEAMP_DETAIL_ALWAYS_INLINE vec round8(vec u, vec rnd, counters8& acc) noexcept {
  using t = traits<F>;
  const vec a = _mm256_and_si256(u, u32(0x7FFFFFFFu));
  const vec special = _mm256_cmpgt_epi32(_mm256_add_epi32(a, u32(t::range_bias)), u32(t::range_limit));
  if (!_mm256_testz_si256(special, special)) return exact8<R, F, Ftz, Sat>(u, a, rnd, acc);
  vec bias = _mm256_setzero_si256();
  if constexpr (R == rounding::nearest_even) {
    bias = _mm256_add_epi32(_mm256_and_si256(_mm256_srli_epi32(u, t::sh), u32(1)), u32(t::low >> 1));
  } else if constexpr (R == rounding::toward_pos_inf) {
    bias = _mm256_andnot_si256(_mm256_srai_epi32(u, 31), u32(t::low));
  } else if constexpr (R == rounding::toward_neg_inf) {
    bias = _mm256_and_si256(_mm256_srai_epi32(u, 31), u32(t::low));
  } else if constexpr (R == rounding::stochastic) {
    bias = _mm256_srli_epi32(rnd, 32 - t::sh);  // a carry past the cut iff frac32 > ~random
  }
  return _mm256_and_si256(_mm256_add_epi32(u, bias), u32(~t::low));
}

/// philox_fill (round_kernel.hpp) compiled for AVX2: the same loop, vectorised by the compiler over blocks.
SAFEAMP_DETAIL_NOINLINE inline void philox_fill_avx2(std::uint32_t* words, std::uint64_t first_block,
                                                     std::size_t blocks, std::uint64_t seed,
                                                     std::uint32_t stream) noexcept {
  philox_fill_loop(words, first_block, blocks, seed, stream);
}

/// Elements per stochastic step: their words are made just before they are rounded (they stay in L1).
inline constexpr std::size_t stochastic_step = 1024;

template <rounding R, format_spec F, bool Ftz, bool Sat>
SAFEAMP_DETAIL_NOINLINE void round_chunk_impl(const float* in, float* out, std::size_t n, philox_key key, bool stream,
                                              local_counts& c) noexcept {
  counters8 acc;
  alignas(32) std::uint32_t words[stochastic_step + 32];  // + the head (< 8) and the block skip (< 4)
  alignas(32) float tail_in[8], tail_out[8];
  std::uint32_t tail_words[8] = {};
  const vec no_bits = _mm256_setzero_si256();
  // Streaming stores need 32-byte aligned addresses: the elements before the first one are stored normally.
  std::size_t head = 0;
  if (stream) {
    head = ((32u - (reinterpret_cast<std::uintptr_t>(out) & 31u)) & 31u) / sizeof(float);
  }
  std::size_t i = 0;
  while (i < n) {
    // The first step also takes the head, so that every later step starts on a 32-byte boundary.
    const std::size_t step = i == 0 ? head + stochastic_step : stochastic_step;
    const std::size_t len = n - i < step ? n - i : step;
    const std::uint32_t* rw = nullptr;
    if constexpr (R == rounding::stochastic) {
      const std::uint64_t logical = key.offset + i;
      const auto skip = static_cast<std::size_t>(logical & 3u);
      philox_fill_avx2(words, logical >> 2, (skip + len + 3) / 4, key.seed, key.stream);
      rw = words + skip;
    }
    std::size_t j = 0;
    // Up to the streaming boundary (at most 7 elements), then whole vectors, then the tail via a small buffer.
    const std::size_t plain_end = i == 0 && stream ? (head < len ? head : len) : 0;
    const std::size_t vec_end = plain_end + (len - plain_end) / 8 * 8;
    auto one_vector = [&](const float* src, float* dst, const std::uint32_t* r, bool streamed) noexcept {
      const vec u = _mm256_loadu_si256(reinterpret_cast<const vec*>(src));
      vec rnd = no_bits;
      if constexpr (R == rounding::stochastic) rnd = _mm256_loadu_si256(reinterpret_cast<const vec*>(r));
      const vec y = round8<R, F, Ftz, Sat>(u, rnd, acc);
      if (streamed) {
        _mm256_stream_si256(reinterpret_cast<vec*>(dst), y);
      } else {
        _mm256_storeu_si256(reinterpret_cast<vec*>(dst), y);
      }
    };
    auto few = [&](std::size_t from, std::size_t count_n) noexcept {
      for (std::size_t e = 0; e < 8; ++e) {
        tail_in[e] = e < count_n ? in[i + from + e] : 0.0f;
        if constexpr (R == rounding::stochastic) tail_words[e] = e < count_n ? rw[from + e] : 0u;
      }
      const vec u = _mm256_load_si256(reinterpret_cast<const vec*>(tail_in));
      vec rnd = no_bits;
      if constexpr (R == rounding::stochastic) rnd = _mm256_loadu_si256(reinterpret_cast<const vec*>(tail_words));
      // Padding lanes are +0 inputs: they count as zero inputs and zero results, which cancel in underflow and
      // subnormal; no other counter sees a zero.
      _mm256_store_si256(reinterpret_cast<vec*>(tail_out), round8<R, F, Ftz, Sat>(u, rnd, acc));
      for (std::size_t e = 0; e < count_n; ++e) out[i + from + e] = tail_out[e];
    };
    if (plain_end != 0) few(0, plain_end);
    for (j = plain_end; j < vec_end; j += 8) {
      one_vector(in + i + j, out + i + j, R == rounding::stochastic ? rw + j : nullptr, stream);
    }
    if (vec_end < len) few(vec_end, len - vec_end);
    i += len;
  }
  if (stream) _mm_sfence();
  acc.add_to(c);
}

/// Rounds in[0..n) to F in mode R with the counters added to c; stochastic bits of logical index key.offset + i
/// for element i. stream: write with non-temporal stores (large spans into a separate buffer).
template <rounding R, format_spec F>
void round_chunk(const float* in, float* out, std::size_t n, overflow ov, bool ftz, philox_key key, bool stream,
                 local_counts& c) noexcept {
  const bool sat = ov == overflow::saturate;
  if (ftz) {
    sat ? round_chunk_impl<R, F, true, true>(in, out, n, key, stream, c)
        : round_chunk_impl<R, F, true, false>(in, out, n, key, stream, c);
  } else {
    sat ? round_chunk_impl<R, F, false, true>(in, out, n, key, stream, c)
        : round_chunk_impl<R, F, false, false>(in, out, n, key, stream, c);
  }
}

}  // namespace safeamp::detail::avx2

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif  // SAFEAMP_X86_KERNELS
