// The adapter example's stand-in for a training loop's backward (examples/cuda/adapter_example.cpp): it leaves
// in each gradient buffer what a backward of (loss * scale) would, the scale read on the device, rounded to the
// buffer's type. The values are a function of (seed, parameter, step, index) only, so the host computes the
// very same bits for its reference (true_gradient is host and device code).
#pragma once

#include <cstdint>

#include "safeamp/config.hpp"
#include "safeamp/cuda/dtype.hpp"
#include "safeamp/format/philox.hpp"

namespace safeamp::cuda_adapter::demo {

/// The unscaled gradient of element i: magnitude * u, u = int32(Philox bits) * 2^-31 in [-1, 1). magnitude is
/// a power of two, so the product is exact.
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr float true_gradient(std::uint64_t seed, std::uint32_t parameter,
                                                                std::uint32_t step, std::uint64_t i,
                                                                float magnitude) noexcept {
  const std::uint32_t bits = stochastic_bits(seed, parameter, (static_cast<std::uint64_t>(step) << 32) | i);
  return static_cast<float>(static_cast<std::int32_t>(bits)) * 0x1p-31f * magnitude;
}

/// grad[i] = true_gradient(...) * *scale rounded to `type` (the core's nearest-even encode for 16-bit types);
/// with `poison`, element 0 becomes a NaN (a fault injected into one step). Asynchronous on `stream`.
void fake_backward(void* grad, std::uint64_t n, cuda::device_dtype type, float magnitude, std::uint64_t seed,
                   std::uint32_t parameter, std::uint32_t step, bool poison, const float* scale, void* stream);

}  // namespace safeamp::cuda_adapter::demo
