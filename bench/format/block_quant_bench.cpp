// Throughput (elements/s) of safeamp::quantize_blocks for MXFP8 (E4M3), MXFP4 and NVFP4, nearest even and
// stochastic, along rows and columns, on 64 Mi floats (memory-bound: 256 MiB in, 256 MiB out, plus the scales)
// and 64 Ki floats (in cache), beside memcpy of the same float bytes in the same run. The ratio to memcpy is
// what docs/performance.md records (issue 16 asks for >= 0.5x for MXFP8 on 64 Mi floats).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "bench_buffers.hpp"
#include "safeamp/format.hpp"

namespace {

constexpr std::int64_t small_n = std::int64_t{1} << 16;
constexpr std::int64_t large_n = std::int64_t{1} << 26;
constexpr std::size_t matrix_cols = 4096;  // the input is a (n / 4096, 4096) matrix

const std::vector<float>& input(std::int64_t n) {
  static std::map<std::int64_t, std::vector<float>> cache;
  auto& v = cache[n];
  if (v.empty()) {
    std::mt19937_64 rng(0xB10C5u);
    std::normal_distribution<float> d(0.0f, 1.0f);
    v.resize(static_cast<std::size_t>(n));
    for (float& x : v) x = d(rng);
  }
  return v;
}
using safeamp_bench::finish;
using safeamp_bench::output;

void bm_memcpy(benchmark::State& state) { safeamp_bench::memcpy_baseline(state, input(state.range(0))); }

// range(1): 0 MXFP8 E4M3, 1 MXFP4, 2 NVFP4; range(2): 0 nearest even, 1 stochastic; range(3): 0 rows, 1 columns.
void bm_quantize_blocks(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  const safeamp::block_format formats[] = {safeamp::mxfp8_e4m3, safeamp::mxfp4, safeamp::nvfp4};
  const safeamp::block_format b = formats[state.range(1)];
  const auto& in = input(n);
  auto& out = output(n);
  const std::size_t rows = static_cast<std::size_t>(n) / matrix_cols;
  const safeamp::block_options opt{
      .rows = rows,
      .axis = state.range(3) == 0 ? safeamp::block_axis::rows : safeamp::block_axis::columns,
      .mode = state.range(2) == 0 ? safeamp::rounding::nearest_even : safeamp::rounding::stochastic,
      .key = {.seed = 1}};
  std::vector<float> scales(static_cast<std::size_t>(n) / 16 + matrix_cols);
  for (auto _ : state) {
    benchmark::DoNotOptimize(safeamp::quantize_blocks(b, in, out, scales, opt));
    benchmark::ClobberMemory();
  }
  finish(state, n);
  // The format and the kernel path (SAFEAMP_CPU_PATH forces one; on an AVX-512 machine avx2 is a forced path).
  state.SetLabel(safeamp::block_format_name(b) + " " + std::string(safeamp::cpu_path_name(safeamp::active_cpu_path())));
}

BENCHMARK(bm_memcpy)->Arg(large_n)->Arg(small_n)->Unit(benchmark::kMillisecond);
BENCHMARK(bm_quantize_blocks)
    ->ArgsProduct({{large_n}, {0, 1, 2}, {0, 1}, {0}})
    ->Args({large_n, 0, 0, 1})
    ->ArgsProduct({{small_n}, {0, 1, 2}, {0}, {0}})
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
