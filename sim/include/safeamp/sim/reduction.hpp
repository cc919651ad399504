// How gradients are combined across data-parallel ranks, as exact arithmetic on pure data movement: the
// canonical fp32 sum over micro-batches (bits independent of the rank count), and emulations of what a
// low-precision collective computes at N ranks (wire rounding with fp32 accumulation; per-add rounding in
// ring or tree order, as NCCL's bf16/fp16/fp8 Sum does), plus the single-process error-versus-N table.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "safeamp/format/format_spec.hpp"

namespace safeamp::sim {

enum class reduce_order : std::uint8_t {
  canonical,        // fp32 over micro-batches in a fixed order: the same bits for any rank count (default)
  fp32_accumulate,  // each rank's sum rounded to the wire format, summed in fp32 in rank order, result rounded once
  ring,             // NCCL ring reduce-scatter: chunk c summed from rank c+1 on, every add rounded to the wire format
  tree,             // balanced pairwise tree over ranks, every add rounded to the wire format
};

struct reduce_spec {
  reduce_order order = reduce_order::canonical;
  format_spec wire = fp32;  // fp32 for canonical; bf16, fp16, e4m3 or e5m2 otherwise
  /// DeepSpeed's gradient_predivide_factor (Apex and Horovod have it too): every contribution is divided by it
  /// before it is rounded to the wire format, and the reduced sum multiplied by it in fp32 afterwards, so a
  /// sum of N large fp16 gradients stays in range. A power of two (the division and the multiplication are
  /// then exact); 1: none. Not for the canonical fp32 reduction.
  std::int64_t predivide = 1;
  friend constexpr bool operator==(const reduce_spec&, const reduce_spec&) = default;
};

/// "fp32" (canonical), or "<wire>-wire" (fp32 accumulation), "<wire>-ring", "<wire>-tree" with wire one of
/// bf16, fp16, e4m3, e5m2, each optionally followed by "/<predivide>" ("fp16-wire/8"). Throws safeamp::error
/// naming `field` and the accepted spellings. to_string writes the same grammar (parse(to_string(s)) == s).
[[nodiscard]] reduce_spec parse_reduce_spec(std::string_view text, std::string_view field);
[[nodiscard]] std::string to_string(const reduce_spec& s);
inline constexpr std::string_view reduce_specs_accepted =
    "fp32 (default: fixed-order fp32 sum, bit-identical for any rank count), or <wire>-wire (sent in <wire>, "
    "summed in fp32), <wire>-ring or <wire>-tree (summed in <wire>, NCCL's order) with <wire> one of bf16, fp16, "
    "e4m3, e5m2; any but fp32 may end in /<predivide factor>, a power of two from 1 to 2^20 (fp16-wire/8: each "
    "contribution divided by 8 before it is sent, the sum multiplied by 8 after)";
inline constexpr std::int64_t max_predivide = std::int64_t{1} << 20;

/// a + b as a low-precision collective adds in format f: the fp32 sum rounded to nearest even in f (fp8
/// through fp16 first, NCCL's __hadd on half; fp8 saturates at its largest finite value).
[[nodiscard]] float collective_add(format_spec f, float a, float b) noexcept;

/// Reduces `ranks` contributions of `out.size()` elements each (contribution r at contributions[r * size])
/// into `out` (the sum, not the mean) as `spec` says; the contributions are divided by spec.predivide and
/// rounded to the wire format first (they are sent in it), the reduced value multiplied by spec.predivide in
/// fp32 last. spec.order must not be canonical (that one sums micro-batches, see data_parallel). Returns how many
/// finite values went beyond the wire format's range on the way (a contribution, a partial sum or the result:
/// fp16/bf16 send inf, fp8 clamps to its largest finite value, and an fp8 add overflows its fp16 step to inf).
std::int64_t reduce_across_ranks(const reduce_spec& spec, std::span<const float> contributions, std::int64_t ranks,
                                 std::span<float> out);

/// One row of the error-versus-N table: the relative L2 error of the mean over `ranks` ranks, reduced as `spec`
/// says then divided by N in fp32, against the exact (double) mean of the same rounded inputs.
struct reduction_error_row {
  std::string spec;
  std::int64_t ranks = 0;
  double relative_error = 0.0;
  double floor = 0.0;  // the error of rounding the exact mean once to the wire format (the best possible)
};

/// The table for every rank count in `rank_counts` and every spec: per-rank gradients s + sigma * noise (s and
/// the noise standard normal, `elements` values, seeded), rounded to each spec's wire format.
[[nodiscard]] std::vector<reduction_error_row> reduction_error_table(const std::vector<reduce_spec>& specs,
                                                                     const std::vector<std::int64_t>& rank_counts,
                                                                     std::int64_t elements, double sigma,
                                                                     std::uint64_t seed);

/// The specs and rank counts the report shows: bf16, fp16, e4m3, e5m2 in wire, ring and tree order;
/// N = 1, 2, 4, ..., 1024.
[[nodiscard]] std::vector<reduce_spec> report_reduce_specs();
[[nodiscard]] std::vector<std::int64_t> report_rank_counts();

}  // namespace safeamp::sim
