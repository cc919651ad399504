// `safeamp sim`: runs a scenario (the embedded default, or --scenario file.json): locks (or reuses) the
// fp32 reference, trains every candidate, applies the parity gate, names fallbacks, prints the summary and
// writes report.html, summary.json, telemetry/*.jsonl, reference/, known_good.json and decisions.jsonl.
// Exit codes: 0 every verdict as the scenario expects, 1 some verdict is not, 2 bad input.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "command_registry.hpp"
#include "safeamp/error.hpp"
#include "safeamp/sim/parity.hpp"
#include "safeamp/sim/parity_fallback.hpp"
#include "safeamp/sim/progress.hpp"
#include "safeamp/sim/reference.hpp"
#include "safeamp/sim/report.hpp"
#include "safeamp/sim/report_files.hpp"
#include "safeamp/sim/scenario.hpp"
#include "safeamp/sim/trainer.hpp"

namespace safeamp::tool {
namespace {

namespace fs = std::filesystem;
using namespace safeamp::sim;

struct sim_options {
  std::string scenario_file;
  std::string out_dir = "safeamp-out";
  std::optional<std::uint64_t> seed;
  std::optional<double> dollars_per_hour;
  bool json = false;
  bool relock = false;
  bool print_default = false;
};

std::string g(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string scaler_text(const scaler_choice& s) {
  switch (s.kind) {
    case scaler_kind::none: return "none";
    case scaler_kind::static_scale: return "static " + g(static_cast<double>(s.static_scale));
    case scaler_kind::dynamic: {
      const scaler_config& d = s.dynamic;
      return "dynamic (init " + g(static_cast<double>(d.init_scale)) + ", x" + g(d.growth_factor) + " every " +
             std::to_string(d.growth_interval) + " clean steps, x" + g(d.backoff_factor) + " on overflow)";
    }
  }
  return "?";
}

std::string faults_text(const std::vector<fault_spec>& faults) {
  std::string out;
  for (const fault_spec& f : faults) {
    if (!out.empty()) out += "; ";
    out += to_string(f.kind);
    if (f.kind == fault_kind::loss_spike || f.kind == fault_kind::tiny_loss) out.append(" x").append(g(f.factor));
    if (!f.target.empty()) out.append(" in ").append(f.target);
    out += " at step";
    for (std::size_t i = 0; i < f.steps.size(); ++i) out.append(i ? "," : " ").append(std::to_string(f.steps[i]));
  }
  return out;
}

scenario load_scenario(const sim_options& o) {
  if (o.scenario_file.empty()) return parse_scenario(default_scenario_json(), "embedded default");
  return parse_scenario(read_input_file(o.scenario_file, "--scenario"), o.scenario_file);
}

int run_sim(const sim_options& o) {
  if (o.print_default) {
    std::fputs(std::string(default_scenario_json()).c_str(), stdout);
    std::fputs("\n", stdout);
    return exit_ok;
  }
  const auto t0 = std::chrono::steady_clock::now();
  scenario s = load_scenario(o);
  if (o.seed) override_seed(s, *o.seed);
  if (o.dollars_per_hour) {
    if (!(*o.dollars_per_hour >= 0.0)) throw error("--dollars-per-hour", g(*o.dollars_per_hour), "a number >= 0");
    s.dollars_per_hour = *o.dollars_per_hour;
  }
  // Every check of the output folder and of the data happens before minutes of training.
  const fs::path out = o.out_dir;
  prepare_output_folder(out);
  prepare_output_folder(out / "reference");
  prepare_output_folder(out / "telemetry");
  const fs::path ref_file = out / "reference" / "reference.json";
  const run_config ref_cfg = reference_config(s);
  const run_manifest ref_manifest = manifest_for(s, ref_cfg);
  const std::optional<known_good_record> last_good = read_known_good(out / "known_good.json");

  sim_summary summary;
  summary.scenario = s.name;
  summary.description = s.description;
  summary.dollars_per_hour = s.dollars_per_hour;

  progress_bar bar(static_cast<std::int64_t>(s.candidates.size()) + 1, stderr, stream_is_terminal(stderr));
  std::error_code ec;
  if (!o.relock && fs::exists(ref_file, ec)) {
    locked_reference ref = read_reference(ref_file);
    // Every setting that changes the reference's numbers (its policy included) must be the one it was locked with.
    require_matching_manifest(ref.manifest, ref_manifest, manifest_check::reuse);
    for (const manifest_difference& d : compare_manifests(ref.manifest, ref_manifest, manifest_check::reuse)) {
      if (!d.refuses) summary.environment_notes.push_back(d);
    }
    summary.reference = std::move(ref);
    summary.reference_reused = true;
  } else {
    bar.update(0, ref_cfg.label);
    const run_result ref_run = train(ref_cfg);
    summary.reference = lock_reference(ref_run, ref_manifest);
    // --relock never deletes a reference: only now that the new one is trained and checked, the old file is
    // kept beside it under its id and lock time, then reference.json is replaced atomically.
    if (fs::exists(ref_file, ec)) {
      const fs::path kept = keep_previous_reference(ref_file);
      std::fprintf(stderr, "safeamp sim: --relock: the previous reference is kept as %s\n", kept.string().c_str());
    }
    write_reference(ref_file, summary.reference);
    write_file_atomically(out / "telemetry" / (file_slug(ref_cfg.label) + ".jsonl"), telemetry_jsonl(ref_run));
  }
  const locked_reference& ref = summary.reference;

  std::vector<parity_result> results;
  for (std::size_t i = 0; i < s.candidates.size(); ++i) {
    const candidate_spec& c = s.candidates[i];
    bar.update(static_cast<std::int64_t>(i) + 1, c.name);
    const run_config cfg = candidate_config(s, c);
    candidate_outcome k;
    k.name = c.name;
    k.scaler = scaler_text(c.scaler);
    k.faults = faults_text(c.faults);
    k.expect = c.expect;
    k.run = train(cfg);
    run_manifest m = manifest_for(s, cfg);
    m.probe_rows = k.run.probe_rows;
    m.probe_cols = k.run.probe_cols;
    require_matching_manifest(ref.manifest, m, manifest_check::candidate);
    k.parity = evaluate_parity(ref, k.run, tolerances_for(s, c));
    k.parity.candidate = c.name;
    k.telemetry_file = "telemetry/" + file_slug(c.name) + ".jsonl";
    write_file_atomically(out / k.telemetry_file, telemetry_jsonl(k.run));
    results.push_back(k.parity);
    summary.candidates.push_back(std::move(k));
  }
  bar.finish();

  // Verdicts, fallbacks and the known-good record.
  std::vector<fallback_decision> decisions;
  bool all_expected = true;
  for (candidate_outcome& k : summary.candidates) {
    k.decision = decide_fallback(k.parity, s.baselines, results, last_good, s.reference_policy_text);
    k.as_expected = meets_expectation(k.expect, k.parity.outcome);
    all_expected = all_expected && k.as_expected;
    decisions.push_back(k.decision);
    if (k.parity.outcome == verdict::pass) {
      write_known_good(out / "known_good.json",
                       {k.name, k.parity.policy, s.name, ref.reference_id, k.decision.decided_utc});
    }
  }
  append_decisions(out / "decisions.jsonl", decisions);
  summary.exit_code = all_expected ? exit_ok : exit_check_failed;
  summary.peak_rss_bytes = peak_rss_bytes();
  summary.total_wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  const std::string json_text = render_summary_json(summary);
  write_file_atomically(out / "summary.json", json_text);
  write_file_atomically(out / "report.html", render_html_report(summary));
  const std::string files = "wrote " + (out / "report.html").string() + ", " + (out / "summary.json").string() +
                            ", " + (out / "telemetry").string() + "/*.jsonl, " + ref_file.string() + ", " +
                            (out / "decisions.jsonl").string() + "\n";
  if (o.json) {
    std::fputs(json_text.c_str(), stdout);
    std::fputs(files.c_str(), stderr);
  } else {
    std::fputs(render_terminal_summary(summary).c_str(), stdout);
    std::fputs(files.c_str(), stdout);
  }
  return summary.exit_code;
}

const register_command reg{tool_command{
    "sim", 20, [](CLI::App& app, int& exit_code) {
      auto* cmd = app.add_subcommand(
          "sim",
          "Run a scenario on the CPU simulator: lock the fp32 reference, train the candidates, apply the parity gate "
          "and write the report (no arguments: the embedded default scenario)");
      auto o = std::make_shared<sim_options>();
      cmd->add_option("--scenario", o->scenario_file, "scenario JSON file (default: the embedded default scenario)");
      cmd->add_option("--out", o->out_dir, "output folder (report.html, summary.json, telemetry/, reference/)")
          ->capture_default_str();
      cmd->add_option("--seed", o->seed, "training seed (initialisation, batch order), overrides the scenario's");
      cmd->add_option("--dollars-per-hour", o->dollars_per_hour, "machine price for the cost section");
      cmd->add_flag("--json", o->json, "print the summary as JSON instead of the table");
      cmd->add_flag("--relock", o->relock,
                    "record a new reference even when the output folder holds one; the old reference.json is "
                    "kept beside it as reference/reference-<id>-<locked time>.json");
      cmd->add_flag("--print-default-scenario", o->print_default, "print the embedded default scenario and exit");
      cmd->callback([o, &exit_code] { exit_code = run_sim(*o); });
    }}};

}  // namespace
}  // namespace safeamp::tool
