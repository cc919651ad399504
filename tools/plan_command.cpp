// `safeamp plan`: the memory budget (largest microbatch, headroom, accumulation), model-state and activation
// ledgers, the roofline of a GEMM with a plausibility check, and the nightly-window planner. Flags or a JSON input
// file; a table by default, JSON with --json. Bad input -> safeamp::error -> exit 2; nothing fits -> exit 1.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "command_registry.hpp"
#include "plan_inputs.hpp"
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
  const std::string tflops = "a finite number of TFLOPS > 0";
  if (auto* s = get("capacity")) d.capacity_bytes = parse_bytes(*s, "capacity");
  if (auto* s = get("bandwidth")) d.memory_bytes_per_second = static_cast<double>(parse_bytes(*s, "bandwidth"));
  if (auto* s = get("peak-fp32")) d.peak_fp32_flops = parse_real("peak-fp32", *s, 0.0, 1e6, true, tflops) * 1e12;
  if (auto* s = get("peak-tf32")) d.peak_tf32_flops = parse_real("peak-tf32", *s, 0.0, 1e6, false, tflops) * 1e12;
  if (auto* s = get("peak-fp16")) {
    d.peak_fp16_flops = d.peak_bf16_flops = parse_real("peak-fp16", *s, 0.0, 1e6, false, tflops) * 1e12;
  }
  if (auto* s = get("peak-fp8")) d.peak_fp8_flops = parse_real("peak-fp8", *s, 0.0, 1e6, false, tflops) * 1e12;
  if (custom && (d.capacity_bytes == 0 || d.memory_bytes_per_second == 0.0 || d.peak_fp32_flops == 0.0)) {
    throw error("device", "custom", "custom devices need --capacity, --bandwidth and --peak-fp32 (and the tensor peaks)");
  }
  validate(d);
  return d;
}

int run_plan(const plan_args& args) {
  plan_values v = args.input.empty() ? plan_values{} : read_plan_json(args.input);
  for (const auto& [k, value] : args.flags) v[k] = value;  // flags win over the file
  const plan_request req = resolve_request(v, resolve_device(v));
  nlohmann::json out;
  int code = exit_ok;
  if (req.gemm) code = std::max(code, report_roofline(req, out, args.json));
  if (req.window_seconds > 0.0) {
    code = std::max(code, report_planner(req, out, args.json));
  } else if (req.has_budget && req.states_ledger) {
    code = std::max(code, report_phases(req, out, args.json));
  } else if (req.has_budget) {
    code = std::max(code, report_budget(req, out, args.json));
  }
  if (args.json) std::printf("%s\n", out.dump(2).c_str());
  return code;
}

const register_command reg{tool_command{
    "plan", 10, [](CLI::App& app, int& exit_code) {
      auto* cmd = app.add_subcommand("plan", "Memory budget, roofline and the nightly-window planner");
      auto args = std::make_shared<plan_args>();
      cmd->add_option("--input", args->input, "JSON file of plan keys (the flag names without dashes); flags override it");
      cmd->add_flag("--json", args->json, "print JSON instead of tables");
      for (const plan_key& k : plan_keys) {
        const std::string key(k.name);
        cmd->add_option_function<std::string>(
            "--" + key, [args, key](const std::string& value) { args->flags[key] = value; }, std::string(k.help))
            ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a later flag overrides an earlier one
      }
      cmd->footer(
          "Sizes take units: 24GB = 24e9 bytes, 24GiB = 24 x 2^30 bytes, 3.2e9 = bytes. Every printed size says GB or GiB.\n"
          "Examples:\n"
          "  safeamp plan --capacity 24GB --reserve 0.1 --context 0 --workspace 0 --states 3.2GB --per-sample 0.34GB\n"
          "  safeamp plan --device rtx4090 --params 125M --seq 1024 --hidden 768 --heads 12 --layers 12 --vocab 50257\n"
          "  safeamp plan --device rtx4090 --seq 1024 --hidden 768 --heads 12 --layers 12 --vocab 50257 --samples 2e6 "
          "--window 8h --global-batch 512\n"
          "  safeamp plan --device rtx4090 --gemm 8192x8192x8192 --format fp16");
      cmd->callback([args, &exit_code] { exit_code = run_plan(*args); });
    }}};

}  // namespace
}  // namespace safeamp::tool
