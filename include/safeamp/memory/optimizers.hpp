// Optimizers as the memory ledger sees them: the kind (the states it keeps per parameter) and how its update runs
// (foreach or fused, which decides the temporaries of the optimizer step), with their parsers.
#pragma once

#include <cctype>
#include <cstdint>
#include <string>
#include <string_view>

#include "safeamp/error.hpp"
#include "safeamp/quoted_input.hpp"

namespace safeamp {

/// Optimizers by the state they keep per parameter.
///  sgd:           none.
///  sgd_momentum:  one momentum buffer.
///  adam (AdamW):  momentum and variance (Kingma & Ba 2015).
///  adam_8bit:     momentum and variance quantized to 1 byte each (Dettmers et al. 2022, bitsandbytes), plus
///                 one fp32 absmax per 2048-value block per state (negligible, but counted).
enum class optimizer_kind : std::uint8_t { sgd, sgd_momentum, adam, adam_8bit };

[[nodiscard]] constexpr std::string_view to_string(optimizer_kind o) noexcept {
  switch (o) {
    case optimizer_kind::sgd:
      return "sgd";
    case optimizer_kind::sgd_momentum:
      return "sgd-momentum";
    case optimizer_kind::adam:
      return "adamw";
    case optimizer_kind::adam_8bit:
      return "adam-8bit";
  }
  return "?";
}

/// "sgd", "sgd-momentum" (or "momentum"), "adam"/"adamw", "adam-8bit"/"adam8bit"/"8bit-adam"; throws otherwise.
[[nodiscard]] inline optimizer_kind parse_optimizer(std::string_view name) {
  std::string s;
  for (char c : name) {
    if (c == '_' || c == ' ') c = '-';
    s.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  if (s == "sgd") return optimizer_kind::sgd;
  if (s == "sgd-momentum" || s == "momentum" || s == "sgdm") return optimizer_kind::sgd_momentum;
  if (s == "adam" || s == "adamw") return optimizer_kind::adam;
  if (s == "adam-8bit" || s == "adam8bit" || s == "8bit-adam" || s == "adamw-8bit" || s == "adamw8bit") {
    return optimizer_kind::adam_8bit;
  }
  throw error("optimizer", quoted_input(name), "sgd, sgd-momentum, adamw (adam), adam-8bit");
}

/// How the optimizer's update is executed, which decides the temporaries of the optimizer step.
///  foreach: PyTorch's multi-tensor path, the default on CUDA (torch/optim/adam.py `_multi_tensor_adam`):
///           `exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs)` allocates a copy of every second moment
///           at once (one state's worth of bytes per parameter) before the update is applied.
///  fused:   one kernel updates parameters and moments in place (`fused=True`, `_fused_adamw_`): no temporaries.
/// bitsandbytes' 8-bit optimizers update their quantized states in place (blockwise kernels) whatever is asked,
/// and plain SGD (no momentum, no weight decay) updates in place: both have no temporaries.
enum class optimizer_impl : std::uint8_t { foreach, fused };

[[nodiscard]] constexpr std::string_view to_string(optimizer_impl i) noexcept {
  return i == optimizer_impl::foreach ? "foreach" : "fused";
}

/// "foreach" (PyTorch's default on CUDA) or "fused"; throws otherwise.
[[nodiscard]] inline optimizer_impl parse_optimizer_impl(std::string_view name) {
  if (name == "foreach") return optimizer_impl::foreach;
  if (name == "fused") return optimizer_impl::fused;
  throw error("optimizer-impl", quoted_input(name),
              "foreach (PyTorch's default on CUDA: a temporary copy of a moment buffer) or fused (fused=True: none)");
}

}  // namespace safeamp
