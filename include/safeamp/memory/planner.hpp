// Nightly-window planner: searches precision policy x recomputation (each at the largest microbatch it allows, with
// accumulation to the target batch) for the fastest configuration that fits memory and the completion window;
// reports the chosen plan, the runner-up, the margin and the cost per sample, or what fails by how much and what fits.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "safeamp/error.hpp"
#include "safeamp/memory/plan_candidate.hpp"

namespace safeamp {

inline void validate(const workload& w) {
  if (w.shape) {
    validate(*w.shape);
  } else {
    if (w.parameters == 0 || w.parameters > max_parameter_count) {
      throw error("parameters", std::to_string(w.parameters), "1 .. 1e15 parameters (or a transformer shape)");
    }
    if (w.activation_bytes_per_sample == 0) {
      throw error("activation bytes per sample", "0", "> 0 bytes (or a transformer shape)");
    }
    if (w.tokens_per_sample == 0 || w.tokens_per_sample > 100'000'000) {
      throw error("tokens per sample", std::to_string(w.tokens_per_sample), "1 .. 1e8");
    }
  }
  if (!std::isfinite(w.samples) || !(w.samples >= 1.0) || w.samples > 1e15) {
    throw error("samples per night", std::to_string(w.samples), "1 .. 1e15 samples");
  }
  if (w.global_batch < 0) throw error("global batch", std::to_string(w.global_batch), ">= 1 (or 0: no target)");
}

namespace detail {
inline std::string hours_text(double seconds) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f h", seconds / 3600.0);
  return buf;
}

inline void check_options(const planner_options& o) {
  validate(o.device);
  if (!std::isfinite(o.window_seconds) || !(o.window_seconds > 0.0) || o.window_seconds > 1e9) {
    throw error("window", std::to_string(o.window_seconds) + " s", "0 < window <= 1e9 s");
  }
  if (!std::isfinite(o.efficiency) || !(o.efficiency > 0.0) || o.efficiency > 1.0) {
    throw error("efficiency", std::to_string(o.efficiency), "0 < efficiency <= 1 (fraction of the roofline bound)");
  }
  if (!std::isfinite(o.measured_samples_per_second) || o.measured_samples_per_second < 0.0) {
    throw error("measured samples per second", std::to_string(o.measured_samples_per_second), ">= 0 (0: not given)");
  }
  if (!std::isfinite(o.price_per_hour) || o.price_per_hour < 0.0) {
    throw error("price per hour", std::to_string(o.price_per_hour), ">= 0 (0: not given)");
  }
  if (o.policies.empty()) throw error("policies", "none", "at least one precision policy");
  if (o.recompute_modes.empty()) throw error("recompute modes", "none", "at least one of none, selective, full");
  if (o.data_parallel == 0 || o.data_parallel > 1'000'000) {
    throw error("data_parallel devices", std::to_string(o.data_parallel), "1 .. 1000000");
  }
}

/// Efficiency implied by a measured throughput of `measured_policy` without recomputation. A value above the
/// roofline (efficiency > 1 + tolerance) is an impossible measurement and is rejected, not used as a speedup.
inline double calibrated_efficiency(const workload& w, const planner_options& o) {
  const precision_policy p = preset_by_name(o.measured_policy);
  const double peak = peak_flops_for(o.device, p.compute);
  if (!(peak > 0.0)) throw error("measured policy", std::string(o.measured_policy), "a policy the device supports");
  const double flops = w.shape ? training_flops_per_sample(*w.shape, recompute::none)
                               : training_flops_per_sample(w.parameters, w.tokens_per_sample, recompute::none);
  const plausibility check = check_throughput(o.measured_samples_per_second * flops, peak);
  if (!check.plausible) throw error("measured samples per second", std::to_string(o.measured_samples_per_second), check.diagnosis);
  return std::min(1.0, check.ratio);
}

/// What would make microbatch 1 fit, tried on the candidate closest to fitting.
inline std::vector<std::string> remedies_for(const workload& w, const planner_options& o, const plan_candidate& best,
                                             double efficiency) {
  std::vector<std::string> out;
  const named_policy p{best.policy_name, best.policy};
  auto report = [&](const std::string& what, const plan_candidate& c) {
    out.push_back(what + (c.fits_memory() ? ": fits, largest microbatch " + std::to_string(c.max_microbatch)
                                          : ": still short by " + gb_text(static_cast<double>(c.shortfall_bytes))));
  };
  if (o.states.optimizer == optimizer_kind::adam) {
    report("adam-8bit optimizer (moments in 1 byte each instead of 4)",
           evaluate(w, o, p, best.mode, efficiency, {.optimizer = optimizer_kind::adam_8bit}, o.stage, o.data_parallel));
    report("sgd-momentum optimizer",
           evaluate(w, o, p, best.mode, efficiency, {.optimizer = optimizer_kind::sgd_momentum}, o.stage, o.data_parallel));
  }
  if (o.states.optimizer_state_format == fp32 && o.states.optimizer != optimizer_kind::adam_8bit &&
      o.states.optimizer != optimizer_kind::sgd) {
    report("bf16 optimizer states",
           evaluate(w, o, p, best.mode, efficiency, {.optimizer = o.states.optimizer, .optimizer_state_format = bf16},
                    o.stage, o.data_parallel));
  }
  if (w.shape) {
    for (recompute r : {recompute::selective, recompute::full}) {
      if (static_cast<int>(r) > static_cast<int>(best.mode)) {
        report(std::string(to_string(r)) + " recomputation", evaluate(w, o, p, r, efficiency, o.states, o.stage, o.data_parallel));
      }
    }
  }
  for (std::uint64_t n = std::max<std::uint64_t>(2, o.data_parallel * 2); n <= 4096; n *= 2) {
    const plan_candidate c = evaluate(w, o, p, best.mode, efficiency, o.states, zero_stage::parameters, n);
    if (c.fits_memory() || n == 4096) {
      report("ZeRO stage 3 over " + std::to_string(n) + " devices (parameters, gradients and optimizer states partitioned)", c);
      break;
    }
  }
  return out;
}
}  // namespace detail

