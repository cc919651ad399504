// A named trainable tensor: its value (kept exactly representable in the policy's parameter format),
// its gradient for the current step, and the counters of that gradient's casts.
#pragma once

#include <string>
#include <vector>

#include "safeamp/format/round_span.hpp"
#include "safeamp/sim/tensor.hpp"

namespace safeamp::sim {

struct parameter {
  std::string name;
  matrix value;          // in policy.param
  matrix grad;           // same shape: the (scaled) gradient in policy.gradient, unscaled in place later
  cast_stats grad_stats; // counters of this step's casts of the gradient into policy.gradient
};

using parameter_list = std::vector<parameter>;

/// Adds one parameter (value zero) and returns its index.
std::size_t add_parameter(parameter_list& params, std::string name, Eigen::Index rows, Eigen::Index cols);

/// Clears every gradient to zero and its counters.
void zero_grads(parameter_list& params);

/// Deterministic initialisation: value(i) = std * N(0,1) from Philox(seed, stream, i), rounded to f.
void init_normal(matrix& m, double std_dev, std::uint64_t seed, std::uint32_t stream, format_spec f);

/// A standard normal from two 32-bit words (Box-Muller in double; the same bits on every thread count).
[[nodiscard]] double normal_from_bits(std::uint32_t w0, std::uint32_t w1) noexcept;

/// FNV-1a hash over the bits of every parameter value, in order.
[[nodiscard]] std::uint64_t hash_parameters(const parameter_list& params) noexcept;

}  // namespace safeamp::sim
