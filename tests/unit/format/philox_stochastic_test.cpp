// Philox4x32-10 against Random123's own implementation; stochastic rounding: deterministic across runs, thread
// counts and chunkings; unbiased within a stated binomial bound; right probabilities near overflow.
#include <Random123/philox.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "safeamp/format.hpp"

namespace {
float p2(int e) { return std::ldexp(1.0f, e); }
}  // namespace

TEST_CASE("philox4x32_10 equals Random123's philox4x32 (10 rounds) on many counters and keys") {
  r123::Philox4x32 reference;
  std::mt19937_64 rng(123);
  int failures = 0;
  for (int i = 0; i < 200000; ++i) {
    const auto u = [&] { return static_cast<std::uint32_t>(rng()); };
    r123::Philox4x32::ctr_type c = {{u(), u(), u(), u()}};
    r123::Philox4x32::key_type k = {{u(), u()}};
    if (i < 4) c = {{static_cast<std::uint32_t>(i), 0, 0, 0}}, k = {{0, 0}};  // the trivial corner too
    const auto want = reference(c, k);
    const safeamp::philox4x32_block got = safeamp::philox4x32_10(c[0], c[1], c[2], c[3], k[0], k[1]);
    bool same = true;
    for (int j = 0; j < 4; ++j) same = same && got.v[j] == want[static_cast<std::size_t>(j)];
    if (!same && failures++ < 5) {
      FAIL_CHECK("counter " << std::hex << c[0] << ' ' << c[1] << ' ' << c[2] << ' ' << c[3] << " key " << k[0] << ' '
                            << k[1] << " want " << want[0] << ' ' << want[1] << ' ' << want[2] << ' ' << want[3]
                            << " got " << got.v[0] << ' ' << got.v[1] << ' ' << got.v[2] << ' ' << got.v[3]);
    }
  }
  CHECK(failures == 0);
  // stochastic_bits(seed, stream, index) is word index % 4 of the block {index / 4 (64 bit), stream, 0}.
  for (std::uint64_t index : {0ull, 1ull, 7ull, 0xFFFFFFFFull * 4 + 3, 0x123456789ABCull}) {
    const std::uint64_t seed = 0xDEADBEEFCAFEF00Dull, n = index / 4;
    const auto want = reference({{static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(n >> 32), 9u, 0u}},
                                {{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)}});
    CHECK(safeamp::stochastic_bits(seed, 9u, index) == want[index % 4]);
  }
}

TEST_CASE("stochastic rounding is deterministic across runs, chunkings and thread counts") {
  const std::size_t n = 100003;
  std::vector<float> in(n);
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 100.0f);
  for (float& x : in) x = d(rng);
  const safeamp::round_options opt{.mode = safeamp::rounding::stochastic};
  const safeamp::philox_key key{.seed = 42, .stream = 7, .offset = 1000};
  for (safeamp::format_spec f : {safeamp::fp16, safeamp::bf16, safeamp::fp8_e4m3, safeamp::fp8_e5m2,
                                 safeamp::format_spec{4, 5, safeamp::special_values::ieee}}) {
    std::vector<float> a(n), b(n), chunked(n), threaded(n);
    const auto sa = safeamp::round_span(f, in, a, opt, key);
    const auto sb = safeamp::round_span(f, in, b, opt, key);
    CHECK(sa == sb);
    CHECK(std::memcmp(a.data(), b.data(), n * sizeof(float)) == 0);
    // Uneven chunks with matching offsets.
    safeamp::cast_stats sc;
    for (std::size_t start = 0, len = 1; start < n; start += len, len = len * 3 + 1) {
      const std::size_t m = std::min(len, n - start);
      safeamp::philox_key k = key;
      k.offset += start;
      sc += safeamp::round_span(f, std::span<const float>(in).subspan(start, m),
                                std::span<float>(chunked).subspan(start, m), opt, k);
    }
    CHECK(sc == sa);
    CHECK(std::memcmp(a.data(), chunked.data(), n * sizeof(float)) == 0);
    // 1..4 threads, each an interleaved set of 997-element pieces.
    for (unsigned threads = 1; threads <= 4; ++threads) {
      std::vector<std::thread> pool;
      for (unsigned t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
          for (std::size_t start = 997 * t; start < n; start += 997 * threads) {
            const std::size_t m = std::min<std::size_t>(997, n - start);
            safeamp::philox_key k = key;
            k.offset += start;
            (void)safeamp::round_span(f, std::span<const float>(in).subspan(start, m),
                                      std::span<float>(threaded).subspan(start, m), opt, k);
          }
        });
      }
      for (auto& th : pool) th.join();
      CHECK(std::memcmp(a.data(), threaded.data(), n * sizeof(float)) == 0);
    }
  }
}

namespace {
// Rounds x N times with independent indices; returns how many went to the upper neighbour `hi`.
// Bound: the count is Binomial(N, p) with p = floor(2^32 frac) / 2^32; a correct rounder lies within
// 6 standard deviations sqrt(N p (1-p)) of N p except with probability < 2e-9 (normal approximation);
// the bound is deterministic for a fixed seed, so the test cannot flake.
void check_probability(safeamp::format_spec f, float x, float lo, float hi, double p, safeamp::overflow ov,
                       std::uint32_t stream) {
  const std::size_t N = std::size_t{1} << 20;
  std::vector<float> in(N, x), out(N);
  (void)safeamp::round_span(f, in, out, {.mode = safeamp::rounding::stochastic, .on_overflow = ov},
                            {.seed = 2024, .stream = stream, .offset = 0});
  std::size_t ups = 0, others = 0;
  for (float y : out) {
    const bool is_hi = (std::isnan(hi) && std::isnan(y)) || y == hi;
    ups += is_hi ? 1 : 0;
    others += (!is_hi && y != lo) ? 1 : 0;
  }
  const double mean = static_cast<double>(N) * p, sigma = std::sqrt(static_cast<double>(N) * p * (1 - p));
  INFO(safeamp::format_name(f) << " x = " << x << ": " << ups << " of " << N << " up, expected " << mean << " +- 6*"
                               << sigma);
  CHECK(others == 0);  // always one of the two neighbours
  CHECK(std::fabs(static_cast<double>(ups) - mean) <= 6 * sigma + 1e-9);
}
}  // namespace

