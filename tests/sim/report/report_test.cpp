// Telemetry lines, the terminal summary, the HTML report's self-containment and content, the cost formula,
// peak memory, and the progress line (silent when not a terminal).
#include "safeamp/sim/report.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "report_fixtures.hpp"
#include "safeamp/sim/progress.hpp"
#include "safeamp/sim/report_files.hpp"
#include "safeamp/sim/report_svg.hpp"

using namespace safeamp::sim;

// The price and the rate are named: cost_per_sample(3.6, 1000.0), which compiled with the two swapped, does not.
template <typename... A>
constexpr bool cost_callable = requires(A... a) { cost_per_sample(a...); };
static_assert(!cost_callable<double, double>);
static_assert(cost_callable<price_and_rate>);

namespace {
std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// The <svg> element of `html` whose title starts with `title` (empty when there is none).
std::string chart(const std::string& html, const std::string& title) {
  const auto at = html.find("<title>" + title);
  if (at == std::string::npos) return {};
  const auto begin = html.rfind("<svg", at);
  return html.substr(begin, html.find("</svg>", at) + 6 - begin);
}

// The numbers of a chart's y tick labels (right-aligned text left of the plot), top to bottom as drawn.
std::vector<double> y_ticks(const std::string& svg) {
  std::vector<double> out;
  const std::string tag = "text-anchor=\"end\">";
  for (auto p = svg.find(tag); p != std::string::npos; p = svg.find(tag, p + 1)) {
    out.push_back(std::stod(svg.substr(p + tag.size(), svg.find('<', p) - p - tag.size())));
  }
  return out;
}

// The stroke colour of the legend entry named `name` (the legend line drawn before its marker and text).
std::string legend_colour(const std::string& svg, const std::string& name) {
  const auto text = svg.find(">" + name + "</text>");
  if (text == std::string::npos) return {};
  const auto stroke = svg.find("stroke=\"", svg.rfind("<line", text));
  return svg.substr(stroke + 8, 7);
}

// Every summary run's recorded losses times `factor` (as a scenario's training.loss_multiplier records them).
void multiply_losses(sim_summary& s, double factor) {
  for (double& l : s.reference.loss_curve) l *= factor;
  for (candidate_outcome& k : s.candidates) {
    for (step_record& st : k.run.steps) st.loss *= factor;
  }
  s.recorded_loss_factor = factor;
}

}  // namespace

TEST_CASE("telemetry: one JSON object per step with every field, non-finite numbers as text") {
  run_result r = fixtures::make_run("t", 3, 1.0, 0.0);
  r.steps[1].found_inf = true;
  r.steps[1].skipped = true;
  r.steps[1].grad_norm_before_clip = std::numeric_limits<double>::infinity();
  r.steps[1].grads[0].overflow = 2;
  r.steps[1].grads[1].underflow = 7;
  const std::string text = telemetry_jsonl(r);
  CHECK(count_of(text, "\n") == 3);
  const auto line = nlohmann::json::parse(text.substr(text.find('\n') + 1, text.find('\n', text.find('\n') + 1) - text.find('\n') - 1));
  CHECK(line["step"] == 1);
  CHECK(line["loss"].get<double>() == r.steps[1].loss);
  CHECK(line["scale"].get<double>() == 1.0);
  CHECK(line["found_inf"] == true);
  CHECK(line["skipped"] == true);
  CHECK(line["grad_norm_before_clip"] == "inf");
  CHECK(line["grad_norm_after_clip"].get<double>() == 1.0);
  CHECK(line["layers"][0]["name"] == "w1");
  CHECK(line["layers"][0]["overflow"] == 2);
  CHECK(line["layers"][1]["underflow"] == 7);
  CHECK(line["layers"][1]["elements"] == 50);
  CHECK(line["step_seconds"].get<double>() == 0.001);
}

