// AVX-512 kernels behind round_span for the named formats narrower than float (fp16, bf16, tf32, E4M3, E5M2),
// nearest even and stochastic, and the Philox block fill. Compiled on every x86 build with GCC or Clang under a
// target pragma (no -march needed) and run only when active_cpu_path() is avx512 (cpu_path.hpp); not under nvcc
// or with SAFEAMP_NO_SIMD. Results, counters included, are those of round_floats (round_kernel.hpp) bit for bit:
// the exhaustive and random-sweep tests run every path the test machine supports.
//
// Why it is faster than the auto-vectorised loops: mask registers turn every condition into one compare and
// every select into a masked move; the target's subnormal range is rounded with one vrndscaleps (rounding
// taken from the instruction, never from MXCSR); counters are masked increments of vector accumulators;
// vectors whose 16 values all lie in the target's normal range skip all of it (one predictable branch);
// large spans into a separate buffer are written with streaming stores (like memcpy, they do not read the
// destination into the cache first); Philox multiplies with vpmuludq (32 x 32 -> 64) and keeps its
// 10-round state in registers.
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

// Every function below is compiled for AVX-512 (and F16C) whatever the build's -march; callers reach them only
// through the run-time dispatch in round_span.hpp.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,f16c,avx2,bmi2"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,f16c,avx2,bmi2")
#endif

namespace safeamp::detail::avx512 {

/// Spans whose input is at least this many bytes, rounded into a separate buffer, take streaming stores.
inline constexpr std::size_t stream_min_bytes = std::size_t{16} << 20;

/// Vector accumulators of the five counters (one lane per element position; summed once per chunk).
struct counters16 {
  __m512i overflow = _mm512_setzero_si512();
  __m512i nan = _mm512_setzero_si512();
  __m512i infinity = _mm512_setzero_si512();
  // Underflow and subnormal are formed from these once per chunk (see finish_special).
  __m512i below_normal = _mm512_setzero_si512();
  __m512i zero_results = _mm512_setzero_si512();
  __m512i zero_inputs = _mm512_setzero_si512();
  std::size_t special_vectors = 0;  // vectors that took the exact path (nearest even; steers path_choice)

  counters16() noexcept {}  // user-provided, so that it is compiled under this header's target pragma

  void add_to(local_counts& c) const noexcept {
    c.add_vector_counts(sum(overflow), sum(nan), sum(infinity), sum(below_normal), sum(zero_results), sum(zero_inputs));
  }
  // Once per chunk; not _mm512_reduce_add_epi32, whose g++ 12 form warns (-Wuninitialized) inside the header.
  static std::uint32_t sum(__m512i v) noexcept {
    alignas(64) std::uint32_t lanes[16];
    _mm512_store_si512(lanes, v);
    std::uint32_t s = 0;
    for (std::uint32_t x : lanes) s += x;
    return s;
  }
};

SAFEAMP_DETAIL_ALWAYS_INLINE __m512i u32(std::uint32_t v) noexcept { return _mm512_set1_epi32(static_cast<int>(v)); }
// The maskz forms with a full mask: g++ 12's unmasked shift and andnot intrinsics start from an undefined
// register and trip -Wmaybe-uninitialized where they are inlined.
template <unsigned Shift>
SAFEAMP_DETAIL_ALWAYS_INLINE __m512i srl32(__m512i v) noexcept {
  return _mm512_maskz_srli_epi32(0xFFFF, v, Shift);
}
SAFEAMP_DETAIL_ALWAYS_INLINE __m512i count(__m512i acc, __mmask16 k) noexcept {
  return _mm512_mask_sub_epi32(acc, k, acc, _mm512_set1_epi32(-1));
}

/// The float bits of the smallest magnitude that nearest even sends above max finite: max finite + half an ulp
/// when that tie goes up (max finite's last bit is odd, e.g. fp16 65520), else the next float (E4M3: 464 ties
/// to the even 448, so 464 + one float ulp is the first to overflow).
[[nodiscard]] constexpr std::uint32_t overflow_threshold(const round_constants& k) noexcept {
  const std::uint32_t cut = 23u - k.mantissa_bits;
  const std::uint32_t half_ulp = std::uint32_t{1} << (cut - 1u);
  const std::uint32_t max_is_even = ((k.max_bits >> cut) & 1u) ^ 1u;
  return k.max_bits + half_ulp + max_is_even;
}

/// The constants of one format, broadcast once per chunk so that they stay in registers.
template <format_spec F>
struct vector_constants {
  static constexpr round_constants k = make_round_constants(F);
  static constexpr std::uint32_t sh = 23u - k.mantissa_bits;  // the cut in the target's normal range
  static constexpr std::uint32_t low = (std::uint32_t{1} << sh) - 1u;
  static constexpr float quantum = safeamp::bit_cast<float>(k.quantum_bits);
  static constexpr std::uint32_t overflow_bits = overflow_threshold(k);
  __m512i abs_mask = u32(0x7FFFFFFFu);
  __m512i one = u32(1);
  __m512i half_minus_one = u32(low >> 1);
  __m512i keep = u32(~low);
  __m512i normal_span = u32(k.max_bits - k.min_normal_bits);
  __m512i inf_minus_one = u32(0x7F7FFFFFu);
  __m512i min_normal = u32(k.min_normal_bits);
  __m512i max_finite = u32(k.max_bits);
  __m512i inf = u32(0x7F800000u);
  __m512i payload = u32(k.payload_mask);
  __m512i nan_fill = u32(k.nan_fill);
  __m512i sign = u32(0x80000000u);
  __m512i all_ones = u32(0xFFFFFFFFu);
  __m512 inv_quantum = _mm512_set1_ps(1.0f / quantum);
  __m512 quantum_ps = _mm512_set1_ps(quantum);
  __m512 one_ps = _mm512_set1_ps(1.0f);
  __m512 two32 = _mm512_set1_ps(0x1p32f);
  __m512i exponent_mask = u32(0x7F800000u);
  __m512i emin_field = u32(k.min_normal_bits & 0x7F800000u);
  __m512i cut_offset = u32((23u - k.mantissa_bits) << 23);
  __m512i overflow_from = u32(overflow_bits);

