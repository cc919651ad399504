// The 24 GB question in code: how large a microbatch fits, with what headroom and how many accumulation steps,
// and where a GPT-2-small-sized model peaks. Uses only the core headers (safeamp/memory.hpp).
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
  const accumulation_plan acc = accumulation_for(512, micro);
  std::printf("largest microbatch %lld, headroom %s; global batch 512 = %lld x %lld steps (%lld samples, ceil rule)\n",
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
  return micro == 54 ? 0 : 1;
}
