// The parity gate: a candidate run against the locked fp32 reference on the same seeds. Final held-out
// loss and accuracy, the training-loss curve, the golden probe logits and every data slice separately must
// stay within tolerances (declared in the scenario or derived from the candidate format's unit roundoff).
// The verdict is PASS or FAIL with the reasons; on FAIL a fallback decision names what to run instead.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "safeamp/format/format_spec.hpp"
#include "safeamp/policy/policy_value.hpp"
#include "safeamp/sim/reference.hpp"
#include "safeamp/sim/run_result.hpp"

namespace safeamp::sim {

/// Tolerances of the gate. Relative quantities are fractions (0.05 = 5 %); accuracy is a fraction of
/// predictions (0.02 = 2 points).
struct parity_tolerances {
  double loss_rel = 0.0;            // |L_c - L_r| / L_r, final held-out loss
  double accuracy_abs = 0.0;        // A_r - A_c, final held-out accuracy (only a drop counts)
  double curve_gap_rel = 0.0;       // mean |l_c - l_r| / l_r of the smoothed training-loss curves
  double logit_abs = 0.0;           // max |z_c - z_r| / rms(z_r) over the probe batch
  double logit_rel = 0.0;           // max |z_c - z_r| / (|z_r| + rms(z_r))
  double slice_loss_rel = 0.0;      // per slice, before the sqrt(N / n_slice) sampling widening
  double slice_accuracy_abs = 0.0;  // per slice, before the widening

  friend bool operator==(const parity_tolerances&, const parity_tolerances&) = default;
};

/// Factors k of the default tolerances, each tolerance = k * sqrt(u) with u the unit roundoff of the
/// candidate's coarsest format (see docs/report.md for the reasoning).
inline constexpr double default_loss_factor = 1.0;
inline constexpr double default_accuracy_factor = 1.0;
inline constexpr double default_curve_factor = 1.0;
inline constexpr double default_logit_abs_factor = 4.0;
inline constexpr double default_logit_rel_factor = 4.0;
/// Floor of every default tolerance: below it run-to-run arithmetic differences of fp32 itself dominate.
inline constexpr double default_tolerance_floor = 1.0e-6;

/// The coarsest format a policy rounds values to (largest unit roundoff among param, compute, output and
/// gradient formats and the per-op-class formats).
[[nodiscard]] format_spec coarsest_format(const precision_policy& p) noexcept;

/// Defaults from the unit roundoff u of `f`: every tolerance is max(floor, k * sqrt(u)).
[[nodiscard]] parity_tolerances default_tolerances(format_spec f) noexcept;

/// Tolerances a scenario may declare; each field left empty keeps the default.
struct tolerance_overrides {
  std::optional<double> loss_rel, accuracy_abs, curve_gap_rel, logit_abs, logit_rel, slice_loss_rel,
      slice_accuracy_abs;
};
[[nodiscard]] parity_tolerances apply_overrides(parity_tolerances base, const tolerance_overrides& o) noexcept;

/// Width of the trailing moving average that smooths both loss curves before they are compared.
[[nodiscard]] std::int64_t curve_smoothing_window(std::int64_t steps) noexcept;

enum class verdict : std::uint8_t { pass, fail };
[[nodiscard]] const char* verdict_name(verdict v) noexcept;  // "PASS" / "FAIL"

/// One check of the gate: measured value against its limit.
struct parity_check {
  std::string name;   // "held-out loss", "slice pos 0-7 accuracy", ...
  double value = 0.0;
  double limit = 0.0;
  bool passed = false;
  std::string detail; // "reference 1.83, candidate 2.41"
};

struct skip_summary {
  std::int64_t skipped = 0;
  std::vector<std::int64_t> steps;  // step numbers of skipped steps
  float min_scale = 0.0f;
  float max_scale = 0.0f;
};
[[nodiscard]] skip_summary summarize_skips(const run_result& run);

struct parity_result {
  std::string candidate;      // run label
  std::string policy;         // policy label
  parity_tolerances tolerances;
  std::vector<parity_check> checks;
  verdict outcome = verdict::fail;
  std::vector<std::string> reasons;  // one line per failed check
  skip_summary skips;
};

/// Runs every check of the gate. The caller has already refused mismatching manifests.
[[nodiscard]] parity_result evaluate_parity(const locked_reference& ref, const run_result& candidate,
                                            const parity_tolerances& tol);

/// Short readable name of a policy: its preset name, else "param/compute/output/gradient" format names.
[[nodiscard]] std::string policy_label(const precision_policy& p);

}  // namespace safeamp::sim
