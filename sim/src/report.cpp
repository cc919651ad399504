// Telemetry lines, the terminal summary and the JSON summary of a `safeamp sim` invocation.
#include "safeamp/sim/report.hpp"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "safeamp/sim/report_decision.hpp"
#include "safeamp/sim/report_files.hpp"
#include "safeamp/sim/report_text.hpp"

namespace safeamp::sim {
namespace {

using report_text::fmt;
using report_text::scale_text;

using json = nlohmann::json;

/// Finite doubles as numbers; inf/NaN as strings ("inf", "nan") so JSON stays valid and lossless.
json number_or_text(double v) {
  if (std::isfinite(v)) return v;
  return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
}

// An accuracy of `e`'s set: "nan" for a regression, which predicts no classes (its trainer's 0 means nothing; the
// report and the terminal say n/a), else the number.
json accuracy_json(const eval_metrics& e, double accuracy) {
  return e.regression ? json("nan") : number_or_text(accuracy);
}

// A slice's loss and accuracy: "nan" for a slice without held-out samples, whose trainer's 0 / 0 means nothing
// (it was written as loss 0 and accuracy 0, a perfect loss and a total miss; the gate calls its checks n/a).
json slice_json(const eval_metrics& e, const slice_metrics& sl) {
  const bool empty = sl.count == 0;
  return {{"name", sl.name},
          {"count", sl.count},
          {"loss", empty ? json("nan") : number_or_text(sl.loss)},
          {"accuracy", empty ? json("nan") : accuracy_json(e, sl.accuracy)}};
}

const parity_check* find_check(const parity_result& p, std::string_view prefix) {
  for (const parity_check& c : p.checks) {
    if (c.name.rfind(prefix, 0) == 0) return &c;
  }
  return nullptr;
}

/// `s` padded to `w` columns, always followed by at least one space.
std::string pad(std::string s, std::size_t w) {
  s.append(s.size() < w ? w - s.size() : 1, ' ');
  return s;
}

std::string steps_list(const std::vector<std::int64_t>& steps, std::size_t max_listed) {
  std::string out;
  for (std::size_t i = 0; i < steps.size() && i < max_listed; ++i) out += (i ? ", " : "") + std::to_string(steps[i]);
  if (steps.size() > max_listed) out += ", ... (" + std::to_string(steps.size() - max_listed) + " more)";
  return out;
}

}  // namespace

std::uint64_t peak_rss_bytes() noexcept {
  try {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("VmHWM:", 0) == 0) {
        return std::stoull(line.substr(6)) * 1024u;  // reported in kB
      }
    }
  } catch (...) {
  }
  return 0;
}

double cost_per_sample(const price_and_rate& r) noexcept {
  if (!(r.dollars_per_hour > 0.0) || !(r.samples_per_second > 0.0)) return 0.0;
  return r.dollars_per_hour / 3600.0 / r.samples_per_second;
}

double underflow_fraction(const layer_counts& c) noexcept {
  return c.elements == 0 ? 0.0 : static_cast<double>(c.underflow) / static_cast<double>(c.elements);
}

