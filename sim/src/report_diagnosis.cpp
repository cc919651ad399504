// The diagnosis of a candidate run (see report_diagnosis.hpp): every number in the paragraph is read from the
// run's step records, the scenario's faults and the gate's checks.
#include "safeamp/sim/report_diagnosis.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "safeamp/format/format_names.hpp"
#include "safeamp/scaling/update_scale.hpp"
#include "safeamp/sim/report.hpp"
#include "safeamp/sim/report_text.hpp"

namespace safeamp::sim {
namespace {

using report_text::fmt;
using report_text::percent;
using report_text::scale_text;

std::string steps_text(const std::vector<std::int64_t>& steps) {
  std::string out;
  constexpr std::size_t listed = 8;
  for (std::size_t i = 0; i < steps.size() && i < listed; ++i) out += (i ? ", " : "") + std::to_string(steps[i]);
  if (steps.size() > listed) out += " and " + std::to_string(steps.size() - listed) + " more";
  return out;
}

bool fault_at(const std::vector<fault_spec>& faults, std::int64_t step) {
  return std::any_of(faults.begin(), faults.end(), [step](const fault_spec& f) {
    return f.kind != fault_kind::tiny_loss && std::find(f.steps.begin(), f.steps.end(), step) != f.steps.end();
  });
}

// Per-gradient underflow over the run, and the first step any gradient reached the significant fraction.
void measure_underflow(const run_result& run, run_diagnosis& d) {
  struct totals {
    double elements = 0.0, underflow = 0.0;
    std::int64_t first = -1;
  };
  std::map<std::string, totals> by_name;
  std::vector<std::string> order;  // first-seen order, so ties rank deterministically
  for (const step_record& st : run.steps) {
    for (const layer_counts& l : st.grads) {
      auto [it, fresh] = by_name.try_emplace(l.name);
      if (fresh) order.push_back(l.name);
      totals& t = it->second;
      t.elements += static_cast<double>(l.elements);
      t.underflow += static_cast<double>(l.underflow);
      const bool significant = l.elements > 0 && static_cast<double>(l.underflow) >=
                                                     significant_underflow_fraction * static_cast<double>(l.elements);
      if (significant && t.first < 0) t.first = st.step;
      if (significant && (d.underflow_began < 0 || st.step < d.underflow_began)) d.underflow_began = st.step;
    }
  }
  std::vector<layer_underflow> all;
  for (const std::string& name : order) {
    const totals& t = by_name[name];
    const double fraction = t.elements > 0.0 ? t.underflow / t.elements : 0.0;
    if (name == loss_gradient_name) d.loss_gradient_underflow = fraction;
    if (t.underflow > 0.0) all.push_back({name, fraction, t.first});
  }
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.fraction > b.fraction; });
  if (all.size() > 3) all.resize(3);
  d.worst_layers = std::move(all);
}

// The scaler's own transitions over the recorded found_inf flags. Trusted only when each step's recorded scale is
// the replay's (a scaler whose state was restored or corrupted mid-run, say, is left to the recorded scales).
scale_replay replay_scale(const scaler_config& cfg, const std::vector<step_record>& steps) {
  scale_replay out;
  out.min_scale = cfg.min_scale;
  out.max_scale = cfg.max_scale;
  scaler_state s = initial_state(cfg);
  for (const step_record& st : steps) {
    if (s.scale != st.scale) return {};
    const scale_transition t = transition(cfg, s, st.found_inf);
    out.backoffs += t.event == scale_event::backed_off || t.event == scale_event::clamped_at_min ? 1 : 0;
    out.at_floor += t.event == scale_event::clamped_at_min ? 1 : 0;
    out.absorbed += t.event == scale_event::absorbed ? 1 : 0;
    out.grew += t.event == scale_event::grew ? 1 : 0;
    out.growth_refused += t.event == scale_event::growth_refused ? 1 : 0;
    s = t.next;
  }
  out.matched = true;
  out.scale_after = s.scale;
  return out;
}

