// The formats of issue 16 (OCP MX FP6/FP4 with every code finite, the fnuz FP8 formats with a non-IEEE bias,
// the unsigned E8M0 scale): every code against its value from the definition, hand tables from the OCP MX v1.0
// specification and the ml_dtypes documentation, every midpoint between adjacent codes, and random inputs in
// every rounding mode against the big-integer oracle (tests/oracles), through round_to and round_span. Also
// every ml_dtypes format by its ml_dtypes name, each of its codes decoded and re-encoded.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "all_codes.hpp"
#include "oracles/round_oracle.hpp"
#include "safeamp/format.hpp"

namespace {

using safeamp::format_spec;
using safeamp::overflow;
using safeamp::rounding;
using sv = safeamp::special_values;

std::string hex(std::uint32_t u) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08X", u);
  return b;
}
std::uint32_t bits(float x) { return oracle::float_bits(x); }
const float inf = std::numeric_limits<float>::infinity();

// The formats under test, written out (not safeamp's constants), with their oracle descriptions.
struct case_format {
  const char* name;
  format_spec spec;
  oracle::format ref;
};
const case_format formats[] = {
    {"e2m1fn (OCP MX FP4)", {2, 1, sv::finite, 0, false}, {2, 1, false, false, true, 0}},
    {"e2m3fn (OCP MX FP6)", {2, 3, sv::finite, 0, false}, {2, 3, false, false, true, 0}},
    {"e3m2fn (OCP MX FP6)", {3, 2, sv::finite, 0, false}, {3, 2, false, false, true, 0}},
    {"e4m3fnuz", {4, 3, sv::fnuz, 1, false}, {4, 3, false, true, false, 1}},
    {"e5m2fnuz", {5, 2, sv::fnuz, 1, false}, {5, 2, false, true, false, 1}},
    {"e4m3b11fnuz", {4, 3, sv::fnuz, 4, false}, {4, 3, false, true, false, 4}},
    {"e3m4 (ieee)", {3, 4, sv::ieee, 0, false}, {3, 4, false, false, false, 0}},
    {"e4m3ieee (ml_dtypes float8_e4m3)", {4, 3, sv::ieee, 0, false}, {4, 3, false, false, false, 0}},
    {"e2m1fnnan (old e2m1fn)", {2, 1, sv::finite_nan, 0, false}, {2, 1, true, false, false, 0}},
    {"e5m7 bias 20 finite", {5, 7, sv::finite, 5, false}, {5, 7, false, false, true, 5}},
};

}  // namespace

TEST_CASE("every code of the new formats decodes to its defined value and re-encodes to itself") {
  for (const case_format& c : formats) {
    INFO(c.name);
    CHECK(format_test::code_failures(c.spec, c.ref) == 0);
  }
}

