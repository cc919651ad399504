// Names of formats: printing a format_spec and parsing the names and aliases users type.
#pragma once

#include <cctype>
#include <charconv>
#include <string>
#include <string_view>

#include "safeamp/format/format_spec.hpp"

namespace safeamp {

inline std::string format_name(format_spec f) {
  if (f == fp32) return "fp32";
  if (f == tf32) return "tf32";
  if (f == fp16) return "fp16";
  if (f == bf16) return "bf16";
  if (f == fp8_e4m3) return "e4m3";
  if (f == fp8_e5m2) return "e5m2";
  // Appended piece by piece: g++ 12 -O3 gives a false -Wrestrict on "literal" + std::string&&.
  std::string s = "e";
  s += std::to_string(f.exponent_bits);
  s += 'm';
  s += std::to_string(f.mantissa_bits);
  if (f.specials == special_values::finite_nan) s += "fn";
  // "e4m3" alone names OCP E4M3 (finite_nan); the IEEE-style E4M3 (with infinities, max 240) is spelled out.
  if (f.specials == special_values::ieee && f.exponent_bits == 4 && f.mantissa_bits == 3) s += "ieee";
  return s;
}

inline format_spec parse_format(std::string_view name) {
  std::string s;
  for (char c : name) {
    if (c != ' ' && c != '\t') s.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  struct alias { std::string_view name; format_spec spec; };
  static constexpr alias aliases[] = {
      {"fp32", fp32},     {"float32", fp32},  {"f32", fp32},         {"float", fp32},     {"single", fp32},
      {"tf32", tf32},     {"tensorfloat32", tf32},
      {"fp16", fp16},     {"float16", fp16},  {"f16", fp16},         {"half", fp16},      {"binary16", fp16},
      {"bf16", bf16},     {"bfloat16", bf16},
      {"e4m3", fp8_e4m3}, {"fp8_e4m3", fp8_e4m3}, {"e4m3fn", fp8_e4m3}, {"fp8e4m3", fp8_e4m3}, {"fp8-e4m3", fp8_e4m3},
      {"e5m2", fp8_e5m2}, {"fp8_e5m2", fp8_e5m2}, {"fp8e5m2", fp8_e5m2}, {"fp8-e5m2", fp8_e5m2},
  };
  for (const alias& a : aliases) {
    if (s == a.name) return a.spec;
  }
  // Generic e<E>m<M>[fn|ieee] (ieee is the default; needed only to name IEEE-style E4M3).
  if (s.size() >= 4 && s[0] == 'e') {
    const char* p = s.data() + 1;
    const char* end = s.data() + s.size();
    int e = 0, m = 0;
    auto r1 = std::from_chars(p, end, e);
    if (r1.ec == std::errc{} && r1.ptr < end && *r1.ptr == 'm') {
      auto r2 = std::from_chars(r1.ptr + 1, end, m);
      if (r2.ec == std::errc{}) {
        std::string_view rest(r2.ptr, static_cast<std::size_t>(end - r2.ptr));
        if (rest.empty() || rest == "fn" || rest == "ieee") {
          return make_format(e, m, rest == "fn" ? special_values::finite_nan : special_values::ieee);
        }
      }
    }
  }
  throw error("format name", "'" + std::string(name) + "'",
              "fp32 (float32, f32, float, single), tf32, fp16 (float16, f16, half, binary16), bf16 (bfloat16), "
              "e4m3 (fp8_e4m3, e4m3fn), e5m2 (fp8_e5m2), or e<E>m<M>[fn|ieee] with E in 2..8 (2..7 with fn) and M in 1..23");
}

}  // namespace safeamp
