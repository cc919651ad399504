// Seeded, normally distributed GEMM operands in a device storage type: what a benchmark multiplies, so that the
// tensor cores see data like a training step's (their power draw, and with it their clocks, differ on constant or
// zero inputs). Element i is a standard normal drawn from the Philox bits of (seed, stream, offset + i) alone, and is
// encoded by the core rounding routine; an fp8 operand is scaled so that its largest magnitude becomes the format's
// largest finite value (per-tensor scaling with margin 0), and its inverse scale is what the GEMM multiplies it by.
// Host-only and free of CUDA; generation and encoding share the work among threads without changing a bit.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "safeamp/config.hpp"
#include "safeamp/error.hpp"
#include "safeamp/format/format_names.hpp"
#include "safeamp/format/format_spec.hpp"
#include "safeamp/format/philox.hpp"
#include "safeamp/format/round.hpp"

namespace safeamp::cuda {

namespace detail {

/// Box-Muller, sqrt(-2 ln u0) cos(2 pi u1), on two 32-bit words: u0 = (w0 + 1/2) / 2^32 in (0, 1) (ln never sees 0),
/// u1 = w1 / 2^32 in [0, 1); in double, rounded to float.
[[nodiscard]] inline float box_muller(std::uint32_t w0, std::uint32_t w1) noexcept {
  const double u0 = (static_cast<double>(w0) + 0.5) * 0x1p-32;
  const double u1 = static_cast<double>(w1) * 0x1p-32;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u0)) * std::cos(2.0 * std::numbers::pi * u1));
}

}  // namespace detail

/// The standard normal value of logical element `index` under (seed, stream): box_muller on the Philox words
/// 2 index and 2 index + 1 of (seed, stream) (stochastic_bits' numbering).
[[nodiscard]] inline float standard_normal(std::uint64_t seed, std::uint32_t stream, std::uint64_t index) noexcept {
  return detail::box_muller(stochastic_bits(seed, stream, 2 * index), stochastic_bits(seed, stream, 2 * index + 1));
}

namespace detail {

/// Calls work(begin, end) on consecutive ranges of [0, count) from `threads` threads (0: one per hardware thread).
template <class Work>
void parallel_ranges(std::size_t count, unsigned threads, Work&& work) {
  constexpr std::size_t min_per_thread = std::size_t{1} << 16;  // below this a thread costs more than it saves
  const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());
  const std::size_t wanted = threads == 0 ? hardware : threads;
  const std::size_t used = std::clamp<std::size_t>(count / min_per_thread, 1, wanted);
  if (used == 1) {
    work(std::size_t{0}, count);
    return;
  }
  std::vector<std::thread> pool;
  const std::size_t per = (count + used - 1) / used;
  for (std::size_t begin = 0; begin < count; begin += per) {
    pool.emplace_back([&work, begin, end = std::min(count, begin + per)] { work(begin, end); });
  }
  for (std::thread& t : pool) t.join();
}

}  // namespace detail

/// Fills `out` with standard_normal(key.seed, key.stream, key.offset + i). The same bits for any `threads` (0: one
/// per hardware thread).
inline void fill_standard_normal(std::span<float> out, philox_key key, unsigned threads = 0) {
  detail::parallel_ranges(out.size(), threads, [&](std::size_t begin, std::size_t end) {
    // Words 2j and 2j + 1 of element j are words 2 (j & 1) and 2 (j & 1) + 1 of Philox block j / 2 (a block holds
    // four words): one block serves two elements.
    std::uint64_t block_of = ~std::uint64_t{0};
    philox4x32_block words{};
    for (std::size_t i = begin; i < end; ++i) {
      const std::uint64_t j = key.offset + i, n = j >> 1;
      if (n != block_of) {
        words = philox4x32_10(static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(n >> 32), key.stream, 0u,
                              static_cast<std::uint32_t>(key.seed), static_cast<std::uint32_t>(key.seed >> 32));
        block_of = n;
      }
      const std::size_t w = 2 * (j & 1);
      out[i] = detail::box_muller(words.v[w], words.v[w + 1]);
    }
  });
}

/// An operand encoded for the device, and the factor the GEMM multiplies it by.
struct gemm_operand {
  format_spec format = fp32;
  std::vector<std::byte> bytes;  // one element after another in the format's storage (little-endian codes)
  float scale_inverse = 1.0f;    // fp8: amax / largest finite (the GEMM's per-tensor scale); 1 otherwise
};

/// `values` encoded in format f with nearest-even rounding: fp32 as is; tf32 rounded and stored as fp32; fp16 and
/// bf16 as 16-bit codes; fp8_e4m3 and fp8_e5m2 as 8-bit codes of value * (largest finite / amax), saturating (the
/// product at amax may round past the largest finite value), with scale_inverse = amax / largest finite (1 for all
/// zeros). Throws safeamp::error for another format or a non-finite value.
[[nodiscard]] inline gemm_operand encode_gemm_operand(format_spec f, std::span<const float> values,
                                                      unsigned threads = 0) {
  const bool fp8 = f == fp8_e4m3 || f == fp8_e5m2;
  if (!(f == fp32 || f == tf32 || f == fp16 || f == bf16 || fp8)) {
    throw error("gemm operand format", format_name(f), "fp32, tf32, fp16, bf16, fp8_e4m3, fp8_e5m2");
  }
  double amax = 0.0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      throw error("gemm operand value " + std::to_string(i), std::to_string(values[i]), "finite values");
    }
    amax = std::max(amax, std::fabs(static_cast<double>(values[i])));
  }
  const std::size_t width = f == fp32 || f == tf32 ? 4 : fp8 ? 1 : 2;
  gemm_operand out{.format = f, .bytes = std::vector<std::byte>(values.size() * width)};
  const double largest = max_finite(f);
  const double scale = fp8 && amax > 0.0 ? largest / amax : 1.0;
  if (fp8 && amax > 0.0) out.scale_inverse = static_cast<float>(amax / largest);
  const round_options saturating{.on_overflow = overflow::saturate};
  std::byte* const dst = out.bytes.data();
  detail::parallel_ranges(values.size(), threads, [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
      std::uint32_t code = 0;
      if (width == 4) {
        code = bit_cast<std::uint32_t>(f == tf32 ? round_to(tf32, values[i]) : values[i]);
      } else if (width == 2) {
        code = encode(f, values[i]);
      } else {
        code = encode(f, static_cast<double>(values[i]) * scale, saturating);
      }
      for (std::size_t b = 0; b < width; ++b) dst[width * i + b] = static_cast<std::byte>((code >> (8 * b)) & 0xFFu);
    }
  });
  return out;
}

}  // namespace safeamp::cuda