TEST_CASE("every ml_dtypes format: its name gives the format defined here, and every code round-trips") {
  // ml_dtypes 0.6 README "Supported types", and numpy's float16: E and M, kind and bias written out from the
  // ml_dtypes / OCP definitions, not taken from safeamp's constants (which must equal them).
  struct ml_dtypes_format {
    const char* name;
    format_spec spec;
    format_spec named;  // safeamp's constant
    oracle::format ref;
  };
  const ml_dtypes_format all[] = {
      {"float16", {5, 10, sv::ieee, 0, false}, safeamp::fp16, {5, 10, false}},
      {"bfloat16", {8, 7, sv::ieee, 0, false}, safeamp::bf16, {8, 7, false}},
      {"float8_e3m4", {3, 4, sv::ieee, 0, false}, safeamp::fp8_e3m4, {3, 4, false}},
      {"float8_e4m3", {4, 3, sv::ieee, 0, false}, safeamp::fp8_e4m3ieee, {4, 3, false}},
      {"float8_e4m3fn", {4, 3, sv::finite_nan, 0, false}, safeamp::fp8_e4m3, {4, 3, true}},
      {"float8_e4m3fnuz", {4, 3, sv::fnuz, 1, false}, safeamp::fp8_e4m3fnuz, {4, 3, false, true, false, 1}},
      {"float8_e4m3b11fnuz", {4, 3, sv::fnuz, 4, false}, safeamp::fp8_e4m3b11fnuz, {4, 3, false, true, false, 4}},
      {"float8_e5m2", {5, 2, sv::ieee, 0, false}, safeamp::fp8_e5m2, {5, 2, false}},
      {"float8_e5m2fnuz", {5, 2, sv::fnuz, 1, false}, safeamp::fp8_e5m2fnuz, {5, 2, false, true, false, 1}},
      {"float6_e2m3fn", {2, 3, sv::finite, 0, false}, safeamp::fp6_e2m3, {2, 3, false, false, true}},
      {"float6_e3m2fn", {3, 2, sv::finite, 0, false}, safeamp::fp6_e3m2, {3, 2, false, false, true}},
      {"float4_e2m1fn", {2, 1, sv::finite, 0, false}, safeamp::fp4_e2m1, {2, 1, false, false, true}},
  };
  for (const ml_dtypes_format& f : all) {
    INFO(f.name);
    CHECK(safeamp::parse_format(f.name) == f.spec);
    CHECK(f.named == f.spec);
    CHECK(format_test::code_failures(f.spec, f.ref) == 0);
  }
  // float8_e8m0fnu (unsigned, exponent only; the oracle has no such kind): code c is 2^(c - 127) for c < 255
  // and re-encodes to c; 0xFF is the one NaN and re-encodes to 0xFF. The E8M0 test case below checks more.
  CHECK(safeamp::parse_format("float8_e8m0fnu") == format_spec{8, 0, sv::finite_nan, 0, true});
  CHECK(safeamp::e8m0 == format_spec{8, 0, sv::finite_nan, 0, true});
  int failures = 0;
  for (std::uint32_t code = 0; code < 256; ++code) {
    const float got = safeamp::decode(safeamp::e8m0, code);
    const bool value_ok =
        code == 255 ? std::isnan(got) : bits(got) == bits(std::ldexp(1.0f, static_cast<int>(code) - 127));
    if ((!value_ok || safeamp::encode(safeamp::e8m0, got) != code) && failures++ < 8) {
      FAIL_CHECK("e8m0 code " << hex(code) << " decodes to " << hex(bits(got)));
    }
  }
  CHECK(failures == 0);
}