TEST_CASE("cost, underflow fraction, slugs and peak memory") {
  // $3.60 per hour = $0.001 per second; at 1000 samples/s one sample costs $1e-6.
  CHECK(cost_per_sample({.dollars_per_hour = 3.6, .samples_per_second = 1000.0}) == Approx(1e-6));
  CHECK(cost_per_sample({.dollars_per_hour = 0.0, .samples_per_second = 1000.0}) == 0.0);
  CHECK(cost_per_sample({.dollars_per_hour = 3.6, .samples_per_second = 0.0}) == 0.0);
  CHECK(underflow_fraction({"w", 200, 0, 50, 0, 0}) == 0.25);
  CHECK(underflow_fraction({"w", 0, 0, 0, 0, 0}) == 0.0);
  CHECK(file_slug("fp16-mixed Dynamic (x2)") == "fp16-mixed-dynamic-x2");
  CHECK(file_slug("///") == "run");
  // No hidden file and no leading dash: dots count only after the first letter or digit.
  CHECK(file_slug("../../evil/x") == "evil-x");
  CHECK(file_slug(".hidden v1.2") == "hidden-v1.2");
  CHECK(file_slug("...") == "run");
  CHECK(file_slug("-x") == "x");
  // At most 128 bytes: a candidate's longest name keeps its slug; a reference labelled with a 259-character policy
  // string used to name a checkpoint past the file system's 255 bytes. A longer slug is its first 100 characters
  // and the label's hash, so two labels that differ only at the end still name two files.
  CHECK(file_slug(std::string(128, 'a')) == std::string(128, 'a'));
  const std::string label = "reference preset=fp16-pure-master," + std::string(200, 'x');
  const std::string slug = file_slug(label);
  CHECK(slug.size() == 117);
  CHECK(slug == "reference-preset-fp16-pure-master-" + std::string(66, 'x') + "-" + hex64(fnv1a64(label)));
  CHECK(file_slug(label + "y") != slug);
  const std::string dashes = std::string(99, 'a') + "-------" + std::string(200, 'b');  // no "--" at the cut
  CHECK(file_slug(dashes) == std::string(99, 'a') + "-" + hex64(fnv1a64(dashes)));
  // Touch 64 MiB: the high-water mark of resident memory must reach at least that.
  std::vector<char> block(64u << 20, 1);
  for (std::size_t i = 0; i < block.size(); i += 4096) block[i] = static_cast<char>(i);
  CHECK(peak_rss_bytes() >= block.size());
}

TEST_CASE("terminal summary: every run, the failing reason, the fallback, skips and expectations") {
  const sim_summary s = fixtures::make_summary();
  const std::string t = render_terminal_summary(s);
  CHECK(t.find("reference fp32") != std::string::npos);
  CHECK(t.find("fp16 no scaling") != std::string::npos);
  CHECK(t.find("FAIL (expected FAIL)") != std::string::npos);
  CHECK(t.find("PASS (expected PASS)") != std::string::npos);
  CHECK(t.find("FAIL held-out loss") != std::string::npos);
  CHECK(t.find("-> run instead: fp16 dynamic") != std::string::npos);
  CHECK(t.find("skipped 1 step(s) at 5") != std::string::npos);
  CHECK(t.find("2^15..2^16") != std::string::npos);
  CHECK(t.find("every verdict is the one the scenario expects") != std::string::npos);
}

TEST_CASE("summary JSON carries verdicts, reasons, fallbacks and cost") {
  const sim_summary s = fixtures::make_summary();
  const auto j = nlohmann::json::parse(render_summary_json(s));
  CHECK(j["candidates"].size() == 2);
  CHECK(j["candidates"][0]["verdict"] == "FAIL");
  CHECK(j["candidates"][0]["run_instead"] == "fp16 dynamic");
  CHECK(j["candidates"][1]["verdict"] == "PASS");
  CHECK(j["candidates"][1]["skipped_steps"] == std::vector<int>{5});
  CHECK(j["candidates"][1]["cost_per_sample_dollars"].get<double>() == Approx(3.6 / 3600.0 / 320.0));
  CHECK(j["reference"]["id"] == s.reference.reference_id);
}

TEST_CASE("a slice without held-out samples has no loss or accuracy in the summary, the table or the charts") {
  sim_summary s = fixtures::make_summary();
  // The trainer's metrics of a slice that the held-out rows never show: count 0, and 0 / 0 stored as 0.
  const auto empty_last = [](eval_metrics& e) { e.slices.back() = {e.slices.back().name, 0, 0.0, 0.0}; };
  empty_last(s.reference.final_eval);
  for (candidate_outcome& c : s.candidates) empty_last(c.run.final_eval);
  const auto j = nlohmann::json::parse(render_summary_json(s));
  CHECK(j["reference"]["slices"][3]["count"] == 0);
  CHECK(j["reference"]["slices"][3]["loss"] == "nan");
  CHECK(j["reference"]["slices"][3]["accuracy"] == "nan");
  CHECK(j["candidates"][1]["slices"][3]["loss"] == "nan");
  CHECK(j["candidates"][1]["slices"][3]["accuracy"] == "nan");
  CHECK(j["candidates"][1]["slices"][2]["loss"].is_number());  // the others keep their numbers
  const std::string h = render_html_report(s);
  CHECK(count_of(h, "<td>n/a (no samples)</td>") == 3);  // the reference and two candidates
  // No bar for d (a bar's title reads "run / d: value", a limit mark's "run / d: gate limit ...").
  CHECK(count_of(h, " / d: ") == count_of(h, " / d: gate limit"));
  CHECK(count_of(h, " / c: ") > count_of(h, " / c: gate limit"));
}

