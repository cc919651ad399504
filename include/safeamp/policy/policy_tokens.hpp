// Tokens of the policy string grammar (keys with aliases, format names, booleans) and the rule that derives
// unset fields; constexpr so that parse_policy runs at compile time. Used by policy_string.hpp.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "safeamp/error.hpp"
#include "safeamp/format/format_names.hpp"
#include "safeamp/policy/policy_presets.hpp"
#include "safeamp/quoted_input.hpp"

namespace safeamp {
namespace detail {

// ---- keys ---------------------------------------------------------------------------------------
enum class policy_key : std::uint8_t {
  param,
  compute,
  output,
  accumulate,
  gradient,
  master_weights,
  op_matmul,
  op_elementwise,
  op_reduction,
  op_softmax,
  op_normalization,
  op_loss,
  op_optimizer_update,
  preset,
  count
};
inline constexpr std::size_t policy_key_count = static_cast<std::size_t>(policy_key::count);

struct key_alias {
  std::string_view name;
  policy_key key;
};
// The first alias of each key is its canonical (printed) spelling.
inline constexpr std::array<key_alias, 35> policy_key_aliases = {{
    {"params", policy_key::param},
    {"p", policy_key::param},
    {"param", policy_key::param},
    {"parameters", policy_key::param},
    {"compute", policy_key::compute},
    {"c", policy_key::compute},
    {"output", policy_key::output},
    {"o", policy_key::output},
    {"out", policy_key::output},
    {"accumulate", policy_key::accumulate},
    {"a", policy_key::accumulate},
    {"acc", policy_key::accumulate},
    {"accum", policy_key::accumulate},
    {"gradient", policy_key::gradient},
    {"g", policy_key::gradient},
    {"grad", policy_key::gradient},
    {"grads", policy_key::gradient},
    {"gradients", policy_key::gradient},
    {"master_weights", policy_key::master_weights},
    {"m", policy_key::master_weights},
    {"master", policy_key::master_weights},
    {"matmul", policy_key::op_matmul},
    {"mm", policy_key::op_matmul},
    {"gemm", policy_key::op_matmul},
    {"elementwise", policy_key::op_elementwise},
    {"ew", policy_key::op_elementwise},
    {"reduction", policy_key::op_reduction},
    {"softmax", policy_key::op_softmax},
    {"normalization", policy_key::op_normalization},
    {"norm", policy_key::op_normalization},
    {"loss", policy_key::op_loss},
    {"optimizer_update", policy_key::op_optimizer_update},
    {"optimizer", policy_key::op_optimizer_update},
    {"preset", policy_key::preset},
    {"base", policy_key::preset},
}};

inline constexpr std::string_view policy_keys_accepted =
    "params (p, param, parameters), compute (c), output (o, out), accumulate (a, acc, accum), "
    "gradient (g, grad, grads, gradients), master_weights (m, master; true/false), matmul (mm, gemm), "
    "elementwise (ew), reduction, softmax, normalization (norm), loss, optimizer_update (optimizer), "
    "preset (base; a preset name)";

inline constexpr std::string_view policy_formats_accepted = format_names_accepted;

inline constexpr std::string_view policy_bools_accepted = "true, false, yes, no, on, off, 1, 0";

[[nodiscard]] constexpr std::string_view key_name(policy_key k) noexcept {
  for (const key_alias& a : policy_key_aliases) {
    if (a.key == k) return a.name;
  }
  return "?";
}

[[nodiscard]] constexpr bool find_key(std::string_view s, policy_key& out) noexcept {
  for (const key_alias& a : policy_key_aliases) {
    if (name_equal(s, a.name)) {
      out = a.key;
      return true;
    }
  }
  return false;
}

// ---- values -------------------------------------------------------------------------------------
/// Parses a small decimal integer; false when `s` is empty, has a non-digit or is larger than 99.
[[nodiscard]] constexpr bool parse_small_int(std::string_view s, int& out) noexcept {
  if (s.empty() || s.size() > 2) return false;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  out = v;
  return true;
}

/// A format name or alias (case-insensitive, '-' and '_' alike): format_names.hpp's grammar.
[[nodiscard]] constexpr bool find_format(std::string_view s, format_spec& out) noexcept {
  return parse_format_name(s, out);
}

/// The spelling to_string prints for a format; find_format(policy_format_name(f)) == f for every valid f.
[[nodiscard]] inline std::string policy_format_name(format_spec f) { return format_name(f); }

[[nodiscard]] constexpr bool parse_bool(std::string_view s, bool& out) noexcept {
  constexpr std::array<std::string_view, 4> yes = {"true", "yes", "on", "1"};
  constexpr std::array<std::string_view, 4> no = {"false", "no", "off", "0"};
  for (std::string_view y : yes) {
    if (name_equal(s, y)) return out = true, true;
  }
  for (std::string_view n : no) {
    if (name_equal(s, n)) return out = false, true;
  }
  return false;
}

[[nodiscard]] constexpr std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

[[noreturn]] inline void policy_error(std::string_view what, std::string_view value, std::string_view whole,
                                      std::string_view accepted) {
  throw error(std::string(what), quoted_input(value) + " in policy " + quoted_input(whole), std::string(accepted));
}

/// The fields a policy string did not set follow from those it did (see docs/policies.md):
/// compute <- params, output <- compute, gradient <- output, matmul <- compute, elementwise <- output,
/// reduction/softmax/normalization/loss <- fp32, optimizer_update <- fp32 with master weights else params.
[[nodiscard]] constexpr format_spec derived_default(policy_key k, const precision_policy& p) noexcept {
  switch (k) {
    case policy_key::compute:
      return p.param;
    case policy_key::output:
      return p.compute;
    case policy_key::gradient:
      return p.output;
    case policy_key::op_matmul:
      return p.compute;
    case policy_key::op_elementwise:
      return p.output;
    case policy_key::op_optimizer_update:
      return p.master_weights ? fp32 : p.param;
    default:
      return fp32;
  }
}

[[nodiscard]] constexpr format_spec* field_of(policy_key k, precision_policy& p) noexcept {
  switch (k) {
    case policy_key::param:
      return &p.param;
    case policy_key::compute:
      return &p.compute;
    case policy_key::output:
      return &p.output;
    case policy_key::accumulate:
      return &p.accumulate;
    case policy_key::gradient:
      return &p.gradient;
    case policy_key::op_matmul:
      return &p.op_formats[op_class_index(op_class::matmul)];
    case policy_key::op_elementwise:
      return &p.op_formats[op_class_index(op_class::elementwise)];
    case policy_key::op_reduction:
      return &p.op_formats[op_class_index(op_class::reduction)];
    case policy_key::op_softmax:
      return &p.op_formats[op_class_index(op_class::softmax)];
    case policy_key::op_normalization:
      return &p.op_formats[op_class_index(op_class::normalization)];
    case policy_key::op_loss:
      return &p.op_formats[op_class_index(op_class::loss)];
    case policy_key::op_optimizer_update:
      return &p.op_formats[op_class_index(op_class::optimizer_update)];
    default:
      return nullptr;
  }
}

// Order in which derived defaults are resolved (each depends only on earlier ones).
inline constexpr std::array<policy_key, 12> policy_resolution_order = {
    policy_key::param,      policy_key::compute,          policy_key::output,         policy_key::accumulate,
    policy_key::gradient,   policy_key::op_matmul,        policy_key::op_elementwise, policy_key::op_reduction,
    policy_key::op_softmax, policy_key::op_normalization, policy_key::op_loss,        policy_key::op_optimizer_update};

}  // namespace detail

}  // namespace safeamp
