// Every code of fp16, bf16, E4M3 and E5M2 decodes to the value the format definition gives and re-encodes to
// itself; hand-derived tie tables (midpoints, overflow thresholds, subnormal boundaries) for every mode and
// overflow option; the known emulator traps. Expected values are written from the format definitions
// (docs/numerics.md, shared/reference/emulation.md section 4), not computed by the code under test.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "all_codes.hpp"
#include "format_cases.hpp"
#include "oracles/round_oracle.hpp"
#include "safeamp/format.hpp"

namespace {

using safeamp::overflow;
using safeamp::rounding;

std::string hex(std::uint32_t u) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08X", u);
  return b;
}
std::uint32_t bits(float x) { return oracle::float_bits(x); }
float p2(int e) { return std::ldexp(1.0f, e); }
const float inf = std::numeric_limits<float>::infinity();

oracle::format ref(safeamp::format_spec f) {
  return {f.exponent_bits, f.mantissa_bits, f.specials == safeamp::special_values::finite_nan};
}

void check_all_codes(safeamp::format_spec f) { CHECK(format_test::code_failures(f, ref(f)) == 0); }

}  // namespace

TEST_CASE("every code decodes to its defined value and re-encodes to itself") {
  check_all_codes(safeamp::fp16);
  check_all_codes(safeamp::bf16);
  check_all_codes(safeamp::fp8_e4m3);
  check_all_codes(safeamp::fp8_e5m2);
  check_all_codes(safeamp::format_spec{3, 2, safeamp::special_values::ieee});
  check_all_codes(safeamp::format_spec{2, 1, safeamp::special_values::finite_nan});
}

