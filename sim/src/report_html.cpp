// The self-contained HTML report of a `safeamp sim` invocation: tables, inline SVG plots, the manifest and
// the throughput/cost section. No scripts, no external resources.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <string>

#include "safeamp/sim/report.hpp"
#include "safeamp/sim/report_decision.hpp"
#include "safeamp/sim/report_files.hpp"
#include "safeamp/sim/report_svg.hpp"
#include "safeamp/sim/report_text.hpp"

namespace safeamp::sim {
namespace {

using report_text::fmt;
using report_text::percent;
using report_text::td;
using report_text::th;

const char* status_class(verdict v) {
  switch (v) {
    case verdict::pass: return "pass";
    case verdict::inconclusive: return "inconclusive";
    case verdict::fail: return "fail";
    case verdict::not_applicable: return "na";  // a check that does not apply (accuracy of a regression)
  }
  return "fail";
}

// What the step records' loss is multiplied by (sim_summary::recorded_loss_factor): the charts divide it out so
// the curves are in the held-out table's units.
double loss_weight(const sim_summary& s) {
  const double w = s.recorded_loss_factor;
  return std::isfinite(w) && w > 0.0 ? w : 1.0;
}

// The held-out losses' format: %.4g for a regression, whose losses can sit near 0, else %.4f (nats).
const char* held_out_loss_format(const sim_summary& s) { return s.reference.final_eval.regression ? "%.4g" : "%.4f"; }

// The losses' units: nats for cross-entropy, else the regression's own loss (mse, l1 or huber), which the
// reference records with its baseline.
std::string loss_units(const sim_summary& s) {
  const std::optional<regression_baseline>& r = s.reference.final_eval.regression;
  return r ? r->loss : "nats";
}

svg_series loss_series(const std::string& name, const run_result& r, double weight, bool dashed) {
  svg_series s{.name = name, .x = {}, .y = {}, .dashed = dashed, .colour = {}, .markers = true};
  for (const step_record& st : r.steps) {
    s.x.push_back(static_cast<double>(st.step));
    s.y.push_back(st.skipped ? std::nan("") : st.loss / weight);  // skipped steps (faulted spikes) are gaps
  }
  return s;
}

std::string section_loss(const sim_summary& s) {
  const double weight = loss_weight(s);
  const bool weighted = weight != 1.0;
  const std::string units = loss_units(s);
  svg_line_chart c{.title = "Training loss per step (skipped steps left out)",
                   .x_label = "step",
                   .y_label = "training loss (" + units + (weighted ? ", multiplier divided out)" : ")"),
                   .width = 1300,
                   .height = 300};
  c.series.push_back(loss_series(s.reference.label, as_run_result(s.reference), weight, false));
  for (const candidate_outcome& k : s.candidates) c.series.push_back(loss_series(k.name, k.run, weight, true));
  std::string note =
      s.reference.final_eval.regression
          ? "<p>The " + units + " loss of each training batch, in the units of the held-out loss in the table"
          : std::string(
                "<p>Cross-entropy of each training batch in nats, the units of the held-out loss "
                "in the table");
  if (weighted) {
    note += "; the scenario trains on " + fmt("%g", weight) +
            " x this loss (training.loss_multiplier times training.loss_weight), which is divided out here";
  }
  return "<h2 id=\"loss\">Loss curves</h2>\n" + note + ".</p>\n" + render_line_chart(c);
}

std::string section_scale(const sim_summary& s) {
  svg_line_chart c{.title = "Loss scale per step (x: skipped step)",
                   .x_label = "step",
                   .y_label = "loss scale (log2)",
                   .log2_y = true,
                   .width = 1300,
                   .height = 230};
  svg_points skipped{.name = "skipped step", .x = {}, .y = {}};
  for (std::size_t i = 0; i < s.candidates.size(); ++i) {
    const candidate_outcome& k = s.candidates[i];
    // Colours as in the loss chart, where series 0 is the reference.
    svg_series line{.name = k.name,
                    .x = {},
                    .y = {},
                    .dashed = false,
                    .colour = std::string(series_colour(i + 1)),
                    .markers = true};
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
  return "<h2 id=\"scale\">Loss scale and skipped steps</h2>\n<p>Runs without loss scaling (the reference too) stay "
         "at 2^0; lines drawn over each other show as alternating markers.</p>\n" +
         render_line_chart(c);
}

std::string section_underflow(const sim_summary& s) {
  constexpr std::size_t max_layers = 9;
  std::string out =
      "<h2 id=\"underflow\">Gradient underflow per layer</h2>\n<p>Fraction of each layer's gradient "
      "elements that were finite and nonzero before the cast into the gradient format and zero after "
      "it. Every chart has the same y-scale and every layer the same colour in every chart.</p>\n";
  // Layers ranked by total underflow per run; the top few of each run are plotted.
  std::vector<std::vector<std::string>> plotted(s.candidates.size());
  std::vector<std::string> layer_order;  // every plotted layer, in order of first appearance: its colour index
  double y_top = 0.0;
  for (std::size_t i = 0; i < s.candidates.size(); ++i) {
    std::map<std::string, double> total;
    for (const step_record& st : s.candidates[i].run.steps) {
      for (const layer_counts& l : st.grads) total[l.name] += static_cast<double>(l.underflow);
    }
    std::vector<std::pair<std::string, double>> ranked(total.begin(), total.end());
    std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    for (std::size_t r = 0; r < ranked.size() && r < max_layers && ranked[r].second > 0.0; ++r) {
      plotted[i].push_back(ranked[r].first);
      if (std::find(layer_order.begin(), layer_order.end(), ranked[r].first) == layer_order.end()) {
        layer_order.push_back(ranked[r].first);
      }
    }
    for (const step_record& st : s.candidates[i].run.steps) {
      for (const layer_counts& l : st.grads) y_top = std::max(y_top, underflow_fraction(l));
    }
  }
  std::string charts;
  std::string quiet;
  for (std::size_t i = 0; i < s.candidates.size(); ++i) {
    const candidate_outcome& k = s.candidates[i];
    if (plotted[i].empty()) {
      quiet += (quiet.empty() ? "" : ", ") + k.name;
      continue;
    }
    // The peak in the title: a run whose underflow is tiny next to another's shows flat lines on the shared scale.
    double peak = 0.0;
    for (const step_record& st : k.run.steps) {
      for (const layer_counts& l : st.grads) peak = std::max(peak, underflow_fraction(l));
    }
    // Two per row at full size (three would scale their text down to ~8 px in a 1400 px window).
    svg_line_chart c{.title = "Underflow per layer: " + k.name + " (peak " + percent(peak) + ")",
                     .x_label = "step",
                     .y_label = "underflowed fraction",
                     .width = 620,
                     .height = 220};
    c.legend_width = 170.0;  // layer names are short
    c.y_min = 0.0;
    c.y_max = y_top;
    for (const std::string& name : plotted[i]) {
      const auto colour_index =
          static_cast<std::size_t>(std::find(layer_order.begin(), layer_order.end(), name) - layer_order.begin());
      svg_series line{.name = name,
                      .x = {},
                      .y = {},
                      .dashed = colour_index >= 10,
                      .colour = std::string(series_colour(colour_index)),
                      .markers = false};
      for (const step_record& st : k.run.steps) {
        for (const layer_counts& l : st.grads) {
          if (l.name == name) {
            line.x.push_back(static_cast<double>(st.step));
            line.y.push_back(underflow_fraction(l));
          }
        }
      }
      c.series.push_back(std::move(line));
    }
    charts += "<div>" + render_line_chart(c) + "</div>\n";
  }
  // The runs without underflow: a note in the charts' grid (beside an odd last chart), else a paragraph.
  const std::string note =
      quiet.empty() ? "" : "<p>No gradient underflow recorded in: " + html_escape(quiet) + ".</p>\n";
  if (!charts.empty())
    return out + "<div class=\"grid\">\n" + charts + (note.empty() ? "" : "<div>" + note + "</div>\n") + "</div>\n";
  return out + note;
  return out;
}

// The gate's limit of a slice check of candidate k, as the value the bar must stay under (loss) or above
// (accuracy): reference - drop limit, or reference + limit * max(reference, loss floor) (the gate's denominator).
double slice_limit(const candidate_outcome& k, const locked_reference& reference, std::size_t slice, bool accuracy) {
  const slice_metrics& ref = reference.final_eval.slices[slice];
  const std::string name = "slice " + ref.name + (accuracy ? " accuracy (drop)" : " loss (rel. increase)");
  for (const parity_check& c : k.parity.checks) {
    if (c.name != name || !std::isfinite(c.limit)) continue;
    if (accuracy) return ref.accuracy - c.limit;
    return ref.loss + c.limit * relative_loss_denominator(reference, static_cast<std::int32_t>(slice));
  }
  return std::nan("");
}

std::string section_slices(const sim_summary& s) {
  const std::string units = loss_units(s);
  const bool regression = s.reference.final_eval.regression.has_value();  // no accuracy: no accuracy chart
  svg_bar_chart acc{.title = "Held-out accuracy per slice", .y_label = "accuracy", .width = 700};
  svg_bar_chart loss{
      .title = "Held-out loss per slice (" + units + ")", .y_label = "loss (" + units + ")", .width = 700};
  acc.limit_label = "gate limit (lowest)";
  loss.limit_label = "gate limit (highest)";
  for (const slice_metrics& sl : s.reference.final_eval.slices) {
    acc.groups.push_back(sl.name);
    loss.groups.push_back(sl.name);
  }
  const auto add = [&](const std::string& name, const eval_metrics& e, const candidate_outcome* k) {
    acc.bars.push_back(name);
    loss.bars.push_back(name);
    std::vector<double> a, l, a_lim, l_lim;
    for (std::size_t g = 0; g < s.reference.final_eval.slices.size(); ++g) {
      const slice_metrics& ref = s.reference.final_eval.slices[g];
      const auto it =
          std::find_if(e.slices.begin(), e.slices.end(), [&ref](const slice_metrics& m) { return m.name == ref.name; });
      // A slice without held-out samples has no loss or accuracy (its 0 / 0 is no bar and "n/a" in the table).
      const bool none = it == e.slices.end() || it->count == 0;
      a.push_back(none ? std::nan("") : it->accuracy);
      l.push_back(none ? std::nan("") : it->loss);
      a_lim.push_back(k != nullptr ? slice_limit(*k, s.reference, g, true) : std::nan(""));
      l_lim.push_back(k != nullptr ? slice_limit(*k, s.reference, g, false) : std::nan(""));
    }
    acc.values.push_back(a);
    loss.values.push_back(l);
    acc.limits.push_back(a_lim);
    loss.limits.push_back(l_lim);
  };
  add(s.reference.label, s.reference.final_eval, nullptr);
  for (const candidate_outcome& k : s.candidates) add(k.name, k.run.final_eval, &k);
  std::string out =
      "<h2 id=\"slices\">Slices</h2>\n<p>Dashed marks: the gate's limit for that run and slice (a bar "
      "beyond its mark fails the check).</p>\n";
  out += "<div class=\"grid\">\n" + (regression ? std::string() : "<div>" + render_bar_chart(acc) + "</div>\n") +
         "<div>" + render_bar_chart(loss) + "</div>\n</div>\n";
  out += "<table><tr>" + th("slice") + th("samples");
  for (const std::string& b : acc.bars) out += th(b + (regression ? " loss" : " loss / acc"));
  out += "</tr>\n";
  for (std::size_t g = 0; g < acc.groups.size(); ++g) {
    const std::int64_t n = s.reference.final_eval.slices[g].count;
    out += "<tr>" + td(acc.groups[g]) +
           td(std::to_string(n) + (n < gate_min_samples ? " (too small to judge: the gate needs " +
                                                              std::to_string(gate_min_samples) + ")"
                                                        : ""));
    for (std::size_t b = 0; b < acc.bars.size(); ++b) {
      // %.4g: a regression's losses sit near 0 (1.85e-10 printed 0.0000), as the terminal prints them.
      if (n == 0) {  // every run evaluates the same held-out rows
        out += td("n/a (no samples)");
        continue;
      }
      out += td(fmt(held_out_loss_format(s), loss.values[b][g]) +
                (regression ? "" : " / " + fmt("%.4f", acc.values[b][g])));
    }
    out += "</tr>\n";
  }
  return out + "</table>\n";
}

// Each run's diagnosis, at the top of the report: why it failed, could not be decided, or skipped steps.
std::string section_why(const sim_summary& s) {
  std::string out = "<h2 id=\"why\">Why: each run's diagnosis</h2>\n";
  for (const candidate_outcome& k : s.candidates) {
    const run_diagnosis d = diagnose(k);
    out += "<div class=\"why\"><h3><span class=\"" + std::string(status_class(k.parity.outcome)) + "\">" +
           verdict_name(k.parity.outcome) + "</span> " + html_escape(k.name) + "</h3>\n<p>" + html_escape(d.text) +
           (d.likely_field.empty() ? "" : " <b>Field to look at: " + html_escape(d.likely_field) + ".</b>") +
           "</p></div>\n";
  }
  return out;
}

// A held-out accuracy, or n/a for a regression (it predicts no classes).
std::string accuracy_text(const sim_summary& s, const eval_metrics& e) {
  return s.reference.final_eval.regression ? "n/a" : fmt("%.4f", e.accuracy);
}

std::string section_verdicts(const sim_summary& s) {
  std::string out = "<h2 id=\"gate\">Parity gate</h2>\n<table><tr>" + th("run") + th("policy") + th("scaler") +
                    th("faults") + th("held-out loss") + th("accuracy") + th("skipped") + th("verdict") +
                    th("expected") + th("run instead") + "</tr>\n";
  out += "<tr>" + td(s.reference.label) + td(s.reference.manifest.policy) + td("none") + td("") +
         td(fmt(held_out_loss_format(s), s.reference.final_eval.loss)) + td(accuracy_text(s, s.reference.final_eval)) +
         td("0") + td("reference") + td("") + td("") + "</tr>\n";
  for (const candidate_outcome& k : s.candidates) {
    const bool pass = k.parity.outcome == verdict::pass;
    out += "<tr>" + td(k.name) + td(k.parity.policy) + td(k.scaler) + td(k.faults) +
           td(fmt(held_out_loss_format(s), k.run.final_eval.loss)) + td(accuracy_text(s, k.run.final_eval)) +
           td(std::to_string(k.parity.skips.skipped)) + "<td class=\"" + status_class(k.parity.outcome) + "\">" +
           verdict_name(k.parity.outcome) + "</td>" +
           td(std::string(expectation_name(k.expect)) + (k.as_expected ? "" : " (NOT AS EXPECTED)")) +
           td(pass ? "" : k.decision.run_instead + " [" + k.decision.source + "]") + "</tr>\n";
  }
  out +=
      "</table>\n<p class=\"checks\"><b>Checks</b> (open a run to see each check, its limit and where the limit "
      "comes from):</p>\n";
  for (const candidate_outcome& k : s.candidates) {
    out += "<details class=\"checks\"><summary>" + html_escape(k.name) + ": " + verdict_name(k.parity.outcome) +
           "</summary>\n<table><tr>" + th("check") + th("value") + th("limit") + th("") + th("measured") +
           th("limit from") + "</tr>\n";
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
  std::string out = "<h2 id=\"manifest\">Reference manifest</h2>\n<details><summary>" +
                    html_escape(s.reference.label + ": reference " + s.reference.reference_id + ", locked " +
                                s.reference.locked_utc) +
                    " (open for every setting)</summary>\n<table>";
  for (const auto& [k, v] : rows) out += "<tr>" + th(k) + td(v) + "</tr>\n";
  out += "</table></details>\n";
  for (const manifest_difference& d : s.environment_notes) {
    out += "<p>Note: " + html_escape(d.field) + " differs from the lock: '" + html_escape(d.reference_value) +
           "', now '" + html_escape(d.candidate_value) + "'.</p>\n";
  }
  return out;
}

// Shown only for a data-parallel invocation: its setup, then the single-process error-versus-N table of
// data_parallel.json (the same summary value) as a table, one row per reduction, and as a chart on log2 axes.
std::string section_data_parallel(const sim_summary& s) {
  if (!s.data_parallel) return "";
  const data_parallel_summary& d = *s.data_parallel;
  std::string out =
      "<h2 id=\"data_parallel\">Data parallel</h2>\n<p>" + std::to_string(d.ranks) + " rank(s), " +
      std::to_string(d.micro_batches) + " micro-batches per global batch; the candidates reduce with <b>" +
      html_escape(d.reduction) +
      "</b>, the locked reference in fixed-order fp32 (bit-identical for any rank count).</p>\n"
      "<p>Relative L2 error of the mean gradient over N ranks against the exact mean of the same rounded inputs "
      "(single process: per-rank gradients s + " +
      fmt("%g", d.table_sigma) + " &middot; noise, s and the noise standard normal, " +
      std::to_string(d.table_elements) + " elements, seed " + std::to_string(d.table_seed) +
      "). <i>floor</i>: rounding the exact mean once to the wire format, at the largest N.</p>\n<table><tr>" +
      th("reduction");
  for (const std::int64_t n : d.rank_counts) out += th("N=" + std::to_string(n));
  out += th("floor") + "</tr>\n";
  const std::size_t counts = d.rank_counts.size();
  const std::size_t specs = counts == 0 ? 0 : d.table.size() / counts;
  svg_line_chart chart{.title = "Reduction error vs ranks",
                       .x_label = "log2 N (ranks)",
                       .y_label = "relative error (log2 axis)",
                       .log2_y = true};
  for (std::size_t si = 0; si < specs; ++si) {
    out += "<tr>" + td(d.table[si].spec);
    svg_series line{.name = d.table[si].spec,
                    .x = {},
                    .y = {},
                    .dashed = d.table[si].spec.find("-wire") != std::string::npos,
                    .colour = {},
                    .markers = true};
    for (std::size_t ni = 0; ni < counts; ++ni) {
      const reduction_error_row& r = d.table[ni * specs + si];
      out += td(fmt("%.2e", r.relative_error));
      line.x.push_back(std::log2(static_cast<double>(r.ranks)));
      line.y.push_back(r.relative_error);
    }
    out += td(fmt("%.2e", d.table[(counts - 1) * specs + si].floor)) + "</tr>\n";
    chart.series.push_back(std::move(line));
  }
  out += "</table>\n" + render_line_chart(chart);
  return out;
}

std::string section_cost(const sim_summary& s) {
  std::string out = "<h2 id=\"cost\">Throughput and cost</h2>\n<table><tr>" + th("run") + th("wall s") +
                    th("samples/s") + th("$ per 1M samples") + "</tr>\n";
  const auto row = [&](const std::string& name, double wall, double sps) {
    const double c = cost_per_sample({.dollars_per_hour = s.dollars_per_hour, .samples_per_second = sps}) * 1e6;
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
           " MiB" +
           (s.preflight.ranks_on_this_machine > 1
                ? " a rank (" +
                      fmt("%.1f", s.preflight.ranks_on_this_machine * s.preflight.estimated_peak_bytes / 1048576.0) +
                      " MiB for the " + std::to_string(s.preflight.ranks_on_this_machine) +
                      " ranks on this machine, against the memory budget)"
                : "") +
           " and " + fmt("%.1f", s.preflight.estimated_seconds) + " s.";
  }
  out += "</p>\n";
  out +=
      "<details><summary>How these are measured</summary><p>Method: samples/s is training samples (sequences or "
      "examples) of a run divided by that run's wall "
      "time on a steady clock, measured by the simulator around the whole run (data, forward, backward, "
      "emulated casts, optimizer). Peak memory is VmHWM from /proc/self/status at the end of the process "
      "(the high-water mark of resident memory over all runs, not per run). Cost per sample = price per hour "
      "/ 3600 / samples per second, with the price from the scenario (" +
      fmt("$%.4g", s.dollars_per_hour) +
      " per hour). These are emulation speeds of this CPU, for comparing runs with each other; they are not "
      "GPU speeds.</p></details>\n";
  return out;
}

}  // namespace

std::string render_html_report(const sim_summary& s) {
  std::string h =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>safeamp sim report: " +
      html_escape(s.scenario) +
      "</title>\n<style>\nbody{font-family:sans-serif;margin:16px 24px;color:#222;max-width:1400px}\n"
      ".grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:8px 16px}\n"
      "p.checks{display:inline-block;margin:4px 12px 4px 0}\ndetails.checks{display:inline-block;margin-right:18px;"
      "vertical-align:top}\ndetails.checks[open]{display:block}\n"
      "nav{background:#f7f7f7;border:1px solid #ddd;padding:6px 10px;font-size:13px}\nnav a{margin-right:14px}\n"
      ".why{border-left:4px solid #ccc;padding:0 10px;margin:6px 0}\n.why h3{margin:4px 0;font-size:15px}\n"
      ".why p{margin:4px 0 8px;font-size:14px}\nh2{font-size:20px;margin:18px 0 6px}\nh3{margin:10px 0 4px}\n"
      "p{margin:6px 0}\n"
      "table{border-collapse:collapse;margin:8px 0 16px}\nth,td{border:1px solid #ccc;padding:3px 8px;"
      "text-align:left;font-size:13px}\nth{background:#f2f2f2}\n.pass{color:#1a7f37;font-weight:bold}\n"
      ".fail{color:#c62828;font-weight:bold}\n.inconclusive{color:#b26a00;font-weight:bold}\n.na{color:#777}\ntd.n{"
      "white-space:nowrap}\n"
      ".profile{display:grid;grid-template-columns:600px 1fr;gap:8px 16px}\n"
      "@media (max-width:1100px){.profile{grid-template-columns:1fr}}\n"
      "svg{display:block;margin:"
      "8px 0}\n</style>\n</head>\n<body>\n";
  h += "<h1>safeamp sim: " + html_escape(s.scenario) + "</h1>\n";
  if (!s.description.empty()) h += "<p>" + html_escape(s.description) + "</p>\n";
  bool all_expected = true;
  for (const candidate_outcome& k : s.candidates) all_expected = all_expected && k.as_expected;
  h += std::string("<p><b>") + (all_expected ? "Every verdict is the one the scenario expects."
                                              : "Some verdicts differ from what the scenario expects.") +
       "</b> Exit code " + std::to_string(s.exit_code) + ".</p>\n";
  h += "<nav><b>Contents:</b> <a href=\"#why\">Why (diagnosis)</a><a href=\"#gate\">Parity gate</a>"
       "<a href=\"#decision\">Decision</a><a href=\"#loss\">Loss</a><a href=\"#scale\">Loss scale</a>"
       "<a href=\"#underflow\">Underflow</a><a href=\"#slices\">Slices</a><a href=\"#profile\">Profile</a>"
       "<a href=\"#manifest\">Manifest</a><a href=\"#cost\">Throughput and cost</a>" +
       std::string(s.data_parallel ? "<a href=\"#data_parallel\">Data parallel</a>" : "") + "</nav>\n";
  h += section_why(s);
  h += section_verdicts(s);
  h += render_decision_html(s);
  h += section_loss(s);
  h += section_scale(s);
  h += section_underflow(s);
  h += section_slices(s);
  h += render_profile_html(s);
  h += section_data_parallel(s);
  h += "<div class=\"grid\">\n<div>" + section_manifest(s) + "</div>\n<div>" + section_cost(s) + "</div>\n</div>\n";
  h += "</body>\n</html>\n";
  return h;
}

}  // namespace safeamp::sim
