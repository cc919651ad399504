// The CPU reference of the fp32-accumulating wire reduction's kernel (see wire_sum.hpp).
#include "wire_sum.hpp"

#include <string>

#include "safeamp/error.hpp"

namespace safeamp::cuda {

std::vector<std::uint32_t> wire_sum_reference(device_dtype t, std::span<const std::uint32_t> codes, int ranks) {
  if (t == device_dtype::f32) throw error("wire_sum_reference type", "f32", "bf16, f16, f8_e4m3 or f8_e5m2");
  if (ranks < 1 || codes.size() % static_cast<std::size_t>(ranks) != 0) {
    throw error("wire_sum_reference codes",
                std::to_string(codes.size()) + " codes over " + std::to_string(ranks) + " ranks",
                "ranks >= 1 rows of equal length");
  }
  const std::size_t elements = codes.size() / static_cast<std::size_t>(ranks);
  std::vector<std::uint32_t> out(elements);
  for (std::size_t e = 0; e < elements; ++e) {
    float sum = 0.0f;
    for (std::size_t r = 0; r < static_cast<std::size_t>(ranks); ++r)
      sum = wire_accumulate(t, sum, codes[r * elements + e]);
    out[e] = wire_finish(t, sum);
  }
  return out;
}

}  // namespace safeamp::cuda
