// The branch-free float -> float rounding step behind round_span, and the block Philox fill for stochastic
// rounding. Same results as decode(encode(x)) bit for bit (tests/unit/format checks it), written so that a
// loop over it auto-vectorises (AVX2/AVX-512 variable shifts, no table lookups, no data-dependent branches).
#pragma once

#include <cstddef>
#include <cstdint>

#include "safeamp/config.hpp"
#include "safeamp/format/format_spec.hpp"
#include "safeamp/format/philox.hpp"
#include "safeamp/format/round_options.hpp"

// The per-element step must be inlined into the loop for it to vectorise; g++ otherwise sometimes keeps it
// out of line (a call per element, 10x slower).
// The loops themselves are kept out of line: inlined into their callers g++ sometimes gives up on them
// ("complicated access pattern"), while on their own they vectorise every time.
#if defined(__GNUC__) && !defined(__CUDACC__)
#define SAFEAMP_DETAIL_ALWAYS_INLINE [[gnu::always_inline]] inline
#define SAFEAMP_DETAIL_NOINLINE [[gnu::noinline]]
#else
#define SAFEAMP_DETAIL_ALWAYS_INLINE inline
#define SAFEAMP_DETAIL_NOINLINE
#endif

namespace safeamp::detail {

/// Result of rounding one float: the rounded float's bits and whether its magnitude overflowed.
struct rounded_bits {
  std::uint32_t bits;
  std::uint32_t overflowed;  // 0 or 1 (not bool: a bool member keeps the struct in memory and stops g++ vectorising)
};

// Works on the float's bits a = |x| = [ex:8 | mantissa:23], sig = mantissa | implicit bit << 23.
// The target quantum is 2^(max(e, emin) - M), i.e. sig is cut at
//   sh = 23 - M + below,   below = max(emin_src - max(ex, 1), 0)   (emin_src: target emin as a float field)
// so q = sig >> sh quanta are kept and rem = sig mod 2^sh decides the rounding increment `up`.
//  * sh <= 23: the cut lies inside the float's significand, so ((a >> sh) + up) << sh is the rounded float
//    (a carry out of the mantissa moves into the exponent field: exactly the next binade).
//  * sh >= 24 (only in the target's subnormal range): x < Q = 2^(emin - M), the result is 0 or Q.
// Shifts are clamped to 31 (sig < 2^24, so a cut at >= 24 bits leaves q = 0 and rem = sig).
// Stochastic: up iff random + floor(2^32 rem / 2^sh) carries out of 32 bits, i.e. frac32 > ~random.
// Overflow is "rounded float > max finite"; +-inf inputs take that path too (they differ only for the
// directed modes that do not round away from zero, handled explicitly).

/// 0 or 1; all-zeros or all-ones; mask ? x : y. Plain arithmetic, so conditions do not become branches.
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr std::uint32_t b01(bool c) noexcept { return static_cast<std::uint32_t>(c); }
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr std::uint32_t mask(bool c) noexcept { return 0u - b01(c); }
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr std::uint32_t select(bool c, std::uint32_t x, std::uint32_t y) noexcept {
  return (x & mask(c)) | (y & ~mask(c));
}

/// Everything round_float_bits needs from the descriptor, computed once per span (not per element).
struct round_constants {
  std::uint32_t mantissa_bits;      // M
  std::uint32_t emin_src;           // target emin as a float exponent field
  std::uint32_t max_bits;           // float bits of max finite
  std::uint32_t min_normal_bits;    // float bits of min normal
  std::uint32_t payload_mask;       // the float mantissa bits the target keeps
  std::uint32_t nan_fill;           // NaN as decode() gives it: quiet, plus all ones for finite_nan
  std::uint32_t inf_or_nan;         // what overflow to infinity gives: inf, or NaN without infinity
  std::uint32_t quantum_bits;       // float bits of the smallest subnormal 2^(emin - M)
  std::uint32_t unsigned_zero_nan;  // all ones for fnuz (zero and NaN results are positive), else 0
};

[[nodiscard]] SAFEAMP_DETAIL_ALWAYS_INLINE SAFEAMP_HOST_DEVICE constexpr round_constants make_round_constants(
    format_spec f) noexcept {
  // Formats with one NaN code (finite_nan: all ones, decoded with every payload bit set; fnuz: +qNaN) or none
  // (finite: a NaN input stays a float qNaN with its sign, see round_to) keep no input payload.
  // Exponent-only formats (M = 0) do not come here: round_span takes the scalar routine for them.
  const int M = f.mantissa_bits;
  const std::uint32_t all_payload = ((std::uint32_t{1} << M) - 1u) << (23 - M);
  const std::uint32_t payload_mask = has_infinity(f) ? all_payload : 0u;
  const std::uint32_t nan_fill = f.specials == special_values::finite_nan ? 0x7FC00000u | all_payload : 0x7FC00000u;
  const std::uint32_t max_bits = safeamp::bit_cast<std::uint32_t>(max_finite(f));
  return round_constants{static_cast<std::uint32_t>(M),
                         static_cast<std::uint32_t>(min_exponent(f) + 127),
                         max_bits,
                         safeamp::bit_cast<std::uint32_t>(min_normal(f)),
                         payload_mask,
                         nan_fill,
                         has_infinity(f) ? 0x7F800000u
                         : has_nan(f)    ? nan_fill
                                         : max_bits,
                         safeamp::bit_cast<std::uint32_t>(min_subnormal(f)),
                         f.specials == special_values::fnuz ? 0xFFFFFFFFu : 0u};
}

template <rounding R>
[[nodiscard]] SAFEAMP_DETAIL_ALWAYS_INLINE SAFEAMP_HOST_DEVICE constexpr rounded_bits round_float_bits(
    round_constants k_, std::uint32_t a, bool negative, overflow ov, bool ftz, std::uint32_t random_bits) noexcept {
  const std::uint32_t M = k_.mantissa_bits;
  const std::uint32_t emin_src = k_.emin_src;
  const std::uint32_t max_bits = k_.max_bits;
  const std::uint32_t min_normal_bits = k_.min_normal_bits;
  const std::uint32_t payload_mask = k_.payload_mask;
  const std::uint32_t nan_fill = k_.nan_fill;
  const std::uint32_t inf_or_nan = k_.inf_or_nan;

  // Bitwise forms of the conditions (b01: 0 or 1, select: mask ? x : y) keep the loop free of branches,
  // which g++ needs before it vectorises.
  const std::uint32_t neg01 = negative ? 1u : 0u;
  const std::uint32_t ex = a >> 23;
  const std::uint32_t ex1 = ex + b01(ex == 0u);
  const std::uint32_t sig = (a & 0x7FFFFFu) | (b01(ex != 0u) << 23);
  // Formats with float's exponent range (emin_src == 1: bf16, tf32, fp32) never cut below 23 - M bits; for a
  // named format this folds at compile time and the shifts become immediates.
  const bool float_range = emin_src <= 1u;
  const std::uint32_t below = float_range ? 0u : select(emin_src > ex1, emin_src - ex1, 0u);
  const std::uint32_t sh = 23u - M + below;
  const std::uint32_t sh_c = float_range ? 23u - M : select(sh < 31u, sh, 31u);
  const std::uint32_t q = sig >> sh_c;
  const std::uint32_t rem = sig & ((std::uint32_t{1} << sh_c) - 1u);
  const std::uint32_t inexact01 = b01(rem != 0u);

  std::uint32_t up = 0;
  if constexpr (R == rounding::nearest_even) {
    const std::uint32_t half = (std::uint32_t{1} << sh_c) >> 1;
    up = b01(rem > half) | (b01(rem == half) & inexact01 & q);  // half == 0: exact, no tie
  } else if constexpr (R == rounding::toward_pos_inf) {
    up = inexact01 & (neg01 ^ 1u);
  } else if constexpr (R == rounding::toward_neg_inf) {
    up = inexact01 & neg01;
  } else if constexpr (R == rounding::stochastic) {
    const std::uint32_t low = select(sh < 31u, 31u - sh, 0u);
    const std::uint32_t high_raw = select(sh > 32u, sh - 32u, 0u);
    const std::uint32_t high = select(high_raw < 31u, high_raw, 31u);
    const std::uint32_t frac32 = select(sh <= 31u, (rem << low) << 1, sig >> high);
    up = b01(frac32 > ~random_bits);
  }

  // sh <= 23: the cut lies inside the float's significand, and rounding the bits as one integer is exact
  // (a carry runs into the exponent field). sh >= 24: x < one quantum Q = 2^(emin - M); result 0 or Q.
  std::uint32_t r = ((a >> sh_c) + up) << sh_c;
  if (!float_range) r = select(sh <= 23u, r, mask(up != 0u) & k_.quantum_bits);
  // +-inf takes the overflow path too; it differs only for directed modes that do not round away.
  const bool overflowed = r > max_bits;
  r &= ~(mask(ftz) & mask(r < min_normal_bits));
  constexpr bool nearest_like = R == rounding::nearest_even || R == rounding::stochastic;
  const bool away =
      nearest_like || (R == rounding::toward_pos_inf && !negative) || (R == rounding::toward_neg_inf && negative);
  const bool saturate = ov == overflow::saturate;
  const std::uint32_t overflow_bits = select(saturate || !away, max_bits, inf_or_nan);
  const std::uint32_t inf_input_bits = select(saturate, max_bits, inf_or_nan);
  const std::uint32_t nan_bits = nan_fill | (a & payload_mask);
  r = select(overflowed, overflow_bits, r);
  if constexpr (!nearest_like) r = select(a == 0x7F800000u, inf_input_bits, r);
  r = select(a > 0x7F800000u, nan_bits, r);
  return rounded_bits{r, b01(overflowed) & b01(a < 0x7F800000u)};
}

/// Counters of one chunk (32-bit so that the loop vectorises; chunks are short enough not to wrap).
struct local_counts {
  std::uint32_t overflow = 0, underflow = 0, subnormal = 0, nan = 0, infinity = 0;

