// `safeamp plan`: the typed request the key/value inputs resolve to, the tool's defaults, and the reader the
// resolvers share (a key's text, or a count parsed with its range).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "plan_parity.hpp"
#include "plan_shape.hpp"

namespace safeamp::tool {

// Defaults of the tool (the library's own defaults are zero; these are printed with every result).
// The reserve (estimate error) and the fragmentation allowance (allocator slack: reserved minus allocated) together
// keep ~9.75% of the pool free: 5% of the pool, then 5% of what is left.
inline constexpr double default_reserve_fraction = 0.05;
inline constexpr double default_fragmentation_fraction = 0.05;
inline constexpr std::uint64_t default_context_bytes = 512ULL << 20;  // ~300 MiB with lazy loading, plus margin
inline constexpr std::uint64_t default_workspace_bytes = 32ULL
                                                         << 20;  // cuBLASLt workspace as PyTorch sizes it on Hopper

struct gemm_request {
  double m = 0, n = 0, k = 0;
  format_spec format = fp16;
  double measured_seconds = 0.0;
};

struct plan_request {
  device_spec device{};
  bool capacity_given = false;  // --capacity overrides the table's figure
  memory_budget budget{};       // fixed/per-sample filled in below when known
  bool has_budget = false;      // fixed and per-sample bytes are known
  std::optional<std::uint64_t> parameters{};
  bool params_given = false;  // --params (with a shape it overrides the shape's parameter_count)
  std::string policy_name = "bf16-mixed";
  precision_policy policy = presets::bf16_mixed;
  bool policy_given = false;  // --policy: with --window the one policy the planner tries
  state_options states{};
  zero_stage stage = zero_stage::none;
  std::uint64_t data_parallel = 1;
  std::uint64_t devices = 0;  // --devices N: print the per-rank ledger over N data-parallel ranks (0: not asked)
  bool bucket_view = false;   // --bucket-view: DDP's gradient_as_bucket_view=True
  std::optional<transformer_shape> shape{};
  recompute mode = recompute::none;
  bool recompute_given = false;
  std::int64_t global_batch = 0;
  accumulation_rounding rounding = accumulation_rounding::exact_or_ceil;
  double window_seconds = 0.0;
  double samples = 0.0;
  std::uint64_t tokens_per_sample = 1;
  double efficiency = 0.4;
  double measured_sps = 0.0;  // --measured-sps: the whole job's samples/s (every replica together)
  // The policy --measured-sps and --measured-peak ran with: --measured-policy, or the one policy planned.
  std::string measured_policy = "bf16-mixed";
  precision_policy measured_policy_value = presets::bf16_mixed;
  recompute measured_recompute = recompute::none;  // --measured-recompute, or --recompute (none when not given)
  std::vector<std::string> policy_names{};
  std::optional<parity_results> parity{};  // --verified-by
  std::uint64_t measured_peak_bytes = 0;   // --measured-peak (0: none)
  std::uint64_t measured_microbatch = 1;
  offload_link link{};                  // --pcie-bandwidth, --host-bandwidth
  std::uint64_t host_memory_bytes = 0;  // --host-memory, or MemAvailable of /proc/meminfo
  bool host_memory_given = false;
  std::uint64_t largest_layer = 0;  // --largest-layer (without a shape)
  double price_per_hour = 0.0;
  std::optional<gemm_request> gemm{};
  std::optional<model_states> states_ledger{};
};

/// Parameters one device holds before ZeRO partitioning: one tensor-parallel rank's share of the model with a shape
/// (tensor_parallel_share: 1/t of the weight matrices and of the embedding), the whole model otherwise.
[[nodiscard]] inline std::uint64_t device_parameters(const plan_request& r) {
  return r.shape ? tensor_parallel_share(*r.shape, *r.parameters) : *r.parameters;
}

/// The state options of one device: under tensor parallelism its share of the adapters and of the frozen parameters
/// (detail::device_states), the options as given otherwise.
[[nodiscard]] inline state_options device_states(const plan_request& r) {
  return detail::device_states({.shape = r.shape, .parameters = *r.parameters}, r.states);
}

/// Devices in all: the data-parallel replicas x the tensor-parallel size t (every replica is t devices).
[[nodiscard]] inline std::uint64_t devices_in_all(const plan_request& r, std::uint64_t replicas) {
  return detail::devices_in_all({.shape = r.shape}, replicas);
}

/// The inputs by key: a value's text (nullptr when absent), or a count 1 .. max with the key named in its error.
struct plan_value_reader {
  const plan_values& values;
  [[nodiscard]] const std::string* get(const char* key) const {
    const auto it = values.find(key);
    return it == values.end() ? nullptr : &it->second;
  }
  [[nodiscard]] std::optional<std::uint64_t> count(const char* key, double max) const {
    if (const std::string* s = get(key)) {
      return parse_count(key, *s, max, "a whole number 1 .. " + std::to_string(static_cast<long long>(max)));
    }
    return std::nullopt;
  }
};

}  // namespace safeamp::tool
