// A tiny consumer of safeamp's core and simulator, used by the packaging tests.
#include <cstdio>

#include "safeamp/safeamp.hpp"
#include "safeamp/sim/sim_info.hpp"

int main() {
  const float r = safeamp::round_to(safeamp::fp16, 65519.99f);
  if (r != 65504.0f) {
    std::printf("consumer FAILED: fp16(65519.99) = %.9g\n", static_cast<double>(r));
    return 1;
  }
  std::printf("consumer ok: fp16(65519.99) = %.0f, eigen %s\n", static_cast<double>(r),
              safeamp::sim::eigen_version().c_str());
  return 0;
}
