// `safeamp plan`: the three reports (budget with its ledgers, roofline of a GEMM, nightly planner) as tables or JSON.
// Every size printed says its unit: GB (10^9 bytes) and GiB (2^30 bytes) side by side; JSON sizes are in bytes.
#pragma once

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "command_registry.hpp"
#include "plan_request.hpp"

namespace safeamp::tool {

inline void print_size_row(const char* label, std::uint64_t bytes, const char* sign = " ") {
  std::printf("  %s %-40s %12.3f %12.3f\n", sign, label, in_unit(bytes, byte_unit::gb), in_unit(bytes, byte_unit::gib));
}

inline void print_device(const device_spec& d, bool capacity_given) {
  std::printf(
      "Device: %s%s, %s = %s, %.0f GB/s, peak dense TFLOPS fp32 %.1f, tf32 %.1f, fp16/bf16 %.1f (fp32 accumulate%s), "
      "fp8 %s\n",
      std::string(d.name).c_str(), capacity_given ? " (capacity as given)" : "",
      format_bytes(d.capacity_bytes, byte_unit::gb).c_str(), format_bytes(d.capacity_bytes, byte_unit::gib).c_str(),
      d.memory_bytes_per_second / 1e9, d.peak_fp32_flops / 1e12, d.peak_tf32_flops / 1e12, d.peak_fp16_flops / 1e12,
      d.half_rate_fp32_accumulate ? ", GeForce half rate" : "",
      d.peak_fp8_flops > 0.0 ? std::to_string(d.peak_fp8_flops / 1e12).substr(0, 6).c_str() : "none");
}

inline nlohmann::json device_json(const device_spec& d) {
  return {{"name", std::string(d.name)},
          {"capacity_bytes", d.capacity_bytes},
          {"memory_bytes_per_second", d.memory_bytes_per_second},
          {"peak_fp32_flops", d.peak_fp32_flops},
          {"peak_tf32_flops", d.peak_tf32_flops},
          {"peak_fp16_flops", d.peak_fp16_flops},
          {"peak_bf16_flops", d.peak_bf16_flops},
          {"peak_fp8_flops", d.peak_fp8_flops},
          {"half_rate_fp32_accumulate", d.half_rate_fp32_accumulate}};
}

inline int report_roofline(const plan_request& r, nlohmann::json& out, bool json) {
  const gemm_request& g = *r.gemm;
  const double e = storage_bytes(g.format);
  const kernel_cost cost =
      gemm_cost({.m = g.m, .n = g.n, .k = g.k, .a_element_bytes = e, .b_element_bytes = e, .c_element_bytes = e});
  const roofline_point p = roofline(r.device, g.format, cost);
  nlohmann::json j = {{"m", g.m},
                      {"n", g.n},
                      {"k", g.k},
                      {"format", format_name(g.format)},
                      {"flops", cost.flops},
                      {"bytes", cost.bytes},
                      {"intensity_flops_per_byte", p.intensity_flops_per_byte},
                      {"ridge_flops_per_byte", p.ridge_flops_per_byte},
                      {"peak_flops", p.peak_flops},
                      {"attainable_flops", p.attainable_flops},
                      {"min_seconds", p.min_seconds},
                      {"verdict", std::string(to_string(p.bound))}};
  int code = exit_ok;
  plausibility check;
  if (g.measured_seconds > 0.0) {
    check = check_measurement(r.device, g.format, cost, g.measured_seconds);
    j["measured_flops"] = check.measured_flops;
    j["plausible"] = check.plausible;
    j["ratio_to_bound"] = check.ratio;
    if (!check.plausible) {
      j["diagnosis"] = check.diagnosis;
      code = exit_check_failed;
    }
  }
  if (json) {
    out["device"] = device_json(r.device);
    out["roofline"] = j;
    return code;
  }
  print_device(r.device, r.capacity_given);
  std::printf(
      "GEMM %.0f x %.0f x %.0f in %s: %.4g FLOP, %.4g bytes (compulsory), intensity %.2f FLOP/B, ridge %.1f FLOP/B\n",
      g.m, g.n, g.k, format_name(g.format).c_str(), cost.flops, cost.bytes, p.intensity_flops_per_byte,
      p.ridge_flops_per_byte);
  std::printf("  %s: attainable %.2f TFLOP/s of %.2f peak; no kernel can take less than %.4g s\n",
              std::string(to_string(p.bound)).c_str(), p.attainable_flops / 1e12, p.peak_flops / 1e12, p.min_seconds);
  if (g.measured_seconds > 0.0) {
    std::printf("  measured %.4g s = %.2f TFLOP/s (%.2fx the bound): %s\n", g.measured_seconds,
                check.measured_flops / 1e12, check.ratio, check.plausible ? "plausible" : check.diagnosis.c_str());
  }
  return code;
}

/// The devices of the accumulation line: "2 device(s)"; under tensor parallelism "2 data-parallel replica(s) x 8
/// tensor-parallel ranks = 16 devices" (the global batch counts replicas: each replica's t ranks share its samples).
inline std::string replicas_text(const plan_request& r) {
  const std::uint64_t tp = r.shape ? r.shape->tensor_parallel : 1;
  if (tp == 1) return std::to_string(r.data_parallel) + " device(s)";
  return std::to_string(r.data_parallel) + " data-parallel replica(s) x " + std::to_string(tp) +
         " tensor-parallel ranks = " + std::to_string(devices_in_all(r, r.data_parallel)) + " devices";
}

inline std::string policy_label(const plan_request& r) {
  const bool impl_matters = r.states.optimizer == optimizer_kind::adam;
  return r.policy_name + ", " + std::string(to_string(r.states.optimizer)) +
         (impl_matters ? " " + std::string(to_string(r.states.impl)) : "") +
         (r.states.optimizer_state_format == fp32 ? ""
                                                  : " (" + format_name(r.states.optimizer_state_format) + " states)");
}

inline void print_states_ledger(const plan_request& r) {
  const model_states& m = *r.states_ledger;
  // Per parameter on the device, unpartitioned: the policy's count, or what a frozen base / offload leaves there.
  const state_options rank = device_states(r);  // under tensor parallelism: the rank's adapters and frozen ones
  const double per_param = static_cast<double>(model_states_for(m.parameter_count, r.policy, rank).total_bytes()) /
                           static_cast<double>(m.parameter_count);
  if (r.shape && r.shape->tensor_parallel > 1) {
    // Tensor parallelism: every figure below is one rank's (rank_parameters: 1/t of the weight matrices and of the
    // embedding; the biases and layer norms Megatron replicates are not counted).
    std::printf(
        "Model states PER TENSOR-PARALLEL RANK (t = %llu): %.4g of the model's %.4g parameters (1/t of the weight "
        "matrices and the embedding), %s, ZeRO stage %d over %llu data-parallel device(s): %.4g bytes/param on the "
        "device unpartitioned\n",
        static_cast<unsigned long long>(r.shape->tensor_parallel), static_cast<double>(m.parameter_count),
        static_cast<double>(*r.parameters), policy_label(r).c_str(), static_cast<int>(r.stage),
        static_cast<unsigned long long>(r.data_parallel), per_param);
  } else {
    std::printf(
        "Model states: %.4g parameters, %s, ZeRO stage %d over %llu device(s): %.4g bytes/param on the device "
        "unpartitioned\n",
        static_cast<double>(m.parameter_count), policy_label(r).c_str(), static_cast<int>(r.stage),
        static_cast<unsigned long long>(r.data_parallel), per_param);
  }
  std::printf("  %-42s %12s %12s\n", "", "GB (10^9)", "GiB (2^30)");
  const bool split = rank != r.states;
  if (r.states.adapter_parameters > 0) {
    std::printf("  %s: the %.4g base parameters are frozen (%s), %llu adapter parameters train in fp32%s\n",
                r.states.base_4bit ? "QLoRA" : "LoRA", static_cast<double>(m.parameter_count),
                r.states.base_4bit ? "4-bit NF4, 0.516 bytes each"
                                   : format_name(frozen_base_format(r.policy, r.states)).c_str(),
                static_cast<unsigned long long>(rank.adapter_parameters),
                split ? (" (this rank's of the model's " + std::to_string(r.states.adapter_parameters) +
                         ": A whole and B split on column-parallel layers, A split and B whole on row-parallel ones)")
                            .c_str()
                      : "");
  }
  if (r.states.frozen_parameters > 0) {
    std::printf(
        "  frozen: %llu of the %.4g parameters keep their weights only (no gradients, master copy or optimizer "
        "states)%s\n",
        static_cast<unsigned long long>(rank.frozen_parameters), static_cast<double>(m.parameter_count),
        split ? (" (this rank's share of the model's " + std::to_string(r.states.frozen_parameters) + ")").c_str()
              : "");
  }
  print_size_row("weights", m.weight_bytes);
  print_size_row("gradients", m.gradient_bytes);
  print_size_row("fp32 master copy", m.master_bytes);
  print_size_row("optimizer states", m.optimizer_bytes);
  if (m.fp32_gradient_bytes > 0) print_size_row("fp32 gradient copy (DeepSpeed)", m.fp32_gradient_bytes);
  print_size_row("total model states", m.total_bytes(), "=");
  if (m.host_bytes > 0) print_size_row("offloaded to CPU memory (not on the device)", m.host_bytes, " ");
}

/// Printed where `--recompute selective` meets flash attention (the ledger, the window plan): planned, not refused,
/// since a trainer configured that way runs, but with none's figures (recomputes_attention_core).
inline constexpr const char* selective_with_flash_note =
    "recompute selective with flash attention: no s^2 attention core is stored, so there is nothing to drop or "
    "recompute; the same bytes and FLOPs as recompute none";

inline void print_activation_ledger(const transformer_shape& t, recompute mode, double element_bytes) {
  const activation_ledger l = activation_ledger_for(t, 1, mode, element_bytes);
  std::printf(
      "Activations per sample (Korthikanti et al. 2022), s=%llu h=%llu a=%llu L=%llu v=%llu t=%llu%s, recompute %s, "
      "%g-byte activations:\n",
      static_cast<unsigned long long>(t.sequence), static_cast<unsigned long long>(t.hidden),
      static_cast<unsigned long long>(t.heads), static_cast<unsigned long long>(t.layers),
      static_cast<unsigned long long>(t.vocabulary), static_cast<unsigned long long>(t.tensor_parallel),
      t.sequence_parallel ? " +SP" : "", std::string(to_string(mode)).c_str(), element_bytes);
  if (t.kv_heads != 0 || t.ffn_hidden != 0 || t.gated_mlp || !t.tied_embeddings) {
    std::printf("  architecture: %llu K/V heads, MLP width %llu%s, %s embeddings (%llu parameters per layer)\n",
                static_cast<unsigned long long>(kv_heads_of(t)), static_cast<unsigned long long>(ffn_of(t)),
                t.gated_mlp ? " gated (SwiGLU)" : "", t.tied_embeddings ? "tied" : "untied",
                static_cast<unsigned long long>(layer_parameters(t)));
  }
  if (t.cross_entropy_chunks > 0) {
    std::printf(
        "  chunked cross-entropy: %llu chunks of %llu tokens per sample, no logits stored, recomputed in backward\n",
        static_cast<unsigned long long>(t.cross_entropy_chunks),
        static_cast<unsigned long long>((t.sequence + t.cross_entropy_chunks - 1) / t.cross_entropy_chunks));
  }
  if (t.attention == attention_kernel::flash) {
    std::printf("  flash attention: no s^2 scores stored, 4as bytes of fp32 softmax statistics per layer instead\n");
    if (mode == recompute::selective) std::printf("  %s\n", selective_with_flash_note);
  }
  std::printf("  %-42s %12s %12s   %s\n", "block (bytes added)", "GB (10^9)", "GiB (2^30)", "held after, GB");
  for (std::size_t i = 0; i < l.entries.size(); ++i) {
    const activation_entry& e = l.entries[i];
    const bool elide = i >= 3 && i + 1 <= t.layers;  // entry i is layer i: show layers 1, 2 and L
    if (elide) {
      if (i == 3) std::printf("    ... (%llu layers alike)\n", static_cast<unsigned long long>(t.layers - 3));
      continue;
    }
    std::printf("  %s %-40s %12.4f %12.4f   %.4f%s\n", e.transient ? "~" : "+", e.block.c_str(),
                in_unit(e.bytes, byte_unit::gb), in_unit(e.bytes, byte_unit::gib),
                in_unit(e.cumulative_bytes, byte_unit::gb), e.transient ? " (transient)" : "");
  }
  std::printf("  peak %s (%s) at \"%s\"\n", format_bytes(l.peak_bytes, byte_unit::gb, 4).c_str(),
              format_bytes(l.peak_bytes, byte_unit::gib, 4).c_str(), l.peak_block.c_str());
}

/// The device's capacity and what comes off it before the model: context, reserve, fragmentation, workspace.
inline void print_overheads(const char* title, const memory_budget& b, const budget_breakdown& d) {
  std::printf("%s\n  %-42s %12s %12s\n", title, "", "GB (10^9)", "GiB (2^30)");
  print_size_row("device capacity", d.device_bytes);
  print_size_row("CUDA context", d.context_bytes, "-");
  char label[96];
  std::snprintf(label, sizeof label, "reserve (%.4g%% of capacity - context)", 100.0 * b.reserve_fraction);
  print_size_row(label, d.reserve_bytes, "-");
  std::snprintf(label, sizeof label, "fragmentation allowance (%.4g%% of the rest)", 100.0 * b.fragmentation_fraction);
  print_size_row(label, d.fragmentation_bytes, "-");
  print_size_row("library workspace", d.workspace_bytes, "-");
}

inline void print_pool(const memory_budget& b) {
  memory_budget pool = b;
  pool.fixed_bytes = 0;
  pool.activation_bytes_per_sample = 1;
  const budget_breakdown d = breakdown(pool);
  print_overheads("Memory pool", b, d);
  print_size_row("usable by the step", d.available_for_activations_bytes, "=");
}

/// What each phase holds at `microbatch`, its peak and the headroom against `usable` bytes.
inline void print_phases(const step_needs& needs, std::uint64_t microbatch, std::uint64_t usable) {
  std::printf("Peaks per phase at microbatch %llu\n  %-42s %12s %12s\n", static_cast<unsigned long long>(microbatch),
              "", "GB (10^9)", "GiB (2^30)");
  for (const phase_need& p : needs) {
    std::printf("  %s:\n", std::string(to_string(p.phase)).c_str());
    for (const phase_item& i : p.items) {
      const std::uint64_t bytes = i.fixed_bytes + microbatch * i.bytes_per_sample;
      std::string label = i.name;
      if (i.bytes_per_sample > 0) label += " x" + std::to_string(microbatch);
      std::printf("  + %-44s %10.3f %12.3f\n", label.c_str(), in_unit(bytes, byte_unit::gb),
                  in_unit(bytes, byte_unit::gib));
    }
    const std::uint64_t peak = p.bytes_at(microbatch);
    const std::string verdict = peak <= usable ? "  fits, headroom " + format_bytes(usable - peak, byte_unit::gb, 3)
                                               : "  OVER by " + format_bytes(peak - usable, byte_unit::gb, 3);
    std::printf("  = %-44s %10.3f %12.3f %s\n", (std::string(to_string(p.phase)) + " peak").c_str(),
                in_unit(peak, byte_unit::gb), in_unit(peak, byte_unit::gib), verdict.c_str());
  }
}

/// Where the host memory figure came from.
inline std::string host_memory_source(const plan_request& r) {
  return r.host_memory_given ? "given with --host-memory" : "MemAvailable of /proc/meminfo; --host-memory to set";
}

/// The host side of an offloading configuration: what goes to the CPU, x the buffer factor, against the host memory.
inline void print_host_memory(const plan_request& r, const plan_candidate& c) {
  char label[96];
  std::printf("Host memory (offloaded states)\n  %-42s %12s %12s\n", "", "GB (10^9)", "GiB (2^30)");
  const std::uint64_t devices = devices_in_all(r, r.data_parallel);  // every rank of every replica offloads
  print_size_row(devices > 1 ? "offloaded to CPU memory, per device" : "offloaded to CPU memory", c.host_bytes, " ");
  std::snprintf(label, sizeof label, "needed: x %.3g (DeepSpeed's buffer factor)%s", host_buffer_factor,
                devices > 1 ? (", all " + std::to_string(devices) + " devices").c_str() : "");
  print_size_row(label, c.host_needed_bytes, "=");
  print_size_row("host memory", r.host_memory_bytes, " ");
  const std::string verdict =
      c.host_shortfall_bytes > 0
          ? "SHORT by " + format_bytes(c.host_shortfall_bytes, byte_unit::gb, 3)
          : "fits, headroom " + format_bytes(r.host_memory_bytes - c.host_needed_bytes, byte_unit::gb, 3);
  std::printf("  host memory %s (%s)\n", verdict.c_str(), host_memory_source(r).c_str());
}

inline nlohmann::json phases_json(const step_needs& needs, std::uint64_t microbatch) {
  nlohmann::json a = nlohmann::json::array();
  for (const phase_need& p : needs) {
    nlohmann::json items = nlohmann::json::array();
    for (const phase_item& i : p.items) {
      items.push_back({{"name", i.name},
                       {"bytes", i.fixed_bytes + microbatch * i.bytes_per_sample},
                       {"fixed_bytes", i.fixed_bytes},
                       {"bytes_per_sample", i.bytes_per_sample}});
    }
    a.push_back({{"phase", std::string(to_string(p.phase))}, {"peak_bytes", p.bytes_at(microbatch)}, {"items", items}});
  }
  return a;
}

/// Workload and planner options for the request (used by the planner and for "what would fit").
inline std::pair<workload, planner_options> planner_inputs(const plan_request& r) {
  workload w;
  w.shape = r.shape;
  w.parameters = r.parameters.value_or(0);
  w.tokens_per_sample = r.tokens_per_sample;
  w.activation_bytes_per_sample = r.shape ? 0 : r.budget.activation_bytes_per_sample;
  w.samples = r.samples > 0.0 ? r.samples : 1.0;
  w.global_batch = r.global_batch;
  w.largest_layer_parameters = r.largest_layer;
  planner_options o;
  o.device = r.device;
  o.budget = r.budget;
  o.window_seconds = r.window_seconds > 0.0 ? r.window_seconds : 1e9;
  o.efficiency = r.efficiency;
  o.measured_samples_per_second = r.measured_sps;
  o.measured_policy = {r.measured_policy, r.measured_policy_value};
  o.measured_recompute = r.measured_recompute;  // --measured-recompute, or --recompute (none when not given)
  if (!r.policy_names.empty()) {
    o.policies.clear();
    for (const std::string& n : r.policy_names) o.policies.push_back({n, parse_policy_arg("policies", n)});
  } else if (r.policy_given) {
    o.policies = {{r.policy_name, r.policy}};  // --policy with --window: that one policy
  }
  if (r.recompute_given) o.recompute_modes = {r.mode};
  o.states = r.states;
  o.stage = r.stage;
  o.data_parallel = r.data_parallel;
  o.rounding = r.rounding;
  o.price_per_hour = r.price_per_hour;
  o.link = r.link;
  o.host_memory_bytes = r.host_memory_bytes;
  o.gradient_as_bucket_view = r.bucket_view;
  if (r.parity) {
    o.verified_policies = r.parity->passed;
    o.failed_policies = r.parity->failed;
  }
  return {w, o};
}

}  // namespace safeamp::tool
