// AVX2 + F16C back-end of round_span for the named formats narrower than float (fp16, bf16, tf32, E4M3, E5M2),
// every rounding mode (stochastic with the Philox words of philox_avx2.hpp made in registers). Compiled on every
// x86 build with GCC or Clang for AVX2 (no -march needed) and run when active_cpu_path() is avx2 (cpu_path.hpp).
// Results, counters included, are those of round_floats (round_kernel.hpp) bit for bit.
//
// Eight lanes at a time. A vector whose lanes all lie in the target's normal range [min normal, max finite] is
// rounded by the fixed cut at bit 23 - M (round_fast.hpp explains why that is exact) and changes no counter.
// Any other vector takes the exact path: special8 for the deterministic modes (float arithmetic whose rounding
// comes from the instruction, see there; fp16, in blocks where most vectors need it, in pairs converted by F16C
// in the mode's rounding with the counters read from the fp16 codes: fp16_pair; E4M3, E5M2 and the other formats of at
// most 7 mantissa bits, in pairs whose results are packed into 16-bit lanes for the range tests and counters:
// narrow_pair), stochastic8 for stochastic rounding (round_float_bits lane for lane with AVX2's per-lane shifts:
// vpsrlvd/vpsllvd give 0 for counts of 32 or more, which the 32-bit fraction relies on).
#pragma once

#include "safeamp/format/cpu_path.hpp"

#if defined(SAFEAMP_X86_KERNELS)

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "safeamp/config.hpp"
#include "safeamp/format/format_spec.hpp"
#include "safeamp/format/philox.hpp"
#include "safeamp/format/philox_avx2.hpp"
#include "safeamp/format/round_kernel.hpp"
#include "safeamp/format/round_options.hpp"

SAFEAMP_DETAIL_AVX2_BEGIN

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
  std::size_t special_vectors = 0;  // vectors that took the exact path (steers path_choice, stochastic marks)
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

/// The constants of one format, broadcast once per chunk and passed to the vector steps by reference: g++
/// otherwise rebuilds each broadcast inside the loop (mov, vmovd, vpbroadcastd per use) under the register pressure
/// of the 16 ymm registers; pinned by an empty asm, spilled ones are reloaded as memory operands instead.
template <format_spec F>
struct constants8 {
  using t = traits<F>;
  static constexpr round_constants k = t::k;
  vec abs_mask = u32(0x7FFFFFFFu);
  vec inf = u32(0x7F800000u);
  vec max_bits = u32(k.max_bits);
  vec inf_or_nan = u32(k.inf_or_nan);
  vec min_normal = u32(k.min_normal_bits);
  vec min_normal_minus_one = u32(k.min_normal_bits - 1u);
  vec range_bias = u32(t::range_bias);
  vec range_limit = u32(t::range_limit);
  vec one = u32(1);
  vec half_minus_one = u32(t::low >> 1);
  vec low = u32(t::low);
  vec keep = u32(~t::low);
  vec emin_field = u32(k.min_normal_bits & 0x7F800000u);
  vec mantissa_field = u32(k.mantissa_bits << 23);
  vec reflect = u32(254u << 23);
  vec normal_from = u32(0x00800000u);
  vec not_normal_flipped = u32(0x7EFFFFFFu ^ 0x80000000u);  // for greater_u: |x| - 2^-126 > 0x7EFFFFFF
  vec subnormal_flipped = u32(0x007FFFFFu ^ 0x80000000u);
  vec sign_flip = u32(0x80000000u);
  vec payload = u32(k.payload_mask);
  vec nan_fill = u32(k.nan_fill);
  vec quantum = u32(k.quantum_bits);
  vec all_ones = u32(0xFFFFFFFFu);
  vec normal_exponent_limit = u32(0x01000000u);  // for not_normal_pair_lanes' test of the exponent field

  struct unpinned {};
  /// Plain broadcasts, for a few vectors per call (round8's three-argument form): the compiler may fold or hoist
  /// them into the caller's loop.
  explicit constants8(unpinned) noexcept {}
  constants8() noexcept {
    pin(abs_mask), pin(inf), pin(max_bits), pin(inf_or_nan), pin(min_normal), pin(min_normal_minus_one);
    pin(range_bias), pin(range_limit), pin(one), pin(half_minus_one), pin(low), pin(keep), pin(emin_field);
    pin(mantissa_field), pin(reflect), pin(normal_from), pin(not_normal_flipped), pin(subnormal_flipped);
    pin(sign_flip), pin(payload), pin(nan_fill), pin(quantum), pin(all_ones), pin(normal_exponent_limit);
  }
  static void pin(vec& x) noexcept { __asm__("" : "+x"(x)); }
  /// Unsigned x > c, with c given with its sign bit flipped.
  SAFEAMP_DETAIL_ALWAYS_INLINE vec greater_u_flipped(vec x, vec c_flipped) const noexcept {
    return _mm256_cmpgt_epi32(_mm256_xor_si256(x, sign_flip), c_flipped);
  }
};

/// Stochastic rounding of every lane of one vector, exactly (round_float_bits of round_kernel.hpp): u input bits,
/// a = |u|, rnd the elements' Philox words. Both use the rule: the magnitude rounds up iff frac32 > ~rnd, frac32
/// the 32 bits below the cut (at s = 23 - M in the normal range, s = 23 - M + emin - e below it). Where the cut
/// lies inside the float's significand (|x| >= one quantum Q, s <= 23) that is the normal range's cut with
/// s bits of rnd: (|x| + (rnd >> (32 - s))) & ~(2^s - 1), with vpsrlvd's per-lane counts. Below Q (s >= 24) the
/// result is 0 or Q: frac32 is the significand, top-aligned, shifted right by s - 24 (vpsrlvd gives 0 for counts of
/// 32 or more: float subnormals never round up), and it rounds up iff frac32 + rnd carries out of 32 bits.
/// Zero, +-inf and NaN inputs take one predictable branch for their counters; without them every result is finite
/// or an overflow.
template <format_spec F, bool Ftz, bool Sat>
SAFEAMP_DETAIL_ALWAYS_INLINE vec stochastic8(const constants8<F>& v, vec u, vec a, vec rnd, counters8& acc) noexcept {
  using t = traits<F>;
  constexpr round_constants k = t::k;
  const vec zero = _mm256_setzero_si256();
  vec r;
  if constexpr (t::float_range) {
    r = _mm256_and_si256(_mm256_add_epi32(a, _mm256_srli_epi32(rnd, 32 - t::sh)), v.keep);
  } else {
    // 32 - s: 32 - sh in the normal range (and above it), smaller by emin - e below it (e the biased exponent).
    constexpr int below_shift = 32 - static_cast<int>(t::sh) - static_cast<int>(k.emin_src);
    const vec n32 = _mm256_min_epi32(
        _mm256_add_epi32(_mm256_srli_epi32(a, 23), u32(static_cast<std::uint32_t>(below_shift))), u32(32u - t::sh));
    const vec cut =
        _mm256_andnot_si256(_mm256_srlv_epi32(v.all_ones, n32), _mm256_add_epi32(a, _mm256_srlv_epi32(rnd, n32)));
    const vec top = _mm256_or_si256(_mm256_slli_epi32(a, 8), v.sign_flip);  // the significand at bits 31..8
    const vec frac32 = _mm256_srlv_epi32(top, _mm256_sub_epi32(u32(8), n32));
    const vec sum = _mm256_add_epi32(frac32, rnd);
    const vec no_carry = _mm256_cmpeq_epi32(_mm256_max_epu32(sum, rnd), sum);
    r = select(_mm256_cmpgt_epi32(v.quantum, a), _mm256_andnot_si256(no_carry, v.quantum), cut);
  }
  // A NaN input's r may have wrapped into the sign bit; the NaN select below replaces it either way.
  const vec over = _mm256_cmpgt_epi32(r, v.max_bits);  // rounded magnitude above max finite; +-inf inputs too
  if constexpr (Ftz) r = _mm256_andnot_si256(_mm256_cmpgt_epi32(v.min_normal, r), r);
  r = select(over, Sat ? v.max_bits : v.inf_or_nan, r);
  // Zero, +-inf and NaN inputs: |x| + 0x7FFFFFFF (mod 2^32) is INT_MAX for 0, above -0x800002 for inf and NaN.
  const vec rare = _mm256_cmpgt_epi32(_mm256_add_epi32(a, u32(0x7FFFFFFFu)), u32(0xFF7FFFFEu));
  if (_mm256_testz_si256(rare, rare)) {
    acc.overflow = count(acc.overflow, over);
    if constexpr (!Sat && has_infinity(F)) acc.infinity = count(acc.infinity, over);
    if constexpr (!Sat && !has_infinity(F)) acc.nan = count(acc.nan, over);
  } else {
    const vec nan_in = _mm256_cmpgt_epi32(a, v.inf);
    r = select(nan_in, _mm256_or_si256(_mm256_and_si256(a, v.payload), v.nan_fill), r);
    acc.overflow = count(acc.overflow, _mm256_and_si256(over, _mm256_cmpgt_epi32(v.inf, a)));
    acc.nan = count(acc.nan, _mm256_cmpgt_epi32(r, v.inf));
    acc.infinity = count(acc.infinity, _mm256_cmpeq_epi32(r, v.inf));
    acc.zero_inputs = count(acc.zero_inputs, _mm256_cmpeq_epi32(a, zero));
  }
  acc.below_normal = count(acc.below_normal, _mm256_cmpgt_epi32(v.min_normal, r));
  acc.zero_results = count(acc.zero_results, _mm256_cmpeq_epi32(r, zero));
  return _mm256_or_si256(r, _mm256_and_si256(u, v.sign_flip));
}

