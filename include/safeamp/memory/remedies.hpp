// What would make a configuration fit memory: the single-device levers (recomputation, a fused optimizer, an 8-bit
// optimizer, LoRA on a 16-bit or the policy's base, QLoRA, optimizer offload, parameter offload) searched together,
// every combination evaluated at the largest microbatch it allows (smaller microbatches with accumulation are part of
// every evaluation), least intrusive first, then fastest, each with its time cost; more devices only as a last,
// labelled resort. SGD is never offered: it changes the training algorithm, and transformers are trained with
// Adam-type optimizers.
#pragma once

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "safeamp/memory/plan_candidate.hpp"

namespace safeamp {

/// One combination of changes and what it gives.
struct remedy {
  std::vector<std::string> changes{};  // e.g. {"recompute full", "fused AdamW"}
  plan_candidate result{};
  std::string time_cost{};    // what the changes cost in time
  std::uint64_t devices = 1;  // > 1: needs that many devices in all, data-parallel replicas x tensor-parallel ranks
                              // (ZeRO stage 3); 1: the planned ones
  int intrusiveness = 0;      // the most intrusive change: 1 recompute, 2 fused, 4 8-bit, 5 LoRA (16-bit or the
                              // policy's base), 6 QLoRA, 7 offload, 8 parameter offload
  bool evaluated = true;      // false: a lever that could not be evaluated; `changes` says why, `result` is empty
  [[nodiscard]] std::string text() const {
    std::string s;
    for (const std::string& c : changes) s += (s.empty() ? "" : " + ") + c;
    if (!evaluated) return s;
    if (result.fits_memory()) {
      s += ": fits, microbatch " + std::to_string(result.accumulation.microbatch) + " x " +
           std::to_string(result.accumulation.steps) + " accumulation step(s)";
    } else if (result.max_microbatch >= 1 && result.host_shortfall_bytes > 0) {
      s += ": fits the device, but host memory is short by " +
           format_bytes(result.host_shortfall_bytes, byte_unit::gb) + ": " + detail::host_text(result);
    } else {
      s += ": still short by " + format_bytes(result.missing_bytes(), byte_unit::gb);
    }
    if (!time_cost.empty()) s += "; time: " + time_cost;
    return s;
  }
};

/// A change that saves less than this share of the time per sample is not worth listing on top of a fitting
/// combination without it: below the step-time model's resolution (one efficiency for the whole step).
inline constexpr double remedy_time_tolerance = 0.01;

/// LoRA rank tried as a remedy (QLoRA's and most recipes' value is 8 to 64; 16 is a common default).
inline constexpr std::uint64_t lora_rank_lever = 16;

/// The base format of the LoRA lever: the policy's compute format when it is 16-bit and narrower than the stored
/// parameters (bf16 under bf16-mixed, fp16 under fp16-mixed): the usual LoRA setup, the base loaded in 16 bits. The
/// frozen weights then enter the matmuls exactly as autocast's casts of fp32 weights would (one round to the same
/// format), at 2 bytes instead of 4 + 2 for the fp32 weight and its cached cast. Otherwise none: the policy's own.
[[nodiscard]] inline std::optional<format_spec> lora_base_format(const precision_policy& p) {
  const format_spec matmul = p.format_for(op_class::matmul);
  if (storage_bytes(matmul) == 2 && storage_bytes(matmul) < storage_bytes(p.param)) return matmul;
  return std::nullopt;
}

namespace detail {

inline std::string percent_text(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.0f%%", 100.0 * fraction);
  return buf;
}

/// One replica's time per sample with its share of the optimizer steps (plan_candidate::full_seconds_per_sample).
inline std::string ms_text(double seconds) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g ms/sample with the optimizer step", 1e3 * seconds);
  return buf;
}

/// The order of fitting remedies: least intrusive first, then the shorter time per sample with the optimizer step
/// (full_seconds_per_sample: a smaller microbatch without a target batch means more steps a sample, and an offloaded
/// step counts), then fewer changes.
inline bool remedy_before(const remedy& a, const remedy& b) {
  if (a.intrusiveness != b.intrusiveness) return a.intrusiveness < b.intrusiveness;
  const double ta = a.result.full_seconds_per_sample(), tb = b.result.full_seconds_per_sample();
  if (ta != tb) return ta < tb;
  return a.changes.size() < b.changes.size();
}

/// Changes (and their time cost) from `from` to a candidate with recomputation `mode` and optimizer `states`.
inline remedy describe(const workload& w, const plan_candidate& from, recompute mode, state_options states,
                       plan_candidate result) {
  remedy r;
  r.result = std::move(result);
  std::string cost;
  const auto add_cost = [&cost](const std::string& part) {
    if (!cost.empty()) cost += ", ";
    cost += part;
  };
  if (mode != from.mode) {
    r.changes.push_back("recompute " + std::string(to_string(mode)));
    if (w.shape) {
      const double extra =
          training_flops_per_sample(*w.shape, mode) / training_flops_per_sample(*w.shape, from.mode) - 1.0;
      add_cost(percent_text(extra) + " FLOPs (" +
               (mode == recompute::full ? "one more forward pass" : "attention core again") + ")");
    }
    r.intrusiveness = 1;
  }
  if (states.optimizer != from.states.optimizer) {
    r.changes.push_back(states.offload_optimizer ? "8-bit AdamW (bitsandbytes, paged)" : "8-bit AdamW (bitsandbytes)");
    add_cost("no extra time; moments in 8 bits, quality unverified");
    r.intrusiveness = 4;
  } else if (states.impl != from.states.impl && !states.offload_optimizer) {
    r.changes.push_back("fused AdamW (fused=True)");
    add_cost("none (one kernel instead of foreach's passes)");
    r.intrusiveness = 2;
  }
  if (states.offload_parameters != from.states.offload_parameters) {
    r.changes.push_back("offload the parameters and the optimizer to the CPU (ZeRO-3 offload_param, " +
                        format_bytes(r.result.host_bytes, byte_unit::gb) + " of host memory)");
    char buf[128];
    std::snprintf(buf, sizeof buf, "+%.3g s per optimizer step and every microbatch's weights twice over PCIe",
                  r.result.offload_seconds_per_step);
    add_cost(buf);
    r.intrusiveness = 8;
  } else if (states.offload_optimizer != from.states.offload_optimizer) {
    r.changes.push_back("offload the optimizer to the CPU (ZeRO-Offload, " +
                        format_bytes(r.result.host_bytes, byte_unit::gb) + " of host memory)");
    char buf[96];
    std::snprintf(buf, sizeof buf, "+%.3g s per optimizer step over PCIe and the CPU",
                  r.result.offload_seconds_per_step);
    add_cost(buf);
    r.intrusiveness = 7;
  }
  if (states.adapter_parameters != from.states.adapter_parameters) {
    const std::string base = states.base_4bit     ? ", 4-bit NF4 base)"
                             : states.base_format ? ", " + format_name(*states.base_format) + " base frozen)"
                                                  : ", base frozen)";
    r.changes.push_back(std::string(states.base_4bit ? "QLoRA" : "LoRA") + " rank " + std::to_string(lora_rank_lever) +
                        " on every linear layer (" + std::to_string(states.adapter_parameters) + " adapters train" +
                        base);
    add_cost("fewer FLOPs (no weight gradients); adapters instead of a full fine-tune: quality unverified");
    r.intrusiveness = states.base_4bit ? 6 : 5;
  } else if (states.base_4bit != from.states.base_4bit) {
    r.changes.push_back("QLoRA: the frozen base in 4-bit NF4");
    add_cost("NF4 dequantized in every matmul (not modelled); 4-bit base: quality unverified");
    r.intrusiveness = 6;
  } else if (states.base_format != from.states.base_format && states.base_format) {
    r.changes.push_back("frozen base in " + format_name(*states.base_format) + " (loaded with torch_dtype=" +
                        (*states.base_format == bf16 ? "torch.bfloat16" : "torch.float16") + ")");
    add_cost("none (the matmuls get the same 16-bit weights autocast's casts gave)");
    r.intrusiveness = 5;
  }
  if (r.result.fits_memory() && r.result.seconds_per_sample > 0.0)
    cost += (cost.empty() ? "" : "; ") + ms_text(r.result.full_seconds_per_sample());
  r.time_cost = cost;
  return r;
}

}  // namespace detail

