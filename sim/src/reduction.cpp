// Emulated cross-rank reductions and the error-versus-N table (see reduction.hpp).
#include "safeamp/sim/reduction.hpp"

#include <cmath>
#include <random>

#include "safeamp/error.hpp"
#include "safeamp/format/format_names.hpp"
#include "safeamp/format/round.hpp"

namespace safeamp::sim {
namespace {

bool is_wire_format(format_spec f) noexcept { return f == bf16 || f == fp16 || f == fp8_e4m3 || f == fp8_e5m2; }

bool is_fp8(format_spec f) noexcept { return f == fp8_e4m3 || f == fp8_e5m2; }

float to_wire(format_spec f, float x) noexcept {
  return round_to(f, x, round_options{.on_overflow = is_fp8(f) ? overflow::saturate : overflow::to_infinity});
}

// to_wire, counting in `overflows` a finite x beyond the wire format's range (fp16/bf16: it became inf; fp8: it
// was clamped to the largest finite value, which no later check can see).
float to_wire_counted(format_spec f, float x, std::int64_t& overflows) noexcept {
  const float w = to_wire(f, x);
  if (std::isfinite(x) && (!std::isfinite(w) || (is_fp8(f) && std::fabs(w) == max_finite(f) &&
                                                 !std::isfinite(round_to(f, x, round_options{})))))
    ++overflows;
  return w;
}

// A standard normal from two uniform draws (Box-Muller on the bits of a 64-bit Mersenne Twister, whose output
// sequence the C++ standard fixes, so the table is the same with every standard library).
double normal(std::mt19937_64& g) {
  constexpr double two_pi = 6.283185307179586476925286766559;
  const double u1 = (static_cast<double>(g() >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
  const double u2 = static_cast<double>(g() >> 11) * 0x1.0p-53;          // [0, 1)
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(two_pi * u2);
}

}  // namespace

reduce_spec parse_reduce_spec(std::string_view text, std::string_view field) {
  if (text == "fp32") return reduce_spec{};
  const auto refuse = [&] { throw error(field, "'" + std::string(text) + "'", reduce_specs_accepted); };
  std::int64_t predivide = 1;
  std::string_view body = text;
  if (const std::size_t slash = text.find('/'); slash != std::string_view::npos) {
    // Digits only (no sign, no exponent), a power of two in [1, max_predivide].
    const std::string_view digits = text.substr(slash + 1);
    if (digits.empty() || digits.size() > 7) refuse();
    predivide = 0;
    for (const char ch : digits) {
      if (ch < '0' || ch > '9') refuse();
      predivide = predivide * 10 + (ch - '0');
    }
    if (predivide < 1 || predivide > max_predivide || (predivide & (predivide - 1)) != 0) refuse();
    body = text.substr(0, slash);
  }
  const std::size_t dash = body.rfind('-');
  if (dash != std::string_view::npos) {
    const std::string_view order = body.substr(dash + 1);
    format_spec wire{};
    if (detail::parse_format_name(body.substr(0, dash), wire) && is_wire_format(wire)) {
      if (order == "wire")
        return reduce_spec{.order = reduce_order::fp32_accumulate, .wire = wire, .predivide = predivide};
      if (order == "ring") return reduce_spec{.order = reduce_order::ring, .wire = wire, .predivide = predivide};
      if (order == "tree") return reduce_spec{.order = reduce_order::tree, .wire = wire, .predivide = predivide};
    }
  }
  refuse();
  return {};
}

std::string to_string(const reduce_spec& s) {
  // Appended rather than "/" + to_string(...): GCC 12 warns a false -Wrestrict on that inlined operator+.
  std::string factor;
  if (s.predivide != 1) factor.append("/").append(std::to_string(s.predivide));
  switch (s.order) {
    case reduce_order::canonical:
      return "fp32" + factor;
    case reduce_order::fp32_accumulate:
      return format_name(s.wire) + "-wire" + factor;
    case reduce_order::ring:
      return format_name(s.wire) + "-ring" + factor;
    case reduce_order::tree:
      return format_name(s.wire) + "-tree" + factor;
  }
  return "?";
}

namespace {
float collective_add_counted(format_spec f, float a, float b, std::int64_t& overflows) noexcept {
  const float sum = a + b;  // fp32: exact for two values of a format with at most 11 significand bits and
                            // exponents close together; otherwise rounded once, as the hardware's fp32 add
  if (!is_fp8(f)) return to_wire_counted(f, sum, overflows);
  const float half = round_to(fp16, sum);  // fp8 adds through fp16 (to_infinity): an fp16 overflow is one too
  if (std::isfinite(sum) && !std::isfinite(half)) ++overflows;
  return to_wire_counted(f, half, overflows);
}
}  // namespace

float collective_add(format_spec f, float a, float b) noexcept {
  std::int64_t ignored = 0;
  return collective_add_counted(f, a, b, ignored);
}

std::int64_t reduce_across_ranks(const reduce_spec& spec, std::span<const float> contributions, std::int64_t ranks,
                                 std::span<float> out) {
  if (spec.order == reduce_order::canonical) {
    throw error("reduce_across_ranks order", "canonical", "fp32_accumulate, ring or tree");
  }
  if (spec.predivide < 1 || spec.predivide > max_predivide || (spec.predivide & (spec.predivide - 1)) != 0) {
    throw error("reduce_across_ranks predivide", std::to_string(spec.predivide), "a power of two from 1 to 2^20");
  }
  // A power of two: dividing by it and multiplying back are exact in fp32 (barring fp32 subnormals/overflow).
  const auto factor = static_cast<float>(spec.predivide);
  const auto n = static_cast<std::size_t>(ranks);
  const std::size_t len = out.size();
  if (ranks < 1 || contributions.size() != n * len) {
    throw error("reduce_across_ranks contributions", std::to_string(contributions.size()) + " values",
                std::to_string(ranks) + " ranks x " + std::to_string(len) + " elements");
  }
  std::int64_t overflows = 0;
  const auto wire_of = [&](std::size_t r, std::size_t i) {
    // pre-divided, then sent in the wire format
    return to_wire_counted(spec.wire, contributions[r * len + i] / factor, overflows);
  };
  const auto add = [&](float a, float b) { return collective_add_counted(spec.wire, a, b, overflows); };
  std::vector<float> level(n);
  for (std::size_t i = 0; i < len; ++i) {
    switch (spec.order) {
      case reduce_order::fp32_accumulate: {
        float sum = 0.0f;
        for (std::size_t r = 0; r < n; ++r) sum += wire_of(r, i);
        // The reduced shard is all-gathered in the wire format.
        out[i] = to_wire_counted(spec.wire, sum, overflows) * factor;
        break;
      }
      case reduce_order::ring: {
        const std::size_t chunk = i * n / len;  // chunk c holds the elements with floor(i * n / len) == c
        float acc = wire_of((chunk + 1) % n, i);
        for (std::size_t hop = 2; hop <= n; ++hop) acc = add(acc, wire_of((chunk + hop) % n, i));
        out[i] = acc * factor;
        break;
      }
      case reduce_order::tree: {
        for (std::size_t r = 0; r < n; ++r) level[r] = wire_of(r, i);
        for (std::size_t m = n; m > 1; m = (m + 1) / 2) {
          for (std::size_t k = 0; k < m / 2; ++k) level[k] = add(level[2 * k], level[2 * k + 1]);
          if (m % 2 == 1) level[m / 2] = level[m - 1];
        }
        out[i] = level[0] * factor;
        break;
      }
      case reduce_order::canonical:
        break;
    }
  }
  return overflows;
}

std::vector<reduction_error_row> reduction_error_table(const std::vector<reduce_spec>& specs,
                                                       const std::vector<std::int64_t>& rank_counts,
                                                       std::int64_t elements, double sigma, std::uint64_t seed) {
  std::vector<reduction_error_row> rows;
  const auto len = static_cast<std::size_t>(elements);
  for (const std::int64_t ranks : rank_counts) {
    // The same draws for every spec at this N: the signal s, then each rank's noise.
    std::mt19937_64 g(seed ^ static_cast<std::uint64_t>(ranks));
    const auto n = static_cast<std::size_t>(ranks);
    std::vector<double> draws(len * (n + 1));
    for (double& d : draws) d = normal(g);
    for (const reduce_spec& spec : specs) {
      std::vector<float> inputs(n * len);
      std::vector<double> exact(len, 0.0);
      for (std::size_t r = 0; r < n; ++r) {
        for (std::size_t i = 0; i < len; ++i) {
          const float v = to_wire(spec.wire, static_cast<float>(draws[i] + sigma * draws[(r + 1) * len + i]));
          inputs[r * len + i] = v;
          exact[i] += static_cast<double>(v);
        }
      }
      std::vector<float> sum(len);
      reduce_across_ranks(spec, inputs, ranks, sum);
      double err2 = 0.0, ref2 = 0.0, floor2 = 0.0;
      for (std::size_t i = 0; i < len; ++i) {
        const double mean = exact[i] / static_cast<double>(n);
        const double got = static_cast<double>(sum[i] / static_cast<float>(ranks));  // fp32 post-divide
        const double once = static_cast<double>(to_wire(spec.wire, static_cast<float>(mean)));
        err2 += (got - mean) * (got - mean);
        floor2 += (once - mean) * (once - mean);
        ref2 += mean * mean;
      }
      rows.push_back(reduction_error_row{.spec = to_string(spec),
                                         .ranks = ranks,
                                         .relative_error = std::sqrt(err2 / ref2),
                                         .floor = std::sqrt(floor2 / ref2)});
    }
  }
  return rows;
}

std::vector<reduce_spec> report_reduce_specs() {
  std::vector<reduce_spec> specs;
  for (const format_spec f : {bf16, fp16, fp8_e4m3, fp8_e5m2}) {
    for (const reduce_order o : {reduce_order::fp32_accumulate, reduce_order::ring, reduce_order::tree}) {
      specs.push_back(reduce_spec{.order = o, .wire = f});
    }
  }
  return specs;
}

std::vector<std::int64_t> report_rank_counts() {
  std::vector<std::int64_t> n;
  for (std::int64_t k = 1; k <= 1024; k *= 2) n.push_back(k);
  return n;
}

}  // namespace safeamp::sim
