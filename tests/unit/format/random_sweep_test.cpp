// Seeded random sweeps for every mode, overflow option and flush setting, named and generic formats, float
// and double inputs (one rounding step, no double rounding), against the exact cpp_int oracle; and the
// vectorised round_span() fast paths against the scalar encode()/decode(), bit for bit, counters included.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <random>
#include <span>
#include <string>
#include <vector>

#if defined(__SSE2__) || defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "oracle_mode.hpp"
#include "oracles/round_oracle.hpp"
#include "safeamp/format.hpp"

namespace {

using safeamp::overflow;
using safeamp::rounding;

// Written over an output before each kernel call, so that an element the kernel never writes is a mismatch instead
// of the previous call's (right) result: a NaN whose payload no rounding produces.
constexpr std::uint32_t unwritten_bits = 0x7FA5A5A5u;
void mark_unwritten(std::span<float> out) {
  for (float& x : out) x = oracle::bits_float(unwritten_bits);
}

std::string hex(std::uint64_t u) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%llX", static_cast<unsigned long long>(u));
  return b;
}

// Empty where out and want hold the same bits everywhere; else how many elements differ, and the first of them.
std::string differences(std::span<const float> in, std::span<const float> out, std::span<const float> want) {
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (oracle::float_bits(out[i]) != oracle::float_bits(want[i]) && bad++ == 0) first = i;
  }
  if (bad == 0) return {};
  return std::to_string(bad) + " results differ, first element " + std::to_string(first) + " input " +
         hex(oracle::float_bits(in[first])) + " want " + hex(oracle::float_bits(want[first])) + " got " +
         hex(oracle::float_bits(out[first]));
}

const safeamp::format_spec sweep_formats[] = {
    safeamp::fp16,
    safeamp::bf16,
    safeamp::fp8_e4m3,
    safeamp::fp8_e5m2,
    safeamp::tf32,
    safeamp::fp32,
    safeamp::format_spec{2, 1, safeamp::special_values::ieee},
    safeamp::format_spec{3, 2, safeamp::special_values::finite_nan},
    safeamp::format_spec{6, 9, safeamp::special_values::ieee},
    safeamp::format_spec{7, 23, safeamp::special_values::ieee},
    safeamp::format_spec{7, 1, safeamp::special_values::finite_nan},
    safeamp::format_spec{8, 1, safeamp::special_values::ieee},
};
const rounding all_modes[] = {rounding::nearest_even, rounding::toward_zero, rounding::toward_pos_inf,
                              rounding::toward_neg_inf, rounding::stochastic};

using oracle::to_oracle;

// Random bit patterns, biased towards the interesting binades of format f (around its range, and ties).
float random_float(std::mt19937_64& rng, safeamp::format_spec f) {
  const std::uint32_t u = static_cast<std::uint32_t>(rng());
  switch (rng() % 4) {
    case 0:
      return oracle::bits_float(u);  // any pattern
    case 1: {                        // exponent within the format's range +- 3
      const int lo = safeamp::min_exponent(f) - f.mantissa_bits - 3, hi = safeamp::max_exponent(f) + 2;
      const int e = lo + static_cast<int>(rng() % static_cast<std::uint64_t>(hi - lo + 1));
      const float m = 1.0f + static_cast<float>(u & 0x7FFFFFu) / 8388608.0f;
      const float v = std::ldexp(m, std::max(e, -149));
      return (u >> 31) ? -v : v;
    }
    case 2: {  // an exact midpoint-ish value: a random code's value plus or minus a little
      const float d =
          safeamp::decode(f, static_cast<std::uint32_t>(rng()) & ((1u << std::min(safeamp::total_bits(f), 31)) - 1u));
      return std::isfinite(d) ? std::nextafter(d, (u & 1) ? INFINITY : -INFINITY) : d;
    }
    default:
      return std::ldexp(static_cast<float>(u >> 8), static_cast<int>(rng() % 64) - 60);
  }
}

