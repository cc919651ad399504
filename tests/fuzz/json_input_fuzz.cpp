// libFuzzer: the checked JSON reader (parse_json_input) returns a document or throws safeamp::error with a
// bounded message; the bounded summary of whatever it returns stays short.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "safeamp/error.hpp"
#include "safeamp/sim/json_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  constexpr std::size_t max_message = 1200;  // source (200) + reason (<= ~300) + location (64 x ~45) + accepted
  try {
    const nlohmann::json j = safeamp::sim::parse_json_input(text, "input", "fuzz");
    if (safeamp::sim::summarize_json(j).size() > 200) __builtin_trap();
  } catch (const safeamp::error& e) {
    if (std::string_view(e.what()).size() > max_message + 64 * 45) __builtin_trap();
  }
  return 0;
}
