// The self-contained HTML report of a `safeamp sim` invocation: tables, inline SVG plots, the manifest and
// the throughput/cost section. No scripts, no external resources.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "safeamp/sim/report.hpp"
#include "safeamp/sim/report_files.hpp"
#include "safeamp/sim/report_svg.hpp"

namespace safeamp::sim {
namespace {

const char* status_class(verdict v) {
  switch (v) {
    case verdict::pass: return "pass";
    case verdict::inconclusive: return "inconclusive";
    case verdict::fail: return "fail";
  }
  return "fail";
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string td(const std::string& s) { return "<td>" + html_escape(s) + "</td>"; }
std::string th(const std::string& s) { return "<th>" + html_escape(s) + "</th>"; }

svg_series loss_series(const std::string& name, const run_result& r, bool dashed) {
  svg_series s{.name = name, .x = {}, .y = {}, .dashed = dashed};
  for (const step_record& st : r.steps) {
    s.x.push_back(static_cast<double>(st.step));
    s.y.push_back(st.skipped ? std::nan("") : st.loss);  // skipped steps (faulted spikes) are gaps
  }
  return s;
}

std::string section_loss(const sim_summary& s) {
  svg_line_chart c{.title = "Training loss (skipped steps left out)", .x_label = "step", .y_label = "loss"};
  c.series.push_back(loss_series(s.reference.label, as_run_result(s.reference), false));
  for (const candidate_outcome& k : s.candidates) c.series.push_back(loss_series(k.name, k.run, true));
  return "<h2>Loss curves</h2>\n" + render_line_chart(c);
}

std::string section_scale(const sim_summary& s) {
  svg_line_chart c{.title = "Loss scale over time (x: skipped step)", .x_label = "step", .y_label = "loss scale",
                   .log2_y = true};
  c.series.push_back({.name = "(reference: none)", .x = {}, .y = {}, .dashed = false});
  svg_points skipped{.name = "skipped step", .x = {}, .y = {}};
  for (const candidate_outcome& k : s.candidates) {
    svg_series line{.name = k.name, .x = {}, .y = {}, .dashed = false};
    for (const step_record& st : k.run.steps) {
      line.x.push_back(static_cast<double>(st.step));
      line.y.push_back(st.scale);
      if (st.skipped) {
        skipped.x.push_back(static_cast<double>(st.step));
        skipped.y.push_back(st.scale);
      }
    }
    c.series.push_back(std::move(line));
  }
  c.points.push_back(std::move(skipped));
  return "<h2>Loss scale and skipped steps</h2>\n" + render_line_chart(c);
}

std::string section_underflow(const sim_summary& s) {
  constexpr std::size_t max_layers = 9;
  std::string out = "<h2>Gradient underflow per layer</h2>\n<p>Fraction of each layer's gradient elements that "
                    "were finite and nonzero before the cast into the gradient format and zero after it.</p>\n";
  bool any = false;
  for (const candidate_outcome& k : s.candidates) {
    // Layers ranked by total underflow; the top few are plotted.
    std::map<std::string, double> total;
    for (const step_record& st : k.run.steps) {
      for (const layer_counts& l : st.grads) total[l.name] += static_cast<double>(l.underflow);
    }
    std::vector<std::pair<std::string, double>> ranked(total.begin(), total.end());
    std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    if (ranked.empty() || ranked.front().second == 0.0) {
      out += "<p>" + html_escape(k.name) + ": no gradient underflow recorded.</p>\n";
      continue;
    }
    any = true;
    svg_line_chart c{.title = "Underflow fraction per layer: " + k.name, .x_label = "step",
                     .y_label = "underflowed fraction", .height = 280};
    for (std::size_t i = 0; i < ranked.size() && i < max_layers; ++i) {
      svg_series line{.name = ranked[i].first, .x = {}, .y = {}, .dashed = false};
      for (const step_record& st : k.run.steps) {
        for (const layer_counts& l : st.grads) {
          if (l.name == ranked[i].first) {
            line.x.push_back(static_cast<double>(st.step));
            line.y.push_back(underflow_fraction(l));
          }
        }
      }
      c.series.push_back(std::move(line));
    }
    out += render_line_chart(c);
    if (ranked.size() > max_layers) {
      out += "<p>" + std::to_string(ranked.size() - max_layers) + " layers with less underflow not drawn.</p>\n";
    }
  }
  if (!any) out += "<p>No candidate lost gradient values to underflow.</p>\n";
  return out;
}

std::string section_slices(const sim_summary& s) {
  svg_bar_chart acc{.title = "Held-out accuracy per slice", .y_label = "accuracy"};
  svg_bar_chart loss{.title = "Held-out loss per slice", .y_label = "loss"};
  for (const slice_metrics& sl : s.reference.final_eval.slices) {
    acc.groups.push_back(sl.name);
    loss.groups.push_back(sl.name);
  }
  const auto add = [&](const std::string& name, const eval_metrics& e) {
    acc.bars.push_back(name);
    loss.bars.push_back(name);
    std::vector<double> a;
    std::vector<double> l;
    for (const std::string& g : acc.groups) {
      const auto it =
          std::find_if(e.slices.begin(), e.slices.end(), [&g](const slice_metrics& m) { return m.name == g; });
      a.push_back(it == e.slices.end() ? std::nan("") : it->accuracy);
      l.push_back(it == e.slices.end() ? std::nan("") : it->loss);
    }
    acc.values.push_back(a);
    loss.values.push_back(l);
  };
  add(s.reference.label, s.reference.final_eval);
  for (const candidate_outcome& k : s.candidates) add(k.name, k.run.final_eval);
  std::string out = "<h2>Slices</h2>\n" + render_bar_chart(acc) + render_bar_chart(loss);
  out += "<table><tr>" + th("slice") + th("samples");
  for (const std::string& b : acc.bars) out += th(b + " loss / acc");
  out += "</tr>\n";
  for (std::size_t g = 0; g < acc.groups.size(); ++g) {
    const std::int64_t n = s.reference.final_eval.slices[g].count;
    out += "<tr>" + td(acc.groups[g]) +
           td(std::to_string(n) + (n < gate_min_samples ? " (too small to judge: the gate needs " +
                                                              std::to_string(gate_min_samples) + ")"
                                                        : ""));
    for (std::size_t b = 0; b < acc.bars.size(); ++b) {
      out += td(fmt("%.4f", loss.values[b][g]) + " / " + fmt("%.4f", acc.values[b][g]));
    }
    out += "</tr>\n";
  }
  return out + "</table>\n";
}

std::string section_verdicts(const sim_summary& s) {
  std::string out = "<h2>Parity gate</h2>\n<table><tr>" + th("run") + th("policy") + th("scaler") + th("faults") +
                    th("held-out loss") + th("accuracy") + th("skipped") + th("verdict") + th("expected") +
                    th("run instead") + "</tr>\n";
  out += "<tr>" + td(s.reference.label) + td(s.reference.manifest.policy) + td("none") + td("") +
         td(fmt("%.4f", s.reference.final_eval.loss)) + td(fmt("%.4f", s.reference.final_eval.accuracy)) + td("0") +
         td("reference") + td("") + td("") + "</tr>\n";
  for (const candidate_outcome& k : s.candidates) {
    const bool pass = k.parity.outcome == verdict::pass;
    out += "<tr>" + td(k.name) + td(k.parity.policy) + td(k.scaler) + td(k.faults) +
           td(fmt("%.4f", k.run.final_eval.loss)) + td(fmt("%.4f", k.run.final_eval.accuracy)) +
           td(std::to_string(k.parity.skips.skipped)) + "<td class=\"" + status_class(k.parity.outcome) + "\">" +
           verdict_name(k.parity.outcome) + "</td>" +
           td(std::string(expectation_name(k.expect)) + (k.as_expected ? "" : " (NOT AS EXPECTED)")) +
           td(pass ? "" : k.decision.run_instead + " [" + k.decision.source + "]") + "</tr>\n";
  }
  out += "</table>\n<h3>Checks</h3>\n";
  for (const candidate_outcome& k : s.candidates) {
    out += "<details" + std::string(k.parity.outcome != verdict::pass ? " open" : "") + "><summary>" +
           html_escape(k.name) + ": " + verdict_name(k.parity.outcome) + "</summary>\n<table><tr>" + th("check") +
           th("value") + th("limit") + th("") + th("measured") + th("limit from") + "</tr>\n";
    for (const parity_check& c : k.parity.checks) {
      const char* mark = c.status == verdict::pass ? "ok" : verdict_name(c.status);
      out += "<tr>" + td(c.name) + td(fmt("%.4g", c.value)) + td(fmt("%.4g", c.limit)) + "<td class=\"" +
             status_class(c.status) + "\">" + mark + "</td>" +
             td(c.detail + (c.undecided.empty() ? "" : "; undecided: " + c.undecided)) + td(c.basis) + "</tr>\n";
    }
    out += "</table></details>\n";
  }
  return out;
}

std::string section_manifest(const sim_summary& s) {
  const run_manifest& m = s.reference.manifest;
  const std::pair<const char*, std::string> rows[] = {
      {"reference id", s.reference.reference_id},
      {"locked (UTC)", s.reference.locked_utc + (s.reference_reused ? " (reused)" : "")},
      {"scenario", m.scenario},
      {"model", m.model},
      {"data", m.data},
      {"data fingerprint", m.data_fingerprint},
      {"seed / data seed", std::to_string(m.seed) + " / " + std::to_string(m.data_seed)},
      {"steps x batch", std::to_string(m.steps) + " x " + std::to_string(m.batch_size)},
      {"optimizer", m.optimizer},
      {"probe logits", std::to_string(m.probe_rows) + " x " + std::to_string(m.probe_cols)},
      {"policy", m.policy},
      {"library version", m.library_version},
      {"compiler", m.compiler},
      {"compiler flags", m.compiler_flags},
      {"hardware", m.hardware},
      {"threads", std::to_string(m.threads)},
      {"weights hash", hex64(s.reference.weights_hash)},
  };
  std::string out = "<h2>Reference manifest</h2>\n<table>";
  for (const auto& [k, v] : rows) out += "<tr>" + th(k) + td(v) + "</tr>\n";
  out += "</table>\n";
  for (const manifest_difference& d : s.environment_notes) {
    out += "<p>Note: " + html_escape(d.field) + " differs from the lock: '" + html_escape(d.reference_value) +
           "', now '" + html_escape(d.candidate_value) + "'.</p>\n";
  }
  return out;
}

std::string section_cost(const sim_summary& s) {
  std::string out = "<h2>Throughput and cost</h2>\n<table><tr>" + th("run") + th("wall s") + th("samples/s") +
                    th("$ per 1M samples") + "</tr>\n";
  const auto row = [&](const std::string& name, double wall, double sps) {
    const double c = cost_per_sample(s.dollars_per_hour, sps) * 1e6;
    out += "<tr>" + td(name) + td(fmt("%.2f", wall)) + td(fmt("%.1f", sps)) +
           td(s.dollars_per_hour > 0 ? fmt("%.4f", c) : "-") + "</tr>\n";
  };
  row(s.reference.label + (s.reference_reused ? " (at lock time)" : ""), s.reference.wall_seconds,
      s.reference.samples_per_second);
  for (const candidate_outcome& k : s.candidates) row(k.name, k.run.wall_seconds, k.run.samples_per_second);
  out += "</table>\n<p>Peak resident memory of the process: " +
         fmt("%.1f", static_cast<double>(s.peak_rss_bytes) / 1048576.0) + " MiB. Total wall time " +
         fmt("%.1f", s.total_wall_seconds) + " s.";
  if (s.preflight.estimated_peak_bytes > 0.0) {
    out += " Estimated before training (preflight): " + fmt("%.1f", s.preflight.estimated_peak_bytes / 1048576.0) +
           " MiB and " + fmt("%.1f", s.preflight.estimated_seconds) + " s.";
  }
  out += "</p>\n";
  out += "<p>Method: samples/s is training samples (sequences or examples) of a run divided by that run's wall "
         "time on a steady clock, measured by the simulator around the whole run (data, forward, backward, "
         "emulated casts, optimizer). Peak memory is VmHWM from /proc/self/status at the end of the process "
         "(the high-water mark of resident memory over all runs, not per run). Cost per sample = price per hour "
         "/ 3600 / samples per second, with the price from the scenario (" +
         fmt("$%.4g", s.dollars_per_hour) +
         " per hour). These are emulation speeds of this CPU, for comparing runs with each other; they are not "
         "GPU speeds.</p>\n";
  return out;
}

}  // namespace

std::string render_html_report(const sim_summary& s) {
  std::string h =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>safeamp sim report: " +
      html_escape(s.scenario) +
      "</title>\n<style>\nbody{font-family:sans-serif;margin:24px;color:#222;max-width:1100px}\n"
      "table{border-collapse:collapse;margin:8px 0 16px}\nth,td{border:1px solid #ccc;padding:3px 8px;"
      "text-align:left;font-size:13px}\nth{background:#f2f2f2}\n.pass{color:#1a7f37;font-weight:bold}\n"
      ".fail{color:#c62828;font-weight:bold}\n.inconclusive{color:#b26a00;font-weight:bold}\nsvg{display:block;margin:8px 0}\n</style>\n</head>\n<body>\n";
  h += "<h1>safeamp sim: " + html_escape(s.scenario) + "</h1>\n";
  if (!s.description.empty()) h += "<p>" + html_escape(s.description) + "</p>\n";
  bool all_expected = true;
  for (const candidate_outcome& k : s.candidates) all_expected = all_expected && k.as_expected;
  h += std::string("<p><b>") + (all_expected ? "Every verdict is the one the scenario expects."
                                              : "Some verdicts differ from what the scenario expects.") +
       "</b> Exit code " + std::to_string(s.exit_code) + ".</p>\n";
  h += section_verdicts(s);
  h += section_loss(s);
  h += section_scale(s);
  h += section_underflow(s);
  h += section_slices(s);
  h += section_manifest(s);
  h += section_cost(s);
  h += "</body>\n</html>\n";
  return h;
}

}  // namespace safeamp::sim
