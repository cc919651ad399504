// The named precision policies (constexpr values) and lookup by name. Each preset's rationale is one line
// here and in docs/policies.md.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "safeamp/error.hpp"
#include "safeamp/policy/policy_value.hpp"
#include "safeamp/quoted_input.hpp"

namespace safeamp {
namespace presets {

/// Everything in fp32: the reference every other policy is compared against.
inline constexpr precision_policy fp32{};

/// fp32 storage, matmuls on TF32 tensor cores (10-bit mantissa inputs, fp32 accumulate): fp32's range, so no
/// loss scaling; only matmul inputs lose precision.
inline constexpr precision_policy tf32{.param = safeamp::fp32,
                                       .compute = safeamp::tf32,
                                       .output = safeamp::fp32,
                                       .accumulate = safeamp::fp32,
                                       .gradient = safeamp::fp32,
                                       .master_weights = false,
                                       .op_formats = {safeamp::tf32, safeamp::fp32, safeamp::fp32, safeamp::fp32,
                                                      safeamp::fp32, safeamp::fp32, safeamp::fp32}};

/// Autocast-like bf16: fp32 parameters, bf16 matmuls and activations, softmax/norms/reductions/loss in fp32.
/// bf16 has fp32's exponent range, so gradients need no loss scaling.
inline constexpr precision_policy bf16_mixed{.param = safeamp::fp32,
                                             .compute = safeamp::bf16,
                                             .output = safeamp::bf16,
                                             .accumulate = safeamp::fp32,
                                             .gradient = safeamp::bf16,
                                             .master_weights = false,
                                             .op_formats = {safeamp::bf16, safeamp::bf16, safeamp::fp32, safeamp::fp32,
                                                            safeamp::fp32, safeamp::fp32, safeamp::fp32}};

/// Autocast-like fp16: as bf16_mixed but in fp16, whose 5-bit exponent underflows small gradients, so a
/// dynamic loss scale is required.
inline constexpr precision_policy fp16_mixed{.param = safeamp::fp32,
                                             .compute = safeamp::fp16,
                                             .output = safeamp::fp16,
                                             .accumulate = safeamp::fp32,
                                             .gradient = safeamp::fp16,
                                             .master_weights = false,
                                             .op_formats = {safeamp::fp16, safeamp::fp16, safeamp::fp32, safeamp::fp32,
                                                            safeamp::fp32, safeamp::fp32, safeamp::fp32}};

/// Pure fp16 model (parameters stored in fp16, half the weight memory) with an fp32 master copy that the
/// optimizer updates, so small updates are not lost to fp16 rounding; needs loss scaling.
inline constexpr precision_policy fp16_pure_master{
    .param = safeamp::fp16,
    .compute = safeamp::fp16,
    .output = safeamp::fp16,
    .accumulate = safeamp::fp32,
    .gradient = safeamp::fp16,
    .master_weights = true,
    .op_formats = {safeamp::fp16, safeamp::fp16, safeamp::fp32, safeamp::fp32, safeamp::fp32, safeamp::fp32,
                   safeamp::fp32}};

/// Transformer-Engine-like HYBRID fp8: matmul inputs in E4M3 (more precision) forward, gradients in E5M2
/// (more range) backward, bf16 activations, fp32 parameters and accumulation; per-tensor delayed scaling.
inline constexpr precision_policy fp8_hybrid{
    .param = safeamp::fp32,
    .compute = safeamp::fp8_e4m3,
    .output = safeamp::bf16,
    .accumulate = safeamp::fp32,
    .gradient = safeamp::fp8_e5m2,
    .master_weights = false,
    .op_formats = {safeamp::fp8_e4m3, safeamp::bf16, safeamp::fp32, safeamp::fp32, safeamp::fp32, safeamp::fp32,
                   safeamp::fp32}};

}  // namespace presets

struct named_policy {
  std::string_view name;
  precision_policy policy;
};

/// The presets in the order the docs list them; names are the policy-string spelling.
inline constexpr std::array<named_policy, 6> policy_presets = {{
    {"fp32", presets::fp32},
    {"tf32", presets::tf32},
    {"bf16-mixed", presets::bf16_mixed},
    {"fp16-mixed", presets::fp16_mixed},
    {"fp16-pure-master", presets::fp16_pure_master},
    {"fp8-hybrid", presets::fp8_hybrid},
}};

inline constexpr std::string_view policy_preset_names =
    "fp32, tf32, bf16-mixed, fp16-mixed, fp16-pure-master, fp8-hybrid";

namespace detail {
[[nodiscard]] constexpr char ascii_lower(char c) noexcept {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}
/// Case-insensitive equality where '_' and '-' are the same character.
[[nodiscard]] constexpr bool name_equal(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    char x = ascii_lower(a[i]);
    char y = ascii_lower(b[i]);
    if (x == '_') x = '-';
    if (y == '_') y = '-';
    if (x != y) return false;
  }
  return true;
}
}  // namespace detail

/// The preset called `name` (case-insensitive, '_' and '-' alike); nullptr-free: returns false if unknown.
[[nodiscard]] constexpr bool find_policy_preset(std::string_view name, precision_policy& out) noexcept {
  for (const named_policy& p : policy_presets) {
    if (detail::name_equal(name, p.name)) {
      out = p.policy;
      return true;
    }
  }
  return false;
}

/// The preset called `name`; throws safeamp::error listing the preset names when it is unknown.
[[nodiscard]] inline precision_policy preset_by_name(std::string_view name) {
  precision_policy p;
  if (!find_policy_preset(name, p)) {
    throw error("policy preset", quoted_input(name), std::string(policy_preset_names));
  }
  return p;
}

/// The preset name of `p`, or an empty view when `p` is not exactly a preset.
[[nodiscard]] constexpr std::string_view preset_name_of(const precision_policy& p) noexcept {
  for (const named_policy& n : policy_presets) {
    if (n.policy == p) return n.name;
  }
  return {};
}

}  // namespace safeamp
