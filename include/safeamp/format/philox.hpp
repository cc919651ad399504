// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a counter-based
// generator, so random bits are a pure function of (key, counter) and identical on CPU and GPU.
// Written from the paper's constants; tests/unit/format checks it against Random123's philox4x32.
#pragma once

#include <array>
#include <cstdint>

#include "safeamp/config.hpp"

namespace safeamp {

struct philox4x32_block {
  std::uint32_t v[4];
};

namespace detail {
inline constexpr std::uint32_t philox_m0 = 0xD2511F53u;  // multipliers (paper, Table 2)
inline constexpr std::uint32_t philox_m1 = 0xCD9E8D57u;
inline constexpr std::uint32_t philox_w0 = 0x9E3779B9u;  // Weyl key increments: golden ratio, sqrt(3)-1
inline constexpr std::uint32_t philox_w1 = 0xBB67AE85u;
}  // namespace detail

/// Philox4x32 with 10 rounds: counter (c0..c3), key (k0, k1) -> four 32-bit words.
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr philox4x32_block philox4x32_10(std::uint32_t c0, std::uint32_t c1,
                                                                           std::uint32_t c2, std::uint32_t c3,
                                                                           std::uint32_t k0,
                                                                           std::uint32_t k1) noexcept {
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(detail::philox_m0) * c0;
    const std::uint64_t p1 = static_cast<std::uint64_t>(detail::philox_m1) * c2;
    const std::uint32_t hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const std::uint32_t hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += detail::philox_w0;
    k1 += detail::philox_w1;
  }
  return philox4x32_block{{c0, c1, c2, c3}};
}

/// Where stochastic-rounding bits come from: element i of a span gets the 32-bit word
///   (offset + i) % 4  of  philox4x32_10(counter = {n, n >> 32, stream, 0}, key = {seed, seed >> 32}),
///   n = (offset + i) / 4.
/// They depend only on (seed, stream, offset + i): never on threads, chunking or call order.
struct philox_key {
  std::uint64_t seed = 0;
  std::uint32_t stream = 0;  // e.g. one stream per tensor or per step
  std::uint64_t offset = 0;  // logical index of the span's first element

  friend constexpr bool operator==(const philox_key&, const philox_key&) = default;
};

/// The 32 random bits used for logical element `index` under (seed, stream).
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr std::uint32_t stochastic_bits(std::uint64_t seed, std::uint32_t stream,
                                                                          std::uint64_t index) noexcept {
  const std::uint64_t n = index >> 2;
  const philox4x32_block b =
      philox4x32_10(static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(n >> 32), stream, 0u,
                    static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
  return b.v[index & 3u];
}

}  // namespace safeamp