/// Plans the night. Throws safeamp::error on bad input; a configuration that does not fit is a result, not an error.
[[nodiscard]] inline plan_result plan(workload w, planner_options o) {
  if (w.shape) {
    validate(*w.shape);
    w.parameters = parameter_count(*w.shape);
    w.tokens_per_sample = w.shape->sequence;
  }
  validate(w);
  if (o.budget.device_bytes == 0) o.budget.device_bytes = o.device.capacity_bytes;
  detail::check_options(o);
  o.budget.activation_bytes_per_sample = 1;  // placeholders so the budget's own checks run now
  o.budget.fixed_bytes = 0;
  validate(o.budget);

  plan_result r;
  r.efficiency = o.measured_samples_per_second > 0.0 ? detail::calibrated_efficiency(w, o) : o.efficiency;
  for (const named_policy& p : o.policies) {
    for (recompute mode : o.recompute_modes) {
      if (mode == recompute::selective && !w.shape) continue;  // needs the attention shape
      r.candidates.push_back(detail::evaluate(w, o, p, mode, r.efficiency, o.states, o.stage, o.data_parallel));
    }
  }
  // Fitting candidates first, fastest first; ties keep the listed order (policies, then none < selective < full).
  std::stable_sort(r.candidates.begin(), r.candidates.end(), [](const plan_candidate& a, const plan_candidate& b) {
    if (a.fits() != b.fits()) return a.fits();
    if (a.fits_memory() != b.fits_memory()) return a.fits_memory();
    if (a.fits_memory()) return a.total_seconds < b.total_seconds;
    return a.shortfall_bytes < b.shortfall_bytes;
  });
  if (!r.candidates.empty() && r.candidates[0].fits()) r.chosen = r.candidates[0];
  if (r.candidates.size() > 1 && r.candidates[1].fits()) r.runner_up = r.candidates[1];
  if (r.chosen) return r;

  for (const plan_candidate& c : r.candidates) {
    if (!c.supported) {
      r.failures.push_back("device: " + c.policy_name + " computes in " + format_name(c.policy.compute) + ", which the " +
                           std::string(o.device.name) + " has no tensor cores for");
      break;
    }
  }
  const auto fits_memory = std::find_if(r.candidates.begin(), r.candidates.end(),
                                        [](const plan_candidate& c) { return c.fits_memory(); });
  if (fits_memory != r.candidates.end()) {
    const plan_candidate& c = *fits_memory;  // fastest that fits memory (sorted)
    r.failures.push_back("window: the fastest configuration that fits memory (" + c.policy_name + ", recompute " +
                         std::string(to_string(c.mode)) + ", microbatch " + std::to_string(c.accumulation.microbatch) +
                         ") takes " + detail::hours_text(c.total_seconds) + ", " +
                         detail::hours_text(-c.margin_seconds) + " over the " + detail::hours_text(o.window_seconds) +
                         " window (needs " + std::to_string(c.total_seconds / o.window_seconds) + "x the time)");
    return r;
  }
  const auto closest = std::find_if(r.candidates.begin(), r.candidates.end(),
                                    [](const plan_candidate& c) { return c.supported; });
  if (closest == r.candidates.end()) return r;
  const plan_candidate& c = *closest;
  memory_budget b = o.budget;
  b.fixed_bytes = c.state_bytes;
  b.activation_bytes_per_sample = c.activation_bytes_per_sample;
  const budget_breakdown d = breakdown(b);
  r.failures.push_back("memory: microbatch 1 does not fit with any configuration; the closest (" + c.policy_name +
                       ", recompute " + std::string(to_string(c.mode)) + ") needs model states " +
                       detail::gb_text(static_cast<double>(c.state_bytes)) + " + activations " +
                       detail::gb_text(static_cast<double>(c.activation_bytes_per_sample)) + " per sample + workspace " +
                       detail::gb_text(static_cast<double>(b.workspace_bytes)) + " against " +
                       detail::gb_text(static_cast<double>(d.device_bytes - d.context_bytes - d.reserve_bytes -
                                                           d.fragmentation_bytes)) +
                       " usable: short by " + detail::gb_text(static_cast<double>(c.shortfall_bytes)));
  r.remedies = detail::remedies_for(w, o, c, r.efficiency);
  return r;
}

}  // namespace safeamp