namespace {
struct tie_row {
  const char* what;
  safeamp::format_spec f;
  float x;
  float nearest, toward_zero, toward_pos_inf, toward_neg_inf;  // overflow::to_infinity
  float saturated_nearest;                                     // overflow::saturate, nearest even
};

// NaN in an expected column: any NaN of the input's sign. Each row is also run negated, expecting
// the negated results with toward_pos_inf and toward_neg_inf swapped.
const float qnan = std::numeric_limits<float>::quiet_NaN();
const tie_row tie_rows[] = {
    // fp16: max 65504 = (2 - 2^-10) 2^15, top ulp 32, threshold 65520; min normal 2^-14, min subnormal 2^-24.
    {"fp16 1 + 2^-11 (tie, to even 1)", safeamp::fp16, 1 + p2(-11), 1, 1, 1 + p2(-10), 1, 1},
    {"fp16 1 + 3*2^-11 (tie, to even 1+2^-9)", safeamp::fp16, 1 + 3 * p2(-11), 1 + p2(-9), 1 + p2(-10), 1 + p2(-9),
     1 + p2(-10), 1 + p2(-9)},
    {"fp16 65504 + 8", safeamp::fp16, 65512, 65504, 65504, inf, 65504, 65504},
    {"fp16 65519.99 (just below threshold)", safeamp::fp16, 65519.99f, 65504, 65504, inf, 65504, 65504},
    {"fp16 65520 (threshold tie to inf)", safeamp::fp16, 65520, inf, 65504, inf, 65504, 65504},
    {"fp16 1e6", safeamp::fp16, 1e6f, inf, 65504, inf, 65504, 65504},
    {"fp16 inf", safeamp::fp16, inf, inf, inf, inf, inf, 65504},
    {"fp16 2^-25 (half min subnormal, tie to 0)", safeamp::fp16, p2(-25), 0, 0, p2(-24), 0, 0},
    {"fp16 just above 2^-25", safeamp::fp16, std::nextafter(p2(-25), 1.0f), p2(-24), 0, p2(-24), 0, p2(-24)},
    {"fp16 just below 2^-25", safeamp::fp16, std::nextafter(p2(-25), 0.0f), 0, 0, p2(-24), 0, 0},
    {"fp16 1.5*2^-24 (tie to even 2^-23)", safeamp::fp16, 1.5f * p2(-24), p2(-23), p2(-24), p2(-23), p2(-24), p2(-23)},
    {"fp16 2^-14 - 2^-25 (max subnormal / min normal tie)", safeamp::fp16, p2(-14) - p2(-25), p2(-14),
     p2(-14) - p2(-24), p2(-14), p2(-14) - p2(-24), p2(-14)},
    {"fp16 float subnormal 2^-140", safeamp::fp16, p2(-140), 0, 0, p2(-24), 0, 0},
    // bf16: max (2 - 2^-7) 2^127, min subnormal 2^-133 (float subnormals must not be flushed).
    {"bf16 1 + 2^-8 (tie to even 1)", safeamp::bf16, 1 + p2(-8), 1, 1, 1 + p2(-7), 1, 1},
    {"bf16 1 + 2^-8 + 2^-23", safeamp::bf16, 1 + p2(-8) + p2(-23), 1 + p2(-7), 1, 1 + p2(-7), 1, 1 + p2(-7)},
    {"bf16 2^-134 (half min subnormal)", safeamp::bf16, p2(-134), 0, 0, p2(-133), 0, 0},
    {"bf16 3*2^-134 (tie to even 2^-132)", safeamp::bf16, 3 * p2(-134), p2(-132), p2(-133), p2(-132), p2(-133),
     p2(-132)},
    {"bf16 2^-130 (float subnormal kept)", safeamp::bf16, p2(-130), p2(-130), p2(-130), p2(-130), p2(-130), p2(-130)},
    {"bf16 max + half ulp (tie to inf)", safeamp::bf16, oracle::bits_float(0x7F7F8000u), inf,
     oracle::bits_float(0x7F7F0000u), inf, oracle::bits_float(0x7F7F0000u), oracle::bits_float(0x7F7F0000u)},
    {"bf16 just below max + half ulp", safeamp::bf16, oracle::bits_float(0x7F7F7FFFu), oracle::bits_float(0x7F7F0000u),
     oracle::bits_float(0x7F7F0000u), inf, oracle::bits_float(0x7F7F0000u), oracle::bits_float(0x7F7F0000u)},
    // E5M2: max 57344 = 1.75 2^15, top ulp 8192, threshold 61440; min subnormal 2^-16.
    {"E5M2 61439.996 (no double rounding via fp16)", safeamp::fp8_e5m2, 61439.996f, 57344, 57344, inf, 57344, 57344},
    {"E5M2 61440 (tie to inf)", safeamp::fp8_e5m2, 61440, inf, 57344, inf, 57344, 57344},
    {"E5M2 2^-17 + ulp (not via fp16)", safeamp::fp8_e5m2, std::nextafter(p2(-17), 1.0f), p2(-16), 0, p2(-16), 0,
     p2(-16)},
    {"E5M2 2^-17 (half min subnormal)", safeamp::fp8_e5m2, p2(-17), 0, 0, p2(-16), 0, 0},
    // E4M3 (OCP fn): max 448 = 1.75 2^8 (S.1111.110), S.1111.111 is NaN, no infinity; min subnormal 2^-9.
    {"E4M3 464 (tie to even 448)", safeamp::fp8_e4m3, 464, 448, 448, qnan, 448, 448},
    {"E4M3 464.00003 (overflow: NaN)", safeamp::fp8_e4m3, 464.00003f, qnan, 448, qnan, 448, 448},
    {"E4M3 480 (not a value)", safeamp::fp8_e4m3, 480, qnan, 448, qnan, 448, 448},
    {"E4M3 inf", safeamp::fp8_e4m3, inf, qnan, qnan, qnan, qnan, 448},
    {"E4M3 1 + 2^-4 + 2^-12 (not via bf16/fp16)", safeamp::fp8_e4m3, 1 + p2(-4) + p2(-12), 1.125f, 1, 1.125f, 1,
     1.125f},
    {"E4M3 1 + 2^-4 (tie to even 1)", safeamp::fp8_e4m3, 1 + p2(-4), 1, 1, 1.125f, 1, 1},
    {"E4M3 2^-10 (half min subnormal)", safeamp::fp8_e4m3, p2(-10), 0, 0, p2(-9), 0, 0},
    {"E4M3 2^-6 - 2^-10 (max subnormal / min normal tie)", safeamp::fp8_e4m3, p2(-6) - p2(-10), p2(-6), p2(-6) - p2(-9),
     p2(-6), p2(-6) - p2(-9), p2(-6)},
};

bool matches(float got, float want, bool negative) {
  if (std::isnan(want)) return std::isnan(got) && std::signbit(got) == negative;
  return bits(got) == bits(negative ? -want : want);
}
}  // namespace

