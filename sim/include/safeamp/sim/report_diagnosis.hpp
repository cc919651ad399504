// The "why" of a verdict: a diagnosis computed from one candidate's recorded steps and gate checks (gradient
// underflow per layer and when it began, overflow and skipped steps against the injected faults, the scale
// trajectory, the first failed check and by how much) ending in the scenario field that is the likely cause.
// Shown at the top of the report, in the terminal summary and in summary.json.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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
  float scale_first = 0.0f, scale_last = 0.0f, scale_min = 0.0f, scale_max = 0.0f;
  std::string first_check;  // first failed check (else first INCONCLUSIVE one); empty when all passed
  double first_check_value = 0.0;
  double first_check_limit = 0.0;
  verdict first_check_status = verdict::pass;
  std::vector<undecided_group> undecided;  // INCONCLUSIVE checks by the field that would decide them
};

/// The diagnosis of one candidate (deterministic: a function of the recorded steps and checks only).
[[nodiscard]] run_diagnosis diagnose_run(const diagnosis_input& in);

}  // namespace safeamp::sim
