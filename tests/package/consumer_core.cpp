// A consumer of safeamp's header-only core alone, used by the add_subdirectory packaging test.
#include <cstdio>

#include "safeamp/safeamp.hpp"

int main() {
  const float r = safeamp::round_to(safeamp::fp16, 65519.99f);
  if (r != 65504.0f) {
    std::printf("consumer FAILED: fp16(65519.99) = %.9g\n", static_cast<double>(r));
    return 1;
  }
  std::printf("consumer ok: fp16(65519.99) = %.0f, core only\n", static_cast<double>(r));
  return 0;
}
