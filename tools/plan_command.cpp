// `safeamp plan`: the memory budget (largest microbatch, headroom, accumulation), model-state and activation
// ledgers, the step's forward/backward/optimizer-step peaks, the roofline of a GEMM with a plausibility check, the
// nightly-window planner and `--device all`. Flags or a JSON input file; a table by default, JSON with --json.
// Bad input -> safeamp::error -> exit 2; nothing fits -> exit 1.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "command_registry.hpp"
#include "plan_all_devices.hpp"
#include "plan_inference.hpp"
#include "plan_inputs.hpp"
#include "plan_ranks.hpp"
#include "plan_reports.hpp"

namespace safeamp::tool {
namespace {

struct plan_args {
  plan_values flags;
  std::string input;
  bool json = false;
};

device_spec resolve_device(const plan_values& v) {
  auto get = [&](const char* k) -> const std::string* {
    auto it = v.find(k);
    return it == v.end() ? nullptr : &it->second;
  };
  const std::string name = get("device") ? *get("device") : std::string("RTX 4090");
  device_spec d{};
  const bool custom = name == "custom";
  if (!custom) d = find_device(name);
  if (custom) d.name = "custom";
  // 1e6 TFLOPS (an exaFLOP/s on one device) bounds every peak; only the tensor-core peaks may be 0 (none).
  const std::string tflops = "a finite number of TFLOPS, 0 (no such units) .. 1e6";
  if (auto* s = get("capacity")) d.capacity_bytes = parse_bytes(*s, "capacity");
  if (auto* s = get("bandwidth")) d.memory_bytes_per_second = static_cast<double>(parse_bytes(*s, "bandwidth"));
  if (auto* s = get("peak-fp32")) {
    d.peak_fp32_flops = parse_real("peak-fp32", *s, 0.0, 1e6, true, "a finite number of TFLOPS, > 0 and <= 1e6") * 1e12;
  }
  if (auto* s = get("peak-tf32")) d.peak_tf32_flops = parse_real("peak-tf32", *s, 0.0, 1e6, false, tflops) * 1e12;
  if (auto* s = get("peak-fp16")) {
    d.peak_fp16_flops = d.peak_bf16_flops = parse_real("peak-fp16", *s, 0.0, 1e6, false, tflops) * 1e12;
  }
  if (auto* s = get("peak-fp8")) d.peak_fp8_flops = parse_real("peak-fp8", *s, 0.0, 1e6, false, tflops) * 1e12;
  if (custom && (d.capacity_bytes == 0 || d.memory_bytes_per_second == 0.0 || d.peak_fp32_flops == 0.0)) {
    throw error("device", "custom",
                "custom devices need --capacity, --bandwidth and --peak-fp32 (and the tensor peaks)");
  }
  validate(d);
  return d;
}

/// The step of a known model (--params or a shape) phase by phase: forward, backward and optimizer-step peaks with
/// what each holds, the largest microbatch every phase fits, or what fails and the combined remedies.
int report_phases(const plan_request& r, nlohmann::json& out, bool json) {
  auto [w, o] = planner_inputs(r);
  const named_policy policy{r.policy_name, r.policy};
  plan_candidate c = detail::evaluate(w, o, policy, r.mode, o.efficiency, o.states, o.stage, o.data_parallel);
  const std::uint64_t usable = detail::phase_pool_bytes(o.budget);
  std::optional<peak_calibration> calibration;
  std::optional<phase_fit> model_fit;
  if (r.measured_peak_bytes > 0) {  // the model's needs scaled to the measurement, then fitted again
    // Measured with the one configuration planned: --policy and --recompute (--measured-policy and
    // --measured-recompute are the planner's, with --window).
    calibration =
        calibrate_peak(c.needs, {.measured_bytes = r.measured_peak_bytes, .microbatch = r.measured_microbatch});
    model_fit = phase_fit{
        .max_microbatch = c.max_microbatch, .limiting = c.limiting_phase, .shortfall_bytes = c.shortfall_bytes};
    c.needs = scaled(c.needs, calibration->ratio);
    const phase_fit f = fit_phases(usable, c.needs);
    c.max_microbatch = f.max_microbatch;
    c.limiting_phase = f.limiting;
    c.shortfall_bytes = f.shortfall_bytes;
    if (f.max_microbatch >= 1) {
      c.accumulation =
          r.global_batch > 0
              ? accumulation_for({.target_global_batch = r.global_batch,
                                  .max_microbatch = f.max_microbatch,
                                  .data_parallel = static_cast<std::int64_t>(r.data_parallel),
                                  .rule = r.rounding})
              : accumulation_plan{.microbatch = f.max_microbatch, .steps = 1, .global_batch = f.max_microbatch};
      c.headroom_bytes = phase_headroom_bytes(
          c.needs, {.available_bytes = usable, .microbatch = static_cast<std::uint64_t>(c.accumulation.microbatch)});
    }
  }
  const bool device_fits = c.max_microbatch >= 1;
  const bool fits = device_fits && c.host_shortfall_bytes == 0;
  const auto micro = static_cast<std::uint64_t>(device_fits ? c.accumulation.microbatch : 1);
  std::vector<std::string> remedies;
  if (!fits) {
    for (const remedy& m : memory_remedies(w, o, c, o.efficiency)) remedies.push_back(m.text());
  }
  if (json) {
    nlohmann::json j = {{"usable_bytes", usable},
                        {"parameters", w.parameters},
                        {"tensor_parallel", r.shape ? r.shape->tensor_parallel : 1},
                        {"rank_parameters", device_parameters(r)},
                        {"policy", r.policy_name},
                        {"optimizer", std::string(to_string(r.states.optimizer))},
                        {"optimizer_impl", std::string(to_string(r.states.impl))},
                        {"recompute", std::string(to_string(r.mode))},
                        {"max_microbatch", c.max_microbatch},
                        {"limiting_phase", std::string(to_string(c.limiting_phase))},
                        {"microbatch", micro},
                        {"phases", phases_json(c.needs, micro)},
                        {"offload", r.states.offload_parameters  ? "parameters"
                                    : r.states.offload_optimizer ? "optimizer"
                                                                 : "none"},
                        {"host_bytes", c.host_bytes},
                        {"host_needed_bytes", c.host_needed_bytes},
                        {"host_memory_bytes", r.host_memory_bytes},
                        {"host_shortfall_bytes", c.host_shortfall_bytes},
                        {"adapter_parameters", r.states.adapter_parameters},
                        {"rank_adapter_parameters", device_states(r).adapter_parameters},
                        {"rank_frozen_parameters", device_states(r).frozen_parameters},
                        {"devices_in_all", devices_in_all(r, r.data_parallel)},
                        {"lora_rank", r.shape ? r.shape->lora_rank : 0},
                        {"cross_entropy_chunks", r.shape ? r.shape->cross_entropy_chunks : 0}};
    if (calibration) {
      j["calibration"] = {{"measured_bytes", calibration->measured_bytes},
                          {"predicted_bytes", calibration->predicted_bytes},
                          {"measured_microbatch", r.measured_microbatch},
                          {"measured_policy", r.measured_policy},
                          {"ratio", calibration->ratio},
                          {"model_max_microbatch", model_fit->max_microbatch}};
    }
    if (device_fits) {
      j["headroom_bytes"] = c.headroom_bytes;
      j["accumulation"] = {{"target_global_batch", r.global_batch},
                           {"microbatch", c.accumulation.microbatch},
                           {"steps", c.accumulation.steps},
                           {"global_batch", c.accumulation.global_batch},
                           {"rounding", std::string(to_string(r.rounding))}};
    } else {
      j["shortfall_bytes"] = c.shortfall_bytes;
    }
    if (!fits) j["what_would_fit"] = remedies;
    out["device"] = device_json(r.device);
    out["step"] = j;
    return fits ? exit_ok : exit_check_failed;
  }
  print_device(r.device, r.capacity_given);
  if (r.states_ledger) print_states_ledger(r);
  if (r.shape && r.params_given) {
    std::printf("  (--params %llu overrides the shape's estimate of %llu parameters)\n",
                static_cast<unsigned long long>(w.parameters),
                static_cast<unsigned long long>(parameter_count(*r.shape)));
  }
  if (r.shape) print_activation_ledger(*r.shape, r.mode, activation_element_bytes(r.policy, r.states));
  print_pool(o.budget);
  if (calibration) {
    std::printf(
        "Calibration: measured %s at microbatch %llu against the model's %s for %s: every phase x %.4f (the model "
        "alone: largest microbatch %lld)\n",
        format_bytes(calibration->measured_bytes, byte_unit::gb, 3).c_str(),
        static_cast<unsigned long long>(r.measured_microbatch),
        format_bytes(calibration->predicted_bytes, byte_unit::gb, 3).c_str(), r.measured_policy.c_str(),
        calibration->ratio, static_cast<long long>(model_fit->max_microbatch));
  }
  print_phases(c.needs, micro, usable);
  if (c.host_bytes > 0) print_host_memory(r, c);
  if (fits) {
    std::printf("Largest microbatch: %lld, set by the %s phase; headroom %s (%s)\n",
                static_cast<long long>(c.max_microbatch), std::string(to_string(c.limiting_phase)).c_str(),
                format_bytes(static_cast<std::uint64_t>(c.headroom_bytes), byte_unit::gb, 3).c_str(),
                format_bytes(static_cast<std::uint64_t>(c.headroom_bytes), byte_unit::gib, 3).c_str());
    if (r.global_batch > 0) {
      std::printf("Accumulation (%s rule): global batch %lld -> microbatch %lld x %lld steps x %s = %lld samples\n",
                  std::string(to_string(r.rounding)).c_str(), static_cast<long long>(r.global_batch),
                  static_cast<long long>(c.accumulation.microbatch), static_cast<long long>(c.accumulation.steps),
                  replicas_text(r).c_str(), static_cast<long long>(c.accumulation.global_batch));
    }
    return exit_ok;
  }
  if (device_fits) {
    std::printf("Does not fit: the device holds microbatch %lld, but the host memory is short: %s.\n",
                static_cast<long long>(c.max_microbatch), detail::host_text(c).c_str());
  } else {
    std::printf("Does not fit: at microbatch 1 the %s phase is short by %s (%s).\n",
                std::string(to_string(c.limiting_phase)).c_str(),
                format_bytes(static_cast<std::uint64_t>(c.shortfall_bytes), byte_unit::gb, 3).c_str(),
                format_bytes(static_cast<std::uint64_t>(c.shortfall_bytes), byte_unit::gib, 3).c_str());
  }
  if (!remedies.empty()) {
    std::printf("What would fit (combined, cheapest first%s):\n",
                calibration ? "; the model before calibration: re-measure after the change" : "");
  }
  for (const std::string& s : remedies) std::printf("  - %s\n", s.c_str());
  return exit_check_failed;
}

int run_plan(const plan_args& args) {
  plan_values v = args.input.empty() ? plan_values{} : read_plan_json(args.input);
  for (const auto& [k, value] : args.flags) v[k] = value;  // flags win over the file
  const bool inference = inference_requested(v);
  if (!inference) refuse_inference_keys(v);
  if (auto it = v.find("device"); it != v.end() && it->second == "all") {
    return inference ? report_inference_all_devices(v, args.json) : report_all_devices(v, args.json);
  }
  nlohmann::json out;
  if (inference) {
    const int code = report_inference(v, resolve_device(v), v.count("capacity") != 0, out, args.json);
    if (args.json) std::printf("%s\n", out.dump(2).c_str());
    return code;
  }
  const plan_request req = resolve_request(v, resolve_device(v));
  int code = exit_ok;
  if (req.gemm) code = std::max(code, report_roofline(req, out, args.json));
  if (req.window_seconds > 0.0) {
    code = std::max(code, report_planner(req, out, args.json));
  } else if (req.has_budget && req.states_ledger) {
    code = std::max(code, report_phases(req, out, args.json));
  } else if (req.has_budget) {
    code = std::max(code, report_budget(req, out, args.json));
  }
  if (req.devices > 0) code = std::max(code, report_ranks(req, out, args.json));  // after the device and the step
  if (args.json) std::printf("%s\n", out.dump(2).c_str());
  return code;
}

const register_command reg{tool_command{
    "plan", 10, [](CLI::App& app, int& exit_code) {
      auto* cmd = app.add_subcommand("plan", "Memory budget, roofline and the nightly-window planner");
      auto args = std::make_shared<plan_args>();
      cmd->add_option("--input", args->input,
                      "JSON file of plan keys (the flag names without dashes); flags override it");
      cmd->add_flag("--json", args->json, "print JSON instead of tables");
      cmd->add_flag_callback(
          "--inference", [args] { args->flags["task"] = "inference"; },
          "generation with a KV cache instead of training: weights, cache and transients per sequence, the largest "
          "batch and the longest context (a shape; --seq is the context: prompt + generated tokens)");
      for (const plan_key& k : plan_keys) {
        const std::string key(k.name);
        cmd->add_option_function<std::string>(
               "--" + key, [args, key](const std::string& value) { args->flags[key] = value; }, std::string(k.help))
            ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a later flag overrides an earlier one
      }
      cmd->footer(
          "Sizes take units: 24GB = 24e9 bytes, 24GiB = 24 x 2^30 bytes, 3.2e9 = bytes. Every printed size says GB or "
          "GiB.\n"
          "Examples:\n"
          "  safeamp plan --capacity 24GB --reserve 0.1 --context 0 --workspace 0 --states 3.2GB --per-sample 0.34GB\n"
          "  safeamp plan --device rtx4090 --params 125M --seq 1024 --hidden 768 --heads 12 --layers 12 --vocab 50257\n"
          "  safeamp plan --device rtx4090 --seq 1024 --hidden 768 --heads 12 --layers 12 --vocab 50257 --samples 2e6 "
          "--window 8h --global-batch 512\n"
          "  safeamp plan --device rtx4090 --gemm 8192x8192x8192 --format fp16\n"
          "  safeamp plan --device rtx4090 --inference --seq 4096 --hidden 4096 --heads 32 --layers 32 --vocab 32000 "
          "--ffn-hidden 11008 --mlp swiglu --embeddings untied --attention flash\n"
          "  safeamp plan --device all --seq 2048 --hidden 2048 --heads 16 --layers 24 --vocab 50257 --recompute full");
      cmd->callback([args, &exit_code] { exit_code = run_plan(*args); });
    }}};

}  // namespace
}  // namespace safeamp::tool