TEST_CASE("OCP MX v1.0 element tables and ml_dtypes facts, by hand") {
  // OCP MX v1.0 section 5.3.3, FP4 E2M1: the eight magnitudes 0, 0.5 (subnormal), 1, 1.5, 2, 3, 4, 6.
  const float e2m1_values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (std::uint32_t code = 0; code < 16; ++code) {
    const float want = code < 8 ? e2m1_values[code] : -e2m1_values[code - 8];
    CHECK(bits(safeamp::decode(safeamp::fp4_e2m1, code)) == bits(want));
  }
  // OCP MX v1.0 section 5.3.2, FP6: E2M3 max 7.5 = 0 11 111, min subnormal 0.125; E3M2 max 28 = 0 111 11,
  // min subnormal 0.0625. No code of either is NaN or inf.
  CHECK(safeamp::decode(safeamp::fp6_e2m3, 0x1F) == 7.5f);
  CHECK(safeamp::decode(safeamp::fp6_e2m3, 0x01) == 0.125f);
  CHECK(safeamp::decode(safeamp::fp6_e3m2, 0x1F) == 28.0f);
  CHECK(safeamp::decode(safeamp::fp6_e3m2, 0x01) == 0.0625f);
  CHECK(safeamp::decode(safeamp::fp6_e3m2, 0x3F) == -28.0f);
  // Saturation (OCP MX v1.0 section 5.3.3 for FP6/FP4: out-of-range values clamp to max normal, there being no
  // inf or NaN): under both overflow options and in every rounding mode, +-inf and huge values give +-max.
  for (const auto mode : {rounding::nearest_even, rounding::toward_zero, rounding::toward_pos_inf,
                          rounding::toward_neg_inf, rounding::stochastic}) {
    for (const auto ov : {overflow::to_infinity, overflow::saturate}) {
      const safeamp::round_options o{.mode = mode, .on_overflow = ov};
      CHECK(safeamp::round_to(safeamp::fp4_e2m1, inf, o, 0xFFFFFFFFu) == 6.0f);
      CHECK(safeamp::round_to(safeamp::fp4_e2m1, -1e30f, o, 0xFFFFFFFFu) == -6.0f);
      CHECK(safeamp::round_to(safeamp::fp6_e3m2, 1e30f, o, 0xFFFFFFFFu) == 28.0f);
    }
  }
  // Ties between FP4 values go to the even code: 2.5 -> 2 (code 4), 3.5 -> 4 (code 6), 5 -> 4, 0.25 -> 0,
  // 0.75 -> 1 (code 2, even); just above 5: 6.
  CHECK(safeamp::round_to(safeamp::fp4_e2m1, 2.5f) == 2.0f);
  CHECK(safeamp::round_to(safeamp::fp4_e2m1, 3.5f) == 4.0f);
  CHECK(safeamp::round_to(safeamp::fp4_e2m1, 5.0f) == 4.0f);
  CHECK(safeamp::round_to(safeamp::fp4_e2m1, 5.0000005f) == 6.0f);
  CHECK(safeamp::round_to(safeamp::fp4_e2m1, 0.25f) == 0.0f);
  CHECK(safeamp::round_to(safeamp::fp4_e2m1, 0.75f) == 1.0f);
  // A NaN has no FP4 code: round_to keeps it a NaN (a tensor's NaN is never hidden); encode gives +0.
  CHECK(std::isnan(safeamp::round_to(safeamp::fp4_e2m1, std::nanf(""))));
  CHECK(safeamp::encode(safeamp::fp4_e2m1, std::nanf("")) == 0u);

  // fnuz (ml_dtypes README: "no negative zero, a single NaN 0x80, no infinity"; e4m3fnuz bias 8, max 240):
  CHECK(safeamp::decode(safeamp::fp8_e4m3fnuz, 0x7F) == 240.0f);
  CHECK(safeamp::decode(safeamp::fp8_e4m3fnuz, 0xFF) == -240.0f);
  CHECK(safeamp::decode(safeamp::fp8_e4m3fnuz, 0x08) == 0.0078125f);  // 2^-7, smallest normal
  CHECK(safeamp::decode(safeamp::fp8_e4m3fnuz, 0x01) == 0.0009765625f);
  CHECK(std::isnan(safeamp::decode(safeamp::fp8_e4m3fnuz, 0x80)));
  CHECK(safeamp::encode(safeamp::fp8_e4m3fnuz, -0.0f) == 0x00u);
  CHECK(safeamp::encode(safeamp::fp8_e4m3fnuz, inf) == 0x80u);     // no inf: NaN
  CHECK(safeamp::encode(safeamp::fp8_e4m3fnuz, -1e30f) == 0x80u);  // overflow without saturation: NaN
  CHECK(safeamp::encode(safeamp::fp8_e4m3fnuz, -1e30f, {.on_overflow = overflow::saturate}) == 0xFFu);
  CHECK(safeamp::encode(safeamp::fp8_e5m2fnuz, 57344.0f) == 0x7Fu);
  CHECK(safeamp::encode(safeamp::fp8_e5m2fnuz, -1.0f) == 0xC0u);  // 1.0 = 2^(16-16): exponent field 16
  CHECK(safeamp::encode(safeamp::fp8_e4m3b11fnuz, 30.0f) == 0x7Fu);
  CHECK(safeamp::encode(safeamp::fp8_e4m3b11fnuz, 3.0f) == 0x64u);       // 1.5 * 2^(12-11): 0 1100 100
  CHECK(bits(safeamp::round_to(safeamp::fp8_e4m3fnuz, -1e-30f)) == 0u);  // underflow to +0, never -0
}

