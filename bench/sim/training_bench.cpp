// A full emulated fp16-mixed training run (dynamic loss scaling) against the fp32 run of the same model
// and data, measured in the same run: the MLP, the transformer, and the default scenario's transformer (its
// fp32 reference and its "fp16-mixed dynamic" candidate, 30 steps, one thread) at its own width and 4x wider,
// the shapes of the PyTorch peer benchmark (bench/peer).
#include <benchmark/benchmark.h>

#include <string>

#include "safeamp/policy.hpp"
#include "safeamp/scaling.hpp"
#include "safeamp/sim/scenario.hpp"
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

// The default scenario's reference (fp32) or its "fp16-mixed dynamic" candidate, `widen` times wider.
run_config scenario_config(bool mixed, std::int64_t widen) {
  const scenario s = parse_scenario(default_scenario_json(), "embedded default");
  run_config c = reference_config(s);
  for (const candidate_spec& cand : s.candidates) {
    if (mixed && cand.name == "fp16-mixed dynamic") c = candidate_config(s, cand);
  }
  c.transformer.width *= widen;
  c.steps = 30;
  c.threads = 1;
  return c;
}

void train_loop(benchmark::State& state, const run_config& c) {
  for (auto _ : state) {
    const run_result r = train(c);
    benchmark::DoNotOptimize(r.weights_hash);
  }
}

void mlp_fp32(benchmark::State& s) { train_loop(s, config(false, false)); }
void mlp_fp16_mixed(benchmark::State& s) { train_loop(s, config(false, true)); }
void transformer_fp32(benchmark::State& s) { train_loop(s, config(true, false)); }
void transformer_fp16_mixed(benchmark::State& s) { train_loop(s, config(true, true)); }
void scenario_fp32(benchmark::State& s) { train_loop(s, scenario_config(false, s.range(0))); }
void scenario_fp16_mixed(benchmark::State& s) { train_loop(s, scenario_config(true, s.range(0))); }

}  // namespace

BENCHMARK(mlp_fp32)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(mlp_fp16_mixed)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(transformer_fp32)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(transformer_fp16_mixed)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(scenario_fp32)->Arg(1)->Arg(4)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(scenario_fp16_mixed)->Arg(1)->Arg(4)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK_MAIN();
