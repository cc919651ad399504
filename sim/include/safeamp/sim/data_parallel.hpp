// Data parallelism in the simulator: the global batch of every step is cut into `micro_batches` equal parts,
// rank r of N computes the contiguous block of parts [r*K/N, (r+1)*K/N), and the gradients are combined by
// pure data movement (an all-gather) plus local arithmetic in a fixed order, never a floating-point MPI
// reduction. The canonical fp32 reduction gives the same bits for every N; the wire-format modes emulate what
// a low-precision collective does at N ranks (reduction.hpp). train(cfg, &exchange) runs it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "safeamp/sim/communicator.hpp"
#include "safeamp/sim/data_parallel_config.hpp"
#include "safeamp/sim/gradient_exchange.hpp"
#include "safeamp/sim/reduction.hpp"

namespace safeamp::sim {

/// What a data-parallel invocation reports (data_parallel.json and the report's "Data parallel" section, from
/// this one value): the setup, the reduction each run used, and the single-process error-versus-N table.
struct data_parallel_summary {
  std::int64_t ranks = 1;
  std::int64_t micro_batches = 1;
  std::string reduction;            // the candidates' (the scenario's); the reference is reduced in fp32
  std::int64_t table_elements = 0;  // per-rank gradient length of the table's experiment
  double table_sigma = 0.0;
  std::uint64_t table_seed = 0;
  std::vector<std::int64_t> rank_counts;   // the table's N, ascending
  std::vector<reduction_error_row> table;  // ordered by N, then by spec (report_reduce_specs order)
};

/// The summary for `setup`, with the table of report_reduce_specs x report_rank_counts at 1024 elements,
/// sigma 1, seed 17.
[[nodiscard]] data_parallel_summary summarize_data_parallel(const data_parallel_setup& setup);

class data_parallel final : public gradient_exchange {
 public:
  data_parallel(communicator& ranks, data_parallel_config cfg);

  [[nodiscard]] std::vector<batch_part> local_parts(std::int64_t global_samples) const override;
  [[nodiscard]] bool gradient_faults_in(std::int64_t index) const override;
  void keep(const batch_part& part, std::span<const std::span<float>> grads, part_result result) override;
  [[nodiscard]] part_result reduce(std::span<const std::span<float>> grads) override;
  [[nodiscard]] communicator& ranks() override { return *ranks_; }
  void begin_step(std::int64_t step) override;
  /// data_parallel.corrupt_rank and corrupt_step (a test hook).
  [[nodiscard]] bool corrupts_scaler_at(std::int64_t step) const override;
  /// "data_parallel micro_batches=K reduction=R fault_micro_batch=F", and " ranks=N" for every reduction but the
  /// canonical one: a wire-format reduction rounds each rank's sum of its parts, so its bits depend on N.
  [[nodiscard]] std::string checkpoint_settings() const override;

  [[nodiscard]] const data_parallel_config& config() const noexcept { return cfg_; }
  /// The reduction of the runs from now on (the locked reference reduces in canonical fp32, the candidates
  /// as the scenario says; see run_settings).
  void set_reduction(const reduce_spec& r) noexcept { cfg_.reduction = r; }

 private:
  [[nodiscard]] std::int64_t first_part(int rank) const noexcept;
  communicator* ranks_;
  data_parallel_config cfg_;
  std::int64_t max_local_parts_ = 0;
  // The step's one all-gather sends a record per rank, in floats: its parts' losses (a double each, as the bytes
  // of two floats), its cast counters (six uint64 per counter, two floats each), then its gradients (canonical:
  // every part's, written here by keep(); wire: the fp32 sum of its parts).
  std::vector<float> send_;
  std::vector<float> gathered_;  // (ranks, record)
  std::vector<float> kept_;      // wire reductions: (max_local_parts, elements), this rank's parts' gradients
  std::vector<float> reduced_;   // (elements): the reduced sum
  std::vector<part_result> results_;
  std::size_t elements_ = 0;
  std::size_t header_ = 0;  // floats before the gradients in a record
  std::size_t record_ = 0;  // floats per record
};

}  // namespace safeamp::sim
