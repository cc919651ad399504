// Placeholder-free smoke test of the format layer; the exhaustive suites live beside it.
#include <catch2/catch.hpp>

#include "safeamp/format.hpp"

TEST_CASE("fp16 nearest-even rounds 65520 to inf and 65519.99 to 65504") {
  CHECK(safeamp::encode(safeamp::fp16, 65520.0f) == 0x7C00u);
  CHECK(safeamp::encode(safeamp::fp16, 65519.99f) == 0x7BFFu);
}
