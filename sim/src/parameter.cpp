// Parameters: creation, zeroing, deterministic initialisation, hashing.
#include "safeamp/sim/parameter.hpp"

#include <cmath>
#include <numbers>

namespace safeamp::sim {

std::size_t add_parameter(parameter_list& params, std::string name, Eigen::Index rows, Eigen::Index cols) {
  parameter p;
  p.name = std::move(name);
  p.value = matrix::Zero(rows, cols);
  p.grad = matrix::Zero(rows, cols);
  params.push_back(std::move(p));
  return params.size() - 1;
}

void zero_grads(parameter_list& params) {
  for (parameter& p : params) {
    p.grad.setZero();
    p.grad_stats = cast_stats{};
  }
}

double normal_from_bits(std::uint32_t w0, std::uint32_t w1) noexcept {
  constexpr double two_to_minus_32 = 1.0 / 4294967296.0;
  const double u1 = (static_cast<double>(w0) + 1.0) * two_to_minus_32;  // (0, 1]
  const double u2 = static_cast<double>(w1) * two_to_minus_32;          // [0, 1)
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

void init_normal(matrix& m, double std_dev, std::uint64_t seed, std::uint32_t stream, format_spec f) {
  for (Eigen::Index i = 0; i < m.size(); ++i) {
    const auto n = static_cast<std::uint64_t>(i);
    const philox4x32_block r = philox4x32_10(static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(n >> 32),
                                             stream, 0x5EEDu, static_cast<std::uint32_t>(seed),
                                             static_cast<std::uint32_t>(seed >> 32));
    m.data()[i] = round_scalar(f, static_cast<float>(std_dev * normal_from_bits(r.v[0], r.v[1])));
  }
}

std::uint64_t hash_parameters(const parameter_list& params) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const parameter& p : params) h = hash_bits(span_of(p.value), h);
  return h;
}

}  // namespace safeamp::sim
