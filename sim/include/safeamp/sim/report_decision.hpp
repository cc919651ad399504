// The decision and profile sections of the sim report. Decision: per candidate, the model-state memory it saves
// against the reference per the memory ledger, its GEMM time against the reference per the roofline on the
// target card, and its quality cost and risk (verdict, skipped steps, the smallest headroom of any decided
// check), ending in one recommended policy. Profile: where the simulator's step time went, per phase.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "safeamp/sim/parity.hpp"
#include "safeamp/sim/run_result.hpp"

namespace safeamp::sim {

struct sim_summary;

/// The card the decision's time column is estimated on: the target user's 24 GB card.
inline constexpr const char* decision_device = "RTX 4090";

struct decision_row {
  std::string name;
  std::string policy;
  verdict outcome = verdict::fail;
  bool has_faults = false;                  // injected faults: a robustness test, not a policy to choose
  std::uint64_t parameters = 0;             // from the run's per-parameter gradient counters
  double state_bytes = 0.0;                 // model_states_for(parameters, policy).total_bytes()
  double reference_state_bytes = 0.0;       // the same for the reference policy
  double activation_bytes = 0.0;            // run.activation_elements x storage bytes of policy.output
  double reference_activation_bytes = 0.0;  // the same elements in the reference's output format
  double memory_saved_fraction = 0.0;       // 1 - (states + activations) / (reference states + activations)
  double gemm_time_ratio = 0.0;             // peak(reference compute) / peak(candidate compute) on decision_device
  double skip_fraction = 0.0;               // skipped steps / steps
  double min_headroom = 0.0;                // min over decided checks with a limit > 0 of (limit - value) / limit
  std::string headroom_check;               // the check with that headroom
};

struct policy_decision {
  std::vector<decision_row> rows;
  std::string recommended;  // a candidate's name, or the reference policy when no candidate qualifies
  std::string reason;       // one sentence: why that one
};

/// Recommendation: among candidates that PASS and have no injected faults, the one that saves the most memory;
/// ties (within 1 % of the reference's state bytes) go to the faster GEMM estimate, then the larger headroom,
/// then fewer skipped steps. Without such a candidate, the reference policy.
[[nodiscard]] policy_decision decide_policy(const sim_summary& s);

/// Mean seconds per step of each phase (run.phases divided by its step count; zeros when no step was timed).
struct phase_share {
  const char* name;        // "forward (GEMMs and layer ops)"
  const char* short_name;  // "forward": the chart's axis label and the summary.json key
  double seconds_per_step;
};
[[nodiscard]] std::vector<phase_share> phase_means(const step_phase_seconds& p);

/// HTML sections (with ids "decision" and "profile").
[[nodiscard]] std::string render_decision_html(const sim_summary& s);
[[nodiscard]] std::string render_profile_html(const sim_summary& s);

}  // namespace safeamp::sim
