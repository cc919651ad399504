// libFuzzer: the known-good record reader (known_good_from_json_text, what read_known_good applies to
// <out>/known_good.json) returns a record or throws safeamp::error with a bounded message; an accepted record has
// no control character in what reaches terminals and reports, and writes back to text that reads to the same record.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "safeamp/error.hpp"
#include "safeamp/sim/parity_fallback.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  using namespace safeamp::sim;
  const auto control = [](const std::string& s) {
    return std::any_of(s.begin(), s.end(), [](char ch) {
      const auto c = static_cast<unsigned char>(ch);
      return c < 0x20U || c == 0x7fU;
    });
  };
  try {
    const known_good_record r = known_good_from_json_text(text, "known_good.json");
    if (control(r.candidate) || control(r.policy) || control(r.scaler) || control(r.scenario)) __builtin_trap();
    if (r.candidate.empty() || r.policy.empty() || r.reference_id.size() != 16 || r.recorded_utc.size() != 20) {
      __builtin_trap();
    }
    if (!(known_good_from_json_text(known_good_json_text(r), "again") == r)) __builtin_trap();
  } catch (const safeamp::error& e) {
    if (std::string_view(e.what()).size() > 8192) __builtin_trap();
  }
  return 0;
}
