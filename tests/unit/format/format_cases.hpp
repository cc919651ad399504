// The formats of the dense sweep and of the fast reference's own check (codes_and_ties_test.cpp), each with its
// reference description written out from the format's definition, not from safeamp's format_spec.
#pragma once

#include "oracles/round_oracle.hpp"
#include "safeamp/format.hpp"

namespace format_test {

struct case_format {
  const char* name;
  safeamp::format_spec spec;
  oracle::format ref;  // written out from the definition (ignored for E8M0, which has its own reference)
};
// oracle::format{E, M, finite_nan, fnuz, no_nan, bias_offset}
inline constexpr case_format named_formats[] = {
    {"fp16", safeamp::fp16, {5, 10, false}},    {"bf16", safeamp::bf16, {8, 7, false}},
    {"tf32", safeamp::tf32, {8, 10, false}},    {"e4m3", safeamp::fp8_e4m3, {4, 3, true}},
    {"e5m2", safeamp::fp8_e5m2, {5, 2, false}},
};
inline constexpr case_format new_kinds[] = {
    {"e4m3fnuz", safeamp::fp8_e4m3fnuz, {4, 3, false, true, false, 1}},
    {"e5m2fnuz", safeamp::fp8_e5m2fnuz, {5, 2, false, true, false, 1}},
    {"e4m3b11fnuz", safeamp::fp8_e4m3b11fnuz, {4, 3, false, true, false, 4}},
    {"e2m1fn", safeamp::fp4_e2m1, {2, 1, false, false, true, 0}},
    {"e2m3fn", safeamp::fp6_e2m3, {2, 3, false, false, true, 0}},
    {"e3m2fn", safeamp::fp6_e3m2, {3, 2, false, false, true, 0}},
    {"e8m0fnu", safeamp::e8m0, {8, 1, false, false, false, 0}},
};

}  // namespace format_test
