// static_assert suite: every limit of every named format, and of a few generic ones, against numbers derived
// by hand from the format definitions (IEEE 754-2019 binary16/32, bfloat16, OCP FP8 v1.0 E4M3/E5M2, NVIDIA TF32):
//   bias = 2^(E-1) - 1, emin = 1 - bias, emax = 2^E - 2 - bias (2^E - 1 - bias without infinity),
//   max = (2 - 2^-M) 2^emax (ieee) or (2 - 2^(1-M)) 2^emax (fn), min normal 2^emin, min subnormal 2^(emin - M),
//   epsilon 2^-M, unit roundoff 2^-(M+1), digits M + 1.
// If this file compiles, the checks passed; the test case only confirms that at run time.
#include <catch2/catch.hpp>
#include <limits>
#include <type_traits>

#include "safeamp/format.hpp"

namespace {
using namespace safeamp;

constexpr std::uint32_t f32_bits(float x) { return safeamp::bit_cast<std::uint32_t>(x); }

// fp32: bias 127, emin -126, emax 127.
static_assert(exponent_bias(fp32) == 127 && min_exponent(fp32) == -126 && max_exponent(fp32) == 127);
static_assert(f32_bits(max_finite(fp32)) == 0x7F7FFFFFu);  // 3.40282347e38
static_assert(min_normal(fp32) == 1.17549435e-38f);
static_assert(f32_bits(min_subnormal(fp32)) == 0x00000001u);  // 2^-149
static_assert(epsilon(fp32) == 1.1920929e-07f && unit_roundoff(fp32) == 5.96046448e-08f);
static_assert(digits(fp32) == 24 && storage_bytes(fp32) == 4 && total_bits(fp32) == 32);

// tf32: 8 exponent bits, 10 stored mantissa bits, stored in 4 bytes.
static_assert(exponent_bias(tf32) == 127 && min_exponent(tf32) == -126 && max_exponent(tf32) == 127);
static_assert(f32_bits(max_finite(tf32)) == 0x7F7FE000u);  // (2 - 2^-10) 2^127
static_assert(min_normal(tf32) == 1.17549435e-38f && f32_bits(min_subnormal(tf32)) == 0x00002000u);  // 2^-136
static_assert(epsilon(tf32) == 0.0009765625f && unit_roundoff(tf32) == 0.00048828125f);
static_assert(digits(tf32) == 11 && storage_bytes(tf32) == 4 && total_bits(tf32) == 19);

// fp16 (binary16): bias 15, emin -14, emax 15; max 65504 = 0x7BFF, inf 0x7C00, qNaN 0x7E00.
static_assert(exponent_bias(fp16) == 15 && min_exponent(fp16) == -14 && max_exponent(fp16) == 15);
static_assert(max_finite(fp16) == 65504.0f && min_normal(fp16) == 6.103515625e-05f);
static_assert(min_subnormal(fp16) == 5.9604644775390625e-08f);
static_assert(epsilon(fp16) == 0.0009765625f && unit_roundoff(fp16) == 0.00048828125f);
static_assert(digits(fp16) == 11 && storage_bytes(fp16) == 2 && has_infinity(fp16));
static_assert(max_finite_code(fp16) == 0x7BFFu && infinity_code(fp16) == 0x7C00u &&
              canonical_nan_code(fp16) == 0x7E00u);
static_assert(sign_bit(fp16) == 0x8000u);

// bf16: bias 127; max (2 - 2^-7) 2^127 = 0x7F7F, min subnormal 2^-133.
static_assert(exponent_bias(bf16) == 127 && min_exponent(bf16) == -126 && max_exponent(bf16) == 127);
static_assert(f32_bits(max_finite(bf16)) == 0x7F7F0000u && min_normal(bf16) == 1.17549435e-38f);
static_assert(f32_bits(min_subnormal(bf16)) == 0x00010000u);  // 2^-133 = 2^16 * 2^-149
static_assert(epsilon(bf16) == 0.0078125f && unit_roundoff(bf16) == 0.00390625f);
static_assert(digits(bf16) == 8 && storage_bytes(bf16) == 2);
static_assert(max_finite_code(bf16) == 0x7F7Fu && infinity_code(bf16) == 0x7F80u &&
              canonical_nan_code(bf16) == 0x7FC0u);

// E4M3 (OCP, "fn"): bias 7, emin -6, emax 8, max 448 = S.1111.110, NaN S.1111.111, no infinity.
static_assert(exponent_bias(fp8_e4m3) == 7 && min_exponent(fp8_e4m3) == -6 && max_exponent(fp8_e4m3) == 8);
static_assert(max_finite(fp8_e4m3) == 448.0f && min_normal(fp8_e4m3) == 0.015625f);
static_assert(min_subnormal(fp8_e4m3) == 0.001953125f);
static_assert(epsilon(fp8_e4m3) == 0.125f && unit_roundoff(fp8_e4m3) == 0.0625f);
static_assert(digits(fp8_e4m3) == 4 && storage_bytes(fp8_e4m3) == 1 && !has_infinity(fp8_e4m3));
static_assert(max_finite_code(fp8_e4m3) == 0x7Eu && canonical_nan_code(fp8_e4m3) == 0x7Fu);

// E5M2 (OCP): bias 15, emin -14, emax 15, max 57344 = 1.75 2^15 = 0x7B, inf 0x7C.
static_assert(exponent_bias(fp8_e5m2) == 15 && min_exponent(fp8_e5m2) == -14 && max_exponent(fp8_e5m2) == 15);
static_assert(max_finite(fp8_e5m2) == 57344.0f && min_normal(fp8_e5m2) == 6.103515625e-05f);
static_assert(min_subnormal(fp8_e5m2) == 1.52587890625e-05f);
static_assert(epsilon(fp8_e5m2) == 0.25f && unit_roundoff(fp8_e5m2) == 0.125f);
static_assert(digits(fp8_e5m2) == 3 && storage_bytes(fp8_e5m2) == 1);
static_assert(max_finite_code(fp8_e5m2) == 0x7Bu && infinity_code(fp8_e5m2) == 0x7Cu &&
              canonical_nan_code(fp8_e5m2) == 0x7Eu);

// Generic: e3m2 (ieee): bias 3, emin -2, emax 3, max 1.75 * 8 = 14, min subnormal 2^-4.
constexpr format_spec e3m2{3, 2, special_values::ieee};
static_assert(max_finite(e3m2) == 14.0f && min_normal(e3m2) == 0.25f && min_subnormal(e3m2) == 0.0625f);
// e3m2fnnan (NaN-reserving; "e3m2fn" before issue 16): emax 4, max (2 - 2^-1) 16 = 24.
constexpr format_spec e3m2fnnan{3, 2, special_values::finite_nan};
static_assert(max_finite(e3m2fnnan) == 24.0f && max_exponent(e3m2fnnan) == 4 && !has_infinity(e3m2fnnan));
// e2m1fnnan: emax 2, max (2 - 2^0) 4 = 4 (the trap: OCP FP4 "e2m1fn" has max 6).
static_assert(max_finite(format_spec{2, 1, special_values::finite_nan}) == 4.0f);
// e2m1 (ieee): bias 1, emin 0, emax 1, max 1.5 * 2 = 3, min subnormal 0.5.
constexpr format_spec e2m1{2, 1, special_values::ieee};
static_assert(max_finite(e2m1) == 3.0f && min_normal(e2m1) == 1.0f && min_subnormal(e2m1) == 0.5f);
// e8m1 (ieee): max 1.5 * 2^127, min subnormal 2^-127.
constexpr format_spec e8m1{8, 1, special_values::ieee};
static_assert(max_finite(e8m1) == 2.55211775e38f && min_subnormal(e8m1) == 5.87747175e-39f);
// e7m23: fp32's precision with a smaller range, emin -62, max (2 - 2^-23) 2^63.
constexpr format_spec e7m23{7, 23, special_values::ieee};
static_assert(min_exponent(e7m23) == -62 && max_finite(e7m23) == 1.8446742974197924e19f && digits(e7m23) == 24);

// ---- the ml_dtypes / OCP formats of issue 16, each limit derived by hand from its definition ----------------
// float8_e4m3fnuz: bias 8 (ml_dtypes README: "exponent bias 8"), emin 1-8 = -7, emax 15-8 = 7 (the top binade
// is finite), max 1.875 * 2^7 = 240, min subnormal 2^(-7-3) = 2^-10; NaN is 0x80 (the code of -0).
static_assert(exponent_bias(fp8_e4m3fnuz) == 8 && min_exponent(fp8_e4m3fnuz) == -7 && max_exponent(fp8_e4m3fnuz) == 7);
static_assert(max_finite(fp8_e4m3fnuz) == 240.0f && min_normal(fp8_e4m3fnuz) == 0.0078125f);
static_assert(min_subnormal(fp8_e4m3fnuz) == 0.0009765625f && epsilon(fp8_e4m3fnuz) == 0.125f);
static_assert(max_finite_code(fp8_e4m3fnuz) == 0x7Fu && canonical_nan_code(fp8_e4m3fnuz) == 0x80u);
static_assert(!has_infinity(fp8_e4m3fnuz) && has_nan(fp8_e4m3fnuz) && !has_negative_zero(fp8_e4m3fnuz));
// float8_e5m2fnuz: bias 16, emin -15, emax 31-16 = 15, max 1.75 * 2^15 = 57344, min subnormal 2^-17.
static_assert(exponent_bias(fp8_e5m2fnuz) == 16 && min_exponent(fp8_e5m2fnuz) == -15 &&
              max_exponent(fp8_e5m2fnuz) == 15);
static_assert(max_finite(fp8_e5m2fnuz) == 57344.0f && min_normal(fp8_e5m2fnuz) == 3.0517578125e-05f);
static_assert(min_subnormal(fp8_e5m2fnuz) == 7.62939453125e-06f && max_finite_code(fp8_e5m2fnuz) == 0x7Fu);
// float8_e4m3b11fnuz: bias 11, emin -10, emax 15-11 = 4, max 1.875 * 16 = 30, min subnormal 2^-13.
static_assert(exponent_bias(fp8_e4m3b11fnuz) == 11 && min_exponent(fp8_e4m3b11fnuz) == -10);
static_assert(max_finite(fp8_e4m3b11fnuz) == 30.0f && min_normal(fp8_e4m3b11fnuz) == 0.0009765625f);
static_assert(min_subnormal(fp8_e4m3b11fnuz) == 0.0001220703125f);
// OCP MX v1.0 table 5 (FP4 E2M1): bias 1, emax 2, max 1.5 * 4 = 6, min normal 1, min subnormal 0.5; no inf/NaN.
static_assert(exponent_bias(fp4_e2m1) == 1 && max_exponent(fp4_e2m1) == 2 && max_finite(fp4_e2m1) == 6.0f);
static_assert(min_normal(fp4_e2m1) == 1.0f && min_subnormal(fp4_e2m1) == 0.5f && total_bits(fp4_e2m1) == 4);
static_assert(max_finite_code(fp4_e2m1) == 0x7u && !has_nan(fp4_e2m1) && !has_infinity(fp4_e2m1));
static_assert(has_negative_zero(fp4_e2m1) && storage_bytes(fp4_e2m1) == 1);
// OCP MX v1.0 table 4 (FP6 E2M3): bias 1, emax 2, max 1.875 * 4 = 7.5, min normal 1, min subnormal 2^-3.
static_assert(max_finite(fp6_e2m3) == 7.5f && min_normal(fp6_e2m3) == 1.0f && min_subnormal(fp6_e2m3) == 0.125f);
static_assert(total_bits(fp6_e2m3) == 6 && max_finite_code(fp6_e2m3) == 0x1Fu);
// OCP MX v1.0 table 4 (FP6 E3M2): bias 3, emax 4, max 1.75 * 16 = 28, min normal 2^-2, min subnormal 2^-4.
static_assert(max_finite(fp6_e3m2) == 28.0f && min_normal(fp6_e3m2) == 0.25f && min_subnormal(fp6_e3m2) == 0.0625f);
// OCP MX v1.0 table 7 (E8M0 scale): bias 127, values 2^-127 .. 2^127, 0xFF NaN, no zero, no sign.
static_assert(exponent_bias(e8m0) == 127 && min_exponent(e8m0) == -127 && max_exponent(e8m0) == 127);
static_assert(max_finite(e8m0) == 1.70141183e38f && min_normal(e8m0) == 5.87747175e-39f);
static_assert(min_subnormal(e8m0) == min_normal(e8m0) && total_bits(e8m0) == 8 && epsilon(e8m0) == 1.0f);
static_assert(max_finite_code(e8m0) == 0xFEu && canonical_nan_code(e8m0) == 0xFFu && sign_bit(e8m0) == 0u);
// ml_dtypes float8_e3m4 (IEEE-style): bias 3, emax 3, max (2 - 2^-4) 8 = 15.5, min subnormal 2^-6.
static_assert(max_finite(fp8_e3m4) == 15.5f && min_normal(fp8_e3m4) == 0.25f && min_subnormal(fp8_e3m4) == 0.015625f);
// ml_dtypes float8_e4m3 (IEEE-style): bias 7, emax 7, max 1.875 * 128 = 240, min subnormal 2^-9.
static_assert(max_finite(fp8_e4m3ieee) == 240.0f && min_subnormal(fp8_e4m3ieee) == 0.001953125f);

// Rounding into them, as constant expressions (values from the definitions and ml_dtypes' casts):
static_assert(round_to<fp4_e2m1>(1e9f) == 6.0f && round_to<fp4_e2m1>(-7.0f) == -6.0f);  // MX: saturate always
static_assert(round_to<fp4_e2m1>(5.0f) == 4.0f && round_to<fp4_e2m1>(0.25f) == 0.0f);   // ties to even
static_assert(encode(fp4_e2m1, std::numeric_limits<float>::infinity()) == 0x7u);
static_assert(encode(fp8_e4m3fnuz, -0.0f) == 0x00u && encode(fp8_e4m3fnuz, -1e-30f) == 0x00u);  // no -0
static_assert(encode(fp8_e4m3fnuz, std::numeric_limits<float>::infinity()) == 0x80u);           // inf -> NaN
static_assert(encode(fp8_e4m3fnuz, -1.0f) == 0xC0u && encode(fp8_e4m3b11fnuz, -1.0f) == 0xD8u);
static_assert(encode(e8m0, 3.0f) == 0x81u && encode(e8m0, 0.75f) == 0x7Fu && encode(e8m0, 1.0f) == 0x7Fu);
static_assert(encode(e8m0, 0.0f) == 0xFFu && encode(e8m0, -2.0f) == 0xFFu && decode(e8m0, 0u) == 5.87747175e-39f);

// Names: ml_dtypes' spellings parse to these descriptors, and every one prints back to a name that parses.
static_assert([] {
  format_spec f{};
  return detail::parse_format_name("float4_e2m1fn", f) && f == fp4_e2m1;
}());
static_assert([] {
  format_spec f{};
  return detail::parse_format_name("float8_e4m3b11fnuz", f) && f == fp8_e4m3b11fnuz;
}());
static_assert([] {
  format_spec f{};
  return detail::parse_format_name("e3m2fnnan", f) && f == format_spec{3, 2, special_values::finite_nan};
}());

// Compile-time rounding: the traps, as constant expressions.
static_assert(encode(fp16, 65520.0f) == 0x7C00u && encode(fp16, 65519.99f) == 0x7BFFu);
static_assert(round_to<fp8_e5m2>(61439.996f) == 57344.0f);
static_assert(round_to<fp8_e4m3>(464.0f) == 448.0f);
static_assert(round_to<fp8_e4m3, round_options{.on_overflow = overflow::saturate}>(1e9f) == 448.0f);
static_assert(decode(fp16, encode(fp16, -0.0f)) == 0.0f && encode(fp16, -0.0f) == 0x8000u);

// Invalid descriptors: make_format in a constant expression is not a constant (it throws), so a template
// argument built from it does not exist: detected here with a requires-expression.
template <int E, int M, special_values S = special_values::ieee>
constexpr bool constant_format = requires {
  typename std::integral_constant<int, make_format(exponent_width{E}, mantissa_width{M}, S).exponent_bits>;
};
static_assert(constant_format<5, 10>);
static_assert(constant_format<4, 3, special_values::finite_nan>);
static_assert(!constant_format<9, 3>);
static_assert(!constant_format<1, 3>);
static_assert(!constant_format<5, 0>);
static_assert(!constant_format<5, 24>);
static_assert(!constant_format<8, 3, special_values::finite_nan>);
static_assert(!is_valid(format_spec{9, 3}) && !is_valid(format_spec{5, 0}) && is_valid(fp8_e4m3));

// make_format's widths are named by their types: the swapped order, bare numbers and unnamed braces do not
// compile (a requires-expression sees the failed overload resolution).
template <class Exponent, class Mantissa>
constexpr bool makes_format = requires(Exponent e, Mantissa m) {
  make_format(e, m);
};
static_assert(makes_format<exponent_width, mantissa_width>);
static_assert(!makes_format<mantissa_width, exponent_width>);
static_assert(!makes_format<int, int>);
static_assert(!makes_format<exponent_width, int>);
static_assert(!std::is_convertible_v<int, exponent_width> && !std::is_convertible_v<int, mantissa_width>);
template <class T>  // T = int: make_format({4}, {3}) (a type-dependent form, so that the failure is not a hard error)
constexpr bool makes_format_from_braces = requires(T e, T m) {
  make_format({e}, {m});
};
static_assert(!makes_format_from_braces<int>);
static_assert(make_format(exponent_width{5}, mantissa_width{2}) == fp8_e5m2);
}  // namespace

TEST_CASE("the format limits static_assert suite compiled") {
  CHECK(safeamp::max_finite(safeamp::fp8_e4m3) == 448.0f);  // the same facts, now at run time
  CHECK(safeamp::max_finite(safeamp::fp16) == 65504.0f);
}