TEST_CASE("E8M0 (OCP MX v1.0 section 5.4.1): powers of two, NaN 0xFF, no zero, ties up") {
  // Value 2^(code - 127) for codes 0..254; 0xFF is NaN.
  for (std::uint32_t code = 0; code < 255; ++code) {
    const float want = std::ldexp(1.0f, static_cast<int>(code) - 127);
    CHECK(bits(safeamp::decode(safeamp::e8m0, code)) == bits(want));
    CHECK(safeamp::encode(safeamp::e8m0, want) == code);
    if (code < 254) {
      // 1.5 * 2^k is the midpoint in value: up (no stored mantissa bit, the implicit 1 is odd); just below it: down.
      CHECK(safeamp::encode(safeamp::e8m0, 1.5f * want) == code + 1);
      CHECK(safeamp::encode(safeamp::e8m0, std::nextafter(1.5f * want, 0.0f)) == code);
      CHECK(safeamp::encode(safeamp::e8m0, 1.5f * want, {.mode = rounding::toward_zero}) == code);
      CHECK(safeamp::encode(safeamp::e8m0, std::nextafter(want, inf), {.mode = rounding::toward_pos_inf}) == code + 1);
    }
  }
  CHECK(std::isnan(safeamp::decode(safeamp::e8m0, 0xFF)));
  // ml_dtypes float8_e8m0fnu casts (checked with ml_dtypes 0.6.0): 0, -0, negatives, NaN and inf -> 0xFF;
  // below 2^-127 -> 0x00; 1.5 * 2^127 and above -> 0xFF (saturate: 0xFE).
  for (const float x : {0.0f, -0.0f, -1.0f, std::nanf(""), inf}) CHECK(safeamp::encode(safeamp::e8m0, x) == 0xFFu);
  CHECK(safeamp::encode(safeamp::e8m0, std::ldexp(1.0f, -140)) == 0x00u);
  CHECK(safeamp::encode(safeamp::e8m0, std::ldexp(1.5f, 127)) == 0xFFu);
  CHECK(safeamp::encode(safeamp::e8m0, std::ldexp(1.5f, 127), {.on_overflow = overflow::saturate}) == 0xFEu);
  CHECK(safeamp::encode(safeamp::e8m0, std::ldexp(1.49f, 127)) == 0xFEu);
  // Stochastic: 1.25 * 2^0 goes up with probability 1/4: random words above 3/4 of the range round up.
  CHECK(safeamp::encode(safeamp::e8m0, 1.25f, {.mode = rounding::stochastic}, 0xBFFFFFFFu) == 127u);
  CHECK(safeamp::encode(safeamp::e8m0, 1.25f, {.mode = rounding::stochastic}, 0xC0000000u) == 128u);
  // round_span takes the scalar routine for it, same results and counters.
  std::vector<float> in = {1.0f, 3.0f, 0.0f, std::ldexp(1.5f, 127)}, out(4);
  const safeamp::cast_stats st = safeamp::round_span(safeamp::e8m0, in, out);
  CHECK(out[0] == 1.0f);
  CHECK(out[1] == 4.0f);
  CHECK(std::isnan(out[2]));
  CHECK(std::isnan(out[3]));
  CHECK(st.nan == 2u);
  CHECK(st.overflow == 1u);
}