std::string file_slug(std::string_view label) {
  std::string out;
  for (const char ch : label) {
    // A dot only after the first letter or digit: a file named ".x.jsonl" or "...ckpt" is hidden from ls and globs.
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || (ch == '.' && !out.empty());
    if (ok) {
      out += ch;
    } else if (ch >= 'A' && ch <= 'Z') {
      out += static_cast<char>(ch - 'A' + 'a');
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  if (out.empty()) return "run";
  // A file name's bytes are bounded (255 on Linux file systems, with ".ckpt.tmp-<pid>-<n>" to come): a longer slug
  // keeps its first 100 characters and adds the whole label's hash, so distinct labels stay distinct. The
  // reference's label carries its policy text, which no bound limits (a 259-character policy failed the first
  // checkpoint write).
  if (out.size() > max_slug_bytes) {
    out.resize(100);
    while (out.back() == '-') out.pop_back();
    out += '-';
    out += hex64(fnv1a64(label));
  }
  return out;
}

std::string step_json_line(const step_record& s) {
  using ordered = nlohmann::ordered_json;  // keys in the documented order
  ordered layers = ordered::array();
  for (const layer_counts& l : s.grads) {
    layers.push_back({{"name", l.name},
                      {"elements", l.elements},
                      {"overflow", l.overflow},
                      {"underflow", l.underflow},
                      {"subnormal", l.subnormal},
                      {"nan", l.nan}});
  }
  const ordered j{{"step", s.step},
               {"loss", number_or_text(s.loss)},
               {"scale", number_or_text(s.scale)},
               {"found_inf", s.found_inf},
               {"skipped", s.skipped},
               {"grad_norm_before_clip", number_or_text(s.grad_norm_before_clip)},
               {"grad_norm_after_clip", number_or_text(s.grad_norm_after_clip)},
               {"layers", layers},
               {"step_seconds", s.step_seconds}};
  return j.dump() + "\n";
}

std::string telemetry_jsonl(const run_result& run) {
  std::string out;
  for (const step_record& s : run.steps) out += step_json_line(s);
  return out;
}

std::string render_terminal_summary(const sim_summary& s) {
  const locked_reference& ref = s.reference;
  std::string o;
  o += "safeamp sim: scenario '" + s.scenario + "'\n";
  o += "  model: " + ref.manifest.model + "\n";
  o += "  data:  " + ref.manifest.data + "\n";
  o += "  " + std::to_string(ref.manifest.steps) + " steps x batch " + std::to_string(ref.manifest.batch_size) +
       ", seed " + std::to_string(ref.manifest.seed) + ", " + ref.manifest.optimizer + "\n";
  o += "  reference: " + ref.manifest.policy + ", id " + ref.reference_id + ", locked " + ref.locked_utc +
       (s.reference_reused ? " (reused from the output folder)" : " (locked by this run)") + "\n";
  for (const manifest_difference& d : s.environment_notes) {
    o += "  note: " + d.field + " differs from the lock: '" + d.reference_value + "' now '" + d.candidate_value + "'\n";
  }
  o += "\n";
  const std::size_t wn = 31;
  o += pad("run", wn) + pad("policy", 12) + pad("scaler", 9) + pad("loss", 16) + pad("accuracy", 16) +
       pad("curve", 8) + pad("logits", 8) + pad("slices", 8) + pad("skipped", 8) + pad("scale", 14) + "verdict\n";
  o += pad(ref.label, wn) + pad(ref.manifest.policy, 12) + pad("none", 9) + pad(fmt(ref.final_eval.regression ? "%.4g" : "%.4f", ref.final_eval.loss), 16) +
       pad(ref.final_eval.regression ? std::string("n/a") : fmt("%.4f", ref.final_eval.accuracy), 16) + pad("-", 8) + pad("-", 8) + pad("-", 8) + pad("0", 8) +
       pad("-", 14) + "reference\n";
  for (const candidate_outcome& c : s.candidates) {
    const eval_metrics& e = c.run.final_eval;
    const double dl = (e.loss - ref.final_eval.loss) / ref.final_eval.loss * 100.0;
    const double da = (e.accuracy - ref.final_eval.accuracy) * 100.0;
    const parity_check* curve = find_check(c.parity, "loss-curve gap");
    const parity_check* logit = find_check(c.parity, "golden logits max abs");
    std::size_t slice_checks = 0;
    std::size_t slice_fails = 0;
    std::size_t slice_undecided = 0;
    for (const parity_check& k : c.parity.checks) {
      if (k.name.rfind("slice ", 0) == 0 && k.status != verdict::not_applicable) {  // a regression's accuracy
        ++slice_checks;
        if (k.status == verdict::fail) ++slice_fails;
        if (k.status == verdict::inconclusive) ++slice_undecided;
      }
    }
    std::string slices = "ok";
    if (slice_fails > 0) {
      slices = std::to_string(slice_fails) + "/" + std::to_string(slice_checks) + " x";
    } else if (slice_undecided > 0) {
      slices = std::to_string(slice_undecided) + "/" + std::to_string(slice_checks) + " ?";
    }
    const std::string scaler_kind = c.scaler.substr(0, c.scaler.find(' '));
    std::string verdict = verdict_name(c.parity.outcome);
    if (c.expect != expectation::any) {
      std::string expected = expectation_name(c.expect);
      for (char& ch : expected) ch = static_cast<char>(ch - 'a' + 'A');
      verdict += " (expected " + expected + (c.as_expected ? ")" : ", NOT AS EXPECTED)");
    }
    o += pad(c.name, wn) + pad(c.parity.policy, 12) + pad(scaler_kind, 9) +
         // A regression's loss can sit near 0, where a percentage of it says nothing: the gate measures its
         // increase against the constant predictor's floor (the limits line below), so the column shows the value.
         pad(e.regression ? fmt("%.4g", e.loss) : fmt("%.4f", e.loss) + fmt(" %+.1f%%", dl), 16) +
         pad(e.regression ? std::string("n/a") : fmt("%.4f", e.accuracy) + fmt(" %+.1fpt", da), 16) +
         // A gap of 1e27 (an applied loss spike) as %.1f%% printed 30 digits: %.3g past 1000 %.
         pad(curve ? (std::fabs(curve->value) < 10.0 ? fmt("%.1f%%", curve->value * 100.0)
                                                     : fmt("%.3g%%", curve->value * 100.0))
                   : "-",
             8) +
         pad(logit ? (std::fabs(logit->value) < 1e4 ? fmt("%.3f", logit->value) : fmt("%.3g", logit->value)) : "-", 8) +
         pad(slices, 8) + pad(std::to_string(c.parity.skips.skipped), 8) +
         pad(scale_text(c.parity.skips.min_scale) + ".." + scale_text(c.parity.skips.max_scale), 14) + verdict + "\n";
  }
  o += "\n  loss/accuracy: final held-out, change vs reference; curve: mean gap of the smoothed training loss;\n"
       "  logits: max |error| / rms of the golden probe logits; slices: failing (x) or undecided (?) slice checks.\n\n";
  for (const candidate_outcome& c : s.candidates) {
    const auto limit = [&c](std::string_view prefix) {
      const parity_check* k = find_check(c.parity, prefix);
      if (k == nullptr) return std::string("-");
      return k->status == verdict::not_applicable ? std::string("n/a") : fmt("%.3g", k->limit);
    };
    o += c.name + ": limits loss " + limit("held-out loss") + " rel, accuracy " + limit("held-out accuracy") +
         ", curve " + limit("loss-curve gap") + ", logits " + limit("golden logits max abs") + "/" +
         limit("golden logits max rel") + ", skipped " + limit("skipped steps") + "\n";
    if (!c.faults.empty()) o += "  faults: " + c.faults + "\n";
    if (c.parity.skips.skipped > 0) {
      o += "  skipped " + std::to_string(c.parity.skips.skipped) + " step(s) at " +
           steps_list(c.parity.skips.steps, 12) + "\n";
    }
    if (const run_diagnosis d = diagnose(c); d.cause != diagnosed_cause::none) o += "  why: " + d.text + "\n";
    for (const std::string& r : c.parity.reasons) o += "  FAIL " + r + "\n";
    for (const std::string& r : c.parity.undecided) o += "  INCONCLUSIVE " + r + "\n";
    if (c.parity.outcome != verdict::pass) {
      o += "  -> run instead: " + c.decision.run_instead + " [" + c.decision.source + "]\n";
    }
  }
  const policy_decision decision = decide_policy(s);
  o += "\nrecommended: " + decision.recommended + " (" + decision.reason + ")\n\n";
  bool all_expected = true;
  for (const candidate_outcome& c : s.candidates) all_expected = all_expected && c.as_expected;
  o += all_expected ? "every verdict is the one the scenario expects\n"
                    : "some verdicts differ from what the scenario expects (exit code 1)\n";
  return o;
}

std::string render_summary_json(const sim_summary& s) {
  json cands = json::array();
  for (const candidate_outcome& c : s.candidates) {
    json checks = json::array();
    for (const parity_check& k : c.parity.checks) {
      checks.push_back({{"name", k.name},
                        {"value", number_or_text(k.value)},
                        {"limit", number_or_text(k.limit)},
                        {"status", verdict_name(k.status)},
                        {"detail", k.detail},
                        {"basis", k.basis},
                        {"undecided", k.undecided}});
    }
    json slices = json::array();
    for (const slice_metrics& sl : c.run.final_eval.slices) slices.push_back(slice_json(c.run.final_eval, sl));
    const run_diagnosis d = diagnose(c);
    json worst = json::array();
    for (const layer_underflow& l : d.worst_layers) {
      worst.push_back({{"name", l.name}, {"fraction", l.fraction}, {"first_step", l.first_step}});
    }
    json undecided = json::array();
    for (const undecided_group& g : d.undecided) {
      undecided.push_back({{"field", g.field}, {"advice", g.advice}, {"checks", g.checks}, {"why", g.why}});
    }
    const json diagnosis{{"cause", diagnosed_cause_name(d.cause)},
                         {"likely_field", d.likely_field},
                         {"text", d.text},
                         {"loss_gradient_underflow", d.loss_gradient_underflow},
                         {"underflow_began", d.underflow_began},
                         {"worst_layers", worst},
                         {"zero_gradient_steps", d.zero_norm_steps},
                         {"overflow_steps", d.overflow_steps},
                         {"first_overflow", d.first_overflow},
                         {"skipped", d.skipped},
                         {"skipped_at_faults", d.skipped_at_faults},
                         {"scale_first", d.scale_first},
                         {"scale_last", d.scale_last},
                         {"first_check", d.first_check},
                         {"first_check_value", number_or_text(d.first_check_value)},
                         {"first_check_limit", number_or_text(d.first_check_limit)},
                         {"undecided", undecided}};
    json profile = json::object();
    for (const phase_share& p : phase_means(c.run.phases)) profile[p.short_name] = p.seconds_per_step;
    profile["step"] = c.run.phases.steps > 0 ? c.run.phases.step_total / static_cast<double>(c.run.phases.steps) : 0.0;
    profile["steps_timed"] = c.run.phases.steps;
    cands.push_back(json{{"name", c.name},
                         {"diagnosis", diagnosis},
                         {"profile_seconds_per_step", profile},
                         {"policy", c.parity.policy},
                         {"scaler", c.scaler},
                         {"faults", c.faults},
                         {"verdict", verdict_name(c.parity.outcome)},
                         {"expected", expectation_name(c.expect)},
                         {"as_expected", c.as_expected},
                         {"reasons", c.parity.reasons},
                         {"undecided", c.parity.undecided},
                         {"run_instead", c.decision.run_instead},
                         {"fallback_source", c.decision.source},
                         {"held_out_loss", number_or_text(c.run.final_eval.loss)},
                         {"held_out_accuracy", accuracy_json(c.run.final_eval, c.run.final_eval.accuracy)},
                         {"slices", slices},
                         {"checks", checks},
                         {"skipped_steps", c.parity.skips.steps},
                         {"min_scale", c.parity.skips.min_scale},
                         {"max_scale", c.parity.skips.max_scale},
                         {"weights_hash", hex64(c.run.weights_hash)},
                         {"wall_seconds", c.run.wall_seconds},
                         {"samples_per_second", c.run.samples_per_second},
                         {"cost_per_sample_dollars", cost_per_sample({.dollars_per_hour = s.dollars_per_hour,
                                                                      .samples_per_second = c.run.samples_per_second})},
                         {"telemetry", c.telemetry_file}});
  }
  const locked_reference& r = s.reference;
  json ref_slices = json::array();
  for (const slice_metrics& sl : r.final_eval.slices) ref_slices.push_back(slice_json(r.final_eval, sl));
  const policy_decision decision = decide_policy(s);
  json rows = json::array();
  for (const decision_row& row : decision.rows) {
    rows.push_back({{"name", row.name},
                    {"verdict", verdict_name(row.outcome)},
                    {"injected_faults", row.has_faults},
                    {"parameters", row.parameters},
                    {"model_state_bytes", row.state_bytes},
                    {"reference_model_state_bytes", row.reference_state_bytes},
                    {"activation_bytes", row.activation_bytes},
                    {"reference_activation_bytes", row.reference_activation_bytes},
                    {"memory_saved_fraction", row.memory_saved_fraction},
                    {"gemm_time_ratio", row.gemm_time_ratio},
                    {"skip_fraction", row.skip_fraction},
                    {"min_headroom", row.min_headroom},
                    {"tightest_check", row.headroom_check}});
  }
  const json j{{"scenario", s.scenario},
               {"decision",
                {{"recommended", decision.recommended},
                 {"reason", decision.reason},
                 {"device", decision_device},
                 {"candidates", rows}}},
               {"reference",
                {{"id", r.reference_id},
                 {"locked_utc", r.locked_utc},
                 {"reused", s.reference_reused},
                 {"policy", r.manifest.policy},
                 {"held_out_loss", r.final_eval.loss},
                 {"held_out_accuracy", accuracy_json(r.final_eval, r.final_eval.accuracy)},
                 {"slices", ref_slices},
                 {"samples_per_second", r.samples_per_second}}},
               {"candidates", cands},
               {"peak_rss_bytes", s.peak_rss_bytes},
               {"preflight",
                {{"estimated_peak_bytes", s.preflight.estimated_peak_bytes},
                 {"estimated_seconds", s.preflight.estimated_seconds},
                 {"memory_budget_bytes", s.preflight.memory_budget_bytes},
                 {"time_budget_seconds", s.preflight.time_budget_seconds},
                 {"training_flops_per_second", s.preflight.training_flops_per_second},
                 {"ranks_on_this_machine", s.preflight.ranks_on_this_machine}}},
               {"dollars_per_hour", s.dollars_per_hour},
               {"total_wall_seconds", s.total_wall_seconds},
               {"exit_code", s.exit_code}};
  return j.dump(1) + "\n";
}

}  // namespace safeamp::sim