  /// The vector kernels' sums of one chunk: they count results below min normal, zero results and zero inputs,
  /// and form underflow (zero results of nonzero inputs) and subnormal (nonzero results below min normal) here.
  void add_vector_counts(std::uint32_t n_overflow, std::uint32_t n_nan, std::uint32_t n_infinity,
                         std::uint32_t below_normal, std::uint32_t zero_results, std::uint32_t zero_inputs) noexcept {
    overflow += n_overflow;
    underflow += zero_results - zero_inputs;
    subnormal += below_normal - zero_results;
    nan += n_nan;
    infinity += n_infinity;
  }
};

/// Chooses, block by block, whether a vector kernel tests each vector for the all-normal shortcut (round_avx2.hpp,
/// round_avx512.hpp, block_avx512.hpp). A block in which more than 1 vector in 8 needed the exact path (wide-range
/// data, or E4M3's narrow normal range on Gaussian data: 1.2% of N(0,1) values lie below its min normal, so 18% of
/// 16-lane vectors hold one) is followed by seven blocks without the test and its unpredictable branch, then the
/// test runs for one block again. Each further test that confirms the choice doubles the stretch (plus one: 15, 31,
/// then 63 blocks at most); one that does not sets it back to seven. With a test block every eighth block, the AVX2
/// fp16 kernel on wide-range data in cache (64 Ki, Zen 3) ran 15% longer. Counters: any type with a special_vectors
/// count. The same rule steers the AVX-512 nearest-even kernels' second choice (the merged test of
/// round16_nearest) from a count of its own: start_count/finish_count take any running count of the vectors that
/// took the branch in question.
///
/// `probe`: the next block is a chunk's first, or the first after a stretch without the test. A kernel may count
/// such a block's vectors that would take the exact path in a branch-free pass first, and where more than half of
/// them do (wide-range data), run the block without the test and add that count in place of the test's (the AVX2
/// kernels do): every later choice is the same, and the block does not pay the tested kernel's exact path vector by
/// vector (AVX2 fp16 on wide-range data in cache, Zen 4: docs/performance.md). Where fewer do, the tested kernel is
/// the cheaper: E4M3 on Gaussian data (about 1 eight-lane vector in 10 takes the exact path, and a block above 1 in 8
/// now and then starts a stretch) ran 5-8% longer with every probe block run without the test (64 Ki, same host).
/// skip_blocks ends a stretch's blocks at once, for a kernel that runs them in one call.
///
/// `eighths`: the share of a tested block's vectors, in eighths, above which the stretch starts: 1 (the rule above)
/// for a kernel whose tested blocks branch vector by vector, deferred_eighths for one that defers the exact path of a
/// block's marked vectors until after the fixed cut of all of them (the AVX2 and AVX-512 kernels' blocks with
/// ordinary stores into a separate output: round_deferred). There a tested block costs the cut for every vector plus
/// the exact path for the marked ones, without mispredicted branches, and beats the path without the test up to about
/// 40% of its vectors marked (AVX2 path on Zen 4: the cut 1.67, the exact path 3.1 and the path without the test 3.0
/// units of memcpy's time per vector, in cache).
struct path_choice {
  bool always = false;
  bool probe = true;
  unsigned left = 0;
  unsigned stretch = 7;  // blocks without the test after the next test that calls for them
  unsigned eighths = 1;
  std::size_t before = 0;
  static constexpr unsigned max_stretch = 63;
  static constexpr unsigned deferred_eighths = 3;

