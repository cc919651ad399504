// Casts of emulated tensors and the bit hash used by determinism checks.
#include "safeamp/sim/tensor.hpp"

#include <chrono>
#include <cmath>
#include <cstring>
#include <vector>

#include "safeamp/sim/parallel.hpp"

namespace safeamp::sim {
namespace {

thread_local double cast_seconds_total = 0.0;

// Elements per task of a cast spread over threads (cast_in_place with a context).
constexpr std::int64_t parallel_cast_chunk = 16384;

// Adds the time from construction to destruction to this thread's cast total.
class cast_timer {
 public:
  cast_timer() noexcept : start_(std::chrono::steady_clock::now()) {}
  cast_timer(const cast_timer&) = delete;
  cast_timer& operator=(const cast_timer&) = delete;
  ~cast_timer() {
    cast_seconds_total += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

// Every cast is the core's round_span (one kernel family, chosen for the CPU at run time: cpu_path.hpp).
cast_stats cast_untimed(std::span<float> values, format_spec f, const round_options& opt, philox_key key) {
  if (f == fp32 && !opt.flush_subnormals) {
    // Every float is already an fp32 value (stochastic rounding to fp32 is the identity too); only the
    // NaN/inf counters are meaningful.
    cast_stats s;
    s.elements = values.size();
    for (const float v : values) {
      std::uint32_t bits = 0;
      std::memcpy(&bits, &v, sizeof bits);
      bits &= 0x7FFFFFFFu;
      s.nan += bits > 0x7F800000u ? 1u : 0u;
      s.infinity += bits == 0x7F800000u ? 1u : 0u;
    }
    return s;
  }
  return round_span(f, values, opt, key);
}

}  // namespace

namespace detail {

// The named formats the ops use take round_to with a constant descriptor (the same routine, specialised).
float round_scalar_narrow(format_spec f, float x) noexcept {
  if (f == fp16) return round_to<fp16>(x);
  if (f == bf16) return round_to<bf16>(x);
  return round_to(f, x);
}

}  // namespace detail

double cast_seconds_this_thread() noexcept { return cast_seconds_total; }

cast_stats cast_in_place(exec_context& ctx, matrix& m, format_spec f) {
  const philox_key key = ctx.next_key();
  return cast_span(ctx.threads, span_of(m), f, ctx.rounding, key);
}

cast_stats cast_span(int threads, std::span<float> values, format_spec f, const round_options& opt, philox_key key) {
  const cast_timer timer;
  const auto n = static_cast<std::int64_t>(values.size());
  const std::int64_t chunks = (n + parallel_cast_chunk - 1) / parallel_cast_chunk;
  if (threads <= 1 || chunks < 2) return cast_untimed(values, f, opt, key);
  // Each chunk's counters in its own slot, summed in chunk order afterwards (integer sums: any order would do).
  // (A reference to the caller's buffer: a task naming a thread_local would reach the worker thread's own.)
  thread_local std::vector<cast_stats> slots;
  std::vector<cast_stats>& parts = slots;
  parts.assign(static_cast<std::size_t>(chunks), cast_stats{});
  parallel_chunks(threads, n, parallel_cast_chunk, [&](std::int64_t begin, std::int64_t end) {
    philox_key k = key;
    k.offset += static_cast<std::uint64_t>(begin);
    parts[static_cast<std::size_t>(begin / parallel_cast_chunk)] =
        cast_untimed(values.subspan(static_cast<std::size_t>(begin), static_cast<std::size_t>(end - begin)), f, opt, k);
  });
  cast_stats total;
  for (const cast_stats& p : parts) total += p;
  return total;
}

cast_stats cast_in_place(matrix& m, format_spec f, const round_options& opt, philox_key key) {
  const cast_timer timer;
  return cast_untimed(span_of(m), f, opt, key);
}

cast_stats cast_span(std::span<float> values, format_spec f, const round_options& opt, philox_key key) {
  const cast_timer timer;
  return cast_untimed(values, f, opt, key);
}

cast_stats cast_copy(const matrix& src, matrix& dst, format_spec f, const round_options& opt, philox_key key) {
  const cast_timer timer;
  dst.resize(src.rows(), src.cols());
  if (f == fp32 && !opt.flush_subnormals) {
    dst = src;
    return cast_untimed(span_of(dst), f, opt, key);
  }
  return round_span(f, span_of(src), span_of(dst), opt, key);  // one pass: src is read once, dst written once
}

bool representable(const matrix& m, format_spec f) noexcept {
  for (Eigen::Index i = 0; i < m.size(); ++i) {
    const float x = m.data()[i];
    if (std::isfinite(x) && round_to(f, x) != x) return false;
  }
  return true;
}

std::uint64_t hash_bits(std::span<const float> values, std::uint64_t h) noexcept {
  for (const float v : values) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &v, sizeof bits);
    for (int byte = 0; byte < 4; ++byte) {
      h ^= (bits >> (8 * byte)) & 0xFFu;
      h *= 0x100000001b3ull;
    }
  }
  return h;
}

}  // namespace safeamp::sim
