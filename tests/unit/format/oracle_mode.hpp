// The oracle's rounding mode (tests/oracles/round_oracle.hpp, written without safeamp code) for safeamp's.
#pragma once

#include "oracles/round_oracle.hpp"
#include "safeamp/format/round_options.hpp"

namespace oracle {
inline mode to_oracle(safeamp::rounding m) {
  switch (m) {
    case safeamp::rounding::nearest_even:
      return mode::nearest_even;
    case safeamp::rounding::toward_zero:
      return mode::toward_zero;
    case safeamp::rounding::toward_pos_inf:
      return mode::toward_pos_inf;
    case safeamp::rounding::toward_neg_inf:
      return mode::toward_neg_inf;
    case safeamp::rounding::stochastic:
      return mode::stochastic;
  }
  return mode::nearest_even;
}
}  // namespace oracle
