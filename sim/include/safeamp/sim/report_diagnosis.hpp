// The "why" of a verdict: a diagnosis computed from one candidate's recorded steps and gate checks (gradient
// underflow per layer and when it began, overflow and skipped steps against the injected faults, the scale
// trajectory, the first failed check and by how much) ending in the scenario field that is the likely cause.
// Shown at the top of the report, in the terminal summary and in summary.json.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "safeamp/scaling/scaler_config.hpp"
#include "safeamp/sim/parity.hpp"
#include "safeamp/sim/run_config.hpp"
#include "safeamp/sim/run_result.hpp"

namespace safeamp::sim {

/// A layer (or the loss gradient) loses "significantly" to underflow when at least this fraction of its
/// gradient elements, over all steps, were finite and nonzero before the gradient cast and zero after it. A
/// reporting threshold, not a gate limit: one element in a hundred is far above what a scaled fp16 run loses
/// (the default scenario's dynamic run loses none) and far below what an unscaled one does.
inline constexpr double significant_underflow_fraction = 0.01;

enum class diagnosed_cause : std::uint8_t {
  none,                // nothing stands out (a PASS without skips)
  gradient_underflow,  // gradients rounded to zero in the gradient format
  overflow_skips,      // inf/NaN gradients made the scaler skip optimizer steps
  nonfinite_loss,      // the training loss itself became inf/NaN
  rounding_error,      // no underflow, overflow or skip: the formats' rounding moved the result
  undecided_checks,    // INCONCLUSIVE: nothing failed, some checks could not decide (too few samples, ...)
  injected_faults,     // a failed run whose scenario injected faults at steps it applied (not skipped)
};
/// "none", "gradient underflow", "overflow skips", "non-finite loss", "rounding error", "undecided checks",
/// "injected faults".
[[nodiscard]] const char* diagnosed_cause_name(diagnosed_cause c) noexcept;

/// Underflow of one gradient (a parameter tensor, or loss_gradient_name) over a run.
struct layer_underflow {
  std::string name;
  double fraction = 0.0;         // underflowed / elements, summed over every step
  std::int64_t first_step = -1;  // first step whose own fraction reached significant_underflow_fraction (-1: none)
};

/// The checks of a run that could not decide for one reason, and the scenario field that would let them decide.
struct undecided_group {
  std::string field;                // "data.eval_samples", "tolerances.logit_abs", "training.steps", "--relock"
  std::string advice;               // what to change there and why
  std::vector<std::string> checks;  // the checks' names, in gate order
  std::string why;                  // the first check's own reason (parity_check::undecided)
};

/// What the diagnosis reads beside the run: how its scaler was configured and what faults the scenario injects.
struct diagnosis_input {
  const run_result& run;
  const parity_result& parity;
  scaler_kind scaler = scaler_kind::none;
  std::vector<fault_spec> faults;
  /// The dynamic scaler's configuration. With it the diagnosis replays the scale's transitions over the recorded
  /// found_inf flags (the scaler's own transition()); where every recorded scale matches the replay it can say what
  /// the last step's update did, whether the floor or the cap held the scale, and which field did. Without it (or
  /// when a recorded scale does not match) it reads the recorded scales only.
  std::optional<scaler_config> dynamic_config = std::nullopt;
};

/// What the replay of a dynamic scaler over the run found (run_diagnosis::replay; all zero when there was none).
struct scale_replay {
  bool matched = false;      // every recorded scale was the replay's: the counts below are the scaler's
  float scale_after = 0.0f;  // the scale after the last step's update (the run's steps record the one before)
  float min_scale = 0.0f, max_scale = 0.0f;  // the configuration's floor and cap
  std::int64_t backoffs = 0;                 // overflows that lowered the scale (backed_off and clamped_at_min)
  std::int64_t at_floor = 0;        // overflows the floor stopped (clamped_at_min: the backoff would go below it)
  std::int64_t absorbed = 0;        // overflows the hysteresis absorbed (scale kept)
  std::int64_t grew = 0;            // growth events
  std::int64_t growth_refused = 0;  // growth the cap (or the float range) refused
};

struct run_diagnosis {
  diagnosed_cause cause = diagnosed_cause::none;
  std::string likely_field;  // the scenario/policy field to change: "scaler.kind", "faults", "policy (gradient fp16)"
  std::string text;          // the one-paragraph explanation
  // The data it is computed from.
  std::vector<layer_underflow> worst_layers;  // up to three, most underflow first (those with any underflow)
  double loss_gradient_underflow = 0.0;       // loss_gradient_name's fraction over the run
  std::int64_t underflow_began = -1;          // first step any gradient reached the significant fraction
  std::int64_t zero_norm_steps = 0;           // steps whose whole gradient was exactly zero
  std::int64_t overflow_steps = 0;            // steps with found_inf
  std::int64_t first_overflow = -1;
  std::int64_t skipped = 0;
  std::int64_t skipped_at_faults = 0;  // skipped steps at which the scenario injects a fault
  std::int64_t applied_faults = 0;     // applied (not skipped) steps at which the scenario injects a fault
  std::int64_t steps = 0;
  float scale_first = 0.0f, scale_last = 0.0f, scale_min = 0.0f, scale_max = 0.0f;  // the scales steps used
  bool applied_after_last_skip = false;  // an applied step came after the last skipped one (the run went on)
  scale_replay replay;                   // the dynamic scaler's transitions, replayed (diagnosis_input)
  std::string first_check;  // first failed check (else first INCONCLUSIVE one); empty when all passed
  double first_check_value = 0.0;
  double first_check_limit = 0.0;
  verdict first_check_status = verdict::pass;
  std::vector<undecided_group> undecided;  // INCONCLUSIVE checks by the field that would decide them
};

/// The diagnosis of one candidate (deterministic: a function of the recorded steps and checks only).
[[nodiscard]] run_diagnosis diagnose_run(const diagnosis_input& in);

}  // namespace safeamp::sim
