// `safeamp plan --device all`: the request on every card of the device table, one row each (the step's peaks and
// largest microbatch, or the night's plan with its time, margin and quality).
#pragma once

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "plan_inference.hpp"
#include "plan_reports.hpp"

namespace safeamp::tool {

/// Figures that belong to one card, refused with `--device all`.
inline void refuse_per_card_keys(const plan_values& v) {
  for (const char* k : {"capacity", "bandwidth", "peak-fp32", "peak-tf32", "peak-fp16", "peak-fp8", "gemm", "states",
                        "measured-peak", "measured-sps", "devices", "bucket-view"}) {
    if (v.count(k) != 0) {
      throw error(k, quoted_input(v.at(k)) + " with --device all",
                  "the table's own figures (drop --" + std::string(k) + ")");
    }
  }
}

/// `--device all --inference`: the largest batch and the longest context (at --batch, default 1) on every card.
inline int report_inference_all_devices(plan_values v, bool json) {
  refuse_per_card_keys(v);
  nlohmann::json rows = nlohmann::json::array();
  int fitting = 0;
  std::uint64_t context = 0;
  for (const device_spec& d : device_table()) {
    v["device"] = std::string(d.name);
    const inference_plan p = resolve_inference(v, d);
    context = p.request.context_tokens;
    const std::uint64_t usable = detail::phase_pool_bytes(p.budget);
    const inference_needs n = inference_needs_for(p.request);
    const std::uint64_t batch = p.batch > 0 ? p.batch : 1;
    const std::uint64_t largest = max_inference_batch(n, usable);
    const std::uint64_t longest = max_inference_context(
        p.request, {.generated_tokens = p.generated_tokens, .batch = batch, .available_bytes = usable});
    fitting += largest >= batch ? 1 : 0;
    rows.push_back({{"device", std::string(d.name)},
                    {"capacity_bytes", d.capacity_bytes},
                    {"usable_bytes", usable},
                    {"weight_bytes", n.weight_bytes},
                    {"max_batch", largest},
                    {"batch", batch},
                    {"max_context_tokens", longest},
                    {"fits", largest >= batch}});
  }
  if (json) {
    std::printf("%s\n", nlohmann::json{{"devices", rows}}.dump(2).c_str());
    return fitting > 0 ? exit_ok : exit_check_failed;
  }
  std::printf("Inference on every card of the table (%s tokens of context; capacities as listed)\n",
              std::to_string(context).c_str());
  std::printf("  %-14s %9s %9s %10s %10s %16s\n", "device", "cap GB", "usable GB", "weights GB", "max batch",
              "longest context");
  for (const nlohmann::json& row : rows) {
    std::printf("  %-14s %9.2f %9.2f %10.3f %10llu %9llu (b=%llu)\n", row["device"].get<std::string>().c_str(),
                row["capacity_bytes"].get<double>() / 1e9, row["usable_bytes"].get<double>() / 1e9,
                row["weight_bytes"].get<double>() / 1e9, row["max_batch"].get<unsigned long long>(),
                row["max_context_tokens"].get<unsigned long long>(), row["batch"].get<unsigned long long>());
  }
  return fitting > 0 ? exit_ok : exit_check_failed;
}

/// `--device all`: the request on every card of the table, one row each (the step's peaks, or the night's plan).
inline int report_all_devices(plan_values v, bool json) {
  refuse_per_card_keys(v);
  nlohmann::json rows = nlohmann::json::array();
  int fitting = 0;
  bool night = false;
  std::optional<parity_results> parity;  // --verified-by: the same for every card
  bool selective_with_flash = false;     // a row recomputes selectively with flash attention: none's figures
  for (const device_spec& d : device_table()) {
    v["device"] = std::string(d.name);
    const plan_request r = resolve_request(v, d);
    parity = r.parity;
    const bool flash = r.shape && r.shape->attention == attention_kernel::flash;
    auto [w, o] = planner_inputs(r);
    nlohmann::json row = {{"device", std::string(d.name)},
                          {"capacity_bytes", d.capacity_bytes},
                          {"usable_bytes", detail::phase_pool_bytes(o.budget)}};
    night = r.window_seconds > 0.0;
    if (night) {
      const plan_result p = plan(w, o);
      selective_with_flash =
          selective_with_flash ||
          (flash && std::any_of(p.candidates.begin(), p.candidates.end(),
                                [](const plan_candidate& c) { return c.mode == recompute::selective; }));
      row["fits"] = p.chosen.has_value();
      if (p.chosen) {
        row["plan"] = candidate_json(*p.chosen);
        ++fitting;
      } else {
        const auto late = std::find_if(p.candidates.begin(), p.candidates.end(),
                                       [](const plan_candidate& c) { return c.fits_memory(); });
        row["reason"] = late != p.candidates.end() ? "late: the fastest that fits memory (" + late->policy_name +
                                                         ", recompute " + std::string(to_string(late->mode)) +
                                                         ") takes " + detail::hours_text(late->total_seconds)
                                                   : std::string("microbatch 1 does not fit memory with any policy");
        row["failures"] = p.failures;
      }
    } else {
      selective_with_flash = selective_with_flash || (flash && r.mode == recompute::selective);
      const plan_candidate c =
          detail::evaluate(w, o, {r.policy_name, r.policy}, r.mode, o.efficiency, o.states, o.stage, o.data_parallel);
      const bool fits = c.max_microbatch >= 1 && c.host_shortfall_bytes == 0;  // the device and, offloading, the host
      row["fits"] = fits;
      row["step"] = candidate_json(c);
      fitting += fits ? 1 : 0;
    }
    rows.push_back(row);
  }
  if (json) {
    nlohmann::json out{{"devices", rows}};
    if (parity) out["parity"] = parity_json(*parity);
    std::printf("%s\n", out.dump(2).c_str());
    return fitting > 0 ? exit_ok : exit_check_failed;
  }
  std::printf(
      "Every card of the table (capacities as listed: pass one --device with --capacity for your card's own)\n");
  if (parity) {
    for (const std::string& line : parity_notes(*parity)) std::printf("  %s\n", line.c_str());
  }
  if (selective_with_flash) std::printf("  %s\n", selective_with_flash_note);
  if (night) {
    std::printf("  %-14s %9s %9s  %-18s %-9s %6s %6s %8s %9s  %s\n", "device", "cap GB", "usable GB", "policy",
                "recompute", "micro", "steps", "total h", "margin h", "quality");
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
      std::printf("  %-14s %9.2f %9.2f  no plan: %s\n", name.c_str(), cap, usable,
                  row["reason"].get<std::string>().c_str());
    } else {
      const nlohmann::json& c = row["step"];
      const std::string limit = c["limiting_phase"].get<std::string>();
      const auto& peaks = c["phase_peak_bytes"];
      const double peak = std::max({peaks["forward"].get<double>(), peaks["backward"].get<double>(),
                                    peaks["optimizer_step"].get<double>()}) /
                          1e9;
      char host[64] = "";  // an offloading step short of host memory fits no card, whatever its microbatch
      if (const double short_gb = c["host_shortfall_bytes"].get<double>() / 1e9; short_gb > 0.0) {
        std::snprintf(host, sizeof host, "  host memory short by %.3f GB", short_gb);
      }
      std::printf("  %-14s %9.2f %9.2f %6lld %-15s %9.3f %9.3f%s\n", name.c_str(), cap, usable,
                  c["max_microbatch"].get<long long>(), limit.c_str(), peak, c["shortfall_bytes"].get<double>() / 1e9,
                  host);
    }
  }
  return fitting > 0 ? exit_ok : exit_check_failed;
}

}  // namespace safeamp::tool
