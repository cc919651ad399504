// Scaler presets reproducing the anchors' documented update rules step for step (sources and the one
// deliberate difference of each are in docs/loss_scaling.md), and lookup by name.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "safeamp/error.hpp"
#include "safeamp/policy/policy_presets.hpp"
#include "safeamp/quoted_input.hpp"
#include "safeamp/scaling/scaler_config.hpp"

namespace safeamp::scaler_presets {

/// torch.amp.GradScaler defaults: 2^16, x2, x0.5, every 2000 clean steps, no hysteresis, isfinite guard on
/// growth. Difference: PyTorch has no floor (the scale can reach exactly 0 and never recover); here the
/// floor is the smallest normal float 2^-126, so every trace above 2^-126 is identical.
inline constexpr scaler_config pytorch{.init_scale = 65536.0f,
                                       .growth_factor = 2.0,
                                       .backoff_factor = 0.5,
                                       .growth_interval = 2000,
                                       .hysteresis = 1,
                                       .mode = hysteresis_mode::consecutive,
                                       .min_scale = float_min_normal,
                                       .max_scale = float_max,
                                       .max_overflows_at_min = 0};

/// DeepSpeed fp16 from a JSON config with the usual keys (initial_scale_power 16, loss_scale_window 1000,
/// hysteresis 2, consecutive_hysteresis false, min_loss_scale 1), DynamicLossScaler semantics: hysteresis
/// refilled only at growth, max(s/2, 1), and raise_error_at_min_scale (an overflow at the floor is an error:
/// K = 1). Difference: growth that would pass FLT_MAX is refused (DeepSpeed's Python scale has no cap).
inline constexpr scaler_config deepspeed{.init_scale = 65536.0f,
                                         .growth_factor = 2.0,
                                         .backoff_factor = 0.5,
                                         .growth_interval = 1000,
                                         .hysteresis = 2,
                                         .mode = hysteresis_mode::since_growth,
                                         .min_scale = 1.0f,
                                         .max_scale = float_max,
                                         .max_overflows_at_min = 1};

/// DeepSpeed with "consecutive_hysteresis": true (PR #3553): every clean step refills the hysteresis.
inline constexpr scaler_config deepspeed_consecutive{.init_scale = 65536.0f,
                                                     .growth_factor = 2.0,
                                                     .backoff_factor = 0.5,
                                                     .growth_interval = 1000,
                                                     .hysteresis = 2,
                                                     .mode = hysteresis_mode::consecutive,
                                                     .min_scale = 1.0f,
                                                     .max_scale = float_max,
                                                     .max_overflows_at_min = 1};

/// Megatron-LM DynamicGradScaler as built by its optimizer factory: 2^32, x2, x0.5, window 1000, hysteresis 2
/// refilled only at growth, floor 1. Difference: Megatron grows a float32 scale without a guard, so it can
/// become inf and stay inf; here growth past FLT_MAX is refused (the tracker still resets).
inline constexpr scaler_config megatron{.init_scale = 4294967296.0f,
                                        .growth_factor = 2.0,
                                        .backoff_factor = 0.5,
                                        .growth_interval = 1000,
                                        .hysteresis = 2,
                                        .mode = hysteresis_mode::since_growth,
                                        .min_scale = 1.0f,
                                        .max_scale = float_max,
                                        .max_overflows_at_min = 0};

/// NeMo's GradScaler on Apex's update_scale_hysteresis kernel (device-side, consecutive hysteresis, isfinite
/// guard): 2^16, x2, x0.5, 2000, with hysteresis 2 as NeMo's GPT configs set it (the class default 1 is
/// identical to `pytorch`). Difference: the kernel has no floor (the scale can reach 0); floor 2^-126 here.
inline constexpr scaler_config nemo{.init_scale = 65536.0f,
                                    .growth_factor = 2.0,
                                    .backoff_factor = 0.5,
                                    .growth_interval = 2000,
                                    .hysteresis = 2,
                                    .mode = hysteresis_mode::consecutive,
                                    .min_scale = float_min_normal,
                                    .max_scale = float_max,
                                    .max_overflows_at_min = 0};

/// safeamp's own default: PyTorch's numbers with a floor of 1 (the floor pytorch#99640 asks for).
inline constexpr scaler_config safeamp_default{};

struct named_scaler_config {
  std::string_view name;
  scaler_config config;
};

inline constexpr std::array<named_scaler_config, 6> all = {{
    {"default", safeamp_default},
    {"pytorch", pytorch},
    {"deepspeed", deepspeed},
    {"deepspeed-consecutive", deepspeed_consecutive},
    {"megatron", megatron},
    {"nemo", nemo},
}};

inline constexpr std::string_view names = "default, pytorch, deepspeed, deepspeed-consecutive, megatron, nemo";

/// The preset called `name` (case-insensitive, '_' and '-' alike); throws safeamp::error listing the names.
[[nodiscard]] inline scaler_config by_name(std::string_view name) {
  for (const named_scaler_config& p : all) {
    if (safeamp::detail::name_equal(name, p.name)) return p.config;
  }
  throw error("scaler preset", quoted_input(name), std::string(names));
}

}  // namespace safeamp::scaler_presets