void measure_steps(const diagnosis_input& in, run_diagnosis& d) {
  const std::vector<step_record>& steps = in.run.steps;
  d.steps = static_cast<std::int64_t>(steps.size());
  if (steps.empty()) return;
  d.scale_first = steps.front().scale;
  d.scale_last = steps.back().scale;
  d.scale_min = d.scale_max = steps.front().scale;
  for (const step_record& st : steps) {
    d.scale_min = std::min(d.scale_min, st.scale);
    d.scale_max = std::max(d.scale_max, st.scale);
    if (st.found_inf) {
      ++d.overflow_steps;
      if (d.first_overflow < 0) d.first_overflow = st.step;
    }
    if (st.skipped) {
      ++d.skipped;
      if (fault_at(in.faults, st.step)) ++d.skipped_at_faults;
    } else if (fault_at(in.faults, st.step)) {
      ++d.applied_faults;
    }
    if (!st.found_inf && st.grad_norm_before_clip == 0.0) ++d.zero_norm_steps;
  }
  const auto last_skip = std::find_if(steps.rbegin(), steps.rend(), [](const step_record& st) { return st.skipped; });
  d.applied_after_last_skip = std::any_of(steps.rbegin(), last_skip, [](const step_record& st) { return !st.skipped; });
  if (in.scaler == scaler_kind::dynamic && in.dynamic_config) d.replay = replay_scale(*in.dynamic_config, steps);
}

void first_check(const parity_result& p, run_diagnosis& d) {
  for (const verdict wanted : {verdict::fail, verdict::inconclusive}) {
    for (const parity_check& c : p.checks) {
      if (c.status != wanted) continue;
      d.first_check = c.name;
      d.first_check_value = c.value;
      d.first_check_limit = c.limit;
      d.first_check_status = c.status;
      return;
    }
  }
}

// The smallest set the gate judged (the whole held-out set or a non-empty slice): its prediction count.
std::int64_t smallest_set(const run_result& run) {
  auto smallest = static_cast<std::int64_t>(run.final_eval.rows.loss.size());
  for (const slice_metrics& sl : run.final_eval.slices) {
    if (sl.count > 0 && (smallest == 0 || sl.count < smallest)) smallest = sl.count;
  }
  return smallest;
}

// The field that would let an undecided check decide, and what to change there.
struct decide_with {
  std::string field, advice;
};
decide_with advice_for(const parity_check& c, const run_result& run) {
  const std::string key = "tolerances." + c.tolerance_key;
  switch (c.why_undecided) {
    case undecided_reason::none:
      break;
    case undecided_reason::unpaired:
      return {"--relock",
              "the locked reference keeps no per-prediction results to pair with the candidate's (locked by an older "
              "safeamp): run again with --relock"};
    case undecided_reason::too_few_samples: {
      const std::int64_t n = smallest_set(run);
      const std::string more = n > 0 ? " (the smallest set holds " + std::to_string(n) + " predictions: about " +
                                           fmt("%.2g", static_cast<double>(gate_min_samples) / static_cast<double>(n)) +
                                           "x as many)"
                                     : "";
      return {"data.eval_samples",
              "raise data.eval_samples" + more + ", or for .npy data give data.eval_inputs more rows"};
    }
    case undecided_reason::reference_untrained:
      return {"training.steps",
              "the reference itself learned nothing measurable on this set (no better than the trivial predictor): "
              "train longer (training.steps) or faster (training.optimizer.learning_rate)"};
    case undecided_reason::limit_too_wide:
      if (c.source == limit_source::declared) {
        return {key,
                "the declared limit would pass a candidate that lost half of what the reference learned: "
                "declare a tighter " +
                    key + " (in the scenario or the candidate)"};
      }
      if (c.source == limit_source::sampling) {
        return {"data.eval_samples",
                "the sampling term 3*s/sqrt(n) is wider than half of what the reference learned: more held-out "
                "predictions narrow it as 1/sqrt(n) (data.eval_samples, or for .npy data more rows in "
                "data.eval_inputs)"};
      }
      return {key, "the format term k*sqrt(u) of " + format_name(coarsest_format(run.policy)) +
                       " would pass a candidate that lost half of what the reference learned: declare a tighter " +
                       key + " (a claim about this model), or train the reference further (training.steps)"};
  }
  return {};
}

// The INCONCLUSIVE checks grouped by the field that would let them decide, in the order they first appear.
void group_undecided(const diagnosis_input& in, run_diagnosis& d) {
  for (const parity_check& c : in.parity.checks) {
    if (c.status != verdict::inconclusive) continue;
    decide_with a = advice_for(c, in.run);
    if (a.field.empty()) continue;
    const auto it = std::find_if(d.undecided.begin(), d.undecided.end(),
                                 [&a](const undecided_group& g) { return g.field == a.field; });
    if (it != d.undecided.end()) {
      it->checks.push_back(c.name);
    } else {
      d.undecided.push_back(
          {.field = std::move(a.field), .advice = std::move(a.advice), .checks = {c.name}, .why = c.undecided});
    }
  }
}

