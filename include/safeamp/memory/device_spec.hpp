// One accelerator as the roofline and the planner see it: capacity, bandwidth and dense peaks by format.
#pragma once

#include <cstdint>
#include <string_view>

namespace safeamp {

/// One accelerator as the roofline and the planner see it. Every peak is DENSE (no 2:4 sparsity) and, for
/// the tensor-core rows, with FP32 accumulation (what mixed-precision training uses). 0 means "not supported".
/// A hand-built one is checked by validate(device_spec) (devices.hpp), which roofline() and the planner call.
struct device_spec {
  std::string_view name{};                       // display name, e.g. "RTX 4090"
  std::uint64_t capacity_bytes = 0;              // memory the runtime reports as total (not the box label)
  double memory_bytes_per_second = 0.0;          // DRAM bandwidth
  double peak_fp32_flops = 0.0;                  // non-tensor FP32 (CUDA cores)
  double peak_tf32_flops = 0.0;                  // TF32 tensor cores, dense
  double peak_fp16_flops = 0.0;                  // FP16 tensor cores, FP32 accumulate, dense
  double peak_bf16_flops = 0.0;                  // BF16 tensor cores, FP32 accumulate, dense
  double peak_fp8_flops = 0.0;                   // FP8 tensor cores, FP32 accumulate, dense (0: no FP8)
  double peak_fp16_fp16_accumulate_flops = 0.0;  // FP16 tensor cores with FP16 accumulate (not used by AMP)
  bool half_rate_fp32_accumulate = false;        // GeForce: FP16/BF16 with FP32 accumulate runs at half rate
  std::string_view source{};                     // where the figures come from
  std::string_view short_name{};                 // a lookup alias that wins over partial matches ("h100": the SXM row)

  friend constexpr bool operator==(const device_spec&, const device_spec&) = default;
};

namespace detail {
inline constexpr double tera = 1e12;
inline constexpr double giga = 1e9;
inline constexpr std::uint64_t mebibyte = std::uint64_t{1} << 20;
inline constexpr std::uint64_t gigabyte = 1'000'000'000ULL;
}  // namespace detail

}  // namespace safeamp
