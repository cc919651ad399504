// The parity gate's checks: held-out metrics, loss-curve gap, golden logits and per-slice metrics.
#include "safeamp/sim/parity.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "safeamp/format/format_names.hpp"
#include "safeamp/policy/policy_presets.hpp"

namespace safeamp::sim {
namespace {

std::string fmt(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

/// Trailing moving average over the finite values of the last `window` entries (NaN when none).
std::vector<double> smooth(const std::vector<double>& x, std::int64_t window) {
  std::vector<double> out(x.size(), std::numeric_limits<double>::quiet_NaN());
  const auto w = static_cast<std::size_t>(std::max<std::int64_t>(1, window));
  for (std::size_t i = 0; i < x.size(); ++i) {
    double sum = 0.0;
    std::size_t n = 0;
    for (std::size_t j = i + 1 > w ? i + 1 - w : 0; j <= i; ++j) {
      if (std::isfinite(x[j])) {
        sum += x[j];
        ++n;
      }
    }
    if (n > 0) out[i] = sum / static_cast<double>(n);
  }
  return out;
}

void add_check(parity_result& r, std::string name, double value, double limit, std::string detail) {
  // A NaN value never passes (NaN <= limit is false).
  const bool ok = value <= limit;
  if (!ok) r.reasons.push_back(name + " " + fmt(value) + " > " + fmt(limit) + " (" + detail + ")");
  r.checks.push_back({std::move(name), value, limit, ok, std::move(detail)});
}

double relative_increase(double candidate, double reference) {
  if (!std::isfinite(candidate)) return std::numeric_limits<double>::infinity();
  return (candidate - reference) / std::max(std::abs(reference), std::numeric_limits<double>::min());
}

}  // namespace

format_spec coarsest_format(const precision_policy& p) noexcept {
  format_spec worst = p.param;
  const auto consider = [&worst](format_spec f) {
    if (unit_roundoff(f) > unit_roundoff(worst)) worst = f;
  };
  consider(p.compute);
  consider(p.output);
  consider(p.gradient);
  for (const format_spec f : p.op_formats) consider(f);
  return worst;
}

parity_tolerances default_tolerances(format_spec f) noexcept {
  const double root_u = std::sqrt(static_cast<double>(unit_roundoff(f)));
  const auto t = [root_u](double k) { return std::max(default_tolerance_floor, k * root_u); };
  return parity_tolerances{.loss_rel = t(default_loss_factor),
                           .accuracy_abs = t(default_accuracy_factor),
                           .curve_gap_rel = t(default_curve_factor),
                           .logit_abs = t(default_logit_abs_factor),
                           .logit_rel = t(default_logit_rel_factor),
                           .slice_loss_rel = t(default_loss_factor),
                           .slice_accuracy_abs = t(default_accuracy_factor)};
}

parity_tolerances apply_overrides(parity_tolerances b, const tolerance_overrides& o) noexcept {
  b.loss_rel = o.loss_rel.value_or(b.loss_rel);
  b.accuracy_abs = o.accuracy_abs.value_or(b.accuracy_abs);
  b.curve_gap_rel = o.curve_gap_rel.value_or(b.curve_gap_rel);
  b.logit_abs = o.logit_abs.value_or(b.logit_abs);
  b.logit_rel = o.logit_rel.value_or(b.logit_rel);
  b.slice_loss_rel = o.slice_loss_rel.value_or(b.slice_loss_rel);
  b.slice_accuracy_abs = o.slice_accuracy_abs.value_or(b.slice_accuracy_abs);
  return b;
}

std::int64_t curve_smoothing_window(std::int64_t steps) noexcept { return std::max<std::int64_t>(1, steps / 10); }

const char* verdict_name(verdict v) noexcept { return v == verdict::pass ? "PASS" : "FAIL"; }

skip_summary summarize_skips(const run_result& run) {
  skip_summary s;
  bool first = true;
  for (const step_record& st : run.steps) {
    if (st.skipped) {
      ++s.skipped;
      s.steps.push_back(st.step);
    }
    if (first || st.scale < s.min_scale) s.min_scale = st.scale;
    if (first || st.scale > s.max_scale) s.max_scale = st.scale;
    first = false;
  }
  return s;
}

std::string policy_label(const precision_policy& p) {
  const std::string_view preset = preset_name_of(p);
  if (!preset.empty()) return std::string(preset);
  return "param=" + format_name(p.param) + " compute=" + format_name(p.compute) + " output=" + format_name(p.output) +
         " grad=" + format_name(p.gradient) + (p.master_weights ? " +master" : "");
}

parity_result evaluate_parity(const locked_reference& ref, const run_result& cand, const parity_tolerances& tol) {
  parity_result r;
  r.candidate = cand.label;
  r.policy = policy_label(cand.policy);
  r.tolerances = tol;
  r.skips = summarize_skips(cand);

  // 1. Held-out metrics (a regression counts; an improvement does not fail the gate).
  const eval_metrics& re = ref.final_eval;
  const eval_metrics& ce = cand.final_eval;
  add_check(r, "held-out loss (rel. increase)", relative_increase(ce.loss, re.loss), tol.loss_rel,
            "reference " + fmt(re.loss) + ", candidate " + fmt(ce.loss));
  add_check(r, "held-out accuracy (drop)", std::isfinite(ce.accuracy) ? re.accuracy - ce.accuracy : HUGE_VAL,
            tol.accuracy_abs, "reference " + fmt(re.accuracy) + ", candidate " + fmt(ce.accuracy));

  // 2. Training-loss curve: non-finite losses on applied steps, then the smoothed relative gap.
  std::int64_t nonfinite_applied = 0;
  std::vector<double> cand_curve;
  std::int64_t skipped = 0;
  for (const step_record& s : cand.steps) {
    if (!std::isfinite(s.loss) && !s.skipped) ++nonfinite_applied;
    // A skipped step changed no weights; its loss (possibly a faulted spike) is left out of the curve.
    cand_curve.push_back(s.skipped ? std::numeric_limits<double>::quiet_NaN() : s.loss);
    skipped += s.skipped ? 1 : 0;
  }
  add_check(r, "non-finite loss on applied steps", static_cast<double>(nonfinite_applied), 0.0,
            std::to_string(nonfinite_applied) + " of " + std::to_string(cand.steps.size()) + " steps");
  double gap = std::numeric_limits<double>::infinity();
  std::string gap_detail = "step counts differ: reference " + std::to_string(ref.loss_curve.size()) + ", candidate " +
                           std::to_string(cand_curve.size());
  if (cand_curve.size() == ref.loss_curve.size() && !cand_curve.empty()) {
    const std::int64_t w = curve_smoothing_window(static_cast<std::int64_t>(cand_curve.size()));
    const std::vector<double> a = smooth(ref.loss_curve, w);
    const std::vector<double> b = smooth(cand_curve, w);
    double sum = 0.0;
    std::size_t n = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (std::isnan(b[i])) continue;  // no finite candidate loss in the window yet
      sum += std::abs(b[i] - a[i]) / std::max(std::abs(a[i]), std::numeric_limits<double>::min());
      ++n;
    }
    gap = n > 0 ? sum / static_cast<double>(n) : std::numeric_limits<double>::infinity();
    gap_detail = "mean over " + std::to_string(n) + " steps, moving average of " + std::to_string(w) +
                 (skipped > 0 ? ", " + std::to_string(skipped) + " skipped steps left out" : "");
  }
  add_check(r, "loss-curve gap (mean rel.)", gap, tol.curve_gap_rel, gap_detail);