/// The fixed cut at bit 23 - M on the signed bits u (exact in the target's normal range, round_fast.hpp says why;
/// for bf16 and tf32 at every finite input, float subnormals included).
template <rounding R, format_spec F>
SAFEAMP_DETAIL_ALWAYS_INLINE vec cut8(const constants8<F>& v, vec u, vec rnd) noexcept {
  using t = traits<F>;
  vec bias = _mm256_setzero_si256();
  if constexpr (R == rounding::nearest_even) {
    bias = _mm256_add_epi32(_mm256_and_si256(_mm256_srli_epi32(u, t::sh), v.one), v.half_minus_one);
  } else if constexpr (R == rounding::toward_pos_inf) {
    bias = _mm256_andnot_si256(_mm256_srai_epi32(u, 31), v.low);
  } else if constexpr (R == rounding::toward_neg_inf) {
    bias = _mm256_and_si256(_mm256_srai_epi32(u, 31), v.low);
  } else if constexpr (R == rounding::stochastic) {
    bias = _mm256_srli_epi32(rnd, 32 - t::sh);  // a carry past the cut iff frac32 > ~random
  }
  return _mm256_and_si256(_mm256_add_epi32(u, bias), v.keep);
}

/// The rounding immediate of vroundps for a deterministic mode (no exceptions: the rounding mode comes from the
/// instruction, never from MXCSR).
template <rounding R>
inline constexpr int round_imm = (R == rounding::nearest_even     ? _MM_FROUND_TO_NEAREST_INT
                                  : R == rounding::toward_zero    ? _MM_FROUND_TO_ZERO
                                  : R == rounding::toward_pos_inf ? _MM_FROUND_TO_POS_INF
                                                                  : _MM_FROUND_TO_NEG_INF) |
                                 _MM_FROUND_NO_EXC;

/// The floats u (exponent fields e, normal or not) rounded into F in mode R by float arithmetic: x / Q to an integer
/// by vroundps, scaled back by Q, the quantum of x's binade in F (at least F's smallest subnormal). The rounding
/// comes from the instruction's immediate, not from MXCSR; overflow, flushing and non-normal inputs are the
/// caller's (special8, narrow_pair).
template <rounding R, format_spec F>
SAFEAMP_DETAIL_ALWAYS_INLINE vec quantum_round(const constants8<F>& v, vec u, vec e) noexcept {
  const vec q = _mm256_sub_epi32(_mm256_max_epi32(e, v.emin_field), v.mantissa_field);
  const vec inv_q = _mm256_sub_epi32(v.reflect, q);  // 1 / Q: the exponent field reflected about 127
  const __m256 whole = _mm256_round_ps(_mm256_mul_ps(_mm256_castsi256_ps(u), _mm256_castsi256_ps(inv_q)), round_imm<R>);
  return _mm256_castps_si256(_mm256_mul_ps(whole, _mm256_castsi256_ps(q)));
}

