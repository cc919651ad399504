// libFuzzer: the scenario reader (parse_scenario) returns a scenario or throws safeamp::error with a bounded
// message; every run configuration derived from an accepted scenario validates or throws safeamp::error, and
// the preflight's shapes, fault-target check and estimate never overflow (UBSan) or crash on it.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "safeamp/error.hpp"
#include "safeamp/sim/preflight.hpp"
#include "safeamp/sim/reference.hpp"
#include "safeamp/sim/scenario.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  using namespace safeamp::sim;
  try {
    const scenario s = parse_scenario(text, "fuzz");
    std::vector<run_config> runs = {reference_config(s)};
    for (const candidate_spec& c : s.candidates) runs.push_back(candidate_config(s, c));
    for (const run_config& c : runs) {
      validate(c);
      check_fault_targets(c, 256);
      if (run_settings(c).empty() || run_fingerprint(c) != run_fingerprint(c)) __builtin_trap();
    }
    preflight_inputs in;
    in.vocab = 256;
    in.corpus_bytes = 1 << 20;
    in.eval_sequences = 64;
    const preflight_estimate e = estimate_runs(runs, false, in);
    if (std::isnan(e.peak_bytes) || std::isnan(e.seconds) || e.peak_bytes < 0.0) __builtin_trap();
  } catch (const safeamp::error& e) {
    if (std::string_view(e.what()).size() > 8192) __builtin_trap();
  }
  return 0;
}
