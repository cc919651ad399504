// Invalid descriptors and bad arguments: a safeamp::error naming the field and the value, never a silent
// fallback. (The compile-time failure is shown in tests/static/format.)
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "safeamp/format.hpp"

namespace {
std::string message_of(auto&& fn) {
  try {
    fn();
  } catch (const safeamp::error& e) {
    return e.what();
  }
  return "no error";
}
}  // namespace

TEST_CASE("make_format and parse_format reject bad descriptors with a clear error") {
  using safeamp::exponent_width;
  using safeamp::make_format;
  using safeamp::mantissa_width;
  CHECK(message_of([] { (void)make_format(exponent_width{1}, mantissa_width{3}); }) ==
        "format exponent_bits is 1; accepted: 2..8");
  CHECK(message_of([] { (void)make_format(exponent_width{9}, mantissa_width{3}); }) ==
        "format exponent_bits is 9; accepted: 2..8");
  CHECK(message_of([] { (void)make_format(exponent_width{5}, mantissa_width{0}); }) ==
        "format mantissa_bits is 0; accepted: 1..23 (0 only for unsigned formats)");
  CHECK(message_of([] { (void)make_format(exponent_width{5}, mantissa_width{24}); }) ==
        "format mantissa_bits is 24; accepted: 1..23 (0 only for unsigned formats)");
  CHECK(message_of([] {
          (void)make_format(exponent_width{8}, mantissa_width{3}, safeamp::special_values::finite_nan);
        }).find("finite_nan") != std::string::npos);
  CHECK(make_format(exponent_width{4}, mantissa_width{3}, safeamp::special_values::finite_nan) == safeamp::fp8_e4m3);
  CHECK(make_format(exponent_width{5}, mantissa_width{10}) == safeamp::fp16);

  CHECK(safeamp::parse_format("E4M3") == safeamp::fp8_e4m3);
  CHECK(safeamp::parse_format("bfloat16") == safeamp::bf16);
  // Issue 16: "e3m2fn" is OCP MX FP6 E3M2 (every code finite, max 28); the NaN-reserving one is "e3m2fnnan".
  CHECK(safeamp::parse_format("e3m2fn") == safeamp::fp6_e3m2);
  CHECK(safeamp::parse_format("e3m2fnnan") == safeamp::format_spec{3, 2, safeamp::special_values::finite_nan});
  CHECK(safeamp::parse_format(safeamp::format_name(safeamp::format_spec{6, 9})) == safeamp::format_spec{6, 9});
  CHECK(message_of([] { (void)safeamp::parse_format("e9m2"); }) == "format exponent_bits is 9; accepted: 2..8");
  CHECK(message_of([] { (void)safeamp::parse_format("fp17"); }).find("format name is 'fp17'") == 0);
  CHECK(message_of([] { (void)safeamp::parse_format("e5m2x"); }).find("format name is 'e5m2x'") == 0);
  CHECK(message_of([] { (void)safeamp::parse_format(""); }).find("format name is ''") == 0);
  // Outside input is quoted cut and inert (quoted_input.hpp): 80 bytes and "...", control characters as \xNN.
  CHECK(message_of([] {
          (void)safeamp::parse_format(std::string(5000, 'x'));
        }).find("format name is '" + std::string(80, 'x') + "...'; accepted: ") == 0);
  CHECK(message_of([] { (void)safeamp::parse_format("fp16\x1b[2J"); }).find("format name is 'fp16\\x1b[2J'") == 0);
  for (const char* name : {"fp32", "tf32", "fp16", "bf16", "e4m3", "e5m2"}) {
    CHECK(safeamp::format_name(safeamp::parse_format(name)) == name);
  }
}

TEST_CASE("round_span rejects invalid formats, size mismatches and partial overlap") {
  std::vector<float> a(8, 1.0f), b(7);
  CHECK(message_of([&] { (void)safeamp::round_span(safeamp::format_spec{9, 3}, a, a); }).find("format is e9m3") == 0);
  CHECK(message_of([&] { (void)safeamp::round_span(safeamp::fp16, a, b); }).find("round_span output size is 7") == 0);
  CHECK(message_of([&] {
          (void)safeamp::round_span(safeamp::fp16, std::span<const float>(a).subspan(0, 6),
                                    std::span<float>(a).subspan(1, 6));
        }).find("round_span buffers") == 0);
  CHECK(message_of([&] { (void)safeamp::round_span(safeamp::fp16, a); }) == "no error");  // in place is fine
  std::vector<std::uint16_t> codes(8);
  CHECK(message_of([&] { safeamp::encode_span(safeamp::fp32, a, codes); }).find("encode_span format is fp32") == 0);
}