/// Every lane of one vector in a deterministic mode, exactly, with the counters (the vectors that hold any value
/// outside the target's normal range). The rounding itself, signs included:
///  * bf16, tf32: the fixed cut (cut8), exact for every finite input;
///  * fp16 nearest even: the CPU's conversion there and back (F16C: rounding from the immediate; it keeps fp16
///    subnormals whatever MXCSR.FTZ/DAZ say, and gives overflow inf and NaN the top payload bits as decode does);
///  * fp16 directed, E4M3, E5M2: x / Q rounded to an integer by vroundps and scaled back, Q = 2^(max(e, emin) - M)
///    the target's quantum at |x| (e: the exponent of x); both scalings are by powers of two and exact, and every
///    nonzero result is a normal float, so MXCSR's FTZ never applies.
/// Then overflow (|result| > max finite): inf (NaN without inf) in the direction the mode rounds, max finite in
/// the other and when saturating. Inputs that are not normal floats (zero, float subnormals, +-inf, NaN) take one
/// predictable branch: there zero inputs are counted, NaN gets the format's payload bits (quiet), +-inf its own
/// value in the directed modes, and a float subnormal (which MXCSR.DAZ would read as 0, losing the quantum that
/// rounding toward infinity owes it) its result from the definition. Without such inputs a NaN or inf result
/// can only come from overflow, which counts them without looking at the results again.
template <rounding R, format_spec F, bool Ftz, bool Sat>
SAFEAMP_DETAIL_ALWAYS_INLINE vec special8(const constants8<F>& v, vec u, vec a, counters8& acc) noexcept {
  static_assert(R != rounding::stochastic, "stochastic rounding takes stochastic8");
  using t = traits<F>;
  const vec zero = _mm256_setzero_si256();
  const vec inf = v.inf;
  const vec abs_mask = v.abs_mask;
  vec r;
  if constexpr (t::float_range) {
    r = cut8<R, F>(v, u, zero);
  } else if constexpr (R == rounding::nearest_even && F == fp16) {
    const __m128i h = _mm256_cvtps_ph(_mm256_castsi256_ps(u), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_castps_si256(_mm256_cvtph_ps(h));
  } else {
    r = quantum_round<R>(v, u, _mm256_and_si256(a, inf));
  }
  vec ra = _mm256_and_si256(r, abs_mask);
  if constexpr (Ftz) ra = _mm256_and_si256(ra, _mm256_cmpgt_epi32(ra, v.min_normal_minus_one));
  const vec max_bits = v.max_bits;
  const vec inf_or_nan = v.inf_or_nan;
  const vec over = _mm256_cmpgt_epi32(ra, max_bits);  // overflow, and +-inf and NaN inputs
  const vec negative = _mm256_srai_epi32(u, 31);
  // The overflowed lanes that become inf (NaN without inf): those whose mode rounds away from zero.
  vec away = Sat ? zero : v.all_ones;
  if constexpr (!Sat && R == rounding::toward_zero) away = zero;
  if constexpr (!Sat && R == rounding::toward_pos_inf) away = _mm256_andnot_si256(negative, away);
  if constexpr (!Sat && R == rounding::toward_neg_inf) away = negative;
  const vec overflow_bits = select(away, inf_or_nan, max_bits);
  // Not a normal float: |x| - 2^-126 >= inf - 2^-126 (unsigned) for zero, subnormals, +-inf and NaN.
  const vec rare = v.greater_u_flipped(_mm256_sub_epi32(a, v.normal_from), v.not_normal_flipped);
  if (_mm256_testz_si256(rare, rare)) {
    ra = select(over, overflow_bits, ra);
    acc.overflow = count(acc.overflow, over);
    const vec to_special = _mm256_and_si256(over, away);
    if constexpr (has_infinity(F)) acc.infinity = count(acc.infinity, to_special);
    if constexpr (!has_infinity(F)) acc.nan = count(acc.nan, to_special);
  } else {
    const vec nan_in = _mm256_cmpgt_epi32(a, inf);
    const vec inf_in = _mm256_cmpeq_epi32(a, inf);
    acc.overflow = count(acc.overflow, _mm256_andnot_si256(_mm256_or_si256(nan_in, inf_in), over));
    ra = select(over, overflow_bits, ra);
    if constexpr (R != rounding::nearest_even) ra = select(inf_in, Sat ? max_bits : inf_or_nan, ra);
    ra = select(nan_in, _mm256_or_si256(_mm256_and_si256(a, v.payload), v.nan_fill), ra);
    if constexpr (!t::float_range) {
      // A float subnormal (|x| < half the target's smallest subnormal): zero, or one quantum where the mode
      // rounds away from zero (then flushed if asked).
      const vec tiny =
          _mm256_cmpgt_epi32(v.subnormal_flipped, _mm256_xor_si256(_mm256_sub_epi32(a, v.one), v.sign_flip));
      vec up = zero;
      if constexpr (R == rounding::toward_pos_inf) up = _mm256_andnot_si256(negative, tiny);
      if constexpr (R == rounding::toward_neg_inf) up = _mm256_and_si256(negative, tiny);
      ra = select(tiny, Ftz ? zero : _mm256_and_si256(up, v.quantum), ra);
    }
    acc.nan = count(acc.nan, _mm256_cmpgt_epi32(ra, inf));
    acc.infinity = count(acc.infinity, _mm256_cmpeq_epi32(ra, inf));
    acc.zero_inputs = count(acc.zero_inputs, _mm256_cmpeq_epi32(a, zero));
  }
  acc.below_normal = count(acc.below_normal, _mm256_cmpgt_epi32(v.min_normal, ra));
  acc.zero_results = count(acc.zero_results, _mm256_cmpeq_epi32(ra, zero));
  return _mm256_or_si256(ra, _mm256_andnot_si256(abs_mask, u));
}

/// The lanes where u0 or u1 is not a normal float (zero, float subnormal, +-inf, NaN), with one compare. Such a
/// float's exponent field e (u & inf) is 0 or 255, and e + 2^23 (as a signed 32-bit integer) is then below 2^24 (0
/// gives 2^23, 255 wraps to INT_MIN); the lane-wise signed minimum of the two sums lies below 2^24 iff one of them
/// does.
template <format_spec F>
SAFEAMP_DETAIL_ALWAYS_INLINE vec not_normal_pair_lanes(const constants8<F>& v, vec u0, vec u1) noexcept {
  const vec d0 = _mm256_add_epi32(_mm256_and_si256(u0, v.inf), v.normal_from);
  const vec d1 = _mm256_add_epi32(_mm256_and_si256(u1, v.inf), v.normal_from);
  return _mm256_cmpgt_epi32(v.normal_exponent_limit, _mm256_min_epi32(d0, d1));
}

/// Whether u0 or u1 holds a zero, an infinity or a NaN: the test of the pairs that fp16_pair takes. F16C rounds
/// float subnormals exactly in every mode whatever MXCSR.FTZ says, so only those inputs need the exact path; under
/// DAZ, which reads a float subnormal as 0, the product below reads it as 0 as well and sends its pair there. Three
/// float instructions where not_normal_pair_lanes takes six integer ones, which compete with the kernel's own integer
/// work for the same vector units. The product p = u0 u1 is then zero, infinite or NaN, and p - p is 0 for a finite p
/// and NaN otherwise, so p == p - p or the two are unordered. The product of two other floats can also underflow to
/// zero (|u0 u1| < 2^-149; under FTZ below 2^-126, under DAZ with a float subnormal) or overflow (|u0 u1| >= 2^128):
/// such a pair takes the exact path, which gives the same bits, so the data and the floating-point environment change
/// the time, never the results. (narrow_pair keeps not_normal_pair_lanes: its vroundps kernel would read a float
/// subnormal as 0 under DAZ, and flush x / Q under FTZ.)
SAFEAMP_DETAIL_ALWAYS_INLINE bool zero_inf_or_nan_product(__m256 p) noexcept {
  const __m256 rare = _mm256_cmp_ps(p, _mm256_sub_ps(p, p), _CMP_EQ_UQ);
  return _mm256_testz_ps(rare, rare) == 0;
}
SAFEAMP_DETAIL_ALWAYS_INLINE bool zero_inf_or_nan_pair(vec u0, vec u1) noexcept {
  return zero_inf_or_nan_product(_mm256_mul_ps(_mm256_castsi256_ps(u0), _mm256_castsi256_ps(u1)));
}

/// zero_inf_or_nan_pair's test over two pairs at once, the four vectors' lane-wise product: true for every quad with
/// a zero, an infinity or a NaN, and for some without (a product of four normal floats that overflows or underflows
/// to zero), whose pairs are then tested one by one. Half the test's instructions per element: the test was 22% of
/// fp16's time on wide-range data in cache (Intel model 207, AVX2 path forced: 64 Ki in 10.3 us with it, 8.1 without).
SAFEAMP_DETAIL_ALWAYS_INLINE bool zero_inf_or_nan_quad(vec u0, vec u1, vec u2, vec u3) noexcept {
  return zero_inf_or_nan_product(_mm256_mul_ps(_mm256_mul_ps(_mm256_castsi256_ps(u0), _mm256_castsi256_ps(u1)),
                                               _mm256_mul_ps(_mm256_castsi256_ps(u2), _mm256_castsi256_ps(u3))));
}

/// The lanes whose magnitude a = |x| lies outside the target's normal range (zero, +-inf and NaN among them).
template <format_spec F>
SAFEAMP_DETAIL_ALWAYS_INLINE vec outside_normal_range8(const constants8<F>& v, vec a) noexcept {
  return _mm256_cmpgt_epi32(_mm256_add_epi32(a, v.range_bias), v.range_limit);
}

/// outside_normal_range8 of the eight floats at src.
template <format_spec F>
SAFEAMP_DETAIL_ALWAYS_INLINE vec outside_normal_range8_at(const constants8<F>& v, const float* src) noexcept {
  return outside_normal_range8(v, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const vec*>(src)), v.abs_mask));
}

/// Eight elements: the fixed cut when every lane lies in the normal range, else the exact path (special8 for the
/// deterministic modes, stochastic8 for stochastic rounding). Always: skip the test (the exact path is right for every
/// lane); the caller picks it where most vectors need the exact path, so the branch would mispredict.
template <rounding R, format_spec F, bool Ftz, bool Sat, bool Always = false>
SAFEAMP_DETAIL_ALWAYS_INLINE vec round8(const constants8<F>& v, vec u, vec rnd, counters8& acc) noexcept {
  const vec a = _mm256_and_si256(u, v.abs_mask);
  if constexpr (!Always) {
    const vec special = outside_normal_range8(v, a);
    if (_mm256_testz_si256(special, special)) return cut8<R, F>(v, u, rnd);
    ++acc.special_vectors;
  }
  if constexpr (R == rounding::stochastic) {
    return stochastic8<F, Ftz, Sat>(v, u, a, rnd, acc);
  } else {
    return special8<R, F, Ftz, Sat>(v, u, a, acc);
  }
}

/// round8 for callers that keep no constants8 of their own (the block kernels: block_avx2.hpp, block_nvfp4_avx2.hpp).
template <rounding R, format_spec F, bool Ftz, bool Sat>
SAFEAMP_DETAIL_ALWAYS_INLINE vec round8(vec u, vec rnd, counters8& acc) noexcept {
  return round8<R, F, Ftz, Sat>(constants8<F>(typename constants8<F>::unpinned{}), u, rnd, acc);
}

/// How many of the `count` vectors at `in` hold a lane outside the target's normal range (round8's test, without
/// its branch): what a test block counts, for a probe block that runs without the test (path_choice::probe).
template <format_spec F>
SAFEAMP_DETAIL_ALWAYS_INLINE std::size_t count_special8(const constants8<F>& v, const float* in,
                                                        std::size_t count) noexcept {
  std::size_t n = 0;
  for (std::size_t j = 0; j < count; ++j) {
    const vec special = outside_normal_range8_at(v, in + 8 * j);
    n += _mm256_testz_si256(special, special) != 0 ? 0u : 1u;
  }
  return n;
}

