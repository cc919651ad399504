// Internal to safeamp::sim: GELU (tanh approximation) as bulk loops, one back-end per CPU path like the GEMM tiles
// and the AdamW update (portable, AVX2, AVX-512; cpu_path.hpp).
//
// Every back-end computes each element with exactly the float operations of the scalar functions below, in their
// order, each rounded once to fp32 (separate multiplies and adds, never an fma), and takes tanh from the same table
// entry or the same std::tanh call, so the vector width cannot change a bit. A vector holding an input that has
// no 16-bit code (a value that is not a normal fp16 / a finite bf16, e.g. an fp16 subnormal) is done by the scalar
// loop, element by element.
#pragma once

#include <cmath>
#include <cstdint>

#include "safeamp/config.hpp"
#include "safeamp/format/cpu_path.hpp"

namespace safeamp::sim::detail {

inline constexpr float gelu_c = 0.7978845608028654f;  // sqrt(2/pi)
inline constexpr float gelu_a = 0.044715f;
inline constexpr float gelu_3a = 3.0f * gelu_a;  // the constant g++ folds `3.0f * gelu_a * x * x` to

// GELU in three parts, so that the backward can take the forward's tanh instead of calling tanh again.
inline float gelu_inner(float x) noexcept { return gelu_c * (x + gelu_a * x * x * x); }
inline float gelu_from_tanh(float x, float t) noexcept { return 0.5f * x * (1.0f + t); }
inline float gelu_derivative_from_tanh(float x, float t) noexcept {
  const float du = gelu_c * (1.0f + gelu_3a * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

// ---- 16-bit codes of the table ---------------------------------------------------------------------------
//   float bits: s | e (8) | m (23).
//   bf16: x is a bf16 value iff the low 16 bits of m are zero; its code is bits >> 16 (inf/NaN excluded here).
//   fp16: x is a normal fp16 value iff e - 127 lies in [-14, 15] and the low 13 bits of m are zero; its code is
//         s << 15 | (e - 112) << 10 | m >> 13. Zero is code s << 15. fp16 subnormals are left to tanh.
inline constexpr std::uint32_t gelu_no_code = 0xFFFFFFFFu;

inline std::uint32_t gelu_bf16_code(std::uint32_t bits) noexcept {
  const bool finite = ((bits >> 23) & 0xFFu) != 0xFFu;
  return (bits & 0xFFFFu) == 0 && finite ? bits >> 16 : gelu_no_code;
}

inline std::uint32_t gelu_fp16_code(std::uint32_t bits) noexcept {
  const std::uint32_t e = (bits >> 23) & 0xFFu;
  const std::uint32_t sign = (bits >> 31) << 15;
  if ((bits & 0x7FFFFFFFu) == 0) return sign;
  if ((bits & 0x1FFFu) != 0 || e < 127 - 14 || e > 127 + 15) return gelu_no_code;
  return sign | ((e - 112) << 10) | ((bits & 0x7FFFFFu) >> 13);
}

struct gelu_forward_args {
  const float* in = nullptr;
  float* t = nullptr;    // tanh(gelu_inner(in[i])), kept for the backward
  float* out = nullptr;  // gelu(in[i])
  std::int64_t n = 0;
  const float* table = nullptr;  // tanh of every code of the 16-bit format, or null (every element calls tanh)
  bool fp16 = true;              // the table's codes: fp16 (true) or bf16
};

/// out[i] = gelu(in[i]), t[i] = its tanh, for i in [0, n), on path p.
void gelu_forward(cpu_path p, const gelu_forward_args& a) noexcept;

/// Elements [begin, end) in plain scalar code, the reference every back-end gives the bits of.
inline void gelu_forward_scalar(const gelu_forward_args& a, std::int64_t begin, std::int64_t end) noexcept {
  for (std::int64_t i = begin; i < end; ++i) {
    const std::uint32_t bits = safeamp::bit_cast<std::uint32_t>(a.in[i]);
    const std::uint32_t c =
        a.table == nullptr ? gelu_no_code : a.fp16 ? gelu_fp16_code(bits) : gelu_bf16_code(bits);
    a.t[i] = c != gelu_no_code ? a.table[c] : std::tanh(gelu_inner(a.in[i]));
    a.out[i] = gelu_from_tanh(a.in[i], a.t[i]);
  }
}

/// dx[i] = dy[i] * gelu'(x[i]) from the forward's tanh t[i], for i in [0, n), on path p.
void gelu_backward(cpu_path p, const float* x, const float* t, const float* dy, float* dx, std::int64_t n) noexcept;

inline void gelu_backward_scalar(const float* x, const float* t, const float* dy, float* dx, std::int64_t begin,
                                 std::int64_t end) noexcept {
  for (std::int64_t i = begin; i < end; ++i) dx[i] = dy[i] * gelu_derivative_from_tanh(x[i], t[i]);
}

namespace avx2 {
void gelu_forward(const gelu_forward_args& a) noexcept;
void gelu_backward(const float* x, const float* t, const float* dy, float* dx, std::int64_t n) noexcept;
}  // namespace avx2
namespace avx512 {
void gelu_forward(const gelu_forward_args& a) noexcept;
void gelu_backward(const float* x, const float* t, const float* dy, float* dx, std::int64_t n) noexcept;
}  // namespace avx512

}  // namespace safeamp::sim::detail
