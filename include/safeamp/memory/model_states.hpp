// Model-state memory (weights, gradients, fp32 master copy, optimizer states) from a parameter count, a precision
// policy and an optimizer, and its ZeRO stage 1/2/3 partitioning over N data-parallel devices
// (Rajbhandari et al., "ZeRO", SC'20, arXiv:1910.02054, sections 3.1 and 5).
#pragma once

#include <cctype>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "safeamp/error.hpp"
#include "safeamp/format/format_spec.hpp"
#include "safeamp/memory/block_storage.hpp"
#include "safeamp/memory/bytes.hpp"
#include "safeamp/policy/policy_value.hpp"

namespace safeamp {

/// Optimizers by the state they keep per parameter.
///  sgd:           none.
///  sgd_momentum:  one momentum buffer.
///  adam (AdamW):  momentum and variance (Kingma & Ba 2015).
///  adam_8bit:     momentum and variance quantized to 1 byte each (Dettmers et al. 2022, bitsandbytes), plus
///                 one fp32 absmax per 2048-value block per state (negligible, but counted).
enum class optimizer_kind : std::uint8_t { sgd, sgd_momentum, adam, adam_8bit };

[[nodiscard]] constexpr std::string_view to_string(optimizer_kind o) noexcept {
  switch (o) {
    case optimizer_kind::sgd:
      return "sgd";
    case optimizer_kind::sgd_momentum:
      return "sgd-momentum";
    case optimizer_kind::adam:
      return "adamw";
    case optimizer_kind::adam_8bit:
      return "adam-8bit";
  }
  return "?";
}

/// "sgd", "sgd-momentum" (or "momentum"), "adam"/"adamw", "adam-8bit"/"adam8bit"/"8bit-adam"; throws otherwise.
[[nodiscard]] inline optimizer_kind parse_optimizer(std::string_view name) {
  std::string s;
  for (char c : name) {
    if (c == '_' || c == ' ') c = '-';
    s.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  if (s == "sgd") return optimizer_kind::sgd;
  if (s == "sgd-momentum" || s == "momentum" || s == "sgdm") return optimizer_kind::sgd_momentum;
  if (s == "adam" || s == "adamw") return optimizer_kind::adam;
  if (s == "adam-8bit" || s == "adam8bit" || s == "8bit-adam" || s == "adamw-8bit" || s == "adamw8bit") {
    return optimizer_kind::adam_8bit;
  }
  throw error("optimizer", "'" + std::string(name) + "'", "sgd, sgd-momentum, adamw (adam), adam-8bit");
}

/// How the optimizer's update is executed, which decides the temporaries of the optimizer step.
///  foreach: PyTorch's multi-tensor path, the default on CUDA (torch/optim/adam.py `_multi_tensor_adam`):
///           `exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs)` allocates a copy of every second moment
///           at once (one state's worth of bytes per parameter) before the update is applied.
///  fused:   one kernel updates parameters and moments in place (`fused=True`, `_fused_adamw_`): no temporaries.
/// bitsandbytes' 8-bit optimizers update their quantized states in place (blockwise kernels) whatever is asked,
/// and plain SGD (no momentum, no weight decay) updates in place: both have no temporaries.
enum class optimizer_impl : std::uint8_t { foreach, fused };

[[nodiscard]] constexpr std::string_view to_string(optimizer_impl i) noexcept {
  return i == optimizer_impl::foreach ? "foreach" : "fused";
}

/// "foreach" (PyTorch's default on CUDA) or "fused"; throws otherwise.
[[nodiscard]] inline optimizer_impl parse_optimizer_impl(std::string_view name) {
  if (name == "foreach") return optimizer_impl::foreach;
  if (name == "fused") return optimizer_impl::fused;
  throw error("optimizer-impl", "'" + std::string(name) + "'",
              "foreach (PyTorch's default on CUDA: a temporary copy of a moment buffer) or fused (fused=True: none)");
}

/// Largest parameter count accepted (10^15): three orders above today's largest models; 10^30 is a typo.
inline constexpr std::uint64_t max_parameter_count = 1'000'000'000'000'000ULL;

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

/// Options of the model-state count beyond the policy.
struct state_options {
  optimizer_kind optimizer = optimizer_kind::adam;
  /// Format of the optimizer's momentum/variance (fp32 normally; bf16 halves them). Ignored for adam_8bit.
  format_spec optimizer_state_format = fp32;
  /// How the update runs (temporaries of the optimizer step); PyTorch's default on CUDA is foreach.
  optimizer_impl impl = optimizer_impl::foreach;
  /// DeepSpeed's accounting: besides the low-precision gradients, an fp32 copy of the gradients for the fp32 master
  /// update (4 bytes per parameter, partitioned with the optimizer states): 2 + 2 + 4 + 4 + 8 = 20 bytes per
  /// parameter with fp16 parameters and Adam, the ZeRO-2 estimator's 2 + 18/N at N = 1 (deepspeed PR #5099).
  bool fp32_gradient_copy = false;
  /// Fine-tuning with adapters (LoRA, Hu et al. 2021): when > 0, the base parameters are frozen (no gradients, no
  /// optimizer states, no master copy) and only this many adapter parameters train, in fp32.
  std::uint64_t adapter_parameters = 0;
  /// The adapters' LoRA rank r, for their r-wide activations (transformer_shape::lora_rank); 0: not known (adapters
  /// given as a count), their activations are not counted.
  std::uint64_t adapter_rank = 0;
  /// QLoRA (Dettmers et al. 2023): the frozen base stored in 4-bit NF4 with double quantization (needs adapters).
  bool base_4bit = false;
  /// ZeRO-Offload (Ren et al. 2021, USENIX ATC): fp32 parameters, optimizer states and fp32 gradients live in CPU
  /// memory and the CPU runs the update; the device keeps the weights and the gradients it produces. With 8-bit
  /// AdamW it is bitsandbytes' paged optimizer instead (QLoRA, Dettmers et al. 2023, section 3, "Paged Optimizers"):
  /// the 8-bit states live in CPU memory (unified memory, evicted there under pressure) and the GPU runs the update.
  /// With adapters only the adapters' optimizer is offloaded.
  bool offload_optimizer = false;
  /// ZeRO-Infinity / ZeRO-3 `offload_param` (Rajbhandari et al. 2021, "ZeRO-Infinity", arXiv:2104.07857): the
  /// parameters live in CPU memory too and each layer is fetched when it runs; the device holds one gathered layer
  /// (step_phases' offloaded_layer_bytes). Needs offload_optimizer with fp32 AdamW and no adapters.
  bool offload_parameters = false;
  /// Block-scaled storage (OCP MX, NVFP4) of the weights and of the gradients instead of the policy's formats:
  /// block_bits_per_element (MXFP8 8.25, MXFP4 4.25, NVFP4 4.5 bits) per parameter, plus NVFP4's 4-byte fp32
  /// tensor scale for each of weight_tensors tensors. no_block_scaling: the policy's format (storage_bytes).
  block_format weight_blocks = no_block_scaling;
  block_format gradient_blocks = no_block_scaling;
  /// Weight tensors (each has its own tensor scale under NVFP4): a shape's matrices, or 1 without one.
  std::uint64_t weight_tensors = 1;
  /// Block-scaled storage of the activations saved for backward instead of policy.output (activation_element_bytes).
  block_format activation_blocks = no_block_scaling;
  friend constexpr bool operator==(const state_options&, const state_options&) = default;
};

/// Bytes per parameter of a 4-bit NF4 base with double quantization: 4 bits plus 8/64 + 32/(64 x 256) = 0.127 bits of
/// quantization constants (QLoRA, Dettmers et al. 2023, section 3, "Double Quantization").
inline constexpr double nf4_bytes_per_param = (4.0 + 8.0 / 64.0 + 32.0 / (64.0 * 256.0)) / 8.0;

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

/// Host bytes per parameter of an offloaded optimizer (state_options::offload_optimizer):
///  fp32 AdamW, ZeRO-Offload: fp32 parameters 4 + the states K_opt + fp32 gradients 4 = 16 (DeepSpeed's estimator's
///    per-parameter CPU figure before its 1.5 buffer factor; 18 with offload_param, which adds the 2-byte weights);
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

/// Per-device model states for `parameters` under `policy`/`options`, partitioned by ZeRO `stage` over
/// `data_parallel` devices (ZeRO section 5, Figure 1):
///  none:       (w + g + K) Psi
///  optimizer:  (w + g) Psi + K Psi / N_d
///  gradients:  w Psi + (g + K) Psi / N_d
///  parameters: (w + g + K) Psi / N_d
/// DeepSpeed's fp32 gradient copy (4 Psi) is partitioned with K from stage 1 on.
/// With N_d = 1 every stage equals plain data parallelism (partitioning needs more than one device).
/// With adapters (state_options::adapter_parameters) the base keeps only its weights (storage_bytes(policy.param), or
/// nf4_bytes_per_param for QLoRA) and the adapters count as fp32 parameters under the optimizer.
[[nodiscard]] inline model_states model_states_for(std::uint64_t parameters, const precision_policy& policy,
                                                   state_options options = {}, zero_stage stage = zero_stage::none,
                                                   std::uint64_t data_parallel = 1) {
  if (parameters == 0 || parameters > max_parameter_count) {
    throw error("parameters", std::to_string(parameters), "1 .. 1e15 parameters");
  }
  if (data_parallel == 0 || data_parallel > 1'000'000) {
    throw error("data_parallel devices", std::to_string(data_parallel), "1 .. 1000000");
  }
  if (options.adapter_parameters > parameters) {
    throw error("adapter parameters", std::to_string(options.adapter_parameters),
                "at most the model's " + std::to_string(parameters) + " parameters");
  }
  if (options.offload_parameters && (!options.offload_optimizer || options.adapter_parameters > 0 ||
                                     options.optimizer == optimizer_kind::adam_8bit)) {
    throw error("parameter offload",
                !options.offload_optimizer   ? "without optimizer offload"
                : options.adapter_parameters ? "with adapters"
                                             : "with 8-bit AdamW",
                "optimizer offload too, a full fine-tune with an fp32 optimizer (DeepSpeed's ZeRO-3 offload_param)");
  }
  if (options.base_4bit && is_block_scaled(options.weight_blocks)) {
    throw error("4-bit base (QLoRA)", "with block-scaled weights (" + block_format_name(options.weight_blocks) + ")",
                "one weight storage: NF4 (qlora) or a block format (lora with --weight-format)");
  }
  if (options.base_4bit && options.adapter_parameters == 0) {
    throw error("4-bit base (QLoRA)", "without adapters",
                "adapter parameters > 0 (a frozen 4-bit base trains nothing)");
  }
  const auto psi = static_cast<double>(parameters);
  const auto n = static_cast<double>(data_parallel);
  const int s = static_cast<int>(stage);
  auto part = [&](double per_param, bool partitioned, std::string_view what, double count) {
    return bytes_from_real(per_param * count / (partitioned ? n : 1.0), what);
  };
  if (options.weight_tensors == 0 || options.weight_tensors > parameters) {
    throw error("weight tensors", std::to_string(options.weight_tensors),
                "1 .. the parameter count (" + std::to_string(parameters) + ")");
  }
  // NVFP4's fp32 tensor scales: one per weight tensor (and per gradient tensor), kept whole on every device.
  const std::uint64_t weight_scales = block_tensor_scale_bytes(options.weight_blocks) * options.weight_tensors;
  const std::uint64_t gradient_scales = block_tensor_scale_bytes(options.gradient_blocks) * options.weight_tensors;
  model_states m;
  m.parameter_count = parameters;
  if (options.adapter_parameters > 0) {
    // Frozen base in the policy's parameter format (or NF4), plus fp32 adapters with their gradients and states.
    const auto adapters = static_cast<double>(options.adapter_parameters);
    state_options a = options;
    a.adapter_parameters = 0;
    a.base_4bit = false;
    a.fp32_gradient_copy = false;
    a.weight_blocks = a.gradient_blocks = no_block_scaling;
    const state_bytes_per_param ab = bytes_per_param(precision_policy{}, a);  // all fp32, no master copy
    const double base = options.base_4bit                        ? nf4_bytes_per_param
                        : is_block_scaled(options.weight_blocks) ? block_bytes_per_element(options.weight_blocks)
                                                                 : storage_bytes(policy.param);
    m.weight_bytes = checked_add(part(base, s >= 3, "frozen weight bytes", psi),
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
  m.weight_bytes = checked_add(part(b.weights, s >= 3, "weight bytes", psi), weight_scales, "weight bytes");
  m.gradient_bytes = checked_add(part(b.gradients, s >= 2, "gradient bytes", psi), gradient_scales, "gradient bytes");
  m.master_bytes = part(b.master, s >= 1, "master-copy bytes", psi);
  m.optimizer_bytes = part(b.optimizer, s >= 1, "optimizer-state bytes", psi);
  m.fp32_gradient_bytes = part(options.fp32_gradient_copy ? 4.0 : 0.0, s >= 1, "fp32 gradient-copy bytes", psi);
  if (options.fp32_gradient_copy && stage == zero_stage::parameters) {
    // DeepSpeed stage 3 reduce-scatters each fp16 gradient into the fp32 partition as it is produced: no fp16 gradient
    // partition is kept (its ZeRO-3 estimator: 18/N = 2 fp16 parameters + 16 fp32 states; the gradients in flight are
    // the largest-layer term of the phases).
    m.gradient_bytes = 0;
  }
  if (options.offload_optimizer) {
    m.host_bytes = part(offloaded_bytes_per_param(b, options), s >= 1, "offloaded bytes", psi);
    if (options.optimizer != optimizer_kind::adam_8bit) m.master_bytes = 0;  // paged: only the states move
    m.optimizer_bytes = 0;
    m.fp32_gradient_bytes = 0;
  }
  if (options.offload_parameters) {  // the weights on the CPU too; the gradients stream there as they are produced
    m.host_bytes = checked_add(m.host_bytes, part(b.weights, s >= 3, "offloaded weight bytes", psi), "offloaded bytes");
    m.weight_bytes = 0;
    m.gradient_bytes = 0;
  }
  (void)m.total_bytes();  // throws if the sum overflows
  return m;
}

}  // namespace safeamp
