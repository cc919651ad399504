// AVX-512 kernels behind round_span for the named formats narrower than float (fp16, bf16, tf32, E4M3, E5M2):
// the chunk loops of every rounding mode over the vector steps of round_avx512_lanes.hpp, with the
// Philox words made in registers (philox_avx512.hpp). Compiled on every x86 build with GCC or Clang for AVX-512
// (no -march needed) and run only when active_cpu_path() is avx512 (cpu_path.hpp); not under nvcc or with
// SAFEAMP_NO_SIMD. Results, counters included, are those of round_floats (round_kernel.hpp) bit for bit: the
// exhaustive and random-sweep tests run every path the test machine supports. Large spans into a separate buffer
// are written with streaming stores (like memcpy, they do not read the destination into the cache first).
#pragma once

#include "safeamp/format/cpu_path.hpp"

#if defined(SAFEAMP_X86_KERNELS)

#include <immintrin.h>

#include <bit>
#include <cstddef>
#include <cstdint>

#include "safeamp/format/format_spec.hpp"
#include "safeamp/format/philox.hpp"
#include "safeamp/format/philox_avx512.hpp"
#include "safeamp/format/round_avx512_lanes.hpp"
#include "safeamp/format/round_kernel.hpp"
#include "safeamp/format/round_options.hpp"

SAFEAMP_DETAIL_AVX512_BEGIN

