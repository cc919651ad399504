// `safeamp plan`: the configuration a measurement ran with (--measured-policy, --measured-recompute), on which
// --measured-peak and --measured-sps calibrate the model; by default the one policy and the one mode planned.
#pragma once

#include <string>

#include "plan_request_types.hpp"

namespace safeamp::tool {

/// The policy --measured-sps and --measured-peak ran with: --measured-policy, or the one policy planned (--policy,
/// bf16-mixed by default, without --window; with it --policy or a --policies of one). A planner of several policies
/// (--policies, or every preset) does not know which one was measured: refused, naming them.
inline void resolve_measured_policy(const plan_values& v, plan_request& r) {
  const plan_value_reader in{v};
  r.measured_policy = r.policy_name;
  r.measured_policy_value = r.policy;
  if (const std::string* s = in.get("measured-policy")) {
    r.measured_policy_value = parse_policy_arg("measured-policy", *s);
    r.measured_policy = *s;
    return;
  }
  const char* key = r.measured_peak_bytes > 0 ? "measured-peak" : r.measured_sps > 0.0 ? "measured-sps" : nullptr;
  if (key == nullptr || r.window_seconds <= 0.0 || r.policy_given) return;
  if (r.policy_names.size() == 1) {
    r.measured_policy = r.policy_names.front();
    r.measured_policy_value = parse_policy_arg("policies", r.measured_policy);
    return;
  }
  std::string planned = "every preset (no --policy or --policies)";
  if (!r.policy_names.empty()) {
    planned = std::to_string(r.policy_names.size()) + " policies (";
    for (std::size_t i = 0; i < r.policy_names.size(); ++i) {
      planned += (i > 0 ? ", " : "") + bounded_input(r.policy_names[i], 40);
    }
    planned += ")";
  }
  throw error(key, quoted_input(*in.get(key)) + " with " + planned + " planned",
              "--measured-policy P, the policy the measurement ran with (it calibrates every candidate), or one "
              "policy planned (--policy P or --policies P)");
}

/// The recompute mode --measured-sps and --measured-peak ran with: --measured-recompute, or --recompute (none when
/// not given, as the planner then tries every mode but a measurement ran with one). Until 2026-12 it was always
/// --recompute's, so a peak measured with full recomputation was set against the model's peak without it. Refused
/// without a measurement (it would change nothing) and, selective, without a transformer shape (the step time then
/// knows only none and full). Call after --recompute, the shape and the measurements are resolved.
inline void resolve_measured_recompute(const plan_values& v, plan_request& r) {
  const plan_value_reader in{v};
  r.measured_recompute = r.mode;
  const std::string* s = in.get("measured-recompute");
  if (s == nullptr) return;
  if (r.measured_peak_bytes == 0 && r.measured_sps <= 0.0) {
    throw error("measured-recompute", quoted_input(*s),
                "only with --measured-sps or --measured-peak (the recompute mode the measurement ran with)");
  }
  try {
    r.measured_recompute = parse_recompute(*s);
  } catch (const error&) {
    throw error("measured-recompute", quoted_input(*s), "none, selective, full (as --recompute takes them)");
  }
  if (r.measured_recompute == recompute::selective && !r.shape) {
    throw error("measured-recompute", quoted_input(*s) + " without a transformer shape",
                "none or full (selective recomputes the attention core, which only a shape has)");
  }
}

}  // namespace safeamp::tool
