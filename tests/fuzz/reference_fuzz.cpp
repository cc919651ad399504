// libFuzzer: the reference reader (reference_from_json_text) returns a reference or throws safeamp::error with
// a bounded message; an accepted reference agrees with itself (no manifest difference) and writes back to text
// that reads to the same reference.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "safeamp/error.hpp"
#include "safeamp/sim/reference.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  using namespace safeamp::sim;
  try {
    const locked_reference r = reference_from_json_text(text);
    if (!compare_manifests(r.manifest, r.manifest, manifest_check::reuse).empty()) __builtin_trap();
    const locked_reference again = reference_from_json_text(to_json_text(r));
    if (to_json_text(again) != to_json_text(r)) __builtin_trap();
  } catch (const safeamp::error& e) {
    if (std::string_view(e.what()).size() > 8192) __builtin_trap();
  }
  return 0;
}
