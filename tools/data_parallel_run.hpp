// `safeamp sim` across ranks: under mpirun every rank runs the same invocation; a scenario with a
// "data_parallel" block trains each run data parallel (data_parallel.hpp), rank 0 alone writes the outputs and
// adds data_parallel.json (ranks, reduction, per-run weights hashes and skipped steps, the error-versus-N
// table). An error on one rank ends every rank (MPI_Abort), so none waits forever in a collective.
#pragma once

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "command_registry.hpp"
#include "mpi_world.hpp"
#include "safeamp/error.hpp"
#include "safeamp/sim/data_parallel.hpp"
#include "safeamp/sim/reduction.hpp"
#include "safeamp/sim/report_files.hpp"
#include "safeamp/sim/run_result.hpp"
#include "safeamp/sim/scenario.hpp"

namespace safeamp::tool {

class data_parallel_run {
 public:
  explicit data_parallel_run(const sim::scenario& s) {
    if (sim::launched_by_mpirun()) world_ = &sim::mpi_world();
    sim::communicator& ranks = world_ != nullptr ? *world_ : solo_;
    if (s.data_parallel) {
      validate(*s.data_parallel, ranks.size(), s.base.batch_size);
      exchange_.emplace(ranks, *s.data_parallel);
    } else if (ranks.size() > 1) {
      throw error("mpirun -np", std::to_string(ranks.size()),
                  "1, or a scenario with a \"data_parallel\" block (e.g. scenarios/data-parallel.json)");
    }
  }

  [[nodiscard]] bool writes_outputs() const { return world_ == nullptr || world_->rank() == 0; }
  [[nodiscard]] sim::gradient_exchange* exchange() { return exchange_ ? &*exchange_ : nullptr; }

  void record(const sim::run_result& r) {
    std::int64_t skipped = 0;
    for (const sim::step_record& s : r.steps) skipped += s.skipped ? 1 : 0;
    nlohmann::json overflows = nlohmann::json::array();  // which ranks' own gradients were not finite, per step
    if (exchange_) {
      for (const sim::rank_overflow& o : exchange_->take_overflow_log())
        overflows.push_back({{"step", o.step}, {"ranks", o.ranks}});
    }
    runs_.push_back(nlohmann::json{{"label", r.label},
                                   {"weights_hash", hex(r.weights_hash)},
                                   {"skipped_steps", skipped},
                                   {"overflow_ranks", overflows}});
  }

  /// Rank 0 of a data-parallel scenario writes data_parallel.json and prints the error table. Returns code.
  int finish(const std::filesystem::path& out, int code) {
    if (!exchange_ || !writes_outputs()) return code;
    const sim::data_parallel_config& c = exchange_->config();
    constexpr std::int64_t table_elements = 1024;
    constexpr double table_sigma = 1.0;
    constexpr std::uint64_t table_seed = 17;
    const std::vector<std::int64_t> counts = sim::report_rank_counts();
    const std::vector<sim::reduction_error_row> table =
        sim::reduction_error_table(sim::report_reduce_specs(), counts, table_elements, table_sigma, table_seed);
    nlohmann::json rows = nlohmann::json::array();
    for (const sim::reduction_error_row& r : table) {
      rows.push_back({{"reduction", r.spec},
                      {"ranks", r.ranks},
                      {"relative_error", r.relative_error},
                      {"one_rounding_floor", r.floor}});
    }
    const nlohmann::json j = {
        {"ranks", exchange_->ranks().size()},
        {"micro_batches", c.micro_batches},
        {"reduction", sim::to_string(c.reduction)},
        {"runs", runs_},
        {"reduction_error_vs_ranks",
         {{"what",
           "relative L2 error of the mean gradient over N ranks against the exact mean of the same rounded "
           "inputs; per-rank gradients s + sigma * noise, standard normal"},
          {"elements", table_elements},
          {"sigma", table_sigma},
          {"seed", table_seed},
          {"rows", rows}}}};
    sim::write_file_atomically(out / "data_parallel.json", j.dump(2) + "\n");
    std::printf("data parallel: %d rank(s), %lld micro-batches, reduction %s\n", exchange_->ranks().size(),
                static_cast<long long>(c.micro_batches), sim::to_string(c.reduction).c_str());
    std::printf("reduction error of the mean gradient vs ranks (sigma %g, %lld elements):\n%-10s", table_sigma,
                static_cast<long long>(table_elements), "");
    for (const std::int64_t n : counts) std::printf(" %8lld", static_cast<long long>(n));
    const std::size_t specs = table.size() / counts.size();  // the table is ordered by N, then by spec
    for (std::size_t si = 0; si < specs; ++si) {
      std::printf("\n%-10s", table[si].spec.c_str());
      for (std::size_t ni = 0; ni < counts.size(); ++ni) std::printf(" %8.1e", table[ni * specs + si].relative_error);
    }
    std::printf("\nwrote %s\n", (out / "data_parallel.json").string().c_str());
    return code;
  }

 private:
  static std::string hex(std::uint64_t v) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
    return buf;
  }
  sim::single_rank solo_;
  sim::communicator* world_ = nullptr;
  std::optional<sim::data_parallel> exchange_;
  std::vector<nlohmann::json> runs_;
};

/// Runs body(); under mpirun with several ranks an exception on this rank is printed with the rank and ends
/// the whole job with MPI_Abort (exit code 2 for bad input, 1 otherwise), so no rank waits in a collective.
template <class Body>
int run_on_every_rank(Body&& body) {
  if (!sim::launched_by_mpirun() || !sim::mpi_available()) return body();
  try {
    return body();
  } catch (const std::exception& e) {
    const bool bad_input = dynamic_cast<const error*>(&e) != nullptr;
    std::fprintf(stderr, "safeamp: error: rank %d: %s\n", sim::mpi_world().rank(), e.what());
    std::fflush(stderr);
    sim::abort_job(bad_input ? exit_bad_input : exit_check_failed);
    throw;
  }
}

}  // namespace safeamp::tool
