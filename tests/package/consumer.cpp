// A tiny consumer of safeamp's core and simulator, used by the packaging tests. It links the installed
// safeamp::format_kernels (the kernels compiled once: this unit is compiled with SAFEAMP_EXTERN_KERNELS, so
// round_span here is the archive's) and rounds through the installed simulator's archive too.
#include <cstdio>
#include <vector>

#include "safeamp/safeamp.hpp"
#include "safeamp/sim/sim_info.hpp"
#include "safeamp/sim/tensor.hpp"

#if !defined(SAFEAMP_EXTERN_KERNELS)
#error "linking safeamp::format_kernels defines SAFEAMP_EXTERN_KERNELS for its consumers"
#endif

int main() {
  const float r = safeamp::round_to(safeamp::fp16, 65519.99f);
  if (r != 65504.0f) {
    std::printf("consumer FAILED: fp16(65519.99) = %.9g\n", static_cast<double>(r));
    return 1;
  }
  // 65519.99 rounds to max finite; 1e-8 underflows to zero; 3 is exact.
  std::vector<float> a{65519.99f, 1e-8f, 3.0f};
  std::vector<float> b = a;
  const safeamp::cast_stats core = safeamp::round_span(safeamp::fp16, a);
  const safeamp::cast_stats sim = safeamp::sim::cast_span(b, safeamp::fp16, {}, {});
  const std::vector<float> want{65504.0f, 0.0f, 3.0f};
  if (a != want || b != want || core.underflow != 1 || sim.underflow != 1 || core.elements != 3) {
    std::printf("consumer FAILED: round_span %.9g %.9g %.9g (underflow %llu), sim cast_span %.9g %.9g %.9g\n",
                static_cast<double>(a[0]), static_cast<double>(a[1]), static_cast<double>(a[2]),
                static_cast<unsigned long long>(core.underflow), static_cast<double>(b[0]),
                static_cast<double>(b[1]), static_cast<double>(b[2]));
    return 1;
  }
  std::printf("consumer ok: fp16(65519.99) = %.0f, eigen %s, round_span and sim cast_span agree\n",
              static_cast<double>(r), safeamp::sim::eigen_version().c_str());
  return 0;
}
