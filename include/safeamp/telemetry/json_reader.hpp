// Strict reader for safeamp's std-only JSON (json.hpp): malformed, truncated, duplicate-member and too-deep
// input throws safeamp::error with the byte offset; typed accessors name the field they reject.
#pragma once

#include <charconv>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <set>
#include <string>
#include <string_view>
#include <system_error>

#include "safeamp/error.hpp"
#include "safeamp/quoted_input.hpp"
#include "safeamp/telemetry/json.hpp"

namespace safeamp::json {

// ---- reading ------------------------------------------------------------------------------------
namespace detail {
class parser {
 public:
  explicit parser(std::string_view text) : s_(text) {}
  value parse_document() {
    value v = parse_value(0);
    skip_space();
    if (pos_ != s_.size()) fail("trailing characters after the JSON value");
    return v;
  }

 private:
  static constexpr int max_depth = 64;             // nested arrays/objects; deeper input is refused
  static constexpr std::size_t small_object = 16;  // members checked for duplicates by linear search
  static constexpr std::size_t max_quoted = 60;    // characters of a member name quoted in a message
  [[nodiscard]] static std::string bounded(const std::string& s) {
    return s.size() <= max_quoted ? s : s.substr(0, max_quoted) + "...";
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw error("json", "malformed at byte " + std::to_string(pos_) + " (" + what + ")",
                "a complete, well-formed JSON document");
  }
  void skip_space() noexcept {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) ++pos_;
  }
  char peek() {
    skip_space();
    if (pos_ >= s_.size()) fail("unexpected end of input (truncated?)");
    return s_[pos_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  void literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) fail("unknown literal");
    pos_ += word.size();
  }
  value parse_value(int depth) {
    if (depth > max_depth) fail("nested too deeply");
    const char c = peek();
    value v;
    if (c == '{') {
      v.type = kind::object;
      std::set<std::string, std::less<>> seen;
      ++pos_;
      if (peek() == '}') return ++pos_, v;
      while (true) {
        if (peek() != '"') fail("expected a member name");
        std::string key = parse_string();
        expect(':');
        // Linear search while the object is small; a set past that, so a huge object stays O(n log n).
        const bool duplicate = v.members.size() < small_object ? find(v, key) != nullptr : !seen.insert(key).second;
        if (v.members.size() + 1 == small_object) {
          for (const member_entry& m : v.members) seen.insert(m.key);
          seen.insert(key);
        }
        if (duplicate) fail("duplicate member '" + bounded(key) + "'");
        value member_value = parse_value(depth + 1);
        v.members.push_back(member_entry{std::move(key), std::move(member_value)});
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.type = kind::array;
      ++pos_;
      if (peek() == ']') return ++pos_, v;
      while (true) {
        v.items.push_back(parse_value(depth + 1));
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.type = kind::string;
      v.text = parse_string();
      return v;
    }
    if (c == 't') return literal("true"), v.type = kind::boolean, v.boolean = true, v;
    if (c == 'f') return literal("false"), v.type = kind::boolean, v;
    if (c == 'n') return literal("null"), v;
    v.type = kind::number;
    v.text = parse_number();
    return v;
  }
  std::string parse_number() {
    const std::size_t start = pos_;
    if (pos_ < s_.size() && s_[pos_] == '-') ++pos_;
    const auto digits = [&] {
      const std::size_t d0 = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      return pos_ - d0;
    };
    const std::size_t int_start = pos_;
    if (digits() == 0) fail("expected a value");
    // JSON's int is 0 or a digit 1-9 followed by digits: "0002000" and "-01" are not JSON numbers.
    if (s_[int_start] == '0' && pos_ - int_start > 1) {
      pos_ = int_start + 1;  // the offset of the digit after the 0
      fail("leading zero in a number (JSON allows 0 but not 0 followed by digits)");
    }
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (digits() == 0) fail("expected digits after '.'");
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (digits() == 0) fail("expected exponent digits");
    }
    return std::string(s_.substr(start, pos_ - start));
  }
  std::string parse_string() {
    ++pos_;  // opening quote
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) fail("unterminated string (truncated?)");
      const char c = s_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) fail("unterminated escape");
      const char e = s_[pos_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          if (pos_ + 4 > s_.size()) fail("truncated \\u escape");
          unsigned code = 0;
          const auto r = std::from_chars(s_.data() + pos_, s_.data() + pos_ + 4, code, 16);
          if (r.ec != std::errc{} || r.ptr != s_.data() + pos_ + 4) fail("bad \\u escape");
          pos_ += 4;
          if (code >= 0x80) fail("only ASCII \\u escapes are supported");
          out += static_cast<char>(code);
          break;
        }
        default:
          fail("unknown escape");
      }
    }
  }
  std::string_view s_;
  std::size_t pos_ = 0;
};
}  // namespace detail