TEST_CASE("format_name and parse_format round-trip every valid descriptor") {
  // Every valid (E, M, specials), including IEEE-style E4M3 whose plain name "e4m3" means the OCP format.
  // Issue 16: every specials kind, exponent biases away from IEEE's, and unsigned exponent-only formats.
  using sv = safeamp::special_values;
  int checked = 0;
  for (int e = safeamp::min_exponent_bits; e <= safeamp::max_exponent_bits; ++e) {
    for (int m = 0; m <= safeamp::max_mantissa_bits; ++m) {
      for (const auto kind : {sv::ieee, sv::finite_nan, sv::fnuz, sv::finite}) {
        for (int bias_offset = -3; bias_offset <= 5; ++bias_offset) {
          for (const bool is_unsigned : {false, true}) {
            const safeamp::format_spec f{e, m, kind, bias_offset, is_unsigned};
            if (!safeamp::is_valid(f)) continue;
            const std::string name = safeamp::format_name(f);
            INFO(name);
            CHECK(safeamp::parse_format(name) == f);
            ++checked;
          }
        }
      }
    }
  }
  CHECK(checked > 4000);  // 4 kinds x 7 exponent widths x 23 mantissa widths x the biases that fit
  CHECK(safeamp::format_name(safeamp::format_spec{4, 3, safeamp::special_values::ieee}) == "e4m3ieee");
  CHECK(safeamp::parse_format("e4m3") == safeamp::fp8_e4m3);
}

TEST_CASE("ml_dtypes names parse to the formats they name and print back to safeamp's spelling") {
  // Names and parameters from the ml_dtypes README ("Supported types") and the OCP MX v1.0 / OFP8 specs;
  // the descriptors are written out here, not taken from safeamp's named constants.
  using sv = safeamp::special_values;
  struct named {
    const char* ml_dtypes;
    safeamp::format_spec spec;
    const char* canonical;
  };
  const named table[] = {
      {"float8_e4m3fn", {4, 3, sv::finite_nan, 0, false}, "e4m3"},
      {"float8_e5m2", {5, 2, sv::ieee, 0, false}, "e5m2"},
      {"float8_e4m3", {4, 3, sv::ieee, 0, false}, "e4m3ieee"},
      {"float8_e3m4", {3, 4, sv::ieee, 0, false}, "e3m4"},
      {"float8_e4m3fnuz", {4, 3, sv::fnuz, 1, false}, "e4m3fnuz"},        // bias 8
      {"float8_e5m2fnuz", {5, 2, sv::fnuz, 1, false}, "e5m2fnuz"},        // bias 16
      {"float8_e4m3b11fnuz", {4, 3, sv::fnuz, 4, false}, "e4m3b11fnuz"},  // bias 11
      {"float6_e2m3fn", {2, 3, sv::finite, 0, false}, "e2m3fn"},
      {"float6_e3m2fn", {3, 2, sv::finite, 0, false}, "e3m2fn"},
      {"float4_e2m1fn", {2, 1, sv::finite, 0, false}, "e2m1fn"},
      {"float8_e8m0fnu", {8, 0, sv::finite_nan, 0, true}, "e8m0fnu"},
  };
  for (const named& n : table) {
    INFO(n.ml_dtypes);
    CHECK(safeamp::parse_format(n.ml_dtypes) == n.spec);
    CHECK(safeamp::parse_format(n.canonical) == n.spec);
    CHECK(safeamp::format_name(n.spec) == n.canonical);
  }
  // The old NaN-reserving small formats keep explicit names (max 4 and 24, not OCP's 6 and 28).
  CHECK(safeamp::format_name(safeamp::format_spec{2, 1, sv::finite_nan}) == "e2m1fnnan");
  CHECK(safeamp::max_finite(safeamp::parse_format("e2m1fnnan")) == 4.0f);
  CHECK(safeamp::max_finite(safeamp::parse_format("e2m1fn")) == 6.0f);
  CHECK(safeamp::parse_format("fp8_e4m3") == safeamp::parse_format("float8_e4m3fn"));  // fp8_ keeps the alias
  CHECK(safeamp::parse_format("fp4") == safeamp::parse_format("float4_e2m1fn"));
  // A width prefix that disagrees with the format, and an unsigned format with a mantissa, are errors.
  CHECK(message_of([] { (void)safeamp::parse_format("float8_e2m1fn"); }).find("format name is") == 0);
  CHECK(message_of([] { (void)safeamp::parse_format("e4m3fnu"); }).find("format is_unsigned") == 0);
  CHECK(message_of([] { (void)safeamp::parse_format("e8m3fnuz"); }).find("format exponent_bits is 8 with") == 0);
}
