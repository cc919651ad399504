// Shared driver of the exhaustive tests: every one of the 2^32 float bit patterns, in 65536 chunks of
// 65536, split over two std::threads; each chunk is checked by a callback that returns its disagreements. Also
// the dense sweep of the narrow formats (for_dense_floats) and the counters round_span must report (count_of).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "safeamp/format/cpu_path.hpp"
#include "safeamp/format/round_span.hpp"

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

/// Whether the n floats at got hold exactly the bits want[0..n): one memcmp, so that the common case (every result
/// right) skips the element-by-element comparison that names the wrong ones.
inline bool same_bits(const float* got, const std::uint32_t* want, std::size_t n) {
  static_assert(sizeof(float) == sizeof(std::uint32_t));
  return std::memcmp(got, want, n * sizeof(float)) == 0;
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

  /// A counter of round_span that differs from the count of the correct results, for the chunk starting at
  /// input bits `first`.
  void add_counts(const std::string& what, std::uint32_t first, const safeamp::cast_stats& want,
                  const safeamp::cast_stats& got) {
    if (want == got) return;
    std::lock_guard<std::mutex> guard(lock);
    ++disagreements;
    if (samples.size() < 16) {
      char line[320];
      std::snprintf(line, sizeof line,
                    "%s: chunk from 0x%08X counters (elements, overflow, underflow, subnormal, nan, infinity) expected "
                    "%llu %llu %llu %llu %llu %llu got %llu %llu %llu %llu %llu %llu",
                    what.c_str(), first, static_cast<unsigned long long>(want.elements),
                    static_cast<unsigned long long>(want.overflow), static_cast<unsigned long long>(want.underflow),
                    static_cast<unsigned long long>(want.subnormal), static_cast<unsigned long long>(want.nan),
                    static_cast<unsigned long long>(want.infinity), static_cast<unsigned long long>(got.elements),
                    static_cast<unsigned long long>(got.overflow), static_cast<unsigned long long>(got.underflow),
                    static_cast<unsigned long long>(got.subnormal), static_cast<unsigned long long>(got.nan),
                    static_cast<unsigned long long>(got.infinity));
      samples.emplace_back(line);
    }
  }
};

/// The counters round_span must return (cast_stats, format/round_span.hpp) for inputs in[0..n) whose correct
/// results, as float bits, are result[0..n), counted from their definitions: underflow, finite nonzero inputs
/// with a zero result; subnormal, nonzero results below min_normal; nan and infinity, the results. overflow[i]
/// says whether element i overflowed; with overflow == nullptr an overflow is a finite input with a non-finite
/// result, which is exact for nearest even without saturation into a format with inf or NaN. The tests are on the
/// magnitude bits (for nonnegative floats the order of the bits is the order of the values; above inf's bits lie
/// the NaNs), so that the loop vectorises: it runs 2^33 times in the FP8 suite.
inline safeamp::cast_stats count_of(const float* in, const std::uint32_t* result, const bool* overflow, std::size_t n,
                                    float min_normal) {
  constexpr std::uint32_t magnitude = 0x7FFFFFFFu, inf_bits = 0x7F800000u;
  std::uint32_t min_normal_bits = 0;
  std::memcpy(&min_normal_bits, &min_normal, sizeof min_normal_bits);
  const auto* in_bits = reinterpret_cast<const unsigned char*>(in);
  std::uint64_t overflows = 0, underflows = 0, subnormals = 0, nans = 0, infinities = 0;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t x = 0;
    std::memcpy(&x, in_bits + 4 * i, sizeof x);
    const std::uint32_t ax = x & magnitude, ay = result[i] & magnitude;
    const bool finite_in = ax < inf_bits;
    overflows += (overflow != nullptr ? overflow[i] : finite_in && ay >= inf_bits) ? 1u : 0u;
    underflows += finite_in && ax != 0u && ay == 0u ? 1u : 0u;
    subnormals += ay != 0u && ay < min_normal_bits ? 1u : 0u;
    nans += ay > inf_bits ? 1u : 0u;
    infinities += ay == inf_bits ? 1u : 0u;
  }
  safeamp::cast_stats c;
  c.elements = n;
  c.overflow = overflows;
  c.underflow = underflows;
  c.subnormal = subnormals;
  c.nan = nans;
  c.infinity = infinities;
  return c;
}

/// Calls check(c, inputs) for chunks c = 0 .. chunks - 1 split over std::threads, inputs[j] = input(c, j) for
/// the 65536 inputs j of a chunk.
template <class Input, class Check>
void for_chunks(std::uint32_t chunks, Input input, Check check, unsigned threads = 2) {
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([t, threads, chunks, &input, &check] {
      std::vector<std::uint32_t> inputs(65536);
      for (std::uint32_t c = t; c < chunks; c += threads) {
        for (std::uint32_t j = 0; j < 65536; ++j) inputs[j] = input(c, j);
        check(c, inputs);
      }
    });
  }
  for (auto& th : pool) th.join();
}

/// Calls check(chunk_index, inputs) for the 65536 chunks; inputs[i] = bits (chunk_index << 16 | i).
template <class Check>
void for_all_floats(Check check, unsigned threads = 2) {
  for_chunks(
      65536, [](std::uint32_t c, std::uint32_t j) { return c << 16 | j; }, check, threads);
}

/// The patterns of bits 0..11 in the dense sweep: zero and all ones (so every bit takes both values), the
/// lowest and the highest bit alone, their neighbours, alternating and blocky ones.
inline constexpr std::uint32_t dense_low_bits[16] = {0x000u, 0xFFFu, 0x001u, 0x800u, 0x7FFu, 0x801u, 0x555u, 0xAAAu,
                                                     0x0F0u, 0xF0Fu, 0x100u, 0x3C3u, 0x012u, 0xFEDu, 0x400u, 0xBFEu};
inline constexpr std::uint32_t dense_chunks = 256;  // of 65536 inputs: 2^20 upper parts x 16 low patterns

/// The dense sweep: every float whose bits 12..31 take each of their 2^20 values and whose bits 0..11 are one of
/// dense_low_bits, 2^24 inputs in dense_chunks chunks of 65536 over two std::threads; calls check(chunk, inputs).
/// For a format with at most 10 mantissa bits (every named format but fp32, all the issue-16 kinds, E8M0) that is
/// every case the rounding can tell apart: the cut lies at float bit 13 or above (23 - M, higher in the target's
/// subnormal range) and the half bit just below it, at bit 12 or above, so bits 0..11 are always part of the
/// remainder below its top bit and enter the result only through "is the remainder zero" (directed modes), "is it
/// exactly half" (ties) and the low bits of the 32-bit fraction that stochastic rounding compares with its random
/// word; the patterns give each of those bits both values, alone and together. Bits 12..31 (sign, exponent, kept
/// mantissa and the half bit) are exhaustive.
template <class Check>
void for_dense_floats(Check check, unsigned threads = 2) {
  for_chunks(
      dense_chunks, [](std::uint32_t c, std::uint32_t j) { return (c << 12 | j >> 4) << 12 | dense_low_bits[j & 15u]; },
      check, threads);
}

}  // namespace exhaustive
