// `safeamp plan`: the budget report for given state and per-sample bytes (breakdown, largest microbatch, headroom,
// accumulation) and the nightly-planner report (every configuration, the chosen plan, the runner-up, the fastest
// verified one, or what fails by how much and what would make it fit).
#pragma once

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "plan_print.hpp"

namespace safeamp::tool {

inline int report_budget(const plan_request& r, nlohmann::json& out, bool json) {
  const memory_budget& b = r.budget;
  const budget_breakdown d = breakdown(b);
  const std::int64_t micro = max_microbatch(b);
  nlohmann::json j = {{"device_bytes", d.device_bytes},
                      {"context_bytes", d.context_bytes},
                      {"reserve_fraction", b.reserve_fraction},
                      {"reserve_bytes", d.reserve_bytes},
                      {"fragmentation_fraction", b.fragmentation_fraction},
                      {"fragmentation_bytes", d.fragmentation_bytes},
                      {"workspace_bytes", d.workspace_bytes},
                      {"fixed_bytes", d.fixed_bytes},
                      {"available_for_activations_bytes", d.available_for_activations_bytes},
                      {"activation_bytes_per_sample", b.activation_bytes_per_sample},
                      {"max_microbatch", micro}};
  if (r.states_ledger) {
    j["model_states"] = {{"parameters", r.states_ledger->parameter_count},
                         {"policy", r.policy_name},
                         {"optimizer", std::string(to_string(r.states.optimizer))},
                         {"zero_stage", static_cast<int>(r.stage)},
                         {"data_parallel", r.data_parallel},
                         {"weight_bytes", r.states_ledger->weight_bytes},
                         {"gradient_bytes", r.states_ledger->gradient_bytes},
                         {"master_bytes", r.states_ledger->master_bytes},
                         {"optimizer_bytes", r.states_ledger->optimizer_bytes},
                         {"fp32_gradient_bytes", r.states_ledger->fp32_gradient_bytes},
                         {"total_bytes", r.states_ledger->total_bytes()}};
  }
  if (r.shape) {
    const activation_ledger l =
        activation_ledger_for(*r.shape, 1, r.mode, activation_element_bytes(r.policy, r.states));
    j["activations"] = {{"recompute", std::string(to_string(r.mode))},
                        {"stored_bytes_per_sample", l.stored_bytes},
                        {"peak_bytes_per_sample", l.peak_bytes},
                        {"peak_block", l.peak_block}};
  }
  std::optional<accumulation_plan> acc;
  if (micro >= 1) {
    j["headroom_bytes"] = headroom_bytes(b, micro);
    if (r.global_batch > 0) {
      acc = accumulation_for({.target_global_batch = r.global_batch,
                              .max_microbatch = micro,
                              .data_parallel = static_cast<std::int64_t>(r.data_parallel),
                              .rule = r.rounding});
      j["accumulation"] = {{"target_global_batch", r.global_batch},
                           {"microbatch", acc->microbatch},
                           {"steps", acc->steps},
                           {"global_batch", acc->global_batch},
                           {"rounding", std::string(to_string(r.rounding))},
                           {"headroom_bytes", headroom_bytes(b, acc->microbatch)}};
    }
  }
  if (micro < 1) j["shortfall_bytes"] = -headroom_bytes(b, 1);
  if (json) {
    out["device"] = device_json(r.device);
    out["budget"] = j;
    return micro >= 1 ? exit_ok : exit_check_failed;
  }
  print_device(r.device, r.capacity_given);
  if (r.states_ledger) print_states_ledger(r);
  if (r.shape) print_activation_ledger(*r.shape, r.mode, activation_element_bytes(r.policy, r.states));
  print_overheads("Memory budget", b, d);
  print_size_row("model states (fixed)", d.fixed_bytes, "-");
  if (micro >= 1) {
    print_size_row("available for activations", d.available_for_activations_bytes, "=");
  } else {
    print_size_row("SHORT before any activations", d.fixed_shortfall_bytes, "!");
  }
  print_size_row("activations per sample", b.activation_bytes_per_sample, " ");
  if (micro >= 1) {
    std::printf("Largest microbatch: %lld (floor of available / per sample); headroom %s (%s)\n",
                static_cast<long long>(micro),
                format_bytes(static_cast<std::uint64_t>(headroom_bytes(b, micro)), byte_unit::gb, 3).c_str(),
                format_bytes(static_cast<std::uint64_t>(headroom_bytes(b, micro)), byte_unit::gib, 3).c_str());
    if (acc) {
      std::printf("Accumulation (%s rule): global batch %lld -> microbatch %lld x %lld steps x %s = %lld samples\n",
                  std::string(to_string(r.rounding)).c_str(), static_cast<long long>(r.global_batch),
                  static_cast<long long>(acc->microbatch), static_cast<long long>(acc->steps), replicas_text(r).c_str(),
                  static_cast<long long>(acc->global_batch));
    }
    return exit_ok;
  }
  std::printf("Nothing fits: microbatch 1 is short by %s (%s).\n",
              format_bytes(static_cast<std::uint64_t>(-headroom_bytes(b, 1)), byte_unit::gb, 3).c_str(),
              format_bytes(static_cast<std::uint64_t>(-headroom_bytes(b, 1)), byte_unit::gib, 3).c_str());
  return exit_check_failed;
}

inline nlohmann::json candidate_json(const plan_candidate& c) {
  return {{"policy", c.policy_name},
          {"recompute", std::string(to_string(c.mode))},
          {"supported", c.supported},
          {"state_bytes", c.state_bytes},
          {"activation_bytes_per_sample", c.activation_bytes_per_sample},
          {"max_microbatch", c.max_microbatch},
          {"shortfall_bytes", c.shortfall_bytes},
          {"microbatch", c.accumulation.microbatch},
          {"accumulation_steps", c.accumulation.steps},
          {"global_batch", c.accumulation.global_batch},
          {"headroom_bytes", c.headroom_bytes},
          {"flops_per_sample", c.flops_per_sample},
          {"attainable_flops", c.attainable_flops},
          {"seconds_per_sample", c.seconds_per_sample},
          {"optimizer_seconds_per_step", c.optimizer_seconds_per_step},
          {"optimizer_seconds", c.optimizer_seconds},
          {"total_seconds", c.total_seconds},
          {"margin_seconds", c.margin_seconds},
          {"cost_per_sample", c.cost_per_sample},
          {"fits_memory", c.fits_memory()},
          {"limiting_phase", std::string(to_string(c.limiting_phase))},
          {"phase_peak_bytes",
           {{"forward", c.phase_peak_bytes[0]},
            {"backward", c.phase_peak_bytes[1]},
            {"optimizer_step", c.phase_peak_bytes[2]}}},
          {"optimizer", std::string(to_string(c.states.optimizer))},
          {"optimizer_impl", std::string(to_string(c.states.impl))},
          {"quality", std::string(to_string(c.quality))},
          {"offload", c.states.offload_parameters  ? "parameters"
                      : c.states.offload_optimizer ? "optimizer"
                                                   : "none"},
          {"host_bytes", c.host_bytes},
          {"host_needed_bytes", c.host_needed_bytes},
          {"host_shortfall_bytes", c.host_shortfall_bytes},
          {"adapter_parameters", c.states.adapter_parameters},
          {"fits", c.fits()}};
}

inline int report_planner(const plan_request& r, nlohmann::json& out, bool json) {
  auto [w, o] = planner_inputs(r);
  std::optional<peak_calibration> calibration;
  // The ratio of the measured configuration (--measured-policy, --measured-recompute, the planned states, ...).
  if (r.measured_peak_bytes > 0) {
    const plan_candidate c = detail::evaluate(w, o, o.measured_policy, o.measured_recompute, o.efficiency, o.states,
                                              o.stage, o.data_parallel);
    calibration =
        calibrate_peak(c.needs, {.measured_bytes = r.measured_peak_bytes, .microbatch = r.measured_microbatch});
    o.peak_calibration_ratio = calibration->ratio;
  }
  const plan_result p = plan(w, o);
  if (json) {
    nlohmann::json j = {{"samples", w.samples},
                        {"tensor_parallel", w.shape ? w.shape->tensor_parallel : 1},
                        {"data_parallel", o.data_parallel},
                        {"devices_in_all", devices_in_all(r, o.data_parallel)},
                        {"window_seconds", o.window_seconds},
                        {"efficiency", p.efficiency},
                        {"peak_calibration_ratio", o.peak_calibration_ratio}};
    if (calibration) {
      j["peak_calibration_policy"] = r.measured_policy;
      j["peak_calibration_recompute"] = std::string(to_string(r.measured_recompute));
    }
    if (p.calibrated_on) {
      j["calibrated_on"] = candidate_json(*p.calibrated_on);
      j["measured_samples_per_second"] = r.measured_sps;
    }
    if (r.parity) {
      j["parity_faulted_ignored"] = r.parity->faulted;
      j["parity"] = parity_json(*r.parity);
    }
    if (p.chosen) {
      j["device_seconds_per_sample"] =
          p.chosen->total_seconds * static_cast<double>(devices_in_all(r, o.data_parallel)) / w.samples;
    }
    j["candidates"] = nlohmann::json::array();
    for (const plan_candidate& c : p.candidates) j["candidates"].push_back(candidate_json(c));
    j["chosen"] = p.chosen ? candidate_json(*p.chosen) : nlohmann::json(nullptr);
    j["runner_up"] = p.runner_up ? candidate_json(*p.runner_up) : nlohmann::json(nullptr);
    j["fastest_verified"] = p.fastest_verified ? candidate_json(*p.fastest_verified) : nlohmann::json(nullptr);
    j["failures"] = p.failures;
    j["remedies"] = p.remedies;
    out["device"] = device_json(r.device);
    out["plan"] = j;
    return p.chosen ? exit_ok : exit_check_failed;
  }
  print_device(r.device, r.capacity_given);
  std::string calibrated;
  if (p.calibrated_on) {  // the measured configuration, which the plan gives exactly the measured rate
    const plan_candidate& m = *p.calibrated_on;
    char rate[32];
    std::snprintf(rate, sizeof rate, "%.6g", r.measured_sps);
    calibrated = std::string(" (calibrated: ") + rate + " samples/s measured with " + m.policy_name + ", recompute " +
                 std::string(to_string(m.mode)) + ", microbatch " + std::to_string(m.accumulation.microbatch) + " x " +
                 std::to_string(m.accumulation.steps) + " steps on " + replicas_text(r) + ", optimizer steps included)";
  }
  std::printf(
      "Night: %.6g samples in a %.2f h window; %s %s, ZeRO stage %d x %llu; step time from the roofline at %.3g%% "
      "efficiency%s\n",
      w.samples, o.window_seconds / 3600.0, std::string(to_string(o.states.optimizer)).c_str(),
      std::string(to_string(o.states.impl)).c_str(), static_cast<int>(o.stage),
      static_cast<unsigned long long>(o.data_parallel), 100.0 * p.efficiency, calibrated.c_str());
  if (r.parity) {
    for (const std::string& line : parity_notes(*r.parity)) std::printf("  %s\n", line.c_str());
  }
  if (r.shape && r.shape->attention == attention_kernel::flash &&
      std::any_of(p.candidates.begin(), p.candidates.end(),
                  [](const plan_candidate& c) { return c.mode == recompute::selective; })) {
    std::printf("  %s\n", selective_with_flash_note);
  }
  if (r.shape && r.shape->tensor_parallel > 1) {
    std::printf(
        "  PER TENSOR-PARALLEL RANK (t = %llu): each sample runs on %llu devices; peaks, states and TFLOP/s are one "
        "rank's (1/t of the weights and FLOPs), ms/sample the group's time per sample (%llu devices in all)\n",
        static_cast<unsigned long long>(r.shape->tensor_parallel),
        static_cast<unsigned long long>(r.shape->tensor_parallel),
        static_cast<unsigned long long>(r.shape->tensor_parallel * o.data_parallel));
  }
  if (calibration) {
    std::printf(
        "Memory calibrated: measured %s at microbatch %llu against the model's %s for %s, recompute %s: every "
        "candidate's phases x %.4f\n",
        format_bytes(calibration->measured_bytes, byte_unit::gb, 3).c_str(),
        static_cast<unsigned long long>(r.measured_microbatch),
        format_bytes(calibration->predicted_bytes, byte_unit::gb, 3).c_str(), r.measured_policy.c_str(),
        std::string(to_string(r.measured_recompute)).c_str(), calibration->ratio);
  }
  std::printf("  %-18s %-9s %6s %6s %7s %9s %-9s %9s %9s %10s %8s %9s %s\n", "policy", "recompute", "micro", "steps",
              "batch", "peak GB", "limit", "headrm GB", "TFLOP/s", "ms/sample", "total h", "margin h", "");
  for (const plan_candidate& c : p.candidates) {
    const std::size_t phase = static_cast<std::size_t>(c.limiting_phase);
    const std::string limit =
        c.limiting_phase == step_phase::optimizer_step ? "step" : std::string(to_string(c.limiting_phase));
    if (!c.fits_memory()) {
      std::printf("  %-18s %-9s %6s %6s %7s %9.3f %-9s   %s\n", c.policy_name.c_str(),
                  std::string(to_string(c.mode)).c_str(), "-", "-", "-",
                  in_unit(c.phase_peak_bytes[phase], byte_unit::gb), limit.c_str(),
                  !c.supported ? ("unsupported: no " + format_name(c.unsupported_format) + " math units").c_str()
                  : c.max_microbatch >= 1
                      ? ("host memory short by " + format_bytes(c.host_shortfall_bytes, byte_unit::gb, 3)).c_str()
                      : ("OOM: microbatch 1 short by " +
                         format_bytes(static_cast<std::uint64_t>(c.shortfall_bytes), byte_unit::gb, 3))
                            .c_str());
      continue;
    }
    const std::string verdict = std::string(c.fits()                              ? "fits"
                                            : c.quality == quality_status::failed ? "excluded"
                                                                                  : "late") +
                                ", " + std::string(to_string(c.quality));
    std::printf("  %-18s %-9s %6lld %6lld %7lld %9.3f %-9s %9.3f %9.1f %10.3f %8.2f %9.2f %s\n", c.policy_name.c_str(),
                std::string(to_string(c.mode)).c_str(), static_cast<long long>(c.accumulation.microbatch),
                static_cast<long long>(c.accumulation.steps), static_cast<long long>(c.accumulation.global_batch),
                in_unit(c.phase_peak_bytes[phase], byte_unit::gb), limit.c_str(),
                static_cast<double>(c.headroom_bytes) / 1e9, c.attainable_flops * p.efficiency / 1e12,
                1e3 * c.seconds_per_sample, c.total_seconds / 3600.0, c.margin_seconds / 3600.0, verdict.c_str());
  }
  std::printf(
      "  (ms/sample: one replica's forward and backward of a sample, without the optimizer steps; total h includes "
      "them)\n");
  if (p.chosen) {
    const plan_candidate& c = *p.chosen;
    // Device-seconds per sample: the whole night's time on every device (replicas x t), optimizer steps and offload
    // included, over the samples; the cost per sample is this x the price per device-second.
    std::printf(
        "Chosen: %s, recompute %s, microbatch %lld x %lld accumulation steps: %.2f h, %.2f h to spare; "
        "%.4g device-seconds per sample",
        c.policy_name.c_str(), std::string(to_string(c.mode)).c_str(),
        static_cast<long long>(c.accumulation.microbatch), static_cast<long long>(c.accumulation.steps),
        c.total_seconds / 3600.0, c.margin_seconds / 3600.0,
        c.total_seconds * static_cast<double>(devices_in_all(r, o.data_parallel)) / w.samples);
    if (c.cost_per_sample > 0.0) std::printf(", %.4g per sample at %.4g per hour", c.cost_per_sample, o.price_per_hour);
    std::printf("\n  peaks: forward %s, backward %s, optimizer step %s\n",
                format_bytes(c.phase_peak_bytes[0], byte_unit::gb, 3).c_str(),
                format_bytes(c.phase_peak_bytes[1], byte_unit::gb, 3).c_str(),
                format_bytes(c.phase_peak_bytes[2], byte_unit::gb, 3).c_str());
    if (c.quality == quality_status::unverified) {
      std::printf(
          "  QUALITY UNVERIFIED: no parity result for %s%s; run `safeamp sim` with it and pass --verified-by "
          "<out>/summary.json%s\n",
          c.policy_name.c_str(),
          r.parity && uncounted_result_for(*r.parity, c.policy)
              ? " on this model (the one in --verified-by is not counted: see above)"
              : "",
          required_scaling(c.policy) == gradient_scaling::per_tensor_scaling
              ? " (the simulator cannot run 8-bit gradients, which need per-tensor scaling)"
              : "");
      if (p.fastest_verified) {
        std::printf("  Fastest with verified quality: %s, recompute %s, microbatch %lld: %.2f h, %s\n",
                    p.fastest_verified->policy_name.c_str(), std::string(to_string(p.fastest_verified->mode)).c_str(),
                    static_cast<long long>(p.fastest_verified->accumulation.microbatch),
                    p.fastest_verified->total_seconds / 3600.0,
                    std::string(to_string(p.fastest_verified->quality)).c_str());
      } else {
        std::printf("  No configuration with verified quality (fp32, or a parity PASS) fits the window\n");
      }
    } else {
      std::printf("  quality: %s%s\n", std::string(to_string(c.quality)).c_str(),
                  c.quality == quality_status::verified && r.parity ? (" in " + r.parity->source).c_str() : "");
    }
    if (p.runner_up) {
      std::printf("Runner-up: %s, recompute %s, microbatch %lld: %.2f h (%.2f h slower), %s\n",
                  p.runner_up->policy_name.c_str(), std::string(to_string(p.runner_up->mode)).c_str(),
                  static_cast<long long>(p.runner_up->accumulation.microbatch), p.runner_up->total_seconds / 3600.0,
                  (p.runner_up->total_seconds - c.total_seconds) / 3600.0,
                  std::string(to_string(p.runner_up->quality)).c_str());
    }
    return exit_ok;
  }
  std::printf("No configuration fits:\n");
  for (const std::string& s : p.failures) std::printf("  - %s\n", s.c_str());
  if (!p.remedies.empty()) std::printf("What would make it fit:\n");
  for (const std::string& s : p.remedies) std::printf("  - %s\n", s.c_str());
  return exit_check_failed;
}

}  // namespace safeamp::tool
