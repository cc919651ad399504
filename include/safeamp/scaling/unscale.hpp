// Gradient passes of a scaled step: the fused unscale-and-check (one pass multiplies by 1/scale and detects
// inf/NaN; a copy per kernel path, chosen at run time), and the separate check and scale passes it replaces (kept as
// baselines and for callers that need them). Each pass is noexcept and branch-free per element so that it vectorises.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "safeamp/config.hpp"
#include "safeamp/format/cpu_path.hpp"

namespace safeamp {

/// f32(1 / double(scale)), as PyTorch computes the inverse it multiplies gradients by.
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr float inverse_scale(float scale) noexcept {
  return static_cast<float>(1.0 / static_cast<double>(scale));
}

namespace detail {
inline constexpr std::uint32_t float_exponent_mask = 0x7F800000u;
/// 1 when the float's exponent field is all ones (inf or NaN), else 0.
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr std::uint32_t non_finite_bit(float v) noexcept {
  return (safeamp::bit_cast<std::uint32_t>(v) & float_exponent_mask) == float_exponent_mask ? 1u : 0u;
}
}  // namespace detail

namespace detail {
/// The unscale-and-check loop; inlined into one copy per instruction set (a multiply is the same IEEE operation
/// on every one, so every copy gives the same bits).
#if defined(__GNUC__) && !defined(__CUDACC__)
[[gnu::always_inline]]
#endif
inline std::uint32_t
unscale_loop(float* p, std::size_t n, float inv_scale) noexcept {
  std::uint32_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const float y = p[i] * inv_scale;
    p[i] = y;
    bad |= non_finite_bit(y);
  }
  return bad;
}
#if defined(SAFEAMP_X86_KERNELS)
__attribute__((target("avx2"), noinline)) inline std::uint32_t unscale_avx2(float* p, std::size_t n,
                                                                            float inv_scale) noexcept {
  return unscale_loop(p, n, inv_scale);
}
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"), noinline)) inline std::uint32_t unscale_avx512(
    float* p, std::size_t n, float inv_scale) noexcept {
  return unscale_loop(p, n, inv_scale);
}
#endif
}  // namespace detail

namespace detail {
/// unscale_and_check on a given kernel path (every path gives the same bits; the tests compare them). The caller
/// makes sure the CPU runs the path (cpu_path_supported).
[[nodiscard]] inline bool unscale_and_check_on(cpu_path path, std::span<float> g, float inv_scale) noexcept {
#if defined(SAFEAMP_X86_KERNELS)
  switch (path) {
    case cpu_path::avx512:
      return unscale_avx512(g.data(), g.size(), inv_scale) != 0;
    case cpu_path::avx2:
      return unscale_avx2(g.data(), g.size(), inv_scale) != 0;
    case cpu_path::portable:
      break;
  }
#endif
  (void)path;
  return unscale_loop(g.data(), g.size(), inv_scale) != 0;
}
}  // namespace detail

/// g[i] *= inv_scale in place; true when any result is inf or NaN. The result is checked (not the input),
/// so a finite gradient that overflows when unscaled by a scale below 1 also counts as an overflow.
/// Runs the copy of the loop compiled for the CPU's kernel path (format/cpu_path.hpp).
[[nodiscard]] inline bool unscale_and_check(std::span<float> g, float inv_scale) noexcept {
  return detail::unscale_and_check_on(detail::kernel_path(), g, inv_scale);
}

/// True when any element is inf or NaN (the separate check pass).
[[nodiscard]] inline bool has_non_finite(std::span<const float> g) noexcept {
  std::uint32_t bad = 0;
  for (const float v : g) bad |= detail::non_finite_bit(v);
  return bad != 0;
}

/// g[i] *= factor in place (the separate scale pass).
inline void scale_in_place(std::span<float> g, float factor) noexcept {
  for (float& v : g) v *= factor;
}

}  // namespace safeamp
