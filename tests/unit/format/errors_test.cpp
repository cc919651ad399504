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
  using safeamp::make_format;
  CHECK(message_of([] { (void)make_format(1, 3); }) == "format exponent_bits is 1; accepted: 2..8");
  CHECK(message_of([] { (void)make_format(9, 3); }) == "format exponent_bits is 9; accepted: 2..8");
  CHECK(message_of([] { (void)make_format(5, 0); }) == "format mantissa_bits is 0; accepted: 1..23");
  CHECK(message_of([] { (void)make_format(5, 24); }) == "format mantissa_bits is 24; accepted: 1..23");
  CHECK(message_of([] { (void)make_format(8, 3, safeamp::special_values::finite_nan); }).find("finite_nan") !=
        std::string::npos);
  CHECK(make_format(4, 3, safeamp::special_values::finite_nan) == safeamp::fp8_e4m3);
  CHECK(make_format(5, 10) == safeamp::fp16);

  CHECK(safeamp::parse_format("E4M3") == safeamp::fp8_e4m3);
  CHECK(safeamp::parse_format("bfloat16") == safeamp::bf16);
  CHECK(safeamp::parse_format("e3m2fn") == safeamp::format_spec{3, 2, safeamp::special_values::finite_nan});
  CHECK(safeamp::parse_format(safeamp::format_name(safeamp::format_spec{6, 9})) == safeamp::format_spec{6, 9});
  CHECK(message_of([] { (void)safeamp::parse_format("e9m2"); }) == "format exponent_bits is 9; accepted: 2..8");
  CHECK(message_of([] { (void)safeamp::parse_format("fp17"); }).find("format name is 'fp17'") == 0);
  CHECK(message_of([] { (void)safeamp::parse_format("e5m2x"); }).find("format name is 'e5m2x'") == 0);
  CHECK(message_of([] { (void)safeamp::parse_format(""); }).find("format name is ''") == 0);
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
  int checked = 0;
  for (int e = safeamp::min_exponent_bits; e <= safeamp::max_exponent_bits; ++e) {
    for (int m = safeamp::min_mantissa_bits; m <= safeamp::max_mantissa_bits; ++m) {
      for (const auto sv : {safeamp::special_values::ieee, safeamp::special_values::finite_nan}) {
        const safeamp::format_spec f{e, m, sv};
        if (!safeamp::is_valid(f)) continue;
        const std::string name = safeamp::format_name(f);
        INFO(name);
        CHECK(safeamp::parse_format(name) == f);
        ++checked;
      }
    }
  }
  CHECK(checked > 2 * 6 * 23);
  CHECK(safeamp::format_name(safeamp::format_spec{4, 3, safeamp::special_values::ieee}) == "e4m3ieee");
  CHECK(safeamp::parse_format("e4m3") == safeamp::fp8_e4m3);
}
