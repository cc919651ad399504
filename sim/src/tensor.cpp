// Casts of emulated tensors and the bit hash used by determinism checks.
#include "safeamp/sim/tensor.hpp"

#include <chrono>
#include <cmath>
#include <cstring>

namespace safeamp::sim {
namespace detail {
namespace {

// Round-to-nearest-even with IEEE overflow (to inf) and subnormals kept. Used for fp16 only (bf16 and tf32
// go through the core round_span, which is faster for them); written for the formats whose rounding is a bit
// operation on the float encoding: tf32 and bf16 (fp32's exponent range: drop low mantissa bits
// with an integer tie-to-even bias; the carry rounds into the exponent and up to inf) and fp16 (the same
// above 2^-14 plus a clamp to inf above 65504; below 2^-14 the quantum is the fixed 2^-24, so adding and
// subtracting 0.5f, whose ulp is 2^-24, rounds to it). Branch-free so that it vectorises. The counters are
// round_span's (cast_stats). Checked bit for bit against round_to in tests/sim/engine/cast_test.cpp.
template <int drop_bits, bool fp16_range>
void fast_round(const float* in, float* out, std::size_t n, cast_stats& stats) noexcept {
  // Signed 32-bit lanes (magnitudes fit in 31 bits) and explicit masks, so SSE2 can vectorise every step.
  constexpr std::int32_t abs_mask = 0x7FFFFFFF;
  constexpr std::int32_t inf_bits = 0x7F800000;
  constexpr std::int32_t quiet_bit = 0x00400000;
  constexpr std::int32_t half_minus_one = (std::int32_t{1} << (drop_bits - 1)) - 1;
  constexpr std::int32_t keep_mask = ~((std::int32_t{1} << drop_bits) - 1);
  constexpr std::int32_t fp16_max_bits = 0x477FE000;    // 65504
  constexpr std::int32_t fp16_min_normal = 0x38800000;  // 2^-14
  constexpr std::int32_t min_normal_bits = fp16_range ? fp16_min_normal : 0x00800000;
  constexpr std::size_t chunk = std::size_t{1} << 20;
  for (std::size_t start = 0; start < n; start += chunk) {
    const std::size_t end = n - start < chunk ? n : start + chunk;
    std::int32_t overflow = 0, underflow = 0, subnormal = 0, nan = 0, infinity = 0;
    for (std::size_t i = start; i < end; ++i) {
      std::int32_t u = 0;
      std::memcpy(&u, in + i, sizeof u);
      const std::int32_t sign = u & ~abs_mask;
      const std::int32_t a = u & abs_mask;
      std::int32_t r = (a + half_minus_one + ((a >> drop_bits) & 1)) & keep_mask;
      if constexpr (fp16_range) {
        const std::int32_t over = -static_cast<std::int32_t>(r > fp16_max_bits);
        r = (over & inf_bits) | (~over & r);
        float fa = 0.0f;
        std::memcpy(&fa, &a, sizeof fa);
        const float sub = (fa + 0.5f) - 0.5f;
        std::int32_t rs = 0;
        std::memcpy(&rs, &sub, sizeof rs);
        const std::int32_t tiny = -static_cast<std::int32_t>(a < fp16_min_normal);
        r = (tiny & rs) | (~tiny & r);
      }
      const std::int32_t is_nan_in = -static_cast<std::int32_t>(a > inf_bits);
      r = (is_nan_in & (a | quiet_bit)) | (~is_nan_in & r);
      const std::int32_t finite_in = static_cast<std::int32_t>(a < inf_bits);
      overflow += finite_in & static_cast<std::int32_t>(r == inf_bits);
      underflow += finite_in & static_cast<std::int32_t>(a != 0) & static_cast<std::int32_t>(r == 0);
      subnormal += static_cast<std::int32_t>(r != 0) & static_cast<std::int32_t>(r < min_normal_bits);
      nan += static_cast<std::int32_t>(r > inf_bits);
      infinity += static_cast<std::int32_t>(r == inf_bits);
      const std::int32_t y = r | sign;
      std::memcpy(out + i, &y, sizeof y);
    }
    stats.overflow += static_cast<std::uint64_t>(overflow);
    stats.underflow += static_cast<std::uint64_t>(underflow);
    stats.subnormal += static_cast<std::uint64_t>(subnormal);
    stats.nan += static_cast<std::uint64_t>(nan);
    stats.infinity += static_cast<std::uint64_t>(infinity);
  }
}

}  // namespace
}  // namespace detail

bool has_fast_cast(format_spec f, const round_options& opt) noexcept {
  // Only fp16: the core round_span is faster for bf16/tf32 (and for fp16 data in the normal range), but its exact
  // path for fp16 gradients full of subnormals is slower than this kernel (docs/performance.md).
  return f == fp16 && opt.mode == rounding::nearest_even &&
         opt.on_overflow == overflow::to_infinity && !opt.flush_subnormals;
}

namespace {

thread_local double cast_seconds_total = 0.0;

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

cast_stats cast_in_place_untimed(matrix& m, format_spec f, const round_options& opt, philox_key key) {
  if (f != fp32 && has_fast_cast(f, opt)) {
    cast_stats s;
    s.elements = static_cast<std::uint64_t>(m.size());
    const auto n = static_cast<std::size_t>(m.size());
    detail::fast_round<13, true>(m.data(), m.data(), n, s);
    return s;
  }
  if (f == fp32 && !opt.flush_subnormals) {
    // Every float is already an fp32 value (stochastic rounding to fp32 is the identity too); only the
    // NaN/inf counters are meaningful.
    cast_stats s;
    s.elements = static_cast<std::uint64_t>(m.size());
    const float* p = m.data();
    for (Eigen::Index i = 0; i < m.size(); ++i) {
      std::uint32_t bits = 0;
      std::memcpy(&bits, p + i, sizeof bits);
      bits &= 0x7FFFFFFFu;
      s.nan += bits > 0x7F800000u ? 1u : 0u;
      s.infinity += bits == 0x7F800000u ? 1u : 0u;
    }
    return s;
  }
  return round_span(f, span_of(m), opt, key);
}

}  // namespace

double cast_seconds_this_thread() noexcept { return cast_seconds_total; }

cast_stats cast_in_place(matrix& m, format_spec f, const round_options& opt, philox_key key) {
  const cast_timer timer;
  return cast_in_place_untimed(m, f, opt, key);
}

cast_stats cast_copy(const matrix& src, matrix& dst, format_spec f, const round_options& opt, philox_key key) {
  const cast_timer timer;
  dst.resize(src.rows(), src.cols());
  if (f != fp32 && has_fast_cast(f, opt)) {
    cast_stats s;
    s.elements = static_cast<std::uint64_t>(src.size());
    const auto n = static_cast<std::size_t>(src.size());
    detail::fast_round<13, true>(src.data(), dst.data(), n, s);
    return s;
  }
  dst = src;
  return cast_in_place_untimed(dst, f, opt, key);
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