TEST_CASE("the HTML report is self-contained and shows every section") {
  const std::string h = render_html_report(fixtures::make_summary());
  CHECK(h.rfind("<!DOCTYPE html>", 0) == 0);
  // No scripts and nothing fetched: the only URL is the SVG namespace identifier.
  CHECK(count_of(h, "<script") == 0);
  CHECK(count_of(h, "src=") == 0);
  CHECK(count_of(h, "href=") == count_of(h, "href=\"#"));  // links within the page only (the contents)
  CHECK(count_of(h, "href=\"#") == 10);
  for (auto at = h.find("href=\"#"); at != std::string::npos; at = h.find("href=\"#", at + 1)) {
    const std::string target = h.substr(at + 7, h.find('"', at + 7) - (at + 7));
    INFO("contents entry #" << target);
    CHECK(count_of(h, "id=\"" + target + "\"") == 1);  // every entry leads to exactly one section
  }
  CHECK(count_of(h, "url(") == 0);
  CHECK(count_of(h, "http") == count_of(h, "xmlns=\"http://www.w3.org/2000/svg\""));
  // loss curves, scale, one underflow chart (only the unscaled run underflows), two slice charts (no profile
  // chart: the fixture's runs timed no step).
  CHECK(count_of(h, "<svg") == 5);
  CHECK(count_of(h, "</svg>") == 5);
  CHECK(h.find("Underflow per layer: fp16 no scaling (peak 40%)") != std::string::npos);  // 40 of w1's 100
  CHECK(h.find("No gradient underflow recorded in: fp16 dynamic.") != std::string::npos);
  CHECK(h.find("skipped step") != std::string::npos);
  CHECK(h.find("Reference manifest") != std::string::npos);
  CHECK(h.find("0123456789abcdef") != std::string::npos);  // data fingerprint
  CHECK(h.find("Throughput and cost") != std::string::npos);
  CHECK(h.find("50.0 MiB") != std::string::npos);
  CHECK(h.find("VmHWM") != std::string::npos);
  // The scenario name is escaped.
  CHECK(h.find("fixture &lt;scenario&gt;") != std::string::npos);
  CHECK(h.find("fixture <scenario>") == std::string::npos);
}

TEST_CASE("an INCONCLUSIVE candidate: terminal, JSON and HTML say which checks could not decide and why") {
  sim_summary s = fixtures::make_summary();
  // Move all but 12 predictions of slice d into slice c, in the reference and in the passing candidate:
  // slice d becomes too small to judge.
  const auto shrink = [](eval_metrics& e) {
    for (std::size_t i = 312; i < 400; ++i) e.rows.slice[i] = 2;
    fixtures::summarize(e);
  };
  shrink(s.reference.final_eval);
  candidate_outcome& good = s.candidates[1];
  shrink(good.run.final_eval);
  good.parity = evaluate_parity(s.reference, good.run, gate_tolerances_for(safeamp::fp16));
  REQUIRE(good.parity.outcome == verdict::inconclusive);
  good.as_expected = meets_expectation(good.expect, good.parity.outcome);
  CHECK_FALSE(good.as_expected);
  good.decision = decide_fallback(good.parity, {"fp32"}, {s.candidates[0].parity, good.parity}, std::nullopt, "fp32");

  const std::string t = render_terminal_summary(s);
  CHECK(t.find("INCONCLUSIVE (expected PASS, NOT AS EXPECTED)") != std::string::npos);
  CHECK(t.find("INCONCLUSIVE slice d accuracy (drop): 12 predictions: too small to judge") != std::string::npos);
  CHECK(t.find("2/8 ?") != std::string::npos);  // slice column: 2 of 8 slice checks undecided
  CHECK(t.find("some verdicts differ from what the scenario expects") != std::string::npos);

  const auto j = nlohmann::json::parse(render_summary_json(s));
  CHECK(j["candidates"][1]["verdict"] == "INCONCLUSIVE");
  CHECK(j["candidates"][1]["undecided"].size() == 2);
  bool found = false;
  for (const auto& c : j["candidates"][1]["checks"]) {
    if (c["name"] == "slice d loss (rel. increase)") {
      found = true;
      CHECK(c["status"] == "INCONCLUSIVE");
      CHECK(c["undecided"].get<std::string>().find("too small") != std::string::npos);
      CHECK_FALSE(c["basis"].get<std::string>().empty());
    }
  }
  CHECK(found);

  const std::string h = render_html_report(s);
  CHECK(h.find("class=\"inconclusive\">INCONCLUSIVE") != std::string::npos);
  CHECK(h.find("12 (too small to judge") != std::string::npos);  // the slice table
  CHECK(h.find("limit from") != std::string::npos);
}

