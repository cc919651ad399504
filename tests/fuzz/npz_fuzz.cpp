// libFuzzer: the .npz reader (parse_npz_names, parse_npz) lists names or throws safeamp::error with a bounded
// message; every listed array either reads (an array as parse_npy accepts it: as many values as its shape
// says, finite floats) or throws safeamp::error, never "not in the archive" for a name it listed itself.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "safeamp/error.hpp"
#include "safeamp/sim/npz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace safeamp::sim;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const auto bounded = [](const safeamp::error& e) {
    if (std::string_view(e.what()).size() > 8192) __builtin_trap();
  };
  std::vector<std::string> names;
  try {
    names = parse_npz_names(bytes, "fuzz.npz");
  } catch (const safeamp::error& e) {
    bounded(e);
    return 0;
  }
  if (names.size() > size / 46) __builtin_trap();  // each member has a 46-byte directory entry at least
  for (std::size_t k = 0; k < names.size() && k < 8; ++k) {
    try {
      const npy_array a = parse_npz(bytes, names[k], "fuzz.npz", npy_limits{.max_elements = 1 << 16});
      std::int64_t count = 1;
      for (const std::int64_t d : a.shape) count *= d;
      if (a.shape.size() > 2 || static_cast<std::int64_t>(a.values.size()) != count) __builtin_trap();
      if (a.is_integer && a.integers.size() != a.values.size()) __builtin_trap();
      for (const float v : a.values) {
        if (!std::isfinite(v)) __builtin_trap();
      }
    } catch (const safeamp::error& e) {
      bounded(e);
      // (the not-found error is the only one about the field "array"; member errors start "fuzz.npz member")
      if (std::string_view(e.what()).starts_with("fuzz.npz array is ")) __builtin_trap();
    }
  }
  try {
    (void)parse_npz(bytes, "no such array", "fuzz.npz");
    __builtin_trap();  // a name the archive does not hold never reads
  } catch (const safeamp::error& e) {
    bounded(e);
  }
  return 0;
}
