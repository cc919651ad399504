// Shared by the host and device tests of the deferred (device) scaler: a config with every field away from
// its default, and a flag sequence with overflow bursts that reach min_scale and clean runs that grow.
#pragma once

#include <cstdint>

#include "safeamp/format/philox.hpp"
#include "safeamp/scaling/scaler_config.hpp"

namespace safeamp::testing {

inline constexpr scaler_config every_field_config{.init_scale = 3.0f * 1024.0f,
                                                  .growth_factor = 3.0,
                                                  .backoff_factor = 0.25,
                                                  .growth_interval = 3,
                                                  .hysteresis = 2,
                                                  .mode = hysteresis_mode::since_growth,
                                                  .min_scale = 8.0f,
                                                  .max_scale = 1.0e6f,
                                                  .max_overflows_at_min = 0};

[[nodiscard]] inline bool overflow_at(std::uint64_t step) {
  return (step % 41 > 30) || (stochastic_bits(9, 0, step) % 7u == 0u);
}

}  // namespace safeamp::testing
