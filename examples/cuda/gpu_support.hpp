// Which simulator runs the GPU trainer reproduces (the MLP; fp32/TF32/fp16/bf16 matmuls with fp32
// accumulation; an fp32 optimizer update; no checkpoints), and the one device scaler rule that stands for
// dynamic, static and no scaling. Host-only, tested on the CPU.
#pragma once

#include <string>

#include "safeamp/error.hpp"
#include "safeamp/format/format_names.hpp"
#include "safeamp/policy/precision_policy.hpp"
#include "safeamp/scaling/scaler_config.hpp"
#include "safeamp/sim/run_config.hpp"

namespace safeamp::gpu_trainer {

/// Throws safeamp::error naming the first field of `cfg` the GPU trainer does not support (after
/// sim::validate has accepted it).
inline void check_gpu_supported(const sim::run_config& cfg) {
  if (cfg.model != sim::model_kind::mlp) {
    throw error("model", sim::to_string(cfg.model), "mlp (the GPU trainer runs the simulator's MLP classifier)");
  }
  const format_spec mm = cfg.policy.format_for(op_class::matmul);
  if (!(mm == fp32) && !(mm == tf32) && !(mm == fp16) && !(mm == bf16)) {
    throw error("policy matmul format", format_name(mm),
                "fp32, tf32, fp16 or bf16 (fp8 GEMMs need per-tensor scaling the trainer does not do yet)");
  }
  if (!(cfg.policy.accumulate == fp32)) {
    throw error("policy accumulate format", format_name(cfg.policy.accumulate), "fp32");
  }
  const format_spec upd = cfg.policy.format_for(op_class::optimizer_update);
  if (!(upd == fp32)) {
    throw error("policy optimizer_update format", format_name(upd), "fp32 (the device optimizer updates in fp32)");
  }
  if (!cfg.checkpoint.save_path.empty() || !cfg.checkpoint.resume_path.empty() ||
      cfg.checkpoint.stop_after_steps >= 0) {
    throw error("checkpoint", "save/resume/stop options", "none (the GPU trainer does not checkpoint)");
  }
}

/// The device scaler for a run's scaler choice. The device runs one rule (the core update_scale): dynamic
/// is its config; a static scale s is the rule clamped to [s, s] (backoff floors at s, growth past s is
/// refused); none is s = 1. Overflowing steps are skipped in all three, as in the simulator.
[[nodiscard]] inline scaler_config device_scaler_config(const sim::scaler_choice& s) {
  if (s.kind == sim::scaler_kind::dynamic) return s.dynamic;
  const float v = s.kind == sim::scaler_kind::static_scale ? s.static_scale : 1.0f;
  scaler_config c;
  c.init_scale = v;
  c.min_scale = v;
  c.max_scale = v;
  c.max_overflows_at_min = 0;
  return c;
}

}  // namespace safeamp::gpu_trainer
