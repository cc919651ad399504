// The decision and profile sections of the sim report (see report_decision.hpp).
#include "safeamp/sim/report_decision.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "safeamp/memory/devices.hpp"
#include "safeamp/memory/model_states.hpp"
#include "safeamp/memory/roofline.hpp"
#include "safeamp/policy/policy_string.hpp"
#include "safeamp/sim/report.hpp"
#include "safeamp/sim/report_svg.hpp"
#include "safeamp/sim/report_text.hpp"

namespace safeamp::sim {
namespace {

using report_text::fmt;
using report_text::percent;
using report_text::td;
using report_text::th;

// Parameters of the model: the elements of every parameter gradient of the first recorded step.
std::uint64_t parameter_count(const run_result& r) {
  if (r.steps.empty()) return 0;
  std::uint64_t n = 0;
  for (const layer_counts& l : r.steps.front().grads) {
    if (l.name != loss_gradient_name) n += l.elements;
  }
  return n;
}

double state_bytes(std::uint64_t parameters, const precision_policy& p) {
  return parameters == 0 ? 0.0 : static_cast<double>(model_states_for(parameters, p).total_bytes());
}

double gemm_ratio(const precision_policy& reference, const precision_policy& candidate) {
  const device_spec& d = find_device(decision_device);
  try {
    const double ref = peak_flops_for(d, reference.format_for(op_class::matmul));
    const double cand = peak_flops_for(d, candidate.format_for(op_class::matmul));
    return ref > 0.0 && cand > 0.0 ? ref / cand : 0.0;
  } catch (const error&) {
    return 0.0;  // a compute format no tensor core multiplies in: no estimate
  }
}

decision_row row_for(const candidate_outcome& k, const precision_policy& reference) {
  decision_row r;
  r.name = k.name;
  r.policy = k.parity.policy;
  r.outcome = k.parity.outcome;
  r.has_faults = !k.fault_list.empty();
  r.parameters = parameter_count(k.run);
  r.state_bytes = state_bytes(r.parameters, k.run.policy);
  r.reference_state_bytes = state_bytes(r.parameters, reference);
  const auto elements = static_cast<double>(k.run.activation_elements);
  r.activation_bytes = elements * storage_bytes(k.run.policy.output);
  r.reference_activation_bytes = elements * storage_bytes(reference.output);
  const double ref_total = r.reference_state_bytes + r.reference_activation_bytes;
  r.memory_saved_fraction = ref_total > 0.0 ? 1.0 - (r.state_bytes + r.activation_bytes) / ref_total : 0.0;
  r.gemm_time_ratio = gemm_ratio(reference, k.run.policy);
  r.skip_fraction =
      k.run.steps.empty() ? 0.0 : static_cast<double>(k.parity.skips.skipped) / static_cast<double>(k.run.steps.size());
  r.min_headroom = 1.0;
  for (const parity_check& c : k.parity.checks) {
    if (c.status == verdict::inconclusive || !(c.limit > 0.0) || !std::isfinite(c.value)) continue;
    const double h = (c.limit - c.value) / c.limit;
    if (h < r.min_headroom || r.headroom_check.empty()) {
      r.min_headroom = std::min(r.min_headroom, h);
      r.headroom_check = c.name;
    }
  }
  return r;
}

// True when a is the better choice than b (both eligible).
bool better(const decision_row& a, const decision_row& b) {
  constexpr double memory_tie = 0.01;  // within 1 % of the reference's bytes counts as the same memory
  if (std::abs(a.memory_saved_fraction - b.memory_saved_fraction) > memory_tie) {
    return a.memory_saved_fraction > b.memory_saved_fraction;
  }
  if (a.gemm_time_ratio != b.gemm_time_ratio && a.gemm_time_ratio > 0.0 && b.gemm_time_ratio > 0.0) {
    return a.gemm_time_ratio < b.gemm_time_ratio;
  }
  if (a.min_headroom != b.min_headroom) return a.min_headroom > b.min_headroom;
  return a.skip_fraction < b.skip_fraction;
}

}  // namespace

policy_decision decide_policy(const sim_summary& s) {
  policy_decision d;
  precision_policy reference = presets::fp32;
  try {
    reference = parse_policy(s.reference.manifest.policy);
  } catch (const error&) {
  }
  const decision_row* best = nullptr;
  bool passed_without_gain = false;
  for (const candidate_outcome& k : s.candidates) d.rows.push_back(row_for(k, reference));
  for (const decision_row& r : d.rows) {
    if (r.outcome != verdict::pass || r.has_faults) continue;
    // A candidate that needs as much memory as the reference policy or more and whose GEMMs are not estimated
    // faster (an fp32 candidate against a bf16 reference) gains nothing over running the reference policy.
    if (!(r.memory_saved_fraction > 0.0) && !(r.gemm_time_ratio > 0.0 && r.gemm_time_ratio < 1.0)) {
      passed_without_gain = true;
      continue;
    }
    if (best == nullptr || better(r, *best)) best = &r;
  }
  if (best == nullptr) {
    d.recommended = s.reference.manifest.policy;
    d.reason = passed_without_gain
                   ? "no candidate without injected faults passed the gate with less memory or faster GEMMs than the "
                     "reference policy (" +
                         s.reference.manifest.policy + "), which is the one known to be safe"
                   : "no candidate without injected faults passed the gate, so the reference policy (" +
                         s.reference.manifest.policy + ") is the one known to be safe";
    return d;
  }
  d.recommended = best->name;
  d.reason = "policy " + best->policy + ", passed with " + percent(best->memory_saved_fraction) +
             " less memory (model states and activations) than the reference and GEMMs estimated at " +
             fmt("%.2g", best->gemm_time_ratio) + "x the reference's time on the " + decision_device +
             "; its tightest check (" + best->headroom_check + ") keeps " + percent(best->min_headroom) +
             " of its limit in reserve, with " + percent(best->skip_fraction) + " of steps skipped";
  return d;
}

std::vector<phase_share> phase_means(const step_phase_seconds& p) {
  const double n = p.steps > 0 ? static_cast<double>(p.steps) : 1.0;
  const double timed = p.forward + p.casts + p.loss + p.backward + p.unscale_check + p.clip + p.optimizer;
  return {{"forward (GEMMs and layer ops)", "forward", p.forward / n},
          {"casts (emulated rounding)", "casts", p.casts / n},
          {"loss and its gradient", "loss", p.loss / n},
          {"backward", "backward", p.backward / n},
          {"unscale and inf/NaN check", "unscale_check", p.unscale_check / n},
          {"gradient norm and clip", "clip", p.clip / n},
          {"optimizer and scaler update", "optimizer", p.optimizer / n},
          {"other (batch, zeroing, counters)", "other", std::max(0.0, p.step_total - timed) / n}};
}

std::string render_decision_html(const sim_summary& s) {
  const policy_decision d = decide_policy(s);
  std::string out =
      "<h2 id=\"decision\">Decision</h2>\n<p>Gain against the reference (" + html_escape(s.reference.manifest.policy) +
      "): memory per the memory ledger (model states, plus the activations one training forward "
      "rounds, counted by the simulator, at the size of the output format) and GEMM time from the "
      "compute format's dense peak on the " +
      std::string(decision_device) +
      " (a bound for GEMM-bound steps; the simulator's times are not GPU times). Cost and risk: the "
      "verdict, skipped steps, and the headroom (limit - value) / limit of the tightest check.</p>\n"
      "<table><tr>" +
      th("run") + th("policy") + th("verdict") + th("model states") + th("activations") + th("memory saved") +
      th("GEMM time vs reference") + th("skipped") + th("tightest check") + th("headroom") + "</tr>\n";
  for (const decision_row& r : d.rows) {
    out += "<tr>" + td(r.name + (r.has_faults ? " (injected faults: not a candidate)" : "")) + td(r.policy) +
           td(verdict_name(r.outcome)) + td(r.parameters > 0 ? fmt("%.1f KiB", r.state_bytes / 1024.0) : "-") +
           td(r.activation_bytes > 0.0 ? fmt("%.1f KiB", r.activation_bytes / 1024.0) : "-") +
           td(r.parameters > 0 ? percent(r.memory_saved_fraction) : "-") +
           td(r.gemm_time_ratio > 0.0 ? fmt("%.2fx", r.gemm_time_ratio) : "-") + td(percent(r.skip_fraction)) +
           td(r.headroom_check) +
           td(r.min_headroom < 0.0 ? "over its limit (" + fmt("%.3g", 1.0 - r.min_headroom) + "x)"
                                   : percent(r.min_headroom)) +
           "</tr>\n";
  }
  out += "</table>\n<p class=\"recommend\"><b>Recommended: " + html_escape(d.recommended) + ".</b> " +
         html_escape(d.reason) + ".</p>\n";
  return out;
}

std::string render_profile_html(const sim_summary& s) {
  std::string out =
      "<h2 id=\"profile\">Profile: where the step time goes</h2>\n<p>Mean milliseconds per step of each phase, "
      "measured in the simulator with a steady clock around each phase of every step. Casts are timed inside the "
      "other phases and counted only here (on the trainer's thread). Emulation times of this CPU: they show "
      "where the simulator spends its time, not a GPU's split.</p>\n";
  // Drawn at the width of its column (600 px; the table takes the rest), so its text is not scaled down.
  svg_bar_chart chart{.title = "Milliseconds per step by phase", .y_label = "ms per step", .width = 600, .height = 260};
  std::string table = "<table><tr>" + th("phase");
  bool any = false;
  for (std::size_t i = 0; i < s.candidates.size(); ++i) {
    const candidate_outcome& k = s.candidates[i];
    if (k.run.phases.steps == 0) continue;
    any = true;
    chart.bars.push_back(k.name);
    chart.bar_colours.emplace_back(series_colour(i + 1));  // each run's colour in the loss chart
    table += th(k.name);
    std::vector<double> v;
    for (const phase_share& p : phase_means(k.run.phases)) v.push_back(p.seconds_per_step * 1e3);
    chart.values.push_back(std::move(v));
  }
  if (!any) return out + "<p>No step was timed in this invocation.</p>\n";
  table += "</tr>\n";
  const std::vector<phase_share> names = phase_means({});
  for (std::size_t i = 0; i < names.size(); ++i) {
    chart.groups.push_back(names[i].short_name);
    table += "<tr><td class=\"n\">" + html_escape(names[i].name) + "</td>";
    std::size_t bar = 0;
    for (const candidate_outcome& k : s.candidates) {
      if (k.run.phases.steps == 0) continue;
      const double total = k.run.phases.step_total / static_cast<double>(k.run.phases.steps);
      const double ms = chart.values[bar++][i];
      const double share = total > 0.0 ? ms * 1e-3 / total : 0.0;
      // A number cell that does not wrap, so the table keeps one line per phase in its half of the page.
      table += "<td class=\"n\">" + fmt("%.3g", ms) +
               (total > 0.0 ? (share < 0.01 ? " (&lt;1%)" : " (" + fmt("%.0f%%", share * 100.0) + ")") : "") + "</td>";
    }
    table += "</tr>\n";
  }
  table += "<tr>" + td("step (total)");
  for (const candidate_outcome& k : s.candidates) {
    if (k.run.phases.steps == 0) continue;
    table += td(fmt("%.3g", k.run.phases.step_total / static_cast<double>(k.run.phases.steps) * 1e3));
  }
  table += "</tr>\n</table>\n";
  return out + "<div class=\"profile\">\n<div>" + render_bar_chart(chart) + "</div>\n<div>" + table +
         "</div>\n</div>\n";
}

}  // namespace safeamp::sim