namespace safeamp::detail::avx512 {

/// A deterministic mode: vectors [i, i + 16 count) of a chunk with full stores (streaming or not). Streaming (address
/// order, AMD's) prefetches stream_prefetch_floats ahead (cpu_path.hpp, with its measurements).
template <rounding R, format_spec F, bool Ftz, bool Sat, bool Always, bool Stream, bool Merged = false>
SAFEAMP_DETAIL_ALWAYS_INLINE void round_vectors(const vector_constants<F>& v, const float* in, float* out,
                                                std::size_t i, std::size_t count, counters16& acc) noexcept {
  for (std::size_t end = i + 16 * count; i < end; i += 16) {
    if constexpr (Stream) prefetch_ahead(in + i, stream_prefetch_floats);
    const __m512i r = load_round<R, F, Ftz, Sat, Always, Merged>(v, in, nullptr, i, all_lanes, acc);
    if constexpr (Stream) {
      _mm512_stream_si512(reinterpret_cast<__m512i*>(out + i), r);
    } else {
      _mm512_storeu_si512(out + i, r);
    }
  }
}

/// The fixed cut of a deterministic mode, exact for a vector wholly in the target's normal range (round16's).
template <rounding R, format_spec F>
SAFEAMP_DETAIL_ALWAYS_INLINE __m512i cut16_deterministic(const vector_constants<F>& v, __m512i u) noexcept {
  if constexpr (R == rounding::nearest_even) {
    return cut16_nearest(v, u);
  } else {
    return cut16_directed<R, F>(v, u);
  }
}

/// The most vectors round_deferred takes in one call: a cached block of round_deterministic_chunk.
inline constexpr std::size_t deferred_vectors = 64;

/// A deterministic mode, vectors [i, i + 16 count) (count <= deferred_vectors) with the test, into an output that is
/// not the input, with ordinary stores, the exact path deferred (as the AVX2 kernels' round_deferred, which says
/// why): every vector stored with the fixed cut and marked in a mask, without a branch, where a lane lies outside the
/// target's normal range; then the marked vectors rounded again from the input by round16's exact path. E4M3 on 64 Ki
/// Gaussian floats (18% of the 16-lane vectors marked) in cache: docs/performance.md.
template <rounding R, format_spec F, bool Ftz, bool Sat, bool Merged>
SAFEAMP_DETAIL_ALWAYS_INLINE void round_deferred(const vector_constants<F>& v, const float* in, float* out,
                                                 std::size_t i, std::size_t count, counters16& acc) noexcept {
  std::uint64_t marked = 0;
  for (std::size_t j = 0; j < count; ++j) {
    const __m512i u = _mm512_loadu_si512(in + i + 16 * j);
    _mm512_storeu_si512(out + i + 16 * j, cut16_deterministic<R, F>(v, u));
    marked |= std::uint64_t{outside_normal_range(v, _mm512_and_si512(u, v.abs_mask)) != 0} << j;
  }
  acc.special_vectors += static_cast<std::size_t>(std::popcount(marked));
  for (; marked != 0; marked &= marked - 1) {
    const std::size_t at = i + 16 * static_cast<std::size_t>(std::countr_zero(marked));
    _mm512_storeu_si512(out + at, load_round<R, F, Ftz, Sat, true, Merged>(v, in, nullptr, at, all_lanes, acc));
  }
}

/// A deterministic mode, vectors [i, i + 16 count) (count <= deferred_vectors) with the test and ordinary stores:
/// deferred (round_deferred) into an output that is not the input, else vector by vector.
template <rounding R, format_spec F, bool Ftz, bool Sat, bool Merged>
SAFEAMP_DETAIL_ALWAYS_INLINE void round_tested(const vector_constants<F>& v, const float* in, float* out, std::size_t i,
                                               std::size_t count, counters16& acc) noexcept {
  if (in != out) {
    round_deferred<R, F, Ftz, Sat, Merged>(v, in, out, i, count, acc);
  } else {
    round_vectors<R, F, Ftz, Sat, false, false, Merged>(v, in, out, i, count, acc);
  }
}

/// Four 4 KiB pages [i, i + 4 page_floats) at a time, one vector from each in turn: more DRAM pages open at once, as
/// glibc's memcpy does for large copies (measured 1.1-1.2x a plain streaming loop on the benchmark machine), each
/// vector's input prefetched a group ahead (four_pages_prefetch_floats). The page loop is unrolled by request: without
/// it, a -O2 build rounded 64 Mi of wide-range data at 0.85-0.90x memcpy on an Intel Xeon against 0.95-0.98x at -O3,
/// and 0.91-0.96x with it (docs/performance.md).
template <rounding R, format_spec F, bool Ftz, bool Sat, bool Always, bool Merged>
SAFEAMP_DETAIL_ALWAYS_INLINE void round_four_pages(const vector_constants<F>& v, const float* in, float* out,
                                                   std::size_t i, counters16& acc) noexcept {
  for (std::size_t j = i; j < i + page_floats; j += 16) {
#pragma GCC unroll 4
    for (std::size_t p = 0; p < 4 * page_floats; p += page_floats) {
      prefetch_ahead(in + j + p, four_pages_prefetch_floats);
      _mm512_stream_si512(reinterpret_cast<__m512i*>(out + j + p),
                          load_round<R, F, Ftz, Sat, Always, Merged>(v, in, nullptr, j + p, all_lanes, acc));
    }
  }
}

/// How a block of a deterministic chunk is stored: ordinary stores in address order; streaming stores in address
/// order (AMD); streaming stores four pages at a time (elsewhere).
enum class store_order { cached, streamed, four_pages };

/// One block of a deterministic chunk, in the variant the block's choices pick: Always from choice (the all-normal
/// test off), Merged from split (round16_nearest's merged test, on unless split.always; nearest even into fp16/fp8
/// only). Order four_pages: 4 page_floats elements; else `block` vectors. The block counts into counters of its own,
/// added to acc at its end: with acc, which lives through the whole chunk, g++ 12 at -O3 kept the counters on the stack
/// in the vector loop (a load, masked subtract and store per counter and vector), and fp16 nearest even on
/// wide-range data in cache ran at 0.54x the F16C round trip on an Intel Xeon, against 0.72x with the block's own
/// (docs/performance.md).
template <rounding R, format_spec F, bool Ftz, bool Sat, store_order Order, bool Always, bool Merged>
SAFEAMP_DETAIL_ALWAYS_INLINE void round_block_as(const vector_constants<F>& v, const float* in, float* out,
                                                 std::size_t i, std::size_t block, counters16& acc) noexcept {
  counters16 own;
  if constexpr (Order == store_order::four_pages) {
    round_four_pages<R, F, Ftz, Sat, Always, Merged>(v, in, out, i, own);
  } else if constexpr (Order == store_order::cached && !Always) {
    round_tested<R, F, Ftz, Sat, Merged>(v, in, out, i, block, own);
  } else {
    round_vectors<R, F, Ftz, Sat, Always, Order == store_order::streamed, Merged>(v, in, out, i, block, own);
  }
  acc.add(own);
}
template <rounding R, format_spec F, bool Ftz, bool Sat, store_order Order>
SAFEAMP_DETAIL_ALWAYS_INLINE void round_block(const path_choice& choice, const path_choice& split,
                                              const vector_constants<F>& v, const float* in, float* out, std::size_t i,
                                              std::size_t block, counters16& acc) noexcept {
  constexpr bool mergeable = R == rounding::nearest_even && !float_range_format(F) && !codes_count<F, Ftz, Sat>;
  if (choice.always) {
    if (mergeable && !split.always) {
      round_block_as<R, F, Ftz, Sat, Order, true, mergeable>(v, in, out, i, block, acc);
    } else {
      round_block_as<R, F, Ftz, Sat, Order, true, false>(v, in, out, i, block, acc);
    }
  } else if (mergeable && !split.always) {
    round_block_as<R, F, Ftz, Sat, Order, false, mergeable>(v, in, out, i, block, acc);
  } else {
    round_block_as<R, F, Ftz, Sat, Order, false, false>(v, in, out, i, block, acc);
  }
}

/// How many blocks (at most 4 page_floats / 16 = 256 vectors each) round_blocks adds to a chunk's counters between
/// two widenings of their 16-bit counts: 128 x 256 vectors, plus the chunk's head, rest and tail, stay below
/// 2^16 per lane.
inline constexpr std::size_t code_blocks = 128;
static_assert(code_blocks * (4 * page_floats / 16) + 258 < 65536);

/// Blocks of `block` vectors from i while a whole one fits in n, each with its own choices; returns the next i.
template <rounding R, format_spec F, bool Ftz, bool Sat, store_order Order>
SAFEAMP_DETAIL_ALWAYS_INLINE std::size_t round_blocks(const vector_constants<F>& v, const float* in, float* out,
                                                      std::size_t i, std::size_t n, std::size_t block,
                                                      counters16& acc) noexcept {
  path_choice choice, split;
  if (Order == store_order::cached && in != out) choice.eighths = path_choice::deferred_eighths;  // round_deferred
  for (std::size_t blocks = 1; i + 16 * block <= n; i += 16 * block, ++blocks) {
    choice.start(acc);
    split.start_count(acc.odd_vectors);
    round_block<R, F, Ftz, Sat, Order>(choice, split, v, in, out, i, block, acc);
    choice.finish(acc, block);
    split.finish_count(acc.odd_vectors, block);
    if (blocks % code_blocks == 0) acc.widen_codes();
  }
  return i;
}

/// A deterministic mode (nearest even, directed) over in[0..n) into out[0..n) (out may equal in): blocks of
/// vectors whose all-normal test path_choice switches off where most vectors need the exact path, and (nearest
/// even, fp16/fp8) whose merged test of the rare lanes a second path_choice switches off where more than 1 vector
/// in 8 holds one. stream: non-temporal stores after a head that aligns the output to 64 bytes, in the order of
/// active_stream_order (cpu_path.hpp): four pages at a time where CPUID does not name AMD (1.1-1.2x address order on
/// the Xeon where it was first measured); in address order on AMD, as the AVX2 loop, whose four-pages order ran at
/// 0.42-0.89x memcpy on Zen 4 against 0.83-1.58x in address order (docs/performance.md). This loop too: on Zen 4,
/// 64 Mi nearest even ran at 0.85-1.06x memcpy four pages at a time against 1.14-1.69x in address order
/// (SAFEAMP_STREAM_ORDER forces either order for such an A/B).
template <rounding R, format_spec F, bool Ftz, bool Sat>
SAFEAMP_DETAIL_NOINLINE void round_deterministic_chunk(const float* in, float* out, std::size_t n, bool stream,
                                                       local_counts& c) noexcept {
  vector_constants<F> v;
  counters16 acc;
  std::size_t i = 0;
  if (stream) {
    if (const std::size_t head = stream_head(out, n); head != 0) {
      _mm512_mask_storeu_epi32(out, first_lanes(head),
                               load_round<R, F, Ftz, Sat>(v, in, nullptr, 0, first_lanes(head), acc));
      i = head;
    }
    if (stream_in_address_order()) {
      i = round_blocks<R, F, Ftz, Sat, store_order::streamed>(v, in, out, i, n, 64, acc);
    } else {
      i = round_blocks<R, F, Ftz, Sat, store_order::four_pages>(v, in, out, i, n, 4 * page_floats / 16, acc);
    }
    round_vectors<R, F, Ftz, Sat, false, true>(v, in, out, i, (n - i) / 16, acc);
  } else {
    i = round_blocks<R, F, Ftz, Sat, store_order::cached>(v, in, out, i, n, deferred_vectors, acc);
    round_tested<R, F, Ftz, Sat, false>(v, in, out, i, (n - i) / 16, acc);
  }
  i += (n - i) / 16 * 16;
  if (i < n) {
    _mm512_mask_storeu_epi32(out + i, first_lanes(n - i),
                             load_round<R, F, Ftz, Sat>(v, in, nullptr, i, first_lanes(n - i), acc));
  }
  if (stream) _mm_sfence();
  acc.add_to(c);
}

/// How many generator calls (8 vectors each) the stochastic loops round between two widenings of their 16-bit
/// counts; with a chunk's head and tail (at most 16 vectors), far below 2^16 per lane.
inline constexpr std::size_t code_steps = 64;
static_assert(code_steps * 8 + 16 < 65536 && mark_stretch_elements / 16 + 16 < 65536);

/// Which of a generator call's eight vectors need stochastic rounding's exact path: round16's normal-range test,
/// 16 lane bits per vector (vectors 0-3 in lo, 4-7 in hi).
struct step_marks {
  std::uint64_t lo = 0, hi = 0;
  [[nodiscard]] SAFEAMP_DETAIL_ALWAYS_INLINE bool special(std::size_t j) const noexcept {
    return (((j < 4 ? lo : hi) >> (16 * (j % 4))) & 0xFFFFu) != 0;
  }
};

/// The marks of the eight vectors at in.
template <format_spec F>
SAFEAMP_DETAIL_ALWAYS_INLINE step_marks mark_step(const vector_constants<F>& v, const float* in) noexcept {
  __mmask16 k[8];
  for (std::size_t j = 0; j < 8; ++j) {
    k[j] = outside_normal_range(v, _mm512_and_si512(_mm512_loadu_si512(in + 16 * j), v.abs_mask));
  }
  const __mmask64 lo = _mm512_kunpackd(_mm512_kunpackw(k[3], k[2]), _mm512_kunpackw(k[1], k[0]));
  const __mmask64 hi = _mm512_kunpackd(_mm512_kunpackw(k[7], k[6]), _mm512_kunpackw(k[5], k[4]));
  return {_cvtmask64_u64(lo), _cvtmask64_u64(hi)};
}

/// One generator call's elements [at, at + 128) of a stochastic chunk, at - lay.start a multiple of 128: the words
/// of blocks lay.first_block + (at - lay.start) / 4 on. Stream: streaming stores, the input prefetched `ahead`
/// floats on. Marked: which vectors take the exact path is read from marks (mark_step of the same elements, taken
/// one call earlier), else tested vector by vector.
template <format_spec F, bool Ftz, bool Sat, bool Stream, bool Marked>
SAFEAMP_DETAIL_ALWAYS_INLINE void stochastic_step(const vector_constants<F>& v, const philox32& gen,
                                                  const stochastic_layout& lay, const float* in, float* out,
                                                  std::size_t at, std::size_t ahead, step_marks marks,
                                                  counters16& acc) noexcept {
  constexpr rounding R = rounding::stochastic;
  __m512i w[8];
  gen(lay.first_block + (at - lay.start) / 4, w);
  for (std::size_t j = 0; j < 8; ++j) {
    if constexpr (Stream) prefetch_ahead(in + at + 16 * j, ahead);
    const __m512i u = _mm512_loadu_si512(in + at + 16 * j);
    __m512i r;
    if constexpr (Marked) {
      if (marks.special(j)) {
        ++acc.special_vectors;
        r = round16<R, F, Ftz, Sat, true>(v, u, w[j], acc);
      } else {
        r = cut16_stochastic(v, u, w[j]);
      }
    } else {
      r = round16<R, F, Ftz, Sat>(v, u, w[j], acc);
    }
    if constexpr (Stream) {
      _mm512_stream_si512(reinterpret_cast<__m512i*>(out + at + 16 * j), r);
    } else {
      _mm512_storeu_si512(out + at + 16 * j, r);
    }
  }
}

/// Steps [s, end) of a stochastic chunk from element i in address order, with streaming stores (Stream) or not;
/// returns the element after the last step. Marked: each step's marks are taken during the step before
/// (by_mark_stretches, round_kernel.hpp, says why). Functions of their own: with the marked loop inlined beside the
/// other, g++'s code for the unmarked one ran 5-10% slower (Zen 4, fp16 on 64 Mi Gaussian floats). The steps count
/// into counters of their own, added to `total` at the end, as round_block_as does: the caller's, reached through a
/// reference, would be loaded and stored around every store of results (the store's type may alias them).
template <format_spec F, bool Ftz, bool Sat, bool Stream, bool Marked>
SAFEAMP_DETAIL_NOINLINE std::size_t stochastic_stretch(const vector_constants<F>& v, const philox32& gen,
                                                       const stochastic_layout& lay, const float* in, float* out,
                                                       std::size_t s, std::size_t end, std::size_t i, std::size_t ahead,
                                                       counters16& total) noexcept {
  constexpr std::size_t step = 4 * philox32::blocks;
  counters16 acc;
  if constexpr (Marked) {
    step_marks now = mark_step(v, in + i);
    for (; s < end; ++s, i += step) {
      const step_marks next = s + 1 < end ? mark_step(v, in + i + step) : step_marks{};
      stochastic_step<F, Ftz, Sat, Stream, true>(v, gen, lay, in, out, i, ahead, now, acc);
      now = next;
    }
  } else {
    for (; s < end; ++s, i += step) {
      stochastic_step<F, Ftz, Sat, Stream, false>(v, gen, lay, in, out, i, ahead, {}, acc);
    }
  }
  acc.widen_codes();  // a stretch is at most mark_stretch_elements / 16 vectors (by_mark_stretches)
  total.add(acc);
  return i;
}

/// Steps [s, steps) from element i stretch by stretch, each marked or not as by_mark_stretches finds it pays; returns
/// the element after the last step.
template <format_spec F, bool Ftz, bool Sat, bool Stream>
SAFEAMP_DETAIL_ALWAYS_INLINE std::size_t stochastic_stretches(const vector_constants<F>& v, const philox32& gen,
                                                              const stochastic_layout& lay, const float* in, float* out,
                                                              std::size_t s, std::size_t i, std::size_t ahead,
                                                              counters16& acc) noexcept {
  return by_mark_stretches<4 * philox32::blocks, 16>(
      s, lay.steps, i, acc, [&](bool marked, std::size_t from, std::size_t end, std::size_t at) noexcept {
        return marked ? stochastic_stretch<F, Ftz, Sat, Stream, true>(v, gen, lay, in, out, from, end, at, ahead, acc)
                      : stochastic_stretch<F, Ftz, Sat, Stream, false>(v, gen, lay, in, out, from, end, at, ahead, acc);
      });
}

/// The streamed steps of a stochastic chunk (lay.stream): four pages at a time where the deterministic modes stream
/// so (active_stream_order), the rest in address order; returns the element after the last step. A function of its
/// own: inlined beside the cached loop, it cost that loop about a fifth of its speed in two same-run A/Bs (Intel
/// Xeon, 64 Ki N(0,1): 0.68x the generator's rate against 0.82x; as its own function, within the noise).
template <format_spec F, bool Ftz, bool Sat>
SAFEAMP_DETAIL_NOINLINE std::size_t stochastic_streamed(const vector_constants<F>& v, const stochastic_layout& lay,
                                                        philox_key key, const float* in, float* out,
                                                        counters16& acc) noexcept {
  constexpr std::size_t step = 4 * philox32::blocks;
  const philox32 gen(key.seed, key.stream);
  std::size_t s = 0, i = lay.start;
  if (!stream_in_address_order()) {
    constexpr std::size_t group = 4 * page_floats / step;  // steps in four pages: page k % 4, step k / 4 of it
    for (; s + group <= lay.steps; s += group, i += 4 * page_floats) {
      for (std::size_t k = 0; k < group; ++k) {
        stochastic_step<F, Ftz, Sat, true, false>(v, gen, lay, in, out, i + k % 4 * page_floats + k / 4 * step,
                                                  four_pages_prefetch_floats, {}, acc);
      }
      acc.widen_codes();
    }
  }
  // Address order: stretch by stretch, marked where that pays (by_mark_stretches). On Zen 4, 64 Mi Gaussian floats
  // into E4M3 went from 1.34-1.45 to 1.72-1.86 G elements/s, against 2.2-2.4 for fp16, whose vectors hardly ever
  // need the exact path. Spans in cache and the four-pages order keep the per-vector test: in cache the marks cost
  // 5-13% (Zen 4, 64 Ki and 1 Mi), and the four-pages order was not measured with them.
  return stochastic_stretches<F, Ftz, Sat, true>(v, gen, lay, in, out, s, i, stream_prefetch_floats, acc);
}

/// Stochastic rounding of in[0..n) with the bits of key (element i: logical index key.offset + i). The
/// Philox words are made 128 at a time (philox32) right where they are used, in registers: the generator is bound
/// by its own arithmetic, and the rounding's instructions and memory traffic fill the gaps beside it (a buffer of
/// words first, then a memory-bound pass, was measured about 1.3x slower on 64 Mi elements). The main loop needs
/// the logical index of its first element to be a multiple of 4 (the words of a block go to 4 consecutive
/// elements) and, to stream, a 64-byte aligned output; the few elements before that point and after the last full
/// step take words from a small buffer. Streaming goes in the deterministic modes' order (active_stream_order):
/// four pages at a time, a generator call's 128 elements (eight lines) from each in turn, or in address order (AMD);
/// with the input prefetched either way (four_pages_prefetch_floats, stream_prefetch_floats). far (a span of at least
/// far_min_bytes, in place or not streamed): ordinary stores, marked stretch by stretch as the streamed steps are.
template <format_spec F, bool Ftz, bool Sat>
SAFEAMP_DETAIL_NOINLINE void round_stochastic_chunk(const float* in, float* out, std::size_t n, philox_key key,
                                                    bool stream, bool far, local_counts& c) noexcept {
  constexpr rounding R = rounding::stochastic;
  constexpr std::size_t step = 4 * philox32::blocks;  // elements per generator call
  vector_constants<F> v;
  counters16 acc;
  alignas(64) std::uint32_t words[step + 4];
  // Elements [at, at + len), len <= step, with buffered words and ordinary (masked) stores.
  auto few = [&](std::size_t at, std::size_t len) noexcept {
    const std::uint64_t logical = key.offset + at;
    const auto skip = static_cast<std::size_t>(logical & 3u);
    philox_fill_avx512(words, logical >> 2, (skip + len + 3) / 4, key.seed, key.stream);
    for (std::size_t j = 0; j < len; j += 16) {
      const __mmask16 m = first_lanes(len - j < 16 ? len - j : 16);
      _mm512_mask_storeu_epi32(out + at + j, m, load_round<R, F, Ftz, Sat>(v, in + at, words + skip, j, m, acc));
    }
  };
  const stochastic_layout lay(key.offset, n, stream, stream_head(out, std::size_t{64}), step);
  if (lay.start != 0) few(0, lay.start);
  std::size_t i = lay.start;
  if (lay.in_registers) {
    if (lay.stream) {
      i = stochastic_streamed<F, Ftz, Sat>(v, lay, key, in, out, acc);
    } else {
      const philox32 gen(key.seed, key.stream);
      if (far) {
        // In place, 64 Mi Gaussian floats into E4M3 (Zen 4): 1.57-1.63 G elements/s with the per-vector test,
        // 1.88-1.94 marked (docs/performance.md).
        i = stochastic_stretches<F, Ftz, Sat, false>(v, gen, lay, in, out, 0, i, 0, acc);
      } else {
        for (std::size_t s = 0; s < lay.steps; ++s, i += step) {
          stochastic_step<F, Ftz, Sat, false, false>(v, gen, lay, in, out, i, 0, {}, acc);
          if (s % code_steps == 0) acc.widen_codes();
        }
      }
    }
  } else {
    // The low word of the Philox block counter wraps in this chunk (once per 2^34 elements): all buffered.
    for (std::size_t s = 0; s < lay.steps; ++s, i += step) {
      few(i, step);
      if (s % code_steps == 0) acc.widen_codes();
    }
  }
  if (i < n) few(i, n - i);
  if (lay.stream) _mm_sfence();
  acc.add_to(c);
}

/// Rounds in[0..n) to F in mode R with the counters added to c: the four instantiations of flush x saturate.
/// key is used by stochastic rounding only (element i: logical index key.offset + i). stream: non-temporal stores
/// (large spans into a separate buffer); far: the chunk's span is at least far_min_bytes (stochastic rounding only).
template <rounding R, format_spec F>
void round_chunk(const float* in, float* out, std::size_t n, overflow ov, bool ftz, philox_key key, bool stream,
                 bool far, local_counts& c) noexcept {
  const auto run = [&]<bool Ftz, bool Sat>() {
    if constexpr (R == rounding::stochastic) {
      round_stochastic_chunk<F, Ftz, Sat>(in, out, n, key, stream, far, c);
    } else {
      round_deterministic_chunk<R, F, Ftz, Sat>(in, out, n, stream, c);
    }
  };
  with_flush_and_saturate(ftz, ov, run);
}

}  // namespace safeamp::detail::avx512

SAFEAMP_DETAIL_TARGET_END

#endif  // SAFEAMP_X86_KERNELS
