// The AVX2 and AVX-512 back-ends of the fp32 AdamW update (optimizer_kernels.hpp), compiled inside cpu_path.hpp's
// target regions; run only when active_cpu_path() selects them. Each lane does its element's scalar operations in
// the scalar order (mul, add, sqrt, div as separate instructions); the elements past the last whole vector take
// the scalar loop.
#include "optimizer_kernels.hpp"

#if defined(SAFEAMP_X86_KERNELS)

#include <immintrin.h>

namespace safeamp::sim::detail {

SAFEAMP_DETAIL_AVX2_BEGIN

namespace avx2 {

void adamw_fp32(const adamw_fp32_args& a) noexcept {
  constexpr std::int64_t lanes = 8;
  const __m256 b1 = _mm256_set1_ps(a.b1), one_minus_b1 = _mm256_set1_ps(1.0f - a.b1);
  const __m256 b2 = _mm256_set1_ps(a.b2), one_minus_b2 = _mm256_set1_ps(1.0f - a.b2);
  const __m256 neg_lr = _mm256_set1_ps(-a.lr), c1 = _mm256_set1_ps(a.c1), c2 = _mm256_set1_ps(a.c2);
  const __m256 eps = _mm256_set1_ps(a.eps), wd = _mm256_set1_ps(a.wd);
  std::int64_t k = 0;
  for (; k + lanes <= a.n; k += lanes) {
    const __m256 g = _mm256_loadu_ps(a.g + k), w = _mm256_loadu_ps(a.w + k);
    const __m256 m = _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(a.m + k)), _mm256_mul_ps(one_minus_b1, g));
    const __m256 v =
        _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(a.v + k)), _mm256_mul_ps(_mm256_mul_ps(one_minus_b2, g), g));
    _mm256_storeu_ps(a.m + k, m);
    _mm256_storeu_ps(a.v + k, v);
    const __m256 q = _mm256_div_ps(_mm256_mul_ps(m, c1), _mm256_add_ps(_mm256_sqrt_ps(_mm256_mul_ps(v, c2)), eps));
    const __m256 step = _mm256_mul_ps(neg_lr, _mm256_add_ps(q, _mm256_mul_ps(wd, w)));
    _mm256_storeu_ps(a.out + k, _mm256_add_ps(w, step));
  }
  adamw_fp32_scalar(a, k);
}

}  // namespace avx2

SAFEAMP_DETAIL_TARGET_END

SAFEAMP_DETAIL_AVX512_BEGIN

namespace avx512 {

void adamw_fp32(const adamw_fp32_args& a) noexcept {
  constexpr std::int64_t lanes = 16;
  constexpr __mmask16 all_lanes = 0xFFFF;
  const __m512 b1 = _mm512_set1_ps(a.b1), one_minus_b1 = _mm512_set1_ps(1.0f - a.b1);
  const __m512 b2 = _mm512_set1_ps(a.b2), one_minus_b2 = _mm512_set1_ps(1.0f - a.b2);
  const __m512 neg_lr = _mm512_set1_ps(-a.lr), c1 = _mm512_set1_ps(a.c1), c2 = _mm512_set1_ps(a.c2);
  const __m512 eps = _mm512_set1_ps(a.eps), wd = _mm512_set1_ps(a.wd);
  std::int64_t k = 0;
  for (; k + lanes <= a.n; k += lanes) {
    const __m512 g = _mm512_loadu_ps(a.g + k), w = _mm512_loadu_ps(a.w + k);
    const __m512 m = _mm512_add_ps(_mm512_mul_ps(b1, _mm512_loadu_ps(a.m + k)), _mm512_mul_ps(one_minus_b1, g));
    const __m512 v =
        _mm512_add_ps(_mm512_mul_ps(b2, _mm512_loadu_ps(a.v + k)), _mm512_mul_ps(_mm512_mul_ps(one_minus_b2, g), g));
    _mm512_storeu_ps(a.m + k, m);
    _mm512_storeu_ps(a.v + k, v);
    // maskz with every lane kept is _mm512_sqrt_ps, without g++ 12's false -Wmaybe-uninitialized on the latter
    const __m512 root = _mm512_maskz_sqrt_ps(all_lanes, _mm512_mul_ps(v, c2));
    const __m512 q = _mm512_div_ps(_mm512_mul_ps(m, c1), _mm512_add_ps(root, eps));
    const __m512 step = _mm512_mul_ps(neg_lr, _mm512_add_ps(q, _mm512_mul_ps(wd, w)));
    _mm512_storeu_ps(a.out + k, _mm512_add_ps(w, step));
  }
  adamw_fp32_scalar(a, k);
}

}  // namespace avx512

SAFEAMP_DETAIL_TARGET_END

}  // namespace safeamp::sim::detail

#endif  // SAFEAMP_X86_KERNELS