TEST_CASE("stochastic rounding is unbiased within 6 sigma, also near overflow and in the subnormal range") {
  using safeamp::overflow;
  const float inf = INFINITY, nan = NAN;
  check_probability(safeamp::fp16, 1 + p2(-12), 1, 1 + p2(-10), 0.25, overflow::to_infinity, 1);
  check_probability(safeamp::fp16, 1 + p2(-11), 1, 1 + p2(-10), 0.5, overflow::to_infinity, 2);
  check_probability(safeamp::fp16, 1 + p2(-23), 1, 1 + p2(-10), std::ldexp(1.0, -13), overflow::to_infinity, 3);
  check_probability(safeamp::fp16, p2(-26), 0, p2(-24), 0.25, overflow::to_infinity, 4);  // subnormal range
  check_probability(safeamp::fp16, 65512, 65504, inf, 0.25, overflow::to_infinity, 5);    // just below threshold
  check_probability(safeamp::fp16, 65520, 65504, inf, 0.5, overflow::to_infinity, 6);
  check_probability(safeamp::fp16, 65528, 65504, inf, 0.75, overflow::to_infinity, 7);
  check_probability(safeamp::fp16, 65528, 65504, 65504, 1.0, overflow::saturate, 8);  // saturate: always max
  check_probability(safeamp::fp8_e5m2, 59392, 57344, inf, 0.25, overflow::to_infinity, 9);
  check_probability(safeamp::fp8_e4m3, 456, 448, nan, 0.25, overflow::to_infinity, 10);  // E4M3: NaN, not 480
  check_probability(safeamp::bf16, 1 + 3 * p2(-10), 1, 1 + p2(-7), 0.375, overflow::to_infinity, 11);
  check_probability(safeamp::bf16, 3 * p2(-136), 0, p2(-133), 0.375, overflow::to_infinity, 12);  // float subnormal

  // Mean of the rounded values: |mean - x| <= 6 ulp sqrt(p (1-p) / N) with p = 0.3 (x = 1 + 0.3 ulp).
  const std::size_t N = std::size_t{1} << 20;
  const float x = 1.0f + 0.3f * p2(-10);
  std::vector<float> in(N, x), out(N);
  (void)safeamp::round_span(safeamp::fp16, in, out, {.mode = safeamp::rounding::stochastic}, {.seed = 9});
  double sum = 0;
  for (float y : out) sum += static_cast<double>(y) - 1.0;
  const double frac = static_cast<double>(x) - 1.0;
  const double p = frac / std::ldexp(1.0, -10);
  CHECK(std::fabs(sum / static_cast<double>(N) - frac) <=
        6 * std::ldexp(1.0, -10) * std::sqrt(p * (1 - p) / static_cast<double>(N)));
}

TEST_CASE("the Philox block fill of every kernel path gives stochastic_bits' words, any length, across a wrap") {
  const std::uint64_t seed = 0x0123456789ABCDEFull;
  const std::uint32_t stream = 77;
  std::string not_run;
  for (const safeamp::cpu_path path : safeamp::all_cpu_paths) {
    if (!safeamp::cpu_path_supported(path)) {
      not_run += std::string(not_run.empty() ? "" : ", ") + std::string(safeamp::cpu_path_name(path));
      continue;
    }
    // Lengths around the generators' batches (16 blocks on avx2, 32 on avx512), first blocks with the low
    // counter word far from and next to 2^32 (the vector generators fall back to the portable loop there).
    for (const std::uint64_t first : {std::uint64_t{0}, std::uint64_t{5}, (std::uint64_t{1} << 32) - 40,
                                      (std::uint64_t{1} << 32) - 3, (std::uint64_t{7} << 32) + 11}) {
      for (const std::size_t blocks :
           {std::size_t{1}, std::size_t{3}, std::size_t{15}, std::size_t{16}, std::size_t{17}, std::size_t{31},
            std::size_t{32}, std::size_t{33}, std::size_t{100}}) {
        std::vector<std::uint32_t> words(4 * blocks + 8, 0xDEADBEEFu);
        safeamp::detail::philox_fill_on(path, words.data(), first, blocks, seed, stream);
        int bad = 0;
        for (std::size_t j = 0; j < 4 * blocks; ++j) {
          const std::uint32_t want = safeamp::stochastic_bits(seed, stream, 4 * first + j);
          if (words[j] != want && bad++ < 3) {
            FAIL_CHECK(safeamp::cpu_path_name(path) << " first block " << first << " blocks " << blocks << " word " << j
                                                    << ": " << std::hex << words[j] << " want " << want);
          }
        }
        for (std::size_t j = 4 * blocks; j < words.size(); ++j) {
          if (words[j] != 0xDEADBEEFu && bad++ < 3) {
            FAIL_CHECK(safeamp::cpu_path_name(path)
                       << " blocks " << blocks << ": word " << j << " written past the end");
          }
        }
        CHECK(bad == 0);
      }
    }
  }
  if (!not_run.empty()) WARN("Philox fill paths not run (this CPU or build lacks them): " << not_run);
}
