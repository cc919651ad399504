// The AVX2 and AVX-512 back-ends of GELU (activation_kernels.hpp), compiled inside cpu_path.hpp's target regions;
// run only when active_cpu_path() selects them. A vector's 16-bit codes are worked out lane by lane with integer
// operations; when every lane has one, tanh is a gather from the table, otherwise the vector takes the scalar loop.
// The float arithmetic is the scalar functions' (separate multiplies and adds, in their order).
#include "activation_kernels.hpp"

#if defined(SAFEAMP_X86_KERNELS)

#include <immintrin.h>

namespace safeamp::sim::detail {

SAFEAMP_DETAIL_AVX2_BEGIN

namespace avx2 {
namespace {

// The codes of 8 floats and whether every lane has one.
inline __m256i codes(__m256i bits, bool fp16, bool& all) noexcept {
  if (!fp16) {
    const __m256i low_zero = _mm256_cmpeq_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0xFFFF)), _mm256_setzero_si256());
    const __m256i e = _mm256_and_si256(_mm256_srli_epi32(bits, 23), _mm256_set1_epi32(0xFF));
    const __m256i finite = _mm256_xor_si256(_mm256_cmpeq_epi32(e, _mm256_set1_epi32(0xFF)), _mm256_set1_epi32(-1));
    all = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_and_si256(low_zero, finite))) == 0xFF;
    return _mm256_srli_epi32(bits, 16);
  }
  const __m256i e = _mm256_and_si256(_mm256_srli_epi32(bits, 23), _mm256_set1_epi32(0xFF));
  const __m256i sign = _mm256_slli_epi32(_mm256_srli_epi32(bits, 31), 15);
  const __m256i zero = _mm256_cmpeq_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x7FFFFFFF)), _mm256_setzero_si256());
  const __m256i low_zero = _mm256_cmpeq_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x1FFF)), _mm256_setzero_si256());
  const __m256i in_range = _mm256_and_si256(_mm256_cmpgt_epi32(e, _mm256_set1_epi32(127 - 15)),
                                            _mm256_cmpgt_epi32(_mm256_set1_epi32(127 + 16), e));
  const __m256i ok = _mm256_or_si256(zero, _mm256_and_si256(low_zero, in_range));
  all = _mm256_movemask_ps(_mm256_castsi256_ps(ok)) == 0xFF;
  const __m256i normal = _mm256_or_si256(
      _mm256_or_si256(sign, _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(112)), 10)),
      _mm256_srli_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x7FFFFF)), 13));
  return _mm256_blendv_epi8(normal, sign, zero);
}

}  // namespace

void gelu_forward(const gelu_forward_args& a) noexcept {
  constexpr std::int64_t lanes = 8;
  const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
  std::int64_t i = 0;
  if (a.table != nullptr) {
    for (; i + lanes <= a.n; i += lanes) {
      const __m256 x = _mm256_loadu_ps(a.in + i);
      bool all = false;
      const __m256i c = codes(_mm256_castps_si256(x), a.fp16, all);
      if (!all) {
        gelu_forward_scalar(a, i, i + lanes);
        continue;
      }
      const __m256 t = _mm256_i32gather_ps(a.table, c, 4);
      _mm256_storeu_ps(a.t + i, t);
      _mm256_storeu_ps(a.out + i, _mm256_mul_ps(_mm256_mul_ps(half, x), _mm256_add_ps(one, t)));
    }
  }
  gelu_forward_scalar(a, i, a.n);
}

void gelu_backward(const float* x, const float* t, const float* dy, float* dx, std::int64_t n) noexcept {
  constexpr std::int64_t lanes = 8;
  const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
  const __m256 c = _mm256_set1_ps(gelu_c), c3a = _mm256_set1_ps(gelu_3a);
  std::int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const __m256 xv = _mm256_loadu_ps(x + i), tv = _mm256_loadu_ps(t + i);
    const __m256 du = _mm256_mul_ps(c, _mm256_add_ps(one, _mm256_mul_ps(_mm256_mul_ps(c3a, xv), xv)));
    const __m256 left = _mm256_mul_ps(half, _mm256_add_ps(one, tv));
    const __m256 right =
        _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(half, xv), _mm256_sub_ps(one, _mm256_mul_ps(tv, tv))), du);
    _mm256_storeu_ps(dx + i, _mm256_mul_ps(_mm256_loadu_ps(dy + i), _mm256_add_ps(left, right)));
  }
  gelu_backward_scalar(x, t, dy, dx, i, n);
}

}  // namespace avx2

