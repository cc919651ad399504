// Slow, obviously-correct references for rounding to a (sign, E exponent bits, M mantissa bits) format.
// Written from the format definition only (no safeamp code): the limits come from the textbook formulas,
// and the rounding from exact big-integer arithmetic (Boost.Multiprecision cpp_int): |x| = m 2^e exactly,
// the quantum Q = 2^(max(floor(log2|x|), emin) - M), k = floor(|x| / Q), remainder compared exactly.
#pragma once

#include <boost/multiprecision/cpp_int.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace oracle {

enum class mode { nearest_even, toward_zero, toward_pos_inf, toward_neg_inf, stochastic };

struct format {
  int exponent_bits;
  int mantissa_bits;
  bool finite_nan;      // OCP "fn" (8 bits): no infinity, only all-ones is NaN
  bool fnuz = false;    // no infinity, no -0, one NaN (the -0 code); every other code finite
  bool no_nan = false;  // OCP MX FP6/FP4: no infinity and no NaN; conversion always saturates
  int bias_offset = 0;  // added to the IEEE bias 2^(E-1) - 1

  bool ieee() const { return !finite_nan && !fnuz && !no_nan; }
  int bias() const { return (1 << (exponent_bits - 1)) - 1 + bias_offset; }
  int emin() const { return 1 - bias(); }
  int emax() const { return ((1 << exponent_bits) - (ieee() ? 2 : 1)) - bias(); }
  // Largest finite significand in quanta of 2^(emax - M): all ones, or all ones but the last for "fn".
  double max_finite() const {
    const double top = std::ldexp(1.0, mantissa_bits + 1) - (finite_nan ? 2.0 : 1.0);
    return std::ldexp(top, emax() - mantissa_bits);
  }
  double min_normal() const { return std::ldexp(1.0, emin()); }
};