  template <class Counters>
  void start(const Counters& acc) noexcept {
    start_count(acc.special_vectors);
  }
  template <class Counters>
  void finish(const Counters& acc, std::size_t vectors) noexcept {
    finish_count(acc.special_vectors, vectors);
  }
  void start_count(std::size_t count) noexcept { before = count; }
  void finish_count(std::size_t count, std::size_t vectors) noexcept {
    if (always) {
      skip_blocks(1);
      return;
    }
    probe = false;
    if ((count - before) * 8 > eighths * vectors) {
      always = true;
      left = stretch;
      stretch = stretch < max_stretch ? 2 * stretch + 1 : max_stretch;
    } else {
      stretch = 7;
    }
  }
  /// `blocks` (at most `left`) of the stretch without the test done.
  void skip_blocks(unsigned blocks) noexcept {
    left -= blocks;
    if (left == 0) {
      always = false;
      probe = true;
    }
  }
};

/// Stochastic rounding's marks (round_avx2.hpp, round_avx512.hpp): where a vector needs the exact path now and then,
/// at places no branch predictor learns (E4M3 on Gaussian data), the test of each vector on the input just loaded
/// mispredicts, and where that input comes from memory it resolves late and each miss throws away the generator's
/// work in flight. Marked, a generator call's vectors are tested during the call before, and each takes its path from
/// those marks, a condition ready before the branch issues. Where the branch is predictable (hardly any such vector,
/// or nearly all: wide-range data) the marks' second loads only cost time (5-8% at 64 Mi on Zen 4), so the steps go
/// in stretches of mark_stretch_elements, and a stretch is marked where the one before had at least 1 vector in 64
/// and at most 7 in 8 that needed the exact path (docs/performance.md, issue 18).
inline constexpr std::size_t mark_stretch_elements = 4096;

/// Steps [s, steps) of StepElements elements (one generator call each) from element i, stretch by stretch:
/// stretch(marked, s, end, i) runs steps [s, end) from element i, counting the vectors that take the exact path in
/// acc.special_vectors, and returns the element after them; returns the element after the last step.
template <std::size_t StepElements, std::size_t VectorElements, class Counters, class Stretch>
[[gnu::always_inline]] inline std::size_t by_mark_stretches(std::size_t s, std::size_t steps, std::size_t i,
                                                            const Counters& acc, const Stretch& stretch) noexcept {
  constexpr std::size_t stretch_steps = mark_stretch_elements / StepElements;
  constexpr std::size_t stretch_vectors = mark_stretch_elements / VectorElements;
  bool marked = false;
  while (s < steps) {
    const std::size_t end = steps - s < stretch_steps ? steps : s + stretch_steps;
    const std::size_t before = acc.special_vectors;
    i = stretch(marked, s, end, i);
    s = end;
    const std::size_t special = acc.special_vectors - before;
    marked = 64 * special >= stretch_vectors && 8 * special <= 7 * stretch_vectors;
  }
  return i;
}

/// The layout of the vector kernels' stochastic chunk (round_avx2.hpp, round_avx512.hpp): `start` elements with
/// buffered words first, up to the first element whose logical index is a multiple of 4 (word 0 of a Philox block)
/// and, to stream, that lies at the vector-aligned output `head` elements in; then `steps` steps of `step` elements
/// whose words the generator makes in registers; then the rest with buffered words. in_registers is false where
/// the low word of the block counter wraps inside the chunk (once per 2^34 elements; the vector generators do not
/// carry into the high word): there every step takes buffered words.
struct stochastic_layout {
  std::size_t start = 0, steps = 0;
  std::uint64_t first_block = 0;
  bool stream = false, in_registers = true;