  // 3. Golden logits of the probe batch.
  if (cand.probe_logits.size() == ref.probe_logits.size() && cand.probe_rows == ref.probe_rows &&
      !ref.probe_logits.empty()) {
    double sq = 0.0;
    for (const float z : ref.probe_logits) sq += static_cast<double>(z) * static_cast<double>(z);
    const double rms = std::max(std::sqrt(sq / static_cast<double>(ref.probe_logits.size())),
                                std::numeric_limits<double>::min());
    double max_abs = 0.0;
    double max_rel = 0.0;
    for (std::size_t i = 0; i < ref.probe_logits.size(); ++i) {
      const double zr = ref.probe_logits[i];
      const double zc = cand.probe_logits[i];
      const double d = std::isfinite(zc) ? std::abs(zc - zr) : std::numeric_limits<double>::infinity();
      max_abs = std::max(max_abs, d);
      max_rel = std::max(max_rel, d / (std::abs(zr) + rms));
    }
    add_check(r, "golden logits max abs err / rms", max_abs / rms, tol.logit_abs,
              "max abs " + fmt(max_abs) + ", reference rms " + fmt(rms));
    add_check(r, "golden logits max rel err", max_rel, tol.logit_rel,
              std::to_string(ref.probe_rows) + " x " + std::to_string(ref.probe_cols) + " logits");
  } else {
    add_check(r, "golden logits shape", HUGE_VAL, 0.0,
              "reference " + std::to_string(ref.probe_rows) + " x " + std::to_string(ref.probe_cols) + ", candidate " +
                  std::to_string(cand.probe_rows) + " x " + std::to_string(cand.probe_cols));
  }

  // 4. Every slice separately; tolerances widened by sqrt(N / n) for a slice of n of N samples.
  std::int64_t total = 0;
  for (const slice_metrics& s : re.slices) total += s.count;
  for (const slice_metrics& rs : re.slices) {
    const auto it = std::find_if(ce.slices.begin(), ce.slices.end(),
                                 [&rs](const slice_metrics& c) { return c.name == rs.name; });
    if (it == ce.slices.end()) {
      add_check(r, "slice " + rs.name + " present", HUGE_VAL, 0.0, "missing from the candidate's evaluation");
      continue;
    }
    const double widen =
        rs.count > 0 && total > 0 ? std::sqrt(static_cast<double>(total) / static_cast<double>(rs.count)) : 1.0;
    add_check(r, "slice " + rs.name + " loss (rel. increase)", relative_increase(it->loss, rs.loss),
              tol.slice_loss_rel * widen, "reference " + fmt(rs.loss) + ", candidate " + fmt(it->loss));
    add_check(r, "slice " + rs.name + " accuracy (drop)",
              std::isfinite(it->accuracy) ? rs.accuracy - it->accuracy : HUGE_VAL, tol.slice_accuracy_abs * widen,
              "reference " + fmt(rs.accuracy) + ", candidate " + fmt(it->accuracy));
  }

  r.outcome = r.reasons.empty() ? verdict::pass : verdict::fail;
  return r;
}

}  // namespace safeamp::sim
