// Build-wide configuration of the core headers: the one host/device macro and the one bit_cast helper.
// Without nvcc SAFEAMP_HOST_DEVICE is empty, so every core function is plain C++20.
#pragma once

#if defined(__CUDACC__)
#define SAFEAMP_HOST_DEVICE __host__ __device__
#else
#define SAFEAMP_HOST_DEVICE
#endif

#define SAFEAMP_VERSION_MAJOR 0
#define SAFEAMP_VERSION_MINOR 1
#define SAFEAMP_VERSION_PATCH 0
#define SAFEAMP_VERSION_STRING "0.1.0"

namespace safeamp {

/// Reinterprets the bits of `from` as a `To` of the same size. `__builtin_bit_cast` is constexpr and
/// warning-clean under g++ 12, clang 14 and nvcc 13 (std::bit_cast is not usable in device code).
template <class To, class From>
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr To bit_cast(const From& from) noexcept {
  static_assert(sizeof(To) == sizeof(From), "bit_cast needs types of the same size");
  return __builtin_bit_cast(To, from);
}

}  // namespace safeamp
