// Host-side checks of the GEMM benchmark's operands (cuda/include/safeamp/cuda/gemm_inputs.hpp): seeded standard
// normal values (their moments and tail fractions within bounds derived from the sample size), bits that depend on
// (seed, stream, index) only, and encodings that are the formats' own (bf16 and tf32 against bit-level oracles, fp16
// against the compiler's _Float16, fp8 scaled into range). No GPU needed.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <set>
#include <span>
#include <vector>

#include "safeamp/cuda/gemm_inputs.hpp"

using namespace safeamp;
using namespace safeamp::cuda;

namespace {

constexpr std::size_t sample = std::size_t{1} << 20;

std::vector<float> normals(std::uint64_t seed, std::uint32_t stream, std::size_t n, unsigned threads = 0) {
  std::vector<float> v(n);
  fill_standard_normal(v, philox_key{.seed = seed, .stream = stream}, threads);
  return v;
}

std::uint32_t code_at(const gemm_operand& op, std::size_t i, std::size_t width) {
  std::uint32_t code = 0;
  for (std::size_t b = 0; b < width; ++b) code |= std::to_integer<std::uint32_t>(op.bytes[width * i + b]) << (8 * b);
  return code;
}

// bf16 by hand: the top 16 bits of the float, rounded to nearest even on the 16 bits cut off (finite inputs).
std::uint32_t bf16_oracle(float x) {
  const std::uint32_t bits = bit_cast<std::uint32_t>(x);
  return (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
}

}  // namespace

TEST_CASE("gemm inputs: standard normal values", "[cuda][host][gemm_inputs]") {
  const std::vector<float> v = normals(2024, 1, sample);
  double sum = 0.0, sum_sq = 0.0;
  std::size_t within_one = 0, within_two = 0;
  std::set<std::uint32_t> distinct;
  for (const float x : v) {
    REQUIRE(std::isfinite(x));
    sum += x;
    sum_sq += static_cast<double>(x) * x;
    within_one += std::fabs(x) < 1.0f ? 1 : 0;
    within_two += std::fabs(x) < 2.0f ? 1 : 0;
    distinct.insert(bit_cast<std::uint32_t>(x));
  }
  const double n = sample;
  const double mean = sum / n, variance = sum_sq / n - mean * mean;
  // Six standard errors of each estimate for N(0, 1): the mean's is 1/sqrt(n), the variance's sqrt(2/n), a
  // fraction p's sqrt(p (1 - p) / n); P(|x| < 1) = 0.682689, P(|x| < 2) = 0.954500 (erf(1/sqrt 2), erf(sqrt 2)).
  const double six = 6.0;
  CHECK(std::fabs(mean) < six / std::sqrt(n));
  CHECK(std::fabs(variance - 1.0) < six * std::sqrt(2.0 / n));
  const auto fraction_ok = [&](std::size_t count, double p) {
    return std::fabs(static_cast<double>(count) / n - p) < six * std::sqrt(p * (1.0 - p) / n);
  };
  CHECK(fraction_ok(within_one, 0.682689));
  CHECK(fraction_ok(within_two, 0.954500));
  CHECK(distinct.size() > sample / 2);  // data, not a pattern: the benchmark filled one constant byte before
}

TEST_CASE("gemm inputs: bits depend on seed, stream and index only", "[cuda][host][gemm_inputs]") {
  const std::size_t n = 300'000;  // several threads' worth
  const std::vector<float> one_thread = normals(5, 2, n, 1);
  const std::vector<float> seven_threads = normals(5, 2, n, 7);
  CHECK(std::memcmp(one_thread.data(), seven_threads.data(), n * sizeof(float)) == 0);
  // a span starting at offset k holds elements k, k + 1, ...
  std::vector<float> tail(1000);
  fill_standard_normal(tail, philox_key{.seed = 5, .stream = 2, .offset = 12345});
  for (std::size_t i = 0; i < tail.size(); ++i) {
    CHECK(bit_cast<std::uint32_t>(tail[i]) == bit_cast<std::uint32_t>(one_thread[12345 + i]));
  }
  // the bulk fill and the one-element definition agree (even and odd indices, a block shared by two elements)
  for (const std::size_t i : {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{12345}, n - 1}) {
    CHECK(bit_cast<std::uint32_t>(one_thread[i]) == bit_cast<std::uint32_t>(standard_normal(5, 2, i)));
  }
  // other seeds and streams give other values
  std::size_t same_seed = 0, same_stream = 0;
  const std::vector<float> other_seed = normals(6, 2, 1000), other_stream = normals(5, 3, 1000);
  for (std::size_t i = 0; i < 1000; ++i) {
    same_seed += other_seed[i] == one_thread[i] ? 1 : 0;
    same_stream += other_stream[i] == one_thread[i] ? 1 : 0;
  }
  CHECK(same_seed < 5);
  CHECK(same_stream < 5);
}

TEST_CASE("gemm inputs: encoded in each input format", "[cuda][host][gemm_inputs]") {
  const std::vector<float> v = normals(77, 4, std::size_t{1} << 16);

  const gemm_operand f32 = encode_gemm_operand(fp32, v);
  REQUIRE(f32.bytes.size() == 4 * v.size());
  const gemm_operand t32 = encode_gemm_operand(tf32, v);
  const gemm_operand b16 = encode_gemm_operand(bf16, v);
  REQUIRE(b16.bytes.size() == 2 * v.size());
  const gemm_operand h16 = encode_gemm_operand(fp16, v);
  std::size_t tf32_changed = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    INFO("element " << i << ", value " << v[i]);
    CHECK(code_at(f32, i, 4) == bit_cast<std::uint32_t>(v[i]));
    // tf32 keeps 10 of fp32's 23 mantissa bits: nearest even on the 13 cut off, by hand
    const std::uint32_t bits = bit_cast<std::uint32_t>(v[i]);
    const std::uint32_t tf32_bits = (bits + 0xFFFu + ((bits >> 13) & 1u)) & ~0x1FFFu;
    CHECK(code_at(t32, i, 4) == tf32_bits);
    tf32_changed += tf32_bits != bits ? 1 : 0;
    CHECK(code_at(b16, i, 2) == bf16_oracle(v[i]));
#ifdef __FLT16_MAX__  // g++ 12 and clang on x86-64: _Float16 converts with IEEE nearest even
    const auto h = static_cast<_Float16>(v[i]);
    CHECK(code_at(h16, i, 2) == bit_cast<std::uint16_t>(h));
#endif
  }
  CHECK(tf32_changed > v.size() / 2);  // the tf32 operand is rounded, not the fp32 one again
  CHECK(f32.scale_inverse == 1.0f);
  CHECK(h16.scale_inverse == 1.0f);
}

