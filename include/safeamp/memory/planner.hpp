// Nightly-window planner: searches precision policy x recomputation (each at the largest microbatch it allows, with
// accumulation to the target batch) for the fastest configuration that fits memory and the completion window;
// reports the chosen plan, the runner-up, the margin and the cost per sample, or what fails by how much and what fits.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "safeamp/error.hpp"
#include "safeamp/memory/plan_candidate.hpp"
#include "safeamp/memory/remedies.hpp"
#include "safeamp/quoted_input.hpp"

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
/// Hours with two decimals; past a million hours in three significant digits, so the unit is never cut off.
inline std::string hours_text(double seconds) {
  if (!std::isfinite(seconds)) throw error("time", std::to_string(seconds) + " s", "a finite time (check the inputs)");
  char buf[64];
  const double hours = seconds / 3600.0;
  std::snprintf(buf, sizeof buf, std::fabs(hours) < 1e6 ? "%.2f h" : "%.3g h", hours);
  return buf;
}

inline void check_options(const planner_options& o) {
  validate(o.device);
  if (!std::isfinite(o.window_seconds) || !(o.window_seconds >= min_window_seconds) ||
      o.window_seconds > max_window_seconds) {
    throw error("window", std::to_string(o.window_seconds) + " s", "1 s <= window <= 1e9 s");
  }
  if (!std::isfinite(o.efficiency) || !(o.efficiency >= min_efficiency) || o.efficiency > 1.0) {
    throw error("efficiency", std::to_string(o.efficiency),
                "0.001 <= efficiency <= 1 (fraction of the roofline bound)");
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
  if (!std::isfinite(o.peak_calibration_ratio) || o.peak_calibration_ratio < 1.0 / max_calibration_ratio ||
      o.peak_calibration_ratio > max_calibration_ratio) {
    throw error("peak calibration ratio", std::to_string(o.peak_calibration_ratio),
                "1/4 .. 4 (measured over modelled)");
  }
}

/// The efficiency a measured throughput implies, and the measured configuration at it.
struct throughput_calibration {
  double efficiency = 0.0;
  plan_candidate measured{};  // measured_policy with measured_recompute, as planned, at `efficiency`
};

/// Solves for the efficiency at which the measured configuration (planner_options::measured_policy with
/// measured_recompute and the planned states, stage, replicas and accumulation, at the microbatch the planner gives
/// it) takes exactly 1 / measured seconds per sample. Only its compute scales with the efficiency e:
///   total(e) = samples x (roofline / e + fetches) / replicas + optimizer steps = samples / measured
///   e = samples x roofline / replicas / (samples / measured - samples x fetches / replicas - optimizer steps)
/// so the planned rate of the measured configuration is the measurement, whatever its FLOPs (fp8's bf16 share, LoRA,
/// recomputation), its microbatch (a memory-bound GEMM) or its optimizer step (offloaded or not). A measurement
/// faster than that configuration's roofline bound (e > 1 + default_plausibility_tolerance: datasheet peaks are at
/// the boost clock) or than its optimizer steps and fetches alone is impossible and refused, naming the bound; one
/// that needs e < min_efficiency too. An e in (1, 1.1] is used as it is, not clamped.
inline throughput_calibration calibrated_efficiency(const workload& w, const planner_options& o) {
  const double measured = o.measured_samples_per_second;
  const named_policy& p = o.measured_policy;
  const recompute mode = o.measured_recompute;
  const plan_candidate c = evaluate(w, o, p, mode, 1.0, o.states, o.stage, o.data_parallel);
  const std::string device(o.device.name);
  if (!c.supported) {
    throw error(
        "measured policy", quoted_input(p.name),
        "a policy the " + device + " has math units for (it has none for " + format_name(c.unsupported_format) + ")");
  }
  const std::string what = std::string(p.name) + ", recompute " + std::string(to_string(mode));
  if (!c.fits_memory()) {
    throw error("measured policy", quoted_input(what),
                "a configuration that fits memory on the " + device +
                    " (the throughput is calibrated on the measured configuration as planned)");
  }
  const double replicas = static_cast<double>(o.data_parallel);
  const double compute = w.samples * c.roofline_seconds_per_sample / replicas;  // at e = 1
  const double fixed = w.samples * c.fetch_seconds_per_sample / replicas + c.optimizer_seconds;
  const double measured_seconds = w.samples / measured;
  const double e = compute / (measured_seconds - fixed);
  const auto rate = [&](double efficiency) { return w.samples / (compute / efficiency + fixed); };
  const auto number = [](const char* format, double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, format, v);
    return std::string(buf);
  };
  // Built as strings: a policy string has no length bound that a fixed buffer could hold.
  const std::string config = what + ", microbatch " + std::to_string(c.accumulation.microbatch) + " x " +
                             std::to_string(c.accumulation.steps) + " steps on " + std::to_string(o.data_parallel) +
                             " replica(s) of the " + device;
  const std::string value = rate_text(measured) + " samples/s";
  const double tolerance = default_plausibility_tolerance;
  if (!(measured_seconds > fixed) || e > 1.0 + tolerance) {
    throw error("measured samples per second", value,
                "at most " + number("%.5g", rate(1.0 + tolerance)) + " samples/s for " + config +
                    ": its roofline bound is " + number("%.5g", rate(1.0)) + " samples/s (" +
                    number("%.4g", fixed / w.samples) + " s of optimizer steps and fetches per sample included), +" +
                    number("%.0f", 100.0 * tolerance) +
                    "% on the compute for boost clocks; a faster measurement is impossible (typical causes: the timer "
                    "stopped before the device finished, or the rate counts tokens, or one replica of a "
                    "data-parallel job instead of the whole job)");
  }
  if (!(e >= min_efficiency)) {  // a throughput this low would plan with a meaningless efficiency
    throw error(
        "measured samples per second", value,
        ">= " + number("%.4g", rate(min_efficiency)) + " samples/s for " + config + " (0.1% of the roofline bound)");
  }
  return {.efficiency = e, .measured = evaluate(w, o, p, mode, e, o.states, o.stage, o.data_parallel)};
}

