// libFuzzer: parse_format accepts a format name or throws safeamp::error; an accepted name's canonical name
// parses back to the same format.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "safeamp/error.hpp"
#include "safeamp/format.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const safeamp::format_spec f = safeamp::parse_format(text);
    if (!(safeamp::parse_format(safeamp::format_name(f)) == f)) __builtin_trap();
  } catch (const safeamp::error&) {
  }
  return 0;
}
