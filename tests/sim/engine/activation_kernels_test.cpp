// GELU's bulk loops (sim/src/activation_kernels*.{hpp,cpp}) against the plain scalar loop, bit for bit, before any
// cast: every fp16 and bf16 code (with subnormals, zeros, infinities and NaNs), floats just off those values and
// ordinary fp32 values, interleaved so that vectors with and without a lane that has no table code both occur, on
// lengths that end in every vector tail; with the tables and without (every element calls tanh); the backward on
// random gradients. Run once per CPU path (sim_activation_kernels_test_portable, _avx2, _avx512).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "../../../sim/src/activation_kernels.hpp"
#include "safeamp/format.hpp"

using namespace safeamp;
using namespace safeamp::sim::detail;

namespace {

bool same(float u, float v) {
  return (std::isnan(u) && std::isnan(v)) || safeamp::bit_cast<std::uint32_t>(u) == safeamp::bit_cast<std::uint32_t>(v);
}

// tanh(gelu_inner(value of code)) for every code of f.
std::vector<float> table_of(format_spec f) {
  std::vector<float> t(std::size_t{1} << 16);
  for (std::uint32_t c = 0; c < t.size(); ++c) t[c] = std::tanh(gelu_inner(decode(f, c)));
  return t;
}

// 3 x 65536 inputs and more: blocks of 16 that are all codes of f (table lanes), then blocks where one element in 16
// is a float just off a code, then edge values, then ordinary fp32 values (normal draws, about one in 16 a value of
// f by chance).
std::vector<float> inputs(format_spec f) {
  std::vector<float> x;
  std::uint64_t state = 12345;
  for (std::uint32_t c = 0; c < 65536u; ++c) x.push_back(decode(f, c));
  for (std::uint32_t c = 0; c < 65536u; ++c) {
    const std::uint32_t bits = safeamp::bit_cast<std::uint32_t>(decode(f, c)) | (c % 16 == 5 ? 1u << (c % 13) : 0u);
    x.push_back(safeamp::bit_cast<float>(bits));
  }
  // Floats at the edges of the fp16 code range with zero low bits, each in a block of 15 codes: the vector path
  // must see that the block has a lane without a code. Beyond fp16's range (exponent 143 and up), fp16 subnormal
  // magnitudes (exponent 112 and below), and bf16's infinities and NaN.
  const float edges[] = {65536.0f, -65536.0f, 98304.0f, 131072.0f, 0x1p-15f, -0x1.8p-15f, 0x1p-16f, 0x1p-24f,
                         std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                         std::numeric_limits<float>::quiet_NaN(), 0x1p100f, -0x1p-100f};
  for (const float e : edges) {
    for (std::uint32_t c = 0; c < 16; ++c) x.push_back(c == 9 ? e : decode(f, 0x3C00u + 37u * c));
  }
  for (int i = 0; i < 65536; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const float u = static_cast<float>(static_cast<std::int32_t>(state >> 32)) * 0x1p-29f;  // about [-4, 4)
    x.push_back(i % 16 == 0 ? round_to(f, u) : u);
  }
  return x;
}

}  // namespace

TEST_CASE("GELU forward and backward loops of the active CPU path give the scalar loop's bits") {
  const cpu_path path = safeamp::detail::kernel_path();
  INFO("path " << cpu_path_name(path));
  for (const format_spec f : {fp16, bf16}) {
    const std::vector<float> table = table_of(f);
    const std::vector<float> x = inputs(f);
    for (const bool with_table : {true, false}) {
      for (const std::int64_t n : {std::int64_t{0}, std::int64_t{1}, std::int64_t{7}, std::int64_t{8},
                                   std::int64_t{15}, std::int64_t{17}, std::int64_t{31},
                                   static_cast<std::int64_t>(x.size()) - 3, static_cast<std::int64_t>(x.size())}) {
        INFO(format_name(f) << (with_table ? " table" : " tanh") << ", n = " << n);
        std::vector<float> t(x.size()), y(x.size()), t_want(x.size()), y_want(x.size());
        const gelu_forward_args a{.in = x.data(), .t = t.data(), .out = y.data(), .n = n,
                                  .table = with_table ? table.data() : nullptr, .fp16 = f == fp16};
        gelu_forward_args want = a;
        want.t = t_want.data();
        want.out = y_want.data();
        gelu_forward(path, a);
        gelu_forward_scalar(want, 0, n);
        std::int64_t mismatches = 0;
        for (std::int64_t i = 0; i < n; ++i) {
          if ((!same(t[i], t_want[i]) || !same(y[i], y_want[i])) && ++mismatches <= 3) {
            UNSCOPED_INFO("element " << i << " (x = " << x[i] << "): t " << t[i] << " want " << t_want[i] << ", y "
                                     << y[i] << " want " << y_want[i]);
          }
        }
        CHECK(mismatches == 0);
        // Nothing written past n.
        if (n < static_cast<std::int64_t>(x.size())) CHECK(y[static_cast<std::size_t>(n)] == 0.0f);
        // The backward on the forward's tanh, with gradients of every sign and size.
        std::vector<float> dy(x.size()), dx(x.size()), dx_want(x.size());
        for (std::size_t i = 0; i < dy.size(); ++i) dy[i] = x[(i * 7919) % x.size()] * 0.75f;
        gelu_backward(path, x.data(), t_want.data(), dy.data(), dx.data(), n);
        gelu_backward_scalar(x.data(), t_want.data(), dy.data(), dx_want.data(), 0, n);
        mismatches = 0;
        for (std::int64_t i = 0; i < n; ++i) {
          if (!same(dx[i], dx_want[i]) && ++mismatches <= 3) {
            UNSCOPED_INFO("backward element " << i << " (x = " << x[i] << ", t = " << t_want[i] << "): " << dx[i]
                                              << " want " << dx_want[i]);
          }
        }
        CHECK(mismatches == 0);
      }
    }
  }
}