// The counters of the scalar routine over in (element i: word stochastic_bits(key, key.offset + i) when
// stochastic), and its results in want.
safeamp::cast_stats scalar_stats(safeamp::format_spec f, std::span<const float> in, safeamp::round_options opt,
                                 safeamp::philox_key key, std::vector<float>& want) {
  safeamp::cast_stats s;
  s.elements = in.size();
  want.resize(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    const std::uint32_t rnd =
        opt.mode == rounding::stochastic ? safeamp::stochastic_bits(key.seed, key.stream, key.offset + i) : 0u;
    const float y = safeamp::round_to(f, in[i], opt, rnd);
    const float ax = std::fabs(in[i]), ay = std::fabs(y);
    // Overflow: the scalar routine's own flag (a directed mode may give max finite), finite inputs only.
    const bool overflowed = safeamp::detail::encode_impl<float>(f, in[i], opt, rnd).overflowed;
    s.overflow += (std::isfinite(in[i]) && overflowed) ? 1u : 0u;
    s.underflow += (std::isfinite(in[i]) && ax != 0 && ay == 0) ? 1u : 0u;
    s.subnormal += (ay != 0 && ay < safeamp::min_normal(f)) ? 1u : 0u;
    s.nan += std::isnan(y) ? 1u : 0u;
    s.infinity += std::isinf(y) ? 1u : 0u;
    want[i] = y;
  }
  return s;
}

// Data laid out in regions of 8 blocks of 4096 elements (the vector kernels choose per block of 1024 or 4096
// elements: round_kernel.hpp's path_choice), 16-lane vectors of normal values in which some vectors hold one lane
// below min normal (`below`: 1 vector in `below` if nonzero) or one rare lane (`rare`: zero, +-inf, NaN, or a
// value next to the overflow threshold of nearest even or of the directed modes), so that the kernels' choices (the
// all-normal test on or off, the AVX-512 nearest-even kernel's merged test of the rare lanes on or off) switch back
// and forth.
std::vector<float> block_choice_data(std::mt19937_64& rng, safeamp::format_spec f, std::size_t regions) {
  const float max = safeamp::max_finite(f), lo = safeamp::min_normal(f);
  // max + half an ulp of the format at max: the tie of nearest even at the top, and its float neighbours.
  const float half_ulp = std::ldexp(1.0f, safeamp::max_exponent(f) - f.mantissa_bits - 1);
  const float tie = max + half_ulp;
  // max + an ulp: where the modes that round the magnitude down start to overflow (clamped to max finite).
  const float top = max + 2 * half_ulp;
  const float rare_values[] = {0.0f,
                               -0.0f,
                               INFINITY,
                               -INFINITY,
                               NAN,
                               std::nextafter(tie, 0.0f),
                               tie,
                               -tie,
                               std::nextafter(tie, INFINITY),
                               std::nextafter(std::nextafter(tie, INFINITY), INFINITY),
                               max,
                               top,
                               -top,
                               std::nextafter(top, 0.0f),
                               -std::nextafter(top, 0.0f)};
  struct pattern {
    unsigned below, rare;
  };
  // all normal; many below-normal lanes; many rare lanes; many below and a few rare; a few of each.
  const pattern patterns[] = {{0, 0}, {4, 0}, {0, 5}, {4, 16}, {16, 16}, {3, 2}, {0, 0}, {2, 32}};
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::vector<float> data;
  for (std::size_t r = 0; r < regions; ++r) {
    const pattern p = patterns[r % std::size(patterns)];
    for (std::size_t v = 0; v < 8 * 4096 / 16; ++v) {
      for (std::size_t lane = 0; lane < 16; ++lane) {
        // Normal values: lo * 2^(t (log2(max / lo))), t uniform, a random sign.
        float x = lo * std::exp2(unit(rng) * std::log2(max / lo) * 0.999f);
        const auto pick = static_cast<std::size_t>(rng() % 16);
        if (p.below != 0 && v % p.below == 0 && lane == pick) x = lo * unit(rng);
        if (p.rare != 0 && v % p.rare == 1 && lane == (pick + 7) % 16) x = rare_values[rng() % std::size(rare_values)];
        data.push_back((rng() & 1) ? -x : x);
      }
    }
  }
  return data;
}

}  // namespace

