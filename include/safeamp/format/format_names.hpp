// Names of formats: printing a format_spec and parsing the names and aliases users type. The names follow
// ml_dtypes (float8_e4m3fn, float4_e2m1fn, float8_e4m3b11fnuz, float8_e8m0fnu, ...) and the OCP specs.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "safeamp/format/format_spec.hpp"
#include "safeamp/quoted_input.hpp"

namespace safeamp {

// Grammar (case-insensitive, '-' and '_' alike, blanks ignored by parse_format):
//   [float<N>_ | fp<N>_ | fp<N>] e<E>m<M> [b<B>] [suffix]      N, when given, must be the total width
//   suffix  ""/"ieee"  ieee: inf and NaN in the top binade (the default)
//           "fn"       ml_dtypes/OCP "finite": no infinity. 8 bits and more keep one NaN (all ones: e4m3fn,
//                      max 448); narrower formats have no NaN at all (OCP MX FP6/FP4: e2m1fn max 6,
//                      e2m3fn max 7.5, e3m2fn max 28)
//           "fnnan"    no infinity, all ones is NaN, at any width (before 0.2 "e2m1fn" meant this: max 4)
//           "finite"   no infinity and no NaN, at any width (e4m3finite: max 480)
//           "fnuz"     no infinity, no -0, the one NaN is 0x80; bias 2^(E-1) unless b<B> says otherwise
//           "fnu"      unsigned exponent-only with a NaN (e8m0fnu: the OCP MX block scale)
//   b<B>    the exponent bias B when it is not the kind's default (e4m3b11fnuz: bias 11)

namespace detail {

[[nodiscard]] constexpr char name_char(char c) noexcept {
  if (c >= 'A' && c <= 'Z') return static_cast<char>(c - 'A' + 'a');
  return c == '_' ? '-' : c;
}
[[nodiscard]] constexpr bool same_name(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (name_char(a[i]) != name_char(b[i])) return false;
  }
  return true;
}
[[nodiscard]] constexpr bool starts_with_name(std::string_view s, std::string_view prefix) noexcept {
  return s.size() >= prefix.size() && same_name(s.substr(0, prefix.size()), prefix);
}
/// Reads a decimal number of 1..3 digits at the front of s; returns how many characters it used (0: none).
[[nodiscard]] constexpr std::size_t read_number(std::string_view s, int& out) noexcept {
  std::size_t i = 0;
  int v = 0;
  while (i < s.size() && i < 3 && s[i] >= '0' && s[i] <= '9') v = v * 10 + (s[i++] - '0');
  if (i < s.size() && s[i] >= '0' && s[i] <= '9') return 0;  // 4 digits or more: not a small number
  out = v;
  return i;
}

struct format_alias {
  std::string_view name;
  format_spec spec;
};
inline constexpr std::array<format_alias, 20> format_aliases = {{
    {"fp32", fp32},     {"float32", fp32},  {"f32", fp32},           {"float", fp32},   {"single", fp32},
    {"full", fp32},     {"tf32", tf32},     {"tensorfloat32", tf32}, {"fp16", fp16},    {"float16", fp16},
    {"f16", fp16},      {"half", fp16},     {"binary16", fp16},      {"bf16", bf16},    {"bfloat16", bf16},
    {"e4m3", fp8_e4m3}, {"e5m2", fp8_e5m2}, {"fp4", fp4_e2m1},       {"fp6", fp6_e2m3}, {"e8m0", e8m0},
}};

/// The generic e<E>m<M>[b<B>][suffix] (after any float<N>_ prefix); the syntax only (see is_valid).
[[nodiscard]] constexpr bool parse_generic_format(std::string_view s, format_spec& out) noexcept {
  if (s.empty() || name_char(s[0]) != 'e') return false;
  int e = 0, m = 0, bias = 0;
  std::size_t at = 1;
  std::size_t used = read_number(s.substr(at), e);
  if (used == 0) return false;
  at += used;
  if (at >= s.size() || name_char(s[at]) != 'm') return false;
  ++at;
  used = read_number(s.substr(at), m);
  if (used == 0) return false;
  at += used;
  bool explicit_bias = false;
  if (at < s.size() && name_char(s[at]) == 'b') {
    used = read_number(s.substr(at + 1), bias);
    if (used == 0) return false;
    explicit_bias = true;
    at += 1 + used;
  }
  const std::string_view suffix = s.substr(at);
  const int width = 1 + e + m;
  format_spec f{e, m, special_values::ieee, 0, false};
  int default_offset = 0;
  if (suffix.empty() || same_name(suffix, "ieee")) {
    f.specials = special_values::ieee;
  } else if (same_name(suffix, "fn")) {
    f.specials = width >= 8 ? special_values::finite_nan : special_values::finite;
  } else if (same_name(suffix, "fnnan")) {
    f.specials = special_values::finite_nan;
  } else if (same_name(suffix, "finite")) {
    f.specials = special_values::finite;
  } else if (same_name(suffix, "fnuz")) {
    f.specials = special_values::fnuz;
    default_offset = 1;
  } else if (same_name(suffix, "fnu")) {
    f.specials = special_values::finite_nan;
    f.is_unsigned = true;
  } else {
    return false;
  }
  f.bias_offset = explicit_bias && e >= 1 && e <= 30 ? bias - ((1 << (e - 1)) - 1) : default_offset;
  out = f;
  return true;
}

/// A format name or alias: the table above, then the generic form with an optional float<N>_/fp<N>_ prefix
/// whose N must be the format's width (float8_e4m3fn, fp8_e5m2, float4_e2m1fn, float8_e8m0fnu). Syntax only:
/// out may be invalid (parse_format_name checks).
[[nodiscard]] constexpr bool parse_format_syntax(std::string_view s, format_spec& out) noexcept {
  for (const format_alias& a : format_aliases) {
    if (same_name(s, a.name)) {
      out = a.spec;
      return true;
    }
  }
  int width = 0;
  std::string_view rest = s;
  bool prefixed = false;
  bool ml_dtypes_prefix = false;
  for (std::string_view prefix : {std::string_view("float"), std::string_view("fp")}) {
    if (!prefixed && starts_with_name(rest, prefix)) {
      const std::size_t used = read_number(rest.substr(prefix.size()), width);
      if (used == 0) return false;
      ml_dtypes_prefix = prefix == "float";
      rest = rest.substr(prefix.size() + used);
      if (!rest.empty() && name_char(rest[0]) == '-') rest = rest.substr(1);
      prefixed = true;
    }
  }
  format_spec f{};
  // float<N>_ names are ml_dtypes' own, read literally (float8_e4m3 is its IEEE-style E4M3, max 240); after
  // fp<N>_ the short aliases apply (fp8_e4m3 is OCP E4M3, as "e4m3" is).
  bool found = false;
  if (prefixed && !ml_dtypes_prefix) {
    for (const format_alias& a : format_aliases) {
      if (same_name(rest, a.name)) f = a.spec, found = true;
    }
  }
  if (!found && !parse_generic_format(rest, f)) return false;
  if (prefixed && is_valid(f) && width != total_bits(f)) return false;
  out = f;
  return true;
}

/// parse_format_syntax and a valid descriptor.
[[nodiscard]] constexpr bool parse_format_name(std::string_view s, format_spec& out) noexcept {
  format_spec f{};
  if (!parse_format_syntax(s, f) || !is_valid(f)) return false;
  out = f;
  return true;
}

}  // namespace detail

