// Host-side checks of the multi-tensor launch groups (cuda/src/tensor_groups.hpp) and of the gradient-buffer
// checks that run before any launch: a list of any length is cut into groups of at most 64 non-empty buffers
// in list order, every non-empty buffer in exactly one group; bad buffers are refused by name. No GPU needed.
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "safeamp/cuda/amp_ops.hpp"
#include "safeamp/cuda/device_scaler.hpp"
#include "tensor_groups.hpp"

using namespace safeamp;
using namespace safeamp::cuda;

namespace {

struct fake_buffer {
  std::uint64_t elements = 0;
};

// Groups of `buffers` as lists of indices.
std::vector<std::vector<std::size_t>> groups_of(const std::vector<fake_buffer>& buffers, std::size_t per_group) {
  std::vector<std::vector<std::size_t>> out;
  cuda::detail::for_each_group(std::span<const fake_buffer>(buffers), per_group,
                               [&](std::span<const std::size_t> g) { out.emplace_back(g.begin(), g.end()); });
  return out;
}

}  // namespace

TEST_CASE("launch groups: hundreds of buffers, in order, none twice, empties left out", "[cuda][host][groups]") {
  // 300 buffers; every seventh is empty (43 of them: indices 0, 7, ..., 294), so 257 non-empty ones
  std::vector<fake_buffer> buffers(300);
  for (std::size_t i = 0; i < buffers.size(); ++i) buffers[i].elements = i % 7 == 0 ? 0 : 1 + i;
  const auto groups = groups_of(buffers, max_tensors_per_launch);
  // 257 = 4 * 64 + 1: five groups, the last holding one buffer (worked out by hand)
  REQUIRE(groups.size() == 5);
  for (std::size_t g = 0; g < 4; ++g) CHECK(groups[g].size() == 64);
  CHECK(groups[4].size() == 1);
  CHECK(groups[4][0] == 299);
  std::vector<std::size_t> flat;
  for (const auto& g : groups) flat.insert(flat.end(), g.begin(), g.end());
  std::vector<std::size_t> want;
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    if (i % 7 != 0) want.push_back(i);
  }
  CHECK(flat == want);  // list order kept: the norm adds its partial sums in this order
}

TEST_CASE("launch groups: edges", "[cuda][host][groups]") {
  CHECK(groups_of({}, 64).empty());
  CHECK(groups_of(std::vector<fake_buffer>(5), 64).empty());  // only empty buffers: nothing to launch
  // exactly 128 non-empty buffers: two full groups and no empty third one
  const auto exact = groups_of(std::vector<fake_buffer>(128, fake_buffer{3}), 64);
  REQUIRE(exact.size() == 2);
  CHECK(exact[0].front() == 0);
  CHECK(exact[0].back() == 63);
  CHECK(exact[1].front() == 64);
  CHECK(exact[1].back() == 127);
  const auto ones = groups_of(std::vector<fake_buffer>(3, fake_buffer{1}), 1);
  CHECK(ones == std::vector<std::vector<std::size_t>>{{0}, {1}, {2}});
  CHECK_THROWS_WITH(groups_of(std::vector<fake_buffer>(3, fake_buffer{1}), 0),
                    Catch::Contains("tensor group size") && Catch::Contains(">= 1"));
}

TEST_CASE("gradient buffers: types and pointers checked before any launch", "[cuda][host][groups]") {
  float f = 0.0f;
  std::uint16_t h = 0;
  const gradient_span good[] = {tensor_span{&f, 1}, gradient_span{.data = &h, .elements = 1, .type = device_dtype::f16},
                                gradient_span{.data = &h, .elements = 1, .type = device_dtype::bf16},
                                gradient_span{.data = nullptr, .elements = 0, .type = device_dtype::f16}};
  CHECK_NOTHROW(cuda::detail::check_gradient_buffers(good, "unscale"));
  const gradient_span fp8[] = {tensor_span{&f, 1},
                               gradient_span{.data = &h, .elements = 2, .type = device_dtype::f8_e4m3}};
  CHECK_THROWS_WITH(cuda::detail::check_gradient_buffers(fp8, "unscale"), Catch::Contains("unscale buffer 1 type") &&
                                                                              Catch::Contains("f8_e4m3") &&
                                                                              Catch::Contains("f32, f16 or bf16"));
  const gradient_span null[] = {gradient_span{.data = nullptr, .elements = 8, .type = device_dtype::bf16}};
  CHECK_THROWS_WITH(cuda::detail::check_gradient_buffers(null, "clip_grad_norm"),
                    Catch::Contains("clip_grad_norm buffer 0 data") && Catch::Contains("8 elements"));
}

TEST_CASE("gradient buffers: byte ranges follow the element type", "[cuda][host][groups]") {
  std::uint16_t storage[8] = {};
  const auto [a0, a1] =
      device_memory::address(gradient_span{.data = storage + 1, .elements = 4, .type = device_dtype::bf16});
  CHECK(a0 == reinterpret_cast<std::uintptr_t>(storage) + 2);
  CHECK(a1 - a0 == 8);  // 4 bf16 elements
  float f[4] = {};
  const gradient_span as_gradient = tensor_span{f, 4};  // an fp32 buffer is an f32 gradient
  CHECK(as_gradient.type == device_dtype::f32);
  CHECK(as_gradient.data == static_cast<void*>(f));
  const auto [b0, b1] = device_memory::address(as_gradient);
  CHECK(b1 - b0 == 16);
}
