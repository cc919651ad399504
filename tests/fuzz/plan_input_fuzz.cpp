// libFuzzer: a `safeamp plan --input` file. parse_plan_json then every value through the plan's key parsers, and the
// same text as a `--verified-by` summary (its decision rows compared with a planned model, and the plan's lines about
// it): each input is accepted or throws safeamp::error (exit 2), never another exception (exit 3) or a crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "plan_inputs.hpp"
#include "plan_parity.hpp"
#include "safeamp/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace safeamp::tool;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const plan_values v = parse_plan_json(text, "fuzz");
    for (const auto& [key, value] : v) {
      try {
        (void)parse_real(key, value, 0.0, 1e6, true, "a number");
      } catch (const safeamp::error&) {
      }
      try {
        (void)parse_count(key, value, 1e15, "a count");
      } catch (const safeamp::error&) {
      }
      try {
        (void)parse_duration_seconds(key, value);
      } catch (const safeamp::error&) {
      }
      try {
        (void)parse_policy_arg(key, value);
      } catch (const safeamp::error&) {
      }
    }
  } catch (const safeamp::error&) {
  }
  try {
    // GPT-2 small's count as Hugging Face gives it: 124,439,808 (the plan accepts 123,195,410 .. 125,684,206).
    const parity_results r = parse_parity_summary(safeamp::sim::parse_json_input(text, "verified-by", "fuzz"), "fuzz",
                                                  given_parameter_range(124'439'808));
    (void)parity_notes(r);
    (void)parity_json(r).dump();
  } catch (const safeamp::error&) {
  }
  return 0;
}