/// Combined remedies for `from` (a candidate that does not fit memory), cheapest first: every combination of a
/// stronger recomputation (with a transformer shape), fused AdamW (when the optimizer is foreach AdamW), 8-bit AdamW
/// (when it is AdamW), optimizer offload (ZeRO-Offload, fp32 AdamW on the CPU, for a full fine-tune with AdamW),
/// parameter offload with it (ZeRO-3 offload_param, when the largest layer is known) and, for a full fine-tune with a
/// shape, LoRA or QLoRA adapters (rank 16 on every linear layer; LoRA's base in the policy's 16-bit compute format
/// when the policy stores wider weights, lora_base_format) is evaluated; an offloading combination fits only when
/// the host memory holds it (planner_options::host_memory_bytes). The fitting ones are sorted by their most intrusive
/// change (recomputation < fused < 8-bit < LoRA < QLoRA < optimizer offload < parameter offload: the order,
/// cheapest first), then by time per sample with the optimizer steps (plan_candidate::full_seconds_per_sample: an
/// offloaded step counts), then by the number of changes; a combination that adds changes to one already listed, or
/// to a fitting one it is less than remedy_time_tolerance faster than, is dropped. At most `limit` are returned. When
/// none fits on the planned devices, the closest combination (device and host shortfall together) is listed and
/// tried with ZeRO stage 3 over 2, 4, ... 4096 data-parallel replicas and returned labelled with the device count
/// (never silently; under tensor parallelism replicas x t devices); under --rounding exact only over counts that
/// divide the global batch (the first that does not is named, NOT EVALUATED, and the plan goes on). ZeRO stage 3
/// gathers the largest layer (gathered_layer_bytes): without a shape or workload::largest_layer_parameters its size is
/// unknown, and instead of a fallback that leaves it out (and may call fitting what does not fit) a line says that the
/// fallback was not evaluated and what it needs (evaluated = false).
[[nodiscard]] inline std::vector<remedy> memory_remedies(const workload& w, const planner_options& o,
                                                         const plan_candidate& from, double efficiency,
                                                         std::size_t limit = 3) {
  const named_policy p{from.policy_name, from.policy};
  std::vector<recompute> modes{from.mode};
  if (w.shape) {
    for (recompute r : {recompute::selective, recompute::full}) {
      if (r == recompute::selective && !recomputes_attention_core(*w.shape, r)) continue;  // nothing to drop
      if (static_cast<int>(r) > static_cast<int>(from.mode)) modes.push_back(r);
    }
  }
  std::vector<state_options> optimizers{from.states};
  const bool offloaded = from.states.offload_optimizer;  // already offloaded: recomputation and paged 8-bit AdamW
  if (from.states.optimizer == optimizer_kind::adam && !offloaded) {
    if (from.states.impl == optimizer_impl::foreach) {
      state_options fused = from.states;
      fused.impl = optimizer_impl::fused;
      optimizers.push_back(fused);
    }
    state_options eight = from.states;  // keeps adapters, frozen parameters and storage formats
    eight.optimizer = optimizer_kind::adam_8bit;
    eight.optimizer_state_format = fp32;
    eight.impl = optimizer_impl::fused;
    eight.fp32_gradient_copy = false;  // bitsandbytes' states replace DeepSpeed's fp32 update
    optimizers.push_back(eight);
  }
  if (from.states.optimizer == optimizer_kind::adam && offloaded && !from.states.offload_parameters) {
    // Offloaded already: bitsandbytes' paged 8-bit AdamW puts 2 + 8/2048 bytes per parameter on the host, not 16.
    state_options paged = from.states;
    paged.optimizer = optimizer_kind::adam_8bit;
    paged.optimizer_state_format = fp32;
    paged.fp32_gradient_copy = false;
    optimizers.push_back(paged);
  }
  if (from.states.optimizer == optimizer_kind::adam && from.states.adapter_parameters == 0 &&
      !offloaded) {  // ZeRO-Offload: CPU Adam in fp32
    state_options off = from.states;
    off.offload_optimizer = true;
    off.impl = optimizer_impl::fused;
    optimizers.push_back(off);
    if (w.shape || w.largest_layer_parameters > 0) {  // the weights too: one layer on the device (ZeRO-3 offload_param)
      off.offload_parameters = true;
      optimizers.push_back(off);
    }
  }
  const std::size_t listed = optimizers.size();
  const bool block_weights = is_block_scaled(from.states.weight_blocks);  // one weight storage: no NF4 or 16-bit base
  if (w.shape && from.states.adapter_parameters == 0 && !offloaded) {     // full fine-tune: LoRA, then QLoRA
    for (bool four_bit : {false, true}) {
      if (four_bit && block_weights) continue;
      for (std::size_t i = 0; i < listed; ++i) {
        if (optimizers[i].offload_optimizer) continue;
        state_options a = optimizers[i];
        a.adapter_parameters = lora_parameters(*w.shape, lora_rank_lever);
        a.adapter_rank = lora_rank_lever;
        a.frozen_parameters = 0;  // the whole base is frozen
        a.base_4bit = four_bit;
        if (!four_bit && !block_weights) a.base_format = lora_base_format(from.policy);
        a.fp32_gradient_copy = false;
        optimizers.push_back(a);
      }
    }
  } else if (from.states.adapter_parameters > 0 && !from.states.base_4bit && !block_weights) {
    // LoRA already: its base in 16 bits (when the policy stores it wider), or in 4-bit NF4 (QLoRA).
    for (std::size_t i = 0; i < listed; ++i) {
      state_options a = optimizers[i];
      if (!a.base_format && lora_base_format(from.policy)) {
        a.base_format = lora_base_format(from.policy);
        optimizers.push_back(a);
      }
      a.base_format.reset();
      a.base_4bit = true;
      optimizers.push_back(a);
    }
  }
  std::vector<remedy> fitting;
  remedy strongest;
  for (recompute m : modes) {
    for (const state_options& s : optimizers) {
      if (m == from.mode && s == from.states) continue;
      remedy r = detail::describe(w, from, m, s, detail::evaluate(w, o, p, m, efficiency, s, o.stage, o.data_parallel));
      if (r.result.fits_memory()) {
        fitting.push_back(r);
      } else if (strongest.changes.empty() || r.result.missing_bytes() < strongest.result.missing_bytes()) {
        strongest = r;  // the closest to fitting
      }
    }
  }
  std::stable_sort(fitting.begin(), fitting.end(), detail::remedy_before);
  const auto part_of = [](const remedy& part, const remedy& whole) {  // every change of `part` is one of `whole`'s
    return std::all_of(part.changes.begin(), part.changes.end(), [&](const std::string& c) {
      return std::find(whole.changes.begin(), whole.changes.end(), c) != whole.changes.end();
    });
  };
  std::vector<remedy> out;
  for (const remedy& r : fitting) {
    const bool adds_to_listed =
        std::any_of(out.begin(), out.end(), [&](const remedy& kept) { return part_of(kept, r); });
    // A combination that adds changes to a fitting one and saves less than remedy_time_tolerance of its time (8-bit
    // AdamW on LoRA's adapters: a shorter optimizer pass) is not worth the extra change, whichever is listed first.
    const bool needless = std::any_of(fitting.begin(), fitting.end(), [&](const remedy& fewer) {
      return fewer.changes.size() < r.changes.size() && part_of(fewer, r) &&
             fewer.result.full_seconds_per_sample() <=
                 r.result.full_seconds_per_sample() * (1.0 + remedy_time_tolerance);
    });
    if (!adds_to_listed && !needless && out.size() < limit) out.push_back(r);
  }
  if (!out.empty() || strongest.changes.empty()) return out;
  out.push_back(strongest);  // the best one device can do, still short
  // Short of host memory only: more devices on this machine would need the same host memory.
  if (strongest.result.max_microbatch >= 1 && strongest.result.host_shortfall_bytes > 0) return out;
  if (!w.shape && w.largest_layer_parameters == 0) {
    remedy unknown;
    unknown.evaluated = false;
    unknown.changes.push_back(
        "ZeRO stage 3 over more devices: NOT EVALUATED: it gathers the largest layer (4 x its parameters with 16-bit "
        "weights and gradients), whose size is unknown; give the largest layer (--largest-layer N) or a transformer "
        "shape");
    out.push_back(unknown);
    return out;
  }
  const recompute m = strongest.result.mode;
  const state_options s = strongest.result.states;
  const auto zero3_over = [&](std::uint64_t n, const plan_candidate& c) {
    remedy r = detail::describe(w, from, m, s, c);
    r.devices = detail::devices_in_all(w, n);
    r.changes.push_back("ZeRO stage 3 over " + detail::devices_text(w, n) + " (NEEDS " + std::to_string(r.devices) +
                        " devices; planned for " + std::to_string(detail::devices_in_all(w, o.data_parallel)) + ")");
    return r;
  };
  std::optional<remedy> last_short;  // the largest count tried, still short
  for (std::uint64_t n = std::max<std::uint64_t>(2, o.data_parallel * 2); n <= 4096; n *= 2) {
    // --rounding exact keeps the global batch only over a count that divides it; once one does not, no larger one
    // does (each is twice the last): the counts left are named, not evaluated (the plan is never aborted).
    if (!detail::batch_splits_over(w, o, n)) {
      if (last_short) out.push_back(*last_short);
      remedy blocked;
      blocked.evaluated = false;
      blocked.changes.push_back(
          "ZeRO stage 3 over " + detail::devices_text(w, n) +
          " or more (with the closest combination above): NOT EVALUATED: --rounding exact keeps the global batch of " +
          std::to_string(w.global_batch) + " only over a data-parallel size that divides it; a global batch that " +
          std::to_string(n) + " divides, or --rounding exact-or-ceil, would let it be tried");
      out.push_back(blocked);
      return out;
    }
    const plan_candidate c = detail::evaluate(w, o, p, m, efficiency, s, zero_stage::parameters, n);
    if (c.fits_memory() || n == 4096) {
      out.push_back(zero3_over(n, c));
      return out;
    }
    last_short = zero3_over(n, c);
  }
  return out;
}

}  // namespace safeamp
