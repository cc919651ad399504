// All 2^32 floats rounded to E4M3 and E5M2 (nearest even) by the round_span() fast paths must equal the
// independent binary64 reference bit for bit: OCP E4M3 (max 448, 464 ties to 448, NaN instead of overflow, one
// NaN code) and E5M2 (threshold 61440), subnormals, -0 and every NaN payload included. The scalar encode() of
// these formats is checked against the exact oracle in format_random_sweep and format_codes_ties.
#include <catch2/catch.hpp>
#include <vector>

#include "exhaustive_check.hpp"
#include "oracles/round_oracle.hpp"
#include "safeamp/format.hpp"
#include "unit/format/expect_kernels.hpp"

TEST_CASE("E4M3 and E5M2 nearest-even fast paths agree with the oracle on all 2^32 floats") {
  const oracle::prepared_format e4m3_ref = oracle::prepare({4, 3, true}), e5m2_ref = oracle::prepare({5, 2, false});
  exhaustive::report e4m3_oracle, e5m2_oracle;

  exhaustive::for_all_floats([&](std::uint32_t, const std::vector<std::uint32_t>& bits) {
    thread_local std::vector<float> in(65536), e4m3_out(65536), e5m2_out(65536);
    for (std::size_t i = 0; i < bits.size(); ++i) in[i] = oracle::bits_float(bits[i]);
    (void)safeamp::round_span(safeamp::fp8_e4m3, in, e4m3_out);
    (void)safeamp::round_span(safeamp::fp8_e5m2, in, e5m2_out);
    for (std::size_t i = 0; i < bits.size(); ++i) {
      const std::uint32_t e4 = oracle::round_nearest_fast(e4m3_ref, in[i]);
      if (oracle::float_bits(e4m3_out[i]) != e4) {
        e4m3_oracle.add("E4M3 oracle vs round_span", bits[i], e4, oracle::float_bits(e4m3_out[i]));
      }
      const std::uint32_t e5 = oracle::round_nearest_fast(e5m2_ref, in[i]);
      if (oracle::float_bits(e5m2_out[i]) != e5) {
        e5m2_oracle.add("E5M2 oracle vs round_span", bits[i], e5, oracle::float_bits(e5m2_out[i]));
      }
    }
  });

  for (auto* r : {&e4m3_oracle, &e5m2_oracle}) {
    for (const auto& s : r->samples) UNSCOPED_INFO(s);
  }
  CHECK(e4m3_oracle.disagreements == 0);
  CHECK(e5m2_oracle.disagreements == 0);
}
