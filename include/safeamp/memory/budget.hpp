// The memory budget of one device: capacity, reserve fraction, runtime overhead (CUDA context, cuBLASLt
// workspace, allocator fragmentation allowance), fixed bytes and per-sample bytes -> the largest microbatch,
// the headroom left, and the gradient-accumulation steps that reach a target global batch.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "safeamp/error.hpp"
#include "safeamp/memory/bytes.hpp"

namespace safeamp {

/// Field names and order follow DESIGN.md's sketch; the overheads default to 0 so that a budget built from the
/// sketched four fields means exactly what it says. The tool fills in non-zero defaults and prints them.
struct memory_budget {
  std::uint64_t device_bytes = 0;                 // capacity the runtime reports
  double reserve_fraction = 0.0;                  // kept free of everything (0 <= r < 1)
  std::uint64_t fixed_bytes = 0;                  // model states and anything else independent of the batch
  std::uint64_t activation_bytes_per_sample = 0;  // peak activation bytes per sample
  std::uint64_t context_bytes = 0;                // CUDA context (~300 MiB with lazy loading, >1 GiB before 11.7)
  std::uint64_t workspace_bytes = 0;              // cuBLASLt / library workspaces
  double fragmentation_fraction = 0.0;            // allocator slack, as a fraction of the pool (0 <= f < 1)
  friend constexpr bool operator==(const memory_budget&, const memory_budget&) = default;
};

/// Where every byte of the device goes, for a microbatch.
struct budget_breakdown {
  std::uint64_t device_bytes = 0;
  std::uint64_t context_bytes = 0;
  std::uint64_t reserve_bytes = 0;        // reserve_fraction x (device - context), to the nearest byte
  std::uint64_t fragmentation_bytes = 0;  // fragmentation_fraction x pool after reserve, to the nearest byte
  std::uint64_t workspace_bytes = 0;
  std::uint64_t fixed_bytes = 0;
  std::uint64_t available_for_activations_bytes = 0;  // 0 when the fixed part alone does not fit
  std::uint64_t fixed_shortfall_bytes = 0;            // how far the fixed part is over (0 when it fits)
};

inline void validate(const memory_budget& b) {
  if (b.device_bytes == 0) throw error("device capacity", "0 bytes", "> 0 bytes");
  if (b.device_bytes > max_ledger_bytes)
    throw error("device capacity", std::to_string(b.device_bytes), "<= 2^62 bytes");
  if (!std::isfinite(b.reserve_fraction) || b.reserve_fraction < 0.0 || b.reserve_fraction >= 1.0) {
    throw error("reserve fraction", std::to_string(b.reserve_fraction), "0 <= reserve < 1");
  }
  if (!std::isfinite(b.fragmentation_fraction) || b.fragmentation_fraction < 0.0 || b.fragmentation_fraction >= 1.0) {
    throw error("fragmentation fraction", std::to_string(b.fragmentation_fraction), "0 <= fragmentation < 1");
  }
  if (b.context_bytes >= b.device_bytes) {
    throw error("context bytes", std::to_string(b.context_bytes) + " (capacity " + std::to_string(b.device_bytes) + ")",
                "less than the device capacity");
  }
  if (b.workspace_bytes >= b.device_bytes || b.context_bytes + b.workspace_bytes >= b.device_bytes) {
    throw error("runtime overhead (context + workspace)",
                std::to_string(b.context_bytes + b.workspace_bytes) + " bytes (capacity " +
                    std::to_string(b.device_bytes) + ")",
                "less than the device capacity");
  }
  if (b.fixed_bytes > max_ledger_bytes) throw error("fixed bytes", std::to_string(b.fixed_bytes), "<= 2^62 bytes");
  if (b.activation_bytes_per_sample == 0) throw error("activation bytes per sample", "0", "> 0 bytes");
  if (b.activation_bytes_per_sample > max_ledger_bytes) {
    throw error("activation bytes per sample", std::to_string(b.activation_bytes_per_sample), "<= 2^62 bytes");
  }
}

/// The pool left for batch-dependent memory:
///   pool      = device - context
///   reserve   = reserve_fraction x pool, to the nearest byte
///   frag      = fragmentation_fraction x (pool - reserve), to the nearest byte
///   available = pool - reserve - frag - workspace - fixed
[[nodiscard]] inline budget_breakdown breakdown(const memory_budget& b) {
  validate(b);
  budget_breakdown out;
  out.device_bytes = b.device_bytes;
  out.context_bytes = b.context_bytes;
  out.workspace_bytes = b.workspace_bytes;
  out.fixed_bytes = b.fixed_bytes;
  const std::uint64_t pool = b.device_bytes - b.context_bytes;
  // Fractions of a byte count are rounded to the nearest byte (24e9 x 0.1 is 2.4e9, not 2.4e9 - 1 from 0.1's
  // binary representation).
  out.reserve_bytes = static_cast<std::uint64_t>(std::llround(static_cast<long double>(pool) * b.reserve_fraction));
  const std::uint64_t after_reserve = pool - out.reserve_bytes;
  out.fragmentation_bytes =
      static_cast<std::uint64_t>(std::llround(static_cast<long double>(after_reserve) * b.fragmentation_fraction));
  const std::uint64_t usable = after_reserve - out.fragmentation_bytes;
  const std::uint64_t needed = checked_add(b.workspace_bytes, b.fixed_bytes, "workspace + fixed bytes");
  if (needed > usable) {
    out.fixed_shortfall_bytes = needed - usable;
  } else {
    out.available_for_activations_bytes = usable - needed;
  }
  return out;
}

/// Largest microbatch whose activations fit: floor(available / per-sample bytes); 0 when not even one sample fits.
/// (24 GB, 10% reserve, 3.2 GB fixed, 0.34 GB per sample: floor((21.6 - 3.2) / 0.34) = floor(54.1) = 54.)
[[nodiscard]] inline std::int64_t max_microbatch(const memory_budget& b) {
  const budget_breakdown d = breakdown(b);
  return static_cast<std::int64_t>(d.available_for_activations_bytes / b.activation_bytes_per_sample);
}

/// Headroom left at a microbatch (negative when it does not fit), in bytes.
[[nodiscard]] inline std::int64_t headroom_bytes(const memory_budget& b, std::int64_t microbatch) {
  if (microbatch < 0) throw error("microbatch", std::to_string(microbatch), ">= 0");
  const budget_breakdown d = breakdown(b);
  const std::uint64_t act =
      checked_mul(static_cast<std::uint64_t>(microbatch), b.activation_bytes_per_sample, "activations");
  const auto avail =
      static_cast<std::int64_t>(d.available_for_activations_bytes) - static_cast<std::int64_t>(d.fixed_shortfall_bytes);
  return avail - static_cast<std::int64_t>(act);
}

/// How a target global batch is reached with accumulation.
///  ceil:          steps = ceil(G / (m N)), then the microbatch is evened out to ceil(G / (N steps)); the realized
///                 batch m N steps may exceed G by less than N steps (reported).
///  exact_divisor: the largest m' <= m with G divisible by m' N; steps = G / (m' N); the batch is exactly G.
///  exact_or_ceil (default): exact_divisor when its microbatch keeps at least half of m (G = 512 with m = 13:
///                 8 x 64 steps, exactly 512, instead of ceil's 13 x 40 = 520), otherwise ceil (a prime G would
///                 need microbatch 1); also ceil when G is not a multiple of N.
enum class accumulation_rounding : std::uint8_t { ceil, exact_divisor, exact_or_ceil };

[[nodiscard]] constexpr std::string_view to_string(accumulation_rounding r) noexcept {
  return r == accumulation_rounding::ceil            ? "ceil"
         : r == accumulation_rounding::exact_divisor ? "exact"
                                                     : "exact-or-ceil";
}

struct accumulation_plan {
  std::int64_t microbatch = 0;
  std::int64_t steps = 0;         // microbatches per optimizer step
  std::int64_t global_batch = 0;  // realized: microbatch x steps x data_parallel
  friend constexpr bool operator==(const accumulation_plan&, const accumulation_plan&) = default;
};

/// What accumulation_for needs, by name: three counts of one type in a row would compile when swapped
/// (`accumulation_for({.target_global_batch = 512, .max_microbatch = 13})`).
struct accumulation_request {
  std::int64_t target_global_batch = 0;  // samples per optimizer step over all devices
  std::int64_t max_microbatch = 0;       // the largest microbatch that fits one device
  std::int64_t data_parallel = 1;        // devices sharing the global batch
  accumulation_rounding rule = accumulation_rounding::exact_or_ceil;
  friend constexpr bool operator==(const accumulation_request&, const accumulation_request&) = default;
};

namespace detail {
/// The largest divisor of n that is <= cap (n, cap >= 1; 1 always qualifies). Divisors come in pairs
/// (d, n / d) with d <= sqrt(n), so trying d up to sqrt(n) finds them all: 2^20 tries at n = 2^40, where
/// counting down from cap took up to n.
[[nodiscard]] inline std::int64_t largest_divisor_at_most(std::int64_t n, std::int64_t cap) noexcept {
  std::int64_t best = 1;
  for (std::int64_t d = 1; d <= n / d; ++d) {
    if (n % d != 0) continue;
    if (d <= cap && d > best) best = d;
    if (n / d <= cap && n / d > best) best = n / d;
  }
  return best;
}
}  // namespace detail

[[nodiscard]] inline accumulation_plan accumulation_for(const accumulation_request& request) {
  const std::int64_t target_global_batch = request.target_global_batch;
  const std::int64_t max_micro = request.max_microbatch;
  const std::int64_t data_parallel = request.data_parallel;
  const accumulation_rounding rule = request.rule;
  if (target_global_batch < 1 || target_global_batch > (std::int64_t{1} << 40)) {
    throw error("global batch", std::to_string(target_global_batch), "1 .. 2^40 samples");
  }
  if (max_micro < 1) throw error("microbatch", std::to_string(max_micro), ">= 1 (nothing fits at microbatch 1)");
  if (data_parallel < 1 || data_parallel > 1'000'000)
    throw error("data_parallel devices", std::to_string(data_parallel), "1 .. 1000000");
  if (target_global_batch % data_parallel != 0 && rule == accumulation_rounding::exact_divisor) {
    throw error("global batch", std::to_string(target_global_batch),
                "a multiple of the data-parallel size " + std::to_string(data_parallel) + " for exact_divisor");
  }
  const std::int64_t per_device = (target_global_batch + data_parallel - 1) / data_parallel;
  std::int64_t m = max_micro < per_device ? max_micro : per_device;
  if (rule != accumulation_rounding::ceil && target_global_batch % data_parallel == 0) {
    const std::int64_t exact = detail::largest_divisor_at_most(per_device, m);
    if (rule == accumulation_rounding::exact_divisor || 2 * exact >= m) {
      return {.microbatch = exact, .steps = per_device / exact, .global_batch = target_global_batch};
    }
  }
  const std::int64_t steps = (per_device + m - 1) / m;
  m = (per_device + steps - 1) / steps;  // same steps, least overshoot
  return {.microbatch = m, .steps = steps, .global_batch = m * steps * data_parallel};
}

}  // namespace safeamp