/// Eight results, with a streaming or an ordinary store.
SAFEAMP_DETAIL_ALWAYS_INLINE void store8(float* dst, vec y, bool streamed) noexcept {
  if (streamed) {
    _mm256_stream_si256(reinterpret_cast<vec*>(dst), y);
  } else {
    _mm256_storeu_si256(reinterpret_cast<vec*>(dst), y);
  }
}

/// One vector of 8 elements at src (u) with words rnd, stored at dst (streaming or not).
template <rounding R, format_spec F, bool Ftz, bool Sat, bool Always = false>
SAFEAMP_DETAIL_ALWAYS_INLINE void round_store8(const constants8<F>& v, const float* src, float* dst, vec rnd,
                                               bool streamed, counters8& acc) noexcept {
  store8(dst, round8<R, F, Ftz, Sat, Always>(v, _mm256_loadu_si256(reinterpret_cast<const vec*>(src)), rnd, acc),
         streamed);
}

/// Elements [0, n), n <= 8, through one padded vector (words: rw[0..n) for stochastic rounding). Padding lanes
/// are +0 inputs: they count as zero inputs and zero results, which cancel in underflow and subnormal; no other
/// counter sees a zero.
template <rounding R, format_spec F, bool Ftz, bool Sat>
SAFEAMP_DETAIL_ALWAYS_INLINE void round_few8(const constants8<F>& v, const float* in, float* out, std::size_t n,
                                             const std::uint32_t* rw, counters8& acc) noexcept {
  alignas(32) float tail_in[8], tail_out[8];
  alignas(32) std::uint32_t tail_words[8] = {};
  for (std::size_t e = 0; e < 8; ++e) {
    tail_in[e] = e < n ? in[e] : 0.0f;
    if constexpr (R == rounding::stochastic) tail_words[e] = e < n ? rw[e] : 0u;
  }
  const vec rnd = _mm256_load_si256(reinterpret_cast<const vec*>(tail_words));
  const vec u = _mm256_load_si256(reinterpret_cast<const vec*>(tail_in));
  _mm256_store_si256(reinterpret_cast<vec*>(tail_out), round8<R, F, Ftz, Sat>(v, u, rnd, acc));
  for (std::size_t e = 0; e < n; ++e) out[e] = tail_out[e];
}

/// How many elements (at most n) are stored normally before out + that is 32-byte aligned (streaming stores).
SAFEAMP_DETAIL_ALWAYS_INLINE std::size_t stream_head(const float* out, std::size_t n) noexcept {
  const std::size_t head = ((32u - (reinterpret_cast<std::uintptr_t>(out) & 31u)) & 31u) / sizeof(float);
  return head < n ? head : n;
}

/// The sixteen results of a pair kernel, with streaming or ordinary stores.
SAFEAMP_DETAIL_ALWAYS_INLINE void store_pair(float* dst, vec y0, vec y1, bool streamed) noexcept {
  store8(dst, y0, streamed);
  store8(dst + 8, y1, streamed);
}

/// The 16-bit lanes (sign-magnitude: fp16 codes, or the top halves of floats) whose magnitude mode R rounds away
/// from zero: every lane in nearest even (where an overflow goes), none toward zero, by sign in the directed modes.
template <rounding R>
SAFEAMP_DETAIL_ALWAYS_INLINE vec away16(vec h) noexcept {
  if constexpr (R == rounding::toward_zero) return _mm256_setzero_si256();
  if constexpr (R == rounding::toward_pos_inf)
    return _mm256_andnot_si256(_mm256_srai_epi16(h, 15), _mm256_set1_epi16(-1));
  if constexpr (R == rounding::toward_neg_inf) return _mm256_srai_epi16(h, 15);
  return _mm256_set1_epi16(-1);
}

/// Counters of 16-bit lanes for the pair kernels (fp16_pair, narrow_pair): each lane counts at most one
/// element per pair of vectors, so a round_vectors call (at most path_choice::max_stretch blocks of 64 vectors: a
/// stretch without the test; the four-pages loop's 512 vectors) stays far below 2^15; added to the 32-bit counters
/// (pairs of lanes summed by vpmaddwd) when the call ends. `special`: the overflows that became inf (NaN in a format
/// without inf); SpecialIsOverflow: it is every overflow (nearest even without saturation), and the kernel does not
/// count it separately.
struct counters16x16 {
  vec overflow, special, below_normal, zero_results;
  // Written out: an implicit constructor would be compiled without the AVX2 target of this region.
  counters16x16() noexcept
      : overflow(_mm256_setzero_si256()), special(overflow), below_normal(overflow), zero_results(overflow) {}
  SAFEAMP_DETAIL_ALWAYS_INLINE static vec widen(vec c) noexcept { return _mm256_madd_epi16(c, _mm256_set1_epi16(1)); }
  template <format_spec F, bool SpecialIsOverflow>
  SAFEAMP_DETAIL_ALWAYS_INLINE void add_to(counters8& acc) const noexcept {
    const vec over = widen(overflow);
    acc.overflow = _mm256_add_epi32(acc.overflow, over);
    const vec to_special = SpecialIsOverflow ? over : widen(special);
    if constexpr (has_infinity(F)) acc.infinity = _mm256_add_epi32(acc.infinity, to_special);
    if constexpr (!has_infinity(F)) acc.nan = _mm256_add_epi32(acc.nan, to_special);
    acc.below_normal = _mm256_add_epi32(acc.below_normal, widen(below_normal));
    acc.zero_results = _mm256_add_epi32(acc.zero_results, widen(zero_results));
  }
};

/// Whether F's values are fp16's codes with the low 10 - M mantissa bits zero: an IEEE format of five exponent bits
/// and fp16's bias (fp16 itself, E5M2). Rounding into F in a directed mode is then rounding into fp16 in that mode and
/// then into F on the codes: F's values are fp16 values, so F's largest value at or below x is also F's largest at
/// or below fp16's largest at or below x (likewise upward), and the code cut in the same direction finds it.
template <format_spec F>
inline constexpr bool on_fp16_grid = F.exponent_bits == 5 && F.mantissa_bits <= 10 &&
                                     (F.specials == special_values::ieee) && F.bias_offset == 0 && !F.is_unsigned;

