// A full emulated fp16-mixed training run (dynamic loss scaling) against the fp32 run of the same model
// and data, measured in the same run, for the MLP and the transformer.
#include <benchmark/benchmark.h>

#include "safeamp/policy.hpp"
#include "safeamp/scaling.hpp"
#include "safeamp/sim/trainer.hpp"

namespace {

using namespace safeamp;
using namespace safeamp::sim;

run_config config(bool transformer, bool mixed) {
  run_config c;
  c.model = transformer ? model_kind::transformer : model_kind::mlp;
  c.steps = transformer ? 20 : 100;
  c.batch_size = transformer ? 16 : 256;
  c.data.eval_samples = transformer ? 16 : 256;
  c.policy = mixed ? presets::fp16_mixed : presets::fp32;
  c.scaler.kind = mixed ? scaler_kind::dynamic : scaler_kind::none;
  return c;
}

void run(benchmark::State& state, bool transformer, bool mixed) {
  const run_config c = config(transformer, mixed);
  for (auto _ : state) {
    const run_result r = train(c);
    benchmark::DoNotOptimize(r.weights_hash);
  }
}

void mlp_fp32(benchmark::State& s) { run(s, false, false); }
void mlp_fp16_mixed(benchmark::State& s) { run(s, false, true); }
void transformer_fp32(benchmark::State& s) { run(s, true, false); }
void transformer_fp16_mixed(benchmark::State& s) { run(s, true, true); }

}  // namespace

BENCHMARK(mlp_fp32)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(mlp_fp16_mixed)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(transformer_fp32)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(transformer_fp16_mixed)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK_MAIN();
