// Byte arithmetic for the memory ledger: 64-bit counts with overflow checks, decimal (GB = 10^9) and binary
// (GiB = 2^30) units kept apart, parsing of sizes users type ("24GB", "24GiB", "3.2e9") and labelled printing.
#pragma once

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <string_view>

#include "safeamp/error.hpp"
#include "safeamp/quoted_input.hpp"

namespace safeamp {

/// Units a byte count is printed or parsed in. Decimal units are powers of 10, binary ones powers of 2;
/// a printed figure always carries its unit so the two are never confused.
enum class byte_unit : std::uint8_t { byte, kb, mb, gb, tb, kib, mib, gib, tib };

[[nodiscard]] constexpr std::uint64_t bytes_per(byte_unit u) noexcept {
  switch (u) {
    case byte_unit::byte:
      return 1;
    case byte_unit::kb:
      return 1'000ULL;
    case byte_unit::mb:
      return 1'000'000ULL;
    case byte_unit::gb:
      return 1'000'000'000ULL;
    case byte_unit::tb:
      return 1'000'000'000'000ULL;
    case byte_unit::kib:
      return 1ULL << 10;
    case byte_unit::mib:
      return 1ULL << 20;
    case byte_unit::gib:
      return 1ULL << 30;
    case byte_unit::tib:
      return 1ULL << 40;
  }
  return 1;
}

[[nodiscard]] constexpr std::string_view unit_name(byte_unit u) noexcept {
  switch (u) {
    case byte_unit::byte:
      return "B";
    case byte_unit::kb:
      return "KB";
    case byte_unit::mb:
      return "MB";
    case byte_unit::gb:
      return "GB";
    case byte_unit::tb:
      return "TB";
    case byte_unit::kib:
      return "KiB";
    case byte_unit::mib:
      return "MiB";
    case byte_unit::gib:
      return "GiB";
    case byte_unit::tib:
      return "TiB";
  }
  return "B";
}

inline constexpr std::uint64_t gigabyte_bytes = 1'000'000'000ULL;  // GB, as the ZeRO paper uses it
inline constexpr std::uint64_t gibibyte_bytes = 1ULL << 30;        // GiB, as nvidia-smi/PyTorch use it

/// Largest byte count the ledger accepts (2^62, ~4.6 EB): far above any device, and leaves room for sums.
inline constexpr std::uint64_t max_ledger_bytes = std::uint64_t{1} << 62;

/// a + b, throwing safeamp::error (naming `what`) instead of wrapping around.
[[nodiscard]] constexpr std::uint64_t checked_add(std::uint64_t a, std::uint64_t b, std::string_view what) {
  if (a > max_ledger_bytes || b > max_ledger_bytes - a) {
    throw error(what, std::to_string(a) + " + " + std::to_string(b) + " bytes", "a total <= 2^62 bytes");
  }
  return a + b;
}

/// a * b, throwing safeamp::error (naming `what`) instead of wrapping around.
[[nodiscard]] constexpr std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b, std::string_view what) {
  if (a != 0 && b > max_ledger_bytes / a) {
    throw error(what, std::to_string(a) + " x " + std::to_string(b) + " bytes", "a product <= 2^62 bytes");
  }
  return a * b;
}

/// a - b for a >= b; throws when b > a (a negative byte count is always a bug upstream).
[[nodiscard]] constexpr std::uint64_t checked_sub(std::uint64_t a, std::uint64_t b, std::string_view what) {
  if (b > a) throw error(what, std::to_string(a) + " - " + std::to_string(b) + " bytes", "a result >= 0");
  return a - b;
}

/// A non-negative real byte figure (e.g. a formula's result) rounded up to whole bytes, with range checks.
[[nodiscard]] inline std::uint64_t bytes_from_real(double bytes, std::string_view what) {
  if (!std::isfinite(bytes) || bytes < 0.0 || bytes > static_cast<double>(max_ledger_bytes)) {
    throw error(what, std::to_string(bytes) + " bytes", "a finite byte count in [0, 2^62]");
  }
  return static_cast<std::uint64_t>(std::ceil(bytes));
}

/// The figure in `unit` as a double (for printing only; the ledger itself stays in integers).
[[nodiscard]] constexpr double in_unit(std::uint64_t bytes, byte_unit unit) noexcept {
  return static_cast<double>(bytes) / static_cast<double>(bytes_per(unit));
}

/// Most decimal places format_bytes prints: 40, the places of 2^-40 (one byte in TiB, the finest step of any unit);
/// more could only append zeros.
inline constexpr int max_byte_decimals = 40;

