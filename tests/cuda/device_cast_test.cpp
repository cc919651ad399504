// GPU casts against the CPU's round_span: bit-identical results and identical counters on inputs built
// from every fp16 code (the code, its neighbours' midpoint, and one float either side of it) and on a
// seeded sample of random float bit patterns, for every rounding mode and overflow behaviour.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <vector>

#include "device_util.hpp"
#include "safeamp/cuda/core_kernels.hpp"
#include "safeamp/format.hpp"

using namespace safeamp;
using namespace safeamp::cuda;
using safeamp::cuda::testing::device_array;

namespace {

std::vector<float> fp16_code_inputs() {
  std::vector<float> in;
  in.reserve(4u << 16);
  for (std::uint32_t c = 0; c < (1u << 16); ++c) {
    const std::uint32_t bits = safeamp::bit_cast<std::uint32_t>(decode(fp16, c));
    // 0x1000 is half an fp16 ulp in float's mantissa (23 - 10 = 13 bits): the midpoint to the next code
    for (std::uint32_t off : {0u, 0x0FFFu, 0x1000u, 0x1001u}) in.push_back(safeamp::bit_cast<float>(bits + off));
  }
  return in;
}

std::vector<float> random_inputs(std::size_t n, std::uint64_t seed) {
  std::vector<float> in(n);
  for (std::size_t i = 0; i < n; ++i) in[i] = safeamp::bit_cast<float>(stochastic_bits(seed, 7, i));
  return in;
}

std::uint32_t bits(float x) { return safeamp::bit_cast<std::uint32_t>(x); }

void compare_all(const std::vector<float>& in) {
  device_array<float> d_in(in);
  device_array<float> d_out(in.size());
  device_array<float> d_out2(in.size());
  device_array<unsigned long long> d_counts(5);
  std::vector<float> cpu(in.size());
  const philox_key key{.seed = 0x5AFEA3F00Dull, .stream = 3, .offset = 1001};
  for (format_spec f : {fp16, bf16, fp8_e4m3, fp8_e5m2, tf32}) {
    for (rounding r : {rounding::nearest_even, rounding::toward_zero, rounding::toward_pos_inf,
                       rounding::toward_neg_inf, rounding::stochastic}) {
      for (overflow ov : {overflow::to_infinity, overflow::saturate}) {
        const round_options opt{.mode = r, .on_overflow = ov, .flush_subnormals = false};
        const cast_stats stats = round_span(f, in, cpu, opt, key);
        REQUIRE(launch_round(f, opt, key, d_in.data(), d_out.data(), in.size(), nullptr) == 0);
        d_counts.upload(std::vector<unsigned long long>(5, 0));
        REQUIRE(launch_round_counted(f, opt, key, d_in.data(), d_out2.data(), in.size(), d_counts.data(), nullptr) ==
                0);
        const std::vector<float> gpu = d_out.download();
        const std::vector<float> gpu2 = d_out2.download();
        const std::vector<unsigned long long> counts = d_counts.download();
        std::size_t mismatches = 0, first = in.size();
        for (std::size_t i = 0; i < in.size(); ++i) {
          if (bits(gpu[i]) != bits(cpu[i]) || bits(gpu2[i]) != bits(cpu[i])) {
            if (mismatches++ == 0) first = i;
          }
        }
        INFO(format_name(f) << " mode " << static_cast<int>(r) << " overflow " << static_cast<int>(ov));
        if (mismatches != 0) {
          INFO("first mismatch at " << first << ": in 0x" << std::hex << bits(in[first]) << " cpu 0x"
                                    << bits(cpu[first]) << " gpu 0x" << bits(gpu[first]));
          CHECK(mismatches == 0);
        }
        CHECK(counts[0] == stats.overflow);
        CHECK(counts[1] == stats.underflow);
        CHECK(counts[2] == stats.subnormal);
        CHECK(counts[3] == stats.nan);
        CHECK(counts[4] == stats.infinity);
      }
    }
  }
}

}  // namespace

TEST_CASE("GPU casts are bit-identical to round_span on inputs from all fp16 codes", "[cuda][gpu][cast]") {
  compare_all(fp16_code_inputs());
}

TEST_CASE("GPU casts are bit-identical to round_span on a seeded random sample", "[cuda][gpu][cast]") {
  compare_all(random_inputs(std::size_t{1} << 20, 20240229));
}

TEST_CASE("GPU encode matches encode_span", "[cuda][gpu][cast]") {
  const std::vector<float> in = fp16_code_inputs();
  device_array<float> d_in(in);
  device_array<std::uint16_t> d_codes(in.size());
  std::vector<std::uint16_t> cpu(in.size());
  for (format_spec f : {fp16, bf16, fp8_e4m3, fp8_e5m2}) {
    const round_options opt{.mode = rounding::stochastic, .on_overflow = overflow::saturate};
    const philox_key key{.seed = 99, .stream = 1, .offset = 0};
    encode_span(f, in, cpu, opt, key);
    REQUIRE(launch_encode16(f, opt, key, d_in.data(), d_codes.data(), in.size(), nullptr) == 0);
    INFO(format_name(f));
    CHECK(d_codes.download() == cpu);
  }
}
