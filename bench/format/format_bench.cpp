// Rounding throughput (elements/s) of safeamp::round_span for fp16, bf16, E4M3 and E5M2 in every mode, on
// 64 Mi elements (memory-bound) and 64 Ki elements (in cache), for normal and wide-range (2^-30..2^20) data,
// beside the baselines of the same run: memcpy of the same bytes, the F16C round trip, Eigen half/bfloat16.
// The kernels run on the path cpu_path.hpp picks at run time (SAFEAMP_CPU_PATH=portable|avx2|avx512 forces one;
// each result's label names the path), so a build without -march measures what its users get.
// bench/format/ratios.py turns the JSON output into the ratio table of docs/performance.md (number formats section).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#if defined(SAFEAMP_X86_KERNELS)
#include <immintrin.h>
#endif
#if defined(SAFEAMP_BENCH_HAVE_EIGEN)
#include <Eigen/Core>
#endif

#include "bench_buffers.hpp"
#include "safeamp/format.hpp"

namespace {

constexpr std::int64_t small_n = std::int64_t{1} << 16;  // 64 Ki: 256 KiB in + 256 KiB out, in L2
constexpr std::int64_t large_n = std::int64_t{1} << 26;  // 64 Mi: 256 MiB in + 256 MiB out, from DRAM

enum data_kind : std::int64_t { normal_data = 0, wide_data = 1 };

// N(0,1), or |x| = 2^U(-30,20) with a random sign (fp16/fp8 subnormals, underflow and overflow included).
const std::vector<float>& input(std::int64_t n, std::int64_t kind) {
  static std::map<std::pair<std::int64_t, std::int64_t>, std::vector<float>> cache;
  auto& v = cache[{n, kind}];
  if (v.empty()) {
    std::mt19937_64 rng(0x5AFEA3Bu + static_cast<std::uint64_t>(kind));
    v.resize(static_cast<std::size_t>(n));
    if (kind == normal_data) {
      std::normal_distribution<float> d(0.0f, 1.0f);
      for (float& x : v) x = d(rng);
    } else {
      std::uniform_real_distribution<float> e(-30.0f, 20.0f);
      std::bernoulli_distribution s(0.5);
      for (float& x : v) x = (s(rng) ? -1.0f : 1.0f) * std::exp2(e(rng));
    }
  }
  return v;
}

using safeamp_bench::finish;
using safeamp_bench::output;

void bm_memcpy(benchmark::State& state) {
  safeamp_bench::memcpy_baseline(state, input(state.range(0), state.range(1)));
}

#if defined(SAFEAMP_X86_KERNELS)
// The CPU's own fp16 round trip (F16C: 8 lanes; AVX-512: 16 lanes), compiled with target attributes so that the
// baseline needs no -march either; it runs where the CPU has the instructions (skipped otherwise).
__attribute__((target("avx2,f16c"))) void f16c_round_trip_ymm(const float* src, float* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
}
__attribute__((target("avx512f,avx512bw,avx512vl,f16c"))) void f16c_round_trip_zmm(const float* src, float* dst,
                                                                                   std::int64_t n) {
  constexpr __mmask16 full_mask = 0xFFFF;
  for (std::int64_t i = 0; i < n; i += 16) {
    // The maskz forms with a full mask avoid g++ 12's false -Wmaybe-uninitialized in the unmasked intrinsics.
    const __m256i h = _mm512_maskz_cvtps_ph(full_mask, _mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm512_storeu_ps(dst + i, _mm512_maskz_cvtph_ps(full_mask, h));
  }
}

void bm_f16c_round_trip(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  const auto& in = input(n, state.range(1));
  auto& out = output(n);
  const safeamp::cpu_path path = safeamp::active_cpu_path();
  if (path == safeamp::cpu_path::portable) {
    state.SkipWithError("the F16C round trip needs the avx2 or avx512 path (SAFEAMP_CPU_PATH)");
    return;
  }
  for (auto _ : state) {
    if (path == safeamp::cpu_path::avx512) {
      f16c_round_trip_zmm(in.data(), out.data(), n);
    } else {
      f16c_round_trip_ymm(in.data(), out.data(), n);
    }
    benchmark::ClobberMemory();
  }
  state.SetLabel(std::string(safeamp::cpu_path_name(path)));
  finish(state, n);
}
#endif

#if defined(SAFEAMP_BENCH_HAVE_EIGEN)
template <class Half>
void bm_eigen_cast(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  const auto& in = input(n, state.range(1));
  auto& out = output(n);
  for (auto _ : state) {
    for (std::int64_t i = 0; i < n; ++i) {
      out[static_cast<std::size_t>(i)] = static_cast<float>(Half(in[static_cast<std::size_t>(i)]));
    }
    benchmark::ClobberMemory();
  }
  finish(state, n);
}
#endif

// The Philox4x32-10 words stochastic rounding consumes (one 32-bit word per element), alone: the ceiling of
// stochastic rounding's throughput. Items are words; the generator of the active kernel path (cpu_path.hpp).
void bm_philox_words(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  std::vector<std::uint32_t> words(static_cast<std::size_t>(n));
  std::uint64_t block = 0;
  const safeamp::cpu_path path = safeamp::active_cpu_path();
  state.SetLabel(std::string(safeamp::cpu_path_name(path)));
  for (auto _ : state) {
    safeamp::detail::philox_fill_on(path, words.data(), block, static_cast<std::size_t>(n) / 4, 42, 7);
    benchmark::DoNotOptimize(words.data());
    benchmark::ClobberMemory();
    block += static_cast<std::uint64_t>(n) / 4;
  }
  state.SetItemsProcessed(state.iterations() * n);
}

template <int FormatIndex, safeamp::rounding Mode>
void bm_round_span(benchmark::State& state) {
  constexpr safeamp::format_spec formats[] = {safeamp::fp16, safeamp::bf16, safeamp::fp8_e4m3, safeamp::fp8_e5m2};
  const std::int64_t n = state.range(0);
  const auto& in = input(n, state.range(1));
  auto& out = output(n);
  const safeamp::round_options opt{.mode = Mode};
  std::uint64_t step = 0;
  for (auto _ : state) {
    const auto stats =
        safeamp::round_span(formats[FormatIndex], in, out, opt, {.seed = 42, .stream = 7, .offset = step});
    benchmark::DoNotOptimize(stats);
    benchmark::ClobberMemory();
    step += static_cast<std::uint64_t>(n);
  }
  state.SetLabel(std::string(safeamp::cpu_path_name(safeamp::active_cpu_path())));
  finish(state, n);
}

void sizes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"n", "wide"});
  for (std::int64_t n : {small_n, large_n}) {
    for (std::int64_t kind : {normal_data, wide_data}) b->Args({n, kind});
  }
}