TEST_CASE("gemm inputs: fp8 operands are scaled into range", "[cuda][host][gemm_inputs]") {
  const std::vector<float> v = normals(78, 5, std::size_t{1} << 16);
  float amax = 0.0f;
  for (const float x : v) amax = std::max(amax, std::fabs(x));
  // the largest finite values, from the encodings: E4M3 0 1111 110 = 1.75 x 2^8 = 448, E5M2 0 11110 11 = 1.75 x 2^15
  const struct {
    format_spec f;
    float largest;
    double unit_roundoff;  // 2^-(mantissa bits + 1)
  } cases[] = {{fp8_e4m3, 448.0f, 0x1p-4}, {fp8_e5m2, 57344.0f, 0x1p-3}};
  for (const auto& c : cases) {
    INFO(format_name(c.f));
    const gemm_operand op = encode_gemm_operand(c.f, v);
    REQUIRE(op.bytes.size() == v.size());
    CHECK(op.scale_inverse == static_cast<float>(static_cast<double>(amax) / c.largest));
    float largest_seen = 0.0f;
    std::set<std::uint32_t> distinct;
    for (std::size_t i = 0; i < v.size(); ++i) {
      const std::uint32_t code = code_at(op, i, 1);
      const float decoded = decode(c.f, code);
      REQUIRE(std::isfinite(decoded));
      largest_seen = std::max(largest_seen, std::fabs(decoded));
      distinct.insert(code);
      // decoded x scale_inverse is the value within the format's relative rounding error u, or, where the scaled
      // value falls below the normal range, half the smallest subnormal scaled back; plus 2^-23 relative for
      // scale_inverse's own rounding to float (2^-24) and the products in double
      const double back = static_cast<double>(decoded) * op.scale_inverse;
      const double magnitude = std::fabs(static_cast<double>(v[i]));
      const double tolerance =
          std::max(magnitude * c.unit_roundoff, 0.5 * min_subnormal(c.f) * op.scale_inverse) + magnitude * 0x1p-23;
      CHECK(std::fabs(back - v[i]) <= tolerance);
    }
    CHECK(largest_seen == c.largest);  // amax lands on the largest finite value
    CHECK(distinct.size() > 100);      // the format's codes are used, not a few of them
  }
}

TEST_CASE("gemm inputs: refused formats and values name what is accepted", "[cuda][host][gemm_inputs]") {
  const std::vector<float> v{1.0f, 2.0f};
  CHECK_THROWS_WITH(encode_gemm_operand(fp8_e4m3fnuz, v),
                    Catch::Contains("gemm operand format") && Catch::Contains("fp8_e5m2"));
  const std::vector<float> with_nan{1.0f, std::nanf("")};
  CHECK_THROWS_WITH(encode_gemm_operand(fp16, with_nan),
                    Catch::Contains("gemm operand value 1") && Catch::Contains("finite values"));
}