std::string undecided_sentence(const run_diagnosis& d, const parity_result& p) {
  std::size_t undecided = 0;
  for (const undecided_group& g : d.undecided) undecided += g.checks.size();
  const auto checks = std::count_if(p.checks.begin(), p.checks.end(),
                                    [](const parity_check& c) { return c.status != verdict::not_applicable; });
  std::string s = ": no check failed, but " + std::to_string(undecided) + " of " + std::to_string(checks) +
                  " checks could not decide.";
  for (const undecided_group& g : d.undecided) {
    s += " " + g.checks.front() +
         (g.checks.size() > 1 ? " and " + std::to_string(g.checks.size() - 1) + " more" : std::string()) + " (" +
         g.why + "): " + g.advice + ".";
  }
  return s;
}

bool nonfinite_loss(const run_result& run) {
  return std::any_of(run.steps.begin(), run.steps.end(),
                     [](const step_record& s) { return !s.skipped && !std::isfinite(s.loss); });
}

std::string scale_trajectory(const run_diagnosis& d, scaler_kind kind) {
  if (kind == scaler_kind::none) return "loss scaling is off (scaler none: the scale stays 2^0)";
  std::string t = d.scale_min == d.scale_max
                      ? "the loss scale stayed " + scale_text(d.scale_min)
                      : "the loss scale went from " + scale_text(d.scale_first) + " to " + scale_text(d.scale_last) +
                            " (range " + scale_text(d.scale_min) + ".." + scale_text(d.scale_max) + ")";
  const scale_replay& r = d.replay;
  if (!r.matched) return t;
  // The steps record the scale each used; the last step's own update moved it once more (an overflow there backed
  // it off after the run's last update, which "stayed 2^3" used to hide).
  if (r.scale_after != d.scale_last) t += ", and " + scale_text(r.scale_after) + " after the last step's update";
  if (r.at_floor > 0) {
    t += "; " + std::to_string(r.at_floor) + " overflow(s) found it at its floor " + scale_text(r.min_scale) +
         " (scaler.min_scale), which no backoff passes";
  }
  if (r.growth_refused > 0) {
    t += "; its cap " + scale_text(r.max_scale) + " (scaler.max_scale) refused " + std::to_string(r.growth_refused) +
         " growth(s)";
  }
  return t;
}

// The format that zeroed the gradients, named as the sentences below print it: policy.gradient, or the loss format
// when the loss gradient underflowed and that format's smallest subnormal is the larger (the loss gradient is
// rounded there before its cast into policy.gradient, loss.cpp, and its zeros are counted there).
struct underflow_format {
  format_spec format;
  std::string name;
};

underflow_format underflow_format_of(const run_diagnosis& d, const precision_policy& p) {
  const format_spec loss = p.format_for(op_class::loss);
  if (d.loss_gradient_underflow > 0.0 && min_subnormal(loss) > min_subnormal(p.gradient)) {
    return {loss, "the loss format " + format_name(loss)};
  }
  return {p.gradient, format_name(p.gradient)};
}

std::string underflow_sentence(const run_diagnosis& d, const underflow_format& zeroed) {
  std::string s = "gradients underflowed in " + zeroed.name + " (values below its smallest subnormal " +
                  fmt("%.3g", static_cast<double>(min_subnormal(zeroed.format))) + " become zero): ";
  if (d.loss_gradient_underflow > 0.0) {
    s += percent(d.loss_gradient_underflow) + " of the loss gradient's elements (" + loss_gradient_name + ")";
  }
  bool first = d.loss_gradient_underflow <= 0.0;
  for (const layer_underflow& l : d.worst_layers) {
    if (l.name == loss_gradient_name) continue;
    s += std::string(first ? "" : ", ") + percent(l.fraction) + " of " + l.name;
    first = false;
  }
  s += " rounded to zero";
  if (d.underflow_began >= 0) s += ", from step " + std::to_string(d.underflow_began);
  if (d.zero_norm_steps > 0) {
    s += ", and the whole gradient was exactly zero in " + std::to_string(d.zero_norm_steps) + " of " +
         std::to_string(d.steps) + " steps (no update could happen)";
  }
  return s;
}

