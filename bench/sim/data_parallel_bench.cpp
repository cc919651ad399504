// Data parallelism's cost: a training run whose every step is data parallel over this job's ranks (one
// micro-batch of B samples per rank: the all-gather of the gradients, the fixed-order fp32 sum, the found_inf
// and scaler-state consensus) against the single-process run of the same per-rank batch B, measured in the same
// run on the same ranks (under mpirun both ranks run the baseline at the same time too, so both see the same
// machine load). Run it as: mpirun --oversubscribe -np 2 build/bench/sim/bench_sim_data_parallel
// (without mpirun it is one rank, and the ratio is the exchange's own overhead). Rank 0 prints.
#include <benchmark/benchmark.h>

#include "mpi_world.hpp"
#include "safeamp/policy.hpp"
#include "safeamp/sim/data_parallel.hpp"
#include "safeamp/sim/trainer.hpp"

namespace {

using namespace safeamp;
using namespace safeamp::sim;

constexpr std::int64_t per_rank_batch = 128;
constexpr int iterations = 3;  // fixed: every rank must run the same number of collectives

sim::communicator* world = nullptr;

run_config config(std::int64_t batch) {
  run_config c;
  c.model = model_kind::mlp;
  c.mlp = mlp_shape{.input_dim = 64, .hidden_dim = 256, .hidden_layers = 2, .classes = 16};
  c.data.train_samples = 4096;
  c.data.eval_samples = 64;
  c.steps = 20;
  c.batch_size = batch;
  c.policy = presets::fp16_mixed;
  c.scaler.kind = scaler_kind::dynamic;
  return c;
}

void single_process_step(benchmark::State& state) {
  const run_config c = config(per_rank_batch);
  for (auto _ : state) benchmark::DoNotOptimize(train(c).weights_hash);
}

void data_parallel_step(benchmark::State& state) {
  const run_config c = config(per_rank_batch * world->size());
  data_parallel exchange(*world, data_parallel_config{.micro_batches = world->size()});
  for (auto _ : state) benchmark::DoNotOptimize(train(c, {}, &exchange).weights_hash);
  state.counters["ranks"] = world->size();
}

}  // namespace

BENCHMARK(single_process_step)->Unit(benchmark::kMillisecond)->Iterations(iterations)->UseRealTime();
BENCHMARK(data_parallel_step)->Unit(benchmark::kMillisecond)->Iterations(iterations)->UseRealTime();

int main(int argc, char** argv) {
  single_rank solo;
  world = launched_by_mpirun() ? &mpi_world() : &solo;
  benchmark::Initialize(&argc, argv);
  if (world->rank() == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    struct quiet final : benchmark::BenchmarkReporter {
      bool ReportContext(const Context&) override { return true; }
      void ReportRuns(const std::vector<Run>&) override {}
    } reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
  }
  benchmark::Shutdown();
  return 0;
}
