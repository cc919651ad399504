// Shared driver of the exhaustive tests: every one of the 2^32 float bit patterns, in 65536 chunks of
// 65536, split over two std::threads; each chunk is checked by a callback that returns its disagreements.
#pragma once

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace exhaustive {

struct report {
  std::uint64_t disagreements = 0;
  std::vector<std::string> samples;  // the first few, as hex bits
  std::mutex lock;

  void add(const char* what, std::uint32_t input, std::uint32_t expected, std::uint32_t got) {
    std::lock_guard<std::mutex> guard(lock);
    ++disagreements;
    if (samples.size() < 16) {
      char line[160];
      std::snprintf(line, sizeof line, "%s: input 0x%08X expected 0x%08X got 0x%08X", what, input, expected, got);
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
