// The CPU's own fp16 conversion (F16C vcvtps2ph / vcvtph2ps), the hardware reference of the exhaustive fp16
// test. Only this file is compiled with -mf16c, so no other code of the test can pick up AVX/F16C
// instructions before the run-time check of the CPU feature.
#include "f16c_convert.hpp"

#include <cpuid.h>
#include <immintrin.h>

namespace f16c {

// CPUID leaf 1, ECX: bit 29 F16C, bit 28 AVX, bit 27 OSXSAVE; XCR0 bits 1 and 2: the OS saves XMM and YMM state.
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
  const bool f16c = (ecx >> 29) & 1u, avx = (ecx >> 28) & 1u, osxsave = (ecx >> 27) & 1u;
  if (!f16c || !avx || !osxsave) return false;
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  return (xcr0_lo & 6u) == 6u;
}

void round_trip(const float* in, std::uint16_t* codes, float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; i += 8) {
    alignas(32) float block[8] = {};
    alignas(16) std::uint16_t h16[8];
    alignas(32) float back[8];
    const std::size_t m = n - i < 8 ? n - i : 8;
    for (std::size_t j = 0; j < m; ++j) block[j] = in[i + j];
    const __m128i h = _mm256_cvtps_ph(_mm256_load_ps(block), _MM_FROUND_TO_NEAREST_INT);
    _mm_store_si128(reinterpret_cast<__m128i*>(h16), h);
    _mm256_store_ps(back, _mm256_cvtph_ps(h));
    for (std::size_t j = 0; j < m; ++j) {
      codes[i + j] = h16[j];
      out[i + j] = back[j];
    }
  }
}

}  // namespace f16c
