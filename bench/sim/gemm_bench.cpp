// Emulated fp16/bf16 GEMM (inputs rounded, fp32 accumulation, output rounded) against plain Eigen float
// GEMM of the same size (the library's plain_gemm, same compiler flags), measured in the same run.
#include <benchmark/benchmark.h>

#include "safeamp/sim/gemm.hpp"
#include "safeamp/sim/parameter.hpp"

namespace {

using safeamp::sim::matrix;

matrix random_square(Eigen::Index n, std::uint32_t stream) {
  matrix m(n, n);
  safeamp::sim::init_normal(m, 1.0, 1, stream, safeamp::fp32);
  return m;
}

void set_flops(benchmark::State& state, Eigen::Index n) {
  const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  state.counters["GFLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}

void emulated_fp16(benchmark::State& state) {
  const auto n = static_cast<Eigen::Index>(state.range(0));
  const matrix a = random_square(n, 1), b = random_square(n, 2);
  matrix d;
  for (auto _ : state) {
    (void)safeamp::sim::gemm({safeamp::fp16, safeamp::fp32, safeamp::fp16}, a, b, d);
    benchmark::DoNotOptimize(d.data());
  }
  set_flops(state, n);
}

void emulated_bf16(benchmark::State& state) {
  const auto n = static_cast<Eigen::Index>(state.range(0));
  const matrix a = random_square(n, 1), b = random_square(n, 2);
  matrix d;
  for (auto _ : state) {
    (void)safeamp::sim::gemm({safeamp::bf16, safeamp::fp32, safeamp::bf16}, a, b, d);
    benchmark::DoNotOptimize(d.data());
  }
  set_flops(state, n);
}

void plain_library(benchmark::State& state) {
  const auto n = static_cast<Eigen::Index>(state.range(0));
  const matrix a = random_square(n, 1), b = random_square(n, 2);
  matrix d;
  for (auto _ : state) {
    safeamp::sim::plain_gemm(a, b, d);
    benchmark::DoNotOptimize(d.data());
  }
  set_flops(state, n);
}

}  // namespace

BENCHMARK(plain_library)->Arg(512)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond);
BENCHMARK(emulated_fp16)->Arg(512)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond);
BENCHMARK(emulated_bf16)->Arg(512)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