/// "21.60 GB", "20.12 GiB", "512 B": the value with its unit, `decimals` places (bytes print as integers). The digits
/// are the exact quotient bytes / unit, worked in integers and rounded to nearest, ties to even, so every count up to
/// UINT64_MAX prints in full with its unit (a fixed buffer cut "18446744073709551.615 KB" at 40 places, and a double
/// quotient has only 15-17 significant digits). Throws safeamp::error for decimals outside [0, 40].
[[nodiscard]] inline std::string format_bytes(std::uint64_t bytes, byte_unit unit, int decimals = 2) {
  if (decimals < 0 || decimals > max_byte_decimals) {
    throw error("format_bytes decimals", std::to_string(decimals),
                "an integer in [0, 40] (2^-40, a byte in TiB, has 40 decimal places)");
  }
  const std::string unit_text(unit_name(unit));
  if (unit == byte_unit::byte) return std::to_string(bytes) + " " + unit_text;
  const std::uint64_t per = bytes_per(unit);  // <= 2^40: 10 x a remainder stays below 2^44
  std::uint64_t whole = bytes / per;          // <= UINT64_MAX / 1000: the carry of a round-up cannot wrap
  std::uint64_t rest = bytes % per;
  std::string places;
  for (int i = 0; i < decimals; ++i) {
    rest *= 10;
    places += static_cast<char>('0' + rest / per);
    rest %= per;
  }
  // What is left is rest / per of the last place: above a half rounds up, a half rounds to the even digit.
  const bool last_odd = decimals > 0 ? (places.back() - '0') % 2 == 1 : whole % 2 == 1;
  if (2 * rest > per || (2 * rest == per && last_odd)) {
    std::size_t i = places.size();
    while (i > 0 && places[i - 1] == '9') places[--i] = '0';
    if (i > 0) {
      ++places[i - 1];
    } else {
      ++whole;
    }
  }
  std::string out = std::to_string(whole);
  if (decimals > 0) out.append(".").append(places);
  return out.append(" ").append(unit_text);
}

/// Parses a unit name, ignoring case ("GB", "gib", "MiB", "B", "bytes"). Throws safeamp::error otherwise.
[[nodiscard]] inline byte_unit parse_byte_unit(std::string_view text) {
  std::string s;
  for (char c : text) s.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  struct entry {
    std::string_view name;
    byte_unit unit;
  };
  static constexpr entry names[] = {
      {"", byte_unit::byte},   {"b", byte_unit::byte},  {"byte", byte_unit::byte}, {"bytes", byte_unit::byte},
      {"kb", byte_unit::kb},   {"mb", byte_unit::mb},   {"gb", byte_unit::gb},     {"tb", byte_unit::tb},
      {"kib", byte_unit::kib}, {"mib", byte_unit::mib}, {"gib", byte_unit::gib},   {"tib", byte_unit::tib},
  };
  for (const entry& e : names) {
    if (s == e.name) return e.unit;
  }
  throw error("size unit", quoted_input(text), "B, KB, MB, GB, TB (powers of 10) or KiB, MiB, GiB, TiB (powers of 2)");
}

/// Parses a size: a number (decimal or scientific) and an optional unit, e.g. "24GB" (24e9), "24GiB"
/// (24 x 2^30), "3.2e9" (bytes), "512 MiB", "0.34GB". Rounds to the nearest byte. Throws safeamp::error
/// naming `field` for a negative, NaN, infinite or > 2^62-byte value, a missing number or an unknown unit.
[[nodiscard]] inline std::uint64_t parse_bytes(std::string_view text, std::string_view field = "size") {
  std::string s(text);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  std::size_t start = 0;
  while (start < s.size() && std::isspace(static_cast<unsigned char>(s[start]))) ++start;
  s = s.substr(start);
  // Split at the first letter that cannot belong to a number ('e'/'E' followed by a digit or sign is an exponent).
  std::size_t split = 0;
  while (split < s.size()) {
    const char c = s[split];
    const bool exponent =
        (c == 'e' || c == 'E') && split > 0 && split + 1 < s.size() &&
        (std::isdigit(static_cast<unsigned char>(s[split + 1])) || s[split + 1] == '-' || s[split + 1] == '+');
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '+' || exponent) {
      split += exponent ? 2 : 1;
    } else {
      break;
    }
  }
  const std::string number = s.substr(0, split);
  std::string unit_text = s.substr(split);
  while (!unit_text.empty() && std::isspace(static_cast<unsigned char>(unit_text.front()))) unit_text.erase(0, 1);
  const std::string accepted = "a size >= 0 such as 24GB, 24GiB, 512MiB or 3.2e9 (bytes), at most 2^62 bytes";
  if (number.empty()) throw error(field, quoted_input(text), accepted);
  std::size_t used = 0;
  double value = 0.0;
  try {
    value = std::stod(number, &used);
  } catch (const std::exception&) {
    throw error(field, quoted_input(text), accepted);
  }
  if (used != number.size()) throw error(field, quoted_input(text), accepted);
  byte_unit unit = byte_unit::byte;
  try {
    unit = parse_byte_unit(unit_text);
  } catch (const error&) {
    throw error(field, quoted_input(text),
                "a size with a unit of B, KB, MB, GB, TB (powers of 10) or KiB, MiB, GiB, TiB (powers of 2)");
  }
  const long double bytes = static_cast<long double>(value) * static_cast<long double>(bytes_per(unit));
  if (!std::isfinite(value) || value < 0.0 || bytes > static_cast<long double>(max_ledger_bytes)) {
    throw error(field, quoted_input(text), accepted);
  }
  return static_cast<std::uint64_t>(std::llround(static_cast<double>(bytes)));
}

}  // namespace safeamp