TEST_CASE("svg charts: polylines per series, breaks at non-finite values, log2 ticks") {
  svg_line_chart c;
  c.title = "t";
  c.series.push_back({"a", {0, 1, 2, 3}, {1, 2, std::numeric_limits<double>::quiet_NaN(), 4}, false});
  const std::string svg = render_line_chart(c);
  CHECK(count_of(svg, "<polyline") == 2);  // broken at the NaN
  svg_line_chart l;
  l.log2_y = true;
  l.series.push_back({"s", {0, 1}, {1024, 65536}, false});
  const std::string ls = render_line_chart(l);
  CHECK(ls.find("2^10") != std::string::npos);
  CHECK(ls.find("2^16") != std::string::npos);
  CHECK(render_line_chart(svg_line_chart{}).find("no data") != std::string::npos);
  CHECK(html_escape("a<b & \"c\"") == "a&lt;b &amp; &quot;c&quot;");
}

TEST_CASE("progress: the line's text, silence when not a terminal, drawing and erasing when one") {
  // 2 of 5 done with a 10-wide bar: floor(2 * 10 / 5) = 4 filled cells; 2 steps in 3.25 s = 0.615 steps/s, the
  // 3 left take 3 / 0.615 = 4.875 s.
  const auto line = [](std::int64_t done, std::int64_t total, double seconds, std::string_view what, int width) {
    return render_progress_line(
        {.done = done, .total = total, .elapsed_seconds = seconds, .what = what, .bar_width = width});
  };
  CHECK(line(2, 5, 3.25, "run b", 10) == "[####------] 2/5 steps  3.2 s  0.615 steps/s  ETA 4.9 s  run b");
  CHECK(line(9, 5, 0.0, "", 4) == "[####] 5/5 steps  0.0 s  -- steps/s  ETA --  ");
  CHECK(line(0, 5, 1.0, "x", 2) == "[--] 0/5 steps  1.0 s  -- steps/s  ETA --  x");
  // 10 of 1000 in 20 s: 0.5 steps/s, 990 left take 1980 s = 33 min 00 s; all done: no ETA.
  CHECK(line(10, 1000, 20.0, "r", 1) == "[-] 10/1000 steps  20.0 s  0.5 steps/s  ETA 33 min 00 s  r");
  CHECK(line(1000, 1000, 4000.0, "r", 1) == "[#] 1000/1000 steps  1 h 06 min  0.25 steps/s  r");
  std::FILE* f = std::tmpfile();
  REQUIRE(f != nullptr);
  {
    progress_bar quiet(3, f, false, {.delay_seconds = 0.0});
    quiet.update(1, "x");
    quiet.finish();
    CHECK_FALSE(quiet.drew());
  }
  CHECK(std::ftell(f) == 0);
  {
    progress_bar slow_start(3, f, true, {.delay_seconds = 3600.0});
    slow_start.update(1, "x");  // before the delay: nothing
    slow_start.finish();
    CHECK_FALSE(slow_start.drew());
  }
  CHECK(std::ftell(f) == 0);
  {
    progress_bar bar(3, f, true, {.delay_seconds = 0.0, .redraw_seconds = 0.01});
    bar.update(2, "run c");
    bar.finish();
    CHECK(bar.drew());
  }
  CHECK(std::ftell(f) > 0);
  std::fclose(f);
  // Not a terminal, plain lines on (a CI log): whole lines, no carriage return or escape sequence, at most one
  // per interval plus the last one.
  std::FILE* log = std::tmpfile();
  REQUIRE(log != nullptr);
  {
    progress_bar plain(4, log, false, {.delay_seconds = 0.0, .plain_lines = true, .plain_interval_seconds = 3600.0});
    for (int i = 1; i <= 4; ++i) plain.update(i, "run a");
    plain.finish();
    CHECK(plain.drew());
  }
  std::rewind(log);
  std::string text;
  for (int ch = std::fgetc(log); ch != EOF; ch = std::fgetc(log)) text.push_back(static_cast<char>(ch));
  std::fclose(log);
  CHECK(count_of(text, "\n") == 2);  // the first update, then the last (the others fall inside the interval)
  CHECK(count_of(text, "1/4 steps") == 1);
  CHECK(count_of(text, "4/4 steps") == 1);
  CHECK(text.find('\r') == std::string::npos);
  CHECK(text.find('\033') == std::string::npos);
}

