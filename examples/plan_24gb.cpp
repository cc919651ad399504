// The 24 GB question in code: how large a microbatch fits, with what headroom and how many accumulation steps,
// where a GPT-2-small-sized model peaks, and why a 1.3B full fine-tune needs fused (not foreach) AdamW: the
// optimizer step's own peak. Uses only the core headers (safeamp/memory.hpp).
#include <cstdio>

#include "safeamp/memory.hpp"
#include "safeamp/policy/policy_presets.hpp"

int main() {
  using namespace safeamp;
  // The case: 24 GB (10^9 bytes), 10% reserve, 3.2 GB of model states, 0.34 GB of activations per sample.
  const memory_budget budget{.device_bytes = parse_bytes("24GB"),
                             .reserve_fraction = 0.10,
                             .fixed_bytes = parse_bytes("3.2GB"),
                             .activation_bytes_per_sample = parse_bytes("0.34GB")};
  const std::int64_t micro = max_microbatch(budget);
  const accumulation_plan acc = accumulation_for({.target_global_batch = 512, .max_microbatch = micro});
  std::printf("largest microbatch %lld, headroom %s; global batch 512 = %lld x %lld steps (%lld samples, exact)\n",
              static_cast<long long>(micro),
              format_bytes(static_cast<std::uint64_t>(headroom_bytes(budget, micro)), byte_unit::gb, 3).c_str(),
              static_cast<long long>(acc.microbatch), static_cast<long long>(acc.steps),
              static_cast<long long>(acc.global_batch));

  // A 124M-parameter GPT-2-small shape on an RTX 4090 with bf16 autocast and AdamW.
  const device_spec& rtx4090 = find_device("RTX 4090");
  const transformer_shape gpt2{.sequence = 1024, .hidden = 768, .heads = 12, .layers = 12, .vocabulary = 50257};
  const model_states states = model_states_for(parameter_count(gpt2), presets::bf16_mixed);
  for (recompute mode : {recompute::none, recompute::selective, recompute::full}) {
    const memory_budget b{.device_bytes = rtx4090.capacity_bytes,
                          .reserve_fraction = 0.10,
                          .fixed_bytes = states.total_bytes(),
                          .activation_bytes_per_sample = activation_bytes_per_sample(gpt2, mode),
                          .context_bytes = parse_bytes("512MiB"),
                          .workspace_bytes = parse_bytes("32MiB")};
    std::printf("GPT-2 small on %s, recompute %-9s: states %s, activations %s per sample, microbatch %lld\n",
                std::string(rtx4090.name).c_str(), std::string(to_string(mode)).c_str(),
                format_bytes(states.total_bytes(), byte_unit::gib).c_str(),
                format_bytes(b.activation_bytes_per_sample, byte_unit::gib).c_str(),
                static_cast<long long>(max_microbatch(b)));
  }

  // 1.3B GPT, full recomputation, bf16 autocast: the optimizer step with foreach AdamW holds a copy of the second
  // moments (4 bytes per parameter) on top of the 16 bytes of model states; fused AdamW does not.
  const transformer_shape gpt_1_3b{.sequence = 2048, .hidden = 2048, .heads = 16, .layers = 24, .vocabulary = 50257};
  const activation_ledger act = activation_ledger_for(gpt_1_3b, 1, recompute::full);
  const memory_budget pool{.device_bytes = rtx4090.capacity_bytes,
                           .reserve_fraction = 0.05,
                           .fixed_bytes = 0,
                           .activation_bytes_per_sample = 1,
                           .context_bytes = parse_bytes("512MiB"),
                           .workspace_bytes = parse_bytes("32MiB"),
                           .fragmentation_fraction = 0.05};
  const std::uint64_t usable = breakdown(pool).available_for_activations_bytes;
  std::int64_t foreach_micro = -1, fused_micro = -1;
  for (optimizer_impl impl : {optimizer_impl::foreach, optimizer_impl::fused}) {
    const step_needs needs = step_needs_for(step_inputs_for({.parameters = parameter_count(gpt_1_3b),
                                                             .policy = presets::bf16_mixed,
                                                             .states = {.impl = impl},
                                                             .forward_bytes_per_sample = act.stored_bytes,
                                                             .backward_bytes_per_sample = act.peak_bytes,
                                                             .full_recompute = true}));
    const phase_fit fit = fit_phases(usable, needs);
    std::printf("1.3B GPT, AdamW %-7s: forward %s, backward %s, optimizer step %s of %s usable -> microbatch %lld\n",
                std::string(to_string(impl)).c_str(), format_bytes(needs[0].bytes_at(1), byte_unit::gb).c_str(),
                format_bytes(needs[1].bytes_at(1), byte_unit::gb).c_str(),
                format_bytes(needs[2].bytes_at(1), byte_unit::gb).c_str(), format_bytes(usable, byte_unit::gb).c_str(),
                static_cast<long long>(fit.max_microbatch));
    (impl == optimizer_impl::foreach ? foreach_micro : fused_micro) = fit.max_microbatch;
  }
  return micro == 54 && acc.global_batch == 512 && foreach_micro == 0 && fused_micro == 1 ? 0 : 1;
}