using safeamp::rounding;
BENCHMARK(bm_memcpy)->Apply(sizes);
BENCHMARK(bm_philox_words)->ArgNames({"n", "wide"})->Args({small_n, normal_data});
#if defined(SAFEAMP_X86_KERNELS)
BENCHMARK(bm_f16c_round_trip)->Apply(sizes);
#endif
#if defined(SAFEAMP_BENCH_HAVE_EIGEN)
BENCHMARK(bm_eigen_cast<Eigen::half>)->Name("bm_eigen_half")->Apply(sizes);
BENCHMARK(bm_eigen_cast<Eigen::bfloat16>)->Name("bm_eigen_bfloat16")->Apply(sizes);
#endif

#define SAFEAMP_BENCH_MODES(index, fname)                                                                          \
  BENCHMARK(bm_round_span<index, rounding::nearest_even>)->Name("round_" fname "_nearest_even")->Apply(sizes);     \
  BENCHMARK(bm_round_span<index, rounding::toward_zero>)->Name("round_" fname "_toward_zero")->Apply(sizes);       \
  BENCHMARK(bm_round_span<index, rounding::toward_pos_inf>)->Name("round_" fname "_toward_pos_inf")->Apply(sizes); \
  BENCHMARK(bm_round_span<index, rounding::toward_neg_inf>)->Name("round_" fname "_toward_neg_inf")->Apply(sizes); \
  BENCHMARK(bm_round_span<index, rounding::stochastic>)->Name("round_" fname "_stochastic")->Apply(sizes);

SAFEAMP_BENCH_MODES(0, "fp16")
SAFEAMP_BENCH_MODES(1, "bf16")
SAFEAMP_BENCH_MODES(2, "e4m3")
SAFEAMP_BENCH_MODES(3, "e5m2")

}  // namespace

BENCHMARK_MAIN();
