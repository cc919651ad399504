// Cuts a list of gradient buffers into the groups that one multi-tensor kernel launch takes (a launch's
// argument holds a fixed number of pointers): consecutive buffers in list order, empty ones left out, at most
// `per_group` in a group. The norm adds its partial sums group after group in this order, so its result does
// not depend on where the list is cut. Host-only and independent of CUDA, so it is tested on the CPU.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "safeamp/cuda/amp_ops.hpp"
#include "safeamp/cuda/dtype.hpp"
#include "safeamp/error.hpp"

namespace safeamp::cuda::detail {

/// Calls launch(indices) once per group, in list order: indices (a std::span<const std::size_t>) are the
/// positions in `buffers` of at most per_group buffers with elements != 0. Nothing is called for a list of
/// empty buffers. per_group must be >= 1 (safeamp::error).
template <class Buffer, class Launch>
void for_each_group(std::span<const Buffer> buffers, std::size_t per_group, Launch&& launch) {
  if (per_group == 0) throw error("tensor group size", "0", ">= 1 buffers per launch");
  std::vector<std::size_t> group;
  group.reserve(per_group < buffers.size() ? per_group : buffers.size());
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    if (buffers[i].elements == 0) continue;
    group.push_back(i);
    if (group.size() == per_group) {
      launch(std::span<const std::size_t>(group));
      group.clear();
    }
  }
  if (!group.empty()) launch(std::span<const std::size_t>(group));
}

/// Refuses, before anything is enqueued, a buffer the scaler's kernels cannot take: an element type other
/// than f32, f16 or bf16, or a null pointer with elements. `what` names the call.
inline void check_gradient_buffers(std::span<const gradient_span> buffers, const char* what) {
  // called in every step: the field name is built only for an error
  const auto field = [what](std::size_t i, const char* part) {
    return std::string(what) + " buffer " + std::to_string(i) + " " + part;
  };
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    const gradient_span& b = buffers[i];
    if (b.type != device_dtype::f32 && b.type != device_dtype::f16 && b.type != device_dtype::bf16) {
      throw error(field(i, "type"), std::string(dtype_name(b.type)), "f32, f16 or bf16 gradients");
    }
    if (b.data == nullptr && b.elements != 0) {
      throw error(field(i, "data"), "nullptr with " + std::to_string(b.elements) + " elements",
                  "a device pointer (or 0 elements)");
    }
  }
}

}  // namespace safeamp::cuda::detail
