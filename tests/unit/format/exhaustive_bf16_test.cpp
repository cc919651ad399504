// All 2^32 floats rounded to bf16 (nearest even), in one pass: the scalar encode()/decode(), the vectorised
// round_span() fast path (on every kernel path this machine runs: portable, AVX2, AVX-512) and the independent binary64
// reference must agree bit for bit (float subnormals round to bf16 subnormals, NaN signs and payloads kept), and
// round_span's counters must equal those counted from the scalar results, chunk by chunk.
#include <catch2/catch.hpp>
#include <vector>

#include "exhaustive_check.hpp"
#include "oracles/round_oracle.hpp"
#include "safeamp/format.hpp"

TEST_CASE("bf16 nearest-even agrees with the oracle on all 2^32 floats") {
  const oracle::prepared_format bf16_ref = oracle::prepare({8, 7, false});
  exhaustive::report bf16_oracle, bf16_span, bf16_counters;
  const std::vector<safeamp::cpu_path> paths = exhaustive::paths_to_check();

  exhaustive::for_all_floats([&](std::uint32_t, const std::vector<std::uint32_t>& bits) {
    thread_local std::vector<float> in(65536), out(65536);
    thread_local std::vector<std::uint32_t> scalar(65536);
    for (std::size_t i = 0; i < bits.size(); ++i) {
      in[i] = oracle::bits_float(bits[i]);
      scalar[i] = oracle::float_bits(safeamp::round_to(safeamp::bf16, in[i]));
      const std::uint32_t expected = oracle::round_nearest_fast(bf16_ref, in[i]);
      if (scalar[i] != expected) bf16_oracle.add("bf16 oracle vs encode/decode", bits[i], expected, scalar[i]);
    }
    const safeamp::cast_stats want =
        exhaustive::count_of(in.data(), scalar.data(), nullptr, in.size(), safeamp::min_normal(safeamp::bf16));
    for (const safeamp::cpu_path path : paths) {
      const safeamp::cast_stats got = safeamp::detail::round_span_on(path, safeamp::bf16, in, out, {}, {});
      bf16_counters.add_counts(exhaustive::on_path("bf16 round_span counters", path), bits[0], want, got);
      if (exhaustive::same_bits(out.data(), scalar.data(), bits.size())) continue;
      for (std::size_t i = 0; i < bits.size(); ++i) {
        const std::uint32_t span = oracle::float_bits(out[i]);
        if (span != scalar[i]) {
          bf16_span.add(exhaustive::on_path("bf16 encode/decode vs round_span", path), bits[i], scalar[i], span);
        }
      }
    }
  });

  for (auto* r : {&bf16_oracle, &bf16_span, &bf16_counters}) {
    for (const auto& s : r->samples) UNSCOPED_INFO(s);
  }
  CHECK(bf16_oracle.disagreements == 0);
  CHECK(bf16_span.disagreements == 0);
  CHECK(bf16_counters.disagreements == 0);
}
