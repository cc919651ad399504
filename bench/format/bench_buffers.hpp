// What the format benchmarks share: the output buffer (touched before timing), the items and bytes counted per
// iteration (n floats read, n written) and the memcpy of the same bytes that each ratio is taken against.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <vector>

namespace safeamp_bench {

/// A buffer of n floats, one per size for the whole run, written once before any timing.
inline std::vector<float>& output(std::int64_t n) {
  static std::map<std::int64_t, std::vector<float>> cache;
  auto& v = cache[n];
  if (v.empty()) v.assign(static_cast<std::size_t>(n), 1.0f);
  return v;
}

/// Items (elements) and bytes (read plus written) of the iterations run.
inline void finish(benchmark::State& state, std::int64_t n) {
  state.SetItemsProcessed(state.iterations() * n);
  state.SetBytesProcessed(state.iterations() * n * 2 * static_cast<std::int64_t>(sizeof(float)));
}

/// The baseline: memcpy of in into output(in.size()).
inline void memcpy_baseline(benchmark::State& state, const std::vector<float>& in) {
  const auto n = static_cast<std::int64_t>(in.size());
  auto& out = output(n);
  for (auto _ : state) {
    std::memcpy(out.data(), in.data(), in.size() * sizeof(float));
    benchmark::ClobberMemory();
  }
  finish(state, n);
}

}  // namespace safeamp_bench
