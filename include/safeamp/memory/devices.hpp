// Device lookup and validation: find_device(name) over the table (device_table.hpp), device_table(), validate(spec).
// Users can always build their own device_spec instead.
#pragma once

#include <cctype>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "safeamp/error.hpp"
#include "safeamp/memory/device_spec.hpp"
#include "safeamp/memory/device_table.hpp"
#include "safeamp/quoted_input.hpp"

namespace safeamp {

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

/// Looks a device up by name, ignoring case, spaces and punctuation ("rtx4090", "RTX 4090", "rtx-a5000", "4090"):
/// the full name, then a row's short_name ("a100": A100 40GB SXM, "h100": H100 SXM, "h200": H200 SXM), then a
/// part of exactly one table entry.
/// Throws safeamp::error listing the known names otherwise.
[[nodiscard]] inline const device_spec& find_device(std::string_view name) {
  const std::string key = detail::device_key(name);
  if (!key.empty()) {
    for (const device_spec& d : known_devices) {
      if (detail::device_key(d.name) == key) return d;
    }
    for (const device_spec& d : known_devices) {
      if (!d.short_name.empty() && detail::device_key(d.short_name) == key) return d;
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
  throw error("device", quoted_input(name),
              "one of " + detail::known_device_names() + " (or give capacity, bandwidth and peak figures yourself)");
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
    if (!(v >= 0.0) || !std::isfinite(v))
      throw error(field, std::to_string(v), "a finite number >= 0 (0: unsupported)");
  };
  non_negative("device peak_tf32_flops", d.peak_tf32_flops);
  non_negative("device peak_fp16_flops", d.peak_fp16_flops);
  non_negative("device peak_bf16_flops", d.peak_bf16_flops);
  non_negative("device peak_fp8_flops", d.peak_fp8_flops);
  non_negative("device peak_fp16_fp16_accumulate_flops", d.peak_fp16_fp16_accumulate_flops);
}

}  // namespace safeamp
