// The per-rank memory ledger of data parallelism: what one of N ranks holds under plain DDP (with its gradient
// buckets), ZeRO-1 (= Megatron's distributed optimizer), ZeRO-2 and ZeRO-3 (with its gathered layer), side by side.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "safeamp/error.hpp"
#include "safeamp/memory/model_states.hpp"
#include "safeamp/memory/step_phases.hpp"

namespace safeamp {

/// What the per-rank ledger needs, by name.
struct rank_ledger_request {
  std::uint64_t parameters = 0;
  precision_policy policy{};
  state_options states{};
  std::uint64_t ranks = 1;                     // data-parallel ranks N
  std::uint64_t largest_layer_parameters = 0;  // ZeRO-3 gathers one layer at a time (0: unknown, not counted)
  /// DDP's `gradient_as_bucket_view=True`: the gradients are views into the all-reduce buckets (no second copy).
  bool gradient_as_bucket_view = false;
};

/// One scheme's bytes on each rank.
struct rank_ledger_row {
  std::string_view scheme{};
  zero_stage stage = zero_stage::none;
  model_states states{};             // weights, gradients, master copy, optimizer states (partitioned)
  std::uint64_t bucket_bytes = 0;    // DDP: the all-reduce buckets, a second copy of the gradients
  std::uint64_t gathered_bytes = 0;  // ZeRO-3: one gathered layer's parameters and gradients
  [[nodiscard]] std::uint64_t total_bytes() const {
    return checked_add(checked_add(states.total_bytes(), bucket_bytes, "rank bytes"), gathered_bytes, "rank bytes");
  }
};

using rank_ledger = std::array<rank_ledger_row, 4>;  // DDP, ZeRO-1, ZeRO-2, ZeRO-3

/// Per-rank model-state bytes of the four schemes over `ranks` data-parallel ranks (Rajbhandari et al., "ZeRO", SC'20,
/// section 5: (w + g + K) Psi, (w + g) Psi + K Psi / N, w Psi + (g + K) Psi / N, (w + g + K) Psi / N), plus:
///  DDP:    the all-reduce buckets. PyTorch's DistributedDataParallel copies every gradient into flat buckets
///          (bucket_cap_mb = 25 each, all of them allocated) unless `gradient_as_bucket_view=True`, which "can reduce
///          peak memory usage, where the saved memory size will be equal to the total gradients size" (the DDP
///          documentation): g Psi more, 0 with the view. One rank needs no buckets.
///  ZeRO-1: Megatron-LM's distributed optimizer partitions the same (fp32 main parameters and Adam states; the fp32
///          main gradients with fp16 parameters): its README's 4 + 16/d (fp16), 6 + 12/d (bf16 with fp32 gradients),
///          8 + 8/d (fp32) bytes per parameter.
///  ZeRO-3: gathered_layer_bytes, (w + g) x the largest layer (DeepSpeed's 4 x largest-layer term with fp16).
/// DeepSpeed's reduce and all-gather buckets (reduce_bucket_size, allgather_bucket_size) are not counted, as its
/// estimators do not count them.
[[nodiscard]] inline rank_ledger rank_ledger_for(const rank_ledger_request& r) {
  static constexpr std::array<std::string_view, 4> names = {"DDP (ZeRO-0)", "ZeRO-1 / distributed optimizer", "ZeRO-2",
                                                            "ZeRO-3"};
  rank_ledger out;
  for (std::size_t i = 0; i < out.size(); ++i) {
    rank_ledger_row& row = out[i];
    row.scheme = names[i];
    row.stage = static_cast<zero_stage>(i);
    row.states = model_states_for(r.parameters, r.policy, r.states, row.stage, r.ranks);
  }
  out[0].bucket_bytes = ddp_bucket_bytes(out[0].states, zero_stage::none, r.ranks, r.gradient_as_bucket_view);
  out[3].gathered_bytes = gathered_layer_bytes(r.largest_layer_parameters, r.policy, zero_stage::parameters, r.ranks);
  return out;
}

}  // namespace safeamp