/// Times within this relative distance rank as equal: the same figure reached along different floating-point paths
/// (bf16-mixed and fp16-mixed run at the same peak). Among equal times the better-known quality goes first.
inline constexpr double equal_time_tolerance = 1e-9;

/// fp32 and a parity PASS first, then unverified, then a parity FAIL.
inline int quality_rank(quality_status q) noexcept {
  return q == quality_status::reference || q == quality_status::verified ? 0 : q == quality_status::unverified ? 1 : 2;
}

/// Whether the planner leaves `mode` out of `modes`: selective recomputation needs the attention shape (without one
/// the step time knows only none and full), and with flash attention it drops nothing, so it would repeat none's
/// figures. It is left out only where the list holds what replaces it (another mode; none, for flash). Asked for
/// alone (`--recompute selective`) it is planned: refused without a shape (training_flops_per_sample says why), and
/// with flash attention planned with none's figures, under its own name. Until 2026-12 it was left out even then, and
/// the plan had no candidate at all ("No configuration fits:" over an empty list).
inline bool left_out(const workload& w, const std::vector<recompute>& modes, recompute mode) noexcept {
  if (mode != recompute::selective) return false;
  const auto has = [&](recompute m) { return std::find(modes.begin(), modes.end(), m) != modes.end(); };
  if (!w.shape) return has(recompute::none) || has(recompute::full);
  return !recomputes_attention_core(*w.shape, mode) && has(recompute::none);
}

/// Every (policy, recompute) candidate, fitting ones first, fastest first; among equally fast ones (within
/// equal_time_tolerance of the fastest of them) verified quality first; other ties keep the listed order.
inline std::vector<plan_candidate> ranked_candidates(const workload& w, const planner_options& o, double efficiency) {
  std::vector<plan_candidate> out;
  for (const named_policy& p : o.policies) {
    for (recompute mode : o.recompute_modes) {
      if (left_out(w, o.recompute_modes, mode)) continue;
      out.push_back(evaluate(w, o, p, mode, efficiency, o.states, o.stage, o.data_parallel));
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const plan_candidate& a, const plan_candidate& b) {
    if (a.fits() != b.fits()) return a.fits();
    if (a.fits_memory() != b.fits_memory()) return a.fits_memory();
    if (a.fits_memory()) return a.total_seconds < b.total_seconds;
    return a.missing_bytes() < b.missing_bytes();
  });
  // Runs of equal times (anchored at each run's fastest, so the grouping is well defined), verified first.
  for (auto first = out.begin(); first != out.end();) {
    auto last = first + 1;
    if (first->fits_memory()) {
      while (last != out.end() && last->fits() == first->fits() && last->fits_memory() &&
             last->total_seconds <= first->total_seconds * (1.0 + equal_time_tolerance)) {
        ++last;
      }
      std::stable_sort(first, last, [](const plan_candidate& a, const plan_candidate& b) {
        return quality_rank(a.quality) < quality_rank(b.quality);
      });
    }
    first = last;
  }
  return out;
}

