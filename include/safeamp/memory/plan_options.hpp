// Inputs of the nightly-window planner: what has to be trained (workload), how to plan it (planner_options: device,
// budget, window, policies, optimizer, host memory for offload), the quality a policy is known to have, and the host
// memory an offloading configuration needs.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "safeamp/memory/activations.hpp"
#include "safeamp/memory/budget.hpp"
#include "safeamp/memory/bytes.hpp"
#include "safeamp/memory/devices.hpp"
#include "safeamp/memory/model_states.hpp"
#include "safeamp/memory/step_time.hpp"
#include "safeamp/memory/transformer_shape.hpp"
#include "safeamp/policy/policy_presets.hpp"

namespace safeamp {

/// Bounds of the planner's inputs. Below min_efficiency of the roofline bound (0.1%) a step-time estimate means
/// nothing (tuned training reaches 30-60%, an untuned loop a few percent); a window under a second cannot hold a
/// training step worth planning; 1e9 s is about 31.7 years.
inline constexpr double min_efficiency = 1e-3;
inline constexpr double min_window_seconds = 1.0;
inline constexpr double max_window_seconds = 1e9;

/// What has to be trained in the window. Give either `shape` (a transformer) or `parameters` with
/// `tokens_per_sample` and `activation_bytes_per_sample` (a measured or estimated figure, used for every policy).
struct workload {
  std::optional<transformer_shape> shape{};
  std::uint64_t parameters = 0;                   // 0 with a shape: its parameter_count (a given count overrides it)
  std::uint64_t tokens_per_sample = 1;            // from the shape (its sequence) when one is given
  std::uint64_t activation_bytes_per_sample = 0;  // only without a shape
  std::uint64_t largest_layer_parameters = 0;     // ZeRO-3's gathered layer; from the shape when one is given
  double samples = 0.0;                           // samples to train per night (tokens / tokens_per_sample)
  std::int64_t global_batch = 0;                  // 0: no target, use the largest microbatch
};

struct planner_options {
  device_spec device{};
  memory_budget budget{};       // device_bytes (0: the device's capacity), reserve, context, workspace, fragmentation
  double window_seconds = 0.0;  // completion window
  double efficiency = 0.4;      // fraction of the roofline bound reached (MFU-like); 40% is typical of tuned training
  /// If > 0: a measured throughput that replaces `efficiency`: samples per second of the whole job (every
  /// data-parallel replica together, optimizer steps included) running the measured configuration: `measured_policy`
  /// with `measured_recompute` and the planned states, stage, replicas and accumulation (its candidate, at the
  /// microbatch the planner gives it). calibrated_efficiency solves for the efficiency at which that candidate takes
  /// exactly 1 / measured seconds per sample.
  double measured_samples_per_second = 0.0;
  named_policy measured_policy{"bf16-mixed", presets::bf16_mixed};
  recompute measured_recompute = recompute::none;
  std::vector<named_policy> policies{policy_presets.begin(), policy_presets.end()};
  std::vector<recompute> recompute_modes{recompute::none, recompute::selective, recompute::full};
  state_options states{};
  zero_stage stage = zero_stage::none;
  std::uint64_t data_parallel = 1;
  accumulation_rounding rounding = accumulation_rounding::ceil;
  double price_per_hour = 0.0;  // optional: device price, for a cost per sample in money
  offload_link link{};          // PCIe and host bandwidth of an offloaded optimizer step
  /// CPU memory of the machine the devices train on, for offload (check_host_memory); every device (data-parallel
  /// replicas x tensor-parallel ranks) is taken to share it. 0: unknown, and no offloading configuration is accepted
  /// (the tool reads /proc/meminfo).
  std::uint64_t host_memory_bytes = 0;
  /// Measured over modelled peak (calibrate_peak) applied to every candidate's phases; 1 = the model as it is.
  double peak_calibration_ratio = 1.0;
  /// DDP's gradient_as_bucket_view: plain data parallelism over N > 1 devices keeps no bucket copy of the gradients.
  bool gradient_as_bucket_view = false;
  /// Policies a `safeamp sim` parity gate passed (verified) or failed; a failed policy is never chosen.
  std::vector<precision_policy> verified_policies{};
  std::vector<precision_policy> failed_policies{};
};

/// Whether a policy's training quality is known to match fp32.
///  reference:  fp32 itself;  verified: a parity result passed;  failed: a parity result failed;
///  unverified: no parity result given (the default for every other policy).
enum class quality_status : std::uint8_t { reference, verified, unverified, failed };

[[nodiscard]] constexpr std::string_view to_string(quality_status q) noexcept {
  switch (q) {
    case quality_status::reference:
      return "reference (fp32)";
    case quality_status::verified:
      return "verified (parity PASS)";
    case quality_status::unverified:
      return "quality unverified";
    case quality_status::failed:
      return "parity FAIL";
  }
  return "?";
}

/// DeepSpeed's `additional_buffer_factor` (1.5 in its estimators, estimate_zero2/zero3_model_states_mem_needs): the
/// offloaded states times this must fit in host memory, for pinned staging buffers and the host allocator's slack.
inline constexpr double host_buffer_factor = 1.5;

/// Host memory an offloading configuration needs: host_buffer_factor x the offloaded bytes of every device
/// (per-device host bytes x devices: the devices share one machine; under tensor parallelism every rank of every
/// data-parallel replica offloads its share, data_parallel x t devices), rounded up; 0 without offload.
[[nodiscard]] inline std::uint64_t host_memory_needed(std::uint64_t host_bytes_per_device, std::uint64_t devices) {
  return bytes_from_real(host_buffer_factor * static_cast<double>(host_bytes_per_device) * static_cast<double>(devices),
                         "host memory needed");
}

}  // namespace safeamp
