// The one checked way to parse outside JSON (scenarios, references, plan inputs, records): size cap, nesting
// depth, duplicate keys and numbers outside double's range are rejected with safeamp::error naming the field and
// the location; every nlohmann exception is mapped to safeamp::error (exit code 2 in the tool). Also the bounded
// summary of a value for error messages, which never serialises unbounded input.
// Needs nlohmann_json: include it from sim/src and tools/ only (not part of the installed interface).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "safeamp/sim/report_files.hpp"

namespace safeamp::sim {

/// Limits of parse_json_input. The defaults hold every file safeamp writes with a wide margin.
struct json_input_limits {
  std::uintmax_t max_bytes = default_max_input_bytes;  // larger text is refused before parsing
  int max_depth = 64;                                  // nested arrays/objects; deeper input is refused
};

/// Parses `text` as one JSON document. Throws safeamp::error(field, "'<source>' (<reason> at <location>)",
/// accepted) when it is malformed or truncated, larger than limits.max_bytes, nested deeper than
/// limits.max_depth, has an object with a key twice, or a number outside double's range (1e400). `field` is the
/// caller's name for the input ("--scenario", "reference"), `source` where it came from (a path); the location
/// is a JSON pointer such as /training/steps. Parsing stops at the first problem: a hostile document is never
/// built in memory, and the error text is bounded whatever the input.
[[nodiscard]] nlohmann::json parse_json_input(std::string_view text, std::string_view field, std::string_view source,
                                              const json_input_limits& limits = {});

/// read_input_file(path, field, limits.max_bytes) then parse_json_input(text, field, path, limits).
[[nodiscard]] nlohmann::json read_json_input(const std::filesystem::path& path, std::string_view field,
                                             const json_input_limits& limits = {});

/// A short, bounded description of `value` for error messages: scalars as JSON text (strings cut to
/// `max_chars` with "..."), containers as their type, size and a prefix of their first members, looking at most
/// two levels deep (deeper containers are shown as [...] or {...}). Never longer than about max_chars + 40
/// characters, and linear in max_chars whatever the size or depth of `value`.
[[nodiscard]] std::string summarize_json(const nlohmann::json& value, std::size_t max_chars = 60);

/// `text` for a message quoting outside input: safeamp::bounded_input (quoted_input.hpp), i.e. cut to `max_chars`
/// bytes at a UTF-8 character boundary with "..." appended when longer, control characters written as \xNN.
[[nodiscard]] std::string bounded_text(std::string_view text, std::size_t max_chars = 200);

/// True when `text` is valid UTF-8 as the JSON writer requires (nlohmann::json's dump throws on anything else):
/// text that reaches summary.json or a manifest from outside JSON (a file system path) is checked with it first.
[[nodiscard]] bool is_valid_utf8(std::string_view text);

}  // namespace safeamp::sim