SAFEAMP_DETAIL_TARGET_END

SAFEAMP_DETAIL_AVX512_BEGIN

namespace avx512 {
namespace {

// The maskz forms of the shifts with every lane kept: g++ 12's unmasked ones start from an undefined register and
// trip -Wmaybe-uninitialized where they are inlined.
constexpr __mmask16 all_lanes = 0xFFFF;

// The codes of 16 floats and the lanes that have one.
inline __m512i codes(__m512i bits, bool fp16, __mmask16& ok) noexcept {
  if (!fp16) {
    const __mmask16 low_zero = _mm512_testn_epi32_mask(bits, _mm512_set1_epi32(0xFFFF));
    const __m512i e = _mm512_and_si512(_mm512_maskz_srli_epi32(all_lanes, bits, 23), _mm512_set1_epi32(0xFF));
    ok = _mm512_mask_cmpneq_epi32_mask(low_zero, e, _mm512_set1_epi32(0xFF));
    return _mm512_maskz_srli_epi32(all_lanes, bits, 16);
  }
  const __m512i e = _mm512_and_si512(_mm512_maskz_srli_epi32(all_lanes, bits, 23), _mm512_set1_epi32(0xFF));
  const __m512i sign = _mm512_maskz_slli_epi32(all_lanes, _mm512_maskz_srli_epi32(all_lanes, bits, 31), 15);
  const __mmask16 zero = _mm512_testn_epi32_mask(bits, _mm512_set1_epi32(0x7FFFFFFF));
  const __mmask16 low_zero = _mm512_testn_epi32_mask(bits, _mm512_set1_epi32(0x1FFF));
  const __mmask16 in_range = _mm512_mask_cmple_epi32_mask(
      _mm512_cmpge_epi32_mask(e, _mm512_set1_epi32(127 - 14)), e, _mm512_set1_epi32(127 + 15));
  ok = zero | (low_zero & in_range);
  const __m512i normal = _mm512_or_si512(
      _mm512_or_si512(sign, _mm512_maskz_slli_epi32(all_lanes, _mm512_sub_epi32(e, _mm512_set1_epi32(112)), 10)),
      _mm512_maskz_srli_epi32(all_lanes, _mm512_and_si512(bits, _mm512_set1_epi32(0x7FFFFF)), 13));
  return _mm512_mask_blend_epi32(zero, normal, sign);
}

}  // namespace

void gelu_forward(const gelu_forward_args& a) noexcept {
  constexpr std::int64_t lanes = 16;
  const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
  std::int64_t i = 0;
  if (a.table != nullptr) {
    for (; i + lanes <= a.n; i += lanes) {
      const __m512 x = _mm512_loadu_ps(a.in + i);
      __mmask16 ok = 0;
      const __m512i c = codes(_mm512_castps_si512(x), a.fp16, ok);
      if (ok != 0xFFFF) {
        gelu_forward_scalar(a, i, i + lanes);
        continue;
      }
      const __m512 t = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), all_lanes, c, a.table, 4);
      _mm512_storeu_ps(a.t + i, t);
      _mm512_storeu_ps(a.out + i, _mm512_mul_ps(_mm512_mul_ps(half, x), _mm512_add_ps(one, t)));
    }
  }
  gelu_forward_scalar(a, i, a.n);
}

void gelu_backward(const float* x, const float* t, const float* dy, float* dx, std::int64_t n) noexcept {
  constexpr std::int64_t lanes = 16;
  const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
  const __m512 c = _mm512_set1_ps(gelu_c), c3a = _mm512_set1_ps(gelu_3a);
  std::int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const __m512 xv = _mm512_loadu_ps(x + i), tv = _mm512_loadu_ps(t + i);
    const __m512 du = _mm512_mul_ps(c, _mm512_add_ps(one, _mm512_mul_ps(_mm512_mul_ps(c3a, xv), xv)));
    const __m512 left = _mm512_mul_ps(half, _mm512_add_ps(one, tv));
    const __m512 right =
        _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(half, xv), _mm512_sub_ps(one, _mm512_mul_ps(tv, tv))), du);
    _mm512_storeu_ps(dx + i, _mm512_mul_ps(_mm512_loadu_ps(dy + i), _mm512_add_ps(left, right)));
  }
  gelu_backward_scalar(x, t, dy, dx, i, n);
}

}  // namespace avx512

SAFEAMP_DETAIL_TARGET_END

}  // namespace safeamp::sim::detail

#endif  // SAFEAMP_X86_KERNELS