  // g++ rematerialises broadcast constants inside the loop (mov + vpbroadcastd, every vector) rather than keep
  // them in the 32 vector registers; an empty asm that "may change" each value makes it keep them.
  vector_constants() noexcept {
    pin(abs_mask), pin(one), pin(half_minus_one), pin(keep), pin(normal_span), pin(inf_minus_one);
    pin(min_normal), pin(max_finite), pin(inf), pin(payload), pin(nan_fill), pin(sign), pin(all_ones);
    pin(inv_quantum), pin(quantum_ps), pin(one_ps), pin(two32), pin(exponent_mask), pin(emin_field);
    pin(cut_offset), pin(overflow_from);
  }
  template <class V>
  static void pin(V& x) noexcept {
    __asm__("" : "+v"(x));
  }
};

/// bf16, tf32: formats with float's exponent range (the cut alone is exact for float subnormals too).
[[nodiscard]] constexpr bool float_range_format(format_spec f) noexcept { return min_exponent(f) + 127 <= 1; }

/// What overflowed lanes became: inf, NaN (formats without inf) or, saturating, max finite (not counted).
template <format_spec F, bool Sat>
SAFEAMP_DETAIL_ALWAYS_INLINE void count_overflow_results(counters16& acc, __mmask16 over) noexcept {
  if constexpr (!Sat && has_infinity(F)) acc.infinity = count(acc.infinity, over);
  if constexpr (!Sat && !has_infinity(F)) acc.nan = count(acc.nan, over);
}

/// The end of the exact path, for every lane of a vector that needed it: r holds each lane's rounded
/// magnitude and big the lanes whose result overflows (+-inf inputs included; NaN inputs may be in it or not).
/// Overflow becomes inf, NaN (formats without inf) or max finite (saturate); NaN inputs keep the payload bits
/// the format stores, made quiet. Zero, +-inf and NaN inputs are rare in most tensors: one compare (|x| - 1 >=
/// inf - 1, unsigned) and a predictable branch keep their handling out of the common path. Results below min
/// normal and zero results are counted as such; counters16::add_to forms subnormal and underflow from them.
template <format_spec F, bool Sat>
SAFEAMP_DETAIL_ALWAYS_INLINE __m512i finish_special(const vector_constants<F>& v, __m512i a, __m512i r, __mmask16 big,
                                                    counters16& acc) noexcept {
  constexpr round_constants k = vector_constants<F>::k;
  const __m512i overflow_bits = Sat ? v.max_finite : u32(k.inf_or_nan);
  const __mmask16 rare = _mm512_cmpge_epu32_mask(_mm512_sub_epi32(a, v.one), v.inf_minus_one);
  if (rare == 0) {
    r = _mm512_mask_mov_epi32(r, big, overflow_bits);
    acc.overflow = count(acc.overflow, big);
    count_overflow_results<F, Sat>(acc, big);
  } else {
    const __mmask16 nan_in = _mm512_cmpgt_epu32_mask(a, v.inf);
    big = static_cast<__mmask16>(big & ~nan_in);
    acc.overflow = count(acc.overflow, _mm512_mask_cmplt_epu32_mask(big, a, v.inf));  // finite inputs only
    r = _mm512_mask_mov_epi32(r, big, overflow_bits);
    r = _mm512_mask_mov_epi32(r, nan_in, _mm512_ternarylogic_epi32(a, v.payload, v.nan_fill, 0xEA));
    acc.nan = count(acc.nan, nan_in);
    count_overflow_results<F, Sat>(acc, big);
    acc.zero_inputs = count(acc.zero_inputs, _mm512_testn_epi32_mask(a, a));
  }
  const __mmask16 below = _mm512_cmplt_epu32_mask(r, v.min_normal);
  acc.below_normal = count(acc.below_normal, below);
  acc.zero_results = count(acc.zero_results, _mm512_mask_testn_epi32_mask(below, r, r));
  return r;
}

/// The lanes that are not in the target's normal range get the exact treatment: subnormal range, overflow,
/// +-inf and NaN inputs, flush to zero, and all five counters. Used for stochastic rounding, and for nearest
/// even into bf16/tf32 (which have no subnormal range of their own below float's). r holds the normal-range
/// result (with the input's sign) for every lane, a = |x|; returns the final bits with the sign.
template <rounding R, format_spec F, bool Ftz, bool Sat>
SAFEAMP_DETAIL_ALWAYS_INLINE __m512i fix_special(const vector_constants<F>& v, __m512i u, __m512i a, __m512i r,
                                                 __m512i rnd, counters16& acc) noexcept {
  r = _mm512_and_si512(r, v.abs_mask);
  if constexpr (!float_range_format(F)) {
    static_assert(R == rounding::stochastic, "nearest even into fp16/fp8 takes round16_nearest");
    // |x| < min normal: the result is w Q with Q = 2^(emin - M), w = |x| / Q rounded down, plus one when
    // floor(2^32 frac) > ~random (the generic kernel's rule: frac = rem / 2^sh there, exact here). The
    // scaling by 1/Q is exact (x is a normal float or 0 here: a float subnormal is below 2^-32 Q, so under DAZ
    // or not its 32-bit fraction of Q is 0 and it never rounds up).
    const __mmask16 tiny = _mm512_cmplt_epu32_mask(a, v.min_normal);
    const __m512 t = _mm512_maskz_mul_ps(tiny, _mm512_castsi512_ps(a), v.inv_quantum);
    const __m512 whole = _mm512_maskz_roundscale_ps(0xFFFF, t, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m512i frac32 = _mm512_maskz_cvttps_epu32(0xFFFF, _mm512_mul_ps(_mm512_sub_ps(t, whole), v.two32));
    const __mmask16 up = _mm512_cmpgt_epu32_mask(frac32, _mm512_xor_si512(rnd, v.all_ones));
    const __m512 w = _mm512_mask_add_ps(whole, up, whole, v.one_ps);
    r = _mm512_castps_si512(_mm512_mask_mul_ps(_mm512_castsi512_ps(r), tiny, w, v.quantum_ps));
  }
  if constexpr (Ftz) r = _mm512_maskz_mov_epi32(_mm512_cmpge_epu32_mask(r, v.min_normal), r);
  // Overflow: the rounded magnitude exceeds max finite (+-inf inputs too: their cut result is inf's bits).
  r = finish_special<F, Sat>(v, a, r, _mm512_cmpgt_epu32_mask(r, v.max_finite), acc);
  return _mm512_ternarylogic_epi32(r, u, v.sign, 0xF8);  // r | (u & sign)
}

/// Nearest even for formats with a narrower exponent range than float (fp16, E4M3, E5M2), every lane alike:
/// |x| + C with C = 2^(max(e, emin) - M + 23) (e: the exponent of x) rounds |x| to a multiple of C's ulp, which
/// is the target's quantum at |x| in its normal and subnormal range; the addition rounds to nearest even by its
/// own rounding field (EVEX embedded rounding, not MXCSR), and subtracting C again is exact. MXCSR's DAZ and
/// FTZ cannot change a result: a float subnormal input is below half the target's smallest subnormal (the
/// result is 0 either way) and every nonzero result is at least that subnormal, a normal float. Lanes at or
/// above the overflow threshold (+-inf and NaN included) are replaced in the special path.
/// Always: skip the test for a vector wholly in the normal range (the code below is exact for every lane); the
/// caller picks it where most vectors are not, so the branch would mispredict (see round_chunk).
template <format_spec F, bool Ftz, bool Sat, bool Always>
SAFEAMP_DETAIL_ALWAYS_INLINE __m512i round16_nearest(const vector_constants<F>& v, __m512i u,
                                                     counters16& acc) noexcept {
  const __m512i a = _mm512_and_si512(u, v.abs_mask);
  if constexpr (!Always) {
    if (_mm512_cmpgt_epu32_mask(_mm512_sub_epi32(a, v.min_normal), v.normal_span) == 0) {
      // All 16 in the normal range: the cut at bit 23 - M on the signed bits (a carry never reaches the sign).
      const __m512i bias =
          _mm512_add_epi32(_mm512_and_si512(srl32<vector_constants<F>::sh>(u), v.one), v.half_minus_one);
      return _mm512_and_si512(_mm512_add_epi32(u, bias), v.keep);
    }
    ++acc.special_vectors;
  }
  __m512i r;
  if constexpr (F == fp16 && !Ftz) {
    // fp16: the CPU's own conversion (F16C, present on every AVX-512 CPU) of |x| there and back. Its rounding
    // comes from the immediate, it keeps subnormal results whatever MXCSR.FTZ says, reads fp16 subnormals
    // whatever MXCSR.DAZ says, and gives overflow inf and NaN the top payload bits as decode() does: the
    // exhaustive test checks it against the oracle on all 2^32 floats.
    const __m256i h =
        _mm512_maskz_cvtps_ph(0xFFFF, _mm512_castsi512_ps(a), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm512_castps_si512(_mm512_maskz_cvtph_ps(0xFFFF, h));
  } else {
    const __m512i c = _mm512_add_epi32(
        _mm512_maskz_max_epu32(0xFFFF, _mm512_and_si512(a, v.exponent_mask), v.emin_field), v.cut_offset);
    const __m512 cf = _mm512_castsi512_ps(c);
    r = _mm512_castps_si512(_mm512_sub_ps(
        _mm512_maskz_add_round_ps(0xFFFF, _mm512_castsi512_ps(a), cf, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
        cf));
  }
  if constexpr (Ftz) r = _mm512_maskz_mov_epi32(_mm512_cmpge_epu32_mask(r, v.min_normal), r);
  // Overflow, +-inf and NaN inputs: |x| at or above the overflow threshold.
  r = finish_special<F, Sat>(v, a, r, _mm512_cmpge_epu32_mask(a, v.overflow_from), acc);
  return _mm512_ternarylogic_epi32(r, u, v.sign, 0xF8);  // r | (u & sign)
}

/// 16 elements: u are the input bits, rnd the stochastic words (unused for nearest even). In the target's
/// normal range the cut works on the signed bits as they are (a carry never reaches the sign bit), so a
/// vector whose 16 values all lie there costs 9 instructions.
template <rounding R, format_spec F, bool Ftz, bool Sat, bool Always = false>
SAFEAMP_DETAIL_ALWAYS_INLINE __m512i round16(const vector_constants<F>& v, __m512i u, __m512i rnd,
                                             counters16& acc) noexcept {
  if constexpr (R == rounding::nearest_even && !float_range_format(F)) {
    return round16_nearest<F, Ftz, Sat, Always>(v, u, acc);
  } else {
    constexpr std::uint32_t sh = vector_constants<F>::sh;
    __m512i bias;
    if constexpr (R == rounding::nearest_even) {
      bias = _mm512_add_epi32(_mm512_and_si512(srl32<sh>(u), v.one), v.half_minus_one);
    } else {
      bias = srl32<32u - sh>(rnd);
    }
    const __m512i r = _mm512_and_si512(_mm512_add_epi32(u, bias), v.keep);
    const __m512i a = _mm512_and_si512(u, v.abs_mask);
    const __mmask16 special = _mm512_cmpgt_epu32_mask(_mm512_sub_epi32(a, v.min_normal), v.normal_span);
    if (special != 0) return fix_special<R, F, Ftz, Sat>(v, u, a, r, rnd, acc);
    return r;
  }
}

/// Loads, rounds and counts the lanes of m starting at element i.
template <rounding R, format_spec F, bool Ftz, bool Sat, bool Always = false>
SAFEAMP_DETAIL_ALWAYS_INLINE __m512i load_round(const vector_constants<F>& v, const float* in,
                                                const std::uint32_t* random_words, std::size_t i, __mmask16 m,
                                                counters16& acc) noexcept {
  const __m512i u = _mm512_maskz_loadu_epi32(m, in + i);
  __m512i rnd = _mm512_setzero_si512();
  if constexpr (R == rounding::stochastic) rnd = _mm512_maskz_loadu_epi32(m, random_words + i);
  return round16<R, F, Ftz, Sat, Always>(v, u, rnd, acc);
}

/// Chooses, block by block, whether nearest even tests each vector for the all-normal shortcut. A block in
/// which more than 1 vector in 8 needed the exact path (wide-range data, or E4M3's narrow normal range on
/// Gaussian data: 1.2% of N(0,1) values lie below its min normal, so 18% of vectors hold one) is followed by
/// seven blocks without the test and its unpredictable branch, then the test runs for one block again.
struct path_choice {
  bool always = false;
  unsigned left = 0;
  std::size_t before = 0;

  void start(const counters16& acc) noexcept { before = acc.special_vectors; }
  void finish(const counters16& acc, std::size_t vectors) noexcept {
    if (always) {
      if (--left == 0) always = false;
    } else if ((acc.special_vectors - before) * 8 > vectors) {
      always = true;
      left = 7;
    }
  }
};

/// The high 32 bits of each 64-bit lane moved to its low half (the high half gets the low one: the products
/// and xors that follow read only the low halves). A dword shuffle rather than a shift: on Intel cores both
/// 512-bit shifts and multiplies issue on port 0 only, shuffles on port 5.
SAFEAMP_DETAIL_ALWAYS_INLINE __m512i high_to_low(__m512i v) noexcept {
  return _mm512_maskz_shuffle_epi32(0xFFFF, v, _MM_PERM_CDAB);
}

/// Philox4x32-10 (philox.hpp) for sixteen blocks at a time, as two independent groups of eight: 64-bit lanes
/// hold the 32-bit words, vpmuludq forms the 32 x 32 -> 64 products (it reads only the low halves, so no
/// masking between rounds), and the round keys, the same for every block, are broadcast once. Two groups per
/// call because each round is a chain of three dependent instructions (multiply, shuffle, xor).
struct philox16 {
  __m512i key0[10], key1[10];
  __m512i m0 = _mm512_set1_epi64(philox_m0);
  __m512i m1 = _mm512_set1_epi64(philox_m1);
  __m512i stream;
  __m512i lanes = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
  // Interleave words 0,1 and 2,3 of each block (low dwords of the 64-bit lanes), then the pairs: block order.
  __m512i pick01 = _mm512_set_epi32(30, 14, 28, 12, 26, 10, 24, 8, 22, 6, 20, 4, 18, 2, 16, 0);
  __m512i first4 = _mm512_set_epi64(11, 3, 10, 2, 9, 1, 8, 0);
  __m512i last4 = _mm512_set_epi64(15, 7, 14, 6, 13, 5, 12, 4);

  philox16(std::uint64_t seed, std::uint32_t stream_id) noexcept : stream(_mm512_set1_epi64(stream_id)) {
    auto k0 = static_cast<std::uint32_t>(seed);
    auto k1 = static_cast<std::uint32_t>(seed >> 32);
    for (int round = 0; round < 10; ++round) {
      key0[round] = _mm512_set1_epi64(k0);
      key1[round] = _mm512_set1_epi64(k1);
      k0 += philox_w0;
      k1 += philox_w1;
    }
  }

  /// Words of blocks first .. first + 15 in order (w[0]: words 0..15 = blocks first .. first + 3, ...).
  /// The low counter word must not wrap: (first & 0xFFFFFFFF) + 16 <= 2^32.
  SAFEAMP_DETAIL_ALWAYS_INLINE void operator()(std::uint64_t first, __m512i (&w)[4]) const noexcept {
    const auto lo = static_cast<long long>(first & 0xFFFFFFFFu);
    const __m512i hi = _mm512_set1_epi64(static_cast<long long>(first >> 32));
    __m512i a0 = _mm512_add_epi64(_mm512_set1_epi64(lo), lanes);
    __m512i b0 = _mm512_add_epi64(_mm512_set1_epi64(lo + 8), lanes);
    __m512i a1 = hi, b1 = hi, a2 = stream, b2 = stream;
    __m512i a3 = _mm512_setzero_si512(), b3 = _mm512_setzero_si512();
    for (int round = 0; round < 10; ++round) {
      const __m512i pa0 = _mm512_maskz_mul_epu32(0xFF, a0, m0);
      const __m512i pb0 = _mm512_maskz_mul_epu32(0xFF, b0, m0);
      const __m512i pa1 = _mm512_maskz_mul_epu32(0xFF, a2, m1);
      const __m512i pb1 = _mm512_maskz_mul_epu32(0xFF, b2, m1);
      a0 = _mm512_ternarylogic_epi64(high_to_low(pa1), a1, key0[round], 0x96);  // xor of all three
      b0 = _mm512_ternarylogic_epi64(high_to_low(pb1), b1, key0[round], 0x96);
      a2 = _mm512_ternarylogic_epi64(high_to_low(pa0), a3, key1[round], 0x96);
      b2 = _mm512_ternarylogic_epi64(high_to_low(pb0), b3, key1[round], 0x96);
      a1 = pa1, b1 = pb1, a3 = pa0, b3 = pb0;
    }
    order(a0, a1, a2, a3, w[0], w[1]);
    order(b0, b1, b2, b3, w[2], w[3]);
  }

  SAFEAMP_DETAIL_ALWAYS_INLINE void order(__m512i x0, __m512i x1, __m512i x2, __m512i x3, __m512i& out0,
                                          __m512i& out1) const noexcept {
    const __m512i w01 = _mm512_permutex2var_epi32(x0, pick01, x1);
    const __m512i w23 = _mm512_permutex2var_epi32(x2, pick01, x3);
    out0 = _mm512_permutex2var_epi64(w01, first4, w23);
    out1 = _mm512_permutex2var_epi64(w01, last4, w23);
  }
};

/// philox_fill (round_kernel.hpp) with philox16; the portable loop where the low counter word would wrap.
SAFEAMP_DETAIL_NOINLINE inline void philox_fill_avx512(std::uint32_t* words, std::uint64_t first_block,
                                                       std::size_t blocks, std::uint64_t seed,
                                                       std::uint32_t stream) noexcept {
  if ((first_block & 0xFFFFFFFFu) + blocks + 16 > (std::uint64_t{1} << 32)) {
    detail::philox_fill(words, first_block, blocks, seed, stream);
    return;
  }
  const philox16 gen(seed, stream);
  for (std::size_t b = 0; b < blocks; b += 16) {
    __m512i w[4];
    gen(first_block + b, w);
    const std::size_t n_words = blocks - b >= 16 ? 64 : 4 * (blocks - b);
    for (std::size_t j = 0; j < 4; ++j) {
      if (n_words >= 16 * (j + 1)) {
        _mm512_storeu_si512(words + 4 * b + 16 * j, w[j]);
      } else if (n_words > 16 * j) {
        _mm512_mask_storeu_epi32(words + 4 * b + 16 * j, static_cast<__mmask16>((1u << (n_words - 16 * j)) - 1u), w[j]);
      }
    }
  }
}

/// The lanes [0, k) of a vector (k <= 16).
SAFEAMP_DETAIL_ALWAYS_INLINE __mmask16 first_lanes(std::size_t k) noexcept {
  return static_cast<__mmask16>((1u << k) - 1u);
}

/// How many elements (at most n) are stored normally before out + that is 64-byte aligned, as streaming
/// stores need.
SAFEAMP_DETAIL_ALWAYS_INLINE std::size_t stream_head(const float* out, std::size_t n) noexcept {
  const std::size_t misaligned = (reinterpret_cast<std::uintptr_t>(out) & 63u) / sizeof(float);
  if (misaligned == 0) return 0;
  return n < 16 - misaligned ? n : 16 - misaligned;
}

/// Nearest even: vectors [i, i + 16 count) of a chunk with full stores (streaming or not).
template <format_spec F, bool Ftz, bool Sat, bool Always, bool Stream>
SAFEAMP_DETAIL_ALWAYS_INLINE void round_vectors(const vector_constants<F>& v, const float* in, float* out,
                                                std::size_t i, std::size_t count, counters16& acc) noexcept {
  for (std::size_t end = i + 16 * count; i < end; i += 16) {
    const __m512i r = load_round<rounding::nearest_even, F, Ftz, Sat, Always>(v, in, nullptr, i, 0xFFFF, acc);
    if constexpr (Stream) {
      _mm512_stream_si512(reinterpret_cast<__m512i*>(out + i), r);
    } else {
      _mm512_storeu_si512(out + i, r);
    }
  }
}

/// Four 4 KiB pages [i, i + 4096) at a time, one vector from each in turn: more DRAM pages open at once, as
/// glibc's memcpy does for large copies (measured 1.1-1.2x a plain streaming loop on the benchmark machine).
template <format_spec F, bool Ftz, bool Sat, bool Always>
SAFEAMP_DETAIL_ALWAYS_INLINE void round_four_pages(const vector_constants<F>& v, const float* in, float* out,
                                                   std::size_t i, counters16& acc) noexcept {
  constexpr std::size_t page = 1024;
  for (std::size_t j = i; j < i + page; j += 16) {
    for (std::size_t p = 0; p < 4 * page; p += page) {
      _mm512_stream_si512(reinterpret_cast<__m512i*>(out + j + p),
                          load_round<rounding::nearest_even, F, Ftz, Sat, Always>(v, in, nullptr, j + p, 0xFFFF, acc));
    }
  }
}

/// Nearest even of in[0..n) into out[0..n) (out may equal in); stream: write with non-temporal stores.
template <format_spec F, bool Ftz, bool Sat>
SAFEAMP_DETAIL_NOINLINE void round_nearest_chunk(const float* in, float* out, std::size_t n, bool stream,
                                                 local_counts& c) noexcept {
  constexpr rounding R = rounding::nearest_even;
  vector_constants<F> v;
  counters16 acc;
  path_choice choice;
  std::size_t i = 0;
  if (stream) {
    if (const std::size_t head = stream_head(out, n); head != 0) {
      _mm512_mask_storeu_epi32(out, first_lanes(head),
                               load_round<R, F, Ftz, Sat>(v, in, nullptr, 0, first_lanes(head), acc));
      i = head;
    }
    for (; i + 4096 <= n; i += 4096) {
      choice.start(acc);
      if (choice.always) {
        round_four_pages<F, Ftz, Sat, true>(v, in, out, i, acc);
      } else {
        round_four_pages<F, Ftz, Sat, false>(v, in, out, i, acc);
      }
      choice.finish(acc, 256);
    }
    round_vectors<F, Ftz, Sat, false, true>(v, in, out, i, (n - i) / 16, acc);
  } else {
    constexpr std::size_t block = 64;  // vectors
    for (; i + 16 * block <= n; i += 16 * block) {
      choice.start(acc);
      if (choice.always) {
        round_vectors<F, Ftz, Sat, true, false>(v, in, out, i, block, acc);
      } else {
        round_vectors<F, Ftz, Sat, false, false>(v, in, out, i, block, acc);
      }
      choice.finish(acc, block);
    }
    round_vectors<F, Ftz, Sat, false, false>(v, in, out, i, (n - i) / 16, acc);
  }
  i += (n - i) / 16 * 16;
  if (i < n) {
    _mm512_mask_storeu_epi32(out + i, first_lanes(n - i),
                             load_round<R, F, Ftz, Sat>(v, in, nullptr, i, first_lanes(n - i), acc));
  }
  if (stream) _mm_sfence();
  acc.add_to(c);
}

/// Stochastic rounding of in[0..n) with the bits of key (element i: logical index key.offset + i). The
/// Philox words are made 64 at a time right where they are used, so that the multiply-bound generator and the
/// memory traffic of the rounding overlap (a buffer of words first, then a memory-bound pass, measured about
/// 1.3x slower on 64 Mi elements). The main loop needs the logical index of its first element to be a
/// multiple of 4 (the words of a block go to 4 consecutive elements) and, to stream, a 64-byte aligned output;
/// the few elements before that point and after the last full step take words from a small buffer.
template <format_spec F, bool Ftz, bool Sat>
SAFEAMP_DETAIL_NOINLINE void round_stochastic_chunk(const float* in, float* out, std::size_t n, philox_key key,
                                                    bool stream, local_counts& c) noexcept {
  constexpr rounding R = rounding::stochastic;
  vector_constants<F> v;
  counters16 acc;
  alignas(64) std::uint32_t words[96];
  // Elements [at, at + len), len <= 64, with buffered words and ordinary (masked) stores.
  auto few = [&](std::size_t at, std::size_t len) noexcept {
    const std::uint64_t logical = key.offset + at;
    const auto skip = static_cast<std::size_t>(logical & 3u);
    philox_fill_avx512(words, logical >> 2, (skip + len + 3) / 4, key.seed, key.stream);
    for (std::size_t j = 0; j < len; j += 16) {
      const __mmask16 m = first_lanes(len - j < 16 ? len - j : 16);
      _mm512_mask_storeu_epi32(out + at + j, m, load_round<R, F, Ftz, Sat>(v, in + at, words + skip, j, m, acc));
    }
  };
  const auto to_multiple_of_4 = static_cast<std::size_t>((4u - key.offset % 4u) % 4u);
  std::size_t start = to_multiple_of_4;
  if (stream) {
    const std::size_t head = stream_head(out, std::size_t{64});
    if ((key.offset + head) % 4u == 0) {
      start = head;
    } else {
      stream = false;  // no element is both 4-aligned in index and 64-byte aligned in memory
    }
  }
  start = start < n ? start : n;
  if (start != 0) few(0, start);
  const std::uint64_t first_block = (key.offset + start) / 4;
  const std::size_t steps = (n - start) / 64;
  std::size_t i = start;
  if ((first_block & 0xFFFFFFFFu) + 16 * steps + 16 <= (std::uint64_t{1} << 32)) {
    const philox16 gen(key.seed, key.stream);
    for (std::size_t step = 0; step < steps; ++step, i += 64) {
      __m512i w[4];
      gen(first_block + 16 * step, w);
      for (std::size_t j = 0; j < 4; ++j) {
        const __m512i u = _mm512_loadu_si512(in + i + 16 * j);
        const __m512i r = round16<R, F, Ftz, Sat>(v, u, w[j], acc);
        if (stream) {
          _mm512_stream_si512(reinterpret_cast<__m512i*>(out + i + 16 * j), r);
        } else {
          _mm512_storeu_si512(out + i + 16 * j, r);
        }
      }
    }
  } else {
    // The low word of the Philox block counter wraps in this chunk (once per 2^34 elements): all buffered.
    for (std::size_t step = 0; step < steps; ++step, i += 64) few(i, 64);
  }
  if (i < n) few(i, n - i);
  if (stream) _mm_sfence();
  acc.add_to(c);
}

/// Rounds in[0..n) to F (nearest even or stochastic) with the counters added to c: the four instantiations
/// of flush x saturate. key is used by stochastic rounding only (element i: logical index key.offset + i).
template <rounding R, format_spec F>
void round_chunk(const float* in, float* out, std::size_t n, overflow ov, bool ftz, philox_key key, bool stream,
                 local_counts& c) noexcept {
  static_assert(R == rounding::nearest_even || R == rounding::stochastic, "other modes take the portable loops");
  const auto run = [&]<bool Ftz, bool Sat>() {
    if constexpr (R == rounding::nearest_even) {
      round_nearest_chunk<F, Ftz, Sat>(in, out, n, stream, c);
    } else {
      round_stochastic_chunk<F, Ftz, Sat>(in, out, n, key, stream, c);
    }
  };
  const bool sat = ov == overflow::saturate;
  if (ftz) {
    sat ? run.template operator()<true, true>() : run.template operator()<true, false>();
  } else {
    sat ? run.template operator()<false, true>() : run.template operator()<false, false>();
  }
}

/// out[0..n) = in[0..n) with non-temporal 64-byte stores for the aligned middle (the caller fences).
SAFEAMP_DETAIL_NOINLINE inline void stream_copy(float* out, const float* in, std::size_t n) noexcept {
  std::size_t i = 0;
  while (i < n && (reinterpret_cast<std::uintptr_t>(out + i) & 63u) != 0) {
    out[i] = in[i];
    ++i;
  }
  for (; i + 16 <= n; i += 16) _mm512_stream_ps(out + i, _mm512_loadu_ps(in + i));
  for (; i < n; ++i) out[i] = in[i];
}

}  // namespace safeamp::detail::avx512

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif  // SAFEAMP_X86_KERNELS
