// The parity gate: a candidate run against the locked fp32 reference on the same seeds. Final held-out
// loss and accuracy, every data slice, the training-loss curve, the golden probe logits, non-finite losses
// and the fraction of skipped steps are checked, each against a limit that states where it comes from (the
// format's unit roundoff, the sample count, or a value the scenario declares). A check that cannot decide
// (a slice too small, or a limit so wide that a candidate which learned nothing would meet it) is
// INCONCLUSIVE, never passed. A regression (training.loss mse, l1 or huber) measures learning from the best
// constant predictor stored with the reference instead of ln C, and its accuracy checks are N/A (reported, no
// part of the verdict). Verdict: FAIL if any check failed, else INCONCLUSIVE if any check could not decide, else
// PASS. docs/report.md gives every formula with a worked example.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "safeamp/format/format_spec.hpp"
#include "safeamp/policy/policy_value.hpp"
#include "safeamp/sim/reference.hpp"
#include "safeamp/sim/run_result.hpp"

namespace safeamp::sim {

/// The format-derived terms of the limits: k * sqrt(u) for the candidate's coarsest format (relative
/// quantities are fractions, 0.05 = 5 %; accuracy is a fraction of predictions, 0.02 = 2 points). The
/// quality checks (held-out and slice loss/accuracy) take the larger of this term and the sampling term
/// z * s / sqrt(n) of their n paired per-prediction differences; the fidelity checks (curve, logits) use
/// it alone.
struct parity_tolerances {
  double loss_rel = 0.0;            // (L_c - L_r) / max(L_r, loss floor), final held-out loss
  double accuracy_abs = 0.0;        // A_r - A_c, final held-out accuracy (only a drop counts)
  double curve_gap_rel = 0.0;       // mean |l_c - l_r| / max(l_r, curve floor) of the smoothed curves
  double logit_abs = 0.0;           // max |z_c - z_r| / rms(z_r) over the probe batch
  double logit_rel = 0.0;           // max |z_c - z_r| / (|z_r| + rms(z_r))
  double slice_loss_rel = 0.0;      // per slice, format term
  double slice_accuracy_abs = 0.0;  // per slice, format term
  double max_skip_fraction = 0.0;   // skipped steps / steps