/// The canonical spelling: parse_format(format_name(f)) == f for every valid f.
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
  const int ieee_bias = (1 << (f.exponent_bits - 1)) - 1;
  const int default_offset = f.specials == special_values::fnuz ? 1 : 0;
  if (f.bias_offset != default_offset) {
    s += 'b';
    s += std::to_string(ieee_bias + f.bias_offset);
  }
  const bool wide = total_bits(f) >= 8;
  switch (f.specials) {
    case special_values::ieee:
      // "e4m3" alone names OCP E4M3 (fn); the IEEE-style E4M3 (with infinities, max 240) is spelled out.
      if (f.exponent_bits == 4 && f.mantissa_bits == 3 && f.bias_offset == 0) s += "ieee";
      break;
    case special_values::finite_nan:
      s += f.is_unsigned ? "fnu" : wide ? "fn" : "fnnan";
      break;
    case special_values::fnuz:
      s += "fnuz";
      break;
    case special_values::finite:
      s += wide ? "finite" : "fn";
      break;
  }
  return s;
}

inline constexpr std::string_view format_names_accepted =
    "fp32 (float32, f32, float, single, full), tf32, fp16 (float16, f16, half, binary16), bf16 (bfloat16), "
    "e4m3 (e4m3fn, float8_e4m3fn), e5m2 (float8_e5m2), e4m3fnuz, e5m2fnuz, e4m3b11fnuz, e3m4, e4m3ieee, "
    "e2m1fn (fp4, float4_e2m1fn), e2m3fn (fp6), e3m2fn, e8m0fnu (e8m0), or "
    "[float<N>_]e<E>m<M>[b<bias>][ieee|fn|fnnan|finite|fnuz|fnu] with E in 2..8 and M in 1..23 "
    "(fn: one NaN at 8 bits and more, no NaN below; fnnan: NaN-reserving at any width)";

inline format_spec parse_format(std::string_view name) {
  std::string s;
  for (char c : name) {
    if (c != ' ' && c != '\t') s.push_back(c);
  }
  format_spec f{};
  if (detail::parse_format_syntax(s, f)) {
    // A well-formed name of an invalid format: make_format names the field and its accepted range.
    return make_format(exponent_width{f.exponent_bits}, mantissa_width{f.mantissa_bits}, f.specials, f.bias_offset,
                       f.is_unsigned);
  }
  throw error("format name", quoted_input(name), std::string(format_names_accepted));
}

}  // namespace safeamp
