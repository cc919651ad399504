// Host-callable launchers for kernels that run the core headers' code (rounding) on the device.
#pragma once

#include <cstdint>

#include "safeamp/format.hpp"

namespace safeamp::cuda {

/// Rounds n floats on the device with the core rounding routine (stochastic bits from `key`, identical
/// to round_span on the CPU). Returns the cudaError_t of the launch as an int (0 = success).
int launch_round(format_spec f, round_options opt, philox_key key, const float* in, float* out, std::uint64_t n,
                 void* stream);

}  // namespace safeamp::cuda
