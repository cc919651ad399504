// The precision policy value: which format parameters are stored in, matmuls compute in, outputs and
// gradients are written in, GEMMs accumulate in, whether fp32 master weights are kept, and the format
// each op class runs in. An immutable, structural value: usable as a template argument.
#pragma once

#include <array>
#include <cstdint>

#include "safeamp/config.hpp"
#include "safeamp/format/block_format.hpp"
#include "safeamp/format/format_spec.hpp"
#include "safeamp/policy/op_class.hpp"

namespace safeamp {

struct precision_policy {
  format_spec param = fp32;       // parameter storage format
  format_spec compute = fp32;     // where a policy string derives the matmul format from; GEMMs read format_for(matmul)
  format_spec output = fp32;      // op output (activation) format
  format_spec accumulate = fp32;  // GEMM accumulation format
  format_spec gradient = fp32;    // gradient format (E5M2 in fp8-hybrid)
  bool master_weights = false;    // fp32 master copy of the parameters is kept
  std::array<format_spec, op_class_count> op_formats = {fp32, fp32, fp32, fp32, fp32, fp32, fp32};
  /// Block scaling of matmul inputs (OCP MX, NVFP4), or no_block_scaling. When set, format_for(matmul) is its
  /// element format and GEMMs quantize both operands in blocks along K (the reduction axis, as the hardware
  /// does), accumulating in fp32. Set it with with_matmul_blocks (or "matmul=mxfp8" in a policy string).
  block_format matmul_blocks = no_block_scaling;

  /// The format op class `c` runs in.
  [[nodiscard]] SAFEAMP_HOST_DEVICE constexpr format_spec format_for(op_class c) const noexcept {
    return op_formats[op_class_index(c)];
  }
  /// A copy with op class `c` running in `f` (policies are values; nothing is mutated in place). A plain format
  /// for matmul clears block scaling, as "matmul=<format>" does in a policy string.
  [[nodiscard]] constexpr precision_policy with_op(op_class c, format_spec f) const noexcept {
    precision_policy p = *this;
    p.op_formats[op_class_index(c)] = f;
    if (c == op_class::matmul) p.matmul_blocks = no_block_scaling;
    return p;
  }

  /// A copy whose matmuls take block-scaled inputs b (and run in b's element format).
  [[nodiscard]] constexpr precision_policy with_matmul_blocks(const block_format& b) const noexcept {
    precision_policy p = with_op(op_class::matmul, is_block_scaled(b) ? b.element : format_for(op_class::matmul));
    p.matmul_blocks = b;
    return p;
  }

  friend constexpr bool operator==(const precision_policy&, const precision_policy&) = default;
};

/// How gradients must be protected against underflow under a policy.
///  none:               gradients have fp32's exponent range (fp32, tf32, bf16): no loss scaling needed.
///  dynamic_loss_scale: 16-bit gradients with a narrow exponent (fp16): one global dynamic loss scale.
///  per_tensor_scaling: 8-bit gradients (E5M2/E4M3): per-tensor (delayed) scaling factors.
enum class gradient_scaling : std::uint8_t { none, dynamic_loss_scale, per_tensor_scaling };

[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr gradient_scaling required_scaling(const precision_policy& p) noexcept {
  if (p.gradient.exponent_bits >= fp32.exponent_bits) return gradient_scaling::none;
  if (storage_bytes(p.gradient) == 1) return gradient_scaling::per_tensor_scaling;
  return gradient_scaling::dynamic_loss_scale;
}

/// True when the gradient format's exponent range is narrower than fp32's (fp16, fp8), so small
/// gradients underflow unless they are scaled. bf16 and tf32 have fp32's range and need none.
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr bool needs_loss_scaling(const precision_policy& p) noexcept {
  return required_scaling(p) != gradient_scaling::none;
}

/// The format the optimizer's update arithmetic uses: fp32 with master weights, else the parameters'.
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr format_spec update_format(const precision_policy& p) noexcept {
  return p.master_weights ? fp32 : p.param;
}

}  // namespace safeamp
