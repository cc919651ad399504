// A small std-only JSON value, writer and strict reader for checkpoints and telemetry records (the core may
// not depend on nlohmann). Numbers keep their text so that floats round-trip bit-exactly: they are written
// with std::to_chars (shortest text that reads back to the same bits) and read with std::from_chars.
#pragma once

#include <charconv>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "safeamp/error.hpp"

namespace safeamp::json {

enum class kind : std::uint8_t { null, boolean, number, string, array, object };

struct member_entry;

struct value {
  kind type = kind::null;
  bool boolean = false;
  std::string text;                   // number text or string contents
  std::vector<value> items;           // array elements
  std::vector<member_entry> members;  // object members, in order
};

struct member_entry {
  std::string key;
  value val;
};

/// The member of `obj` called `key`, or nullptr.
[[nodiscard]] inline const value* find(const value& obj, std::string_view key) noexcept {
  for (const member_entry& m : obj.members) {
    if (m.key == key) return &m.val;
  }
  return nullptr;
}

// ---- writing ------------------------------------------------------------------------------------
inline void append_escaped(std::string& out, std::string_view s) {
  out += '"';
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          static constexpr char hex[] = "0123456789abcdef";
          out += "\\u00";
          out += hex[(static_cast<unsigned char>(c) >> 4) & 0xF];
          out += hex[static_cast<unsigned char>(c) & 0xF];
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

/// Shortest round-trip text of a finite float or double (JSON has no inf/NaN: those throw).
template <class T>
[[nodiscard]] std::string number_text(T v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, r.ptr);
  if (s == "inf" || s == "-inf" || s.find("nan") != std::string::npos) {
    throw error("json number", s, "a finite number (JSON has no inf or NaN)");
  }
  return s;
}

/// Builds an object member by member: `object_writer w; w.add("a", 1); std::string s = w.str();`.
class object_writer {
 public:
  object_writer& add_raw(std::string_view key, std::string_view json_text) {
    out_ += out_.size() > 1 ? "," : "";
    append_escaped(out_, key);
    out_ += ':';
    out_ += json_text;
    return *this;
  }
  object_writer& add(std::string_view key, std::string_view s) {
    std::string t;
    append_escaped(t, s);
    return add_raw(key, t);
  }
  object_writer& add(std::string_view key, const char* s) { return add(key, std::string_view(s)); }
  object_writer& add(std::string_view key, bool b) { return add_raw(key, b ? "true" : "false"); }
  object_writer& add(std::string_view key, std::int64_t v) { return add_raw(key, std::to_string(v)); }
  object_writer& add(std::string_view key, std::int32_t v) { return add_raw(key, std::to_string(v)); }
  object_writer& add(std::string_view key, std::uint64_t v) { return add_raw(key, std::to_string(v)); }
  object_writer& add(std::string_view key, float v) { return add_raw(key, number_text(v)); }
  object_writer& add(std::string_view key, double v) { return add_raw(key, number_text(v)); }
  [[nodiscard]] std::string str() const { return out_ + "}"; }

 private:
  std::string out_ = "{";
};

}  // namespace safeamp::json

#include "safeamp/telemetry/json_reader.hpp"
