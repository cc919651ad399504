// `safeamp plan`: the memory budget (largest microbatch, headroom, accumulation), model-state and activation
// ledgers, the roofline of a GEMM with a plausibility check, and the nightly-window planner. Flags or a JSON input
// file; a table by default, JSON with --json. Bad input -> safeamp::error -> exit 2; nothing fits -> exit 1.
#include <algorithm>
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

/// `--device all`: the request on every card of the table, one row each (the step's peaks, or the night's plan).
int report_all_devices(plan_values v, bool json) {
  for (const char* k : {"capacity", "bandwidth", "peak-fp32", "peak-tf32", "peak-fp16", "peak-fp8", "gemm", "states",
                        "measured-peak", "measured-sps"}) {
    if (v.count(k) != 0) throw error(k, "'" + v[k] + "' with --device all", "the table's own figures (drop --" + std::string(k) + ")");
  }
  nlohmann::json rows = nlohmann::json::array();
  int fitting = 0;
  bool night = false;
  for (const device_spec& d : device_table()) {
    v["device"] = std::string(d.name);
    const plan_request r = resolve_request(v, d);
    auto [w, o] = planner_inputs(r);
    nlohmann::json row = {{"device", std::string(d.name)}, {"capacity_bytes", d.capacity_bytes},
                          {"usable_bytes", detail::phase_pool_bytes(o.budget)}};
    night = r.window_seconds > 0.0;
    if (night) {
      const plan_result p = plan(w, o);
      row["fits"] = p.chosen.has_value();
      if (p.chosen) {
        row["plan"] = candidate_json(*p.chosen);
        ++fitting;
      } else {
        const auto late = std::find_if(p.candidates.begin(), p.candidates.end(),
                                       [](const plan_candidate& c) { return c.fits_memory(); });
        row["reason"] = late != p.candidates.end()
                            ? "late: the fastest that fits memory (" + late->policy_name + ", recompute " +
                                  std::string(to_string(late->mode)) + ") takes " +
                                  detail::hours_text(late->total_seconds)
                            : std::string("microbatch 1 does not fit memory with any policy");
        row["failures"] = p.failures;
      }
    } else {
      const plan_candidate c = detail::evaluate(w, o, {r.policy_name, r.policy}, r.mode, o.efficiency, o.states, o.stage,
                                                o.data_parallel);
      row["fits"] = c.max_microbatch >= 1;
      row["step"] = candidate_json(c);
      fitting += c.max_microbatch >= 1 ? 1 : 0;
    }
    rows.push_back(row);
  }
  if (json) {
    std::printf("%s\n", nlohmann::json{{"devices", rows}}.dump(2).c_str());
    return fitting > 0 ? exit_ok : exit_check_failed;
  }
  std::printf("Every card of the table (capacities as listed: pass one --device with --capacity for your card's own)\n");
  if (night) {
    std::printf("  %-14s %9s %9s  %-18s %-9s %6s %6s %8s %9s  %s\n", "device", "cap GB", "usable GB", "policy", "recompute",
                "micro", "steps", "total h", "margin h", "quality");
  } else {
    std::printf("  %-14s %9s %9s %6s %-15s %9s %9s\n", "device", "cap GB", "usable GB", "micro", "limit", "peak GB",
                "short GB");
  }
  for (const nlohmann::json& row : rows) {
    const double cap = row["capacity_bytes"].get<double>() / 1e9, usable = row["usable_bytes"].get<double>() / 1e9;
    const std::string name = row["device"].get<std::string>();
    if (night && row["fits"].get<bool>()) {
      const nlohmann::json& c = row["plan"];
      std::printf("  %-14s %9.2f %9.2f  %-18s %-9s %6lld %6lld %8.2f %9.2f  %s\n", name.c_str(), cap, usable,
                  c["policy"].get<std::string>().c_str(), c["recompute"].get<std::string>().c_str(),
                  c["microbatch"].get<long long>(), c["accumulation_steps"].get<long long>(),
                  c["total_seconds"].get<double>() / 3600.0, c["margin_seconds"].get<double>() / 3600.0,
                  c["quality"].get<std::string>().c_str());
    } else if (night) {
      std::printf("  %-14s %9.2f %9.2f  no plan: %s\n", name.c_str(), cap, usable, row["reason"].get<std::string>().c_str());
    } else {
      const nlohmann::json& c = row["step"];
      const std::string limit = c["limiting_phase"].get<std::string>();
      const auto& peaks = c["phase_peak_bytes"];
      const double peak = std::max({peaks["forward"].get<double>(), peaks["backward"].get<double>(),
                                    peaks["optimizer_step"].get<double>()}) / 1e9;
      std::printf("  %-14s %9.2f %9.2f %6lld %-15s %9.3f %9.3f\n", name.c_str(), cap, usable,
                  c["max_microbatch"].get<long long>(), limit.c_str(), peak,
                  c["shortfall_bytes"].get<double>() / 1e9);
    }
  }
  return fitting > 0 ? exit_ok : exit_check_failed;
}

int run_plan(const plan_args& args) {
  plan_values v = args.input.empty() ? plan_values{} : read_plan_json(args.input);
  for (const auto& [k, value] : args.flags) v[k] = value;  // flags win over the file
  if (auto it = v.find("device"); it != v.end() && it->second == "all") return report_all_devices(v, args.json);
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
          "  safeamp plan --device rtx4090 --gemm 8192x8192x8192 --format fp16\n"
          "  safeamp plan --device all --seq 2048 --hidden 2048 --heads 16 --layers 24 --vocab 50257 --recompute full");
      cmd->callback([args, &exit_code] { exit_code = run_plan(*args); });
    }}};

}  // namespace
}  // namespace safeamp::tool
