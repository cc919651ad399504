// Checkpoints of a simulated run: parameters, optimizer state, loss-scaler state (its own JSON), the
// data position (the next step; batches are a function of the step) and the step records so far (so a
// resumed run reports every step, as the uninterrupted one does). Binary, little-endian, with a
// configuration fingerprint and a trailing FNV-1a checksum; written to a unique temporary beside it and
// renamed (the sim atomic writer), so a failure never replaces a good checkpoint. A corrupt, truncated,
// mismatching or out-of-range file is a safeamp::error.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "safeamp/sim/optimizer.hpp"
#include "safeamp/sim/parameter.hpp"
#include "safeamp/sim/run_result.hpp"

namespace safeamp::sim {

/// 2: the step records of the steps before next_step are stored; 3: with each step's overflowing ranks and wire
/// overflows (data parallel). Files of other versions are refused.
inline constexpr std::uint32_t checkpoint_version = 3;

struct checkpoint_data {
  std::uint64_t config_fingerprint = 0;  // run_config fields that must match to resume
  std::int64_t next_step = 0;
  std::string scaler_json;               // loss_scaler::save_json(), empty for static/no-op scalers
  std::vector<step_record> history;      // the records of steps 0 .. next_step-1, in order
};

/// Writes atomically (temporary file + rename). Throws safeamp::error when the file cannot be written.
void save_checkpoint(const std::string& path, const checkpoint_data& meta, const parameter_list& params,
                     const optimizer_state& opt);

/// Reads into params/opt (whose shapes must match) and returns the metadata. The file is read with
/// read_input_file, capped at the largest checkpoint of this model. Every field is checked: 0 <= next_step <=
/// max_next_step (the steps of the run being resumed), 0 <= updates <= next_step, every parameter, moment and
/// master value finite, every AdamW second moment >= 0, one history record per step before next_step
/// (numbered 0, 1, ...; a positive finite scale; skipped only when found_inf; at most one gradient counter
/// per parameter plus the loss gradient, none counting more than its elements). Nothing is modified when the file is
/// missing, truncated, corrupt, out of range or of another model; the safeamp::error names the field.
[[nodiscard]] checkpoint_data load_checkpoint(const std::string& path, parameter_list& params, optimizer_state& opt,
                                              std::int64_t max_next_step);

}  // namespace safeamp::sim
