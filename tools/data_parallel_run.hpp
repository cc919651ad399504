// `safeamp sim` across ranks: under mpirun every rank runs the same invocation; a scenario with a
// "data_parallel" block trains each run data parallel (data_parallel.hpp), rank 0 alone writes the outputs and
// adds data_parallel.json (ranks, reduction, per-run weights hashes and skipped steps, the error-versus-N
// table, also the report's "Data parallel" section). The locked reference reduces in canonical fp32. An error on one rank ends every rank (MPI_Abort), so none waits forever in a collective.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "command_registry.hpp"
#include "mpi_world.hpp"
#include "safeamp/error.hpp"
#include "safeamp/sim/data_parallel.hpp"
#include "safeamp/sim/reduction.hpp"
#include "safeamp/sim/reference.hpp"
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
      scenario_config_ = *s.data_parallel;
      rank_count_ = ranks.size();
      exchange_.emplace(ranks, *s.data_parallel);
    } else if (ranks.size() > 1) {
      throw error("mpirun -np", std::to_string(ranks.size()),
                  "1, or a scenario with a \"data_parallel\" block (e.g. scenarios/data-parallel.json)");
    }
  }

  [[nodiscard]] bool writes_outputs() const { return world_ == nullptr || world_->rank() == 0; }

  /// How many of this job's ranks run on this rank's machine (1 without mpirun): those whose machine key equals
  /// this rank's, from one all-gather of the keys. The key is the running kernel's boot id (every process of one
  /// kernel shares it, and with it the machine's memory), else the host name. A collective: every rank calls it
  /// at the same point (the preflight, which checks the estimate of all of them against the machine's memory).
  [[nodiscard]] int ranks_on_this_machine() {
    if (world_ == nullptr) return 1;
    const std::array<std::byte, machine_key_bytes> mine = machine_key();
    std::vector<std::byte> all(machine_key_bytes * static_cast<std::size_t>(world_->size()));
    world_->allgather(mine, all);
    int same = 0;
    for (std::size_t at = 0; at < all.size(); at += machine_key_bytes) {
      same += std::memcmp(all.data() + at, mine.data(), machine_key_bytes) == 0 ? 1 : 0;
    }
    return same;
  }

  /// `cfg` with its data_parallel setup (the scenario's block and this job's rank count), so the run's
  /// manifest and checkpoint fingerprint list it (run_settings). The locked reference reduces in canonical
  /// fp32: it is the fp32 reference, and a wire reduction is a candidate's numerics like its policy.
  [[nodiscard]] sim::run_config configure(sim::run_config cfg, bool reference) const {
    if (!exchange_) return cfg;
    sim::data_parallel_config c = scenario_config_;
    if (reference) c.reduction = sim::reduce_spec{};
    cfg.data_parallel = sim::data_parallel_setup{.ranks = rank_count_, .config = c};
    return cfg;
  }
  /// The exchange to train `cfg` with (its reduction set from cfg's setup), or nullptr for one process.
  [[nodiscard]] sim::gradient_exchange* exchange_for(const sim::run_config& cfg) {
    if (!exchange_) return nullptr;
    if (!cfg.data_parallel) throw error("data-parallel run " + cfg.label, "no data_parallel setup", "configure()d");
    exchange_->set_reduction(cfg.data_parallel->config.reduction);
    return &*exchange_;
  }
  /// The report's "Data parallel" section and data_parallel.json (one value for both); nullopt for one process.
  [[nodiscard]] std::optional<sim::data_parallel_summary> summary() const {
    if (!exchange_) return std::nullopt;
    return sim::summarize_data_parallel({.ranks = rank_count_, .config = scenario_config_});
  }

  void record(const sim::run_result& r) {
    std::int64_t skipped = 0;
    // From the run's step records (a resumed run's earlier steps came back with its checkpoint): which ranks' own
    // gradients were not finite, and how many finite values the wire format could not hold, per step.
    nlohmann::json overflows = nlohmann::json::array();
    nlohmann::json wire = nlohmann::json::array();
    for (const sim::step_record& s : r.steps) {
      skipped += s.skipped ? 1 : 0;
      if (!s.overflow_ranks.empty()) overflows.push_back({{"step", s.step}, {"ranks", s.overflow_ranks}});
      if (s.wire_overflows > 0) wire.push_back({{"step", s.step}, {"values", s.wire_overflows}});
    }
    runs_.push_back(nlohmann::json{{"label", r.label},
                                   {"reduction", exchange_ ? sim::to_string(exchange_->config().reduction) : "fp32"},
                                   {"weights_hash", hex(r.weights_hash)},
                                   {"skipped_steps", skipped},
                                   {"overflow_ranks", overflows},
                                   {"wire_overflows", wire}});
  }

  /// The locked reference reused from the output folder (not trained by this invocation): its label and weights
  /// hash, marked as reused, so runs[] still lists every run of the report.
  void record_reused(const sim::locked_reference& ref) {
    if (!exchange_) return;
    runs_.push_back(
        nlohmann::json{{"label", ref.label},
                       {"reduction", sim::to_string(sim::reduce_spec{})},  // the reference reduces in canonical fp32
                       {"weights_hash", hex(ref.weights_hash)},
                       {"reused", true}});
  }

  /// Rank 0 of a data-parallel scenario writes data_parallel.json and prints the error table to `text` (stderr
  /// when stdout carries the summary's JSON). Returns code.
  int finish(const std::filesystem::path& out, int code, std::FILE* text = stdout) {
    if (!exchange_ || !writes_outputs()) return code;
    const sim::data_parallel_summary d = *summary();
    nlohmann::json rows = nlohmann::json::array();
    for (const sim::reduction_error_row& r : d.table) {
      rows.push_back({{"reduction", r.spec},
                      {"ranks", r.ranks},
                      {"relative_error", r.relative_error},
                      {"one_rounding_floor", r.floor}});
    }
    const nlohmann::json j = {
        {"ranks", d.ranks},
        {"micro_batches", d.micro_batches},
        {"reduction", d.reduction},
        {"reference_reduction", "fp32"},
        {"runs", runs_},
        {"reduction_error_vs_ranks",
         {{"what",
           "relative L2 error of the mean gradient over N ranks against the exact mean of the same rounded "
           "inputs; per-rank gradients s + sigma * noise, standard normal"},
          {"elements", d.table_elements},
          {"sigma", d.table_sigma},
          {"seed", d.table_seed},
          {"rows", rows}}}};
    sim::write_file_atomically(out / "data_parallel.json", j.dump(2) + "\n");
    std::fprintf(text, "data parallel: %lld rank(s), %lld micro-batches, reduction %s (reference: fp32)\n",
                 static_cast<long long>(d.ranks), static_cast<long long>(d.micro_batches), d.reduction.c_str());
    std::fprintf(text, "reduction error of the mean gradient vs ranks (sigma %g, %lld elements):\n%-10s", d.table_sigma,
                 static_cast<long long>(d.table_elements), "");
    for (const std::int64_t n : d.rank_counts) std::fprintf(text, " %8lld", static_cast<long long>(n));
    const std::size_t specs = d.table.size() / d.rank_counts.size();  // the table is ordered by N, then by spec
    for (std::size_t si = 0; si < specs; ++si) {
      std::fprintf(text, "\n%-10s", d.table[si].spec.c_str());
      for (std::size_t ni = 0; ni < d.rank_counts.size(); ++ni) {
        std::fprintf(text, " %8.1e", d.table[ni * specs + si].relative_error);
      }
    }
    std::fprintf(text, "\nwrote %s\n", (out / "data_parallel.json").string().c_str());
    return code;
  }

 private:
  static constexpr std::size_t machine_key_bytes = 80;
  /// "boot:<boot id>" or "host:<host name>", zero-padded (a longer name is cut: 75 characters tell hosts apart).
  static std::array<std::byte, machine_key_bytes> machine_key() {
    std::string key;
    std::ifstream boot("/proc/sys/kernel/random/boot_id");
    if (std::string id; boot && std::getline(boot, id) && !id.empty()) {
      key = "boot:" + id;
    } else {
      char host[256] = {};
      if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
      key = "host:" + std::string(host);
    }
    std::array<std::byte, machine_key_bytes> k{};
    std::memcpy(k.data(), key.data(), std::min(key.size(), machine_key_bytes - 1));
    return k;
  }

  static std::string hex(std::uint64_t v) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
    return buf;
  }
  sim::single_rank solo_;
  sim::data_parallel_config scenario_config_{};
  std::int64_t rank_count_ = 1;
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