TEST_CASE("tie tables: every mode and overflow option, both signs, scalar and span, against the oracle") {
  for (const tie_row& row : tie_rows) {
    for (bool negative : {false, true}) {
      const float x = negative ? -row.x : row.x;
      struct col {
        rounding mode;
        overflow ov;
        float want;
        oracle::mode om;
      };
      const col cols[] = {
          {rounding::nearest_even, overflow::to_infinity, row.nearest, oracle::mode::nearest_even},
          {rounding::toward_zero, overflow::to_infinity, row.toward_zero, oracle::mode::toward_zero},
          {rounding::toward_pos_inf, overflow::to_infinity, negative ? row.toward_neg_inf : row.toward_pos_inf,
           oracle::mode::toward_pos_inf},
          {rounding::toward_neg_inf, overflow::to_infinity, negative ? row.toward_pos_inf : row.toward_neg_inf,
           oracle::mode::toward_neg_inf},
          {rounding::nearest_even, overflow::saturate, row.saturated_nearest, oracle::mode::nearest_even},
      };
      for (const col& c : cols) {
        const safeamp::round_options opt{.mode = c.mode, .on_overflow = c.ov};
        const float got = safeamp::round_to(row.f, x, opt);
        float span_out = 0;
        (void)safeamp::round_span(row.f, std::span<const float>(&x, 1), std::span<float>(&span_out, 1), opt);
        const std::uint32_t want_oracle = oracle::round_bits(ref(row.f), x, {c.om, c.ov == overflow::saturate});
        INFO(row.what << (negative ? " (negated)" : "") << ", mode " << static_cast<int>(c.mode) << ", saturate "
                      << (c.ov == overflow::saturate) << ": input " << hex(bits(x)) << " got " << hex(bits(got))
                      << " span " << hex(bits(span_out)) << " oracle " << hex(want_oracle));
        CHECK(matches(got, c.want, negative));
        CHECK(bits(span_out) == bits(got));
        CHECK(matches(oracle::bits_float(want_oracle), c.want, negative));
        // Saturation also applies to every directed mode: never inf, never NaN for a non-NaN input.
        const safeamp::round_options sat{.mode = c.mode, .on_overflow = overflow::saturate};
        const float s = safeamp::round_to(row.f, x, sat);
        CHECK(std::fabs(s) <= safeamp::max_finite(row.f));
      }
    }
  }
}

TEST_CASE("traps: NaN payloads, -0, flush to zero, E4M3 codes") {
  for (safeamp::format_spec f : {safeamp::fp16, safeamp::bf16, safeamp::fp8_e4m3, safeamp::fp8_e5m2}) {
    for (std::uint32_t nan_bits : {0x7F800001u, 0x7F800100u, 0x7FBFFFFFu, 0x7FC00000u, 0x7FFFFFFFu, 0x7F801000u}) {
      for (std::uint32_t sign : {0u, 0x80000000u}) {
        for (rounding m : {rounding::nearest_even, rounding::toward_zero, rounding::toward_pos_inf,
                           rounding::toward_neg_inf, rounding::stochastic}) {
          for (overflow ov : {overflow::to_infinity, overflow::saturate}) {
            const float x = oracle::bits_float(sign | nan_bits);
            const float y = safeamp::round_to(f, x, {.mode = m, .on_overflow = ov}, 0xFFFFFFFFu);
            INFO(safeamp::format_name(f) << " NaN input " << hex(bits(x)) << " gave " << hex(bits(y)));
            CHECK(std::isnan(y));
            CHECK(std::signbit(y) == (sign != 0));
          }
        }
      }
    }
    // -0 stays -0 in every mode; -tiny underflows to -0 (nearest) with its sign.
    for (rounding m : {rounding::nearest_even, rounding::toward_zero, rounding::toward_pos_inf,
                       rounding::toward_neg_inf, rounding::stochastic}) {
      CHECK(bits(safeamp::round_to(f, -0.0f, {.mode = m}, 0xFFFFFFFFu)) == 0x80000000u);
    }
    CHECK(bits(safeamp::round_to(f, -p2(-149))) == 0x80000000u);
    // Flush to zero: a result below min normal becomes a zero of the same sign; min normal itself stays.
    const float tiny = safeamp::min_normal(f) / 2;
    CHECK(bits(safeamp::round_to(f, -tiny, {.flush_subnormals = true})) == 0x80000000u);
    CHECK(bits(safeamp::round_to(f, tiny, {.flush_subnormals = true})) == 0u);
    CHECK(safeamp::round_to(f, tiny) == tiny);  // subnormals honoured unless asked
    CHECK(safeamp::round_to(f, safeamp::min_normal(f), {.flush_subnormals = true}) == safeamp::min_normal(f));
  }
  // E4M3: 0x7E is 448, 0x7F and 0xFF are NaN, 0x77 is 240 (not an IEEE-style top binade).
  CHECK(safeamp::decode(safeamp::fp8_e4m3, 0x7Eu) == 448.0f);
  CHECK(std::isnan(safeamp::decode(safeamp::fp8_e4m3, 0x7Fu)));
  CHECK(std::isnan(safeamp::decode(safeamp::fp8_e4m3, 0xFFu)));
  CHECK(safeamp::decode(safeamp::fp8_e4m3, 0x78u) == 256.0f);
  CHECK(safeamp::encode(safeamp::fp8_e4m3, 448.0f) == 0x7Eu);
  CHECK(safeamp::encode(safeamp::fp8_e4m3, -1000.0f, {.on_overflow = overflow::saturate}) == 0xFEu);
  CHECK(safeamp::max_finite(safeamp::fp8_e4m3) == 448.0f);
  // E5M2 has infinities and three NaN mantissas.
  CHECK(safeamp::encode(safeamp::fp8_e5m2, inf) == 0x7Cu);
  CHECK(std::isnan(safeamp::decode(safeamp::fp8_e5m2, 0x7Du)));
}

