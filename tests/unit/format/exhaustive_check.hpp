// Shared driver of the exhaustive tests: every one of the 2^32 float bit patterns, in 65536 chunks of
// 65536, split over two std::threads; each chunk is checked by a callback that returns its disagreements.
#pragma once

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "safeamp/format/cpu_path.hpp"

namespace exhaustive {

/// The round_span kernel paths (safeamp/format/cpu_path.hpp) this machine runs: each suite checks all of them in
/// one pass over the inputs. The paths it cannot run are named on stdout, so a log says what went unchecked.
inline std::vector<safeamp::cpu_path> paths_to_check() {
  std::vector<safeamp::cpu_path> run;
  std::string ran, missing;
  for (const safeamp::cpu_path p : safeamp::all_cpu_paths) {
    std::string& list = safeamp::cpu_path_supported(p) ? ran : missing;
    list += (list.empty() ? "" : ", ") + std::string(safeamp::cpu_path_name(p));
    if (safeamp::cpu_path_supported(p)) run.push_back(p);
  }
  std::printf("round_span paths checked: %s; not run (this CPU lacks them): %s\n", ran.c_str(),
              missing.empty() ? "none" : missing.c_str());
  std::fflush(stdout);
  return run;
}

/// "what (path)" for a report line.
inline std::string on_path(const char* what, safeamp::cpu_path p) {
  return std::string(what) + " (" + std::string(safeamp::cpu_path_name(p)) + " path)";
}

struct report {
  std::uint64_t disagreements = 0;
  std::vector<std::string> samples;  // the first few, as hex bits
  std::mutex lock;

  void add(const std::string& what, std::uint32_t input, std::uint32_t expected, std::uint32_t got) {
    std::lock_guard<std::mutex> guard(lock);
    ++disagreements;
    if (samples.size() < 16) {
      char line[160];
      std::snprintf(line, sizeof line, "%s: input 0x%08X expected 0x%08X got 0x%08X", what.c_str(), input, expected,
                    got);
      samples.emplace_back(line);
    }
  }
};

/// Calls check(chunk_index, inputs) for the 65536 chunks; inputs[i] = bits (chunk_index << 16 | i).
template <class Check>
void for_all_floats(Check check, unsigned threads = 2) {
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([t, threads, &check] {
      std::vector<std::uint32_t> inputs(65536);
      for (std::uint32_t hi = t; hi < 65536; hi += threads) {
        for (std::uint32_t lo = 0; lo < 65536; ++lo) inputs[lo] = hi << 16 | lo;
        check(hi, inputs);
      }
    });
  }
  for (auto& th : pool) th.join();
}

}  // namespace exhaustive
