// Reading a scenario's "data_parallel" object (private to sim/src: nlohmann-json is not part of the interface).
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

#include "safeamp/sim/data_parallel.hpp"

namespace safeamp::sim {

/// Keys micro_batches, reduction, fault_micro_batch and the test hooks exit_rank, exit_step, corrupt_rank,
/// corrupt_step. Throws safeamp::error naming `path` and the key for unknown keys, wrong types and bad values.
[[nodiscard]] data_parallel_config parse_data_parallel(const nlohmann::json& j, std::string_view path);

}  // namespace safeamp::sim