TEST_CASE("loss chart: the recorded losses' multiplier is divided out, the axis says so") {
  // The fixture's losses run from 1.025 (the reference at step 39) to 2.6 (fp16 no scaling, 1.3 x 2 at step 0)
  // nats: padded by 5 % of the span, round ticks 1, 1.5, 2, 2.5. Recorded times 1e-4 they would plot as
  // 1e-4..2.6e-4 unless the chart divides the factor out.
  sim_summary s = fixtures::make_summary();
  multiply_losses(s, 1e-4);
  const std::string h = render_html_report(s);
  const std::string loss = chart(h, "Training loss per step");
  REQUIRE_FALSE(loss.empty());
  const std::vector<double> ticks = y_ticks(loss);
  REQUIRE(ticks.size() >= 3);
  CHECK(*std::max_element(ticks.begin(), ticks.end()) == Approx(2.5));  // the axis spans the losses in nats
  CHECK(*std::min_element(ticks.begin(), ticks.end()) == Approx(1.0));
  CHECK(loss.find("training loss (nats, multiplier divided out)") != std::string::npos);
  CHECK(h.find("the scenario trains on 0.0001 x this loss") != std::string::npos);
  // Without a factor the same chart holds the same ticks, and no word about a multiplier.
  const std::string plain = chart(render_html_report(fixtures::make_summary()), "Training loss per step");
  CHECK(y_ticks(plain) == ticks);
  CHECK(plain.find("multiplier") == std::string::npos);
}

TEST_CASE("underflow charts: one y-scale for all, one colour per layer in every chart") {
  // fp16 no scaling loses 40 % of w1; fp16 dynamic loses 10 % of w2 only. Each chart's top is the larger 40 %,
  // and w2 has one colour in both (a chart's first series does not take the first colour).
  sim_summary s = fixtures::make_summary();
  for (step_record& st : s.candidates[0].run.steps) st.grads[1].underflow = 2;  // and 4 % of w2
  for (step_record& st : s.candidates[1].run.steps) st.grads[1].underflow = 5;
  const std::string h = render_html_report(s);
  const std::string a = chart(h, "Underflow per layer: fp16 no scaling");
  const std::string b = chart(h, "Underflow per layer: fp16 dynamic (peak 10%)");  // 5 of w2's 50
  REQUIRE_FALSE(a.empty());
  REQUIRE_FALSE(b.empty());
  const std::vector<double> ticks_b = y_ticks(b);
  CHECK(y_ticks(a) == ticks_b);
  CHECK(*std::max_element(ticks_b.begin(), ticks_b.end()) >= 0.4);  // 10 % alone would end near 0.1
  CHECK(legend_colour(a, "w2") == legend_colour(b, "w2"));
  CHECK(legend_colour(a, "w1") != legend_colour(a, "w2"));
  CHECK(b.find(">w1</text>") == std::string::npos);
}

TEST_CASE("scale chart: one legend entry per candidate and the skip marks, none for the reference") {
  const std::string h = render_html_report(fixtures::make_summary());
  const std::string scale = chart(h, "Loss scale per step");
  REQUIRE_FALSE(scale.empty());
  CHECK(count_of(h, "(reference") == 0);  // no "(reference: none)" entry that draws nothing
  CHECK(scale.find(">fp16 no scaling</text>") != std::string::npos);
  CHECK(scale.find(">fp16 dynamic</text>") != std::string::npos);
  CHECK(scale.find(">skipped step</text>") != std::string::npos);
  CHECK(scale.find(">reference fp32</text>") == std::string::npos);
  // The candidates keep their loss-chart colours (the loss chart's series 0 is the reference).
  const std::string loss = chart(h, "Training loss per step");
  CHECK(legend_colour(scale, "fp16 dynamic") == legend_colour(loss, "fp16 dynamic"));
}

