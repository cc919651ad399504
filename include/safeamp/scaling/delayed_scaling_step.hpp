// FP8 delayed scaling as plain data that a one-thread kernel can advance: the state of one tensor, a window of
// the previous L-1 amaxes kept as a ring in caller memory (device memory on a GPU), and delayed_scaling_step,
// which does what delayed_scaling::update() does (fp8_delayed_scaling.hpp, its CPU reference: the same scale,
// inverse scale, counters and window, bit for bit). amax_fold is the per-element step of the amax kernels. A state
// and its ring are saved and restored (ring position included) by snapshot_of and restore in fp8_checkpoint.hpp.
#pragma once

#include <cstdint>

#include "safeamp/config.hpp"
#include "safeamp/scaling/fp8_delayed_scaling.hpp"
#include "safeamp/scaling/scaler_config.hpp"

namespace safeamp {

/// Float bits of a canonical quiet NaN: above +inf (0x7F800000) when non-negative float bits are compared as
/// integers, so a NaN observation wins every max and stays for the step.
inline constexpr std::uint32_t amax_nan_bits = 0x7FC00000u;

/// max(acc, |x|) on float bits (|x| non-negative, so integer order is float order); any NaN -> amax_nan_bits.
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr std::uint32_t amax_fold(std::uint32_t acc, float x) noexcept {
  std::uint32_t b = safeamp::bit_cast<std::uint32_t>(x) & 0x7FFFFFFFu;
  if (b > 0x7F800000u) b = amax_nan_bits;
  return b > acc ? b : acc;
}

/// What the step needs of a validated delayed_scaling_config, precomputed on the host.
struct delayed_scaling_params {
  float scaled_max = 448.0f;  // max_finite(format) / 2^margin
  std::int32_t history_length = 1024;  // in [1, 2^20] (validate), so ring indices stay below 2^21
  amax_algorithm algorithm = amax_algorithm::max;
};

/// Validates `cfg` (safeamp::error) and precomputes the step's parameters.
[[nodiscard]] inline delayed_scaling_params make_delayed_scaling_params(const delayed_scaling_config& cfg) {
  validate(cfg);
  // 2^-margin as float bits: exact for margin in [0, 126], so the product is the exact quotient.
  const float inv_pow2 = safeamp::bit_cast<float>(static_cast<std::uint32_t>(127 - cfg.margin) << 23);
  return {.scaled_max = max_finite(cfg.format) * inv_pow2,
          .history_length = cfg.history_length,
          .algorithm = cfg.algorithm};
}

struct delayed_scaling_state {
  std::uint32_t amax_bits = 0;     // this step's amax (float bits, folded with amax_fold); 0: not used yet
  float scale = 1.0f;              // the scale for the next step: scaled_max / amax
  float scale_inv = 1.0f;          // 1 / scale: an fp8 GEMM's per-tensor scale pointer points here
  std::int32_t window_count = 0;   // amaxes in the window, <= history_length - 1
  std::int32_t window_oldest = 0;  // ring index of the oldest amax
  std::int32_t padding = 0;        // always 0
  delayed_scaling_counters counters{};
  friend constexpr bool operator==(const delayed_scaling_state&, const delayed_scaling_state&) = default;
};

/// Ends a step: this step's amax enters the window (ring of history_length - 1 floats at `window`) and the
/// scale for the next step is computed. amax 0: tensor unused (nothing rolled, scale kept); inf/NaN: scale
/// kept, counted, window untouched; an infinite quotient is clamped to FLT_MAX.
SAFEAMP_HOST_DEVICE constexpr void delayed_scaling_step(const delayed_scaling_params& p, delayed_scaling_state& s,
                                                        float* window) noexcept {
  ++s.counters.updates;
  const std::uint32_t bits = s.amax_bits;
  s.amax_bits = 0;
  if (bits == 0) {
    ++s.counters.unused_steps;
    return;
  }
  if (bits > 0x7F7FFFFFu) {  // inf or NaN
    ++s.counters.non_finite_amax;
    return;
  }
  const float last = safeamp::bit_cast<float>(bits);
  const std::int32_t keep = p.history_length - 1;
  float amax = last;
  if (p.algorithm == amax_algorithm::max) {
    for (std::int32_t i = 0; i < s.window_count; ++i) {
      const float h = window[(s.window_oldest + i) % keep];
      amax = h > amax ? h : amax;
    }
  }
  if (keep > 0) {
    if (s.window_count == keep) {  // full: the newest replaces the oldest
      window[s.window_oldest] = last;
      s.window_oldest = (s.window_oldest + 1) % keep;
    } else {
      window[(s.window_oldest + s.window_count) % keep] = last;
      ++s.window_count;
    }
  }
  float scale = p.scaled_max / amax;
  if (!(scale <= float_max)) {  // +inf (amax is finite and > 0, so never NaN)
    scale = float_max;
    ++s.counters.clamped_scales;
  }
  s.scale = scale;
  s.scale_inv = 1.0f / scale;
}

}  // namespace safeamp
