// libFuzzer: the .npy reader (parse_npy) returns an array or throws safeamp::error with a bounded message; an
// accepted array has as many values as its shape says, finite when it is a float array, and a float array of 1
// or 2 dimensions written back by npy_bytes reads to the same values.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "safeamp/error.hpp"
#include "safeamp/sim/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace safeamp::sim;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    const npy_array a = parse_npy(bytes, "fuzz.npy", npy_limits{.max_elements = 1 << 16});
    std::int64_t count = 1;
    for (const std::int64_t d : a.shape) count *= d;
    if (a.shape.size() > 2 || static_cast<std::int64_t>(a.values.size()) != count) __builtin_trap();
    if (a.is_integer && a.integers.size() != a.values.size()) __builtin_trap();
    if (!a.is_integer) {
      for (const float v : a.values) {
        if (!std::isfinite(v)) __builtin_trap();
      }
      if (!a.shape.empty()) {
        const npy_array again = parse_npy(npy_bytes(a.shape, a.values), "again");
        if (again.values != a.values || again.shape != a.shape) __builtin_trap();
      }
    }
  } catch (const safeamp::error& e) {
    if (std::string_view(e.what()).size() > 8192) __builtin_trap();
  }
  return 0;
}