TEST_CASE("a regression's losses are labelled with its loss, not nats, and have no accuracy chart") {
  // A regression (mse) whose trivial predictor has loss 4 overall and per slice; reference losses 0.01, so the
  // relative loss checks divide by the floor 0.01 x 4 = 0.04 (a classifier's ln 5 would give 0.0161).
  const regression_baseline mse{.loss = "mse", .trivial_loss = 4.0, .slice_trivial_loss = {4.0, 4.0, 4.0, 4.0}};
  sim_summary s = fixtures::make_summary();
  run_result ref = fixtures::make_run("reference fp32", 40, 0.01, 0.0);
  ref.final_eval.classes.reset();
  ref.final_eval.regression = mse;
  s.reference = lock_reference(ref, fixtures::make_manifest());
  for (candidate_outcome& k : s.candidates) {
    k.run = fixtures::make_run(k.name, 40, 0.01, 0.0, safeamp::presets::fp16_mixed);
    k.run.final_eval.regression = mse;
    k.parity = evaluate_parity(s.reference, k.run, gate_tolerances_for(safeamp::fp16));
  }
  const std::string h = render_html_report(s);
  CHECK(count_of(h, "nats") == 0);
  CHECK(chart(h, "Training loss per step").find("training loss (mse)") != std::string::npos);
  CHECK_FALSE(chart(h, "Held-out loss per slice (mse)").empty());
  CHECK(chart(h, "Held-out accuracy per slice").empty());
  CHECK(h.find(">n/a</td>") != std::string::npos);  // the verdict table's accuracy column
  // The slice limit marks: reference slice loss 0.01 + limit x 0.04, the gate's denominator.
  CHECK(relative_loss_denominator(s.reference, 0) == Approx(0.04));
  double limit = 0.0;
  for (const parity_check& c : s.candidates[1].parity.checks) {
    if (c.name == "slice a loss (rel. increase)") limit = c.limit;
  }
  REQUIRE(limit > 0.0);
  char mark[64];
  std::snprintf(mark, sizeof mark, "gate limit (highest) %.4g", 0.01 + limit * 0.04);
  CHECK(h.find(mark) != std::string::npos);
  // Losses near 0 keep their digits in the report's tables (%.4f printed 1.85e-10 as 0.0000), and summary.json
  // writes a regression's accuracy as "nan" (the trainer's 0 meant nothing), as the report's n/a.
  run_result tiny = fixtures::make_run("reference fp32", 40, 1.85e-10, 0.0);
  tiny.final_eval.classes.reset();
  tiny.final_eval.regression = mse;
  s.reference = lock_reference(tiny, fixtures::make_manifest());
  const std::string tiny_html = render_html_report(s);
  CHECK(tiny_html.find("<td>1.85e-10</td>") != std::string::npos);
  CHECK(tiny_html.find("<td>0.0000</td>") == std::string::npos);
  const auto j = nlohmann::json::parse(render_summary_json(s));
  CHECK(j["reference"]["held_out_accuracy"] == "nan");
  CHECK(j["reference"]["slices"][0]["accuracy"] == "nan");
  CHECK(j["candidates"][0]["held_out_accuracy"] == "nan");
  CHECK(j["candidates"][0]["slices"][0]["accuracy"] == "nan");
  // The terminal's slices column counts decided slice checks only (a regression's accuracy checks are N/A).
  CHECK(render_terminal_summary(s).find("/8 ") == std::string::npos);
}

// A loss spike applied without a scaler makes a curve gap of ~1e27: the terminal prints it in 3 digits, not 30.
TEST_CASE("the terminal prints huge curve gaps and logit errors in a few digits") {
  sim_summary s = fixtures::make_summary();
  for (parity_check& c : s.candidates[0].parity.checks) {
    if (c.name.rfind("loss-curve gap", 0) == 0) c.value = 5.847e27;
    if (c.name.rfind("golden logits max abs", 0) == 0) c.value = 3.2e12;
  }
  const std::string t = render_terminal_summary(s);
  CHECK(t.find("5.85e+29%") != std::string::npos);
  CHECK(t.find("3.2e+12") != std::string::npos);
  CHECK(t.find("584700000000") == std::string::npos);
}
