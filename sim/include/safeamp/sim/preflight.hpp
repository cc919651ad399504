// Preflight: what a set of simulated runs will need before any of them starts. `safeamp sim` estimates
// the peak memory and the time of a scenario from its shapes (nothing is allocated) and refuses one that
// exceeds its budgets, naming the scenario field to change; it also checks every candidate's fault targets
// against the model's parameter names, so a typo is reported before the reference trains.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "safeamp/sim/run_config.hpp"

namespace safeamp::sim {

/// One parameter tensor as the models create it.
struct parameter_shape {
  std::string name;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  friend bool operator==(const parameter_shape&, const parameter_shape&) = default;
};

/// The parameters of cfg's model, in the order and with the names and shapes make_mlp / make_transformer
/// give them, computed without allocating anything. `vocab` is the transformer's vocabulary (ignored for
/// the MLP); `head_width`, when above 0, the width of a described stack's head from its data files
/// (check_data_files; without it a feature-file head counts as 1 wide).
[[nodiscard]] std::vector<parameter_shape> parameter_shapes(const run_config& cfg, std::int64_t vocab,
                                                            std::int64_t head_width = 0);

/// Throws safeamp::error("candidate '<label>' fault target", ...) listing the parameter names when a
/// gradient fault of `cfg` names a parameter its model does not have.
void check_fault_targets(const run_config& cfg, std::int64_t vocab);

/// One part of the estimate, with the scenario fields that drive it.
struct estimate_term {
  std::string what;    // "activations of the held-out pass"
  std::string fields;  // "data.eval_samples, model.hidden_dim"
  double bytes = 0.0;
};

struct preflight_estimate {
  double peak_bytes = 0.0;           // the process at its largest: base + the largest run + what is kept
  double seconds = 0.0;              // every run trained one after the other
  double flops = 0.0;                // multiply-adds x 2 of every run (training and evaluation)
  std::int64_t parameters = 0;       // elements of the model
  std::vector<estimate_term> terms;  // memory, largest first
  std::string time_fields;           // the fields that drive the time
};

/// What the estimate is computed from besides the runs: the process's own memory before training (binary,
/// libraries, the scenario; `safeamp sim` reads it after measure_training_rate, whose run pages in the training
/// code and grows the allocator's pools), the rate at which this build and machine run the simulator's emulated
/// training (floating-point operations per second, see measure_training_rate), and the transformer's corpus.
struct preflight_inputs {
  double base_bytes = 0.0;
  double flops_per_second = 1e9;
  std::int64_t vocab = 0;           // transformer vocabulary (distinct bytes of the corpus)
  std::int64_t corpus_bytes = 0;    // transformer corpus size
  std::int64_t eval_sequences = 0;  // transformer: held-out sequences evaluated (min(eval_samples, available))
  // Data from files, as check_data_files read them (0 otherwise): training rows (a step trains on min(batch size,
  // rows)), held-out rows (all of them are evaluated), the head's width, and the bytes the loaded arrays occupy.
  std::int64_t file_rows = 0;
  std::int64_t file_eval_rows = 0;
  std::int64_t file_head_width = 0;
  double file_bytes = 0.0;
};

/// The estimate for `runs`, trained in order; `reference_reused` leaves runs[0] (the reference) out of the
/// time (its lock is reused) but not out of memory. Every number is a double, so a scenario asking for
/// terabytes gives an estimate, not an overflow.
[[nodiscard]] preflight_estimate estimate_runs(const std::vector<run_config>& runs, bool reference_reused,
                                               const preflight_inputs& in);

/// Floating-point operations per second (as estimate_runs counts them) of this build's emulated training on
/// this machine, measured by training a small model of the scenario's kind under fp16-mixed for a few steps
/// (tens of milliseconds): an MLP, or a one-layer transformer on `data`'s corpus, whose small GEMMs, attention
/// and layer norms run at a rate of their own.
[[nodiscard]] double measure_training_rate(model_kind kind = model_kind::mlp, const data_config& data = {});

/// Memory this process may still use: MemAvailable of /proc/meminfo (the kernel's estimate of what can be
/// allocated without swapping), or the free physical pages where that is missing; 0 when unknown.
[[nodiscard]] std::uint64_t available_memory_bytes() noexcept;

/// Resident memory of this process now (VmRSS of /proc/self/status); 0 when unknown.
[[nodiscard]] std::uint64_t current_rss_bytes() noexcept;

}  // namespace safeamp::sim
