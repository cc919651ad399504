// Names of the block-scaled formats: mxfp8 (E4M3 elements), mxfp8_e5m2, mxfp6 (E2M3), mxfp6_e3m2, mxfp4, nvfp4;
// constexpr parsing (for policy strings) and printing.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "safeamp/error.hpp"
#include "safeamp/format/block_format.hpp"
#include "safeamp/format/format_names.hpp"
#include "safeamp/quoted_input.hpp"

namespace safeamp {

namespace detail {
struct block_alias {
  std::string_view name;
  block_format spec;
};
inline constexpr std::array<block_alias, 7> block_aliases = {{
    {"mxfp8", mxfp8_e4m3},
    {"mxfp8-e4m3", mxfp8_e4m3},
    {"mxfp8-e5m2", mxfp8_e5m2},
    {"mxfp6", mxfp6_e2m3},
    {"mxfp6-e2m3", mxfp6_e2m3},
    {"mxfp6-e3m2", mxfp6_e3m2},
    {"mxfp4", mxfp4},
}};

/// mxfp8, mxfp8_e4m3, mxfp8_e5m2, mxfp6 (= e2m3), mxfp6_e2m3, mxfp6_e3m2, mxfp4, nvfp4 (case-insensitive,
/// '-' and '_' alike).
[[nodiscard]] constexpr bool parse_block_format_name(std::string_view s, block_format& out) noexcept {
  if (same_name(s, "nvfp4")) {
    out = nvfp4;
    return true;
  }
  for (const block_alias& a : block_aliases) {
    if (same_name(s, a.name)) {
      out = a.spec;
      return true;
    }
  }
  return false;
}
}  // namespace detail

inline constexpr std::string_view block_format_names_accepted =
    "mxfp8 (= mxfp8_e4m3), mxfp8_e5m2, mxfp6 (= mxfp6_e2m3), mxfp6_e3m2, mxfp4, nvfp4";

/// The canonical name of one of the named block formats, else "<element>/<scale>x<block_size>".
inline std::string block_format_name(const block_format& b) {
  if (b == nvfp4) return "nvfp4";
  if (b == mxfp8_e4m3) return "mxfp8";
  if (b == mxfp6_e2m3) return "mxfp6";
  for (const detail::block_alias& a : detail::block_aliases) {
    if (a.spec == b) {
      std::string s(a.name);
      for (char& c : s) c = c == '-' ? '_' : c;
      return s;
    }
  }
  std::string s = format_name(b.element);
  s += '/';
  s += format_name(b.scale);
  s += 'x';
  s += std::to_string(b.block_size);
  return s;
}

inline block_format parse_block_format(std::string_view name) {
  block_format b{};
  if (detail::parse_block_format_name(name, b)) return b;
  throw error("block format name", quoted_input(name), std::string(block_format_names_accepted));
}

}  // namespace safeamp
