// The checked JSON reader for outside input (see json_input.hpp): nlohmann's parser driven through its callback,
// which tracks where it is, refuses duplicate keys and deep nesting as they are read, and never builds a hostile
// document.
#include "safeamp/sim/json_input.hpp"

#include <set>
#include <utility>
#include <vector>

#include "safeamp/error.hpp"
#include "safeamp/quoted_input.hpp"

namespace safeamp::sim {
namespace {

using json = nlohmann::json;

constexpr std::size_t max_location_key_chars = 40;  // per key in a location such as /training/steps
constexpr std::size_t summary_items = 4;            // members shown of a container in summarize_json
constexpr int summary_depth = 2;                    // levels summarize_json looks into

/// Thrown from the parser callback; turned into safeamp::error with the location by parse_json_input.
struct input_problem {
  std::string reason;
};

struct frame {
  bool object = false;
  std::string key{};      // current member of an object
  std::size_t index = 0;  // current element of an array
  std::set<std::string, std::less<>> keys{};
};

class parse_state {
 public:
  explicit parse_state(int max_depth) : max_depth_(max_depth) {}

  bool on_event(int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth + 1 > max_depth_) {
          throw input_problem{"nested deeper than " + std::to_string(max_depth_) + " levels"};
        }
        frames_.push_back(frame{.object = event == json::parse_event_t::object_start});
        break;
      case json::parse_event_t::key: {
        frame& f = frames_.back();
        f.key = parsed.get_ref<const std::string&>();
        if (!f.keys.insert(f.key).second) throw input_problem{"duplicate key \"" + bounded_text(f.key, 60) + "\""};
        break;
      }
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        frames_.pop_back();
        element_done();
        break;
      case json::parse_event_t::value:
        element_done();
        break;
    }
    return true;
  }

  /// A JSON pointer to the value being read, e.g. /training/steps or /layers/3; "the top level" at the root.
  [[nodiscard]] std::string location() const {
    std::string out;
    for (const frame& f : frames_) {
      out += '/';
      if (!f.object) {
        out += std::to_string(f.index);
        continue;
      }
      for (const char c : bounded_text(f.key, max_location_key_chars)) {
        if (c == '~') {
          out += "~0";
        } else if (c == '/') {
          out += "~1";
        } else {
          out += c;
        }
      }
    }
    return out.empty() ? "the top level" : out;
  }

 private:
  void element_done() {
    if (!frames_.empty() && !frames_.back().object) ++frames_.back().index;
  }
  int max_depth_;
  std::vector<frame> frames_{};
};

}  // namespace

bool is_valid_utf8(std::string_view text) {
  try {
    (void)json(std::string(text)).dump();  // the writer's own check, so the two cannot disagree
    return true;
  } catch (const json::type_error&) {
    return false;
  }
}

namespace {

std::string quoted_string(std::string_view s, std::size_t max_chars) {
  const bool cut = s.size() > max_chars;
  // The replace handler keeps dump() from throwing on invalid UTF-8 (or on a character cut in half).
  std::string out = json(std::string(s.substr(0, max_chars))).dump(-1, ' ', false, json::error_handler_t::replace);
  if (cut) out.insert(out.size() - 1, "...");
  return out;
}

void summarize(const json& v, int depth, std::size_t max_chars, std::string& out) {
  switch (v.type()) {
    case json::value_t::string:
      out += quoted_string(v.get_ref<const std::string&>(), max_chars);
      return;
    case json::value_t::array:
    case json::value_t::object: {
      const bool object = v.is_object();
      if (depth >= summary_depth) {
        out += object ? "{...}" : "[...]";
        return;
      }
      out += object ? '{' : '[';
      std::size_t shown = 0;
      for (auto it = v.begin(); it != v.end(); ++it, ++shown) {
        if (shown == summary_items || out.size() > max_chars) {
          out += ", ...";
          break;
        }
        if (shown > 0) out += ", ";
        if (object) out += quoted_string(it.key(), max_chars / 2) + ": ";
        summarize(*it, depth + 1, max_chars / 2, out);
      }
      out += object ? '}' : ']';
      return;
    }
    case json::value_t::binary:
    case json::value_t::discarded:
      out += v.type_name();
      return;
    default:
      out += v.dump();  // null, boolean, number: short by construction
  }
}

}  // namespace

std::string bounded_text(std::string_view text, std::size_t max_chars) { return bounded_input(text, max_chars); }

std::string summarize_json(const json& value, std::size_t max_chars) {
  std::string out;
  const auto counted = [&value](const char* noun) {
    return std::to_string(value.size()) + " " + noun + (value.size() == 1 ? " " : "s ");
  };
  if (value.is_array()) out = "an array of " + counted("item");
  if (value.is_object()) out = "an object of " + counted("member");
  std::string body;
  summarize(value, 0, max_chars, body);
  return out + bounded_text(body, max_chars + 20);
}

json parse_json_input(std::string_view text, std::string_view field, std::string_view source,
                      const json_input_limits& limits) {
  std::string where = "'";  // built by appending: `"'" + std::string&&` trips a g++ 12 -Wrestrict false positive
  where += bounded_text(source, 200);
  where += "' (";
  const std::string accepted = "a well-formed JSON document of at most " + std::to_string(limits.max_bytes) +
                               " bytes, nested at most " + std::to_string(limits.max_depth) +
                               " levels, without duplicate keys, numbers within double's range";
  if (text.size() > limits.max_bytes) {
    throw error(field, where + std::to_string(text.size()) + " bytes, over the limit)", accepted);
  }
  parse_state state(limits.max_depth);
  const json::parser_callback_t callback = [&state](int depth, json::parse_event_t event, json& parsed) {
    return state.on_event(depth, event, parsed);
  };
  try {
    return json::parse(text.begin(), text.end(), callback);
  } catch (const input_problem& p) {
    throw error(field, where + p.reason + " at " + state.location() + ")", accepted);
  } catch (const json::out_of_range& e) {
    // 406: a number such as 1e400 that does not fit a double.
    const std::string reason = e.id == 406 ? "a number outside double's range" : bounded_text(e.what());
    throw error(field, where + reason + " at " + state.location() + ")", accepted);
  } catch (const json::exception& e) {  // parse_error (malformed, truncated) and anything else nlohmann throws
    throw error(field, where + "not valid JSON: " + bounded_text(e.what()) + " at " + state.location() + ")", accepted);
  }
}

json read_json_input(const std::filesystem::path& path, std::string_view field, const json_input_limits& limits) {
  return parse_json_input(read_input_file(path, field, limits.max_bytes), field, path.string(), limits);
}

}  // namespace safeamp::sim
