// Bulk rounding of spans with counters: how many values overflowed, underflowed to zero, became
// subnormal, or are NaN/inf. These counters feed the simulator's telemetry (underflow is what loss
// scaling fixes). Named formats dispatch to kernels specialised at compile time so they vectorise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "safeamp/error.hpp"
#include "safeamp/format/cpu_path.hpp"
#include "safeamp/format/format_names.hpp"
#include "safeamp/format/format_spec.hpp"
#include "safeamp/format/philox.hpp"
#include "safeamp/format/philox_avx2.hpp"
#include "safeamp/format/philox_avx512.hpp"
#include "safeamp/format/round.hpp"
#include "safeamp/format/round_avx2.hpp"
#include "safeamp/format/round_avx512.hpp"
#include "safeamp/format/round_fast.hpp"
#include "safeamp/format/round_kernel.hpp"

namespace safeamp {

struct cast_stats {
  std::uint64_t elements = 0;
  std::uint64_t overflow = 0;   // finite inputs whose rounded magnitude exceeds max finite (became inf/NaN or max)
  std::uint64_t underflow = 0;  // finite nonzero inputs that became +-0
  std::uint64_t subnormal = 0;  // results that are nonzero subnormals of the target format
  std::uint64_t nan = 0;        // results that are NaN (NaN inputs, and E4M3 overflow without saturation)
  std::uint64_t infinity = 0;   // results that are +-inf

  cast_stats& operator+=(const cast_stats& o) noexcept {
    elements += o.elements;
    overflow += o.overflow;
    underflow += o.underflow;
    subnormal += o.subnormal;
    nan += o.nan;
    infinity += o.infinity;
    return *this;
  }
  friend constexpr bool operator==(const cast_stats&, const cast_stats&) = default;
};

namespace detail {

inline void flush_counts(cast_stats& s, local_counts& c) noexcept {
  s.overflow += c.overflow;
  s.underflow += c.underflow;
  s.subnormal += c.subnormal;
  s.nan += c.nan;
  s.infinity += c.infinity;
  c = local_counts{};
}

// Chunks of at most 2^20 elements so that the 32-bit counters cannot wrap.
inline constexpr std::size_t count_chunk = std::size_t{1} << 20;
inline constexpr std::size_t random_block = 2048;  // random words generated ahead of one rounding pass

// One chunk: named formats narrower than float take the block fast path (round_fast.hpp).
template <rounding R, bool Named, format_spec F>
inline void round_chunk(format_spec fmt, const float* in, float* out, std::size_t n, round_options opt,
                        const std::uint32_t* random_words, local_counts& c) noexcept {
  if constexpr (Named && F.mantissa_bits < 23) {
    round_floats_fast<R, F>(in, out, n, opt.on_overflow, opt.flush_subnormals, random_words, c);
  } else {
    round_floats<R, Named, F>(fmt, in, out, n, opt.on_overflow, opt.flush_subnormals, random_words, c);
  }
}

/// The Philox block fill of a path (the same words on every path).
inline void philox_fill_on(cpu_path path, std::uint32_t* words, std::uint64_t first_block, std::size_t blocks,
                           std::uint64_t seed, std::uint32_t stream) noexcept {
#if defined(SAFEAMP_X86_KERNELS)
  if (path == cpu_path::avx512) return avx512::philox_fill_avx512(words, first_block, blocks, seed, stream);
  if (path == cpu_path::avx2) return avx2::philox_fill_avx2(words, first_block, blocks, seed, stream);
#endif
  (void)path;
  philox_fill(words, first_block, blocks, seed, stream);
}

#if defined(SAFEAMP_X86_KERNELS)
/// One chunk of a named format narrower than float on a vector path (every mode on either).
/// stream: non-temporal stores; far: the whole span's input is at least avx512::far_min_bytes (the AVX2 kernels
/// do not ask).
template <rounding R, format_spec F>
inline void round_chunk_vector(cpu_path path, const float* in, float* out, std::size_t n, round_options opt,
                               philox_key key, bool stream, bool far, local_counts& c) noexcept {
  if (path == cpu_path::avx512) {
    avx512::round_chunk<R, F>(in, out, n, opt.on_overflow, opt.flush_subnormals, key, stream, far, c);
  } else {
    avx2::round_chunk<R, F>(in, out, n, opt.on_overflow, opt.flush_subnormals, key, stream, c);
  }
}
#endif

// One rounding mode over a span. Named formats come in as the template argument F (Named = true) so every
// format constant folds; other formats use the run-time descriptor f with the same code.
template <rounding R, bool Named, format_spec F = format_spec{}>
void round_span_kernel(cpu_path path, format_spec f, const float* in, float* out, std::size_t n, round_options opt,
                       philox_key key, cast_stats& stats) noexcept {
  const format_spec fmt = Named ? F : f;
  local_counts c;
#if defined(SAFEAMP_X86_KERNELS)
  // Named formats narrower than float on a vector path. Large spans into a separate buffer are written with
  // streaming stores.
  if constexpr (Named && F.mantissa_bits < 23) {
    if (path != cpu_path::portable) {
      const bool stream = in != out && n * sizeof(float) >= avx512::stream_min_bytes;
      const bool far = n * sizeof(float) >= avx512::far_min_bytes;
      for (std::size_t start = 0; start < n; start += count_chunk) {
        const std::size_t len = n - start < count_chunk ? n - start : count_chunk;
        philox_key at = key;
        at.offset = key.offset + start;
        round_chunk_vector<R, F>(path, in + start, out + start, len, opt, at, stream, far, c);
        flush_counts(stats, c);
      }
      return;
    }
  }
#endif
  if constexpr (R != rounding::stochastic) {
    for (std::size_t start = 0; start < n; start += count_chunk) {
      const std::size_t len = n - start < count_chunk ? n - start : count_chunk;
      round_chunk<R, Named, F>(fmt, in + start, out + start, len, opt, nullptr, c);
      flush_counts(stats, c);
    }
  } else {
    // Random words for logical indices [base, base + random_block), base a multiple of 4, then one rounding
    // pass over the elements of the block. Element i uses stochastic_bits(seed, stream, offset + i).
    alignas(64) std::uint32_t words[random_block];
    std::size_t i = 0;
    while (i < n) {
      const std::uint64_t logical = key.offset + i;
      const std::uint64_t base = logical & ~std::uint64_t{3};
      const std::size_t skip = static_cast<std::size_t>(logical - base);
      const std::size_t take = (n - i) < (random_block - skip) ? (n - i) : (random_block - skip);
      philox_fill_on(path, words, base >> 2, (skip + take + 3) / 4, key.seed, key.stream);
      round_chunk<R, Named, F>(fmt, in + i, out + i, take, opt, words + skip, c);
      flush_counts(stats, c);
      i += take;
    }
  }
}

// Exponent-only formats (E8M0, used for block scales, not tensors) are not worth a vector kernel: the scalar
// routine, element by element, with the same keyed stochastic bits and counters.
inline void round_span_exponent_only(format_spec f, const float* in, float* out, std::size_t n, round_options opt,
                                     philox_key key, cast_stats& stats) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t rnd =
        opt.mode == rounding::stochastic ? stochastic_bits(key.seed, key.stream, key.offset + i) : 0u;
    const encode_result r = encode_impl<float>(f, in[i], opt, rnd);
    const float x = in[i];
    out[i] = decode(f, r.code);
    stats.overflow += r.overflowed && x - x == 0.0f ? 1u : 0u;
    stats.nan += out[i] != out[i] ? 1u : 0u;
  }
}

