// Host-side checks of the global norm's plan (cuda/src/norm_plan.hpp): the partition of a buffer into parts, fixed by
// its element count alone; the launch size, from the device's SM count; and the CPU reference of the summation order
// that the device test compares the kernels' bits with. No GPU needed.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <vector>

#include "norm_plan.hpp"
#include "safeamp/format/philox.hpp"

using namespace safeamp::cuda;
using detail::device_geometry;
using detail::norm_blocks;
using detail::norm_parts;
using detail::norm_sum_of_squares_reference;

TEST_CASE("norm plan: parts by element count, 4096 elements a part, at most 1024", "[cuda][host][norm]") {
  // 256 lanes x 16 elements = 4096 elements a part (worked by hand from the plan's definition)
  CHECK(norm_parts(1) == 1);
  CHECK(norm_parts(4096) == 1);
  CHECK(norm_parts(4097) == 2);
  CHECK(norm_parts(70001) == 18);                           // ceil(70001 / 4096) = 18 (17 x 4096 = 69632)
  CHECK(norm_parts(std::uint64_t{4} << 20) == 1024);        // 4 Mi = 1024 x 4096
  CHECK(norm_parts((std::uint64_t{4} << 20) + 1) == 1024);  // capped
  CHECK(norm_parts(std::uint64_t{1} << 40) == 1024);
  CHECK(detail::norm_max_parts == norm_scratch_per_buffer);  // one partial sum of scratch per part
}

TEST_CASE("norm plan: the launch fills the device, from its SM count", "[cuda][host][norm]") {
  // An H100 SXM: 132 SMs of 2048 threads hold 132 x 8 = 1056 blocks of 256 threads at once.
  const device_geometry h100{.multiprocessors = 132, .max_threads_per_multiprocessor = 2048};
  // An RTX 4090: 128 SMs of 1536 threads, 128 x 6 = 768 blocks.
  const device_geometry rtx4090{.multiprocessors = 128, .max_threads_per_multiprocessor = 1536};
  // One large buffer (256 Mi elements, 1024 parts): before, 64 blocks per buffer whatever the GPU, so under half of
  // an H100's SMs summed it.
  CHECK(norm_blocks(norm_parts(std::uint64_t{256} << 20), h100) == 1024);
  CHECK(norm_blocks(norm_parts(std::uint64_t{256} << 20), rtx4090) == 768);
  // 64 large buffers (65536 parts): as many blocks as the device holds
  CHECK(norm_blocks(64 * 1024, h100) == 1056);
  CHECK(norm_blocks(64 * 1024, rtx4090) == 768);
  // a small buffer: one part, one block (not 64 blocks of which 63 find nothing to do)
  CHECK(norm_blocks(norm_parts(1000), h100) == 1);
  // a device the runtime describes oddly still gets a launch
  CHECK(norm_blocks(5, device_geometry{}) == 1);
  CHECK(norm_blocks(5, device_geometry{.multiprocessors = 2, .max_threads_per_multiprocessor = 128}) == 2);
}

TEST_CASE("norm reference: lanes, parts and buffers meet in the documented order", "[cuda][host][norm]") {
  // Squares of 2^27 and 1 are 2^54 and 1; doubles near 2^54 are 4 apart, so 2^54 + 1 rounds to 2^54 (nearest) and
  // 2^54 + 3 to 2^54 + 4: which sums meet first decides the result.
  constexpr float big = 0x1p27f;
  constexpr double big_square = 0x1p54;

  // One buffer of 4097 elements: 2 parts, so lane j of part p sums elements p * 256 + j + 512 k. Element 0 (big) is
  // part 0's lane 0; elements 256, 768 and 1280 (ones) are all part 1's lane 0 (k = 0, 1, 2): part sums 2^54 and 3,
  // and the part tree gives 2^54 + 3 -> 2^54 + 4. Added one by one in element order (or with one part of 256 lanes,
  // where all four share lane 0) the ones would each vanish: 2^54.
  std::vector<float> two_parts(4097, 0.0f);
  two_parts[0] = big;
  two_parts[256] = two_parts[768] = two_parts[1280] = 1.0f;
  const std::vector<std::vector<float>> one_buffer{two_parts};
  CHECK(norm_sum_of_squares_reference(one_buffer) == big_square + 4.0);

  // Within a part the lanes meet in a tree (s[j] += s[j + half], half = 128 .. 1): 1, 1, 1, big sit in lanes 0..3;
  // half = 2 gives s0 = 1 + 1 = 2 and s1 = 1 + 2^54 -> 2^54; half = 1 gives 2 + 2^54, a tie, -> 2^54 (even). One by
  // one in element order the ones would sum to 3 first: 2^54 + 3 -> 2^54 + 4.
  CHECK(norm_sum_of_squares_reference(std::vector<std::vector<float>>{{1.0f, 1.0f, 1.0f, big}}) == big_square);

  // Buffers are added one after another in list order: big first, each later 1 vanishes; the ones first, they sum to
  // 3 before big comes: 2^54 + 3 -> 2^54 + 4.
  const std::vector<std::vector<float>> big_first{{big}, {1.0f}, {}, {1.0f}, {1.0f}};
  const std::vector<std::vector<float>> big_last{{1.0f}, {1.0f}, {}, {1.0f}, {big}};
  CHECK(norm_sum_of_squares_reference(big_first) == big_square);
  CHECK(norm_sum_of_squares_reference(big_last) == big_square + 4.0);
}

TEST_CASE("norm reference: every element counted once, within the summation bound", "[cuda][host][norm]") {
  // Buffers of sizes around the partition's edges, seeded values in [-8, 8); an 80-bit long double sum (64-bit
  // mantissa) is the oracle. Any order of n non-negative double additions is within (n - 1) 2^-53 of the exact sum
  // (relative); a lost or doubled element is off by far more than that.
  const std::uint64_t sizes[] = {1, 255, 256, 4096, 4097, 8193, 70001, (std::uint64_t{4} << 20) + 4099};
  std::vector<std::vector<float>> buffers;
  long double oracle = 0.0L;
  std::uint64_t elements = 0;
  for (std::uint32_t b = 0; b < std::size(sizes); ++b) {
    std::vector<float> v(sizes[b]);
    for (std::uint64_t i = 0; i < v.size(); ++i) {
      const auto r = static_cast<std::int32_t>(safeamp::stochastic_bits(7, b, i));
      v[i] = static_cast<float>(r) * 0x1p-28f;
      oracle += static_cast<long double>(v[i]) * static_cast<long double>(v[i]);
    }
    elements += v.size();
    buffers.push_back(std::move(v));
  }
  const double got = norm_sum_of_squares_reference(buffers);
  const long double bound = static_cast<long double>(elements) * 0x1p-53L * oracle;
  INFO("reference " << got << ", oracle " << static_cast<double>(oracle));
  CHECK(std::fabs(static_cast<long double>(got) - oracle) <= bound);
  // and the element that is dropped when the lanes stop one short is noticed: the last element of the largest buffer
  std::vector<std::vector<float>> short_by_one = buffers;
  short_by_one.back().back() = 0.0f;
  const long double last = static_cast<long double>(buffers.back().back());
  CHECK(last * last > 2 * bound);  // so this check can tell
  CHECK(std::fabs(static_cast<long double>(norm_sum_of_squares_reference(short_by_one)) - oracle) > bound);
}