TEST_CASE("midpoints between adjacent codes round to the even code, their neighbours to the nearer code") {
  for (const case_format& c : formats) {
    INFO(c.name);
    const int M = c.spec.mantissa_bits;
    const std::uint32_t max_code = safeamp::max_finite_code(c.spec);
    int failures = 0;
    for (std::uint32_t code = 0; code < max_code; ++code) {
      const double lo = oracle::value_of(c.ref, code), hi = oracle::value_of(c.ref, code + 1);
      const float mid = static_cast<float>((lo + hi) / 2);  // exact: a format value has <= M + 2 bits
      const std::uint32_t even = (code & 1u) == 0 ? code : code + 1;
      const std::uint32_t got = safeamp::encode(c.spec, mid);
      const std::uint32_t below = safeamp::encode(c.spec, std::nextafter(mid, 0.0f));
      const std::uint32_t above = safeamp::encode(c.spec, std::nextafter(mid, inf));
      const std::uint32_t neg = safeamp::encode(c.spec, -mid);
      const std::uint32_t sign = 1u << (c.spec.exponent_bits + M);
      const std::uint32_t want_neg = c.ref.fnuz && even == 0 ? 0u : sign | even;  // fnuz: no -0
      if ((got != even || below != code || above != code + 1 || neg != want_neg) && failures++ < 8) {
        FAIL_CHECK("between codes " << hex(code) << " and " << hex(code + 1) << ": mid " << hex(got) << " below "
                                    << hex(below) << " above " << hex(above) << " negative " << hex(neg));
      }
    }
    CHECK(failures == 0);
  }
}

TEST_CASE("random inputs in every mode: round_to and round_span against the oracle, bit for bit") {
  std::mt19937_64 gen(16);
  for (const case_format& c : formats) {
    INFO(c.name);
    // Inputs across the format's range and beyond: |x| = 2^U(emin - M - 3, emax + 3), random sign and
    // mantissa, plus the specials.
    const int lo = c.ref.emin() - c.ref.mantissa_bits - 3, hi = c.ref.emax() + 3;
    std::uniform_int_distribution<int> ex(lo, hi);
    std::uniform_int_distribution<std::uint32_t> word;
    std::vector<float> in;
    for (int i = 0; i < 20000; ++i) {
      const std::uint32_t mant = word(gen) & 0x7FFFFFu;
      const std::uint32_t e = static_cast<std::uint32_t>(ex(gen) + 127);
      in.push_back(oracle::bits_float((word(gen) & 0x80000000u) | (e << 23) | mant));
    }
    for (const float s : {0.0f, -0.0f, inf, -inf, std::nanf(""), -std::nanf("1"), 1e-45f, -1e-45f}) in.push_back(s);
    for (const auto mode : {rounding::nearest_even, rounding::toward_zero, rounding::toward_pos_inf,
                            rounding::toward_neg_inf, rounding::stochastic}) {
      for (const bool saturate : {false, true}) {
        for (const bool ftz : {false, true}) {
          const safeamp::round_options o{.mode = mode,
                                         .on_overflow = saturate ? overflow::saturate : overflow::to_infinity,
                                         .flush_subnormals = ftz};
          const safeamp::philox_key key{.seed = 99, .stream = 3};
          std::vector<float> span_out(in.size());
          (void)safeamp::round_span(c.spec, in, span_out, o, key);
          int failures = 0;
          for (std::size_t i = 0; i < in.size(); ++i) {
            const std::uint32_t rnd = mode == rounding::stochastic ? safeamp::stochastic_bits(99, 3, i) : 0u;
            const oracle::options ro{.rounding = static_cast<oracle::mode>(mode),
                                     .saturate = saturate,
                                     .flush_subnormals = ftz,
                                     .random_bits = rnd};
            const std::uint32_t want = oracle::round_bits(c.ref, in[i], ro);
            const std::uint32_t scalar = bits(safeamp::round_to(c.spec, in[i], o, rnd));
            const std::uint32_t span = bits(span_out[i]);
            if ((scalar != want || span != want) && failures++ < 5) {
              FAIL_CHECK("mode " << static_cast<int>(mode) << " saturate " << saturate << " ftz " << ftz << ": "
                                 << hex(bits(in[i])) << " -> round_to " << hex(scalar) << ", round_span " << hex(span)
                                 << ", oracle " << hex(want));
            }
          }
          CHECK(failures == 0);
        }
      }
    }
  }
}
