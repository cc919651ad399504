// The amax kernel's CPU reference (amax_reference, beside the kernel in fp8_scaling.hpp) against the core
// tensor_amax, an independent implementation in float arithmetic: same bits, NaN canonical and sticky.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "safeamp/cuda/fp8_scaling.hpp"
#include "safeamp/format/philox.hpp"

using namespace safeamp;

TEST_CASE("amax_reference = tensor_amax on random tensors", "[cuda][host][fp8]") {
  for (std::uint32_t t = 0; t < 200; ++t) {
    std::vector<float> x(1 + t * 13);
    for (std::size_t i = 0; i < x.size(); ++i) {
      // any bit pattern: signs, subnormals, infinities and NaNs all appear
      x[i] = safeamp::bit_cast<float>(stochastic_bits(17, t, i));
    }
    const float want = tensor_amax(x);
    const std::uint32_t got = cuda::amax_reference(x);
    INFO("tensor " << t);
    if (std::isnan(want)) {
      CHECK(got == amax_nan_bits);
    } else {
      CHECK(got == safeamp::bit_cast<std::uint32_t>(want));
    }
  }
  const std::vector<float> finite = {1.0f, -8.0f, 0.5f};
  CHECK(cuda::amax_reference(finite) == safeamp::bit_cast<std::uint32_t>(8.0f));
  CHECK(cuda::amax_reference(finite, safeamp::bit_cast<std::uint32_t>(9.0f)) == safeamp::bit_cast<std::uint32_t>(9.0f));
  CHECK(cuda::amax_reference({}) == 0u);
}
