// Device table: datasheet capacity, memory bandwidth and dense peak throughput of common training cards
// (24 GB cards first), each figure with its source. Users can always build their own device_spec instead.
#pragma once

#include <cctype>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "safeamp/error.hpp"

namespace safeamp {

/// One accelerator as the roofline and the planner see it. Every peak is DENSE (no 2:4 sparsity) and, for
/// the tensor-core rows, with FP32 accumulation (what mixed-precision training uses). 0 means "not supported".
struct device_spec {
  std::string_view name{};                    // display name, e.g. "RTX 4090"
  std::uint64_t capacity_bytes = 0;           // memory the runtime reports as total (not the box label)
  double memory_bytes_per_second = 0.0;       // DRAM bandwidth
  double peak_fp32_flops = 0.0;               // non-tensor FP32 (CUDA cores)
  double peak_tf32_flops = 0.0;               // TF32 tensor cores, dense
  double peak_fp16_flops = 0.0;               // FP16 tensor cores, FP32 accumulate, dense
  double peak_bf16_flops = 0.0;               // BF16 tensor cores, FP32 accumulate, dense
  double peak_fp8_flops = 0.0;                // FP8 tensor cores, FP32 accumulate, dense (0: no FP8)
  double peak_fp16_fp16_accumulate_flops = 0.0;  // FP16 tensor cores with FP16 accumulate (not used by AMP)
  bool half_rate_fp32_accumulate = false;     // GeForce: FP16/BF16 with FP32 accumulate runs at half rate
  std::string_view source{};                  // where the figures come from

