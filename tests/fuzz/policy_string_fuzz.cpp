// libFuzzer: parse_policy accepts a policy or throws safeamp::error; an accepted policy round-trips through
// to_string (the grammar's contract). Anything else (another exception, a crash, UB) is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "safeamp/error.hpp"
#include "safeamp/policy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const safeamp::precision_policy p = safeamp::parse_policy(text);
    if (!(safeamp::parse_policy(safeamp::to_string(p)) == p)) __builtin_trap();
  } catch (const safeamp::error&) {
  }
  return 0;
}
