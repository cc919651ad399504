// Checkpoints of a simulated run: parameters, optimizer state, loss-scaler state (its own JSON) and the
// data position (the next step; batches are a function of the step). Binary, little-endian, with a
// configuration fingerprint and a trailing FNV-1a checksum; written to "<path>.partial" and renamed, so a
// failure never replaces a good checkpoint. A corrupt, truncated or mismatching file is a safeamp::error.
#pragma once

#include <cstdint>
#include <string>

#include "safeamp/sim/optimizer.hpp"
#include "safeamp/sim/parameter.hpp"

namespace safeamp::sim {

inline constexpr std::uint32_t checkpoint_version = 1;

struct checkpoint_data {
  std::uint64_t config_fingerprint = 0;  // run_config fields that must match to resume
  std::int64_t next_step = 0;
  std::string scaler_json;               // loss_scaler::save_json(), empty for static/no-op scalers
};

/// Writes atomically (temporary file + rename). Throws safeamp::error when the file cannot be written.
void save_checkpoint(const std::string& path, const checkpoint_data& meta, const parameter_list& params,
                     const optimizer_state& opt);

/// Reads into params/opt (whose shapes must match) and returns the metadata. Nothing is modified when the
/// file is missing, truncated, corrupt or of another model.
[[nodiscard]] checkpoint_data load_checkpoint(const std::string& path, parameter_list& params, optimizer_state& opt);

}  // namespace safeamp::sim
