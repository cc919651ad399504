// Step-by-step comparison of two training runs from their JSON Lines step records (the simulator's
// `safeamp sim` telemetry format, which the GPU trainer writes too): which steps overflowed in each, where
// they disagree, and the loss gap. Host-only; used by `gpu_trainer --compare` and scripts/gpu-check.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "safeamp/sim/run_result.hpp"

namespace safeamp::gpu_trainer {

/// Parses JSON Lines as written by sim::step_json_line (numbers, or "inf"/"-inf"/"nan" as text; the
/// "layers" array is read into grads). Blank lines are ignored. Throws safeamp::error naming `source`, the
/// line number and the field for malformed lines, missing or mistyped fields.
[[nodiscard]] std::vector<sim::step_record> parse_step_records(std::string_view jsonl, std::string_view source);

struct comparison_options {
  double max_relative_loss_gap = 0.05;  // |a - b| / max(|a|, |b|) allowed at every step where both are finite
};

struct comparison {
  std::int64_t steps_a = 0, steps_b = 0;
  std::int64_t common_steps = 0;               // step numbers present in both
  std::vector<std::int64_t> overflow_steps_a;  // found_inf steps (all of a's records)
  std::vector<std::int64_t> overflow_steps_b;
  std::vector<std::int64_t> overflow_only_in_a;  // common steps where only a overflowed
  std::vector<std::int64_t> overflow_only_in_b;
  std::vector<std::int64_t> non_finite_loss_steps;  // common steps where either loss is inf/NaN (no gap)
  double max_abs_loss_gap = 0.0;                    // over common steps with finite losses
  double max_relative_loss_gap = 0.0;
  std::int64_t max_gap_step = -1;  // step of the largest relative gap (-1: none)
  double mean_abs_loss_gap = 0.0;
  double final_loss_a = 0.0, final_loss_b = 0.0;   // at the last common step
  std::vector<std::int64_t> steps_over_tolerance;  // relative gap above the option
  bool overflow_steps_agree = false;               // the same common steps overflowed in both
  bool loss_within_tolerance = false;
  bool agree = false;  // both of the above, and at least one common step
};

/// Compares the records of two runs by step number.
[[nodiscard]] comparison compare_steps(std::span<const sim::step_record> a, std::span<const sim::step_record> b,
                                       const comparison_options& options = {});

/// A few lines for the terminal ("a" and "b" named by the caller).
[[nodiscard]] std::string comparison_text(const comparison& c, std::string_view name_a, std::string_view name_b,
                                          const comparison_options& options = {});

/// The same as one JSON object (keys: a, b, steps_a, steps_b, common_steps, overflow_steps_a/_b,
/// overflow_only_in_a/_b, non_finite_loss_steps, max_abs_loss_gap, max_relative_loss_gap, max_gap_step,
/// mean_abs_loss_gap, final_loss_a/_b, max_relative_loss_gap_allowed, steps_over_tolerance,
/// overflow_steps_agree, loss_within_tolerance, agree).
[[nodiscard]] std::string comparison_json(const comparison& c, std::string_view name_a, std::string_view name_b,
                                          const comparison_options& options = {});

}  // namespace safeamp::gpu_trainer
