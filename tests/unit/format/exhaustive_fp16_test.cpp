// All 2^32 floats rounded to fp16 (nearest even), in one pass: the scalar encode()/decode(), the vectorised
// round_span() fast path (on every kernel path this machine runs: portable, AVX2, AVX-512), the CPU's F16C conversion
// and the independent binary64 reference (tests/oracles/round_oracle.hpp) must agree bit for bit, NaN signs and
// payloads included; round_span's counters must equal those counted from the scalar results, chunk by chunk. Without
// F16C the oracle comparisons still run, then the test exits 77 (CTest: skipped) saying so.
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "exhaustive_check.hpp"
#include "f16c_convert.hpp"
#include "oracles/round_oracle.hpp"
#include "safeamp/format.hpp"

TEST_CASE("fp16 nearest-even agrees with F16C and the oracle on all 2^32 floats") {
  const bool have_f16c = f16c::cpu_has_f16c();
  const oracle::prepared_format fp16_ref = oracle::prepare({5, 10, false});
  exhaustive::report oracle_vs_scalar, scalar_vs_span, f16c_vs_scalar_code, f16c_vs_oracle, span_counters;
  const std::vector<safeamp::cpu_path> paths = exhaustive::paths_to_check();

  exhaustive::for_all_floats([&](std::uint32_t, const std::vector<std::uint32_t>& bits) {
    thread_local std::vector<float> in(65536), span_out(65536), hw_out(65536);
    thread_local std::vector<std::uint16_t> hw_codes(65536);
    thread_local std::vector<std::uint32_t> scalar_bits(65536);
    for (std::size_t i = 0; i < bits.size(); ++i) in[i] = oracle::bits_float(bits[i]);
    if (have_f16c) f16c::round_trip(in.data(), hw_codes.data(), hw_out.data(), in.size());
    for (std::size_t i = 0; i < bits.size(); ++i) {
      const std::uint32_t code = safeamp::encode(safeamp::fp16, in[i]);
      const std::uint32_t scalar = oracle::float_bits(safeamp::decode(safeamp::fp16, code));
      const std::uint32_t expected = oracle::round_nearest_fast(fp16_ref, in[i]);
      if (scalar != expected) oracle_vs_scalar.add("oracle vs encode/decode", bits[i], expected, scalar);
      scalar_bits[i] = scalar;
      if (have_f16c) {
        if (hw_codes[i] != code) f16c_vs_scalar_code.add("F16C code vs encode", bits[i], hw_codes[i], code);
        const std::uint32_t hw = oracle::float_bits(hw_out[i]);
        if (hw != expected) f16c_vs_oracle.add("F16C round trip vs oracle", bits[i], hw, expected);
      }
    }
    const safeamp::cast_stats want =
        exhaustive::count_of(in.data(), scalar_bits.data(), nullptr, in.size(), safeamp::min_normal(safeamp::fp16));
    for (const safeamp::cpu_path path : paths) {
      const safeamp::cast_stats got = safeamp::detail::round_span_on(path, safeamp::fp16, in, span_out, {}, {});
      span_counters.add_counts(exhaustive::on_path("round_span counters", path), bits[0], want, got);
      if (exhaustive::same_bits(span_out.data(), scalar_bits.data(), bits.size())) continue;
      for (std::size_t i = 0; i < bits.size(); ++i) {
        const std::uint32_t span = oracle::float_bits(span_out[i]);
        if (span != scalar_bits[i]) {
          scalar_vs_span.add(exhaustive::on_path("encode/decode vs round_span", path), bits[i], scalar_bits[i], span);
        }
      }
    }
  });

  for (auto* r : {&oracle_vs_scalar, &scalar_vs_span, &f16c_vs_scalar_code, &f16c_vs_oracle, &span_counters}) {
    for (const auto& s : r->samples) UNSCOPED_INFO(s);
  }
  CHECK(oracle_vs_scalar.disagreements == 0);
  CHECK(scalar_vs_span.disagreements == 0);
  CHECK(span_counters.disagreements == 0);
  CHECK(f16c_vs_scalar_code.disagreements == 0);
  CHECK(f16c_vs_oracle.disagreements == 0);
  if (!have_f16c) {
    std::printf("SKIPPED: this CPU has no F16C; the F16C comparison did not run (the oracle ones did)\n");
    std::fflush(stdout);
    if (oracle_vs_scalar.disagreements == 0 && scalar_vs_span.disagreements == 0 && span_counters.disagreements == 0) {
      std::exit(77);
    }
  }
}
