// The all-codes check of the format tests (codes_and_ties_test.cpp, new_kinds_test.cpp): every code of a format
// decodes to its value from the definition (oracle::value_of) and re-encodes to itself.
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include "oracles/round_oracle.hpp"
#include "safeamp/format.hpp"

namespace format_test {

inline std::string hex32(std::uint32_t u) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08X", u);
  return b;
}

/// Every code of spec (described to the oracle as ref) decodes to its value from the definition, a NaN of the
/// code's sign for the NaN codes, and re-encodes to itself; an IEEE-style signalling NaN comes back quiet (top
/// mantissa bit set, as docs/numerics.md specifies), the other kinds' NaN codes come back unchanged. Reports the
/// first 8 failures; returns how many codes fail.
inline int code_failures(const safeamp::format_spec& spec, const oracle::format& ref) {
  const std::uint32_t n = 1u << safeamp::total_bits(spec);
  int failures = 0;
  for (std::uint32_t code = 0; code < n; ++code) {
    const float want = oracle::value_of(ref, code);
    const float got = safeamp::decode(spec, code);
    const std::uint32_t got_bits = oracle::float_bits(got), want_bits = oracle::float_bits(want);
    const bool same =
        std::isnan(want) ? std::isnan(got) && std::signbit(got) == std::signbit(want) : got_bits == want_bits;
    const bool ieee_nan = ref.ieee() && std::isnan(want);
    const std::uint32_t want_back = ieee_nan ? code | (1u << (ref.mantissa_bits - 1)) : code;
    const std::uint32_t back = safeamp::encode(spec, got);
    if ((!same || back != want_back) && failures++ < 8) {
      FAIL_CHECK(safeamp::format_name(spec)
                 << " code " << hex32(code) << " decodes to " << hex32(got_bits) << " (want " << hex32(want_bits)
                 << ") and re-encodes to " << hex32(back) << " (want " << hex32(want_back) << ")");
    }
  }
  return failures;
}

}  // namespace format_test
