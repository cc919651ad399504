// A made-up device for planner tests: 1 TB/s, 10 TFLOPS fp32, 20 tf32, 40 fp16/bf16, no fp8, every figure chosen to
// divide evenly; the capacity is the test's.
#pragma once

#include <cstdint>

#include "safeamp/memory/device_table.hpp"

constexpr safeamp::device_spec toy_device(const char* name, std::uint64_t capacity_bytes) {
  return {.name = name,
          .capacity_bytes = capacity_bytes,
          .memory_bytes_per_second = 1e12,
          .peak_fp32_flops = 10e12,
          .peak_tf32_flops = 20e12,
          .peak_fp16_flops = 40e12,
          .peak_bf16_flops = 40e12,
          .peak_fp8_flops = 0.0,
          .peak_fp16_fp16_accumulate_flops = 40e12,
          .half_rate_fp32_accumulate = false,
          .source = "test"};
}