template <bool Named, format_spec F = format_spec{}>
void round_span_dispatch(cpu_path path, format_spec f, const float* in, float* out, std::size_t n, round_options opt,
                         philox_key key, cast_stats& stats) noexcept {
  switch (opt.mode) {
    case rounding::nearest_even:
      return round_span_kernel<rounding::nearest_even, Named, F>(path, f, in, out, n, opt, key, stats);
    case rounding::toward_zero:
      return round_span_kernel<rounding::toward_zero, Named, F>(path, f, in, out, n, opt, key, stats);
    case rounding::toward_pos_inf:
      return round_span_kernel<rounding::toward_pos_inf, Named, F>(path, f, in, out, n, opt, key, stats);
    case rounding::toward_neg_inf:
      return round_span_kernel<rounding::toward_neg_inf, Named, F>(path, f, in, out, n, opt, key, stats);
    case rounding::stochastic:
      return round_span_kernel<rounding::stochastic, Named, F>(path, f, in, out, n, opt, key, stats);
  }
}

#if defined(SAFEAMP_EXTERN_KERNELS)
// Compiled in src/format_kernels_*.cpp, one unit per named format and one for every other format, so that a build
// compiles them side by side (round_span_formats below picks among them).
using round_span_dispatch_type = void(cpu_path, format_spec, const float*, float*, std::size_t, round_options,
                                      philox_key, cast_stats&) noexcept;
extern template round_span_dispatch_type round_span_dispatch<true, fp16>;
extern template round_span_dispatch_type round_span_dispatch<true, bf16>;
extern template round_span_dispatch_type round_span_dispatch<true, fp8_e4m3>;
extern template round_span_dispatch_type round_span_dispatch<true, fp8_e5m2>;
extern template round_span_dispatch_type round_span_dispatch<true, tf32>;
extern template round_span_dispatch_type round_span_dispatch<true, fp32>;
extern template round_span_dispatch_type round_span_dispatch<false, format_spec{}>;
#endif

}  // namespace detail

