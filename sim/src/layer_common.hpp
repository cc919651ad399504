// Internal to safeamp::sim: what the layer implementations (layers.cpp, activation.cpp) share.
#pragma once

#include "safeamp/policy/precision_policy.hpp"
#include "safeamp/sim/tensor.hpp"

namespace safeamp::sim::detail {

/// Casts an activation to the storage format (policy.output) when it differs from the op's format.
inline void store_activation(exec_context& ctx, const precision_policy& pol, matrix& y, format_spec op_format) {
  if (pol.output != op_format) ctx.activation_stats += cast_in_place(ctx, y, pol.output);
}

}  // namespace safeamp::sim::detail
