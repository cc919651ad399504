// Outside input quoted in an error message without serialising it (docs/inputs.md): cut to a bound with "..." and
// its control characters escaped, so a megabyte-long value or an ESC sequence costs one short, inert line.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace safeamp {

/// Characters of a value that a message quotes before cutting it.
inline constexpr std::size_t quoted_input_chars = 80;

/// A control character as safeamp treats one in outside text (names, messages): a byte below 0x20, or 0x7f (DEL).
[[nodiscard]] constexpr bool is_control_byte(char ch) noexcept {
  const auto c = static_cast<unsigned char>(ch);
  return c < 0x20U || c == 0x7fU;
}

/// `text` for a message, without quotes: control characters (bytes below 0x20, and 0x7f) written as \xNN, the
/// result cut to at most `max_chars` bytes (escapes counted as written, so the bound holds for any input; never inside
/// a UTF-8 character or an escape) followed by "..." when anything was cut.
[[nodiscard]] inline std::string bounded_input(std::string_view text, std::size_t max_chars = quoted_input_chars) {
  constexpr char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size() < max_chars ? text.size() + 8 : max_chars + 3);
  std::size_t i = 0;
  for (; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    const bool control = is_control_byte(text[i]);
    if (out.size() + (control ? 4 : 1) > max_chars) break;
    if (control) {
      // Characters one by one: GCC 12 warned a false -Wrestrict on appending the two-character literal here.
      out += '\\';
      out += 'x';
      out += hex[c >> 4U];
      out += hex[c & 0xfU];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (i == text.size()) return out;
  // Cut: drop a UTF-8 character's first bytes when its next byte did not fit (continuation bytes are 10xxxxxx).
  if ((static_cast<unsigned char>(text[i]) & 0xC0U) == 0x80U) {
    while (!out.empty() && (static_cast<unsigned char>(out.back()) & 0xC0U) == 0x80U) out.pop_back();
    if (!out.empty() && static_cast<unsigned char>(out.back()) >= 0xC0U) out.pop_back();
  }
  return out + "...";
}

/// `text` for a message in single quotes: 'bounded_input(text)'.
[[nodiscard]] inline std::string quoted_input(std::string_view text, std::size_t max_chars = quoted_input_chars) {
  // Appended rather than "'" + ...: GCC 12 warns a false -Wrestrict on that inlined operator+.
  std::string out = "'";
  out.append(bounded_input(text, max_chars)).append("'");
  return out;
}

}  // namespace safeamp
