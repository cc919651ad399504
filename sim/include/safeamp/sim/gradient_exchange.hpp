// The trainer's hook for data parallelism: which parts of the global batch this process computes, how the
// parts' gradients become the reduced gradient every rank holds, and the group the scaler's found_inf and
// state consensus run over. Without a hook train() computes the whole batch as one part on one rank.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "safeamp/format/round_span.hpp"
#include "safeamp/sim/models.hpp"

namespace safeamp::sim {

class communicator;

/// Part `index` of a step's global batch: samples [first_sample, first_sample + samples).
struct batch_part {
  std::int64_t index = 0;
  std::int64_t first_sample = 0;
  std::int64_t samples = 0;
};

/// What one part's forward/backward gives besides its gradients: the (weighted) loss and the cast counters,
/// counts[0] of the loss gradient, then one per parameter in parameter order (empty when not recorded).
struct part_result {
  double loss = 0.0;
  std::vector<cast_stats> counts;
  // reduce()'s result only: the ranks whose own gradients held inf/NaN (ascending; the same on every rank), and
  // how many finite values the reduction's wire format could not hold (reduce_across_ranks). A non-finite
  // contribution counts as found_inf even where the wire format would hide it (fp8 saturates inf).
  std::vector<std::int32_t> non_finite_ranks;
  std::int64_t wire_overflows = 0;
};

class gradient_exchange {
 public:
  virtual ~gradient_exchange() = default;
  gradient_exchange() = default;
  gradient_exchange(const gradient_exchange&) = delete;
  gradient_exchange& operator=(const gradient_exchange&) = delete;

  /// The parts of a global batch of `global_samples` samples this rank computes, in part order.
  [[nodiscard]] virtual std::vector<batch_part> local_parts(std::int64_t global_samples) const = 0;
  /// Whether gradient faults (gradient_inf, gradient_nan) are injected into part `index`.
  [[nodiscard]] virtual bool gradient_faults_in(std::int64_t index) const = 0;
  /// Keeps the gradients (still scaled) and result of a part this rank just computed.
  virtual void keep(const batch_part& part, std::span<const std::span<float>> grads, part_result result) = 0;
  /// Writes the reduced gradient (identical bits on every rank) into `grads` and returns the global batch's
  /// loss and counters. Called once per step, after every local part was kept.
  [[nodiscard]] virtual part_result reduce(std::span<const std::span<float>> grads) = 0;
  /// The ranks the found_inf and scaler-state consensus run over (safeamp::rank_communicator).
  [[nodiscard]] virtual communicator& ranks() = 0;
  /// Called at the start of every step (after the batch is drawn): a test hook can end the process here.
  virtual void begin_step(std::int64_t step) = 0;
  /// Test hook: whether this rank's loss-scaler state is to be corrupted at the start of `step` (train() moves
  /// a dynamic scaler's scale one ulp, as a flipped low bit would), so that the state check names the rank.
  [[nodiscard]] virtual bool corrupts_scaler_at(std::int64_t step) const {
    (void)step;
    return false;
  }
  /// Every setting of the exchange that changes a run's bits, as one line; train() adds it to the checkpoint
  /// fingerprint, so a checkpoint saved under other settings is refused instead of continuing into a run that
  /// matches neither. Settings that do not change the bits (test hooks, a rank count the reduction does not
  /// depend on) stay out, so such a checkpoint still resumes.
  [[nodiscard]] virtual std::string checkpoint_settings() const = 0;
};

/// Samples [first, first + count) of `b` (features, tokens, targets and slices sliced alike).
[[nodiscard]] batch slice_batch(const batch& b, std::int64_t first, std::int64_t count);

}  // namespace safeamp::sim