/// What to do about a missed window with `c`, the fastest configuration that fits memory: how many samples fit
/// (window x samples / total time, rounded down), how many devices of the same card would finish it (labelled with
/// what they need: data-parallel replicas x the tensor-parallel size), and which table devices finish the whole night
/// in time.
inline std::vector<std::string> window_remedies(const workload& w, const planner_options& o, const plan_candidate& c,
                                                double efficiency) {
  std::vector<std::string> out;
  const double fit_samples = std::floor(w.samples * o.window_seconds / c.total_seconds);
  char buf[224];
  if (fit_samples >= 1.0) {
    std::snprintf(buf, sizeof buf, "train fewer samples: about %.6g of the %.6g (%.0f%%) fit in the window with %s, %s",
                  fit_samples, w.samples, 100.0 * fit_samples / w.samples, c.policy_name.c_str(),
                  std::string(to_string(c.quality)).c_str());
  } else {
    std::snprintf(buf, sizeof buf, "train fewer samples: not even one sample fits in the window with %s (%.4g s each)",
                  c.policy_name.c_str(), c.total_seconds / w.samples);
  }
  out.emplace_back(buf);
  // More of the same card, data parallel: the smallest power of two that finishes (labelled with what it needs: under
  // tensor parallelism every replica is t devices). Under --rounding exact only counts that divide the global batch
  // are tried; once one does not, no larger one does (each is twice the last), and a line says so.
  for (std::uint64_t n = o.data_parallel * 2; n <= 1024; n *= 2) {
    if (!batch_splits_over(w, o, n)) {
      out.push_back("data parallel over " + devices_text(w, n) + " or more: NOT EVALUATED: --rounding exact keeps " +
                    "the global batch of " + std::to_string(w.global_batch) + " only over a data-parallel size " +
                    "that divides it" +
                    (n > o.data_parallel * 2 ? " (up to " + devices_text(w, n / 2) + " none finishes in time)" : "") +
                    "; a global batch that " + std::to_string(n) + " divides, or --rounding exact-or-ceil, would " +
                    "let more devices be tried");
      break;
    }
    const plan_candidate more = evaluate(w, o, {c.policy_name, c.policy}, c.mode, efficiency, c.states, o.stage, n);
    if (more.fits()) {
      out.push_back("data parallel over " + devices_text(w, n) + " (NEEDS " + std::to_string(devices_in_all(w, n)) +
                    " devices; planned for " + std::to_string(devices_in_all(w, o.data_parallel)) +
                    "): " + c.policy_name + " takes " + hours_text(more.total_seconds) + ", " +
                    std::string(to_string(c.quality)));
      break;
    }
  }
  if (o.budget.device_bytes != o.device.capacity_bytes) return out;  // a given capacity is not the table's
  for (const device_spec& d : device_table()) {
    if (d.name == o.device.name) continue;
    planner_options other = o;
    other.device = d;
    other.budget.device_bytes = d.capacity_bytes;
    const std::vector<plan_candidate> r = ranked_candidates(w, other, efficiency);
    if (!r.empty() && r[0].fits()) {
      out.push_back("a different card (" + std::string(d.name) + "): " + r[0].policy_name + ", recompute " +
                    std::string(to_string(r[0].mode)) + " takes " + hours_text(r[0].total_seconds) + ", " +
                    std::string(to_string(r[0].quality)));
    }
  }
  return out;
}
/// Memory remedies for the night: the combined search (memory_remedies) from each policy's closest configuration,
/// the fitting ones merged and sorted like memory_remedies' (least intrusive, then fastest, then fewest changes), one
/// per set of changes, three at most, each naming its policy and quality. When none fits on the planned devices, the
/// remedies of the overall closest configuration (`closest`, with the labelled ZeRO-3 fallback).
inline std::vector<std::string> planner_memory_remedies(const workload& w, const planner_options& o,
                                                        const std::vector<plan_candidate>& candidates,
                                                        const plan_candidate& closest, double efficiency) {
  std::vector<remedy> fitting;
  for (const named_policy& p : o.policies) {
    const auto c = std::find_if(candidates.begin(), candidates.end(), [&](const plan_candidate& x) {
      return x.supported && x.policy_name == p.name;  // sorted: the first is this policy's closest
    });
    if (c == candidates.end() || c->quality == quality_status::failed) continue;
    for (const remedy& m : memory_remedies(w, o, *c, efficiency)) {
      if (m.result.fits_memory() && m.devices == 1) fitting.push_back(m);
    }
  }
  std::stable_sort(fitting.begin(), fitting.end(), detail::remedy_before);
  std::vector<std::string> out;
  std::vector<std::vector<std::string>> listed;
  for (const remedy& m : fitting) {
    if (out.size() == 3 || std::find(listed.begin(), listed.end(), m.changes) != listed.end()) continue;
    listed.push_back(m.changes);
    const bool recompute_changed = std::any_of(m.changes.begin(), m.changes.end(),
                                               [](const std::string& c) { return c.rfind("recompute ", 0) == 0; });
    out.push_back("with " + m.result.policy_name + " (" + std::string(to_string(m.result.quality)) + ")" +
                  (recompute_changed ? "" : ", recompute " + std::string(to_string(m.result.mode))) + ": " + m.text());
  }
  if (!out.empty()) return out;
  for (const remedy& m : memory_remedies(w, o, closest, efficiency)) out.push_back(m.text());
  return out;
}
}  // namespace detail

