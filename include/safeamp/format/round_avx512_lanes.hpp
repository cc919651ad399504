// AVX-512 vector steps behind round_span for the named formats narrower than float (fp16, bf16, tf32, E4M3, E5M2):
// 16 elements rounded at a time with their counters (round16), the per-format constants, masked loads and stores.
// The chunk loops that drive them are in round_avx512.hpp; results, counters included, are those of round_floats
// (round_kernel.hpp) bit for bit.
//
// Why it is fast: mask registers turn every condition into one compare and every select into a masked move; the
// target's subnormal range is rounded by instructions that take their rounding from the instruction (EVEX embedded
// rounding, vrndscaleps), never from MXCSR; counters are masked increments of vector accumulators; vectors whose 16
// values all lie in the target's normal range skip all of it (one predictable branch).
#pragma once

#include "safeamp/format/cpu_path.hpp"

#if defined(SAFEAMP_X86_KERNELS)

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "safeamp/config.hpp"
#include "safeamp/format/format_spec.hpp"
#include "safeamp/format/round_kernel.hpp"
#include "safeamp/format/round_options.hpp"

SAFEAMP_DETAIL_AVX512_BEGIN

namespace safeamp::detail::avx512 {

/// Spans whose input is at least this many bytes, rounded into a separate buffer, take streaming stores.
inline constexpr std::size_t stream_min_bytes = std::size_t{16} << 20;

/// Spans whose input is at least this many bytes (in place, or into a separate buffer without streaming stores)
/// come from beyond the caches: stochastic rounding marks its vectors a step ahead there as on streamed spans
/// (round_stochastic_chunk). Span size, not chunk size: round_span works in chunks of 1 Mi elements, and a chunk
/// of 1 Mi whose span lies in cache lost 5-13% to the marks (Zen 4).
inline constexpr std::size_t far_min_bytes = std::size_t{8} << 20;

/// Vector accumulators of the five counters (one lane per element position; summed once per chunk).
struct counters16 {
  __m512i overflow = _mm512_setzero_si512();
  __m512i nan = _mm512_setzero_si512();
  __m512i infinity = _mm512_setzero_si512();
  // Underflow and subnormal are formed from these once per chunk (see finish_special).
  __m512i below_normal = _mm512_setzero_si512();
  __m512i zero_results = _mm512_setzero_si512();
  __m512i zero_inputs = _mm512_setzero_si512();
  // Counts in 16-bit lanes, half the width of the 32-bit ones (on Zen 4 a 512-bit operation takes two issue slots
  // of a 256-bit one): those taken from fp16 codes (round16_nearest into fp16 without saturation or flushing), and
  // the exact path's common counts (finish_special without zero, inf or NaN inputs, count_below_normal). One set may
  // hold at most 65535 vectors' counts before widen_codes() moves them into the 32-bit counters: round_blocks widens
  // every code_blocks blocks (at most 256 vectors each; the head, what is left after the blocks and the tail add at
  // most 258 more), the stochastic loops every code_steps generator calls, the block-format rows once per group.
  // code_overflow: overflows that became inf; code_overflow_nan: that became NaN (formats without inf);
  // code_saturated: that became max finite (counted as overflow only).
  __m256i code_overflow = _mm256_setzero_si256();
  __m256i code_overflow_nan = _mm256_setzero_si256();
  __m256i code_saturated = _mm256_setzero_si256();
  __m256i code_below_normal = _mm256_setzero_si256();
  __m256i code_zero_results = _mm256_setzero_si256();
  std::size_t special_vectors = 0;  // vectors that took the exact path (steers path_choice, stochastic marks)
  std::size_t odd_vectors = 0;      // vectors of round16_nearest's merged test with a rare lane (steers its choice)

  counters16() noexcept {}  // user-provided, so that it is compiled under this header's target pragma