/// fp16 in every deterministic mode, and the directed modes into E5M2 (on_fp16_grid): 16 elements as two F16C
/// conversions in mode R (the instruction's rounding control, never MXCSR's), for E5M2 followed by the directed cut
/// at bit 8 of the codes, with the counters taken from the sixteen codes at once (a code's class is plain in its
/// bits: 0x7C00 is the overflow's inf, codes below 0x0400 are below the normal range, 0 is zero), the results from
/// the codes converted back, so the same bits as special8 with half its counting. An overflow in the direction the
/// mode rounds is inf (0x7C00); one in the other direction (toward zero, or the sign the directed mode rounds toward
/// zero) the conversion clamps to fp16's max finite, so it is counted from the input: |x| >= 2^16, the binade above
/// the top one of both formats. Saturation and flushing are done on the codes: inf less one quantum is max finite,
/// and the sign bit kept alone is a signed zero. The inputs are normal floats (round_pairs gives the other pairs to
/// special8).
template <rounding R, format_spec F, bool Ftz, bool Sat>
SAFEAMP_DETAIL_ALWAYS_INLINE void fp16_pair(const constants8<F>& v, vec u0, vec u1, float* dst, bool streamed,
                                            counters8& acc, counters16x16& acc16) noexcept {
  static_assert(on_fp16_grid<F> && R != rounding::stochastic && (F == fp16 || R != rounding::nearest_even),
                "the pair's counting reads fp16 codes; nearest even into a narrower format would round twice");
  constexpr short drop = static_cast<short>((1 << (10 - F.mantissa_bits)) - 1);  // code bits below F's mantissa
  vec y0, y1;
  const __m128i h0 = _mm256_cvtps_ph(_mm256_castsi256_ps(u0), round_imm<R>);
  const __m128i h1 = _mm256_cvtps_ph(_mm256_castsi256_ps(u1), round_imm<R>);
  vec h = _mm256_inserti128_si256(_mm256_castsi128_si256(h0), h1, 1);
  if constexpr (drop != 0) {
    // The directed cut on sign-magnitude codes: the magnitude up (all ones below the cut added) where the mode
    // rounds away from zero, then the bits below the cut cleared; a carry goes into the exponent, and from max
    // finite up to inf.
    const vec up = _mm256_and_si256(away16<R>(h), _mm256_set1_epi16(drop));
    h = _mm256_andnot_si256(_mm256_set1_epi16(drop), _mm256_add_epi16(h, up));
  }
  const vec ha = _mm256_and_si256(h, _mm256_set1_epi16(0x7FFF));
  // Toward zero never reaches inf from a finite input.
  const vec to_inf =
      R == rounding::toward_zero ? _mm256_setzero_si256() : _mm256_cmpeq_epi16(ha, _mm256_set1_epi16(fp16_inf_code));
  const vec below = _mm256_cmpgt_epi16(_mm256_set1_epi16(fp16_min_normal_code), ha);
  acc16.overflow = _mm256_sub_epi16(acc16.overflow, to_inf);
  if constexpr (R != rounding::nearest_even) {
    if constexpr (!Sat) acc16.special = _mm256_sub_epi16(acc16.special, to_inf);
    // The overflows the conversion clamped: |x| above the top binade of F (2^16 for both formats) where the mode
    // rounds the magnitude down (toward zero: every lane; toward +inf: negative lanes, whose bits with the sign
    // flipped are |x|; toward -inf: positive lanes, the only ones whose bits are positive as signed integers).
    const vec big = u32(traits<F>::k.max_bits | 0x007FFFFFu);
    const auto clamped = [&](vec u) noexcept {
      if constexpr (R == rounding::toward_zero) return _mm256_cmpgt_epi32(_mm256_and_si256(u, v.abs_mask), big);
      if constexpr (R == rounding::toward_pos_inf) return _mm256_cmpgt_epi32(_mm256_xor_si256(u, v.sign_flip), big);
      if constexpr (R == rounding::toward_neg_inf) return _mm256_cmpgt_epi32(u, big);
    };
    acc.overflow = count(count(acc.overflow, clamped(u0)), clamped(u1));
  }
  acc16.below_normal = _mm256_sub_epi16(acc16.below_normal, below);
  acc16.zero_results =
      _mm256_sub_epi16(acc16.zero_results, Ftz ? below : _mm256_cmpeq_epi16(ha, _mm256_setzero_si256()));
  constexpr bool saturates = Sat && R != rounding::toward_zero;
  if constexpr (Ftz || saturates || drop != 0) {
    // +-inf less one quantum of F: +-max finite.
    if constexpr (saturates) h = _mm256_sub_epi16(h, _mm256_and_si256(to_inf, _mm256_set1_epi16(drop + 1)));
    if constexpr (Ftz) h = _mm256_andnot_si256(_mm256_andnot_si256(_mm256_set1_epi16(-0x8000), below), h);
    y0 = _mm256_castps_si256(_mm256_cvtph_ps(_mm256_castsi256_si128(h)));
    y1 = _mm256_castps_si256(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)));
  } else {
    y0 = _mm256_castps_si256(_mm256_cvtph_ps(h0));
    y1 = _mm256_castps_si256(_mm256_cvtph_ps(h1));
  }
  store_pair(dst, y0, y1, streamed);
}

/// Whether narrow_pair takes format F: a result has at most 7 mantissa bits, so the top 16 bits of its float hold it
/// whole (sign, exponent, mantissa), as they hold min normal, max finite and what overflow gives (E4M3, E5M2 and
/// the other small formats; not fp16, bf16 or tf32).
template <format_spec F>
inline constexpr bool pairs_in_16_bits =
    !traits<F>::float_range && traits<F>::k.mantissa_bits <= 7u && (traits<F>::k.min_normal_bits & 0xFFFFu) == 0u &&
    (traits<F>::k.max_bits & 0xFFFFu) == 0u && (traits<F>::k.inf_or_nan & 0xFFFFu) == 0u;

/// The top 16 bits of a float's bits, as a 16-bit lane.
constexpr short top16(std::uint32_t bits) noexcept { return static_cast<short>(bits >> 16); }

/// quantum_round of the normal floats u (exponent fields e), shifted down to the result's top 16 bits.
template <rounding R, format_spec F>
SAFEAMP_DETAIL_ALWAYS_INLINE vec rounded_top16(const constants8<F>& v, vec u, vec e) noexcept {
  return _mm256_srli_epi32(quantum_round<R>(v, u, e), 16);
}

/// A deterministic mode into a narrow format (pairs_in_16_bits), 16 elements: each vector rounded as special8 does
/// (x / Q to an integer by vroundps, scaled back), then the two results' top halves packed into one vector of
/// sixteen 16-bit lanes (each result whole: pairs_in_16_bits), where overflow, flushing and the counters take one
/// instruction per 16 elements instead of one per 8, and unpacked back into floats (the zero low halves come from
/// the unpack). Same bits and counters as special8, for inputs that are normal floats (round_pairs gives the other
/// pairs to special8).
template <rounding R, format_spec F, bool Ftz, bool Sat>
SAFEAMP_DETAIL_ALWAYS_INLINE void narrow_pair(const constants8<F>& v, vec u0, vec u1, float* dst, bool streamed,
                                              counters16x16& acc16) noexcept {
  static_assert(pairs_in_16_bits<F> && R != rounding::stochastic);
  constexpr round_constants k = traits<F>::k;
  const vec e0 = _mm256_and_si256(u0, v.inf);  // exponent fields
  const vec e1 = _mm256_and_si256(u1, v.inf);
  // Lanes: u0's 0-3, u1's 0-3, u0's 4-7, u1's 4-7 (vpackusdw works per 128-bit half; the unpacks undo it).
  const vec h = _mm256_packus_epi32(rounded_top16<R>(v, u0, e0), rounded_top16<R>(v, u1, e1));
  const vec zero = _mm256_setzero_si256();
  const vec max16 = _mm256_set1_epi16(top16(k.max_bits));
  const vec min_normal16 = _mm256_set1_epi16(top16(k.min_normal_bits));
  vec ha = _mm256_and_si256(h, _mm256_set1_epi16(0x7FFF));
  if constexpr (Ftz) ha = _mm256_andnot_si256(_mm256_cmpgt_epi16(min_normal16, ha), ha);
  const vec over = _mm256_cmpgt_epi16(ha, max16);
  acc16.overflow = _mm256_sub_epi16(acc16.overflow, over);
  // The overflowed lanes that become inf (NaN without inf): those whose mode rounds away from zero.
  if constexpr (!Sat && R != rounding::toward_zero) {
    const vec away = away16<R>(h);
    if constexpr (R != rounding::nearest_even)
      acc16.special = _mm256_sub_epi16(acc16.special, _mm256_and_si256(over, away));
    ha = select(over, select(away, _mm256_set1_epi16(top16(k.inf_or_nan)), max16), ha);
  } else {
    ha = select(over, max16, ha);
  }
  const vec below = _mm256_cmpgt_epi16(min_normal16, ha);
  acc16.below_normal = _mm256_sub_epi16(acc16.below_normal, below);
  acc16.zero_results = _mm256_sub_epi16(acc16.zero_results, Ftz ? below : _mm256_cmpeq_epi16(ha, zero));
  const vec signed_h = _mm256_or_si256(ha, _mm256_and_si256(h, _mm256_set1_epi16(-0x8000)));
  store_pair(dst, _mm256_unpacklo_epi16(zero, signed_h), _mm256_unpackhi_epi16(zero, signed_h), streamed);
}

/// Whether the Always variant of round_vectors rounds pairs of vectors in mode R into F: the deterministic modes
/// into fp16 (fp16_pair) and into the formats whose results fit 16 bits (narrow_pair).
template <rounding R, format_spec F>
inline constexpr bool has_pair_kernel = R != rounding::stochastic && (F == fp16 || pairs_in_16_bits<F>);
/// Whether that pair kernel is fp16_pair (else narrow_pair).
template <rounding R, format_spec F>
inline constexpr bool pairs_by_f16c = F == fp16 || (on_fp16_grid<F> && R != rounding::nearest_even);

