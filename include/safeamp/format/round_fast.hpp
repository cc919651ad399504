// Block fast path of round_span for named formats: blocks whose every input lies in the target's normal
// range [min normal, max finite] round with a fixed cut (3..4 integer operations per element, any mode) and
// touch no counter; other blocks take a shift-free exact nearest-even kernel or the generic one (round_kernel.hpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "safeamp/config.hpp"
#include "safeamp/format/format_spec.hpp"
#include "safeamp/format/round_kernel.hpp"
#include "safeamp/format/round_options.hpp"

namespace safeamp::detail {

// Why a fixed cut is exact there: for min normal <= |x| <= max finite the target quantum is 2^(e - M) with e
// the float's own exponent, so the result is the float's bits cut below bit 23 - M, rounded as one integer
// (a carry runs into the exponent field: exactly the next binade, still <= max finite because max finite is
// representable and rounding is monotone). No such input overflows, underflows, becomes subnormal or is
// NaN/inf, so the counters do not change. The sign bit is never reached by the carry (|x| < 2^128).
inline constexpr std::size_t fast_block = 512;

/// True when every element of in[0..fast_block) has min_normal_bits <= |bits| <= max_bits.
[[nodiscard]] SAFEAMP_DETAIL_ALWAYS_INLINE bool block_is_plain(const round_constants& k, const float* in) noexcept {
  const std::uint32_t lo = k.min_normal_bits;
  const std::uint32_t span = k.max_bits - k.min_normal_bits;
  std::uint32_t outside = 0;
  for (std::size_t j = 0; j < fast_block; ++j) {
    const std::uint32_t a = safeamp::bit_cast<std::uint32_t>(in[j]) & 0x7FFFFFFFu;
    outside |= b01(a - lo > span);
  }
  return outside == 0u;
}

/// Rounds one block with the cut at bit 23 - M (random_words for stochastic) and returns whether the block
/// was plain (see block_is_plain); when it was not, out holds garbage to be overwritten from in.
template <rounding R>
SAFEAMP_DETAIL_ALWAYS_INLINE bool round_plain_block(const round_constants& k, const float* in, float* out,
                                                    const std::uint32_t* random_words) noexcept {
  const std::uint32_t lo = k.min_normal_bits;
  const std::uint32_t span = k.max_bits - k.min_normal_bits;
  std::uint32_t outside = 0;
  const std::uint32_t sh = 23u - k.mantissa_bits;
  const std::uint32_t low = (std::uint32_t{1} << sh) - 1u;  // bits below the cut
  const std::uint32_t keep = ~low;                         // keeps the sign too
  for (std::size_t j = 0; j < fast_block; ++j) {
    const std::uint32_t u = safeamp::bit_cast<std::uint32_t>(in[j]);
    outside |= b01((u & 0x7FFFFFFFu) - lo > span);
    const std::uint32_t neg = u >> 31;
    std::uint32_t bias = 0;
    if constexpr (R == rounding::nearest_even) {
      bias = (low >> 1) + ((u >> sh) & 1u);  // half - 1 + the kept LSB: ties go to even
    } else if constexpr (R == rounding::toward_pos_inf) {
      bias = low & (neg - 1u);  // magnitude up for positive values
    } else if constexpr (R == rounding::toward_neg_inf) {
      bias = low & (0u - neg);  // magnitude up for negative values
    } else if constexpr (R == rounding::stochastic) {
      // up iff rem + (random >> (32 - sh)) carries past the cut: the same event as frac32 > ~random.
      bias = random_words[j] >> (32u - sh);
    }
    out[j] = safeamp::bit_cast<float>((u + bias) & keep);
  }
  return outside == 0u;
}

/// Nearest even for any input of a named format F (the blocks that are not plain), counters included; the
/// same results as round_floats<nearest_even> with no per-lane variable shift, so it vectorises with SSE2.
/// Normal range: the cut at bit 23 - M as in round_plain_block. Below min normal (only formats with a smaller
/// exponent range than float) the result is k Q, Q = 2^(emin - M): t = |x| / Q < 2^M is exact (a power-of-two
/// scaling), truncation to an integer and back, the remainder t - trunc(t) and k Q are exact too, so the FPU
/// rounding mode never matters; float subnormal inputs (< Q / 2: result 0) give 0 with or without DAZ/FTZ.
template <format_spec F>
SAFEAMP_DETAIL_ALWAYS_INLINE void round_nearest_any(const round_constants& k, const float* in, float* out,
                                                    std::size_t n, overflow ov, bool ftz, local_counts& c) noexcept {
  constexpr bool float_range = min_exponent(F) + 127 <= 1;  // bf16, tf32: the cut alone is exact everywhere
  const std::uint32_t sh = 23u - k.mantissa_bits;
  const std::uint32_t low = (std::uint32_t{1} << sh) - 1u;
  const float inv_quantum = 1.0f / safeamp::bit_cast<float>(k.quantum_bits);  // 2^(M - emin), exact
  const float quantum = safeamp::bit_cast<float>(k.quantum_bits);
  const std::uint32_t overflow_bits = ov == overflow::saturate ? k.max_bits : k.inf_or_nan;
  const std::uint32_t ftz_mask = mask(ftz);
  std::uint32_t n_overflow = 0, n_underflow = 0, n_subnormal = 0, n_nan = 0, n_inf = 0;
  for (std::size_t j = 0; j < n; ++j) {
    const std::uint32_t u = safeamp::bit_cast<std::uint32_t>(in[j]);
    const std::uint32_t a = u & 0x7FFFFFFFu;
    std::uint32_t r = (a + (low >> 1) + ((a >> sh) & 1u)) & ~low;
    const bool overflowed = r > k.max_bits;  // +-inf inputs too (nearest even sends them the same way)
    if constexpr (!float_range) {
      const std::uint32_t tiny = mask(a < k.min_normal_bits);
      const float t = safeamp::bit_cast<float>(a & tiny) * inv_quantum;  // other lanes: 0, never out of int range
      const std::int32_t whole = static_cast<std::int32_t>(t);  // truncation: t >= 0
      const float frac = t - static_cast<float>(whole);
      // Ties to even: b01(tie) & whole keeps only whole's lowest bit. (A bool expression here stops g++'s vectoriser.)
      const std::uint32_t up = b01(frac > 0.5f) | (b01(frac == 0.5f) & static_cast<std::uint32_t>(whole));
      const float rounded = static_cast<float>(whole + static_cast<std::int32_t>(up)) * quantum;
      const std::uint32_t tiny_bits = safeamp::bit_cast<std::uint32_t>(rounded);
      r = (tiny_bits & tiny) | (r & ~tiny);
    }
    r &= ~(ftz_mask & mask(r < k.min_normal_bits));
    r = select(overflowed, overflow_bits, r);
    r = select(a > 0x7F800000u, k.nan_fill | (a & k.payload_mask), r);
    out[j] = safeamp::bit_cast<float>((u & 0x80000000u) | r);
    n_overflow += b01(overflowed) & b01(a < 0x7F800000u);
    n_underflow += b01(a - 1u < 0x7F800000u - 1u) & b01(r == 0u);
    n_subnormal += b01(r - 1u < k.min_normal_bits - 1u);
    n_nan += b01(r > 0x7F800000u);
    n_inf += b01(r == 0x7F800000u);
  }
  c.overflow += n_overflow;
  c.underflow += n_underflow;
  c.subnormal += n_subnormal;
  c.nan += n_nan;
  c.infinity += n_inf;
}

/// round_floats for a named format F with the block fast path: plain blocks take round_plain_block; the
/// others (and the tail) take round_nearest_any for nearest even, else the exact generic kernel; both count.
template <rounding R, format_spec F>
SAFEAMP_DETAIL_NOINLINE void round_floats_fast(const float* in, float* out, std::size_t n, overflow ov, bool ftz,
                                               const std::uint32_t* random_words, local_counts& c) noexcept {
  constexpr round_constants k = make_round_constants(F);
  std::size_t i = 0;
  for (; i + fast_block <= n; i += fast_block) {
    const std::uint32_t* rw = R == rounding::stochastic ? random_words + i : nullptr;
    // Disjoint buffers: round and check in one pass, redo from in when not plain. In place: check first.
    const bool plain = in != out ? round_plain_block<R>(k, in + i, out + i, rw)
                                 : block_is_plain(k, in + i) && round_plain_block<R>(k, in + i, out + i, rw);
    if (plain) continue;
    if constexpr (R == rounding::nearest_even) {
      round_nearest_any<F>(k, in + i, out + i, fast_block, ov, ftz, c);
    } else {
      round_floats<R, true, F>(F, in + i, out + i, fast_block, ov, ftz, rw, c);
    }
  }
  if constexpr (R == rounding::nearest_even) {
    if (i < n) round_nearest_any<F>(k, in + i, out + i, n - i, ov, ftz, c);
    return;
  }
  if (i < n) {
    round_floats<R, true, F>(F, in + i, out + i, n - i, ov, ftz, R == rounding::stochastic ? random_words + i : nullptr,
                             c);
  }
}

}  // namespace safeamp::detail
