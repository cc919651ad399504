// `safeamp plan --devices N`: what each of N data-parallel ranks holds under DDP (with its gradient buckets), ZeRO-1
// (Megatron's distributed optimizer), ZeRO-2 and ZeRO-3 (with its gathered layer), side by side.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "plan_print.hpp"

namespace safeamp::tool {

inline rank_ledger rank_ledger_of(const plan_request& r) {
  const std::uint64_t largest = r.shape ? largest_layer_parameters(*r.shape) : r.largest_layer;
  return rank_ledger_for({.parameters = device_parameters(r),
                          .policy = r.policy,
                          .states = device_states(r),
                          .ranks = r.devices,
                          .largest_layer_parameters = largest,
                          .gradient_as_bucket_view = r.bucket_view});
}

/// The per-rank model-state ledger (the step's activations come on top, the same on every rank).
inline int report_ranks(const plan_request& r, nlohmann::json& out, bool json) {
  const rank_ledger l = rank_ledger_of(r);
  const std::uint64_t largest = r.shape ? largest_layer_parameters(*r.shape) : r.largest_layer;  // 0: unknown
  if (json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const rank_ledger_row& row : l) {
      rows.push_back({{"scheme", std::string(row.scheme)},
                      {"zero_stage", static_cast<int>(row.stage)},
                      {"weight_bytes", row.states.weight_bytes},
                      {"gradient_bytes", row.states.gradient_bytes},
                      {"master_bytes", row.states.master_bytes},
                      {"optimizer_bytes", row.states.optimizer_bytes},
                      {"fp32_gradient_bytes", row.states.fp32_gradient_bytes},
                      {"bucket_bytes", row.bucket_bytes},
                      {"gathered_bytes", row.gathered_bytes},
                      {"host_bytes", row.states.host_bytes},
                      {"total_bytes", row.total_bytes()}});
    }
    out["ranks"] = {{"devices", r.devices},
                    {"tensor_parallel", r.shape ? r.shape->tensor_parallel : 1},
                    {"devices_in_all", devices_in_all(r, r.devices)},
                    {"largest_layer_parameters", largest},
                    {"gradient_as_bucket_view", r.bucket_view},
                    {"per_rank", rows}};
    return exit_ok;
  }
  std::printf("Per rank over %llu data-parallel ranks (%s; model states only, activations come on top), GB (10^9):\n",
              static_cast<unsigned long long>(r.devices), policy_label(r).c_str());
  if (r.shape && r.shape->tensor_parallel > 1) {
    std::printf(
        "  each data-parallel rank is one TENSOR-PARALLEL rank of t = %llu: its 1/t share of the model, %llu x %llu = "
        "%llu devices in all\n",
        static_cast<unsigned long long>(r.shape->tensor_parallel), static_cast<unsigned long long>(r.devices),
        static_cast<unsigned long long>(r.shape->tensor_parallel),
        static_cast<unsigned long long>(devices_in_all(r, r.devices)));
  }
  std::printf("  %-30s %9s %9s %9s %9s %9s %9s %9s %10s\n", "scheme", "weights", "grads", "master", "optim",
              "fp32 grad", "buckets", "gathered", "total");
  for (const rank_ledger_row& row : l) {
    const model_states& m = row.states;
    std::printf("  %-30s %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %10.3f\n", std::string(row.scheme).c_str(),
                in_unit(m.weight_bytes, byte_unit::gb), in_unit(m.gradient_bytes, byte_unit::gb),
                in_unit(m.master_bytes, byte_unit::gb), in_unit(m.optimizer_bytes, byte_unit::gb),
                in_unit(m.fp32_gradient_bytes, byte_unit::gb), in_unit(row.bucket_bytes, byte_unit::gb),
                in_unit(row.gathered_bytes, byte_unit::gb), in_unit(row.total_bytes(), byte_unit::gb));
  }
  std::printf(
      "  (buckets: DDP copies the gradients into its all-reduce buckets%s; gathered: ZeRO-3's largest layer, "
      "parameters and gradients%s)\n",
      r.bucket_view ? ", not with gradient_as_bucket_view"
                    : " unless gradient_as_bucket_view=True (--bucket-view true)",
      largest == 0 ? "; NOT COUNTED: the largest layer is unknown, so ZeRO-3's total is too low (--largest-layer N or "
                     "a transformer shape)"
                   : "");
  return exit_ok;
}

}  // namespace safeamp::tool
