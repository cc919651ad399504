// Operation classes of a training step: a precision policy says which number format each class runs in
// (the way autocast keeps softmax, norms and the loss in fp32 while matmuls run in fp16/bf16).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "safeamp/config.hpp"

namespace safeamp {

enum class op_class : std::uint8_t { matmul, elementwise, reduction, softmax, normalization, loss, optimizer_update };
inline constexpr std::size_t op_class_count = 7;

/// Every op class in declaration order (the order of precision_policy::op_formats).
inline constexpr std::array<op_class, op_class_count> all_op_classes = {
    op_class::matmul,        op_class::elementwise, op_class::reduction,       op_class::softmax,
    op_class::normalization, op_class::loss,        op_class::optimizer_update};

/// The key an op class has in a policy string ("matmul", "optimizer_update", ...).
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr std::string_view op_class_name(op_class c) noexcept {
  switch (c) {
    case op_class::matmul:
      return "matmul";
    case op_class::elementwise:
      return "elementwise";
    case op_class::reduction:
      return "reduction";
    case op_class::softmax:
      return "softmax";
    case op_class::normalization:
      return "normalization";
    case op_class::loss:
      return "loss";
    case op_class::optimizer_update:
      return "optimizer_update";
  }
  return "unknown";
}

[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr std::size_t op_class_index(op_class c) noexcept {
  return static_cast<std::size_t>(c);
}

}  // namespace safeamp