inline std::uint32_t float_bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
inline float bits_float(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

struct options {
  mode rounding = mode::nearest_even;
  bool saturate = false;
  bool flush_subnormals = false;
  std::uint32_t random_bits = 0;  // stochastic: up iff random_bits + floor(2^32 frac) >= 2^32
};

/// The rounded value of x (float or double) as float bits. NaN: sign kept, quiet bit set, the top M bits
/// of the float payload kept (a double payload is first cut to its top 23 bits, as a float would carry it);
/// for "fn" formats the one NaN, decoded with all M payload bits set.
template <class T>
std::uint32_t round_bits(const format& f, T x, const options& o) {
  using boost::multiprecision::cpp_int;
  const bool negative = std::signbit(x);
  const std::uint32_t sign = negative ? 0x80000000u : 0u;
  const int M = f.mantissa_bits;
  const std::uint32_t payload_mask = ((1u << M) - 1u) << (23 - M);
  if (std::isnan(x)) {
    std::uint32_t payload = 0;
    if constexpr (sizeof(T) == 4) {
      payload = float_bits(static_cast<float>(x)) & 0x7FFFFFu;
    } else {
      std::uint64_t u;
      std::memcpy(&u, &x, 8);
      payload = static_cast<std::uint32_t>((u & ((std::uint64_t{1} << 52) - 1)) >> 29);
    }
    if (f.fnuz) return 0x7FC00000u;           // the one NaN has no sign and no payload
    if (f.no_nan) return sign | 0x7FC00000u;  // no NaN code: stays a float NaN with its sign
    return sign | 0x7FC00000u | (f.finite_nan ? payload_mask : (payload & payload_mask));
  }
  const double inf_value = f.ieee() ? INFINITY : f.no_nan ? f.max_finite() : std::numeric_limits<double>::quiet_NaN();
  const bool away = o.rounding == mode::nearest_even || o.rounding == mode::stochastic ||
                    (o.rounding == mode::toward_pos_inf && !negative) ||
                    (o.rounding == mode::toward_neg_inf && negative);
  auto finish = [&](double magnitude) -> std::uint32_t {
    if (std::isnan(magnitude)) return f.fnuz ? 0x7FC00000u : sign | 0x7FC00000u | payload_mask;
    if (magnitude == 0 && f.fnuz) return 0u;                  // no -0
    return sign | float_bits(static_cast<float>(magnitude));  // every format value is a float
  };
  if (std::isinf(x)) return finish(o.saturate ? f.max_finite() : inf_value);
  const T ax = std::fabs(x);
  if (ax == 0) return finish(0.0);

  // |x| = m * 2^e with an integer m.
  int e = 0;
  const T frac = std::frexp(ax, &e);  // ax = frac * 2^e, frac in [0.5, 1)
  constexpr int digits = std::numeric_limits<T>::digits;
  const auto m = static_cast<std::uint64_t>(std::ldexp(frac, digits));
  e -= digits;
  const int log2x = std::ilogb(ax);
  const int qe = (log2x > f.emin() ? log2x : f.emin()) - M;  // quantum exponent

  cpp_int k, rem, den;
  if (e >= qe) {
    k = cpp_int(m) << (e - qe);
    rem = 0;
    den = 1;
  } else {
    const unsigned d = static_cast<unsigned>(qe - e);
    den = cpp_int(1) << d;
    k = cpp_int(m) >> d;
    rem = cpp_int(m) - (k << d);
  }
  bool up = false;
  switch (o.rounding) {
    case mode::nearest_even:
      up = 2 * rem > den || (2 * rem == den && (k & 1) != 0);
      break;
    case mode::toward_zero:
      up = false;
      break;
    case mode::toward_pos_inf:
      up = rem != 0 && !negative;
      break;
    case mode::toward_neg_inf:
      up = rem != 0 && negative;
      break;
    case mode::stochastic: {
      const cpp_int frac32 = (rem << 32) / den;  // floor(2^32 rem / den)
      up = cpp_int(o.random_bits) + frac32 >= (cpp_int(1) << 32);
      break;
    }
  }
  if (up) k += 1;
  const double value = std::ldexp(k.convert_to<double>(), qe);  // k <= 2^(M+1): exact
  if (value > f.max_finite()) return finish(o.saturate || !away || f.no_nan ? f.max_finite() : inf_value);
  if (o.flush_subnormals && value < f.min_normal()) return finish(0.0);
  return finish(value);
}

/// Value of a code from the format definition: (-1)^s 2^(e - bias) (1 + m/2^M), subnormal 2^(1 - bias) (m/2^M);
/// the specials of each kind (fnuz: the code of -0 is the NaN); NaN as a float qNaN with the code's sign.
inline float value_of(const format& f, std::uint32_t code) {
  const int M = f.mantissa_bits, E = f.exponent_bits;
  const bool s = (code >> (E + M)) & 1u;
  const int e = static_cast<int>((code >> M) & ((1u << E) - 1u));
  const int m = static_cast<int>(code & ((1u << M) - 1u));
  const int top = (1 << E) - 1;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  if (f.fnuz && s && e == 0 && m == 0) return nan;
  if (f.ieee() && e == top) return s ? (m == 0 ? -inf : -nan) : (m == 0 ? inf : nan);
  if (f.finite_nan && e == top && m == (1 << M) - 1) return s ? -nan : nan;
  const float v = e == 0 ? std::ldexp(static_cast<float>(m), f.emin() - M)
                         : std::ldexp(static_cast<float>((1 << M) + m), e - f.bias() - M);
  return s ? -v : v;
}

/// 2^e for -1074 <= e <= 1023, written as its binary64 bits (IEEE 754: biased exponent e + 1023 and a zero
/// significand for a normal power, the significand's bit e + 1074 alone for a subnormal one), for the fast reference.
inline double pow2(int e) {
  const std::uint64_t bits =
      e >= -1022 ? static_cast<std::uint64_t>(e + 1023) << 52 : std::uint64_t{1} << static_cast<unsigned>(e + 1074);
  double v = 0.0;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

/// A format with its limits computed once, for the fast reference (called 2^32 times).
struct prepared_format {
  format f;
  double max_finite;
  int emin;
};
inline prepared_format prepare(const format& f) { return {f, f.max_finite(), f.emin()}; }

/// Fast reference for every mode from float (for the exhaustive and dense sweeps, called billions of times):
/// binary64 arithmetic instead of cpp_int, which is exact here: t = |x| / Q is a power-of-two scaling of a 24-bit
/// significand (no under/overflow), floor(t) and t - floor(t) are exact, and so is the 32-bit fraction
/// floor(2^32 (t - floor(t))) (t has at most 24 significant bits). The rules are round_bits' (sign, NaN, fnuz,
/// no-NaN formats, saturation, flush after rounding, overflow decided after rounding); the source is float only.
/// Always inlined: in the exhaustive suites' loops, with the options known there, the mode's switch and the option
/// tests fold away. overflowed (when given) says whether x is finite and its rounded magnitude exceeds max finite,
/// before saturation (what round_span's overflow counter counts).
[[gnu::always_inline]] inline std::uint32_t round_fast(const prepared_format& p, float x, const options& o = {},
                                                       bool* overflowed = nullptr) {
  const format& f = p.f;
  if (overflowed != nullptr) *overflowed = false;
  const std::uint32_t u = float_bits(x);
  const bool negative = (u >> 31) != 0;
  const std::uint32_t sign = u & 0x80000000u;
  const int M = f.mantissa_bits;
  const std::uint32_t payload_mask = ((1u << M) - 1u) << (23 - M);
  const std::uint32_t nan_result = f.fnuz     ? 0x7FC00000u
                                   : f.no_nan ? sign | 0x7FC00000u
                                              : sign | 0x7FC00000u | payload_mask;  // fn: the all-ones NaN
  if (std::isnan(x)) return f.ieee() ? sign | 0x7FC00000u | (u & payload_mask) : nan_result;
  const bool away = o.rounding == mode::nearest_even || o.rounding == mode::stochastic ||
                    (o.rounding == mode::toward_pos_inf && !negative) ||
                    (o.rounding == mode::toward_neg_inf && negative);
  // What overflow (and an infinite input, when not saturating) becomes: inf, the NaN, or max for no-NaN formats.
  const std::uint32_t inf_result = f.ieee()   ? sign | 0x7F800000u
                                   : f.no_nan ? sign | float_bits(static_cast<float>(p.max_finite))
                                              : nan_result;
  const std::uint32_t max_result = sign | float_bits(static_cast<float>(p.max_finite));
  if (std::isinf(x)) return o.saturate ? max_result : inf_result;
  const double ax = std::fabs(static_cast<double>(x));
  double r = 0.0;
  if (ax != 0.0) {
    // floor(log2 |x|): the biased exponent field of the double, which is normal for every nonzero float (what
    // std::ilogb returns, without its call: this runs 2^33 times in the FP8 suite).
    std::uint64_t ax_bits = 0;
    std::memcpy(&ax_bits, &ax, sizeof ax_bits);
    const int log2x = static_cast<int>(ax_bits >> 52) - 1023;
    const int qe = (log2x > p.emin ? log2x : p.emin) - M;
    const double t = ax * pow2(-qe);  // exact: a power of two, no under/overflow
    // floor(t) as the truncating conversion (t is nonnegative and below 2^25, so both are exact and equal).
    const double whole = static_cast<double>(static_cast<std::int64_t>(t)), frac = t - whole;
    bool up = false;
    switch (o.rounding) {
      case mode::nearest_even:
        up = frac > 0.5 || (frac == 0.5 && (static_cast<std::int64_t>(whole) & 1u) != 0);  // whole < 2^25
        break;
      case mode::toward_zero:
        break;
      case mode::toward_pos_inf:
        up = frac != 0.0 && !negative;
        break;
      case mode::toward_neg_inf:
        up = frac != 0.0 && negative;
        break;
      case mode::stochastic:
        up = static_cast<double>(o.random_bits) + std::floor(frac * 0x1p32) >= 0x1p32;
        break;
    }
    r = (whole + (up ? 1.0 : 0.0)) * pow2(qe);
  }
  if (r > p.max_finite) {
    if (overflowed != nullptr) *overflowed = true;
    return o.saturate || !away || f.no_nan ? max_result : inf_result;
  }
  if (o.flush_subnormals && r < f.min_normal()) r = 0.0;
  if (r == 0.0 && f.fnuz) return 0u;  // no -0
  return sign | float_bits(static_cast<float>(r));
}

/// Nearest even (the exhaustive suites' common case).
inline std::uint32_t round_nearest_fast(const prepared_format& p, float x) { return round_fast(p, x); }

/// Reference for the unsigned exponent-only E8M0 (OCP MX v1.0 section 5.4.1: 2^(field - 127) for fields 0..254,
/// 0xFF NaN; no sign, no zero), from float, by its definition: x = 2^e (1 + r), 0 <= r < 1, lies between 2^e and
/// 2^(e+1); nearest goes up when 2^(e+1) is at least as close (ties up: the one kept significand bit, the
/// implicit 1, is odd), stochastic with probability floor(2^32 r) / 2^32. Negative, zero and NaN inputs give NaN;
/// results below 2^-127 give 2^-127 (there is no zero); above 2^127 (and +inf) NaN, or 2^127 when saturating or
/// when the mode rounds toward zero. Returns the float bits of the value (NaN: +qNaN). overflowed (when given):
/// x is finite and positive and its rounded exponent exceeds 127.
inline std::uint32_t round_e8m0(float x, const options& o = {}, bool* overflowed = nullptr) {
  if (overflowed != nullptr) *overflowed = false;
  const std::uint32_t nan = 0x7FC00000u, max_bits = float_bits(std::ldexp(1.0f, 127));
  if (std::isnan(x) || std::signbit(x) || x == 0.0f) return nan;
  if (std::isinf(x)) return o.saturate ? max_bits : nan;
  int e2 = 0;
  const double m = std::frexp(static_cast<double>(x), &e2);  // x = m 2^e2, m in [0.5, 1)
  const int e = e2 - 1;
  const double r = 2.0 * m - 1.0;  // exact
  bool up = false;
  switch (o.rounding) {
    case mode::nearest_even:
      up = r >= 0.5;
      break;
    case mode::toward_zero:
    case mode::toward_neg_inf:
      break;
    case mode::toward_pos_inf:
      up = r != 0.0;
      break;
    case mode::stochastic:
      up = static_cast<double>(o.random_bits) + std::floor(r * 0x1p32) >= 0x1p32;
      break;
  }
  const int result = e + (up ? 1 : 0);
  if (result < -127) return float_bits(std::ldexp(1.0f, -127));
  if (result > 127) {
    if (overflowed != nullptr) *overflowed = true;
    const bool away =
        o.rounding == mode::nearest_even || o.rounding == mode::stochastic || o.rounding == mode::toward_pos_inf;
    return o.saturate || !away ? max_bits : nan;
  }
  return float_bits(std::ldexp(1.0f, result));
}

}  // namespace oracle