/// The pair kernel of mode R and format F (has_pair_kernel), 16 elements.
template <rounding R, format_spec F, bool Ftz, bool Sat>
SAFEAMP_DETAIL_ALWAYS_INLINE void round_pair(const constants8<F>& v, vec u0, vec u1, float* dst, bool streamed,
                                             counters8& acc, counters16x16& acc16) noexcept {
  if constexpr (pairs_by_f16c<R, F>) {
    fp16_pair<R, F, Ftz, Sat>(v, u0, u1, dst, streamed, acc, acc16);
  } else {
    narrow_pair<R, F, Ftz, Sat>(v, u0, u1, dst, streamed, acc16);
  }
}

/// The pairs of vectors [i, end) (a multiple of 16 elements) through the pair kernel of mode R and format F;
/// returns the end. A pair with an input that is not a normal float (zero, float subnormal, +-inf, NaN; for
/// fp16_pair only a zero, an infinity or a NaN: zero_inf_or_nan_pair) takes special8, one vector at a time. The pairs
/// of normal floats run in an inner loop of their own that a rare pair leaves: with the rare pair's special8 in the
/// same loop body, g++ kept the 16-bit counters on the stack (a load, subtract and store per counter and pair, carried
/// from pair to pair through store forwarding), and fp16 on wide-range data in cache ran at 0.40x the F16C round trip
/// on Zen 3 (0.52x with this loop, docs/performance.md); its register allocator works loop by loop, so the inner loop
/// gets registers of its own. FourPages (streaming only): [i, end) is four 4 KiB pages, end = i + 4 page_floats, taken
/// a whole line (one pair) from each page in turn, the order of round_four_pages8; the pairs are then numbered, pair p
/// being line p / 4 of page p % 4.
template <rounding R, format_spec F, bool Ftz, bool Sat, bool Streamed, bool FourPages = false>
SAFEAMP_DETAIL_ALWAYS_INLINE std::size_t round_pairs(const constants8<F>& v, const float* in, float* out, std::size_t i,
                                                     std::size_t end, counters8& acc) noexcept {
  static_assert(!FourPages || Streamed);
  counters16x16 acc16;
  // Where pair p starts: in address order p is that element index itself.
  const auto at = [=](std::size_t p) noexcept -> std::size_t {  // i, read only by FourPages
    if constexpr (FourPages) return i + (p % 4) * page_floats + (p / 4) * 16;
    return p;
  };
  constexpr std::size_t step = FourPages ? 1 : 16;
  std::size_t p = FourPages ? 0 : i;
  const std::size_t p_end = FourPages ? 4 * page_floats / 16 : end;
  const auto load_only = [&](std::size_t pair, vec& u0, vec& u1) noexcept {
    const std::size_t from = at(pair);
    if constexpr (FourPages) {
      prefetch_ahead(in + from, four_pages_prefetch_floats);
    } else if constexpr (Streamed) {
      prefetch_ahead(in + from, stream_prefetch_floats);
    }
    u0 = _mm256_loadu_si256(reinterpret_cast<const vec*>(in + from));
    u1 = _mm256_loadu_si256(reinterpret_cast<const vec*>(in + from + 8));
  };
  // A pair with a rare input: both vectors through special8.
  const auto special_pair = [&](std::size_t pair, vec u0, vec u1) noexcept {
    const vec y0 = special8<R, F, Ftz, Sat>(v, u0, _mm256_and_si256(u0, v.abs_mask), acc);
    const vec y1 = special8<R, F, Ftz, Sat>(v, u1, _mm256_and_si256(u1, v.abs_mask), acc);
    store_pair(out + at(pair), y0, y1, Streamed);
  };
  // Loads pair `pair`; true when both vectors hold only inputs the pair kernel takes.
  const auto load = [&](std::size_t pair, vec& u0, vec& u1) noexcept {
    load_only(pair, u0, u1);
    if constexpr (pairs_by_f16c<R, F>) return !zero_inf_or_nan_pair(u0, u1);
    const vec rare = not_normal_pair_lanes(v, u0, u1);
    return _mm256_testz_si256(rare, rare) != 0;
  };
  if constexpr (pairs_by_f16c<R, F> && R == rounding::nearest_even) {
    // Two pairs a test (zero_inf_or_nan_quad), in the same order; a quad the test flags goes pair by pair, each
    // pair with a rare input to special8. The last pair, if any, takes the loop below. Nearest even only: the
    // directed modes also count clamped overflows from the inputs, and with four input vectors live g++ ran out of
    // the 16 vector registers (64 Ki wide-range fp16 toward zero 1.4x slower, E5M2 1.2x; Intel model 207).
    const auto load_quad = [&](std::size_t pair, vec& u0, vec& u1, vec& u2, vec& u3) noexcept {
      load_only(pair, u0, u1);
      load_only(pair + step, u2, u3);
      return !zero_inf_or_nan_quad(u0, u1, u2, u3);
    };
    const auto one_pair = [&](std::size_t pair, vec u0, vec u1) noexcept {
      if (zero_inf_or_nan_pair(u0, u1)) {
        special_pair(pair, u0, u1);
      } else {
        round_pair<R, F, Ftz, Sat>(v, u0, u1, out + at(pair), Streamed, acc, acc16);
      }
    };
    while (p + 2 * step <= p_end) {
      vec u0, u1, u2, u3;
      if (!load_quad(p, u0, u1, u2, u3)) {
        one_pair(p, u0, u1);
        one_pair(p + step, u2, u3);
        p += 2 * step;
        continue;
      }
      do {
        round_pair<R, F, Ftz, Sat>(v, u0, u1, out + at(p), Streamed, acc, acc16);
        round_pair<R, F, Ftz, Sat>(v, u2, u3, out + at(p + step), Streamed, acc, acc16);
        p += 2 * step;
      } while (p + 2 * step <= p_end && load_quad(p, u0, u1, u2, u3));
    }
  }
  while (p + step <= p_end) {
    vec u0, u1;
    if (!load(p, u0, u1)) {
      special_pair(p, u0, u1);
      p += step;
      continue;
    }
    do {
      round_pair<R, F, Ftz, Sat>(v, u0, u1, out + at(p), Streamed, acc, acc16);
      p += step;
    } while (p + step <= p_end && load(p, u0, u1));
  }
  // Nearest even without saturation turns every overflow into inf (NaN): the pair kernels do not count it apart.
  acc16.add_to<F, R == rounding::nearest_even && !Sat>(acc);
  return FourPages ? end : p;
}

/// Vectors [i, i + 8 count) with ordinary or streaming stores. Streaming (spans of 16 MiB or more, in address
/// order; the four-pages loop prefetches four_pages_prefetch_floats ahead): the input of the line
/// stream_prefetch_floats ahead is prefetched, one line (two vectors) at a time. In the Always variant, pairs of
/// vectors: the deterministic modes into fp16 (fp16_pair) and into the formats whose results fit 16 bits (narrow_pair).
/// `stream` picks a loop once per call: tested for every vector instead, it had g++ keep both store forms in the
/// loop body, and bf16 nearest even ran at 0.6x in cache on Zen 3 (64 Ki, same-process A/B).
template <rounding R, format_spec F, bool Ftz, bool Sat, bool Always>
SAFEAMP_DETAIL_ALWAYS_INLINE void round_vectors(const constants8<F>& v, const float* in, float* out, std::size_t i,
                                                std::size_t count, bool stream, counters8& acc) noexcept {
  const vec no_bits = _mm256_setzero_si256();
  const std::size_t end = i + 8 * count;
  if constexpr (has_pair_kernel<R, F> && Always) {
    const std::size_t pairs_end = end - (end - i) % 16;
    i = stream ? round_pairs<R, F, Ftz, Sat, true>(v, in, out, i, pairs_end, acc)
               : round_pairs<R, F, Ftz, Sat, false>(v, in, out, i, pairs_end, acc);
  } else if (stream) {
    for (; i + 16 <= end; i += 16) {
      prefetch_ahead(in + i, stream_prefetch_floats);
      round_store8<R, F, Ftz, Sat, Always>(v, in + i, out + i, no_bits, true, acc);
      round_store8<R, F, Ftz, Sat, Always>(v, in + i + 8, out + i + 8, no_bits, true, acc);
    }
  } else {
    for (; i < end; i += 8) round_store8<R, F, Ftz, Sat, Always>(v, in + i, out + i, no_bits, false, acc);
  }
  for (; i < end; i += 8) round_store8<R, F, Ftz, Sat, Always>(v, in + i, out + i, no_bits, stream, acc);
}

