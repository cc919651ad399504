// Helpers shared by the simulator tests: float bits for failure messages, run configurations of the shipped
// models and summaries of per-layer gradient counters.
#pragma once

#include <cstdint>
#include <iomanip>
#include <map>
#include <sstream>
#include <string>

#include "safeamp/config.hpp"
#include "safeamp/policy.hpp"
#include "safeamp/scaling.hpp"
#include "safeamp/sim/run_config.hpp"
#include "safeamp/sim/run_result.hpp"

namespace sim_test {

/// A float's bits, and for failure messages the bits in hex with the value beside them.
inline std::uint32_t bits_of(float x) { return safeamp::bit_cast<std::uint32_t>(x); }
inline std::string hex(float x) {
  std::ostringstream s;
  s << "0x" << std::hex << std::setw(8) << std::setfill('0') << bits_of(x) << " (" << std::setprecision(9) << x << ")";
  return s.str();
}

/// The MLP classifier on Gaussian clusters, small enough for CI (batch 256, default shape).
inline safeamp::sim::run_config mlp_config(const safeamp::precision_policy& pol, std::int64_t steps) {
  safeamp::sim::run_config c;
  c.label = "mlp";
  c.model = safeamp::sim::model_kind::mlp;
  c.policy = pol;
  c.steps = steps;
  c.batch_size = 256;
  c.data.eval_samples = 1024;
  c.optimizer.kind = safeamp::sim::optimizer_kind::sgd_momentum;
  c.optimizer.learning_rate = 0.1;
  c.scaler.kind = safeamp::sim::scaler_kind::none;
  return c;
}

/// The decoder-only transformer on the GPL-3 text (Debian base-files), small enough for CI.
inline safeamp::sim::run_config transformer_config(const safeamp::precision_policy& pol, std::int64_t steps) {
  safeamp::sim::run_config c;
  c.label = "transformer";
  c.model = safeamp::sim::model_kind::transformer;
  c.transformer =
      safeamp::sim::transformer_shape{.context = 32, .width = 64, .heads = 4, .layers = 2, .ffn_multiplier = 4};
  c.policy = pol;
  c.steps = steps;
  c.batch_size = 8;
  c.data.eval_samples = 64;
  c.optimizer.kind = safeamp::sim::optimizer_kind::adamw;
  c.optimizer.learning_rate = 3e-3;
  c.scaler.kind = safeamp::sim::scaler_kind::none;
  return c;
}

/// Fraction of gradient elements that underflowed, per layer name, over every step.
inline std::map<std::string, double> underflow_fraction(const safeamp::sim::run_result& r) {
  std::map<std::string, std::pair<double, double>> sums;
  for (const auto& s : r.steps) {
    for (const auto& g : s.grads) {
      sums[g.name].first += static_cast<double>(g.underflow);
      sums[g.name].second += static_cast<double>(g.elements);
    }
  }
  std::map<std::string, double> out;
  for (const auto& [name, v] : sums) out[name] = v.second > 0 ? v.first / v.second : 0.0;
  return out;
}

inline double relative_gap(double a, double reference) { return std::abs(a - reference) / std::abs(reference); }

}  // namespace sim_test
