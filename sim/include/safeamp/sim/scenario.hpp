// A scenario: one model, one data set and one training recipe run under the fp32 reference policy and
// under several candidates (policy, scaler, faults, expected verdict), with the gate's tolerances, the
// fallback baselines and the cost figure. Parsed from JSON with strict keys (unknown keys are refused
// with a did-you-mean); the embedded default is `safeamp sim`'s main job.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "safeamp/sim/data_parallel.hpp"
#include "safeamp/sim/parity.hpp"
#include "safeamp/sim/reference.hpp"
#include "safeamp/sim/run_config.hpp"

namespace safeamp::sim {

/// What the scenario expects the gate to say about a candidate.
enum class expectation : std::uint8_t { pass, fail, inconclusive, any };
[[nodiscard]] const char* expectation_name(expectation e) noexcept;  // "pass", "fail", "inconclusive", "any"
/// True when verdict `v` is what `e` expects (any verdict meets expectation::any).
[[nodiscard]] bool meets_expectation(expectation e, verdict v) noexcept;

struct candidate_spec {
  std::string name;                     // label in tables, file names and fallback decisions
  std::string policy_text;              // preset name or policy string, as written
  precision_policy policy{};
  scaler_choice scaler{};
  std::optional<bool> master_weights;   // overrides the scenario optimizer's setting
  std::vector<fault_spec> faults;
  expectation expect = expectation::pass;
  tolerance_overrides tolerances;       // on top of the scenario-wide overrides
};

struct scenario {
  std::string name = "scenario";
  std::string description;
  run_config base{};                    // model, data, optimizer, steps, batch, seed, threads, clip
  std::string reference_policy_text = "fp32";
  double loss_multiplier = 1.0;         // every run's loss is multiplied by this (a small-loss objective)
  std::vector<candidate_spec> candidates;
  tolerance_overrides tolerances;       // scenario-wide
  std::vector<std::string> baselines;   // fallback order, e.g. {"bf16-mixed", "fp32"}
  double dollars_per_hour = 0.0;        // price of the machine for the cost section; 0: not shown
  std::optional<data_parallel_config> data_parallel;  // set: every run is data parallel (mpirun -np N)
};

/// Parses scenario JSON. `source` names the text in errors (a path or "embedded default"). Throws
/// safeamp::error naming the key path ("candidates[1].scaler.kind") for malformed JSON, unknown keys
/// (with the closest known key), wrong types and impossible values.
[[nodiscard]] scenario parse_scenario(std::string_view json_text, std::string_view source);

/// The JSON text of the embedded default scenario (small transformer on the shipped corpus).
[[nodiscard]] std::string_view default_scenario_json() noexcept;

/// Applies --seed: the training seed (initialisation, batch order, stochastic rounding).
void override_seed(scenario& s, std::uint64_t seed) noexcept;

/// The run configurations: the reference (reference policy, no scaler, no faults) and each candidate.
[[nodiscard]] run_config reference_config(const scenario& s);
[[nodiscard]] run_config candidate_config(const scenario& s, const candidate_spec& c);

/// The manifest of a run of `s` under `cfg` (identity from the scenario and the data's bytes,
/// environment from this build). Throws safeamp::error when the corpus cannot be read.
[[nodiscard]] run_manifest manifest_for(const scenario& s, const run_config& cfg);

/// The gate's tolerances for candidate `c`: format terms from its coarsest format; limits declared by the
/// scenario, then by the candidate, replace the derived ones.
[[nodiscard]] gate_tolerances tolerances_for(const scenario& s, const candidate_spec& c);

}  // namespace safeamp::sim