// Every path's kernels pick, block by block, whether to test each vector for the all-normal shortcut and (the
// AVX-512 nearest-even kernel into fp16/fp8) whether to test for zero/overflow/inf/NaN lanes with one merged
// compare, and (stochastic rounding: AVX2 every span, AVX-512 streamed in address order or at least 8 MiB in place)
// stretch by stretch whether to mark which vectors need the exact path a step ahead; each choice must give the scalar
// routine's bits and counters, in every combination, with and without streaming stores (a span of at least 16 MiB),
// in place for the large stochastic spans, saturating or not, flushing or not.
TEST_CASE("block by block path choices of the vector kernels equal the scalar routine") {
  std::mt19937_64 rng(1812);
  for (const safeamp::format_spec f : {safeamp::fp16, safeamp::fp8_e4m3, safeamp::fp8_e5m2, safeamp::bf16}) {
    for (const bool large : {false, true}) {
      // 13 regions of 32 Ki elements, plus a ragged tail; large: 129 regions (16.1 MiB, streaming stores).
      std::vector<float> in = block_choice_data(rng, f, large ? 129 : 13);
      // A ragged tail of 37 (two or four vectors and 5 elements after the last block) with an infinity, a zero and two
      // values below min normal in its vectors: one whose nearest-even result differs from that of the normal range's
      // cut rounded again (just above 2.5 subnormal quanta, which the cut takes to the tie at 2.5, and the tie to 2),
      // so that an in-place kernel that read back its own cut would be caught.
      const float tie_breaker = std::ldexp(2.5f * (1.0f + 0x1p-20f), safeamp::min_exponent(f) - f.mantissa_bits);
      for (std::size_t i = 0; i < 37; ++i) {
        in.push_back(i == 3    ? tie_breaker
                     : i == 9  ? safeamp::min_normal(f) / 3
                     : i == 20 ? INFINITY
                     : i == 30 ? 0.0f
                               : in[i * 7]);
      }
      std::vector<float> out(in.size()), want;
      for (const rounding m : all_modes) {
        // The streaming loops whose choices are new: nearest even's, and stochastic rounding's marks (a stretch of
        // 4096 elements is marked a step ahead where the one before had between 1 vector in 64 and 7 in 8 that
        // needed the exact path, by_mark_stretches: every pattern of block_choice_data but the all-normal one).
        if (large && m != rounding::nearest_even && m != rounding::stochastic) continue;
        for (const bool sat : {false, true}) {
          for (const bool ftz : {false, true}) {
            if (large && sat != ftz) continue;
            const safeamp::round_options opt{
                .mode = m, .on_overflow = sat ? overflow::saturate : overflow::to_infinity, .flush_subnormals = ftz};
            // Offset a multiple of 4, so that the large spans stream (std::vector's 16-byte alignment).
            const safeamp::philox_key key{.seed = 77, .stream = 3, .offset = 4000};
            const safeamp::cast_stats expected = scalar_stats(f, in, opt, key, want);
            for (const safeamp::cpu_path path : safeamp::all_cpu_paths) {
              if (!safeamp::cpu_path_supported(path)) continue;
              mark_unwritten(out);
              const safeamp::cast_stats got = safeamp::detail::round_span_on(path, f, in, out, opt, key);
              const std::string diff = differences(in, out, want);
              INFO(safeamp::format_name(f)
                   << " mode " << static_cast<int>(m) << " sat " << sat << " ftz " << ftz << " path "
                   << safeamp::cpu_path_name(path) << " elements " << in.size() << ": " << diff);
              CHECK(diff.empty());
              CHECK(got == expected);
              if (!large || m == rounding::stochastic) {
                // In place. Small spans, deterministic modes: a separate output defers the exact path of a block's
                // vectors that need it until every vector has its fixed cut (round_deferred), which in place would
                // read back the cut instead of the input, so in place the kernels test vector by vector. Large
                // spans, stochastic rounding: no streaming stores, marked as far spans are (avx512::far_min_bytes).
                std::vector<float> same = in;
                const safeamp::cast_stats got_in_place = safeamp::detail::round_span_on(path, f, same, same, opt, key);
                const std::string diff_in_place = differences(in, same, want);
                INFO("in place: " << diff_in_place);
                CHECK(diff_in_place.empty());
                CHECK(got_in_place == expected);
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("random sweeps: scalar encode/decode from float and double against the exact oracle") {
  std::mt19937_64 rng(20240611);
  int failures = 0;
  for (safeamp::format_spec f : sweep_formats) {
    const oracle::format r{f.exponent_bits, f.mantissa_bits, f.specials == safeamp::special_values::finite_nan};
    for (rounding m : all_modes) {
      for (overflow ov : {overflow::to_infinity, overflow::saturate}) {
        for (bool ftz : {false, true}) {
          const safeamp::round_options opt{.mode = m, .on_overflow = ov, .flush_subnormals = ftz};
          for (int i = 0; i < 600; ++i) {
            const float x = random_float(rng, f);
            const std::uint32_t rnd = static_cast<std::uint32_t>(rng());
            const oracle::options oo{to_oracle(m), ov == overflow::saturate, ftz, rnd};
            const std::uint32_t want = oracle::round_bits(r, x, oo);
            const std::uint32_t got = oracle::float_bits(safeamp::round_to(f, x, opt, rnd));
            // double input with extra low bits: must be rounded once, straight to f
            const double xd =
                static_cast<double>(x) * (1.0 + std::ldexp(static_cast<double>(rng() % 1024) - 512.0, -40));
            const std::uint32_t want_d = oracle::round_bits(r, xd, oo);
            const std::uint32_t got_d = oracle::float_bits(safeamp::round_to(f, xd, opt, rnd));
            if ((want != got || want_d != got_d) && failures++ < 12) {
              FAIL_CHECK(safeamp::format_name(f)
                         << " mode " << static_cast<int>(m) << " sat " << (ov == overflow::saturate) << " ftz " << ftz
                         << " rnd " << hex(rnd) << ": float " << hex(oracle::float_bits(x)) << " want " << hex(want)
                         << " got " << hex(got) << "; double " << hex(std::bit_cast<std::uint64_t>(xd)) << " want "
                         << hex(want_d) << " got " << hex(got_d));
            }
          }
        }
      }
    }
  }
  CHECK(failures == 0);
}

TEST_CASE("round_span fast paths equal the scalar routine bit for bit, counters included") {
  std::mt19937_64 rng(77);
  const std::size_t n = 5000;  // not a multiple of the vector width or of 4 (Philox blocks)
  int failures = 0;
  for (safeamp::format_spec f : sweep_formats) {
    const oracle::format r{f.exponent_bits, f.mantissa_bits, f.specials == safeamp::special_values::finite_nan};
    std::vector<float> in(n), out(n);
    for (float& x : in) x = random_float(rng, f);
    in[0] = INFINITY;
    in[1] = -INFINITY;
    in[2] = NAN;
    in[3] = -0.0f;
    in[4] = oracle::bits_float(0xFF800001u);
    for (rounding m : all_modes) {
      for (overflow ov : {overflow::to_infinity, overflow::saturate}) {
        for (bool ftz : {false, true}) {
          const safeamp::round_options opt{.mode = m, .on_overflow = ov, .flush_subnormals = ftz};
          const safeamp::philox_key key{.seed = 0x1234567890ABCDEFull, .stream = 3, .offset = 4294967294ull};
          mark_unwritten(out);
          const safeamp::cast_stats got = safeamp::round_span(f, in, out, opt, key);
          safeamp::cast_stats want;
          want.elements = n;
          for (std::size_t i = 0; i < n; ++i) {
            const std::uint32_t rnd = safeamp::stochastic_bits(key.seed, key.stream, key.offset + i);
            const float y = safeamp::round_to(f, in[i], opt, rnd);
            const float ax = std::fabs(in[i]), ay = std::fabs(y);
            // Overflow: the magnitude rounded with an unbounded exponent range exceeds max finite. For the modes
            // that round away from zero that is exactly "the oracle gives inf/NaN without saturation"; for the
            // others it is |x| >= max + the top binade's quantum.
            const bool neg = std::signbit(in[i]);
            const bool away = m == rounding::nearest_even || m == rounding::stochastic ||
                              (m == rounding::toward_pos_inf && !neg) || (m == rounding::toward_neg_inf && neg);
            const float unbounded = oracle::bits_float(oracle::round_bits(r, in[i], {to_oracle(m), false, false, rnd}));
            const double top_quantum = std::ldexp(1.0, r.emax() - r.mantissa_bits);
            want.overflow += std::isfinite(in[i]) && (away ? !std::isfinite(unbounded)
                                                           : static_cast<double>(ax) >= r.max_finite() + top_quantum)
                                 ? 1u
                                 : 0u;
            want.underflow += (std::isfinite(in[i]) && ax != 0 && ay == 0) ? 1u : 0u;
            want.subnormal += (ay != 0 && ay < safeamp::min_normal(f)) ? 1u : 0u;
            want.nan += std::isnan(y) ? 1u : 0u;
            want.infinity += std::isinf(y) ? 1u : 0u;
            if (oracle::float_bits(y) != oracle::float_bits(out[i]) && failures++ < 12) {
              FAIL_CHECK(safeamp::format_name(f)
                         << " mode " << static_cast<int>(m) << " element " << i << " input "
                         << hex(oracle::float_bits(in[i])) << " scalar " << hex(oracle::float_bits(y)) << " span "
                         << hex(oracle::float_bits(out[i])));
            }
          }
          if (safeamp::total_bits(f) <= 16) {
            // encode_span (round_span's kernels, then the codes of the exact results) against encode() per element.
            std::vector<std::uint16_t> codes(n);
            safeamp::encode_span(f, in, codes, opt, key);
            for (std::size_t i = 0; i < n; ++i) {
              const std::uint32_t rnd = safeamp::stochastic_bits(key.seed, key.stream, key.offset + i);
              const std::uint32_t code = safeamp::encode(f, in[i], opt, rnd);
              if (codes[i] != code && failures++ < 12) {
                FAIL_CHECK(safeamp::format_name(f) << " mode " << static_cast<int>(m) << " element " << i << " input "
                                                   << hex(oracle::float_bits(in[i])) << " encode " << hex(code)
                                                   << " encode_span " << hex(codes[i]));
              }
            }
          }
          INFO(safeamp::format_name(f) << " mode " << static_cast<int>(m) << " sat " << (ov == overflow::saturate)
                                       << " ftz " << ftz);
          CHECK(got.elements == want.elements);
          CHECK(got.overflow == want.overflow);
          CHECK(got.underflow == want.underflow);
          CHECK(got.subnormal == want.subnormal);
          CHECK(got.nan == want.nan);
          CHECK(got.infinity == want.infinity);
        }
      }
    }
  }
  CHECK(failures == 0);
}

// Spans large enough for the streaming-store path of the AVX-512 kernels (>= 16 MiB of input into a separate
// buffer), with a length that is not a multiple of 16, in three layouts: an output 4 bytes past a 64-byte
// boundary with a key offset whose Philox block counter crosses 2^32 (the low counter word wraps); a 64-byte
// aligned output with a key offset that is a multiple of 4; an output 12 bytes past a boundary with key offset
// 3 (13 elements before the first aligned one, whose logical index is then a multiple of 4). Every mode (the
// directed ones have their own streaming loops), on every kernel path this machine runs. Every element is compared
// with the scalar routine; the counters with a count of the scalar results. The scalar routine runs once per
// format, mode and (stochastic rounding, whose words depend on the key) layout, and its results are compared with
// every path's: it is most of this test's time.
TEST_CASE("large spans (streaming stores, misaligned output, Philox counter wrap) equal the scalar routine") {
  std::mt19937_64 rng(4242);
  const std::size_t n = (std::size_t{1} << 22) + 37;
  std::vector<float> in(n), out_storage(n + 32);
  const auto address = reinterpret_cast<std::uintptr_t>(out_storage.data());
  const std::size_t aligned = ((64 - address % 64) % 64) / sizeof(float);  // first 64-byte aligned element
  struct layout {
    std::size_t shift;
    std::uint64_t offset;
  };
  const layout layouts[] = {{1, (std::uint64_t{1} << 34) - 4 * 1000 - 2}, {0, 4000}, {3, 3}};
  // E5M2: its directed modes take fp16_pair's code cut, nearest even narrow_pair (both also in the AVX2 four-pages
  // streaming order).
  std::vector<float> results;
  safeamp::cast_stats want;
  for (const safeamp::format_spec f : {safeamp::fp16, safeamp::fp8_e4m3, safeamp::fp8_e5m2, safeamp::bf16}) {
    for (float& x : in) x = random_float(rng, f);
    for (const rounding m : all_modes) {
      for (std::size_t l_index = 0; l_index < std::size(layouts); ++l_index) {
        const layout l = layouts[l_index];
        const safeamp::round_options opt{.mode = m};
        const safeamp::philox_key key{.seed = 99, .stream = 5, .offset = l.offset};
        if (l_index == 0 || m == rounding::stochastic) want = scalar_stats(f, in, opt, key, results);
        for (const safeamp::cpu_path path : safeamp::all_cpu_paths) {
          if (!safeamp::cpu_path_supported(path)) continue;
          const std::span<float> out(out_storage.data() + aligned + l.shift, n);
          mark_unwritten(out);
          const safeamp::cast_stats got = safeamp::detail::round_span_on(path, f, in, out, opt, key);
          std::size_t mismatches = 0, first_bad = n;
          for (std::size_t i = 0; i < n; ++i) {
            if (oracle::float_bits(results[i]) != oracle::float_bits(out[i])) {
              if (mismatches++ == 0) first_bad = i;
            }
          }
          INFO(safeamp::format_name(f) << " mode " << static_cast<int>(m) << " shift " << l.shift << " offset "
                                       << l.offset << " path " << safeamp::cpu_path_name(path) << " first mismatch at "
                                       << first_bad);
          CHECK(mismatches == 0);
          CHECK(got == want);
        }
      }
    }
  }
}

// The AVX-512 kernels count in 16-bit lanes between widenings (counters16's code counts: fp16 nearest even, and the
// exact path's common counts in every mode): a span in which every element lands in the same class makes every lane
// count every vector, up to 2^16 per lane in one 2^20-element chunk, so a missed widening would wrap a lane to 0.
// Each path must count all n: in cache (blocks of 64 vectors, stochastic steps of 128 elements), streamed (16 MiB or
// more: blocks of four pages, or address order) and, stochastic rounding, in place (marked stretches from 8 MiB).
// Every format, mode, overflow option and flush setting; the values are picked so that each element's result and
// counts do not depend on its random word (an overflow at least a quantum above max finite, an exact subnormal, a
// value below 2^-32 of the smallest subnormal), so the counts are n times those of one element on the portable path
// (checked on a 4096-element span there first). bf16's only overflows and underflows are within 2^-16 of rounding
// the other way, so its stochastic spans hold the subnormal only.
TEST_CASE("counters of spans whose every element overflows, is subnormal or underflows, every path, format and mode") {
  struct one_class {
    safeamp::format_spec f;
    float x;
    bool stochastic = true;  // the class does not depend on the random word
  };
  const one_class classes[] = {{safeamp::fp16, -1.0e6f},
                               {safeamp::fp16, 3.0f * 0x1p-24f},
                               {safeamp::fp16, -0x1p-60f},
                               {safeamp::fp8_e4m3, -1.0e6f},
                               {safeamp::fp8_e4m3, 3.0f * 0x1p-9f},
                               {safeamp::fp8_e4m3, 0x1p-60f},
                               {safeamp::fp8_e5m2, 1.0e6f},
                               {safeamp::fp8_e5m2, -3.0f * 0x1p-16f},
                               {safeamp::fp8_e5m2, -0x1p-60f},
                               {safeamp::bf16, -3.4028235e38f, false},
                               {safeamp::bf16, 3.0f * 0x1p-133f},
                               {safeamp::bf16, -0x1p-149f, false}};
  // Both buffers 64-byte aligned, and the key's offset a multiple of 4: the kernels' main loops then cover whole
  // chunks (a streamed or stochastic loop otherwise starts a few elements in, and stays below 2^16 vectors).
  const std::size_t big = (std::size_t{1} << 22) + 16;
  std::vector<float> in_store(big + 16), out_store(big + 16);
  const auto aligned = [](std::vector<float>& v) {
    return v.data() + (64 - reinterpret_cast<std::uintptr_t>(v.data()) % 64) % 64 / sizeof(float);
  };
  const std::span<float> in(aligned(in_store), big), out(aligned(out_store), big);
  for (const one_class& c : classes) {
    for (const rounding m : all_modes) {
      if (m == rounding::stochastic && !c.stochastic) continue;
      for (const overflow ov : {overflow::to_infinity, overflow::saturate}) {
        for (const bool ftz : {false, true}) {
          const safeamp::round_options opt{.mode = m, .on_overflow = ov, .flush_subnormals = ftz};
          const safeamp::philox_key key{.seed = 5, .stream = 3, .offset = 12};
          INFO("format " << c.f.exponent_bits << "/" << c.f.mantissa_bits << " x " << c.x << " mode "
                         << static_cast<int>(m) << " saturate " << (ov == overflow::saturate) << " ftz " << ftz);
          const auto portable = [&](std::size_t n) {
            std::fill_n(in.begin(), n, c.x);
            return safeamp::detail::round_span_on(safeamp::cpu_path::portable, c.f, std::span(in.data(), n),
                                                  std::span(out.data(), n), opt, key);
          };
          const safeamp::cast_stats one = portable(1);
          const auto times = [&](std::size_t n) {
            safeamp::cast_stats t;
            t.elements = n * one.elements;
            t.overflow = n * one.overflow;
            t.nan = n * one.nan;
            t.infinity = n * one.infinity;
            t.subnormal = n * one.subnormal;
            t.underflow = n * one.underflow;
            return t;
          };
          REQUIRE(portable(4096) == times(4096));  // the class does not depend on the random words
          REQUIRE(one.elements == 1);
          const float want = out[0];
          for (const safeamp::cpu_path path : safeamp::all_cpu_paths) {
            if (!safeamp::cpu_path_supported(path) || path == safeamp::cpu_path::portable) continue;
            for (const std::size_t n : {std::size_t{1} << 20, big}) {
              for (const bool in_place : {false, true}) {
                if (in_place && (n != big || m != rounding::stochastic)) continue;
                INFO("path " << safeamp::cpu_path_name(path) << " n " << n << " in place " << in_place);
                std::fill_n(in.begin(), n, c.x);
                const std::span<float> src(in.data(), n);
                const std::span<float> dst(in_place ? in.data() : out.data(), n);
                const safeamp::cast_stats got = safeamp::detail::round_span_on(path, c.f, src, dst, opt, key);
                CHECK(got == times(n));
                CHECK(oracle::float_bits(dst[n - 1]) == oracle::float_bits(want));
                CHECK(oracle::float_bits(dst[n / 2]) == oracle::float_bits(want));
              }
              if (m == rounding::stochastic) {
                // A chunk in which the low word of the Philox block counter wraps takes its words from a buffer.
                const safeamp::philox_key wraps{.seed = 5, .stream = 3, .offset = (std::uint64_t{1} << 34) - 4096};
                std::fill_n(in.begin(), n, c.x);
                CHECK(safeamp::detail::round_span_on(path, c.f, std::span(in.data(), n), std::span(out.data(), n), opt,
                                                     wraps) == times(n));
              }
            }
          }
        }
      }
    }
  }
}

#if defined(__SSE2__) || defined(__x86_64__)
// MXCSR: flush-to-zero (bit 15), denormals-are-zero (bit 6), rounding control (bits 13-14).
TEST_CASE("round_span ignores the floating-point environment: FTZ, DAZ and every MXCSR rounding mode, every path") {
  std::mt19937_64 rng(909);
  const std::size_t n = 3001;
  int failures = 0;
  const unsigned saved = _mm_getcsr();
  for (safeamp::format_spec f : sweep_formats) {
    std::vector<float> in(n), out(n);
    for (float& x : in) x = random_float(rng, f);
    // Float subnormals of both signs (DAZ reads them as zero), zeros and the specials.
    for (std::size_t i = 0; i < 64; ++i)
      in[i] = oracle::bits_float((i & 1u ? 0x80000000u : 0u) | static_cast<std::uint32_t>(1u + 4099u * i));
    in[64] = INFINITY;
    in[65] = -INFINITY;
    in[66] = NAN;
    in[67] = -0.0f;
    for (rounding m : all_modes) {
      for (const bool strict : {false, true}) {
        const safeamp::round_options opt{
            .mode = m, .on_overflow = strict ? overflow::saturate : overflow::to_infinity, .flush_subnormals = strict};
        const safeamp::philox_key key{.seed = 5, .stream = 6, .offset = 7};
        std::vector<float> want(n);
        for (std::size_t i = 0; i < n; ++i) {
          const std::uint32_t rnd = safeamp::stochastic_bits(key.seed, key.stream, key.offset + i);
          want[i] = safeamp::round_to(f, in[i], opt, rnd);
        }
        for (const safeamp::cpu_path path : safeamp::all_cpu_paths) {
          if (!safeamp::cpu_path_supported(path)) continue;
          const safeamp::cast_stats reference = safeamp::detail::round_span_on(path, f, in, out, opt, key);
          for (const unsigned rc : {0u, 1u, 2u, 3u}) {
            _mm_setcsr((saved & ~0xE040u) | 0x8040u | rc << 13);  // FTZ, DAZ, rounding control rc
            const safeamp::cast_stats got = safeamp::detail::round_span_on(path, f, in, out, opt, key);
            _mm_setcsr(saved);
            const std::string diff = differences(in, out, want);
            if ((!diff.empty() || !(got == reference)) && failures++ < 12) {
              FAIL_CHECK(safeamp::format_name(f)
                         << " mode " << static_cast<int>(m) << (strict ? " saturate+flush" : "") << " path "
                         << safeamp::cpu_path_name(path) << " MXCSR.RC " << rc << ": "
                         << (diff.empty() ? "same results" : diff) << (got == reference ? "" : "; counters differ"));
            }
          }
        }
      }
    }
  }
  CHECK(failures == 0);
}

// The AVX2 pair kernels take pairs of vectors (elements j and j + 8 of 16 share a lane) of wide-range floats; the
// F16C kernel (every deterministic mode) keeps a pair whose inputs are normal or float subnormal and sends one with
// a zero, an infinity or a NaN to the exact path, found by the product of the two vectors (which also sends pairs
// whose product underflows or overflows); the AVX-512 fp16 kernel tests each vector's classes with vfpclassps. Here one
// pair in three has one such lane (or a lane pair whose product underflows or overflows) amid normal floats of
// 2^-30..2^20, so that the blocks stay on the pair kernels; each path's results and counters must be the scalar
// routine's with MXCSR's FTZ and DAZ off, each alone and both (DAZ reads a float subnormal as 0, FTZ flushes a product
// or an x / Q that falls below 2^-126).
TEST_CASE("pairs with one float subnormal, zero, infinity, NaN or tiny or huge lane pair amid wide-range floats") {
  std::mt19937_64 rng(2026);
  const std::size_t n = 3 * 4096 * 4 + 5;  // several of path_choice's blocks, and a tail
  std::vector<float> in(n), out(n);
  std::uniform_real_distribution<float> exponent(-30.0f, 20.0f);
  for (float& x : in) x = ((rng() & 1) != 0 ? -1.0f : 1.0f) * std::exp2(exponent(rng));
  const float rare_values[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, oracle::bits_float(0xFF800123u)};
  for (std::size_t pair = 0; pair + 16 <= n; pair += 16) {
    const std::size_t lane = pair + static_cast<std::size_t>(rng() % 8);
    switch (rng() % 15) {
      case 0:  // a float subnormal beside normal floats
      case 1:
        // Bits of 1..23 significant mantissa bits: magnitudes spread over 2^-149..2^-126 (down to where x / Q of
        // the vroundps kernels is itself a float subnormal, which FTZ would flush).
        in[lane + (rng() % 2) * 8] =
            oracle::bits_float((static_cast<std::uint32_t>(rng()) & 0x80000000u) |
                               ((static_cast<std::uint32_t>(rng()) & ((1u << (1 + rng() % 23)) - 1u)) | 1u));
        break;
      case 2:  // a zero, an infinity or a NaN
        in[lane + (rng() % 2) * 8] = rare_values[rng() % std::size(rare_values)];
        break;
      case 3:  // a lane pair whose product underflows (2^-149 or less): both 2^-126..2^-75
        in[lane] = std::ldexp(1.0f + static_cast<float>(rng() % 1000) / 1000.0f, -126 + static_cast<int>(rng() % 50));
        in[lane + 8] = -std::ldexp(1.5f, -126 + static_cast<int>(rng() % 50));
        break;
      case 4:  // a lane pair whose product overflows: both 2^64..2^127
        in[lane] = std::ldexp(1.25f, 64 + static_cast<int>(rng() % 63));
        in[lane + 8] = -std::ldexp(1.75f, 64 + static_cast<int>(rng() % 63));
        break;
      default:
        break;
    }
  }
  const unsigned saved = _mm_getcsr();
  int failures = 0;
  for (safeamp::format_spec f : {safeamp::fp16, safeamp::fp8_e5m2, safeamp::fp8_e4m3, safeamp::bf16}) {
    for (rounding m : all_modes) {
      for (overflow ov : {overflow::to_infinity, overflow::saturate}) {
        for (bool ftz : {false, true}) {
          const safeamp::round_options opt{.mode = m, .on_overflow = ov, .flush_subnormals = ftz};
          const safeamp::philox_key key{.seed = 11, .stream = 12, .offset = 13};
          std::vector<float> want;
          const safeamp::cast_stats want_stats = scalar_stats(f, in, opt, key, want);
          for (const safeamp::cpu_path path : safeamp::all_cpu_paths) {
            if (!safeamp::cpu_path_supported(path)) continue;
            for (const unsigned csr : {0u, 0x8000u, 0x0040u, 0x8040u}) {  // none, FTZ, DAZ, both
              mark_unwritten(out);
              _mm_setcsr((saved & ~0x8040u) | csr);
              const safeamp::cast_stats got = safeamp::detail::round_span_on(path, f, in, out, opt, key);
              _mm_setcsr(saved);
              const std::string diff = differences(in, out, want);
              if ((!diff.empty() || !(got == want_stats)) && failures++ < 12) {
                FAIL_CHECK(safeamp::format_name(f)
                           << " mode " << static_cast<int>(m) << " sat " << (ov == overflow::saturate) << " ftz " << ftz
                           << " path " << safeamp::cpu_path_name(path) << " MXCSR FTZ/DAZ bits " << hex(csr) << ": "
                           << (diff.empty() ? "same results" : diff) << (got == want_stats ? "" : "; counters differ"));
              }
            }
          }
        }
      }
    }
  }
  CHECK(failures == 0);
}
#endif