  friend constexpr bool operator==(const device_spec&, const device_spec&) = default;
};

namespace detail {
inline constexpr double tera = 1e12;
inline constexpr double giga = 1e9;
inline constexpr std::uint64_t mebibyte = std::uint64_t{1} << 20;
inline constexpr std::uint64_t gigabyte = 1'000'000'000ULL;
}  // namespace detail

// Sources (the figures are facts transcribed from them; see docs/memory.md, "Device table"):
//  [ADA]   NVIDIA Ada GPU Architecture whitepaper v2.02, Appendix A (RTX 4090 column); v2.02 corrected
//          FP8-with-FP32-accumulate to 330.3 TFLOPS (earlier versions printed 660.6).
//  [GA102] NVIDIA Ampere GA102 GPU Architecture whitepaper, Appendix A (RTX 3090 column).
//  [A100]  NVIDIA A100 Tensor Core GPU Architecture whitepaper, Table 3 / "NVIDIA Ampere Architecture In-Depth".
//  [H100]  NVIDIA H100 datasheet (SXM5), sparse figures halved; cross-checked with glennklockwood.com's table.
//  [H200]  NVIDIA H200 datasheet: same GH100 compute as H100 SXM, 141 GB HBM3e at 4.8 TB/s.
//  [A10], [L4], [A5000]  NVIDIA product datasheets (headline tensor figures are "with sparsity", halved
//          here), cross-checked by tensor cores x boost clock x 256 FLOP/clock (dense FP16, FP32 accumulate).
//  Capacities of the 24 GB cards are the totals nvidia-smi reports (MiB), because that is what a
//  process can allocate from; ECC on the data-center GDDR6 parts takes ~6.25%.
inline constexpr device_spec known_devices[] = {
    {.name = "RTX 4090",
     .capacity_bytes = 24564 * detail::mebibyte,          // nvidia-smi total 24564 MiB (23.99 GiB)
     .memory_bytes_per_second = 1008 * detail::giga,      // [ADA] 1008 GB/s GDDR6X
     .peak_fp32_flops = 82.6 * detail::tera,              // [ADA] 82.6 TFLOPS FP32
     .peak_tf32_flops = 82.6 * detail::tera,              // [ADA] TF32 tensor 82.6 dense (165.2 sparse)
     .peak_fp16_flops = 165.2 * detail::tera,             // [ADA] FP16 tensor, FP32 acc: 165.2 (half rate)
     .peak_bf16_flops = 165.2 * detail::tera,             // [ADA] BF16 tensor, FP32 acc: 165.2 (half rate)
     .peak_fp8_flops = 330.3 * detail::tera,              // [ADA] v2.02: FP8, FP32 acc 330.3 (FP16 acc 660.6)
     .peak_fp16_fp16_accumulate_flops = 330.3 * detail::tera,  // [ADA] FP16 tensor, FP16 acc: 330.3
     .half_rate_fp32_accumulate = true,
     .source = "NVIDIA Ada GPU Architecture whitepaper v2.02, Appendix A"},
    {.name = "RTX 3090",
     .capacity_bytes = 24268 * detail::mebibyte,          // nvidia-smi total 24268 MiB (typical)
     .memory_bytes_per_second = 936 * detail::giga,       // [GA102] 936 GB/s GDDR6X
     .peak_fp32_flops = 35.6 * detail::tera,              // [GA102] 35.6 TFLOPS FP32
     .peak_tf32_flops = 35.6 * detail::tera,              // [GA102] TF32 tensor 35.6 dense (= FP32 rate)
     .peak_fp16_flops = 71.0 * detail::tera,              // [GA102] FP16 tensor, FP32 acc: 71 (half rate)
     .peak_bf16_flops = 71.0 * detail::tera,              // [GA102] BF16 tensor, FP32 acc: 71 (half rate)
     .peak_fp8_flops = 0.0,                               // Ampere has no FP8 tensor cores
     .peak_fp16_fp16_accumulate_flops = 142.0 * detail::tera,  // [GA102] FP16 acc: 142
     .half_rate_fp32_accumulate = true,
     .source = "NVIDIA Ampere GA102 GPU Architecture whitepaper, Appendix A"},
    {.name = "A10",
     .capacity_bytes = 23028 * detail::mebibyte,          // nvidia-smi 23028 MiB with ECC on (24564 off)
     .memory_bytes_per_second = 600 * detail::giga,       // [A10] 600 GB/s GDDR6
     .peak_fp32_flops = 31.2 * detail::tera,              // [A10] 31.2 TFLOPS FP32
     .peak_tf32_flops = 62.5 * detail::tera,              // [A10] TF32 tensor 62.5 dense (125 sparse)
     .peak_fp16_flops = 125.0 * detail::tera,             // [A10] 125 dense (250 sparse); 288 TC x 1.695 GHz x 256
     .peak_bf16_flops = 125.0 * detail::tera,             // [A10] same as FP16
     .peak_fp8_flops = 0.0,                               // Ampere has no FP8 tensor cores
     .peak_fp16_fp16_accumulate_flops = 125.0 * detail::tera,
     .half_rate_fp32_accumulate = false,
     .source = "NVIDIA A10 datasheet (sparse figures halved); 288 tensor cores x 1.695 GHz x 256"},
    {.name = "L4",
     .capacity_bytes = 23034 * detail::mebibyte,          // nvidia-smi 23034 MiB (ECC on)
     .memory_bytes_per_second = 300 * detail::giga,       // [L4] 300 GB/s GDDR6
     .peak_fp32_flops = 30.3 * detail::tera,              // [L4] 30.3 TFLOPS FP32
     .peak_tf32_flops = 60.0 * detail::tera,              // [L4] TF32 tensor 60 dense (120 sparse)
     .peak_fp16_flops = 121.0 * detail::tera,             // [L4] 121 dense (242 sparse); 232 TC x 2.04 GHz x 256
     .peak_bf16_flops = 121.0 * detail::tera,             // [L4] same as FP16
     .peak_fp8_flops = 242.5 * detail::tera,              // [L4] FP8 242.5 dense (485 sparse)
     .peak_fp16_fp16_accumulate_flops = 121.0 * detail::tera,
     .half_rate_fp32_accumulate = false,
     .source = "NVIDIA L4 datasheet (sparse figures halved); 232 tensor cores x 2.04 GHz x 256"},
    {.name = "RTX A5000",
     .capacity_bytes = 24564 * detail::mebibyte,          // nvidia-smi 24564 MiB (ECC off)
     .memory_bytes_per_second = 768 * detail::giga,       // [A5000] 768 GB/s GDDR6
     .peak_fp32_flops = 27.8 * detail::tera,              // [A5000] 27.8 TFLOPS FP32
     .peak_tf32_flops = 55.6 * detail::tera,              // derived: half the FP16 dense rate
     .peak_fp16_flops = 111.1 * detail::tera,             // [A5000] "Tensor 222.2 TFLOPS" sparse / 2; 256 TC x 1.695 x 256
     .peak_bf16_flops = 111.1 * detail::tera,             // same as FP16
     .peak_fp8_flops = 0.0,                               // Ampere has no FP8 tensor cores
     .peak_fp16_fp16_accumulate_flops = 111.1 * detail::tera,
     .half_rate_fp32_accumulate = false,
     .source = "NVIDIA RTX A5000 datasheet (222.2 sparse tensor TFLOPS halved); 256 TC x 1.695 GHz x 256"},
    {.name = "A100 40GB SXM",
     .capacity_bytes = 40 * detail::gigabyte,             // [A100] 40 GB HBM2 (nominal; read mem_get_info)
     .memory_bytes_per_second = 1555 * detail::giga,      // [A100] 1555 GB/s
     .peak_fp32_flops = 19.5 * detail::tera,              // [A100] 19.5 TFLOPS FP32
     .peak_tf32_flops = 156.0 * detail::tera,             // [A100] TF32 156 dense (312 sparse)
     .peak_fp16_flops = 312.0 * detail::tera,             // [A100] FP16 312 dense (624 sparse)
     .peak_bf16_flops = 312.0 * detail::tera,             // [A100] BF16 312 dense
     .peak_fp8_flops = 0.0,                               // Ampere has no FP8 tensor cores
     .peak_fp16_fp16_accumulate_flops = 312.0 * detail::tera,
     .half_rate_fp32_accumulate = false,
     .source = "NVIDIA A100 Tensor Core GPU Architecture whitepaper, Table 3"},
    {.name = "H100 SXM",
     .capacity_bytes = 80 * detail::gigabyte,             // [H100] 80 GB HBM3 (nominal; read mem_get_info)
     .memory_bytes_per_second = 3350 * detail::giga,      // [H100] 3.35 TB/s
     .peak_fp32_flops = 66.9 * detail::tera,              // [H100] 67 TFLOPS FP32 (66.9)
     .peak_tf32_flops = 494.7 * detail::tera,             // [H100] TF32 989.4 sparse / 2
     .peak_fp16_flops = 989.4 * detail::tera,             // [H100] FP16 1978.9 sparse / 2
     .peak_bf16_flops = 989.4 * detail::tera,             // [H100] BF16 1978.9 sparse / 2
     .peak_fp8_flops = 1978.9 * detail::tera,             // [H100] FP8 3957.8 sparse / 2
     .peak_fp16_fp16_accumulate_flops = 989.4 * detail::tera,
     .half_rate_fp32_accumulate = false,
     .source = "NVIDIA H100 datasheet, SXM5 (sparse figures halved)"},
    {.name = "H200 SXM",
     .capacity_bytes = 141 * detail::gigabyte,            // [H200] 141 GB HBM3e (nominal; read mem_get_info)
     .memory_bytes_per_second = 4800 * detail::giga,      // [H200] 4.8 TB/s
     .peak_fp32_flops = 67.0 * detail::tera,              // [H200] 67 TFLOPS FP32
     .peak_tf32_flops = 494.7 * detail::tera,             // [H200] same GH100 compute as H100 SXM
     .peak_fp16_flops = 989.4 * detail::tera,
     .peak_bf16_flops = 989.4 * detail::tera,
     .peak_fp8_flops = 1978.9 * detail::tera,
     .peak_fp16_fp16_accumulate_flops = 989.4 * detail::tera,
     .half_rate_fp32_accumulate = false,
     .source = "NVIDIA H200 datasheet (sparse figures halved)"},
};

namespace detail {
/// Lower-case letters and digits only: "RTX-4090", "rtx 4090" and "rtx_4090" all become "rtx4090".
inline std::string device_key(std::string_view s) {
  std::string out;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u)) out.push_back(static_cast<char>(std::tolower(u)));
  }
  return out;
}
inline std::string known_device_names() {
  std::string names;
  for (const device_spec& d : known_devices) {
    if (!names.empty()) names += ", ";
    names += d.name;
  }
  return names;
}
}  // namespace detail

