// Test and benchmark helper (not part of safeamp::cuda, never installed): a kernel that keeps a stream busy
// for a while, so a check can show that enqueuing the scaler path returns while the device is still working,
// i.e. that the host never waited for the device.
#pragma once

#include <cstdint>

namespace safeamp::cuda::testing {

/// Enqueues one single-thread kernel that spins on the device's nanosecond clock for about `nanoseconds`
/// on `stream` (a cudaStream_t as void*). Throws cuda_error when the launch fails.
void launch_busy_wait(std::uint64_t nanoseconds, void* stream);

}  // namespace safeamp::cuda::testing
