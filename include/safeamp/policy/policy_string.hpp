// The policy string grammar: parse_policy("params=fp32,compute=bf16,output=fp32") and to_string(policy).
// Short keys and aliases are accepted, spaces tolerated, errors name the bad key or value and list what is
// accepted; printing then parsing gives the same policy. Parsing is constexpr, so a string can produce a
// policy used as a template argument. The grammar is documented in docs/policies.md.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "safeamp/error.hpp"
#include "safeamp/format/block_names.hpp"
#include "safeamp/format/format_names.hpp"
#include "safeamp/policy/policy_presets.hpp"
#include "safeamp/policy/policy_tokens.hpp"

namespace safeamp {

/// Parses a policy string. Forms:
///   "fp16-mixed"                                  a preset name
///   "bf16"                                        a bare format: params, compute, output in that format
///   "params=fp32,compute=fp16,output=fp16"        keys (aliases allowed); unset fields are derived
///   "preset=fp16-mixed,softmax=fp16"              a preset with some fields overridden (a compute given without
///                                                 matmul sets matmul too: GEMMs read format_for(matmul))
///   "preset=bf16-mixed,matmul=mxfp8"              block-scaled matmul inputs: mxfp8 (_e5m2), mxfp6 (_e3m2),
///                                                 mxfp4, nvfp4 (blocks along K; the matmul format is the element)
/// Throws safeamp::error naming the bad key or value and listing the accepted ones.
[[nodiscard]] constexpr precision_policy parse_policy(std::string_view text) {
  using detail::policy_key;
  const std::string_view whole = detail::trim(text);
  if (whole.empty())
    detail::policy_error("policy", text, text,
                         "a preset name (" + std::string(policy_preset_names) +
                             ") or key=value pairs: " + std::string(detail::policy_keys_accepted));
  precision_policy result;
  if (find_policy_preset(whole, result)) return result;
  format_spec bare{};
  if (detail::find_format(whole, bare)) {
    result.param = bare;
    result.compute = bare;
    result.output = bare;
    result.master_weights = false;
    std::array<bool, detail::policy_key_count> unset_all{};
    unset_all[static_cast<std::size_t>(policy_key::param)] = true;
    unset_all[static_cast<std::size_t>(policy_key::compute)] = true;
    unset_all[static_cast<std::size_t>(policy_key::output)] = true;
    for (policy_key k : detail::policy_resolution_order) {
      if (!unset_all[static_cast<std::size_t>(k)]) *detail::field_of(k, result) = detail::derived_default(k, result);
    }
    return result;
  }

  std::array<bool, detail::policy_key_count> set{};
  std::array<format_spec, detail::policy_key_count> values{};
  bool master = false;
  bool has_preset = false;
  block_format matmul_blocks = no_block_scaling;
  bool blocks_set = false;
  precision_policy base;
  std::string_view rest = whole;
  while (true) {
    const std::size_t comma = rest.find(',');
    const std::string_view item = detail::trim(rest.substr(0, comma));
    const std::size_t eq = item.find('=');
    if (item.empty()) detail::policy_error("policy item", item, whole, "key=value items separated by single commas");
    if (eq == std::string_view::npos) {
      detail::policy_error("policy item", item, whole,
                           "key=value (keys: " + std::string(detail::policy_keys_accepted) +
                               "), or the whole string "
                               "a preset name (" +
                               std::string(policy_preset_names) + ") or a format name");
    }
    const std::string_view key_text = detail::trim(item.substr(0, eq));
    const std::string_view value_text = detail::trim(item.substr(eq + 1));
    policy_key key{};
    if (!detail::find_key(key_text, key))
      detail::policy_error("policy key", key_text, whole, detail::policy_keys_accepted);
    const std::size_t ki = static_cast<std::size_t>(key);
    if (set[ki]) detail::policy_error("policy key given twice", key_text, whole, "each key at most once");
    set[ki] = true;
    if (key == policy_key::preset) {
      if (!find_policy_preset(value_text, base)) {
        detail::policy_error("policy value of preset", value_text, whole, policy_preset_names);
      }
      has_preset = true;
    } else if (key == policy_key::master_weights) {
      if (!detail::parse_bool(value_text, master)) {
        detail::policy_error("policy value of master_weights", value_text, whole, detail::policy_bools_accepted);
      }
    } else if (key == policy_key::op_matmul && detail::parse_block_format_name(value_text, matmul_blocks)) {
      values[ki] = matmul_blocks.element;
      blocks_set = true;
    } else if (!detail::find_format(value_text, values[ki])) {
      detail::policy_error("policy value of " + std::string(detail::key_name(key)), value_text, whole,
                           key == policy_key::op_matmul
                               ? std::string(detail::policy_formats_accepted) +
                                     ", or a block format: " + std::string(block_format_names_accepted)
                               : std::string(detail::policy_formats_accepted));
    }
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }

  result = has_preset ? base : precision_policy{};
  if (set[static_cast<std::size_t>(policy_key::master_weights)]) result.master_weights = master;
  // A matmul format given alone replaces a preset's block scaling; a block format sets it.
  if (set[static_cast<std::size_t>(policy_key::op_matmul)])
    result.matmul_blocks = blocks_set ? matmul_blocks : no_block_scaling;
  // After a preset, a compute given without matmul carries matmul with it: compute is read by nothing but the
  // derivation of matmul (every GEMM reads format_for(matmul)), so alone it would change nothing that runs.
  const bool matmul_follows = has_preset && set[static_cast<std::size_t>(policy_key::compute)] &&
                              !set[static_cast<std::size_t>(policy_key::op_matmul)];
  if (matmul_follows) result.matmul_blocks = no_block_scaling;
  for (policy_key k : detail::policy_resolution_order) {
    const std::size_t ki = static_cast<std::size_t>(k);
    if (set[ki]) {
      *detail::field_of(k, result) = values[ki];
    } else if (!has_preset || (k == policy_key::op_matmul && matmul_follows)) {
      *detail::field_of(k, result) = detail::derived_default(k, result);
    }
  }
  return result;
}

/// Every field spelled out with canonical keys, e.g. "params=fp32,compute=fp16,...,optimizer_update=fp32".
[[nodiscard]] inline std::string to_full_string(const precision_policy& p) {
  using detail::policy_key;
  std::string s;
  for (policy_key k : detail::policy_resolution_order) {
    precision_policy copy = p;
    if (!s.empty()) s += ',';
    s += std::string(detail::key_name(k)) + "=" +
         (k == policy_key::op_matmul && is_block_scaled(p.matmul_blocks)
              ? block_format_name(p.matmul_blocks)
              : detail::policy_format_name(*detail::field_of(k, copy)));
    if (k == policy_key::gradient) s += std::string(",master_weights=") + (p.master_weights ? "true" : "false");
  }
  return s;
}

/// The shortest canonical spelling: the preset name when `p` is a preset, else params, compute and output
/// followed by only those keys whose value differs from what parsing would derive. parse_policy(to_string(p)) == p.
[[nodiscard]] inline std::string to_string(const precision_policy& p) {
  using detail::policy_key;
  if (const std::string_view name = preset_name_of(p); !name.empty()) return std::string(name);
  std::string s;
  precision_policy copy = p;
  for (policy_key k : detail::policy_resolution_order) {
    const format_spec v = *detail::field_of(k, copy);
    const bool always = k == policy_key::param || k == policy_key::compute || k == policy_key::output;
    const bool blocks = k == policy_key::op_matmul && is_block_scaled(p.matmul_blocks);
    if (always || blocks || v != detail::derived_default(k, p)) {
      if (!s.empty()) s += ',';
      s += std::string(detail::key_name(k)) + "=" +
           (blocks ? block_format_name(p.matmul_blocks) : detail::policy_format_name(v));
    }
    if (k == policy_key::gradient && p.master_weights) s += ",master_weights=true";
  }
  return s;
}

}  // namespace safeamp