  /// Another set's counts added to these (a block's own counters, round_block_as); code counts stay 16-bit (widening
  /// them once per block took fp16 nearest even on Gaussian data in cache from 0.84-0.89x the F16C round trip to
  /// 0.75-0.78x on Zen 4).
  SAFEAMP_DETAIL_ALWAYS_INLINE void add(const counters16& o) noexcept {
    overflow = _mm512_add_epi32(overflow, o.overflow);
    nan = _mm512_add_epi32(nan, o.nan);
    infinity = _mm512_add_epi32(infinity, o.infinity);
    below_normal = _mm512_add_epi32(below_normal, o.below_normal);
    zero_results = _mm512_add_epi32(zero_results, o.zero_results);
    zero_inputs = _mm512_add_epi32(zero_inputs, o.zero_inputs);
    code_overflow = _mm256_add_epi16(code_overflow, o.code_overflow);
    code_overflow_nan = _mm256_add_epi16(code_overflow_nan, o.code_overflow_nan);
    code_saturated = _mm256_add_epi16(code_saturated, o.code_saturated);
    code_below_normal = _mm256_add_epi16(code_below_normal, o.code_below_normal);
    code_zero_results = _mm256_add_epi16(code_zero_results, o.code_zero_results);
    special_vectors += o.special_vectors;
    odd_vectors += o.odd_vectors;
  }
  /// The 16-bit counts moved into the 32-bit counters.
  SAFEAMP_DETAIL_ALWAYS_INLINE void widen_codes() noexcept {
    const __m512i to_inf = _mm512_maskz_cvtepu16_epi32(all_lanes, code_overflow);
    const __m512i to_nan = _mm512_maskz_cvtepu16_epi32(all_lanes, code_overflow_nan);
    const __m512i saturated = _mm512_maskz_cvtepu16_epi32(all_lanes, code_saturated);
    overflow = _mm512_add_epi32(overflow, _mm512_add_epi32(_mm512_add_epi32(to_inf, to_nan), saturated));
    infinity = _mm512_add_epi32(infinity, to_inf);
    nan = _mm512_add_epi32(nan, to_nan);
    below_normal = _mm512_add_epi32(below_normal, _mm512_maskz_cvtepu16_epi32(all_lanes, code_below_normal));
    zero_results = _mm512_add_epi32(zero_results, _mm512_maskz_cvtepu16_epi32(all_lanes, code_zero_results));
    code_overflow = code_overflow_nan = code_saturated = _mm256_setzero_si256();
    code_below_normal = code_zero_results = _mm256_setzero_si256();
  }
  void add_to(local_counts& c) const noexcept {
    counters16 total = *this;
    total.widen_codes();
    c.add_vector_counts(sum(total.overflow), sum(total.nan), sum(total.infinity), sum(total.below_normal),
                        sum(total.zero_results), sum(total.zero_inputs));
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
  return _mm512_maskz_srli_epi32(all_lanes, v, Shift);
}
SAFEAMP_DETAIL_ALWAYS_INLINE __m512i count(__m512i acc, __mmask16 k) noexcept {
  return _mm512_mask_sub_epi32(acc, k, acc, _mm512_set1_epi32(-1));
}
/// The same for counters of 16-bit lanes (counters16's code counts).
SAFEAMP_DETAIL_ALWAYS_INLINE __m256i count(__m256i acc, __mmask16 k) noexcept {
  return _mm256_mask_sub_epi16(acc, k, acc, _mm256_set1_epi16(-1));
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
  __m512i overflow_from_minus_one = u32(overflow_bits - 1u);

  // g++ rematerialises broadcast constants inside the loop (mov + vpbroadcastd, every vector) rather than keep
  // them in the 32 vector registers; an empty asm that "may change" each value makes it keep them.
  vector_constants() noexcept {
    pin(abs_mask), pin(one), pin(half_minus_one), pin(keep), pin(normal_span);
    pin(min_normal), pin(max_finite), pin(inf), pin(payload), pin(nan_fill), pin(sign), pin(all_ones);
    pin(inv_quantum), pin(quantum_ps), pin(one_ps), pin(two32), pin(exponent_mask), pin(emin_field);
    pin(cut_offset), pin(overflow_from), pin(overflow_from_minus_one);
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

/// The same in 16-bit lanes (counters16's code counts), for overflowed lanes without zero, inf or NaN inputs: each
/// counted once, into the counter of what it became.
template <format_spec F, bool Sat>
SAFEAMP_DETAIL_ALWAYS_INLINE void count_overflow16(counters16& acc, __mmask16 over) noexcept {
  if constexpr (Sat) {
    acc.code_saturated = count(acc.code_saturated, over);
  } else if constexpr (has_infinity(F)) {
    acc.code_overflow = count(acc.code_overflow, over);
  } else {
    acc.code_overflow_nan = count(acc.code_overflow_nan, over);
  }
}

/// Counts the results below min normal and the zero results among them (r: rounded magnitudes), in 16-bit lanes.
template <format_spec F>
SAFEAMP_DETAIL_ALWAYS_INLINE void count_below_normal(const vector_constants<F>& v, __m512i r,
                                                     counters16& acc) noexcept {
  const __mmask16 below = _mm512_cmplt_epu32_mask(r, v.min_normal);
  acc.code_below_normal = count(acc.code_below_normal, below);
  acc.code_zero_results = count(acc.code_zero_results, _mm512_mask_testn_epi32_mask(below, r, r));
}

/// The lanes whose input is zero, +-inf or NaN (a = |x|, or x), and float subnormals too where Subnormals: one
/// vfpclassps (QNaN, +-0, +-inf, SNaN; denormal) instead of the subtraction and compare |x| - 1 >= inf - 1; with the
/// 16-bit counts, wide-range data in cache into E4M3 and E5M2 ran 1.13-1.19x as fast (nearest even) on Zen 4,
/// stochastic rounding 1.01-1.08x, the directed modes 1.06-1.10x (docs/performance.md).
template <bool Subnormals = false>
SAFEAMP_DETAIL_ALWAYS_INLINE __mmask16 rare_lanes(__m512i a) noexcept {
  constexpr int zero_inf_or_nan = 0x01 | 0x02 | 0x04 | 0x08 | 0x10 | 0x80;
  return _mm512_fpclass_ps_mask(_mm512_castsi512_ps(a), zero_inf_or_nan | (Subnormals ? 0x20 : 0));
}

/// The end of the exact path, for every lane of a vector that needed it: r holds each lane's rounded
/// magnitude and big the lanes whose result overflows (+-inf inputs included; NaN inputs may be in it or not).
/// Overflow becomes inf, NaN (formats without inf) or max finite (saturate); NaN inputs keep the payload bits
/// the format stores, made quiet. Zero, +-inf and NaN inputs are rare in most tensors: rare_lanes and a
/// predictable branch keep their handling out of the common path, which counts in 16-bit lanes. Results below min
/// normal and zero results are counted as such; counters16::add_to forms subnormal and underflow from them.
template <format_spec F, bool Sat>
SAFEAMP_DETAIL_ALWAYS_INLINE __m512i finish_special(const vector_constants<F>& v, __m512i a, __m512i r, __mmask16 big,
                                                    counters16& acc) noexcept {
  constexpr round_constants k = vector_constants<F>::k;
  const __m512i overflow_bits = Sat ? v.max_finite : u32(k.inf_or_nan);
  if (rare_lanes(a) == 0) {
    r = _mm512_mask_mov_epi32(r, big, overflow_bits);
    count_overflow16<F, Sat>(acc, big);
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
  count_below_normal(v, r, acc);
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
    const __m512 whole = _mm512_maskz_roundscale_ps(all_lanes, t, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m512i frac32 = _mm512_maskz_cvttps_epu32(all_lanes, _mm512_mul_ps(_mm512_sub_ps(t, whole), v.two32));
    const __mmask16 up = _mm512_cmpgt_epu32_mask(frac32, _mm512_xor_si512(rnd, v.all_ones));
    const __m512 w = _mm512_mask_add_ps(whole, up, whole, v.one_ps);
    r = _mm512_castps_si512(_mm512_mask_mul_ps(_mm512_castsi512_ps(r), tiny, w, v.quantum_ps));
  }
  if constexpr (Ftz) r = _mm512_maskz_mov_epi32(_mm512_cmpge_epu32_mask(r, v.min_normal), r);
  // Overflow: the rounded magnitude exceeds max finite (+-inf inputs too: their cut result is inf's bits).
  r = finish_special<F, Sat>(v, a, r, _mm512_cmpgt_epu32_mask(r, v.max_finite), acc);
  return _mm512_ternarylogic_epi32(r, u, v.sign, 0xF8);  // r | (u & sign)
}

/// The lanes whose magnitude a = |x| lies outside the target's normal range: a - min normal > max finite - min
/// normal (unsigned), zero, +-inf and NaN among them.
template <format_spec F>
SAFEAMP_DETAIL_ALWAYS_INLINE __mmask16 outside_normal_range(const vector_constants<F>& v, __m512i a) noexcept {
  return _mm512_cmpgt_epu32_mask(_mm512_sub_epi32(a, v.min_normal), v.normal_span);
}

/// Nearest even of 16 elements that all lie in the target's normal range: the cut at bit 23 - M on the signed bits (a
/// carry never reaches the sign), ties to the kept bit's even value.
template <format_spec F>
SAFEAMP_DETAIL_ALWAYS_INLINE __m512i cut16_nearest(const vector_constants<F>& v, __m512i u) noexcept {
  const __m512i bias = _mm512_add_epi32(_mm512_and_si512(srl32<vector_constants<F>::sh>(u), v.one), v.half_minus_one);
  return _mm512_and_si512(_mm512_add_epi32(u, bias), v.keep);
}

/// Whether round16_nearest takes its counters from the fp16 codes (fp16 without flushing or saturation); the merged
/// test is then never used (round_block).
template <format_spec F, bool Ftz, bool Sat>
inline constexpr bool codes_count = F == fp16 && !Ftz && !Sat;

/// Nearest even for formats with a narrower exponent range than float (fp16, E4M3, E5M2), every lane alike:
/// |x| + C with C = 2^(max(e, emin) - M + 23) (e: the exponent of x) rounds |x| to a multiple of C's ulp, which
/// is the target's quantum at |x| in its normal and subnormal range; the addition rounds to nearest even by its
/// own rounding field (EVEX embedded rounding, not MXCSR), and subtracting C again is exact. MXCSR's DAZ and
/// FTZ cannot change a result: a float subnormal input is below half the target's smallest subnormal (the
/// result is 0 either way) and every nonzero result is at least that subnormal, a normal float. Lanes at or
/// above the overflow threshold (+-inf and NaN included) are replaced in the special path.
/// Always: skip the test for a vector wholly in the normal range (the code below is exact for every lane); the
/// caller picks it where most vectors are not, so the branch would mispredict (see round_chunk).
/// Merged: one compare, |x| - 1 >= threshold - 1 (unsigned), finds the lanes that are zero or at or above the
/// overflow threshold (+-inf and NaN among them); a vector without such a lane (all of Gaussian data, the common
/// case of E4M3's exact path) needs only the below-normal counters, which saves finish_special's overflow
/// select, its two counts and its second compare. The caller drops it where more than 1 vector in 8 holds such a
/// lane (fp16/E5M2 on the benchmark's wide data, |x| = 2^U(-30, 20): 8% of lanes overflow, so 1 - 0.92^16, about
/// 3 vectors in 4, hold one), as path_choice does for Always.
template <format_spec F, bool Ftz, bool Sat, bool Always, bool Merged = false>
SAFEAMP_DETAIL_ALWAYS_INLINE __m512i round16_nearest(const vector_constants<F>& v, __m512i u,
                                                     counters16& acc) noexcept {
  const __m512i a = _mm512_and_si512(u, v.abs_mask);
  if constexpr (!Always) {
    if (outside_normal_range(v, a) == 0) return cut16_nearest(v, u);
    ++acc.special_vectors;
  }
  if constexpr (codes_count<F, Ftz, Sat>) {
    // Without saturation every overflow is already inf, and without zero, inf or NaN inputs (one vfpclassps) the
    // x themselves are converted, signs included, and the counters come from the sixteen codes at once, as on the
    // AVX2 path (fp16_pair): an exponent field of all ones is an overflow (no NaN comes from a finite x), one of
    // zeros lies below the normal range, and a code whose magnitude is 0 is a zero result. A float subnormal
    // becomes a zero of its sign, as the exact path gives it (under DAZ too, and its counters are those of any
    // underflow). Compares and counts of 16-bit lanes in a 256-bit register: on Zen 4, wide-range data in cache
    // went from 0.46x the F16C round trip (finish_special's 32-bit lanes) to 0.6x, and to 0.66x without |x| and
    // its sign put back (-O3; docs/performance.md).
    if (rare_lanes(u) == 0) {
      const __m256i h =
          _mm512_maskz_cvtps_ph(all_lanes, _mm512_castsi512_ps(u), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m256i magnitude2 = _mm256_add_epi16(h, h);  // the sign shifted out
      acc.code_overflow =
          count(acc.code_overflow,
                _mm256_cmpeq_epi16_mask(magnitude2, _mm256_set1_epi16(static_cast<short>(fp16_inf_code * 2))));
      const __mmask16 below = _mm256_testn_epi16_mask(h, _mm256_set1_epi16(fp16_inf_code));
      acc.code_below_normal = count(acc.code_below_normal, below);
      acc.code_zero_results = count(acc.code_zero_results, _mm256_mask_testn_epi16_mask(below, magnitude2, magnitude2));
      return _mm512_castps_si512(_mm512_maskz_cvtph_ps(all_lanes, h));
    }
  }
  __m512i r;
  if constexpr (F == fp16 && !Ftz) {
    // fp16: the CPU's own conversion (F16C, present on every AVX-512 CPU) of |x| there and back. Its rounding
    // comes from the immediate, it keeps subnormal results whatever MXCSR.FTZ says, reads fp16 subnormals
    // whatever MXCSR.DAZ says, and gives overflow inf and NaN the top payload bits as decode() does: the
    // exhaustive test checks it against the oracle on all 2^32 floats.
    const __m256i h =
        _mm512_maskz_cvtps_ph(all_lanes, _mm512_castsi512_ps(a), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm512_castps_si512(_mm512_maskz_cvtph_ps(all_lanes, h));
  } else {
    const __m512i c = _mm512_add_epi32(
        _mm512_maskz_max_epu32(all_lanes, _mm512_and_si512(a, v.exponent_mask), v.emin_field), v.cut_offset);
    const __m512 cf = _mm512_castsi512_ps(c);
    // The subtraction is exact, but its zero (|x| + C == C) would be -0 under MXCSR round-down: it takes its
    // rounding from the instruction too.
    r = _mm512_castps_si512(_mm512_maskz_sub_round_ps(
        all_lanes,
        _mm512_maskz_add_round_ps(all_lanes, _mm512_castsi512_ps(a), cf, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
        cf, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  if constexpr (Ftz) r = _mm512_maskz_mov_epi32(_mm512_cmpge_epu32_mask(r, v.min_normal), r);
  if constexpr (Merged) {
    if (_mm512_cmpge_epu32_mask(_mm512_sub_epi32(a, v.one), v.overflow_from_minus_one) == 0) {
      count_below_normal(v, r, acc);
      return _mm512_ternarylogic_epi32(r, u, v.sign, 0xF8);  // r | (u & sign)
    }
    ++acc.odd_vectors;
  }
  // Overflow, +-inf and NaN inputs: |x| at or above the overflow threshold.
  r = finish_special<F, Sat>(v, a, r, _mm512_cmpge_epu32_mask(a, v.overflow_from), acc);
  return _mm512_ternarylogic_epi32(r, u, v.sign, 0xF8);  // r | (u & sign)
}

/// The rounding immediate of vrndscaleps for a directed mode (rounding from the instruction, never from MXCSR).
template <rounding R>
inline constexpr int directed_imm = (R == rounding::toward_zero      ? _MM_FROUND_TO_ZERO
                                     : R == rounding::toward_pos_inf ? _MM_FROUND_TO_POS_INF
                                                                     : _MM_FROUND_TO_NEG_INF) |
                                    _MM_FROUND_NO_EXC;

/// The fixed cut at bit 23 - M on the signed bits for a directed mode: exact in the target's normal range (and for
/// bf16/tf32 at every finite input); the magnitude goes up for positive values toward +inf, negative toward -inf.
template <rounding R, format_spec F>
SAFEAMP_DETAIL_ALWAYS_INLINE __m512i cut16_directed(const vector_constants<F>& v, __m512i u) noexcept {
  if constexpr (R == rounding::toward_zero) return _mm512_and_si512(u, v.keep);
  const __mmask16 negative = _mm512_movepi32_mask(u);
  const __mmask16 up = R == rounding::toward_pos_inf ? static_cast<__mmask16>(~negative) : negative;
  return _mm512_and_si512(_mm512_mask_add_epi32(u, up, u, u32(vector_constants<F>::low)), v.keep);
}

/// Directed rounding of 16 elements, every lane exactly, with the counters. Vectors wholly in the target's normal
/// range take the fixed cut (unless Always, see round16_nearest). Otherwise, signs included: bf16/tf32 the fixed
/// cut; fp16, E4M3, E5M2: x / Q rounded to an integer by vrndscaleps (rounding from the immediate) and scaled
/// back, Q = 2^(max(e, emin) - M) the target's quantum at |x|; both scalings are exact powers of two and every
/// nonzero result is a normal float, so MXCSR's FTZ never applies. Overflow: inf (NaN without inf) in the mode's
/// direction, max finite in the other and when saturating. Zero, +-inf, NaN and float subnormal inputs take one
/// predictable branch: under MXCSR.DAZ a float subnormal would read as 0 and lose the quantum that rounding
/// toward infinity owes it, so those lanes are set from the definition there.
template <rounding R, format_spec F, bool Ftz, bool Sat, bool Always>
SAFEAMP_DETAIL_ALWAYS_INLINE __m512i round16_directed(const vector_constants<F>& v, __m512i u,
                                                      counters16& acc) noexcept {
  constexpr round_constants k = vector_constants<F>::k;
  constexpr bool narrow = !float_range_format(F);
  const __m512i a = _mm512_and_si512(u, v.abs_mask);
  if constexpr (!Always) {
    if (outside_normal_range(v, a) == 0) {
      return cut16_directed<R, F>(v, u);
    }
    ++acc.special_vectors;
  }
  __m512i r;
  if constexpr (narrow) {
    const __m512i q =
        _mm512_sub_epi32(_mm512_maskz_max_epu32(all_lanes, _mm512_and_si512(a, v.exponent_mask), v.emin_field),
                         u32(k.mantissa_bits << 23));
    const __m512i inv_q = _mm512_sub_epi32(u32(254u << 23), q);  // 1 / Q: the exponent field reflected about 127
    const __m512 whole = _mm512_maskz_roundscale_ps(
        all_lanes, _mm512_mul_ps(_mm512_castsi512_ps(u), _mm512_castsi512_ps(inv_q)), directed_imm<R>);
    r = _mm512_and_si512(_mm512_castps_si512(_mm512_mul_ps(whole, _mm512_castsi512_ps(q))), v.abs_mask);
  } else {
    r = _mm512_and_si512(cut16_directed<R, F>(v, u), v.abs_mask);
  }
  if constexpr (Ftz) r = _mm512_maskz_mov_epi32(_mm512_cmpge_epu32_mask(r, v.min_normal), r);
  const __m512i inf_or_nan = u32(k.inf_or_nan);
  const __mmask16 negative = _mm512_movepi32_mask(u);
  // The overflowed lanes that become inf (NaN without inf): those whose mode rounds away from zero; the others
  // become max finite.
  __mmask16 away = 0;
  if constexpr (!Sat && R == rounding::toward_pos_inf) away = static_cast<__mmask16>(~negative);
  if constexpr (!Sat && R == rounding::toward_neg_inf) away = negative;
  const __m512i overflow_bits = _mm512_mask_mov_epi32(v.max_finite, away, inf_or_nan);
  const __mmask16 over = _mm512_cmpgt_epu32_mask(r, v.max_finite);  // +-inf and NaN inputs among them
  // Zero, +-inf and NaN inputs, and (fp16, fp8) float subnormals. Without them a NaN or inf result can only come
  // from overflow. Under MXCSR.DAZ vfpclassps classes a float subnormal as a zero (measured on Zen 4), as the
  // multiplication above reads it; without DAZ that multiplication is exact for it (x / Q is a normal float). The
  // subnormal class is asked for too, so that such a lane takes the branch whichever way a CPU classes it.
  if (rare_lanes<narrow>(a) == 0) {
    r = _mm512_mask_mov_epi32(r, over, overflow_bits);
    count_overflow16<F, true>(acc, static_cast<__mmask16>(over & ~away));  // became max finite
    if constexpr (!Sat && R != rounding::toward_zero)
      count_overflow16<F, false>(acc, static_cast<__mmask16>(over & away));
  } else {
    const __mmask16 nan_in = _mm512_cmpgt_epu32_mask(a, v.inf);
    const __mmask16 inf_in = _mm512_cmpeq_epu32_mask(a, v.inf);
    acc.overflow = count(acc.overflow, static_cast<__mmask16>(over & ~(nan_in | inf_in)));
    r = _mm512_mask_mov_epi32(r, over, overflow_bits);
    r = _mm512_mask_mov_epi32(r, inf_in, Sat ? v.max_finite : inf_or_nan);
    r = _mm512_mask_mov_epi32(r, nan_in, _mm512_ternarylogic_epi32(a, v.payload, v.nan_fill, 0xEA));
    acc.zero_inputs = count(acc.zero_inputs, _mm512_testn_epi32_mask(a, a));
    if constexpr (narrow) {
      // A float subnormal (|x| - 1 < 2^-126 - 1, unsigned, on the bits): one quantum in the mode's direction away
      // from zero, else zero (flushed if asked).
      const __mmask16 tiny = _mm512_cmplt_epu32_mask(_mm512_sub_epi32(a, v.one), u32(0x007FFFFFu));
      __mmask16 up = 0;
      if constexpr (R == rounding::toward_pos_inf) up = static_cast<__mmask16>(tiny & ~negative);
      if constexpr (R == rounding::toward_neg_inf) up = static_cast<__mmask16>(tiny & negative);
      r = _mm512_maskz_mov_epi32(static_cast<__mmask16>(~tiny), r);
      if constexpr (!Ftz) r = _mm512_mask_mov_epi32(r, up, u32(k.quantum_bits));
    }
    acc.nan = count(acc.nan, _mm512_cmpgt_epu32_mask(r, v.inf));
    acc.infinity = count(acc.infinity, _mm512_cmpeq_epu32_mask(r, v.inf));
  }
  count_below_normal(v, r, acc);
  return _mm512_ternarylogic_epi32(r, u, v.sign, 0xF8);  // r | (u & sign)
}

/// Stochastic rounding of 16 elements that all lie in the target's normal range: the random word's top bits added
/// below the cut (the generic kernel's rule there), on the signed bits.
template <format_spec F>
SAFEAMP_DETAIL_ALWAYS_INLINE __m512i cut16_stochastic(const vector_constants<F>& v, __m512i u, __m512i rnd) noexcept {
  return _mm512_and_si512(_mm512_add_epi32(u, srl32<32u - vector_constants<F>::sh>(rnd)), v.keep);
}

/// 16 elements: u are the input bits, rnd the stochastic words (unused for nearest even). In the target's
/// normal range the cut works on the signed bits as they are (a carry never reaches the sign bit), so a
/// vector whose 16 values all lie there costs 9 instructions. Always, stochastic rounding: the exact path without
/// the test (fix_special is exact for lanes in the normal range too), for a vector the caller has already found to
/// need it (stochastic_step).
template <rounding R, format_spec F, bool Ftz, bool Sat, bool Always = false, bool Merged = false>
SAFEAMP_DETAIL_ALWAYS_INLINE __m512i round16(const vector_constants<F>& v, __m512i u, __m512i rnd,
                                             counters16& acc) noexcept {
  if constexpr (R == rounding::nearest_even && !float_range_format(F)) {
    return round16_nearest<F, Ftz, Sat, Always, Merged>(v, u, acc);
  } else if constexpr (R == rounding::toward_zero || R == rounding::toward_pos_inf || R == rounding::toward_neg_inf) {
    return round16_directed<R, F, Ftz, Sat, Always>(v, u, acc);
  } else {
    __m512i r;
    if constexpr (R == rounding::nearest_even) {
      r = cut16_nearest(v, u);
    } else {
      r = cut16_stochastic(v, u, rnd);
    }
    const __m512i a = _mm512_and_si512(u, v.abs_mask);
    // bf16/tf32 nearest even tests every vector, Always or not (round_block's choice leaves them unchanged).
    constexpr bool known_special = Always && R == rounding::stochastic;
    if constexpr (known_special) return fix_special<R, F, Ftz, Sat>(v, u, a, r, rnd, acc);
    if (outside_normal_range(v, a) != 0) {
      if constexpr (R == rounding::stochastic) ++acc.special_vectors;  // steers the marks (by_mark_stretches)
      return fix_special<R, F, Ftz, Sat>(v, u, a, r, rnd, acc);
    }
    return r;
  }
}

/// Loads, rounds and counts the lanes of m starting at element i.
template <rounding R, format_spec F, bool Ftz, bool Sat, bool Always = false, bool Merged = false>
SAFEAMP_DETAIL_ALWAYS_INLINE __m512i load_round(const vector_constants<F>& v, const float* in,
                                                const std::uint32_t* random_words, std::size_t i, __mmask16 m,
                                                counters16& acc) noexcept {
  const __m512i u = _mm512_maskz_loadu_epi32(m, in + i);
  __m512i rnd = _mm512_setzero_si512();
  if constexpr (R == rounding::stochastic) rnd = _mm512_maskz_loadu_epi32(m, random_words + i);
  return round16<R, F, Ftz, Sat, Always, Merged>(v, u, rnd, acc);
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

SAFEAMP_DETAIL_TARGET_END

#endif  // SAFEAMP_X86_KERNELS
