// Where stochastic rounding's time goes, on 64 Ki elements (in cache) for each vector path: the path's Philox
// generator alone with its words kept in registers (xor-folded, no stores), the rounding alone with the words read
// from a buffer filled beforehand, and round_span's kernel itself (both fused). When fused ~ generator + rounding, the
// two compete for the same vector units, and the ratio to bm_philox_words is bounded by G / (G + R).
// The fused case calls the stochastic kernel of its one format (detail::round_span_kernel, what round_span reaches
// after checking its arguments and switching on format and mode, a few branches per 64 Ki call): round_span itself
// would instantiate every format, mode and path here, about 80 s of g++ -O3 for this one benchmark program.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "safeamp/format.hpp"

#if defined(SAFEAMP_X86_KERNELS)
namespace {

constexpr std::size_t n = std::size_t{1} << 16;
constexpr safeamp::format_spec formats[] = {safeamp::fp16, safeamp::bf16, safeamp::fp8_e4m3, safeamp::fp8_e5m2};
constexpr const char* format_names[] = {"fp16", "bf16", "e4m3", "e5m2"};

// N(0,1) (wide 0) or |x| = 2^U(-30,20) with a random sign (wide 1): the distributions of bench_format.
std::vector<float> data(std::int64_t kind) {
  std::vector<float> v(n);
  std::mt19937_64 rng(0x5AFEA3Bu + static_cast<std::uint64_t>(kind));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> exponent(-30.0f, 20.0f);
  for (float& x : v) x = kind == 0 ? normal(rng) : ((rng() & 1u) != 0u ? -1.0f : 1.0f) * std::exp2(exponent(rng));
  return v;
}

}  // namespace

SAFEAMP_DETAIL_AVX512_BEGIN
namespace split512 {
using namespace safeamp::detail::avx512;
__attribute__((noinline)) void generate(std::uint64_t first_block, std::uint32_t* sink) {
  const philox32 gen(42, 7);
  __m512i fold = _mm512_setzero_si512();
  for (std::size_t s = 0; s < n / (4 * philox32::blocks); ++s) {
    __m512i w[8];
    gen(first_block + philox32::blocks * s, w);
    for (const __m512i& x : w) fold = _mm512_xor_si512(fold, x);
  }
  _mm512_storeu_si512(sink, fold);
}
template <safeamp::format_spec F>
__attribute__((noinline)) void round_words(const float* in, float* out, const std::uint32_t* words,
                                           safeamp::detail::local_counts& c) {
  const vector_constants<F> v;
  counters16 acc;
  for (std::size_t i = 0; i < n; i += 16) {
    const __m512i r = round16<safeamp::rounding::stochastic, F, false, false>(v, _mm512_loadu_si512(in + i),
                                                                              _mm512_loadu_si512(words + i), acc);
    _mm512_storeu_si512(out + i, r);
  }
  acc.add_to(c);
}
}  // namespace split512
SAFEAMP_DETAIL_TARGET_END

SAFEAMP_DETAIL_AVX2_BEGIN
namespace split2 {
using namespace safeamp::detail::avx2;
__attribute__((noinline)) void generate(std::uint64_t first_block, std::uint32_t* sink) {
  const philox16 gen(42, 7);
  __m256i fold = _mm256_setzero_si256();
  for (std::size_t s = 0; s < n / (4 * philox16::blocks); ++s) {
    __m256i w[8];
    gen(first_block + philox16::blocks * s, w);
    for (const __m256i& x : w) fold = _mm256_xor_si256(fold, x);
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(sink), fold);
}
template <safeamp::format_spec F>
__attribute__((noinline)) void round_words(const float* in, float* out, const std::uint32_t* words,
                                           safeamp::detail::local_counts& c) {
  const constants8<F> v;
  counters8 acc;
  for (std::size_t i = 0; i < n; i += 8) {
    const vec u = _mm256_loadu_si256(reinterpret_cast<const vec*>(in + i));
    const vec w = _mm256_loadu_si256(reinterpret_cast<const vec*>(words + i));
    _mm256_storeu_si256(reinterpret_cast<vec*>(out + i),
                        round8<safeamp::rounding::stochastic, F, false, false>(v, u, w, acc));
  }
  acc.add_to(c);
}
}  // namespace split2
SAFEAMP_DETAIL_TARGET_END

namespace {

bool runnable(benchmark::State& state) {
  const safeamp::cpu_path path = safeamp::active_cpu_path();
  state.SetLabel(std::string(safeamp::cpu_path_name(path)));
  if (path != safeamp::cpu_path::portable) return true;
  state.SkipWithError("needs the avx2 or avx512 path (SAFEAMP_CPU_PATH)");
  return false;
}

void bm_split_generator(benchmark::State& state) {
  if (!runnable(state)) return;
  std::uint64_t block = 0;
  std::uint32_t sink[16];
  for (auto _ : state) {
    if (safeamp::active_cpu_path() == safeamp::cpu_path::avx512) {
      split512::generate(block, sink);
    } else {
      split2::generate(block, sink);
    }
    benchmark::DoNotOptimize(sink);
    benchmark::ClobberMemory();
    block += n / 4;
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(n));
}

template <int Format>
void bm_split_round(benchmark::State& state) {
  if (!runnable(state)) return;
  const std::vector<float> in = data(state.range(0));
  std::vector<float> out(n);
  std::vector<std::uint32_t> words(n);
  safeamp::detail::philox_fill(words.data(), 0, n / 4, 42, 7);
  safeamp::detail::local_counts c;
  for (auto _ : state) {
    if (safeamp::active_cpu_path() == safeamp::cpu_path::avx512) {
      split512::round_words<formats[Format]>(in.data(), out.data(), words.data(), c);
    } else {
      split2::round_words<formats[Format]>(in.data(), out.data(), words.data(), c);
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(n));
}

template <int Format>
void bm_split_fused(benchmark::State& state) {
  if (!runnable(state)) return;
  const std::vector<float> in = data(state.range(0));
  std::vector<float> out(n);
  std::uint64_t offset = 0;
  const safeamp::cpu_path path = safeamp::active_cpu_path();
  for (auto _ : state) {
    safeamp::cast_stats stats;
    stats.elements = n;
    safeamp::detail::round_span_kernel<safeamp::rounding::stochastic, true, formats[Format]>(
        path, formats[Format], in.data(), out.data(), n, {.mode = safeamp::rounding::stochastic},
        {.seed = 42, .stream = 7, .offset = offset}, stats);
    benchmark::DoNotOptimize(stats);
    benchmark::ClobberMemory();
    offset += n;
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(n));
}

template <int Format>
void register_format() {
  const std::string f = format_names[Format];
  benchmark::RegisterBenchmark(("split_round_" + f).c_str(), bm_split_round<Format>)->ArgName("wide")->Arg(0)->Arg(1);
  benchmark::RegisterBenchmark(("split_fused_" + f).c_str(), bm_split_fused<Format>)->ArgName("wide")->Arg(0)->Arg(1);
}

const bool registered = [] {
  benchmark::RegisterBenchmark("split_generator", bm_split_generator);
  register_format<0>();
  register_format<1>();
  register_format<2>();
  register_format<3>();
  return true;
}();

}  // namespace
#endif  // SAFEAMP_X86_KERNELS

BENCHMARK_MAIN();