/// The most vectors round_deferred takes in one call: round_chunk_impl's block.
inline constexpr std::size_t deferred_vectors = 64;

/// Vectors [i, i + 8 count) (count <= deferred_vectors) of a block that tests each vector, into an output that is not
/// the input, with ordinary stores, the exact path deferred: every vector is first stored with the fixed cut and, with
/// no branch, marked in a mask when a lane lies outside the target's normal range; then the marked vectors are rounded
/// again by special8 from the input, which is still there. round8's branch mispredicts on most vectors that need the
/// exact path when they are a few percent of the data (E4M3 on Gaussian data: 1 vector in 10), and the exact path's
/// long chain of dependent instructions then starts from an empty pipeline; the marked vectors' loop runs them one
/// after another. With path_choice's switch to the path without the test at 3 vectors in 8 (deferred_eighths), E4M3 on
/// 64 Ki Gaussian floats in cache ran 1.4x as fast on Zen 4 (AVX2 path forced; docs/performance.md). Streaming stores
/// are not deferred: buffering the results to stream them out after the exact path made 64 Mi bf16 and E5M2 0.85x as
/// fast.
template <rounding R, format_spec F, bool Ftz, bool Sat>
SAFEAMP_DETAIL_ALWAYS_INLINE void round_deferred(const constants8<F>& v, const float* in, float* out, std::size_t i,
                                                 std::size_t count, counters8& acc) noexcept {
  std::uint64_t marked = 0;
  const vec no_bits = _mm256_setzero_si256();
  for (std::size_t j = 0; j < count; ++j) {
    const vec u = _mm256_loadu_si256(reinterpret_cast<const vec*>(in + i + 8 * j));
    const vec special = outside_normal_range8(v, _mm256_and_si256(u, v.abs_mask));
    _mm256_storeu_si256(reinterpret_cast<vec*>(out + i + 8 * j), cut8<R, F>(v, u, no_bits));
    marked |= std::uint64_t{_mm256_testz_si256(special, special) == 0} << j;
  }
  acc.special_vectors += static_cast<std::size_t>(std::popcount(marked));
  for (; marked != 0; marked &= marked - 1) {
    const std::size_t at = i + 8 * static_cast<std::size_t>(std::countr_zero(marked));
    const vec u = _mm256_loadu_si256(reinterpret_cast<const vec*>(in + at));
    _mm256_storeu_si256(reinterpret_cast<vec*>(out + at),
                        special8<R, F, Ftz, Sat>(v, u, _mm256_and_si256(u, v.abs_mask), acc));
  }
}

/// Vectors [i, i + 8 count) (count <= deferred_vectors) with round8's test: deferred (round_deferred) with ordinary
/// stores into an output that is not the input, else vector by vector.
template <rounding R, format_spec F, bool Ftz, bool Sat>
SAFEAMP_DETAIL_ALWAYS_INLINE void round_tested(const constants8<F>& v, const float* in, float* out, std::size_t i,
                                               std::size_t count, bool stream, counters8& acc) noexcept {
  if (stream || in == out) {
    round_vectors<R, F, Ftz, Sat, false>(v, in, out, i, count, stream, acc);
  } else {
    round_deferred<R, F, Ftz, Sat>(v, in, out, i, count, acc);
  }
}

/// Four 4 KiB pages [i, i + 4 page_floats) at a time, one whole 64-byte line (two vectors) from each in turn, with
/// streaming stores; out + i is 64-byte aligned. Both halves of a line are written back to back, so a
/// write-combining buffer never holds half a line while the other pages are written. Each line's input is
/// prefetched a group ahead (four_pages_prefetch_floats). In the Always variant, the pair kernels in the same order
/// (round_pairs), as round_vectors uses them.
template <rounding R, format_spec F, bool Ftz, bool Sat, bool Always>
SAFEAMP_DETAIL_ALWAYS_INLINE void round_four_pages8(const constants8<F>& v, const float* in, float* out, std::size_t i,
                                                    counters8& acc) noexcept {
  if constexpr (has_pair_kernel<R, F> && Always) {
    round_pairs<R, F, Ftz, Sat, true, true>(v, in, out, i, i + 4 * page_floats, acc);
  } else {
    const vec no_bits = _mm256_setzero_si256();
    for (std::size_t j = i; j < i + page_floats; j += 16) {
      for (std::size_t p = 0; p < 4 * page_floats; p += page_floats) {
        prefetch_ahead(in + j + p, four_pages_prefetch_floats);
        round_store8<R, F, Ftz, Sat, Always>(v, in + j + p, out + j + p, no_bits, true, acc);
        round_store8<R, F, Ftz, Sat, Always>(v, in + j + p + 8, out + j + p + 8, no_bits, true, acc);
      }
    }
  }
}

/// The deterministic modes over in[0..n): blocks of vectors whose all-normal test path_choice switches off where
/// most vectors need the exact path; stream (large spans into a separate buffer): streaming stores, in the order
/// measured fastest on each vendor's CPUs (docs/performance.md; active_stream_order, SAFEAMP_STREAM_ORDER forces
/// one): on AMD in address order after a head that aligns the output to 32 bytes, with a prefetch of the input
/// (Zen 4, 64 Mi: 0.83-1.58x memcpy, the four-pages order 0.42-0.89x; Zen 3: the four-pages order 0.13-0.16x),
/// elsewhere after an
/// unaligned head of at most 15 elements, four pages at a time, a line from each in turn (round_four_pages8;
/// address order ran at 0.65x memcpy on a Sapphire Rapids Xeon, the AVX-512 kernels' order of one 64-byte vector a
/// page, half a line a page with 32-byte stores, 0.7x as fast on Zen 4); the tail through a padded vector.
template <rounding R, format_spec F, bool Ftz, bool Sat>
SAFEAMP_DETAIL_NOINLINE void round_chunk_impl(const float* in, float* out, std::size_t n, bool stream,
                                              local_counts& c) noexcept {
  static_assert(R != rounding::stochastic, "stochastic rounding takes round_stochastic_chunk");
  const constants8<F> v;
  counters8 acc;
  path_choice choice;
  if (!stream && in != out) choice.eighths = path_choice::deferred_eighths;  // round_tested defers the exact path
  std::size_t i = 0;
  if (stream && stream_in_address_order()) {
    i = stream_head(out, n);
    if (i != 0) round_few8<R, F, Ftz, Sat>(v, in, out, i, nullptr, acc);
  } else if (stream) {
    const std::size_t misaligned = (reinterpret_cast<std::uintptr_t>(out) & 63u) / sizeof(float);
    const std::size_t head = std::min<std::size_t>(misaligned == 0 ? 0 : 16 - misaligned, n);
    for (; i < head; i += 8)
      round_few8<R, F, Ftz, Sat>(v, in + i, out + i, std::min<std::size_t>(head - i, 8), nullptr, acc);
    i = head;
    for (; i + 4 * page_floats <= n; i += 4 * page_floats) {
      choice.start(acc);
      if (choice.always) {
        round_four_pages8<R, F, Ftz, Sat, true>(v, in, out, i, acc);
      } else {
        round_four_pages8<R, F, Ftz, Sat, false>(v, in, out, i, acc);
      }
      choice.finish(acc, 4 * page_floats / 8);
    }
  }
  // A stretch without the test goes in one call (the pair loops' 16-bit counters hold its 63 blocks); a probe block
  // is counted first, and runs without the test where more than half its vectors take the exact path
  // (path_choice::probe).
  constexpr std::size_t block = deferred_vectors;
  static_assert(path_choice::max_stretch * block / 2 < 32768, "counters16x16 would wrap");
  while (i + 8 * block <= n) {
    if (choice.always) {
      const std::size_t blocks = std::min<std::size_t>(choice.left, (n - i) / (8 * block));
      round_vectors<R, F, Ftz, Sat, true>(v, in, out, i, blocks * block, stream, acc);
      choice.skip_blocks(static_cast<unsigned>(blocks));
      i += 8 * block * blocks;
      continue;
    }
    choice.start(acc);
    if (const std::size_t special = choice.probe ? count_special8(v, in + i, block) : 0; 2 * special > block) {
      acc.special_vectors += special;
      round_vectors<R, F, Ftz, Sat, true>(v, in, out, i, block, stream, acc);
    } else {
      round_tested<R, F, Ftz, Sat>(v, in, out, i, block, stream, acc);
    }
    choice.finish(acc, block);
    i += 8 * block;
  }
  round_tested<R, F, Ftz, Sat>(v, in, out, i, (n - i) / 8, stream, acc);
  i += (n - i) / 8 * 8;
  if (i < n) round_few8<R, F, Ftz, Sat>(v, in + i, out + i, n - i, nullptr, acc);
  if (stream) _mm_sfence();
  acc.add_to(c);
}

