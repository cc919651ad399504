// Model-state memory (weights, gradients, fp32 master copy, optimizer states) from a parameter count, a precision
// policy and an optimizer, and its ZeRO stage 1/2/3 partitioning over N data-parallel devices
// (Rajbhandari et al., "ZeRO", SC'20, arXiv:1910.02054, sections 3.1 and 5).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "safeamp/error.hpp"
#include "safeamp/format/format_spec.hpp"
#include "safeamp/memory/block_storage.hpp"
#include "safeamp/memory/bytes.hpp"
#include "safeamp/memory/state_options.hpp"
#include "safeamp/policy/policy_value.hpp"

namespace safeamp {

/// Per-parameter model-state bytes, by component. Fractional only for adam_8bit's block statistics.
struct state_bytes_per_param {
  double weights = 0.0;    // parameters in policy.param
  double gradients = 0.0;  // weight gradients
  double master = 0.0;     // fp32 master copy (when the policy keeps one)
  double optimizer = 0.0;  // momentum / variance
  [[nodiscard]] constexpr double total() const noexcept { return weights + gradients + master + optimizer; }
  /// ZeRO's K: everything the optimizer owns (master copy + states); 12 for mixed-precision Adam.
  [[nodiscard]] constexpr double zero_k() const noexcept { return master + optimizer; }
  friend constexpr bool operator==(const state_bytes_per_param&, const state_bytes_per_param&) = default;
};

namespace detail {
inline constexpr double adam_8bit_block = 2048.0;  // bitsandbytes blockwise quantization block size
}

/// Bytes per parameter under a policy:
///  weights   = storage_bytes(policy.param), or block_bytes_per_element(options.weight_blocks) when set
///  gradients = block_bytes_per_element(options.gradient_blocks) when set; else storage_bytes(policy.gradient) with
///              a master copy (gradients of low-precision parameters are low precision, as in ZeRO's "fp16
///              gradients"); otherwise storage_bytes(policy.param), because autocast accumulates .grad in the
///              parameter's own format (block-scaled weights do not change it: set gradient_blocks too).
/// (NVFP4's per-tensor scales are not per parameter: model_states_for adds them.)
///  master    = 4 when policy.master_weights, else 0
///  optimizer = states x storage_bytes(optimizer_state_format)
/// Mixed-precision Adam (fp16 params + fp16 grads + fp32 master + fp32 m, v) = 2 + 2 + 4 + 8 = 16 (ZeRO section 3.1).
[[nodiscard]] constexpr state_bytes_per_param bytes_per_param(const precision_policy& policy,
                                                              state_options options = {}) noexcept {
  state_bytes_per_param b;
  b.weights = is_block_scaled(options.weight_blocks) ? block_bytes_per_element(options.weight_blocks)
                                                     : storage_bytes(policy.param);
  b.gradients = is_block_scaled(options.gradient_blocks) ? block_bytes_per_element(options.gradient_blocks)
                : policy.master_weights                  ? storage_bytes(policy.gradient)
                                                         : storage_bytes(policy.param);
  b.master = policy.master_weights ? storage_bytes(fp32) : 0;
  const double state = storage_bytes(options.optimizer_state_format);
  switch (options.optimizer) {
    case optimizer_kind::sgd:
      b.optimizer = 0.0;
      break;
    case optimizer_kind::sgd_momentum:
      b.optimizer = state;
      break;
    case optimizer_kind::adam:
      b.optimizer = 2.0 * state;
      break;
    case optimizer_kind::adam_8bit:
      b.optimizer = 2.0 * (1.0 + 4.0 / detail::adam_8bit_block);
      break;
  }
  return b;
}

/// Bytes of one stored activation element: block_bytes_per_element(options.activation_blocks) when set (MXFP8
/// 1.03125), else storage_bytes(policy.output).
[[nodiscard]] constexpr double activation_element_bytes(const precision_policy& policy,
                                                        const state_options& options) noexcept {
  return is_block_scaled(options.activation_blocks) ? block_bytes_per_element(options.activation_blocks)
                                                    : static_cast<double>(storage_bytes(policy.output));
}

/// Bytes per parameter the optimizer step allocates on top of the model states (see optimizer_impl):
///  Adam/AdamW with foreach: `_foreach_sqrt` of the second moments, one state (4 bytes with fp32 states);
///  SGD with momentum updates its buffer in place (`_foreach_mul_`, `_foreach_add_`): 0;
///  fused, 8-bit (bitsandbytes, in place) and plain SGD: 0.
[[nodiscard]] constexpr double optimizer_temporary_bytes_per_param(state_options options) noexcept {
  if (options.impl != optimizer_impl::foreach || options.optimizer != optimizer_kind::adam) return 0.0;
  return storage_bytes(options.optimizer_state_format);
}

/// Host bytes per trained parameter of an offloaded optimizer (state_options::offload_optimizer):
///  fp32 AdamW, ZeRO-Offload: fp32 parameters 4 + the states K_opt + fp32 gradients 4 = 16 (DeepSpeed's estimator's
///    per-parameter CPU figure before its 1.5 buffer factor; parameter offload adds the weights, host_weight_bytes);
///  8-bit AdamW, paged: the states only, 2 + 8/2048.
[[nodiscard]] constexpr double offloaded_bytes_per_param(const state_bytes_per_param& b,
                                                         const state_options& o) noexcept {
  return o.optimizer == optimizer_kind::adam_8bit ? b.optimizer : 4.0 + b.optimizer + 4.0;
}

/// ZeRO stage: 0 plain data parallel; 1 P_os (optimizer states); 2 P_os+g (+ gradients); 3 P_os+g+p (+ parameters).
enum class zero_stage : std::uint8_t { none = 0, optimizer = 1, gradients = 2, parameters = 3 };

/// Model-state bytes on one device, by component (integers, rounded up per component).
struct model_states {
  std::uint64_t parameter_count = 0;
  std::uint64_t weight_bytes = 0;
  std::uint64_t gradient_bytes = 0;
  std::uint64_t master_bytes = 0;
  std::uint64_t optimizer_bytes = 0;
  std::uint64_t fp32_gradient_bytes = 0;  // DeepSpeed's fp32 gradient copy (state_options::fp32_gradient_copy)
  std::uint64_t host_bytes = 0;           // CPU memory with offload (not part of the device total)
  [[nodiscard]] constexpr std::uint64_t total_bytes() const {
    return checked_add(checked_add(checked_add(weight_bytes, gradient_bytes, "model states"),
                                   checked_add(master_bytes, optimizer_bytes, "model states"), "model states"),
                       fp32_gradient_bytes, "model states");
  }
  friend constexpr bool operator==(const model_states&, const model_states&) = default;
};

inline void validate_parameter_count(double parameters) {
  if (!std::isfinite(parameters) || parameters < 1.0 || parameters > static_cast<double>(max_parameter_count)) {
    throw error("parameters", std::to_string(parameters), "1 .. 1e15 parameters");
  }
}

/// Host bytes of the weights under parameter offload (state_options::offload_parameters), on top of the offloaded
/// optimizer: the weights of every parameter, w P, except where they are the fp32 parameters the CPU update already
/// holds. With 16-bit weights (fp16-pure-master, DeepSpeed's fp16/bf16 modes) the CPU keeps both the 16-bit copy the
/// GPU fetches and the fp32 parameters: 2 + 16 = 18 per parameter, DeepSpeed's ZeRO-3 estimator's cpu_mem = 18 P.
/// With fp32 weights (autocast policies: bf16-mixed, fp16-mixed, fp32) the weights of the trained parameters are
/// those fp32 parameters: 16 per trained parameter (4 fp32 parameters, 8 states, 4 fp32 gradients), plus 4 per
/// frozen one; counting them twice would give 20.
[[nodiscard]] constexpr double host_weight_bytes(const state_bytes_per_param& b, double parameters,
                                                 double trained) noexcept {
  return b.weights == 4.0 ? 4.0 * (parameters - trained) : b.weights * parameters;
}

/// Per-device model states for `parameters` under `policy`/`options`, partitioned by ZeRO `stage` over
/// `data_parallel` devices (ZeRO section 5, Figure 1), with T = trained_parameters (Psi less the frozen ones):
///  none:       w Psi + (g + K) T
///  optimizer:  w Psi + g T + K T / N_d
///  gradients:  w Psi + (g + K) T / N_d
///  parameters: (w Psi + (g + K) T) / N_d
/// DeepSpeed's fp32 gradient copy (4 T) is partitioned with K from stage 1 on.
/// With N_d = 1 every stage equals plain data parallelism (partitioning needs more than one device).
/// With adapters (state_options::adapter_parameters) the base keeps only its weights (frozen_base_bytes_per_param:
/// the policy's parameter format, base_format, NF4 for QLoRA or a block format) and the adapters count as fp32
/// parameters under the optimizer. Throws what check_state_options refuses.
[[nodiscard]] inline model_states model_states_for(std::uint64_t parameters, const precision_policy& policy,
                                                   state_options options = {}, zero_stage stage = zero_stage::none,
                                                   std::uint64_t data_parallel = 1) {
  if (parameters == 0 || parameters > max_parameter_count) {
    throw error("parameters", std::to_string(parameters), "1 .. 1e15 parameters");
  }
  if (data_parallel == 0 || data_parallel > 1'000'000) {
    throw error("data_parallel devices", std::to_string(data_parallel), "1 .. 1000000");
  }
  check_state_options(parameters, options);
  const auto psi = static_cast<double>(parameters);
  const auto n = static_cast<double>(data_parallel);
  const int s = static_cast<int>(stage);
  auto part = [&](double per_param, bool partitioned, std::string_view what, double count) {
    return bytes_from_real(per_param * count / (partitioned ? n : 1.0), what);
  };
  // NVFP4's fp32 tensor scales: one per weight tensor (and per gradient tensor), kept whole on every device.
  const std::uint64_t weight_scales = block_tensor_scale_bytes(options.weight_blocks) * options.weight_tensors;
  const std::uint64_t gradient_scales = block_tensor_scale_bytes(options.gradient_blocks) * options.weight_tensors;
  model_states m;
  m.parameter_count = parameters;
  if (options.adapter_parameters > 0) {
    // Frozen base (frozen_base_bytes_per_param), plus fp32 adapters with their gradients and states.
    const auto adapters = static_cast<double>(options.adapter_parameters);
    state_options a = options;
    a.adapter_parameters = 0;
    a.base_4bit = false;
    a.base_format.reset();
    a.fp32_gradient_copy = false;
    a.weight_blocks = a.gradient_blocks = no_block_scaling;
    const state_bytes_per_param ab = bytes_per_param(precision_policy{}, a);  // all fp32, no master copy
    m.weight_bytes = checked_add(part(frozen_base_bytes_per_param(policy, options), s >= 3, "frozen weight bytes", psi),
                                 part(ab.weights, s >= 3, "adapter weight bytes", adapters), "weight bytes");
    if (!options.base_4bit) m.weight_bytes = checked_add(m.weight_bytes, weight_scales, "weight bytes");
    m.gradient_bytes = part(ab.gradients, s >= 2, "adapter gradient bytes", adapters);
    m.optimizer_bytes = part(ab.optimizer, s >= 1, "adapter optimizer-state bytes", adapters);
    if (options.offload_optimizer) {  // the adapters' optimizer on the CPU (see offloaded_bytes_per_param)
      m.host_bytes = part(offloaded_bytes_per_param(ab, a), s >= 1, "offloaded adapter bytes", adapters);
      m.optimizer_bytes = 0;
    }
    (void)m.total_bytes();
    return m;
  }
  const state_bytes_per_param b = bytes_per_param(policy, options);
  const auto trained = static_cast<double>(trained_parameters(parameters, options));
  m.weight_bytes = checked_add(part(b.weights, s >= 3, "weight bytes", psi), weight_scales, "weight bytes");
  m.gradient_bytes =
      checked_add(part(b.gradients, s >= 2, "gradient bytes", trained), gradient_scales, "gradient bytes");
  m.master_bytes = part(b.master, s >= 1, "master-copy bytes", trained);
  m.optimizer_bytes = part(b.optimizer, s >= 1, "optimizer-state bytes", trained);
  m.fp32_gradient_bytes = part(options.fp32_gradient_copy ? 4.0 : 0.0, s >= 1, "fp32 gradient-copy bytes", trained);
  if (options.fp32_gradient_copy && stage == zero_stage::parameters) {
    // DeepSpeed stage 3 reduce-scatters each fp16 gradient into the fp32 partition as it is produced: no fp16 gradient
    // partition is kept (its ZeRO-3 estimator: 18/N = 2 fp16 parameters + 16 fp32 states; the gradients in flight are
    // the largest-layer term of the phases).
    m.gradient_bytes = 0;
  }
  if (options.offload_optimizer) {
    m.host_bytes = part(offloaded_bytes_per_param(b, options), s >= 1, "offloaded bytes", trained);
    if (options.optimizer != optimizer_kind::adam_8bit) m.master_bytes = 0;  // paged: only the states move
    m.optimizer_bytes = 0;
    m.fp32_gradient_bytes = 0;
  }
  if (options.offload_parameters) {  // the weights on the CPU too; the gradients stream there as they are produced
    m.host_bytes =
        checked_add(m.host_bytes, part(host_weight_bytes(b, psi, trained), s >= 3, "offloaded weight bytes", 1.0),
                    "offloaded bytes");
    m.weight_bytes = 0;
    m.gradient_bytes = 0;
  }
  (void)m.total_bytes();  // throws if the sum overflows
  return m;
}

}  // namespace safeamp
