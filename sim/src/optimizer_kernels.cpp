// The portable AdamW loop and the choice of back-end (optimizer_kernels.hpp).
#include "optimizer_kernels.hpp"

#include <cmath>

namespace safeamp::sim::detail {

void adamw_fp32_scalar(const adamw_fp32_args& a, std::int64_t begin) noexcept {
  const float b1 = a.b1, b2 = a.b2, lr = a.lr, c1 = a.c1, c2 = a.c2, eps = a.eps, wd = a.wd;
  for (std::int64_t k = begin; k < a.n; ++k) {
    a.m[k] = b1 * a.m[k] + (1.0f - b1) * a.g[k];
    a.v[k] = b2 * a.v[k] + (1.0f - b2) * a.g[k] * a.g[k];
    a.out[k] = a.w[k] + -lr * ((a.m[k] * c1) / (std::sqrt(a.v[k] * c2) + eps) + wd * a.w[k]);
  }
}

void adamw_fp32(cpu_path p, const adamw_fp32_args& a) noexcept {
#if defined(SAFEAMP_X86_KERNELS)
  if (p == cpu_path::avx512) return avx512::adamw_fp32(a);
  if (p == cpu_path::avx2) return avx2::adamw_fp32(a);
#endif
  (void)p;
  adamw_fp32_scalar(a, 0);
}

}  // namespace safeamp::sim::detail
