// The simulated trainer: runs a run_config end to end (data, model, forward/backward under the policy,
// the core loss scaler, clipping, the optimizer, faults, checkpoints) and returns the run_result.
#pragma once

#include <cstdint>
#include <functional>

#include "safeamp/sim/gradient_exchange.hpp"
#include "safeamp/sim/run_config.hpp"
#include "safeamp/sim/run_result.hpp"

namespace safeamp::sim {

/// Called after every step with the steps finished so far (a resumed run counts from its checkpoint) and the
/// run's total (for a progress display; it must not throw).
using step_observer = std::function<void(std::int64_t steps_done, std::int64_t steps_total)>;

/// Trains as configured. Deterministic: the same config gives bit-identical step records, probe logits
/// and weights_hash for any `threads`, and across a save/resume. Throws safeamp::error on bad input.
/// With `exchange` (data parallelism) the rank computes only its parts of each global batch, the exchange
/// reduces the gradients, and found_inf and the scaler state are agreed across its ranks.
[[nodiscard]] run_result train(const run_config& cfg, const step_observer& on_step = {},
                               gradient_exchange* exchange = nullptr);

/// The checks train() makes of cfg.checkpoint.resume_path before its first step (the file intact and of this
/// model, its values in range, saved by a run with the same settings and, with `exchange`, the same data-parallel
/// settings), without training: so that an invocation resuming several runs refuses a bad checkpoint of its last
/// run before the first one trains. Nothing to check when resume_path is empty. Throws safeamp::error.
void check_resume(const run_config& cfg, const gradient_exchange* exchange = nullptr);

}  // namespace safeamp::sim
