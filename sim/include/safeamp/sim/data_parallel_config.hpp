// The settings of a data-parallel run as plain values (a scenario's "data_parallel" block, and the rank
// count mpirun gave), kept apart from the exchange (data_parallel.hpp) so run_config can carry them.
#pragma once

#include <cstdint>

#include "safeamp/sim/reduction.hpp"

namespace safeamp::sim {

/// The most parts a global batch may be split into (data_parallel.micro_batches), so also the most ranks.
inline constexpr std::int64_t max_micro_batches = 4096;

struct data_parallel_config {
  std::int64_t micro_batches = 4;      // K: parts of every global batch (the batch size must be a multiple); N <= K
  reduce_spec reduction{};             // canonical fp32 by default
  std::int64_t fault_micro_batch = 0;  // gradient_inf/gradient_nan faults land in this part only (its rank only)
  std::int64_t exit_rank = -1;         // test hook: this rank ends abruptly (no clean-up) at exit_step
  std::int64_t exit_step = -1;
  std::int64_t corrupt_rank = -1;  // test hook: this rank's dynamic loss scale is one ulp off from corrupt_step
  std::int64_t corrupt_step = -1;  // on (a flipped low bit); the state check must fail naming the rank
  friend bool operator==(const data_parallel_config&, const data_parallel_config&) = default;
};

/// Throws safeamp::error when `cfg` cannot run on `ranks` ranks with global batches of `batch_size` samples
/// (micro_batches, the rank count, fault_micro_batch, a pre-division factor on the canonical reduction).
void validate(const data_parallel_config& cfg, std::int64_t ranks, std::int64_t batch_size);

/// A run trained data parallel: the block it runs under and the number of ranks. run_settings lists what of it
/// changes the run's numbers (see run_settings in reference.hpp).
struct data_parallel_setup {
  std::int64_t ranks = 1;
  data_parallel_config config{};
  friend bool operator==(const data_parallel_setup&, const data_parallel_setup&) = default;
};

}  // namespace safeamp::sim