/// The known devices, in table order (24 GB cards first).
[[nodiscard]] inline std::span<const device_spec> device_table() noexcept { return known_devices; }

/// Looks a device up by name, ignoring case, spaces and punctuation ("rtx4090", "RTX 4090", "a100",
/// "h100", "rtx-a5000", "4090"). A short name matches when it is part of exactly one table entry.
/// Throws safeamp::error listing the known names otherwise.
[[nodiscard]] inline const device_spec& find_device(std::string_view name) {
  const std::string key = detail::device_key(name);
  if (!key.empty()) {
    for (const device_spec& d : known_devices) {
      if (detail::device_key(d.name) == key) return d;
    }
    const device_spec* match = nullptr;
    int matches = 0;
    for (const device_spec& d : known_devices) {
      if (detail::device_key(d.name).find(key) != std::string::npos) {
        match = &d;
        ++matches;
      }
    }
    if (matches == 1) return *match;
  }
  throw error("device", "'" + std::string(name) + "'", "one of " + detail::known_device_names() +
                                                            " (or give capacity, bandwidth and peak figures yourself)");
}

/// Throws safeamp::error when a (user-built) device has a figure that is zero, negative, NaN or infinite.
inline void validate(const device_spec& d) {
  auto positive = [](std::string_view field, double v) {
    if (!(v > 0.0) || !std::isfinite(v)) {
      throw error(field, std::to_string(v), "a finite number > 0");
    }
  };
  if (d.capacity_bytes == 0) throw error("device capacity_bytes", "0", "> 0 bytes");
  positive("device memory_bytes_per_second", d.memory_bytes_per_second);
  positive("device peak_fp32_flops", d.peak_fp32_flops);
  auto non_negative = [](std::string_view field, double v) {
    if (!(v >= 0.0) || !std::isfinite(v)) throw error(field, std::to_string(v), "a finite number >= 0 (0: unsupported)");
  };
  non_negative("device peak_tf32_flops", d.peak_tf32_flops);
  non_negative("device peak_fp16_flops", d.peak_fp16_flops);
  non_negative("device peak_bf16_flops", d.peak_bf16_flops);
  non_negative("device peak_fp8_flops", d.peak_fp8_flops);
  non_negative("device peak_fp16_fp16_accumulate_flops", d.peak_fp16_fp16_accumulate_flops);
}

}  // namespace safeamp
