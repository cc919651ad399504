// What `safeamp sim` shows and writes: per-step telemetry as JSON Lines, the terminal summary (parity
// table, skipped steps, scale range, verdicts, fallbacks), the JSON summary and the self-contained HTML
// report (inline SVG plots, manifest, throughput and cost with the method used to measure them).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "safeamp/sim/parity.hpp"
#include "safeamp/sim/parity_fallback.hpp"
#include "safeamp/sim/reference.hpp"
#include "safeamp/sim/report_diagnosis.hpp"
#include "safeamp/sim/run_config.hpp"
#include "safeamp/sim/run_result.hpp"
#include "safeamp/sim/scenario.hpp"

namespace safeamp::sim {

/// One candidate of a sim invocation, after the gate.
struct candidate_outcome {
  std::string name;
  std::string scaler;          // "none", "dynamic (init 65536, growth 2 every 50, backoff 0.5)", ...
  std::string faults;          // "gradient_inf at 40,41,90", or empty
  scaler_kind scaler_type = scaler_kind::none;  // what `scaler` describes (for the diagnosis)
  scaler_config scaler_settings{};              // the dynamic scaler's configuration (scaler_type dynamic)
  std::vector<fault_spec> fault_list;           // what `faults` describes (for the diagnosis)
  run_result run;
  parity_result parity;
  fallback_decision decision;
  expectation expect = expectation::pass;
  bool as_expected = true;     // verdict matches expect (always true for expectation::any)
  std::string telemetry_file;  // relative to the output folder
};

/// What the preflight estimated before training (0: no estimate was made), and the budgets it checked.
struct preflight_record {
  double estimated_peak_bytes = 0.0;
  double estimated_seconds = 0.0;
  double memory_budget_bytes = 0.0;
  double time_budget_seconds = 0.0;
  double training_flops_per_second = 0.0;  // the measured rate the time estimate used
  // The job's ranks on rank 0's machine (1 without mpirun): estimated_peak_bytes is one rank's, and the memory
  // budget was checked against that many times it.
  int ranks_on_this_machine = 1;
};

struct sim_summary {
  std::string scenario;
  std::string description;
  locked_reference reference;
  bool reference_reused = false;                       // loaded from the output folder instead of re-run
  std::vector<manifest_difference> environment_notes;  // environment fields that differ from the lock
  std::vector<candidate_outcome> candidates;
  double dollars_per_hour = 0.0;
  // What every recorded training loss is multiplied by: training.loss_weight x training.loss_multiplier (the
  // multiplier is applied as a tiny_loss factor at every step). The report's loss chart divides it out.
  double recorded_loss_factor = 1.0;
  std::uint64_t peak_rss_bytes = 0;                    // VmHWM of this process
  preflight_record preflight;
  double total_wall_seconds = 0.0;
  int exit_code = 0;
  std::optional<data_parallel_summary> data_parallel;  // set for a data-parallel invocation: its report section
};

/// The diagnosis of one candidate (diagnose_run on its run, checks, scaler and faults).
[[nodiscard]] run_diagnosis diagnose(const candidate_outcome& c);

/// Peak resident set size of this process (VmHWM in /proc/self/status), 0 when unavailable.
[[nodiscard]] std::uint64_t peak_rss_bytes() noexcept;

/// A price and a throughput, by name: two doubles in a row compiled swapped and gave a wrong cost without an error.
struct price_and_rate {
  double dollars_per_hour = 0.0;
  double samples_per_second = 0.0;
};

/// Cost of one sample in dollars: dollars_per_hour / 3600 / samples_per_second (0 when either is 0).
[[nodiscard]] double cost_per_sample(const price_and_rate& r) noexcept;

/// One JSON object per line, one line per step: step, loss, scale, found_inf, skipped, grad norms before
/// and after clipping, per-layer overflow/underflow/subnormal/nan counts, step_seconds.
[[nodiscard]] std::string step_json_line(const step_record& s);
[[nodiscard]] std::string telemetry_jsonl(const run_result& run);

/// The gate's table and what follows it, as printed on the terminal.
[[nodiscard]] std::string render_terminal_summary(const sim_summary& s);
/// The same content as JSON (the --json output and <out>/summary.json).
[[nodiscard]] std::string render_summary_json(const sim_summary& s);
/// The HTML report: one file, no scripts, no network, inline SVG plots.
[[nodiscard]] std::string render_html_report(const sim_summary& s);

/// Fraction of gradient elements of one layer that underflowed in one step (0 when it has no elements).
[[nodiscard]] double underflow_fraction(const layer_counts& c) noexcept;

/// The longest file_slug: a longer one is cut to 100 characters and ends in "-" and the label's 16-hex-digit hash.
inline constexpr std::size_t max_slug_bytes = 128;

/// "fp16-mixed dynamic" -> "fp16-mixed-dynamic": a file-name-safe form of a label ([a-z0-9.-], at most
/// max_slug_bytes), never beginning with a dot or a dash (no hidden file, no file name read as an option).
[[nodiscard]] std::string file_slug(std::string_view label);

}  // namespace safeamp::sim
