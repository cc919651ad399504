// Internal to safeamp::sim: the ops' scalar rounding (round_scalar) chosen once per loop instead of once per
// element, so that an op's fp32 loops are plain float loops (which the compiler keeps in registers and vectorises
// where the order allows) and the other formats make one call per element, as round_scalar does.
#pragma once

#include "safeamp/sim/tensor.hpp"

namespace safeamp::sim::detail {

/// round_scalar(fp32, x): the identity.
struct keep_fp32 {
  [[nodiscard]] float operator()(float x) const noexcept { return x; }
};

/// round_scalar(f, x) for a format f other than fp32.
struct round_narrow {
  format_spec f;
  [[nodiscard]] float operator()(float x) const noexcept { return round_scalar_narrow(f, x); }
};

/// body(r) where r(x) == round_scalar(f, x) for every x: keep_fp32 when f is fp32, else round_narrow.
template <class Body>
void with_round(format_spec f, Body&& body) {
  if (f == fp32) {
    body(keep_fp32{});
  } else {
    body(round_narrow{f});
  }
}

}  // namespace safeamp::sim::detail
