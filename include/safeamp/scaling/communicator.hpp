// What a loss scaler needs across data-parallel ranks, and nothing more: the communicator concepts (an
// integer MAX, 64-bit MIN/MAX, an all-gather of bytes; on a device the same in place on device memory), the
// found_inf consensus, the scaler-state consensus check that names the diverging ranks, and a fixed-order
// global norm. std-only: sim/ implements the host concept on Open MPI, cuda/ the device one on NCCL.
#pragma once

#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "safeamp/config.hpp"
#include "safeamp/error.hpp"
#include "safeamp/scaling/step_report.hpp"

namespace safeamp {

/// A group of `size()` ranks that runs collectives on host values. Every rank calls each collective in the
/// same order. `allgather(mine, all)` writes rank r's `mine` at all[r * mine.size()], all.size() ==
/// size() * mine.size(). There is deliberately no floating-point reduction: float SUM depends on the
/// engine's algorithm and float MAX drops or keeps NaN depending on operand order; floats travel as bytes
/// and are combined locally in a fixed order.
template <class C>
concept rank_communicator = requires(C& c, const C& cc, std::int32_t flag, std::uint64_t word,
                                     std::span<const std::byte> mine, std::span<std::byte> all) {
  { cc.rank() } -> std::same_as<int>;
  { cc.size() } -> std::same_as<int>;
  { c.max_i32(flag) } -> std::same_as<std::int32_t>;
  { c.min_u64(word) } -> std::same_as<std::uint64_t>;
  { c.max_u64(word) } -> std::same_as<std::uint64_t>;
  c.allgather(mine, all);
};

/// The device form: the same reductions in place on values in the communicator's device memory, enqueued
/// on its stream behind the kernels that wrote them (no host synchronisation), and `allgather_u64(mine, all)`
/// writing rank r's word at all[r] (size() words of device memory; for naming diverging ranks). NCCL
/// implements it.
template <class C>
concept device_rank_communicator = requires(C& c, const C& cc, std::int32_t* flag, std::uint64_t* word,
                                            const std::uint64_t* mine) {
  { cc.rank() } -> std::same_as<int>;
  { cc.size() } -> std::same_as<int>;
  c.max_i32_in_place(flag);
  c.min_u64_in_place(word);
  c.max_u64_in_place(word);
  c.allgather_u64(mine, word);
};

/// The found_inf every rank acts on: the integer MAX of the ranks' 0/1 flags, so one overflowing rank makes
/// every rank skip. The flag must come from the element-wise check of the reduced gradients, never from a
/// norm (a NaN norm compared with MAX can be dropped; a norm^2 can overflow on finite gradients).
template <rank_communicator C>
[[nodiscard]] bool agree_found_inf(C& c, bool local_found_inf) {
  return c.max_i32(local_found_inf ? 1 : 0) != 0;
}

/// Steps 3 and 4 of a data-parallel step on a host scaler: unscale every reduced gradient buffer with the
/// scaler's element-wise check, agree on found_inf across ranks, and record the agreed flag, so every rank's
/// step() skips together. Returns the agreed flag. The norm, clip, step() and update() follow as on one rank.
/// `sent_non_finite`: this rank's own gradients held inf/NaN before the reduction. Pass it whenever the
/// reduction's wire format cannot carry them (an fp8 collective that saturates turns inf into its largest finite
/// value, and the reduced gradients then look finite); it counts as found_inf.
template <rank_communicator C, class Scaler>
bool unscale_and_agree(C& c, Scaler& scaler, std::span<const std::span<float>> reduced_grads,
                       bool sent_non_finite = false) {
  bool found = false;  // by this rank's unscale(), which records it
  for (const std::span<float> g : reduced_grads) found = scaler.unscale(g) || found;
  const bool agreed = agree_found_inf(c, found || sent_non_finite);
  if (agreed && !found) scaler.record_found_inf(true);
  return agreed;
}

namespace detail {
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr std::uint64_t mix64(std::uint64_t h, std::uint64_t v) noexcept {
  // splitmix64's finaliser over (h ^ v): every input bit reaches every output bit.
  std::uint64_t z = h ^ (v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace detail

/// A 64-bit digest of what every rank must hold identically after update(): the step number, the skip
/// decision, the found_inf flag and the scaler state the next step starts from (scale bits, growth and
/// hysteresis trackers, overflows at the floor). Runs in a kernel too.
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr std::uint64_t scaler_consensus_hash(const step_report& r) noexcept {
  std::uint64_t h = 0x5AFEA3Bull;
  h = detail::mix64(h, static_cast<std::uint64_t>(r.step));
  h = detail::mix64(h, (r.applied ? 1u : 0u) | (r.found_inf ? 2u : 0u));
  h = detail::mix64(h, bit_cast<std::uint32_t>(r.scale_after));
  h = detail::mix64(h, static_cast<std::uint32_t>(r.growth_tracker));
  h = detail::mix64(h, static_cast<std::uint32_t>(r.hysteresis_tracker));
  h = detail::mix64(h, static_cast<std::uint32_t>(r.overflows_at_min));
  return h;
}

/// All-gathers one trivially copyable value per rank, in rank order.
template <rank_communicator C, class T>
[[nodiscard]] std::vector<T> allgather_value(C& c, const T& mine) {
  static_assert(std::is_trivially_copyable_v<T>);
  std::vector<T> all(static_cast<std::size_t>(c.size()));
  c.allgather(std::as_bytes(std::span<const T>(&mine, 1)), std::as_writable_bytes(std::span<T>(all)));
  return all;
}

/// The ranks whose scaler-state hash differs from the majority's (rank 0's value on a tie), ascending, and how
/// many ranks hold the majority's. `hashes_by_rank[r]` is rank r's hash.
struct scaler_divergence {
  std::vector<int> ranks;
  std::size_t agreeing = 0;
};
[[nodiscard]] inline scaler_divergence find_diverging_ranks(std::span<const std::uint64_t> hashes_by_rank) {
  scaler_divergence d;
  if (hashes_by_rank.empty()) return d;
  std::uint64_t majority = hashes_by_rank.front();
  for (const std::uint64_t candidate : hashes_by_rank) {
    std::size_t n = 0;
    for (const std::uint64_t v : hashes_by_rank) n += v == candidate ? 1 : 0;
    if (n > d.agreeing) {  // strict: the first value (lowest rank) with the largest count wins a tie
      d.agreeing = n;
      majority = candidate;
    }
  }
  for (std::size_t r = 0; r < hashes_by_rank.size(); ++r) {
    if (hashes_by_rank[r] != majority) d.ranks.push_back(static_cast<int>(r));
  }
  return d;
}

/// The error every rank throws when the hashes of `step` differ: it names the diverging ranks (the same text
/// on every rank, from the same gathered hashes). Host and NCCL checks share it.
[[nodiscard]] inline error scaler_divergence_error(std::span<const std::uint64_t> hashes_by_rank, std::int64_t step) {
  const scaler_divergence d = find_diverging_ranks(hashes_by_rank);
  std::string ranks;
  for (const int r : d.ranks) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  return error("data parallel: the loss-scaler state or skip decision diverged across ranks after step " +
               std::to_string(step) + ": rank(s) " + ranks + " differ from the other " + std::to_string(d.agreeing) +
               " of " + std::to_string(hashes_by_rank.size()) +
               " ranks (every rank must unscale the same reduced gradients and agree on found_inf)");
}

/// Checks that every rank holds the same scaler state and skip decision (two 8-byte collectives: MIN and MAX of
/// the hash). On a mismatch every rank all-gathers the hashes and throws the same safeamp::error naming the
/// ranks that differ from the majority (rank 0's value on a tie).
template <rank_communicator C>
void check_scaler_consensus(C& c, std::uint64_t state_hash, std::int64_t step) {
  if (c.min_u64(state_hash) == c.max_u64(state_hash)) return;
  throw scaler_divergence_error(allgather_value(c, state_hash), step);
}

/// Global L2 norm of gradients held in shards across ranks: each rank's sum of squares in double (buffer
/// order), all-gathered and summed in rank order, so every rank gets the same bits for any MPI or NCCL
/// algorithm. Call it on unscaled gradients. With replicated (already reduced) gradients every rank can use
/// global_grad_norm locally instead.
template <rank_communicator C>
[[nodiscard]] double global_norm_across_ranks(C& c, std::span<const std::span<float>> local_shard) {
  double local = 0.0;
  for (const std::span<float> b : local_shard) {
    for (const float v : b) local += static_cast<double>(v) * static_cast<double>(v);
  }
  double sum = 0.0;
  for (const double part : allgather_value(c, local)) sum += part;
  return std::sqrt(sum);
}

}  // namespace safeamp