/// Which of a stochastic step's eight vectors need the exact path: round8's normal-range test, eight lane bits per
/// vector (vector j: bits 8 j to 8 j + 7).
template <format_spec F>
SAFEAMP_DETAIL_ALWAYS_INLINE std::uint64_t mark_step8(const constants8<F>& v, const float* in) noexcept {
  std::uint64_t marks = 0;
  for (std::size_t j = 0; j < 8; ++j) {
    const auto lanes =
        static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(outside_normal_range8_at(v, in + 8 * j))));
    marks |= std::uint64_t{lanes} << (8 * j);
  }
  return marks;
}

/// Steps [s, end) of a stochastic chunk from element i (64 elements each: one generator call); returns the element
/// after the last step. Marked: which vectors take the exact path is read from each step's marks (mark_step8), taken
/// during the step before (by_mark_stretches, round_kernel.hpp, says why); else round8 tests vector by vector.
/// Functions of their own, so that each loop gets registers of its own (as on the AVX-512 path, stochastic_stretch).
template <format_spec F, bool Ftz, bool Sat, bool Marked>
SAFEAMP_DETAIL_NOINLINE std::size_t stochastic_stretch8(const constants8<F>& v, const philox16& gen,
                                                        const stochastic_layout& lay, const float* in, float* out,
                                                        std::size_t s, std::size_t end, std::size_t i,
                                                        counters8& acc) noexcept {
  constexpr rounding R = rounding::stochastic;
  constexpr std::size_t step = 4 * philox16::blocks;
  std::uint64_t now = Marked ? mark_step8(v, in + i) : 0u;
  for (; s < end; ++s, i += step) {
    if (lay.stream) {
      for (std::size_t line = 0; line < step; line += 16) prefetch_ahead(in + i + line, stream_prefetch_floats);
    }
    std::uint64_t next = 0;
    if constexpr (Marked) next = s + 1 < end ? mark_step8(v, in + i + step) : 0u;
    vec w[8];
    gen(lay.first_block + philox16::blocks * s, w);
    for (std::size_t j = 0; j < 8; ++j) {
      if constexpr (Marked) {
        if (((now >> (8 * j)) & 0xFFu) != 0) {
          ++acc.special_vectors;  // round8's Always form skips the test that counts it
          round_store8<R, F, Ftz, Sat, true>(v, in + i + 8 * j, out + i + 8 * j, w[j], lay.stream, acc);
        } else {
          const vec u = _mm256_loadu_si256(reinterpret_cast<const vec*>(in + i + 8 * j));
          store8(out + i + 8 * j, cut8<R, F>(v, u, w[j]), lay.stream);
        }
      } else {
        round_store8<R, F, Ftz, Sat>(v, in + i + 8 * j, out + i + 8 * j, w[j], lay.stream, acc);
      }
    }
    now = next;
  }
  return i;
}

/// Stochastic rounding of in[0..n) with the bits of key (element i: logical index key.offset + i): the Philox
/// words are made 64 at a time (philox16) in registers right before use. The main loop needs the logical index of
/// its first element to be a multiple of 4 and, to stream, a 32-byte aligned output; the elements before that
/// point and after the last full step take words from a small buffer. Streaming goes in address order on every
/// vendor, with the input prefetched stream_prefetch_floats ahead: on an Intel Xeon (AVX2 path forced, -O3) that
/// took 64 Mi from 0.44-0.58x the generator's rate to 0.63-0.71x on N(0,1) data and from 0.31-0.47x to 0.52-0.72x
/// on wide-range data; four pages at a time, with or without a prefetch, was no faster there. On Zen 4 (forced
/// AVX2 path, 64 Mi, 2 rounds) the prefetch neither helped nor hurt: 0.64-0.81x on N(0,1) data with it, 0.60-0.78x
/// without (docs/performance.md).
template <format_spec F, bool Ftz, bool Sat>
SAFEAMP_DETAIL_NOINLINE void round_stochastic_chunk(const float* in, float* out, std::size_t n, philox_key key,
                                                    bool stream, local_counts& c) noexcept {
  constexpr rounding R = rounding::stochastic;
  constexpr std::size_t step = 4 * philox16::blocks;  // elements per generator call
  const constants8<F> v;
  counters8 acc;
  alignas(32) std::uint32_t words[step + 4];
  auto few = [&](std::size_t at, std::size_t len) noexcept {  // len <= step
    const std::uint64_t logical = key.offset + at;
    const auto skip = static_cast<std::size_t>(logical & 3u);
    philox_fill_avx2(words, logical >> 2, (skip + len + 3) / 4, key.seed, key.stream);
    for (std::size_t j = 0; j < len; j += 8) {
      round_few8<R, F, Ftz, Sat>(v, in + at + j, out + at + j, len - j < 8 ? len - j : 8, words + skip + j, acc);
    }
  };
  const stochastic_layout lay(key.offset, n, stream, stream_head(out, 8), step);
  if (lay.start != 0) few(0, lay.start);
  std::size_t i = lay.start;
  if (lay.in_registers) {
    const philox16 gen(key.seed, key.stream);
    // Stretch by stretch, marked where that pays (by_mark_stretches), spans in cache too, unlike the AVX-512 path:
    // on Zen 4 (AVX2 path forced) E4M3 on 1 Mi Gaussian floats went from 1.09 to 1.23-1.27 G elements/s.
    i = by_mark_stretches<step, 8>(
        0, lay.steps, i, acc, [&](bool marked, std::size_t s, std::size_t end, std::size_t at) noexcept {
          return marked ? stochastic_stretch8<F, Ftz, Sat, true>(v, gen, lay, in, out, s, end, at, acc)
                        : stochastic_stretch8<F, Ftz, Sat, false>(v, gen, lay, in, out, s, end, at, acc);
        });
  } else {
    // The low word of the Philox block counter wraps in this chunk (once per 2^34 elements): all buffered.
    for (std::size_t s = 0; s < lay.steps; ++s, i += step) few(i, step);
  }
  if (i < n) few(i, n - i);
  if (lay.stream) _mm_sfence();
  acc.add_to(c);
}

/// Rounds in[0..n) to F in mode R with the counters added to c; stochastic bits of logical index key.offset + i
/// for element i. stream: write with non-temporal stores (large spans into a separate buffer).
template <rounding R, format_spec F>
void round_chunk(const float* in, float* out, std::size_t n, overflow ov, bool ftz, philox_key key, bool stream,
                 local_counts& c) noexcept {
  const auto run = [&]<bool Ftz, bool Sat>() {
    if constexpr (R == rounding::stochastic) {
      round_stochastic_chunk<F, Ftz, Sat>(in, out, n, key, stream, c);
    } else {
      round_chunk_impl<R, F, Ftz, Sat>(in, out, n, stream, c);
    }
  };
  with_flush_and_saturate(ftz, ov, run);
}

}  // namespace safeamp::detail::avx2

SAFEAMP_DETAIL_TARGET_END

#endif  // SAFEAMP_X86_KERNELS
