// All 2^32 floats rounded to E4M3 and E5M2 (nearest even) by the round_span() fast paths, on every kernel path
// this machine runs (portable, AVX2, AVX-512), must equal the
// independent binary64 reference bit for bit: OCP E4M3 (max 448, 464 ties to 448, NaN instead of overflow, one
// NaN code) and E5M2 (threshold 61440), subnormals, -0 and every NaN payload included, and its counters must
// equal those counted from the reference results, chunk by chunk. The scalar encode() of
// these formats is checked against the exact oracle in format_random_sweep and format_codes_ties.
#include <catch2/catch.hpp>
#include <vector>

#include "exhaustive_check.hpp"
#include "oracles/round_oracle.hpp"
#include "safeamp/format.hpp"

TEST_CASE("E4M3 and E5M2 nearest-even fast paths agree with the oracle on all 2^32 floats") {
  const oracle::prepared_format e4m3_ref = oracle::prepare({4, 3, true}), e5m2_ref = oracle::prepare({5, 2, false});
  exhaustive::report e4m3_oracle, e5m2_oracle, counters;
  const std::vector<safeamp::cpu_path> paths = exhaustive::paths_to_check();

  exhaustive::for_all_floats([&](std::uint32_t, const std::vector<std::uint32_t>& bits) {
    thread_local std::vector<float> in(65536), e4m3_out(65536), e5m2_out(65536);
    thread_local std::vector<std::uint32_t> e4m3_expected(65536), e5m2_expected(65536);
    for (std::size_t i = 0; i < bits.size(); ++i) {
      in[i] = oracle::bits_float(bits[i]);
      e4m3_expected[i] = oracle::round_nearest_fast(e4m3_ref, in[i]);
      e5m2_expected[i] = oracle::round_nearest_fast(e5m2_ref, in[i]);
    }
    const safeamp::cast_stats e4m3_want = exhaustive::count_of(in.data(), e4m3_expected.data(), nullptr, in.size(),
                                                               safeamp::min_normal(safeamp::fp8_e4m3));
    const safeamp::cast_stats e5m2_want = exhaustive::count_of(in.data(), e5m2_expected.data(), nullptr, in.size(),
                                                               safeamp::min_normal(safeamp::fp8_e5m2));
    for (const safeamp::cpu_path path : paths) {
      counters.add_counts(exhaustive::on_path("E4M3 round_span counters", path), bits[0], e4m3_want,
                          safeamp::detail::round_span_on(path, safeamp::fp8_e4m3, in, e4m3_out, {}, {}));
      counters.add_counts(exhaustive::on_path("E5M2 round_span counters", path), bits[0], e5m2_want,
                          safeamp::detail::round_span_on(path, safeamp::fp8_e5m2, in, e5m2_out, {}, {}));
      if (exhaustive::same_bits(e4m3_out.data(), e4m3_expected.data(), bits.size()) &&
          exhaustive::same_bits(e5m2_out.data(), e5m2_expected.data(), bits.size())) {
        continue;
      }
      for (std::size_t i = 0; i < bits.size(); ++i) {
        if (oracle::float_bits(e4m3_out[i]) != e4m3_expected[i]) {
          e4m3_oracle.add(exhaustive::on_path("E4M3 oracle vs round_span", path), bits[i], e4m3_expected[i],
                          oracle::float_bits(e4m3_out[i]));
        }
        if (oracle::float_bits(e5m2_out[i]) != e5m2_expected[i]) {
          e5m2_oracle.add(exhaustive::on_path("E5M2 oracle vs round_span", path), bits[i], e5m2_expected[i],
                          oracle::float_bits(e5m2_out[i]));
        }
      }
    }
  });

  for (auto* r : {&e4m3_oracle, &e5m2_oracle, &counters}) {
    for (const auto& s : r->samples) UNSCOPED_INFO(s);
  }
  CHECK(e4m3_oracle.disagreements == 0);
  CHECK(e5m2_oracle.disagreements == 0);
  CHECK(counters.disagreements == 0);
}
