// What a block-scaled format (OCP MX, NVFP4) costs in memory, for the planner: bits per element (packed
// elements plus one scale per block) and the bytes of per-tensor scales (NVFP4's fp32 tensor scale).
// block_format.hpp's block_storage_bytes counts one tensor exactly; these are the per-parameter rates the model
// states and activations are priced at.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "safeamp/error.hpp"
#include "safeamp/format/block_format.hpp"
#include "safeamp/format/block_names.hpp"
#include "safeamp/quoted_input.hpp"

namespace safeamp {

/// Bits per element: the element's bits (packed: MXFP4 and NVFP4 two to a byte, MXFP6 four to three bytes) plus
/// the scale's bits shared by block_size elements (OCP MX v1.0 section 5: one 8-bit E8M0 scale per 32; NVFP4: one
/// E4M3 scale per 16). MXFP8 8.25, MXFP6 6.25, MXFP4 4.25, NVFP4 4.5. The per-tensor scale is not included.
[[nodiscard]] constexpr double block_bits_per_element(const block_format& b) noexcept {
  return static_cast<double>(total_bits(b.element)) +
         8.0 * static_cast<double>(storage_bytes(b.scale)) / static_cast<double>(b.block_size);
}

/// Bytes per element (block_bits_per_element / 8).
[[nodiscard]] constexpr double block_bytes_per_element(const block_format& b) noexcept {
  return block_bits_per_element(b) / 8.0;
}

/// Bytes of per-tensor scales a tensor in b carries: 4 (NVFP4's fp32 tensor scale), 0 for MX.
[[nodiscard]] constexpr std::uint64_t block_tensor_scale_bytes(const block_format& b) noexcept {
  return is_block_scaled(b) && !is_mx(b) ? 4u : 0u;
}

static_assert(block_bits_per_element(mxfp8_e4m3) == 8.25 && block_bits_per_element(mxfp8_e5m2) == 8.25);
static_assert(block_bits_per_element(mxfp6_e2m3) == 6.25 && block_bits_per_element(mxfp6_e3m2) == 6.25);
static_assert(block_bits_per_element(mxfp4) == 4.25);
static_assert(block_bits_per_element(nvfp4) == 4.5);
static_assert(block_tensor_scale_bytes(nvfp4) == 4u && block_tensor_scale_bytes(mxfp8_e4m3) == 0u);
static_assert(block_tensor_scale_bytes(no_block_scaling) == 0u);

/// The planner's storage keys (--weight-format, --gradient-format, --activation-format): a block format name,
/// or "none" for the policy's own format (no_block_scaling). `key` names the input in the error.
[[nodiscard]] inline block_format parse_block_storage(std::string_view key, std::string_view name) {
  if (name == "none") return no_block_scaling;
  block_format b{};
  if (detail::parse_block_format_name(name, b)) return b;
  throw error(key, quoted_input(name),
              "a block format: " + std::string(block_format_names_accepted) +
                  ", or none (the policy's format; plain formats are set in --policy)");
}

}  // namespace safeamp