/// Plans the night. Throws safeamp::error on bad input; a configuration that does not fit is a result, not an error.
[[nodiscard]] inline plan_result plan(workload w, planner_options o) {
  if (w.shape) {
    validate(*w.shape);
    if (w.parameters == 0) w.parameters = parameter_count(*w.shape);  // a given count overrides the estimate
    w.tokens_per_sample = w.shape->sequence;
  }
  validate(w);
  if (o.budget.device_bytes == 0) o.budget.device_bytes = o.device.capacity_bytes;
  detail::check_options(o);
  o.budget.activation_bytes_per_sample = 1;  // placeholders so the budget's own checks run now
  o.budget.fixed_bytes = 0;
  validate(o.budget);

  plan_result r;
  r.efficiency = o.efficiency;
  if (o.measured_samples_per_second > 0.0) {
    detail::throughput_calibration t = detail::calibrated_efficiency(w, o);
    r.efficiency = t.efficiency;
    r.calibrated_on = std::move(t.measured);
  }
  r.candidates = detail::ranked_candidates(w, o, r.efficiency);
  if (!r.candidates.empty() && r.candidates[0].fits()) r.chosen = r.candidates[0];
  if (r.candidates.size() > 1 && r.candidates[1].fits()) r.runner_up = r.candidates[1];
  for (const plan_candidate& c : r.candidates) {
    if (c.fits() && (c.quality == quality_status::reference || c.quality == quality_status::verified)) {
      r.fastest_verified = c;
      break;
    }
  }
  if (r.chosen) return r;

  for (const plan_candidate& c : r.candidates) {
    if (!c.supported) {
      r.failures.push_back("device: " + c.policy_name + " computes in " + format_name(c.unsupported_format) +
                           ", which the " + std::string(o.device.name) + " has no tensor cores for");
      break;
    }
  }
  const auto fits_memory = std::find_if(r.candidates.begin(), r.candidates.end(), [](const plan_candidate& c) {
    return c.fits_memory() && c.quality != quality_status::failed;
  });
  if (fits_memory != r.candidates.end()) {
    const plan_candidate& c = *fits_memory;  // fastest that fits memory (sorted)
    r.failures.push_back("window: the fastest configuration that fits memory (" + c.policy_name + ", recompute " +
                         std::string(to_string(c.mode)) + ", microbatch " + std::to_string(c.accumulation.microbatch) +
                         ") takes " + detail::hours_text(c.total_seconds) + ", " +
                         detail::hours_text(-c.margin_seconds) + " over the " + detail::hours_text(o.window_seconds) +
                         " window (needs " + std::to_string(c.total_seconds / o.window_seconds) + "x the time)");
    r.remedies = detail::window_remedies(w, o, c, r.efficiency);
    return r;
  }
  if (std::any_of(r.candidates.begin(), r.candidates.end(), [](const plan_candidate& c) { return c.fits_memory(); })) {
    r.failures.push_back("parity: every configuration that fits memory uses a policy whose parity result failed");
    return r;
  }
  const auto closest =
      std::find_if(r.candidates.begin(), r.candidates.end(), [](const plan_candidate& c) { return c.supported; });
  if (closest == r.candidates.end()) return r;
  const plan_candidate& c = *closest;
  const std::size_t phase = static_cast<std::size_t>(c.limiting_phase);
  if (c.max_microbatch >= 1 && c.host_shortfall_bytes > 0) {
    r.failures.push_back("host memory: the closest (" + c.policy_name + ", recompute " +
                         std::string(to_string(c.mode)) + ") fits the device but offloads " + detail::host_text(c) +
                         ": short by " + detail::gb_text(static_cast<double>(c.host_shortfall_bytes)));
    r.remedies = detail::planner_memory_remedies(w, o, r.candidates, c, r.efficiency);
    return r;
  }
  r.failures.push_back("memory: microbatch 1 does not fit with any configuration; the closest (" + c.policy_name +
                       ", recompute " + std::string(to_string(c.mode)) + ", " +
                       std::string(to_string(c.states.optimizer)) + " " + std::string(to_string(c.states.impl)) +
                       ") peaks in the " + std::string(to_string(c.limiting_phase)) + " at " +
                       detail::gb_text(static_cast<double>(c.phase_peak_bytes[phase])) + " against " +
                       detail::gb_text(static_cast<double>(detail::phase_pool_bytes(o.budget))) +
                       " usable (after context, reserve, fragmentation and workspace): short by " +
                       detail::gb_text(static_cast<double>(c.shortfall_bytes)));
  r.remedies = detail::planner_memory_remedies(w, o, r.candidates, c, r.efficiency);
  return r;
}

}  // namespace safeamp
