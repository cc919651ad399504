// The planner options the memory tests work their 24 GB cases on: an RTX 4090 with the tool's default overheads,
// bf16-mixed and full recomputation.
#pragma once

#include "safeamp/memory/planner.hpp"

namespace safeamp::test_options {

// RTX 4090 with the tool's defaults: 24564 MiB = 25,757,220,864 B; context 512 MiB -> pool 25,220,349,952;
// reserve 5% = 1,261,017,498 -> 23,959,332,454; fragmentation 5% of that = 1,197,966,623 -> 22,761,365,831;
// workspace 32 MiB = 33,554,432 -> 22,727,811,399 bytes usable by the step. 256 GB of host memory for offload.
inline planner_options rtx4090(state_options states) {
  planner_options o;
  o.device = find_device("RTX 4090");
  o.budget = {.device_bytes = o.device.capacity_bytes,
              .reserve_fraction = 0.05,
              .context_bytes = 512ULL << 20,
              .workspace_bytes = 32ULL << 20,
              .fragmentation_fraction = 0.05};
  o.window_seconds = 1e9;
  o.policies = {{"bf16-mixed", presets::bf16_mixed}};
  o.recompute_modes = {recompute::full};
  o.states = states;
  o.host_memory_bytes = 256'000'000'000ULL;
  return o;
}

}  // namespace safeamp::test_options