namespace detail {
/// The kernels of every format and mode, chosen by f and opt.mode (arguments checked by the caller). This is where a
/// translation unit instantiates them all, 6 named formats x 5 modes x 3 paths: about a minute of g++ -O3 for each
/// unit that calls round_span. A template only so that it can be instantiated once: with SAFEAMP_EXTERN_KERNELS
/// (opt-in; linking the CMake target safeamp::format_kernels defines it) the explicit instantiation declaration
/// below keeps units from instantiating it, and src/format_kernels.cpp holds the one instantiation. Same code, same
/// bits; see docs/api.md, "Compiling the kernels once".
template <int Once = 0>
void round_span_formats(cpu_path path, format_spec f, const float* src, float* dst, std::size_t n, round_options opt,
                        philox_key key, cast_stats& stats) noexcept {
  if (f == fp16)
    round_span_dispatch<true, fp16>(path, f, src, dst, n, opt, key, stats);
  else if (f == bf16)
    round_span_dispatch<true, bf16>(path, f, src, dst, n, opt, key, stats);
  else if (f == fp8_e4m3)
    round_span_dispatch<true, fp8_e4m3>(path, f, src, dst, n, opt, key, stats);
  else if (f == fp8_e5m2)
    round_span_dispatch<true, fp8_e5m2>(path, f, src, dst, n, opt, key, stats);
  else if (f == tf32)
    round_span_dispatch<true, tf32>(path, f, src, dst, n, opt, key, stats);
  else if (f == fp32)
    round_span_dispatch<true, fp32>(path, f, src, dst, n, opt, key, stats);
  else if (f.mantissa_bits == 0)
    round_span_exponent_only(f, src, dst, n, opt, key, stats);
  else
    round_span_dispatch<false>(path, f, src, dst, n, opt, key, stats);
}

#if defined(SAFEAMP_EXTERN_KERNELS)
extern template void round_span_formats<0>(cpu_path, format_spec, const float*, float*, std::size_t, round_options,
                                           philox_key, cast_stats&) noexcept;
#endif

/// round_span on a given path (every path the CPU supports gives the same bits; the tests compare them).
inline cast_stats round_span_on(cpu_path path, format_spec f, std::span<const float> in, std::span<float> out,
                                round_options opt, philox_key key) {
  if (!is_valid(f)) {
    throw error("format", format_name(f),
                "a valid format_spec (2..8 exponent bits, 1..23 mantissa bits, range within float)");
  }
  if (in.size() != out.size()) {
    throw error("round_span output size", std::to_string(out.size()),
                "the input size (" + std::to_string(in.size()) + ")");
  }
  if (!cpu_path_supported(path)) {
    throw error("round_span cpu path", std::string(cpu_path_name(path)), "a path this CPU and build run");
  }
  const float* src = in.data();
  float* dst = out.data();
  const std::size_t n = in.size();
  if (n != 0 && src != dst && src < dst + n && dst < src + n) {
    throw error("round_span buffers", "partially overlapping", "disjoint spans, or out == in exactly");
  }
  cast_stats stats;
  stats.elements = n;
  round_span_formats(path, f, src, dst, n, opt, key, stats);
  return stats;
}
}  // namespace detail

/// Rounds every element of `in` to format f into `out` (same size; `out` may be `in` itself) and
/// returns the counters. Stochastic bits come from `key` (see philox_key): element i uses logical
/// index key.offset + i, so splitting a tensor into spans with matching offsets gives identical bits.
/// Runs on active_cpu_path() (cpu_path.hpp): the same bits on every path.
inline cast_stats round_span(format_spec f, std::span<const float> in, std::span<float> out, round_options opt = {},
                             philox_key key = {}) {
  return detail::round_span_on(active_cpu_path(), f, in, out, opt, key);
}

/// In-place form.
inline cast_stats round_span(format_spec f, std::span<float> data, round_options opt = {}, philox_key key = {}) {
  return round_span(f, std::span<const float>(data.data(), data.size()), data, opt, key);
}

/// Encodes into bit patterns (uint8 for 8-bit formats is the caller's narrowing; codes are returned as
/// uint16 for formats up to 16 bits). Throws when the format is wider than 16 bits. The rounding is
/// round_span's (same path, same stochastic bits); the rounded values are exact in f, so encoding them
/// again rounds nothing and gives the codes encode() gives for the inputs.
namespace detail {
inline void encode_span_on(cpu_path path, format_spec f, std::span<const float> in, std::span<std::uint16_t> out,
                           round_options opt = {}, philox_key key = {}) {
  if (total_bits(f) > 16) throw error("encode_span format", format_name(f), "formats of at most 16 bits");
  if (in.size() != out.size()) {
    throw error("encode_span output size", std::to_string(out.size()),
                "the input size (" + std::to_string(in.size()) + ")");
  }
  constexpr std::size_t chunk = 4096;
  float rounded[chunk];
  for (std::size_t start = 0; start < in.size(); start += chunk) {
    const std::size_t len = in.size() - start < chunk ? in.size() - start : chunk;
    philox_key at = key;
    at.offset = key.offset + start;
    (void)round_span_on(path, f, in.subspan(start, len), std::span<float>(rounded, len), opt, at);
    for (std::size_t i = 0; i < len; ++i) out[start + i] = static_cast<std::uint16_t>(encode(f, rounded[i]));
  }
}
}  // namespace detail

inline void encode_span(format_spec f, std::span<const float> in, std::span<std::uint16_t> out, round_options opt = {},
                        philox_key key = {}) {
  detail::encode_span_on(active_cpu_path(), f, in, out, opt, key);
}

}  // namespace safeamp