std::string overflow_sentence(const run_diagnosis& d, const run_result& run) {
  std::vector<std::int64_t> at;
  for (const step_record& st : run.steps) {
    if (st.skipped) at.push_back(st.step);
  }
  std::string s = std::to_string(d.skipped) + " of " + std::to_string(d.steps) + " optimizer steps (" +
                  percent(static_cast<double>(d.skipped) / static_cast<double>(std::max<std::int64_t>(d.steps, 1))) +
                  ") were skipped because the gradient held inf/NaN (overflow found at " +
                  std::to_string(d.overflow_steps) + " step(s), first at step " + std::to_string(d.first_overflow) +
                  "); skipped at " + steps_text(at);
  if (d.skipped_at_faults == d.skipped) {
    s += ", every one a step where the scenario injects a fault";
  } else if (d.skipped_at_faults > 0) {
    s += "; " + std::to_string(d.skipped_at_faults) + " of them at injected faults";
  }
  return s;
}

}  // namespace

const char* diagnosed_cause_name(diagnosed_cause c) noexcept {
  switch (c) {
    case diagnosed_cause::none:
      return "none";
    case diagnosed_cause::gradient_underflow:
      return "gradient underflow";
    case diagnosed_cause::overflow_skips:
      return "overflow skips";
    case diagnosed_cause::nonfinite_loss:
      return "non-finite loss";
    case diagnosed_cause::rounding_error:
      return "rounding error";
    case diagnosed_cause::undecided_checks:
      return "undecided checks";
    case diagnosed_cause::injected_faults:
      return "injected faults";
  }
  return "none";
}

