// `safeamp plan`: turns the key/value inputs into typed requests (device, budget, model, shape, window, GEMM),
// with every default stated here and every bad value reported by key.
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "plan_measured.hpp"
#include "plan_training_states.hpp"

namespace safeamp::tool {

inline plan_request resolve_request(const plan_values& v, const device_spec& device) {
  const plan_value_reader in{v};
  const auto get = [&in](const char* k) { return in.get(k); };
  const auto count = [&in](const char* k, double max) { return in.count(k, max); };
  plan_request r;
  r.device = device;
  r.capacity_given = get("capacity") != nullptr;
  r.budget.device_bytes = device.capacity_bytes;
  r.budget.reserve_fraction = default_reserve_fraction;
  r.budget.context_bytes = default_context_bytes;
  r.budget.workspace_bytes = default_workspace_bytes;
  r.budget.fragmentation_fraction = default_fragmentation_fraction;
  if (auto* s = get("reserve"))
    r.budget.reserve_fraction = parse_real("reserve", *s, 0.0, 1.0, false, "0 <= reserve < 1");
  if (r.budget.reserve_fraction >= 1.0) throw error("reserve", quoted_input(*get("reserve")), "0 <= reserve < 1");
  if (auto* s = get("context")) r.budget.context_bytes = parse_bytes(*s, "context");
  if (auto* s = get("workspace")) r.budget.workspace_bytes = parse_bytes(*s, "workspace");
  if (auto* s = get("fragmentation")) {
    r.budget.fragmentation_fraction = parse_real("fragmentation", *s, 0.0, 0.999999, false, "0 <= fragmentation < 1");
  }
  r.budget.activation_bytes_per_sample = 1;  // checks the overheads against the capacity now
  validate(r.budget);

  if (auto* s = get("policy")) {
    r.policy = parse_policy_arg("policy", *s);
    r.policy_name = *s;
    r.policy_given = true;
  }
  resolve_optimizer(v, r);
  if (auto* s = get("zero-stage")) {
    if (*s != "0" && *s != "1" && *s != "2" && *s != "3") throw error("zero-stage", quoted_input(*s), "0, 1, 2 or 3");
    r.stage = static_cast<zero_stage>((*s)[0] - '0');
  }
  if (auto c = count("dp", 1e6)) r.data_parallel = *c;
  if (auto c = count("devices", 1e6)) {
    if (get("dp") && *c != r.data_parallel) {
      throw error("devices", std::to_string(*c),
                  "the same count as --dp (" + std::to_string(r.data_parallel) + "), or one of them");
    }
    r.devices = *c;
    r.data_parallel = *c;
  }
  if (auto* s = get("bucket-view")) {
    if (r.data_parallel < 2) {
      throw error("bucket-view", quoted_input(*s), "only with --devices N or --dp N, N > 1 (DDP's gradient buckets)");
    }
    r.bucket_view = parse_bool("bucket-view", *s);
  }
  if (auto c = count("largest-layer", 1e15)) r.largest_layer = *c;
  if (auto* s = get("recompute")) {
    r.mode = parse_recompute(*s);
    r.recompute_given = true;
  }
  if (auto c = count("global-batch", 1e12)) r.global_batch = static_cast<std::int64_t>(*c);
  if (auto* s = get("rounding")) {
    if (*s == "ceil")
      r.rounding = accumulation_rounding::ceil;
    else if (*s == "exact" || *s == "exact-divisor")
      r.rounding = accumulation_rounding::exact_divisor;
    else if (*s == "exact-or-ceil")
      r.rounding = accumulation_rounding::exact_or_ceil;
    else
      throw error("rounding", quoted_input(*s), "exact-or-ceil (default), exact or ceil");
  }

  if (std::optional<transformer_shape> t = resolve_shape(v)) {
    r.shape = t;
    r.parameters = parameter_count(*t);  // --params, when given, overrides this estimate (below)
    r.tokens_per_sample = t->sequence;
  }
  if (auto* s = get("params")) {
    r.params_given = true;
    r.parameters = parse_count("params", *s, 1e15, "1 .. 1e15 parameters (e.g. 7.5e9, 7.5B, 125M)");
  }
  if (auto c = count("tokens-per-sample", 1e8)) {
    if (r.shape) {
      throw error("tokens-per-sample", quoted_input(*get("tokens-per-sample")),
                  "only without a transformer shape (the shape's --seq is its tokens per sample)");
    }
    r.tokens_per_sample = *c;
  }
  if (r.shape && r.largest_layer > 0) {
    throw error("largest-layer", quoted_input(*get("largest-layer")),
                "only without a transformer shape (the shape's largest layer is computed from it)");
  }
  // Block-scaled storage (OCP MX, NVFP4) of the weights, gradients and stored activations.
  if (auto* s = get("weight-format")) r.states.weight_blocks = parse_block_storage("weight-format", *s);
  if (auto* s = get("gradient-format")) r.states.gradient_blocks = parse_block_storage("gradient-format", *s);
  if (auto* s = get("activation-format")) r.states.activation_blocks = parse_block_storage("activation-format", *s);
  if (r.shape) {
    r.states.weight_tensors = weight_matrices(*r.shape);
    // --params beside a shape is the model's own count (its biases, norms and learned positions included): the memory
    // takes it and the FLOPs the shape, so both must be of one model. A count the shape cannot have is refused (it
    // was taken until 2026-12: --params 7e9 with GPT-2 small's shape planned 7B of memory and 124M of FLOPs).
    const parameter_range shape = shape_parameter_range(*r.shape);
    if (r.params_given && !agrees(shape, *r.parameters)) {
      throw error("params",
                  quoted_input(*get("params")) + " with a shape of " + std::to_string(shape.low) + " parameters",
                  agreeing_text(shape) + ": " + shape.basis +
                      " with 1% either side (the memory takes --params, the FLOPs the shape: one model for both); "
                      "or leave --params out to plan the shape's count");
    }
  }

  resolve_tuning_and_offload(v, r);
  // ZeRO-3 gathers one layer's parameters and gradients at a time (DeepSpeed's estimator: 4 x the largest layer's
  // parameters); without its size the ledger would leave it out, so it is refused as --offload parameters is.
  if (r.stage == zero_stage::parameters && r.parameters && !r.shape && r.largest_layer == 0) {
    throw error("zero-stage", "'3' without a largest layer",
                "a transformer shape or --largest-layer N (ZeRO-3 gathers the largest layer: 4 x its parameters)");
  }
  if (r.devices > 0 && !r.parameters) {
    throw error("devices", std::to_string(r.devices),
                "a model for the per-rank ledger (--params or a transformer shape)");
  }
  std::optional<std::uint64_t> fixed;
  if (auto* s = get("states")) {
    fixed = parse_bytes(*s, "states");
    if (r.parameters)
      throw error("states", quoted_input(*s), "either --states or --params/a transformer shape, not both");
  } else if (r.parameters) {
    r.states_ledger = model_states_for(device_parameters(r), r.policy, device_states(r), r.stage, r.data_parallel);
    fixed = r.states_ledger->total_bytes();
  }
  std::optional<std::uint64_t> per_sample;
  if (auto* s = get("per-sample")) {
    per_sample = parse_bytes(*s, "per-sample");
    if (*per_sample == 0) throw error("per-sample", quoted_input(*s), "> 0 bytes");
    if (r.shape) throw error("per-sample", quoted_input(*s), "either --per-sample or a transformer shape, not both");
  } else if (r.shape) {
    per_sample = activation_bytes_per_sample(*r.shape, r.mode, activation_element_bytes(r.policy, r.states));
  }
  if (fixed && per_sample) {
    r.budget.fixed_bytes = *fixed;
    r.budget.activation_bytes_per_sample = *per_sample;
    r.has_budget = true;
  }

  if (auto* s = get("window")) {
    const char* accepted =
        "a duration of 1 s .. 1e9 s (about 31.7 years) with a unit: h, min (or m), s; e.g. 8h, 90min";
    r.window_seconds = parse_duration_seconds("window", *s, accepted);
    if (r.window_seconds < min_window_seconds) throw error("window", quoted_input(*s), accepted);
  }
  // Keys only the nightly planner reads: refused without --window rather than ignored.
  if (r.window_seconds <= 0.0) {
    for (const char* k : {"samples", "tokens", "price-per-hour", "efficiency", "measured-sps", "measured-policy",
                          "measured-recompute", "policies", "verified-by"}) {
      if (auto* s = get(k)) throw error(k, quoted_input(*s), "only with --window (the nightly planner)");
    }
  }
  // With --window, --policy is the one policy to plan (as --recompute is the one mode); with --policies it would
  // change nothing. The policy a measurement ran with is --measured-policy's (until 2026-12 --policy named a
  // --measured-peak's beside --policies, and without it the peak was taken as bf16-mixed's).
  if (get("policy") && get("policies") && r.window_seconds > 0.0) {
    throw error("policy", quoted_input(*get("policy")) + " with --policies",
                "either --policy (the one policy to plan) or --policies (several), not both (--measured-policy names "
                "the policy of a --measured-peak or --measured-sps)");
  }
  if (get("efficiency") && get("measured-sps")) {
    throw error("efficiency", quoted_input(*get("efficiency")) + " with --measured-sps",
                "either --efficiency or --measured-sps (which calibrates the efficiency), not both");
  }
  if (get("measured-policy") && !get("measured-sps") && !get("measured-peak")) {
    throw error("measured-policy", quoted_input(*get("measured-policy")),
                "only with --measured-sps or --measured-peak (the policy the measurement ran with)");
  }
  if (auto* s = get("samples")) r.samples = parse_real("samples", *s, 1.0, 1e15, false, "1 .. 1e15 samples");
  if (auto* s = get("tokens")) {
    if (get("samples")) throw error("tokens", quoted_input(*s), "either --samples or --tokens, not both");
    r.samples = std::ceil(parse_real("tokens", *s, 1.0, 1e18, false, "1 .. 1e18 tokens") /
                          static_cast<double>(r.tokens_per_sample));
  }
  if (auto* s = get("efficiency")) {
    r.efficiency = parse_real("efficiency", *s, min_efficiency, 1.0, false,
                              "0.001 <= efficiency <= 1 (the fraction of the roofline bound reached)");
  }
  if (auto* s = get("measured-sps")) {
    r.measured_sps = parse_real("measured-sps", *s, 1e-6, 1e15, false, "1e-6 .. 1e15 samples/s");
  }
  if (auto* s = get("price-per-hour")) r.price_per_hour = parse_real("price-per-hour", *s, 0.0, 1e9, false, ">= 0");
  if (auto* s = get("policies")) {
    std::stringstream ss(*s);
    for (std::string item; std::getline(ss, item, ',');) {
      (void)parse_policy_arg("policies", item);
      r.policy_names.push_back(item);
    }
  }
  if (auto* s = get("measured-peak")) {
    r.measured_peak_bytes = parse_bytes(*s, "measured-peak");
    if (r.measured_peak_bytes == 0)
      throw error("measured-peak", quoted_input(*s), "> 0 bytes (torch.cuda.max_memory_allocated())");
    if (!r.parameters)
      throw error("measured-peak", quoted_input(*s), "a model to calibrate (--params or a transformer shape)");
  }
  if (auto c = count("measured-microbatch", 1e9)) {
    if (r.measured_peak_bytes == 0) throw error("measured-microbatch", std::to_string(*c), "only with --measured-peak");
    r.measured_microbatch = *c;
  }
  if (r.window_seconds > 0.0) {
    if (r.samples <= 0.0) throw error("samples", "missing", "--samples or --tokens with --window");
    // A global batch above the samples trained completes no optimizer step: the plan charged a fraction of one.
    if (r.global_batch > 0 && static_cast<double>(r.global_batch) > r.samples) {
      char samples[32];
      std::snprintf(samples, sizeof samples, "%.15g", r.samples);
      throw error("global-batch", quoted_input(std::to_string(r.global_batch)),
                  std::string("at most the samples trained in the window (") + samples +
                      "): a larger global batch never completes an optimizer step");
    }
    if (!r.parameters)
      throw error("params", "missing", "--params (with --per-sample) or a transformer shape with --window");
    if (!r.shape && !per_sample)
      throw error("per-sample", "missing", "--per-sample or a transformer shape with --window");
  }
  resolve_measured_policy(v, r);
  resolve_measured_recompute(v, r);
  // Parity evidence counts for the model it was measured on: the planned count, given or the shape's.
  if (auto* s = get("verified-by")) {
    r.parity = read_parity_summary(
        *s, r.params_given || !r.shape ? given_parameter_range(*r.parameters) : shape_parameter_range(*r.shape));
  }

  if (auto* s = get("gemm")) {
    gemm_request g;
    double dims[3] = {0, 0, 0};
    if (s->empty() || s->back() == 'x') throw error("gemm", quoted_input(*s), "MxNxK with three whole numbers >= 1");
    std::stringstream ss(*s);
    int i = 0;
    for (std::string item; std::getline(ss, item, 'x'); ++i) {
      if (i >= 3) throw error("gemm", quoted_input(*s), "MxNxK with three whole numbers >= 1");
      dims[i] = static_cast<double>(parse_count("gemm", item, 1e9, "MxNxK with three whole numbers 1 .. 1e9"));
    }
    if (i != 3) throw error("gemm", quoted_input(*s), "MxNxK with three whole numbers >= 1");
    g.m = dims[0];
    g.n = dims[1];
    g.k = dims[2];
    if (auto* f = get("format")) g.format = parse_format(*f);
    if (auto* t = get("measured-seconds")) {
      g.measured_seconds = parse_real("measured-seconds", *t, 1e-9, 1e9, false, "1e-9 .. 1e9 seconds");
    }
    r.gemm = g;
  }
  for (const char* k : {"format", "measured-seconds"}) {
    if (!r.gemm && get(k)) throw error(k, quoted_input(*get(k)), "only with --gemm MxNxK (a GEMM's format and time)");
  }
  if (!r.gemm && r.window_seconds <= 0.0 && !r.has_budget) {
    throw error(
        "plan inputs", "incomplete",
        "model states (--states or --params/--policy/--optimizer) with activations (--per-sample or a transformer "
        "shape), a --window with --samples, or a --gemm MxNxK");
  }
  return r;
}

}  // namespace safeamp::tool