  friend bool operator==(const parity_tolerances&, const parity_tolerances&) = default;
};

/// Factors k of the format terms, each = k * sqrt(u) with u the unit roundoff of the candidate's coarsest
/// format (see docs/report.md for the reasoning).
inline constexpr double default_loss_factor = 1.0;
inline constexpr double default_accuracy_factor = 1.0;
inline constexpr double default_curve_factor = 1.0;
inline constexpr double default_logit_abs_factor = 4.0;
inline constexpr double default_logit_rel_factor = 4.0;
/// Floor of every format term: below it run-to-run arithmetic differences of fp32 itself dominate.
inline constexpr double default_tolerance_floor = 1.0e-6;
/// Default limit on skipped steps: 5 % of the steps. A dynamic scaler's start-up calibration skips about
/// log2(init_scale / usable scale) steps and a healthy run then skips about one step per growth interval.
inline constexpr double default_max_skip_fraction = 0.05;

/// Statistical settings of the quality checks. The candidate and the reference evaluate the same
/// predictions in the same order; the gate pairs them and takes s, the sample standard deviation of the
/// n differences (loss, or correctness in {-1, 0, 1}).
/// z: one-sided normal quantile of the sampling terms z * s / sqrt(n) (3: a candidate as good as the
/// reference exceeds it by chance with probability ~0.13 %). min_samples: fewer predictions than this in a
/// set or slice make its quality checks INCONCLUSIVE (the normal approximation needs about 30).
/// informative_fraction: a check is INCONCLUSIVE unless a candidate that lost this fraction of what the
/// reference learned (the way from a trivial predictor to the reference) would fail it. The trivial predictor
/// of a classifier predicts uniform probabilities (loss ln C, accuracy 1/C); that of a regression predicts, per
/// output column, the constant with the least loss on the held-out targets (regression_baseline).
/// loss_floor_fraction: relative losses divide by max(L_r, this * trivial loss), so a near-zero reference
/// loss does not turn noise into a large relative change.
inline constexpr double gate_z = 3.0;
inline constexpr std::int64_t gate_min_samples = 30;
inline constexpr double informative_fraction = 0.5;
inline constexpr double loss_floor_fraction = 0.01;

/// The coarsest format a policy rounds values to in the simulator (largest unit roundoff among param, output,
/// accumulate and gradient formats and the per-op-class formats; its matmuls run in format_for(matmul), so the
/// compute field, which the simulator does not read, is left out).
[[nodiscard]] format_spec coarsest_format(const precision_policy& p) noexcept;

/// Format terms from the unit roundoff u of `f`: every term is max(floor, k * sqrt(u)); skip limit default.
[[nodiscard]] parity_tolerances default_tolerances(format_spec f) noexcept;

/// Limits a scenario may declare; a declared limit replaces the derived one of that check (the
/// INCONCLUSIVE rule still applies to it).
struct tolerance_overrides {
  std::optional<double> loss_rel, accuracy_abs, curve_gap_rel, logit_abs, logit_rel, slice_loss_rel,
      slice_accuracy_abs, max_skip_fraction;
};

/// What the gate compares against: the format terms and the declared limits.
struct gate_tolerances {
  parity_tolerances terms;
  tolerance_overrides declared;
};
[[nodiscard]] gate_tolerances gate_tolerances_for(format_spec coarsest, const tolerance_overrides& declared = {});

/// Width of the trailing moving average that smooths both loss curves before they are compared.
[[nodiscard]] std::int64_t curve_smoothing_window(std::int64_t steps) noexcept;

/// A check's status, and a run's outcome (never not_applicable: such checks take no part in it).
enum class verdict : std::uint8_t { pass, fail, inconclusive, not_applicable };
[[nodiscard]] const char* verdict_name(verdict v) noexcept;  // "PASS" / "FAIL" / "INCONCLUSIVE" / "N/A"

/// Why a check could not decide (INCONCLUSIVE), so the diagnosis can name the setting that would let it decide.
enum class undecided_reason : std::uint8_t {
  none,                 // the check decided (or does not apply)
  unpaired,             // no per-prediction results to pair (a reference locked before they were kept)
  too_few_samples,      // fewer than gate_min_samples predictions in the set or slice
  reference_untrained,  // the reference is no better than the trivial predictor on this set
  limit_too_wide,       // the limit would pass a candidate that lost half of what the reference learned
};

/// Where a check's limit comes from.
enum class limit_source : std::uint8_t {
  fixed,     // a rule of the gate (no non-finite loss, the default skip limit, matching shapes)
  format,    // the format term k * sqrt(u)
  sampling,  // the sampling term z * s / sqrt(n), larger than the format term
  declared,  // declared in the scenario's (or the candidate's) tolerances
};

/// One check of the gate: measured value against its limit.
struct parity_check {
  std::string name;     // "held-out loss (rel. increase)", "slice pos 0-7 accuracy (drop)", ...
  double value = 0.0;
  double limit = 0.0;
  verdict status = verdict::fail;
  std::string detail;   // what was measured: "reference 1.83, candidate 2.41"
  std::string basis;    // where the limit comes from: "max(format 1*sqrt(u) = 0.0221, sampling 3*... = 0.047)"
  std::string undecided;  // why the check could not decide (INCONCLUSIVE only)
  undecided_reason why_undecided = undecided_reason::none;  // the same, as a kind (INCONCLUSIVE only)
  limit_source source = limit_source::fixed;
  std::string tolerance_key;  // the `tolerances` key that declares this check's limit ("loss_rel"); empty: none
  // not_applicable (accuracy of a regression): value and limit are NaN, basis says why it does not apply.
  [[nodiscard]] bool passed() const noexcept { return status == verdict::pass; }
};

struct skip_summary {
  std::int64_t skipped = 0;
  std::vector<std::int64_t> steps;  // step numbers of skipped steps
  float min_scale = 0.0f;
  float max_scale = 0.0f;
};
[[nodiscard]] skip_summary summarize_skips(const run_result& run);

struct parity_result {
  std::string candidate;               // run label
  std::string policy;                  // policy label
  parity_tolerances tolerances;        // the format terms used
  std::vector<parity_check> checks;
  verdict outcome = verdict::fail;
  std::vector<std::string> reasons;    // one line per failed check
  std::vector<std::string> undecided;  // one line per INCONCLUSIVE check
  skip_summary skips;
  // Set by the caller, who knows the scenario (evaluate_parity leaves them empty): the run's loss scaler as text
  // and whether faults were injected into it. The fallback (parity_fallback.hpp) uses them: a PASS with injected
  // faults is no evidence for its policy, and a policy's PASS under another scaler is named with that scaler.
  std::string scaler;
  bool faulted = false;
};

/// Runs every check of the gate. The caller has already refused mismatching manifests.
[[nodiscard]] parity_result evaluate_parity(const locked_reference& ref, const run_result& candidate,
                                            const gate_tolerances& tol);

/// The denominator of the relative loss checks, max(L_r, loss_floor_fraction * trivial loss), of the held-out set
/// (slice < 0) or of slice `slice` of `ref` (trivial loss: ln C for a classifier of C classes, the regression
/// baseline's of that set for a regression): a limit L on the relative increase allows losses up to
/// L_r + L * denominator.
[[nodiscard]] double relative_loss_denominator(const locked_reference& ref, std::int32_t slice);

/// Short readable name of a policy: its preset name, else "param/compute/output/gradient" format names.
[[nodiscard]] std::string policy_label(const precision_policy& p);

}  // namespace safeamp::sim