run_diagnosis diagnose_run(const diagnosis_input& in) {
  run_diagnosis d;
  measure_underflow(in.run, d);
  measure_steps(in, d);
  first_check(in.parity, d);
  const format_spec gradient = in.run.policy.gradient;
  const underflow_format zeroed = underflow_format_of(d, in.run.policy);
  const bool underflow = d.loss_gradient_underflow >= significant_underflow_fraction ||
                         (!d.worst_layers.empty() && d.worst_layers.front().fraction >= significant_underflow_fraction);
  const bool failed = in.parity.outcome != verdict::pass;
  group_undecided(in, d);

  // The cause: what the data shows first for a run that did not pass, else what a passing run shows.
  // An INCONCLUSIVE run failed nothing: what it needs is a setting that lets its undecided checks decide.
  if (nonfinite_loss(in.run)) {
    d.cause = diagnosed_cause::nonfinite_loss;
  } else if (in.parity.outcome == verdict::inconclusive && !d.undecided.empty()) {
    d.cause = diagnosed_cause::undecided_checks;
  } else if (underflow && (failed || d.skipped == 0)) {
    d.cause = diagnosed_cause::gradient_underflow;
  } else if (d.skipped > 0) {
    d.cause = diagnosed_cause::overflow_skips;
  } else if (failed && d.applied_faults > 0) {
    d.cause = diagnosed_cause::injected_faults;
  } else if (failed) {
    d.cause = diagnosed_cause::rounding_error;
  }

  std::string t = std::string(verdict_name(in.parity.outcome));
  switch (d.cause) {
    case diagnosed_cause::none:
      t += ": no underflow above " + percent(significant_underflow_fraction) + " of any gradient, no skipped step; " +
           scale_trajectory(d, in.scaler) + ".";
      break;
    case diagnosed_cause::gradient_underflow:
      // A run that passed did so despite the underflow, not because of it.
      t += (failed ? " because " : " despite this: ") + underflow_sentence(d, zeroed) + "; " +
           scale_trajectory(d, in.scaler) + ".";
      if (in.scaler == scaler_kind::none) {
        d.likely_field = "scaler.kind";
        t += std::string(failed ? " Likely cause" : " To look at") + ": scaler.kind = none with gradients in " +
             zeroed.name + ": turn on dynamic loss scaling, or use bf16, whose exponent range is fp32's.";
      } else {
        // A static scale is scaler.static_scale. A dynamic one: with the replayed transitions, the field that held
        // it down (its cap refusing growth, its floor stopping backoffs, overflows elsewhere backing it off, or its
        // start when it only grew or never moved); without them, one that never moved stayed at its initial scale
        // (raise it, or let it grow sooner) and one that moved fell toward its floor.
        const bool never_moved = d.scale_min == d.scale_max;
        const scale_replay& r = d.replay;
        const std::string look = failed ? " Likely cause" : " To look at";
        if (in.scaler == scaler_kind::dynamic && r.matched && r.growth_refused > 0) {
          d.likely_field = "scaler.max_scale";
          t += look + ": the loss scale's cap (scaler.max_scale = " + scale_text(r.max_scale) + ") refused growth " +
               std::to_string(r.growth_refused) + " time(s), and the scale under it is too small for these " +
               "gradients in " + zeroed.name + ": raise the cap, or use bf16.";
        } else if (in.scaler == scaler_kind::dynamic && r.matched && r.at_floor == 0 && r.backoffs > 0) {
          d.likely_field = "policy.gradient";
          t += look + ": " + std::to_string(r.backoffs) + " overflow(s) backed the scale off while these " +
               "gradients underflowed: " + zeroed.name + "'s range cannot hold both at one scale; use bf16, whose " +
               "exponent range is fp32's.";
        } else {
          const bool floor = r.matched ? r.at_floor > 0 : !never_moved;
          d.likely_field = in.scaler == scaler_kind::static_scale ? "scaler.static_scale"
                           : floor                                ? "scaler.min_scale"
                                                                  : "scaler.init_scale";
          t += look + ": the loss scale (" + d.likely_field + ")" +
               (in.scaler == scaler_kind::dynamic && never_moved ? ", which never moved (or scaler.growth_interval),"
                : in.scaler == scaler_kind::dynamic && !floor    ? ", which was still growing (or "
                                                                   "scaler.growth_interval),"
                                                                 : "") +
               " is too small for these gradients in " + zeroed.name + ": raise it, or use bf16.";
        }
      }
      break;
    case diagnosed_cause::overflow_skips:
      t += (failed ? " because " : " with skipped steps: ") + overflow_sentence(d, in.run) + "; " +
           scale_trajectory(d, in.scaler) + ".";
      if (d.skipped_at_faults == d.skipped) {
        d.likely_field = "faults";
        t +=
            std::string(
                " Likely cause: the injected faults (the scenario's faults), not the policy: the scaler "
                "skipped exactly those updates") +
            (d.applied_after_last_skip ? " and training went on." : ", and no applied step followed the last of them.");
      } else {
        d.likely_field = in.scaler == scaler_kind::dynamic        ? "scaler.init_scale"
                         : in.scaler == scaler_kind::static_scale ? "scaler.static_scale"
                                                                  : "policy.gradient";
        t += " Likely cause: gradients above " + format_name(gradient) + "'s largest finite value " +
             fmt("%g", static_cast<double>(max_finite(gradient))) + " after scaling (" + d.likely_field +
             "): start from a smaller scale, or use bf16.";
      }
      break;
    case diagnosed_cause::nonfinite_loss:
      d.likely_field = "policy.output";
      t += " because the training loss became inf/NaN at an applied step (not an overflow the scaler caught). "
           "Likely cause: activations outside " +
           format_name(in.run.policy.output) + "'s range (policy.output), or a NaN in the input.";
      break;
    case diagnosed_cause::undecided_checks:
      d.likely_field = d.undecided.front().field;
      t += undecided_sentence(d, in.parity);
      if (underflow) t += " Also seen: " + underflow_sentence(d, zeroed) + ".";
      if (d.skipped > 0) t += " Also seen: " + overflow_sentence(d, in.run) + ".";
      break;
    case diagnosed_cause::injected_faults:
      d.likely_field = "faults";
      t += " because of the injected faults: " + std::to_string(d.applied_faults) +
           " step(s) with a fault were applied (none skipped), so the difference from the reference is the faults', "
           "not the policy's. Likely cause: the scenario's faults (a loss scaler would skip an overflowing one).";
      break;
    case diagnosed_cause::rounding_error:
      d.likely_field = "policy";
      t += ": no gradient underflow above " + percent(significant_underflow_fraction) +
           ", no overflow and no skipped step, so the difference comes from rounding in " +
           format_name(coarsest_format(in.run.policy)) +
           " (the policy's coarsest format). Likely cause: the policy's " +
           "formats; keep the failing op classes in a wider format.";
      break;
  }
  if (!d.first_check.empty()) {
    const double ratio = d.first_check_limit > 0.0 ? d.first_check_value / d.first_check_limit : 0.0;
    t += std::string(" First ") + (d.first_check_status == verdict::fail ? "failed" : "undecided") +
         " check: " + d.first_check + " = " + fmt("%.4g", d.first_check_value) + " against a limit of " +
         fmt("%.4g", d.first_check_limit) + (ratio > 0.0 ? " (" + fmt("%.3g", ratio) + "x the limit)" : "") + ".";
  }
  d.text = std::move(t);
  return d;
}

run_diagnosis diagnose(const candidate_outcome& c) {
  return diagnose_run({.run = c.run,
                       .parity = c.parity,
                       .scaler = c.scaler_type,
                       .faults = c.fault_list,
                       .dynamic_config = c.scaler_type == scaler_kind::dynamic
                                             ? std::optional<scaler_config>(c.scaler_settings)
                                             : std::nullopt});
}

}  // namespace safeamp::sim
