// Every rounding mode on the dense sweep (exhaustive::for_dense_floats: bits 12..31 of the float take all 2^20
// values, bits 0..11 sixteen patterns, which for formats of at most 10 mantissa bits is every case the rounding can
// tell apart), once with overflow to inf/NaN and no flush and once saturating with flush to zero, for two sets of
// formats (two CTest cases): the named formats with vector kernels (fp16, bf16, tf32, E4M3, E5M2), and the kinds
// of issue 16: the fnuz FP8 formats (e4m3fnuz, e5m2fnuz, e4m3b11fnuz), the all-finite OCP MX elements (e2m1fn,
// e2m3fn, e3m2fn) and the unsigned scale e8m0fnu. In one pass: the binary64 reference (oracle::round_fast, and
// oracle::round_e8m0 for E8M0, written from the definitions), the scalar round_to and round_span on every kernel
// path this machine runs agree bit for bit, and round_span's counters equal those counted from the scalar results
// (overflow: the reference's flag, a finite input whose rounded magnitude exceeds max finite). Stochastic bits:
// stochastic_bits(seed, stream, index) per element.
#include <catch2/catch.hpp>
#include <cstdint>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "exhaustive_check.hpp"
#include "format_cases.hpp"
#include "oracle_mode.hpp"
#include "oracles/round_oracle.hpp"
#include "safeamp/format.hpp"

namespace {

using format_test::case_format;
using format_test::named_formats;
using format_test::new_kinds;
using safeamp::overflow;
using safeamp::rounding;

const rounding all_modes[] = {rounding::nearest_even, rounding::toward_zero, rounding::toward_pos_inf,
                              rounding::toward_neg_inf, rounding::stochastic};

using oracle::to_oracle;

std::string label(const case_format& c, const safeamp::round_options& o, const char* what) {
  return std::string(c.name) + " mode " + std::to_string(static_cast<int>(o.mode)) +
         (o.on_overflow == overflow::saturate ? " saturate" : "") + (o.flush_subnormals ? " flush" : "") + ": " + what;
}

}  // namespace

/// The oracle, the scalar round_to and round_span on every path agree on the dense sweep, counters included.
template <std::size_t N>
void check_dense(const case_format (&formats)[N]) {
  const std::vector<safeamp::cpu_path> paths = exhaustive::paths_to_check();
  std::vector<oracle::prepared_format> refs;
  for (const case_format& c : formats) refs.push_back(oracle::prepare(c.ref));
  constexpr std::uint64_t seed = 0x5AFEA3B5EEDull;
  constexpr std::uint32_t stream = 16;
  exhaustive::report oracle_vs_scalar, scalar_vs_span, counters;

  exhaustive::for_dense_floats([&](std::uint32_t chunk, const std::vector<std::uint32_t>& bits) {
    const std::size_t n = bits.size();
    thread_local std::vector<float> in(65536), out(65536);
    thread_local std::vector<std::uint32_t> words(65536), expected(65536), scalar(65536);
    thread_local std::unique_ptr<bool[]> overflowed(new bool[65536]);
    const safeamp::philox_key key{.seed = seed, .stream = stream, .offset = std::uint64_t{chunk} * 65536u};
    for (std::size_t i = 0; i < n; ++i) {
      in[i] = oracle::bits_float(bits[i]);
      words[i] = safeamp::stochastic_bits(key.seed, key.stream, key.offset + i);
    }
    for (std::size_t fi = 0; fi < N; ++fi) {
      const case_format& c = formats[fi];
      const bool exponent_only = c.spec.mantissa_bits == 0;
      for (const rounding m : all_modes) {
        for (const bool strict : {false, true}) {  // strict: saturate and flush subnormals
          const safeamp::round_options opt{.mode = m,
                                           .on_overflow = strict ? overflow::saturate : overflow::to_infinity,
                                           .flush_subnormals = strict};
          for (std::size_t i = 0; i < n; ++i) {
            const oracle::options oo{to_oracle(m), strict, strict, words[i]};
            expected[i] = exponent_only ? oracle::round_e8m0(in[i], oo, &overflowed[i])
                                        : oracle::round_fast(refs[fi], in[i], oo, &overflowed[i]);
            scalar[i] = oracle::float_bits(safeamp::round_to(c.spec, in[i], opt, words[i]));
            if (scalar[i] != expected[i]) {
              oracle_vs_scalar.add(label(c, opt, "oracle vs round_to"), bits[i], expected[i], scalar[i]);
            }
          }
          const safeamp::cast_stats want_counts =
              exhaustive::count_of(in.data(), expected.data(), overflowed.get(), n, safeamp::min_normal(c.spec));
          for (const safeamp::cpu_path path : paths) {
            const safeamp::cast_stats got = safeamp::detail::round_span_on(path, c.spec, in, out, opt, key);
            counters.add_counts(exhaustive::on_path(label(c, opt, "round_span counters").c_str(), path), bits[0],
                                want_counts, got);
            if (exhaustive::same_bits(out.data(), scalar.data(), n)) continue;
            for (std::size_t i = 0; i < n; ++i) {
              const std::uint32_t span = oracle::float_bits(out[i]);
              if (span != scalar[i]) {
                scalar_vs_span.add(exhaustive::on_path(label(c, opt, "round_to vs round_span").c_str(), path), bits[i],
                                   scalar[i], span);
              }
            }
          }
        }
      }
    }
  });

  for (auto* r : {&oracle_vs_scalar, &scalar_vs_span, &counters}) {
    for (const auto& s : r->samples) UNSCOPED_INFO(s);
  }
  CHECK(oracle_vs_scalar.disagreements == 0);
  CHECK(scalar_vs_span.disagreements == 0);
  CHECK(counters.disagreements == 0);
}

TEST_CASE("named formats (fp16, bf16, tf32, E4M3, E5M2): oracle, scalar and every round_span path on the dense sweep") {
  check_dense(named_formats);
}

TEST_CASE("fnuz, all-finite MX and E8M0 formats: oracle, scalar and every round_span path on the dense sweep") {
  check_dense(new_kinds);
}
