// Emulated tensors: Eigen float matrices (row-major) whose values are kept exactly representable in a
// number format, the cast step that rounds them there (any rounding mode, stochastic bits keyed by element
// index) and counts overflow/underflow/subnormal/NaN, and the execution context that hands out those keys.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <span>

#include "safeamp/format/format_spec.hpp"
#include "safeamp/format/philox.hpp"
#include "safeamp/format/round.hpp"
#include "safeamp/format/round_options.hpp"
#include "safeamp/format/round_span.hpp"

namespace safeamp::sim {

/// A 2-D tensor: rows are samples/tokens, columns features. Row-major so a row is contiguous.
using matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

[[nodiscard]] inline std::span<float> span_of(matrix& m) noexcept {
  return {m.data(), static_cast<std::size_t>(m.size())};
}
[[nodiscard]] inline std::span<const float> span_of(const matrix& m) noexcept {
  return {m.data(), static_cast<std::size_t>(m.size())};
}

/// Per-step execution state: rounding options, the random key source and the thread count. Casts made
/// from the calling thread take keys in program order, so a run's stochastic bits depend on
/// (seed, step, cast site, element index) only.
struct exec_context {
  round_options rounding{};  // for tensor casts (scalar intermediates of ops always round to nearest)
  std::uint64_t seed = 0;
  std::int64_t step = 0;
  std::uint32_t cast_site = 0;  // reset to 0 at every step
  int threads = 1;
  cast_stats activation_stats{};  // every forward cast of this step, summed

  /// A fresh key for the next cast site of this step.
  [[nodiscard]] philox_key next_key() noexcept {
    const std::uint64_t step_mix = static_cast<std::uint64_t>(step) * 0x9E3779B97F4A7C15ull;
    return philox_key{.seed = seed ^ step_mix, .stream = cast_site++, .offset = 0};
  }
  void begin_step(std::int64_t s) noexcept {
    step = s;
    cast_site = 0;
    activation_stats = cast_stats{};
  }
};

/// Whether the format promises given to the layers are checked element by element: the format a caller says
/// an input of forward_in_place, or a backward's output gradient, already holds values of (so that the layer
/// skips rounding it to its matmul format). A promise that does not hold then throws safeamp::error naming the
/// input and the first element that is not a value of the format; unchecked, it would change the bits. On in
/// builds without NDEBUG and where the environment sets SAFEAMP_SIM_CHECK_FORMATS=1 (the test suite does);
/// set_format_checks overrides both.
[[nodiscard]] bool format_checks_enabled() noexcept;
void set_format_checks(bool on) noexcept;

/// Rounds `m` in place to `f` (rounding mode from `opt`; stochastic bits keyed by `key` and element index)
/// and returns the counters: the core round_span, whose kernels are chosen for the CPU at run time. fp32 is
/// the identity (only NaN/inf are counted).
cast_stats cast_in_place(matrix& m, format_spec f, const round_options& opt, philox_key key);

/// The same on a span (element i keyed as index key.offset + i): the cast of a block of a larger matrix.
cast_stats cast_span(std::span<float> values, format_spec f, const round_options& opt, philox_key key);

/// The same on up to `threads` threads, in chunks of 16384 elements cut by the span's length alone (each chunk keyed
/// by its own offset), so the bits and counters do not depend on `threads`.
cast_stats cast_span(int threads, std::span<float> values, format_spec f, const round_options& opt, philox_key key);

/// dst = src rounded to f, in one pass (round_span from src into dst).
cast_stats cast_copy(const matrix& src, matrix& dst, format_spec f, const round_options& opt, philox_key key);

/// Seconds the calling thread has spent inside cast_in_place and cast_copy since it started (steady clock). The
/// trainer reads it around each phase of a step to split cast time out of the phases (casts made by worker
/// threads, inside attention tasks, stay in their phase).
[[nodiscard]] double cast_seconds_this_thread() noexcept;

/// The same with a key from ctx. A large m is cast in fixed chunks (element i keyed as index i whatever the
/// chunk) on up to ctx.threads threads: the same bits and counters as one call, for every thread count.
cast_stats cast_in_place(exec_context& ctx, matrix& m, format_spec f);

namespace detail {
/// round_to(f, x), out of line: round_scalar's work for a format other than fp32.
[[nodiscard]] float round_scalar_narrow(format_spec f, float x) noexcept;
}  // namespace detail

/// Scalar round-to-nearest into f for op intermediates (identity for fp32). The fp32 test is inline and the
/// rounding is not, so the ops' fp32 loops are plain float loops and narrower formats make one call.
[[nodiscard]] inline float round_scalar(format_spec f, float x) noexcept {
  return f == fp32 ? x : detail::round_scalar_narrow(f, x);
}

/// True when every element of m is exactly representable in f (NaN and inf count as representable).
[[nodiscard]] bool representable(const matrix& m, format_spec f) noexcept;

/// FNV-1a 64 over the bits of the floats (for determinism checks).
[[nodiscard]] std::uint64_t hash_bits(std::span<const float> values, std::uint64_t h = 0xcbf29ce484222325ull) noexcept;

}  // namespace safeamp::sim