/// Parses a whole JSON document; throws safeamp::error with the byte offset on malformed or truncated input.
[[nodiscard]] inline value parse(std::string_view text) { return detail::parser(text).parse_document(); }

// ---- typed access (each throws safeamp::error naming the field) -----------------------------------
[[nodiscard]] inline const value& member(const value& obj, std::string_view key, std::string_view where) {
  if (obj.type != kind::object) throw error(std::string(where), "not an object", "a JSON object");
  const value* v = find(obj, key);
  if (v == nullptr) throw error(std::string(where) + "." + std::string(key), "missing", "a required member");
  return *v;
}

template <class T>
[[nodiscard]] T to_number(const value& v, std::string_view field) {
  if (v.type != kind::number) throw error(std::string(field), "not a number", "a JSON number");
  T out{};
  const char* first = v.text.data();
  const char* last = first + v.text.size();
  const auto r = std::from_chars(first, last, out);
  if (r.ec != std::errc{} || r.ptr != last) {
    const std::string shown = v.text.size() <= 40 ? v.text : v.text.substr(0, 40) + "...";
    throw error(std::string(field), shown, "a number representable as the field's type");
  }
  return out;
}

[[nodiscard]] inline bool to_bool(const value& v, std::string_view field) {
  if (v.type != kind::boolean) throw error(std::string(field), "not a boolean", "true or false");
  return v.boolean;
}

[[nodiscard]] inline const std::string& to_string_value(const value& v, std::string_view field) {
  if (v.type != kind::string) throw error(std::string(field), "not a string", "a JSON string");
  return v.text;
}

/// Throws when `obj` has a member not in `known` (catches misspelled keys instead of silently defaulting), naming the
/// member through quoted_input (cut, control bytes escaped: a raw ESC used to reach the message) and listing `known`.
inline void reject_unknown_members(const value& obj, std::initializer_list<std::string_view> known,
                                   std::string_view where) {
  for (const member_entry& m : obj.members) {
    bool ok = false;
    for (std::string_view k : known) ok = ok || m.key == k;
    if (!ok) {
      std::string names;
      for (std::string_view k : known) names.append(names.empty() ? "" : ", ").append(k);
      throw error(std::string(where) + " member", quoted_input(m.key) + " (unknown)",
                  "only the documented members: " + names);
    }
  }
}

/// The envelope of a versioned safeamp JSON document (the checkpoints): an object with only `members`, whose "format"
/// is `format` and whose "version" is `version`. Throws safeamp::error naming `where`.format, `where`.version or the
/// unknown member.
inline void check_envelope(const value& doc, std::string_view where, std::initializer_list<std::string_view> members,
                           std::string_view format, std::int32_t version) {
  const std::string w(where);
  if (doc.type != kind::object) throw error(w, "not a JSON object", "a JSON object");
  reject_unknown_members(doc, members, where);
  const std::string& f = to_string_value(member(doc, "format", where), w + ".format");
  if (f != format) throw error(w + ".format", quoted_input(f), std::string(format));
  const auto v = to_number<std::int32_t>(member(doc, "version", where), w + ".version");
  if (v != version) throw error(w + ".version", std::to_string(v), std::to_string(version));
}

}  // namespace safeamp::json