  constexpr stochastic_layout(std::uint64_t offset, std::size_t n, bool streamed, std::size_t head,
                              std::size_t step) noexcept
      : start(static_cast<std::size_t>((4u - offset % 4u) % 4u)), stream(streamed) {
    if (stream && (offset + head) % 4u == 0) {
      start = head;
    } else {
      stream = false;  // no element is both 4-aligned in index and vector-aligned in memory
    }
    start = start < n ? start : n;
    first_block = (offset + start) / 4;
    steps = (n - start) / step;
    in_registers = (first_block & 0xFFFFFFFFu) + step / 4 * (steps + 1) <= (std::uint64_t{1} << 32);
  }
};

/// f.template operator()<Ftz, Sat>() with ftz and ov == overflow::saturate as compile-time values: the vector
/// kernels are instantiated for each of the four.
template <class Fn>
SAFEAMP_DETAIL_ALWAYS_INLINE void with_flush_and_saturate(bool ftz, overflow ov, const Fn& f) noexcept {
  const bool sat = ov == overflow::saturate;
  if (ftz) {
    sat ? f.template operator()<true, true>() : f.template operator()<true, false>();
  } else {
    sat ? f.template operator()<false, true>() : f.template operator()<false, false>();
  }
}

// The loop of round_floats; k by value so that its fields stay in registers (or fold as constants).
template <rounding R>
SAFEAMP_DETAIL_ALWAYS_INLINE SAFEAMP_HOST_DEVICE constexpr void round_floats_loop(const round_constants k,
                                                                                  const float* in, float* out,
                                                                                  std::size_t n, overflow ov, bool ftz,
                                                                                  const std::uint32_t* random_words,
                                                                                  local_counts& c) noexcept {
  std::uint32_t n_overflow = 0, n_underflow = 0, n_subnormal = 0, n_nan = 0, n_inf = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t u = safeamp::bit_cast<std::uint32_t>(in[i]);
    const std::uint32_t a = u & 0x7FFFFFFFu;
    std::uint32_t rnd = 0;
    if constexpr (R == rounding::stochastic) rnd = random_words[i];
    const rounded_bits r = round_float_bits<R>(k, a, (u >> 31) != 0u, ov, ftz, rnd);
    // fnuz: no -0 and one unsigned NaN, so zero and NaN results drop the sign (0 for other formats: folds).
    const std::uint32_t drop_sign = k.unsigned_zero_nan & (mask(r.bits == 0u) | mask(r.bits > 0x7F800000u));
    out[i] = safeamp::bit_cast<float>(((u & 0x80000000u) & ~drop_sign) | r.bits);
    n_overflow += r.overflowed;
    n_underflow += b01(a - 1u < 0x7F800000u - 1u) & b01(r.bits == 0u);  // finite nonzero input, zero result
    n_subnormal += b01(r.bits - 1u < k.min_normal_bits - 1u);           // 0 < result < min normal
    n_nan += b01(r.bits > 0x7F800000u);
    n_inf += b01(r.bits == 0x7F800000u);
  }
  c.overflow += n_overflow;
  c.underflow += n_underflow;
  c.subnormal += n_subnormal;
  c.nan += n_nan;
  c.infinity += n_inf;
}

