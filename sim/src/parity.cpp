// The parity gate's checks: held-out and per-slice quality (loss, accuracy), safety (non-finite losses,
// skipped steps), fidelity (loss-curve gap, golden logits); each limit with its basis, each undecidable
// check INCONCLUSIVE. The formulas are in docs/report.md.
#include "safeamp/sim/parity.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "safeamp/error.hpp"
#include "safeamp/policy/policy_string.hpp"

namespace safeamp::sim {
namespace {

constexpr double inf = std::numeric_limits<double>::infinity();
constexpr double nan = std::numeric_limits<double>::quiet_NaN();

std::string fmt(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

/// Trailing moving average over the finite values of the last `window` entries (NaN when none).
std::vector<double> smooth(const std::vector<double>& x, std::int64_t window) {
  std::vector<double> out(x.size(), nan);
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

/// Records a check that does not apply to this kind of run (accuracy of a regression): reported with the reason,
/// never failed or undecided, so it takes no part in the verdict.
void add_not_applicable(parity_result& r, std::string name, std::string detail, std::string reason) {
  r.checks.push_back(parity_check{.name = std::move(name),
                                  .value = nan,
                                  .limit = nan,
                                  .status = verdict::not_applicable,
                                  .detail = std::move(detail),
                                  .basis = std::move(reason),
                                  .undecided = {},
                                  .why_undecided = undecided_reason::none,
                                  .source = limit_source::fixed,
                                  .tolerance_key = {}});
}

/// A limit, where it comes from, and the `tolerances` key that would declare it (empty: none can).
struct limit_basis {
  double limit = 0.0;
  std::string basis;
  limit_source source = limit_source::fixed;
  const char* key = "";
};

/// Why a check cannot decide; an empty `why` means it can.
struct undecidable {
  std::string why;
  undecided_reason reason = undecided_reason::none;
};

/// Records a check. It fails when the value exceeds the limit (a NaN value never passes); otherwise it is
/// INCONCLUSIVE when `undecided` says why it cannot decide, else it passes.
void add_check(parity_result& r, std::string name, double value, limit_basis limit, std::string detail,
               undecidable undecided = {}) {
  parity_check c{.name = std::move(name),
                 .value = value,
                 .limit = limit.limit,
                 .status = verdict::pass,
                 .detail = std::move(detail),
                 .basis = std::move(limit.basis),
                 .undecided = {},
                 .why_undecided = undecided_reason::none,
                 .source = limit.source,
                 .tolerance_key = limit.key};
  if (!(value <= limit.limit)) {
    c.status = verdict::fail;
    r.reasons.push_back(c.name + " " + fmt(value) + " > " + fmt(limit.limit) + " (" + c.detail + ")");
  } else if (!undecided.why.empty()) {
    c.status = verdict::inconclusive;
    c.undecided = std::move(undecided.why);
    c.why_undecided = undecided.reason;
    r.undecided.push_back(c.name + ": " + c.undecided);
  }
  r.checks.push_back(std::move(c));
}

/// What the reference knows about its problem. A classifier: C classes (columns of the logits) and the loss and
/// accuracy of its trivial predictor, the held-out labels' class frequencies predicted for every input (stored with
/// the reference; results assembled by hand without labels fall back to uniform probabilities, ln C and 1/C). A
/// regression: the loss of its trivial predictor, the best constant per output column. Both on the whole held-out
/// set or on one slice; accuracy does not apply to a regression.
struct problem {
  double classes = 2.0;
  const regression_baseline* regression = nullptr;
  const class_prior* prior = nullptr;
  std::int32_t slice = -1;  // the set the quality checks look at: -1 the whole held-out set, else a slice index

  [[nodiscard]] bool is_regression() const { return regression != nullptr; }
  /// Whether the trivial predictor was fitted to the held-out targets (a reference worse than it learned nothing).
  [[nodiscard]] bool fitted() const { return regression != nullptr || prior != nullptr; }
  [[nodiscard]] double trivial_loss() const {
    const auto k = static_cast<std::size_t>(slice);
    if (is_regression()) return slice < 0 ? regression->trivial_loss : regression->slice_trivial_loss[k];
    if (prior != nullptr) return slice < 0 ? prior->trivial_loss : prior->slice_trivial_loss[k];
    return std::log(classes);
  }
  [[nodiscard]] double chance_accuracy() const {
    if (prior != nullptr)
      return slice < 0 ? prior->trivial_accuracy : prior->slice_trivial_accuracy[static_cast<std::size_t>(slice)];
    return 1.0 / classes;
  }
  /// A regression whose targets are all equal has a trivial loss of 0, and so has a classifier's set of one class:
  /// the floor stays positive.
  [[nodiscard]] double loss_floor() const {
    const double floor = loss_floor_fraction * trivial_loss();
    return fitted() ? std::max(floor, std::numeric_limits<double>::min()) : floor;
  }
  /// The trivial predictor and its loss, for the reasons of an undecided check.
  [[nodiscard]] std::string trivial_name() const {
    if (is_regression()) return "the best constant prediction (" + regression->loss + " " + fmt(trivial_loss()) + ")";
    if (prior != nullptr) return "the held-out labels' class frequencies (" + fmt(trivial_loss()) + " nats)";
    return "uniform prediction (ln " + fmt(classes) + ")";
  }
  [[nodiscard]] std::string trivial_note() const {
    if (is_regression()) return "; best constant prediction (" + regression->loss + "): " + fmt(trivial_loss());
    if (prior != nullptr) return "; the held-out labels' class frequencies: " + fmt(trivial_loss()) + " nats";
    return "; uniform prediction: ln " + fmt(classes);
  }
  [[nodiscard]] std::string chance_name() const {
    return prior != nullptr ? "a guess with the held-out class frequencies" : "chance";
  }
  [[nodiscard]] problem for_slice(std::int32_t k) const {
    problem p = *this;
    p.slice = k;
    return p;
  }
};

/// The INCONCLUSIVE rule: why a check cannot decide when its limit is at least informative_fraction of the
/// value a trivial predictor would show (empty when it can decide). `trivial_run` names that predictor,
/// `note` is shown after the threshold. A trivial value of 0 or less means the reference is no better than
/// the trivial predictor: no limit could decide, so the reason is the reference, not the limit.
undecidable too_wide(double limit, double trivial, const std::string& trivial_run, const std::string& note = {}) {
  if (limit < informative_fraction * trivial) return {};
  return {
      "limit " + fmt(limit) + " would pass " + trivial_run + " (" + fmt(informative_fraction * trivial) + note + ")",
      trivial > 0.0 ? undecided_reason::limit_too_wide : undecided_reason::reference_untrained};
}

/// A quality check's limit: the declared one as it is, else max(format term, z * sd / sqrt(n) / scale) over the
/// n paired differences of sample sd `sd` (no sampling term when nothing is paired, n = 0).
limit_basis quality_limit(const std::optional<double>& declared, double format_term, double sd, std::int64_t n,
                          double scale, const char* formula, const char* key) {
  if (declared) return {*declared, "declared in the scenario", limit_source::declared, key};
  const double sampling = n > 0 ? gate_z * sd / std::sqrt(static_cast<double>(n)) / scale : 0.0;
  return {std::max(format_term, sampling),
          "max(format term " + fmt(format_term) + ", sampling " + formula + " = " + fmt(sampling) + " with paired sd " +
              fmt(sd) + ", n " + std::to_string(n) + ")",
          sampling > format_term ? limit_source::sampling : limit_source::format, key};
}

/// The paired differences of one set of predictions (all of them, or one slice): candidate minus reference
/// loss and reference minus candidate correctness, prediction by prediction, with their sample standard
/// deviations. Empty when either run has no per-prediction results or they do not line up.
struct paired_set {
  std::int64_t n = 0;
  double loss_diff = 0.0, loss_diff_sd = 0.0;  // mean and sd of l_c,i - l_r,i
  double drop = 0.0, drop_sd = 0.0;            // mean and sd of k_r,i - k_c,i (k: 1 when correct)
};

std::optional<paired_set> paired(const eval_rows& ref, const eval_rows& cand, std::int32_t slice) {
  const std::size_t rows = ref.loss.size();
  if (rows == 0 || ref.correct.size() != rows || ref.slice.size() != rows || cand.loss.size() != rows ||
      cand.correct.size() != rows || cand.slice != ref.slice) {
    return std::nullopt;
  }
  paired_set p;
  double sum_l = 0.0, sum_k = 0.0;
  for (std::size_t i = 0; i < rows; ++i) {
    if (slice >= 0 && ref.slice[i] != slice) continue;
    ++p.n;
    sum_l += static_cast<double>(cand.loss[i]) - static_cast<double>(ref.loss[i]);
    sum_k += static_cast<double>(ref.correct[i]) - static_cast<double>(cand.correct[i]);
  }
  if (p.n == 0) return std::nullopt;
  const auto dn = static_cast<double>(p.n);
  p.loss_diff = sum_l / dn;
  p.drop = sum_k / dn;
  double sq_l = 0.0, sq_k = 0.0;
  for (std::size_t i = 0; i < rows; ++i) {
    if (slice >= 0 && ref.slice[i] != slice) continue;
    const double dl = static_cast<double>(cand.loss[i]) - static_cast<double>(ref.loss[i]) - p.loss_diff;
    const double dk = static_cast<double>(ref.correct[i]) - static_cast<double>(cand.correct[i]) - p.drop;
    sq_l += dl * dl;
    sq_k += dk * dk;
  }
  p.loss_diff_sd = p.n > 1 ? std::sqrt(sq_l / (dn - 1.0)) : 0.0;
  p.drop_sd = p.n > 1 ? std::sqrt(sq_k / (dn - 1.0)) : 0.0;
  return p;
}

/// One evaluated set as the gate sees it: the reference's and the candidate's summary metrics, and the
/// paired differences when both runs kept their per-prediction results.
struct quality_set {
  std::string prefix;  // "held-out", "slice pos 0-7"
  double ref_loss = 0.0, ref_acc = 0.0, cand_loss = 0.0, cand_acc = 0.0;
  std::optional<paired_set> pairs;
  double loss_term = 0.0, acc_term = 0.0;  // format terms
  std::optional<double> loss_declared, acc_declared;
};

/// The reference's problem: a classifier of C classes (the probe logits' columns), or a regression with its baseline.
problem problem_of(const locked_reference& ref) {
  const eval_metrics& e = ref.final_eval;
  const problem pb{.classes = static_cast<double>(std::max<std::int64_t>(2, ref.probe_cols)),
                   .regression = e.regression ? &*e.regression : nullptr,
                   .prior = !e.regression && e.classes ? &*e.classes : nullptr};
  if (pb.is_regression() && pb.regression->slice_trivial_loss.size() != e.slices.size()) {
    throw error("reference regression baseline slice_trivial_loss",
                std::to_string(pb.regression->slice_trivial_loss.size()) + " values",
                "one per slice (" + std::to_string(e.slices.size()) + ")");
  }
  if (pb.prior != nullptr && (pb.prior->slice_trivial_loss.size() != e.slices.size() ||
                              pb.prior->slice_trivial_accuracy.size() != e.slices.size())) {
    throw error("reference class frequencies",
                std::to_string(pb.prior->slice_trivial_loss.size()) + " slice losses and " +
                    std::to_string(pb.prior->slice_trivial_accuracy.size()) + " slice accuracies",
                "one each per slice (" + std::to_string(e.slices.size()) + ")");
  }
  return pb;
}

/// Loss and accuracy of one set. Value: the mean paired difference (the summary difference when no
/// per-prediction results exist). Limit: a declared one, else max(format term, z * sd / sqrt(n)) — the
/// candidate fails only when its regression is both larger than the format allows and larger than the
/// sampling noise of n predictions.
void quality_checks(parity_result& r, const problem& pb, const quality_set& q) {
  const bool have = q.pairs.has_value();
  const std::int64_t n = have ? q.pairs->n : 0;
  undecidable size_undecided;
  if (!have) {
    size_undecided = {
        "no per-prediction results to pair (missing in the reference or the candidate, or not the same "
        "predictions in the same order)",
        undecided_reason::unpaired};
  } else if (n < gate_min_samples) {
    size_undecided = {std::to_string(n) + " predictions: too small to judge (needs at least " +
                          std::to_string(gate_min_samples) + ")",
                      undecided_reason::too_few_samples};
  }
  const bool slice = pb.slice >= 0;
  const std::string lost_half = "a candidate that lost half of what the reference learned";

  // Loss: relative increase over max(L_r, floor).
  const double denom = std::max(q.ref_loss, pb.loss_floor());
  const double loss_diff = have ? q.pairs->loss_diff : q.cand_loss - q.ref_loss;
  const double loss_value = std::isfinite(q.cand_loss) && std::isfinite(loss_diff) ? loss_diff / denom : inf;
  const limit_basis loss = quality_limit(q.loss_declared, q.loss_term, have ? q.pairs->loss_diff_sd : nan, n, denom,
                                         "3*sd/sqrt(n)/L", slice ? "slice_loss_rel" : "loss_rel");
  undecidable loss_undecided = size_undecided;
  if (loss_undecided.why.empty() && pb.fitted() && !(q.ref_loss < pb.trivial_loss())) {
    loss_undecided = {"the reference (loss " + fmt(q.ref_loss) + ") is not better than " + pb.trivial_name(),
                      undecided_reason::reference_untrained};
  } else if (loss_undecided.why.empty()) {
    loss_undecided = too_wide(loss.limit, (pb.trivial_loss() - q.ref_loss) / denom, lost_half, pb.trivial_note());
  }
  add_check(r, q.prefix + " loss (rel. increase)", loss_value, loss,
            "reference " + fmt(q.ref_loss) + ", candidate " + fmt(q.cand_loss) +
                (q.ref_loss < pb.loss_floor() ? ", relative to the floor " + fmt(pb.loss_floor()) : ""),
            loss_undecided);

  // Accuracy: drop in points. A regression predicts no classes: not applicable, no part of the verdict.
  if (pb.is_regression()) {
    add_not_applicable(r, q.prefix + " accuracy (drop)", "no class predictions",
                       "not applicable: a regression (training.loss " + pb.regression->loss + ") predicts no classes");
    return;
  }
  const double drop = have ? q.pairs->drop : q.ref_acc - q.cand_acc;
  const double acc_value = std::isfinite(q.cand_acc) ? drop : inf;
  const limit_basis acc = quality_limit(q.acc_declared, q.acc_term, have ? q.pairs->drop_sd : nan, n, 1.0,
                                        "3*sd/sqrt(n)", slice ? "slice_accuracy_abs" : "accuracy_abs");
  const double acc_trivial = q.ref_acc - pb.chance_accuracy();
  undecidable acc_undecided = size_undecided;
  if (acc_undecided.why.empty() && acc_trivial <= 0.0) {
    acc_undecided = {
        pb.prior != nullptr
            ? "the reference is not above the accuracy of " + pb.chance_name() + " (" + fmt(pb.chance_accuracy()) + ")"
            : "the reference is not above chance accuracy (" + fmt(pb.chance_accuracy()) + ")",
        undecided_reason::reference_untrained};
  } else if (acc_undecided.why.empty()) {
    acc_undecided =
        too_wide(acc.limit, acc_trivial, lost_half, " above " + pb.chance_name() + " " + fmt(pb.chance_accuracy()));
  }
  add_check(r, q.prefix + " accuracy (drop)", acc_value, acc,
            "reference " + fmt(q.ref_acc) + ", candidate " + fmt(q.cand_acc), acc_undecided);
}

/// A fidelity limit (curve, logits): the declared one, else the format term alone.
limit_basis fidelity_limit(double term, const std::optional<double>& declared, const char* key) {
  if (declared) return {*declared, "declared in the scenario", limit_source::declared, key};
  return {term, "format term k*sqrt(u) = " + fmt(term), limit_source::format, key};
}

void curve_check(parity_result& r, const locked_reference& ref, const run_result& cand, const gate_tolerances& tol) {
  std::int64_t nonfinite_applied = 0;
  std::int64_t skipped = 0;
  std::vector<double> cand_curve;
  for (const step_record& s : cand.steps) {
    if (!std::isfinite(s.loss) && !s.skipped) ++nonfinite_applied;
    // A skipped step changed no weights; its loss (possibly a faulted spike) is left out of the curve.
    cand_curve.push_back(s.skipped ? nan : s.loss);
    skipped += s.skipped ? 1 : 0;
  }
  const auto steps = static_cast<std::int64_t>(cand.steps.size());
  add_check(r, "non-finite loss on applied steps", static_cast<double>(nonfinite_applied),
            {0.0, "none allowed: an applied step with an inf/NaN loss trained on garbage"},
            std::to_string(nonfinite_applied) + " of " + std::to_string(steps) + " steps");
  const limit_basis skip_limit = tol.declared.max_skip_fraction
                                     ? limit_basis{*tol.declared.max_skip_fraction, "declared in the scenario",
                                                   limit_source::declared, "max_skip_fraction"}
                                     : limit_basis{tol.terms.max_skip_fraction, "default limit on skipped steps",
                                                   limit_source::fixed, "max_skip_fraction"};
  add_check(r, "skipped steps (fraction)", steps > 0 ? static_cast<double>(skipped) / static_cast<double>(steps) : inf,
            skip_limit, std::to_string(skipped) + " of " + std::to_string(steps) + " steps skipped");

  const limit_basis limit = fidelity_limit(tol.terms.curve_gap_rel, tol.declared.curve_gap_rel, "curve_gap_rel");
  if (cand_curve.size() != ref.loss_curve.size() || cand_curve.empty()) {
    add_check(r, "loss-curve gap (mean rel.)", inf, limit,
              "step counts differ: reference " + std::to_string(ref.loss_curve.size()) + ", candidate " +
                  std::to_string(cand_curve.size()));
    return;
  }
  const std::int64_t w = curve_smoothing_window(steps);
  const std::vector<double> a = smooth(ref.loss_curve, w);
  const std::vector<double> b = smooth(cand_curve, w);
  double top = 0.0;
  for (const double x : a) top = std::max(top, std::abs(x));
  const double floor = std::max(loss_floor_fraction * top, std::numeric_limits<double>::min());
  double sum = 0.0;
  double trivial_sum = 0.0;
  std::size_t n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = std::max(std::abs(a[i]), floor);
    trivial_sum += std::abs(a[0] - a[i]) / d;  // a run whose loss never left its first value
    if (std::isnan(b[i])) continue;            // no finite candidate loss in the window yet
    sum += std::abs(b[i] - a[i]) / d;
    ++n;
  }
  const double gap = n > 0 ? sum / static_cast<double>(n) : inf;
  const double trivial = trivial_sum / static_cast<double>(a.size());
  undecidable undecided = too_wide(limit.limit, trivial,
                                   "a run whose loss stayed halfway between its first value and the reference's curve");
  if (n == 0) {
    // Not a gap of infinite size but no curve at all: say why rather than "mean over 0 steps".
    add_check(r, "loss-curve gap (mean rel.)", gap, limit,
              "no candidate step with a finite loss to compare (" + std::to_string(skipped) + " of " +
                  std::to_string(steps) + " steps skipped, " + std::to_string(nonfinite_applied) +
                  " applied with a non-finite loss)");
    return;
  }
  add_check(r, "loss-curve gap (mean rel.)", gap, limit,
            "mean over " + std::to_string(n) + " steps, moving average of " + std::to_string(w) +
                (skipped > 0 ? ", " + std::to_string(skipped) + " skipped steps left out" : ""),
            std::move(undecided));
}

void logit_checks(parity_result& r, const locked_reference& ref, const run_result& cand, const gate_tolerances& tol) {
  if (cand.probe_logits.size() != ref.probe_logits.size() || cand.probe_rows != ref.probe_rows ||
      ref.probe_logits.empty()) {
    add_check(r, "golden logits shape", inf, {0.0, "the shapes must match"},
              "reference " + std::to_string(ref.probe_rows) + " x " + std::to_string(ref.probe_cols) + ", candidate " +
                  std::to_string(cand.probe_rows) + " x " + std::to_string(cand.probe_cols));
    return;
  }
  double sq = 0.0;
  for (const float z : ref.probe_logits) sq += static_cast<double>(z) * static_cast<double>(z);
  const double rms =
      std::max(std::sqrt(sq / static_cast<double>(ref.probe_logits.size())), std::numeric_limits<double>::min());
  double max_abs = 0.0, max_rel = 0.0, zero_abs = 0.0, zero_rel = 0.0;
  for (std::size_t i = 0; i < ref.probe_logits.size(); ++i) {
    const double zr = ref.probe_logits[i];
    const double zc = cand.probe_logits[i];
    const double d = std::isfinite(zc) ? std::abs(zc - zr) : inf;
    max_abs = std::max(max_abs, d);
    max_rel = std::max(max_rel, d / (std::abs(zr) + rms));
    zero_abs = std::max(zero_abs, std::abs(zr));  // all-zero logits: a model that predicts nothing
    zero_rel = std::max(zero_rel, std::abs(zr) / (std::abs(zr) + rms));
  }
  const auto undecided = [](double limit, double trivial) {
    return too_wide(limit, trivial, "logits shrunk to half the reference's");
  };
  const limit_basis abs_limit = fidelity_limit(tol.terms.logit_abs, tol.declared.logit_abs, "logit_abs");
  add_check(r, "golden logits max abs err / rms", max_abs / rms, abs_limit,
            "max abs " + fmt(max_abs) + ", reference rms " + fmt(rms), undecided(abs_limit.limit, zero_abs / rms));
  const limit_basis rel_limit = fidelity_limit(tol.terms.logit_rel, tol.declared.logit_rel, "logit_rel");
  add_check(r, "golden logits max rel err", max_rel, rel_limit,
            std::to_string(ref.probe_rows) + " x " + std::to_string(ref.probe_cols) + " logits",
            undecided(rel_limit.limit, zero_rel));
}

}  // namespace

format_spec coarsest_format(const precision_policy& p) noexcept {
  format_spec worst = p.param;
  const auto consider = [&worst](format_spec f) {
    if (unit_roundoff(f) > unit_roundoff(worst)) worst = f;
  };
  // Not p.compute: the simulator's matmuls run in format_for(matmul), counted below; a compute field that differs
  // (a hand-built policy) rounds nothing and widened the limits 16-fold.
  consider(p.output);
  consider(p.accumulate);
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
                           .slice_accuracy_abs = t(default_accuracy_factor),
                           .max_skip_fraction = default_max_skip_fraction};
}

gate_tolerances gate_tolerances_for(format_spec coarsest, const tolerance_overrides& declared) {
  return gate_tolerances{.terms = default_tolerances(coarsest), .declared = declared};
}

std::int64_t curve_smoothing_window(std::int64_t steps) noexcept { return std::max<std::int64_t>(1, steps / 10); }

const char* verdict_name(verdict v) noexcept {
  switch (v) {
    case verdict::pass: return "PASS";
    case verdict::fail: return "FAIL";
    case verdict::inconclusive: return "INCONCLUSIVE";
    case verdict::not_applicable: return "N/A";
  }
  return "FAIL";
}

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

std::string policy_label(const precision_policy& p) { return to_string(p); }

double relative_loss_denominator(const locked_reference& ref, std::int32_t slice) {
  const bool whole = slice < 0 || static_cast<std::size_t>(slice) >= ref.final_eval.slices.size();
  const problem pb = problem_of(ref).for_slice(whole ? -1 : slice);
  const double loss = whole ? ref.final_eval.loss : ref.final_eval.slices[static_cast<std::size_t>(slice)].loss;
  return std::max(loss, pb.loss_floor());
}

parity_result evaluate_parity(const locked_reference& ref, const run_result& cand, const gate_tolerances& tol) {
  parity_result r;
  r.candidate = cand.label;
  r.policy = policy_label(cand.policy);
  r.tolerances = tol.terms;
  r.skips = summarize_skips(cand);
  const problem pb = problem_of(ref);
  const tolerance_overrides& dec = tol.declared;
  const parity_tolerances& t = tol.terms;

  // 1. Held-out quality: one-sided (a candidate better than the reference is not a regression).
  const eval_metrics& re = ref.final_eval;
  const eval_metrics& ce = cand.final_eval;
  quality_checks(r, pb,
                 {.prefix = "held-out", .ref_loss = re.loss, .ref_acc = re.accuracy, .cand_loss = ce.loss,
                  .cand_acc = ce.accuracy, .pairs = paired(re.rows, ce.rows, -1), .loss_term = t.loss_rel,
                  .acc_term = t.accuracy_abs, .loss_declared = dec.loss_rel, .acc_declared = dec.accuracy_abs});

  // 2. Safety and the training-loss curve.
  curve_check(r, ref, cand, tol);

  // 3. Golden logits of the probe batch.
  logit_checks(r, ref, cand, tol);

  // 4. Every slice on its own predictions.
  for (std::size_t k = 0; k < re.slices.size(); ++k) {
    const slice_metrics& rs = re.slices[k];
    const auto it = std::find_if(ce.slices.begin(), ce.slices.end(),
                                 [&rs](const slice_metrics& c) { return c.name == rs.name; });
    if (it == ce.slices.end()) {
      add_check(r, "slice " + rs.name + " present", inf, {0.0, "every reference slice must be evaluated"},
                "missing from the candidate's evaluation");
      continue;
    }
    // A slice with no held-out predictions (a class the held-out set does not contain) has nothing to judge: its
    // checks are N/A, not an undecided pairing that would keep the verdict INCONCLUSIVE whatever the candidate.
    if (rs.count == 0 && it->count == 0) {
      for (const char* what : {" loss (rel. increase)", " accuracy (drop)"}) {
        add_not_applicable(r, "slice " + rs.name + what, "no predictions",
                           "not applicable: the held-out set has no predictions in this slice");
      }
      continue;
    }
    quality_checks(r, pb.for_slice(static_cast<std::int32_t>(k)),
                   {.prefix = "slice " + rs.name, .ref_loss = rs.loss, .ref_acc = rs.accuracy, .cand_loss = it->loss,
                    .cand_acc = it->accuracy, .pairs = paired(re.rows, ce.rows, static_cast<std::int32_t>(k)),
                    .loss_term = t.slice_loss_rel, .acc_term = t.slice_accuracy_abs,
                    .loss_declared = dec.slice_loss_rel, .acc_declared = dec.slice_accuracy_abs});
  }

  r.outcome = !r.reasons.empty() ? verdict::fail : (!r.undecided.empty() ? verdict::inconclusive : verdict::pass);
  return r;
}

}  // namespace safeamp::sim
