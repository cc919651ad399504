// Internal to safeamp::sim: what the layer implementations (layers.cpp, activation.cpp, loss.cpp, autocast.cpp) share.
#pragma once

#include <algorithm>

#include "safeamp/policy/precision_policy.hpp"
#include "safeamp/sim/tensor.hpp"

namespace safeamp::sim::detail {

/// The counters of one result rounded twice in a row, `first` into its op's format and `then` into the format it
/// is stored in, counted once per element (docs/simulator.md, "Cast counters"): its elements once; overflow and
/// underflow where either rounding caused them (an element the first overflowed or zeroed is inf, NaN or 0 for
/// the second, which does not count it again; only a value the first saturated, overflowing the second too, is
/// counted twice); subnormal the larger of the two counts (exact when the second keeps the first's subnormals or
/// zeroes them, or when one of the two makes none; a lower bound when both make their own, as fp16 then e4m3
/// does); NaN and inf those of the stored values.
[[nodiscard]] inline cast_stats counted_once(const cast_stats& first, const cast_stats& then) noexcept {
  cast_stats s = then;
  s.elements = first.elements;
  s.overflow += first.overflow;
  s.underflow += first.underflow;
  s.subnormal = std::max(first.subnormal, then.subnormal);
  return s;
}

/// Rounds `m` into its op's format `op`, then into `stored` when that differs, returning the counters of both with
/// each element once (counted_once): an activation (stored in policy.output) or an activation's dx (policy.gradient).
inline cast_stats cast_then_store(exec_context& ctx, matrix& m, format_spec op, format_spec stored) {
  const cast_stats first = cast_in_place(ctx, m, op);
  return stored == op ? first : counted_once(first, cast_in_place(ctx, m, stored));
}

/// Casts an activation to the storage format (policy.output) when it differs from the op's format.
inline void store_activation(exec_context& ctx, const precision_policy& pol, matrix& y, format_spec op_format) {
  if (pol.output != op_format) ctx.activation_stats += cast_in_place(ctx, y, pol.output);
}

}  // namespace safeamp::sim::detail