// The exhaustive and dense suites compare the kernels with oracle::round_fast (binary64), which must itself equal
// the big-integer oracle::round_bits: for every format of the dense sweep (format_cases.hpp) but E8M0, which has
// a reference of its own, on random float patterns (every exponent alike, NaN and inf included)
// and on each format's code values, their float neighbours and the midpoints between codes, for every mode and
// both option sets. Its overflow flag (the expected overflow counter of those suites): for a format with
// infinity, without saturation, in a mode that rounds away from zero at the input's sign (nearest even,
// stochastic, toward the infinity of that sign), a finite input overflows exactly when the result is inf (the
// other modes give max finite); in any case an overflowing input lies beyond max finite.
TEST_CASE("the fast binary64 reference equals the exact big-integer one") {
  std::mt19937 gen(0x5AFEA3B0u);
  const auto next = [&gen] { return static_cast<std::uint32_t>(gen()); };  // 32 random bits
  std::uint64_t compared = 0, overflows = 0, bits_differ = 0, flag_wrong = 0;
  std::vector<format_test::case_format> formats(std::begin(format_test::named_formats),
                                                std::end(format_test::named_formats));
  formats.insert(formats.end(), std::begin(format_test::new_kinds), std::end(format_test::new_kinds));
  for (const format_test::case_format& r : formats) {
    if (r.spec.mantissa_bits == 0) continue;  // E8M0 has its own reference (oracle::round_e8m0), no round_bits
    const oracle::prepared_format p = oracle::prepare(r.ref);
    std::vector<float> inputs;
    for (int i = 0; i < 3000; ++i) inputs.push_back(oracle::bits_float(next()));
    // The code values where the rules change, their float neighbours and the midpoints, both signs: the subnormal
    // range and the first two normal binades, and the top two binades with the steps beyond max finite.
    const auto walk = [&](double from, double to) {
      for (double v = from; v <= to;) {
        const double step = std::ldexp(1.0, std::max(std::ilogb(v), r.ref.emin()) - r.ref.mantissa_bits);
        for (const double c : {v, v + step / 2}) {
          const float x = static_cast<float>(c);
          for (const float y : {x, std::nextafter(x, 0.0f), std::nextafter(x, inf)}) {
            inputs.push_back(y);
            inputs.push_back(-y);
          }
        }
        v += step;
      }
    };
    walk(std::ldexp(1.0, r.ref.emin() - r.ref.mantissa_bits), std::ldexp(1.0, r.ref.emin() + 2));
    walk(std::ldexp(1.0, r.ref.emax() - 1), 2 * p.max_finite);
    for (const oracle::mode m : {oracle::mode::nearest_even, oracle::mode::toward_zero, oracle::mode::toward_pos_inf,
                                 oracle::mode::toward_neg_inf, oracle::mode::stochastic}) {
      for (const bool strict : {false, true}) {
        for (const float x : inputs) {
          const oracle::options o{m, strict, strict, next()};
          bool overflowed = false;
          const std::uint32_t fast = oracle::round_fast(p, x, o, &overflowed);
          const std::uint32_t exact = oracle::round_bits(r.ref, x, o);
          ++compared;
          overflows += overflowed ? 1u : 0u;
          const bool away = m == oracle::mode::nearest_even || m == oracle::mode::stochastic ||
                            (m == oracle::mode::toward_pos_inf && !std::signbit(x)) ||
                            (m == oracle::mode::toward_neg_inf && std::signbit(x));
          const bool flag_ok = (!overflowed || std::fabs(static_cast<double>(x)) > p.max_finite) &&
                               (!r.ref.ieee() || strict || !away || !std::isfinite(x) ||
                                overflowed == std::isinf(oracle::bits_float(exact)));
          if (fast != exact || !flag_ok) {
            bits_differ += fast != exact ? 1u : 0u;
            flag_wrong += flag_ok ? 0u : 1u;
            if (bits_differ + flag_wrong <= 16) {
              UNSCOPED_INFO(r.name << " mode " << static_cast<int>(m) << (strict ? " saturate+flush" : "") << " input "
                                   << hex(bits(x)) << ": fast " << hex(fast) << ", exact " << hex(exact)
                                   << ", overflow flag " << overflowed);
            }
          }
        }
      }
    }
  }
  CHECK(bits_differ == 0);
  CHECK(flag_wrong == 0);
  CHECK(compared > 100000);
  CHECK(overflows > 0);
}
