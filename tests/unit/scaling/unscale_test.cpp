// The fused unscale-and-check pass (safeamp/scaling/unscale.hpp) on every kernel path this machine runs (portable,
// AVX2, AVX-512: a copy of the loop per instruction set) against an independent product: float(double(g) *
// double(inv_scale)) is the correctly rounded float product (the double product of two floats is exact), and
// found_inf must say whether any result is inf or NaN. Lengths 0..70 and longer odd ones, misaligned starts, one
// non-finite result at every position (vector lanes, the tail), overflow caused by a scale below 1, subnormal
// results. The public unscale_and_check runs the active path (SAFEAMP_CPU_PATH for the per-path instances).
#include "safeamp/scaling/unscale.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "safeamp/format/cpu_path.hpp"

namespace {

std::uint32_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

/// The paths to check; prints those this CPU (or build) cannot run, so a log says what went unchecked.
std::vector<safeamp::cpu_path> paths_here() {
  std::vector<safeamp::cpu_path> run;
  std::string missing;
  for (const safeamp::cpu_path p : safeamp::all_cpu_paths) {
    if (safeamp::cpu_path_supported(p)) {
      run.push_back(p);
    } else {
      missing += (missing.empty() ? "" : ", ") + std::string(safeamp::cpu_path_name(p));
    }
  }
  if (!missing.empty())
    std::printf("unscale_and_check paths not run (this CPU or build lacks them): %s\n", missing.c_str());
  return run;
}

/// Unscales a copy of g on path p and compares every element and the flag with the independent product.
/// Returns the number of disagreements (and records the first few).
int check_one(safeamp::cpu_path p, const std::vector<float>& g, std::size_t start, std::size_t n, float inv) {
  std::vector<float> data(g);
  const std::span<float> span(data.data() + start, n);
  const bool found = safeamp::detail::unscale_and_check_on(p, span, inv);
  bool want_found = false;
  int bad = 0;
  for (std::size_t i = 0; i < data.size(); ++i) {
    const bool inside = i >= start && i < start + n;
    const float want = inside ? static_cast<float>(static_cast<double>(g[i]) * static_cast<double>(inv)) : g[i];
    if (inside) want_found = want_found || !std::isfinite(want);
    const bool same = std::isnan(want) ? std::isnan(data[i]) : bits(want) == bits(data[i]);
    if (!same && bad++ < 4) {
      FAIL_CHECK(safeamp::cpu_path_name(p)
                 << " n " << n << " start " << start << " element " << i << " input " << std::hex << bits(g[i])
                 << " want " << bits(want) << " got " << bits(data[i]));
    }
  }
  if (found != want_found) {
    ++bad;
    FAIL_CHECK(safeamp::cpu_path_name(p) << " n " << n << " start " << start << ": found_inf " << found << ", want "
                                         << want_found);
  }
  return bad;
}

}  // namespace

TEST_CASE("unscale_and_check on every path: correctly rounded products and the right found_inf flag") {
  const std::vector<safeamp::cpu_path> paths = paths_here();
  std::mt19937 rng(31);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  // inv_scale: exact power of two, an inexact one (every product rounds), 4 (a scale below 1: products overflow),
  // 2^-30 (products of small gradients are subnormal).
  const float invs[] = {std::ldexp(1.0f, -16), 1.0f / 3.0f, 4.0f, std::ldexp(1.0f, -30)};
  int failures = 0;
  for (const safeamp::cpu_path p : paths) {
    for (const float inv : invs) {
      for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{15},
                            std::size_t{16}, std::size_t{17}, std::size_t{31}, std::size_t{33}, std::size_t{63},
                            std::size_t{64}, std::size_t{70}, std::size_t{1000}, std::size_t{4099}}) {
        for (std::size_t start : {std::size_t{0}, std::size_t{1}, std::size_t{3}}) {
          std::vector<float> g(start + n + 5);
          for (float& x : g) x = normal(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 200) - 100);
          failures += check_one(p, g, start, n, inv);  // mostly finite (and for inv = 4 some overflow)
          if (n == 0 || n > 70) continue;
          // One non-finite input or overflowing product at every position in turn, the rest small and finite.
          for (std::size_t at = 0; at < n; ++at) {
            for (const float special : {inf, -inf, nan, std::numeric_limits<float>::max()}) {
              std::vector<float> h(g.size());
              for (float& x : h) x = normal(rng);
              h[start + at] = special;
              failures += check_one(p, h, start, n, inv);
            }
          }
        }
      }
    }
  }
  CHECK(failures == 0);
}

TEST_CASE("the public unscale_and_check runs the active path and equals the independent product") {
  std::vector<float> g(1003), want(1003);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1000.0f);
  for (float& x : g) x = normal(rng);
  const float inv = 1.0f / 65536.0f / 3.0f;
  for (std::size_t i = 0; i < g.size(); ++i) {
    want[i] = static_cast<float>(static_cast<double>(g[i]) * static_cast<double>(inv));
  }
  std::vector<float> h(g);
  CHECK_FALSE(safeamp::unscale_and_check(h, inv));
  for (std::size_t i = 0; i < g.size(); ++i) CHECK(bits(h[i]) == bits(want[i]));
  h = g;
  h[1001] = std::numeric_limits<float>::infinity();
  CHECK(safeamp::unscale_and_check(h, inv));
  std::printf("active kernel path: %s\n", std::string(safeamp::cpu_path_name(safeamp::active_cpu_path())).c_str());
}