/// Rounds in[0..n) into out[0..n) (out may equal in) and adds to the counters. Branch-free per element.
/// Named = true takes the format from the template argument F (its constants fold into the loop),
/// otherwise from the run-time descriptor f.
template <rounding R, bool Named = false, format_spec F = format_spec{}>
SAFEAMP_DETAIL_NOINLINE SAFEAMP_HOST_DEVICE constexpr void round_floats(format_spec f, const float* in, float* out,
                                                                        std::size_t n, overflow ov, bool ftz,
                                                                        const std::uint32_t* random_words,
                                                                        local_counts& c) noexcept {
  if constexpr (Named) {
    constexpr round_constants k = make_round_constants(F);
    round_floats_loop<R>(k, in, out, n, ov, ftz, random_words, c);
  } else {
    round_floats_loop<R>(make_round_constants(f), in, out, n, ov, ftz, random_words, c);
  }
}

/// Fills words[4 b + j] = word j of philox4x32_10(counter = first_block + b, stream, key = seed) for
/// b < blocks: the stochastic bits of logical indices 4 first_block .. 4 (first_block + blocks) - 1.
/// The rounds of philox4x32_10 (philox.hpp) on 64-bit locals that hold 32-bit words, so that the loop
/// vectorises over b with whole-lane 64-bit products and the state stays in registers; the 64-bit
/// counter's halves carry explicitly.
/// The portable path's generator (the vector paths have their own: philox_avx2.hpp, philox_avx512.hpp).
SAFEAMP_DETAIL_ALWAYS_INLINE SAFEAMP_HOST_DEVICE constexpr void philox_fill_loop(std::uint32_t* words,
                                                                                 std::uint64_t first_block,
                                                                                 std::size_t blocks, std::uint64_t seed,
                                                                                 std::uint32_t stream) noexcept {
  constexpr std::uint64_t low32 = 0xFFFFFFFFu;
  const std::uint32_t lo0 = static_cast<std::uint32_t>(first_block);
  const std::uint32_t hi0 = static_cast<std::uint32_t>(first_block >> 32);
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::uint32_t c0 = lo0 + static_cast<std::uint32_t>(b);
    std::uint64_t x0 = c0;
    std::uint64_t x1 = hi0 + (c0 < lo0 ? 1u : 0u);
    std::uint64_t x2 = stream;
    std::uint64_t x3 = 0;
    std::uint64_t k0 = seed & low32;
    std::uint64_t k1 = seed >> 32;
    for (int round = 0; round < 10; ++round) {
      const std::uint64_t p0 = std::uint64_t{philox_m0} * x0;
      const std::uint64_t p1 = std::uint64_t{philox_m1} * x2;
      x0 = (p1 >> 32) ^ x1 ^ k0;
      x1 = p1 & low32;
      x2 = (p0 >> 32) ^ x3 ^ k1;
      x3 = p0 & low32;
      k0 = (k0 + philox_w0) & low32;
      k1 = (k1 + philox_w1) & low32;
    }
    words[4 * b + 0] = static_cast<std::uint32_t>(x0);
    words[4 * b + 1] = static_cast<std::uint32_t>(x1);
    words[4 * b + 2] = static_cast<std::uint32_t>(x2);
    words[4 * b + 3] = static_cast<std::uint32_t>(x3);
  }
}

SAFEAMP_DETAIL_NOINLINE SAFEAMP_HOST_DEVICE constexpr void philox_fill(std::uint32_t* words, std::uint64_t first_block,
                                                                       std::size_t blocks, std::uint64_t seed,
                                                                       std::uint32_t stream) noexcept {
  philox_fill_loop(words, first_block, blocks, seed, stream);
}

}  // namespace safeamp::detail
