// Loss-scaling costs, each beside a baseline measured in the same run:
//   transition:  update_scale per step (nanoseconds), against a plain float multiply-add loop step;
//   fused pass:  unscale_and_check over a 64 Mi-element gradient, against memcpy of the same bytes and
//                against a separate check pass followed by a scale pass.
// Ratios are computed from the times of the same run (docs/performance.md, loss scaling section).
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "safeamp/scaling.hpp"

namespace {
constexpr std::size_t gradient_elements = std::size_t{64} << 20;  // 64 Mi floats = 256 MiB

std::vector<float>& gradient() {
  static std::vector<float> g = [] {
    std::vector<float> v(gradient_elements);
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> d(-65504.0f, 65504.0f);
    for (float& x : v) x = d(rng);
    return v;
  }();
  return g;
}

// Alternating exact factors 1/2 and 2 keep the data stable across iterations; read through a volatile so
// the compiler cannot fold the multiply away.
volatile float factor_source[2] = {0.5f, 2.0f};

std::vector<float>& destination() {
  static std::vector<float> d(gradient_elements, 1.0f);
  return d;
}

void bm_transition(benchmark::State& state) {
  const safeamp::scaler_config cfg = safeamp::scaler_presets::megatron;
  std::vector<bool> flags(4096);
  std::mt19937 rng(2);
  for (std::size_t i = 0; i < flags.size(); ++i) flags[i] = (rng() % 100) < 5;
  safeamp::scaler_state s = safeamp::initial_state(cfg);
  std::size_t i = 0;
  for (auto _ : state) {
    s = safeamp::update_scale(cfg, s, flags[i++ & 4095]);
    benchmark::DoNotOptimize(s);
  }
  state.SetItemsProcessed(state.iterations());
}

void bm_memcpy(benchmark::State& state) {
  std::vector<float>& src = gradient();
  std::vector<float>& dst = destination();
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size() * sizeof(float));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(src.size() * sizeof(float)));
}

void bm_fused_unscale_and_check(benchmark::State& state) {
  std::vector<float>& g = gradient();
  bool found = false;
  std::size_t k = 0;
  for (auto _ : state) {
    const float f = factor_source[k++ & 1u];
    found = safeamp::unscale_and_check(g, f) || found;
    benchmark::ClobberMemory();
  }
  benchmark::DoNotOptimize(found);
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(g.size() * sizeof(float)));
}

void bm_separate_check_then_scale(benchmark::State& state) {
  std::vector<float>& g = gradient();
  bool found = false;
  std::size_t k = 0;
  for (auto _ : state) {
    const float f = factor_source[k++ & 1u];
    found = safeamp::has_non_finite(g) || found;
    benchmark::ClobberMemory();
    safeamp::scale_in_place(g, f);
    benchmark::ClobberMemory();
  }
  benchmark::DoNotOptimize(found);
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(g.size() * sizeof(float)));
}
}  // namespace

BENCHMARK(bm_transition);
BENCHMARK(bm_memcpy)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(bm_fused_unscale_and_check)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(bm_separate_check_then_scale)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
