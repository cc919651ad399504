// Internal to safeamp::sim: the AdamW update with an fp32 update format (what the mixed policies use) as bulk
// loops, one back-end per CPU path like the GEMM tiles (portable, AVX2, AVX-512; cpu_path.hpp).
//
// Every back-end does, for each element k, exactly the operations of optimizer.cpp's AdamW loop in its order, each
// rounded once to fp32 (separate multiplies and adds, never an fma; sqrt and division are correctly rounded in
// every ISA), so the vector width cannot change a bit:
//   m = fl(fl(b1 m) + fl(fl(1 - b1) g))
//   v = fl(fl(b2 v) + fl(fl(fl(1 - b2) g) g))
//   out = fl(w + fl(-lr fl(fl(fl(m c1) / fl(sqrt(fl(v c2)) + eps)) + fl(wd w))))
#pragma once

#include <cstdint>

#include "safeamp/format/cpu_path.hpp"

namespace safeamp::sim::detail {

struct adamw_fp32_args {
  float* m = nullptr;        // first moment, updated in place
  float* v = nullptr;        // second moment, updated in place
  const float* g = nullptr;  // gradient
  const float* w = nullptr;  // weights before the update
  float* out = nullptr;      // weights after the update (not aliasing the others)
  std::int64_t n = 0;
  float b1 = 0.0f, b2 = 0.0f;                                    // betas
  float lr = 0.0f, c1 = 0.0f, c2 = 0.0f, eps = 0.0f, wd = 0.0f;  // c1, c2: the bias corrections' reciprocals
};

/// One AdamW update of n elements on path p (the portable loop, or the AVX2 / AVX-512 one where p names it).
void adamw_fp32(cpu_path p, const adamw_fp32_args& a) noexcept;

/// Elements [begin, n) in plain scalar code, the reference every back-end gives the bits of.
void adamw_fp32_scalar(const adamw_fp32_args& a, std::int64_t begin) noexcept;

namespace avx2 {
void adamw_fp32(const adamw_fp32_args& a) noexcept;
}
namespace avx512 {
void adamw_fp32(const adamw_fp32_args& a) noexcept;
}

}  // namespace safeamp::sim::detail
