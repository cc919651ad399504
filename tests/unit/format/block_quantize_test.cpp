// Block quantization (OCP MX v1.0 and NVFP4): hand-worked blocks, worked here in the comments from the rules
// of the spec (block_reference.hpp quotes them), checked on both the scalar reference and the fast path; then
// the fast path against the reference, bit for bit, on random matrices of every block format, both axes,
// both rounding modes and odd shapes; stochastic rounding's mean; and the errors.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "safeamp/format.hpp"

namespace {

using safeamp::block_axis;
using safeamp::block_format;
using safeamp::block_options;
using safeamp::rounding;

std::uint32_t bits(float x) { return safeamp::bit_cast<std::uint32_t>(x); }
std::string hex(std::uint32_t u) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08X", u);
  return b;
}

struct quantized {
  std::vector<float> out, scales;
  safeamp::block_result result;
};

// Both implementations on the same input; they must agree bit for bit before anything else is checked.
quantized both(const block_format& b, const std::vector<float>& in, const block_options& opt = {}) {
  const std::size_t cols = in.size() / opt.rows;
  const std::size_t bs = static_cast<std::size_t>(b.block_size);
  const std::size_t nblocks =
      opt.axis == block_axis::rows ? opt.rows * ((cols + bs - 1) / bs) : ((opt.rows + bs - 1) / bs) * cols;
  quantized ref{std::vector<float>(in.size()), std::vector<float>(nblocks), {}};
  quantized fast{std::vector<float>(in.size()), std::vector<float>(nblocks), {}};
  ref.result = safeamp::quantize_blocks_reference(b, in, ref.out, ref.scales, opt);
  fast.result = safeamp::quantize_blocks(b, in, fast.out, fast.scales, opt);
  int mismatches = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (bits(ref.out[i]) != bits(fast.out[i]) && mismatches++ < 5) {
      FAIL_CHECK(safeamp::block_format_name(b) << " element " << i << " in " << hex(bits(in[i])) << ": reference "
                                               << hex(bits(ref.out[i])) << ", fast " << hex(bits(fast.out[i])));
    }
  }
  for (std::size_t k = 0; k < nblocks; ++k) {
    if (bits(ref.scales[k]) != bits(fast.scales[k]) && mismatches++ < 10) {
      FAIL_CHECK(safeamp::block_format_name(b) << " scale " << k << ": reference " << hex(bits(ref.scales[k]))
                                               << ", fast " << hex(bits(fast.scales[k])));
    }
  }
  CHECK(mismatches == 0);
  CHECK(ref.result.stats == fast.result.stats);
  CHECK(bits(ref.result.tensor_scale) == bits(fast.result.tensor_scale));
  CHECK(ref.result.blocks == nblocks);
  return fast;
}

}  // namespace

TEST_CASE("MXFP8 E4M3, a hand-worked block (OCP MX v1.0 section 6.3)") {
  // amax = 1000: floor(log2 1000) = 9, emax(E4M3) = 8, shared_exp = 1, X = 2.
  //   1000 / 2 = 500 > 448: clamped to 448 -> 896.        3 / 2 = 1.5 exactly -> 3.
  //   0.01 / 2 = 0.005 = 2.56 quanta of 2^-9 (E4M3's subnormal step) -> 3 quanta = 0.005859375 -> 0.01171875.
  //   -100 / 2 = -50: E4M3 near 50 has step 4 (32..64): 48 and 52, 50 is a tie, 48 (mantissa 100) is even -> -96.
  //   0.0009 / 2 = 0.00045 < half a quantum (0.0009765625): 0 (an underflow).
  std::vector<float> in(32, 0.0f);
  in[0] = 1000.0f, in[1] = 3.0f, in[2] = 0.01f, in[3] = -100.0f, in[4] = 0.0009f, in[5] = -0.0f;
  const quantized q = both(safeamp::mxfp8_e4m3, in);
  CHECK(q.scales[0] == 2.0f);
  CHECK(q.out[0] == 896.0f);
  CHECK(q.out[1] == 3.0f);
  CHECK(q.out[2] == 0.01171875f);
  CHECK(q.out[3] == -96.0f);
  CHECK(q.out[4] == 0.0f);
  CHECK(bits(q.out[5]) == 0x80000000u);   // -0 stays -0
  CHECK(q.result.stats.overflow == 1u);   // 500 was clamped
  CHECK(q.result.stats.underflow == 1u);  // 0.00045 became 0
  CHECK(q.result.stats.subnormal == 1u);  // 0.005859375 is an E4M3 subnormal (< 2^-6)
}

TEST_CASE("MXFP4, hand-worked blocks: ties, the clamp just below a power of two, tiny and special blocks") {
  // Block 0: amax 6.5: floor(log2) = 2 = emax(E2M1), X = 1. FP4 values 0 0.5 1 1.5 2 3 4 6.
  //   6.5 -> 6 (clamped), 5 -> 4 (tie 4|6, 4 = 1.0 * 2^2 even), 2.5 -> 2 (tie 2|3, even), 0.3 -> 0.5,
  //   0.25 -> 0 (tie 0|0.5, even), -1.75 -> -2 (tie 1.5|2, 2 even).
  // Block 1: amax 7.9: floor(log2) = 2, X = 1: 7.9 -> 6 (MX's known loss just below a power of two).
  // Block 2: amax 8: floor(log2) = 3, X = 2: 8 / 2 = 4 -> 8; 1 / 2 = 0.5 -> 1; 0.4 / 2 = 0.2 -> 0.
  // Block 3: amax 2^-130: shared exp -132 clamps to -127 (E8M0's smallest), X = 2^-127: 2^-130 / X = 1/8 -> 0.
  std::vector<float> in(4 * 32, 0.0f);
  const float b0[] = {6.5f, 5.0f, 2.5f, 0.3f, 0.25f, -1.75f};
  for (std::size_t j = 0; j < 6; ++j) in[j] = b0[j];
  in[32] = 7.9f;
  in[64] = 8.0f, in[65] = 1.0f, in[66] = 0.4f;
  in[96] = std::ldexp(1.0f, -130);
  const quantized q = both(safeamp::mxfp4, in);
  const float want0[] = {6.0f, 4.0f, 2.0f, 0.5f, 0.0f, -2.0f};
  for (std::size_t j = 0; j < 6; ++j) CHECK(q.out[j] == want0[j]);
  CHECK(q.scales[0] == 1.0f);
  CHECK(q.out[32] == 6.0f);
  CHECK(q.scales[1] == 1.0f);
  CHECK(q.out[64] == 8.0f);
  CHECK(q.out[65] == 1.0f);
  CHECK(q.out[66] == 0.0f);
  CHECK(q.scales[2] == 2.0f);
  CHECK(q.scales[3] == std::ldexp(1.0f, -127));
  CHECK(q.out[96] == 0.0f);

  // An all-zero block gets the smallest scale; a NaN or an infinity makes the scale NaN and the block NaN,
  // and leaves the other blocks alone.
  std::vector<float> special(3 * 32, 1.0f);
  for (std::size_t j = 0; j < 32; ++j) special[j] = 0.0f;
  special[40] = std::numeric_limits<float>::quiet_NaN();
  special[70] = -std::numeric_limits<float>::infinity();
  const quantized s = both(safeamp::mxfp4, special);
  CHECK(s.scales[0] == std::ldexp(1.0f, -127));
  CHECK(std::isnan(s.scales[1]));
  CHECK(std::isnan(s.scales[2]));
  CHECK(std::isnan(s.out[33]));
  CHECK(std::isnan(s.out[95]));
  CHECK(s.out[0] == 0.0f);
  CHECK(s.result.stats.nan == 64u);
}

TEST_CASE("NVFP4, hand-worked: tensor scale, E4M3 block scales, saturation") {
  // Tensor amax 2688 = 448 * 6, so the tensor scale s = 1.
  // Block 0 (16 elements): amax 12: S = E4M3(12 / 6) = 2, X = 2: 12 -> 6 -> 12; 5 / 2 = 2.5 -> 2 (tie, even) -> 4;
  //   -0.6 / 2 = -0.3 -> -0.5 -> -1.
  // Block 1: amax 2688: S = E4M3(448) = 448, X = 448: 1000 / 448 = 2.23 -> 2 -> 896.
  // Block 2: amax 7: 7 / 6 = 1.1667, E4M3 steps of 0.125 near 1: 1.125 (1.1667 - 1.125 < 1.25 - 1.1667), X = 1.125:
  //   7 / 1.125 = 6.22 > 6: clamped to 6 -> 6.75.
  // Block 3: amax 0.001: 0.001 / 6 = 1.67e-4 < 2^-10 (half E4M3's smallest subnormal): S = 0, every element 0.
  // Block 4: amax 11.25: S = E4M3(1.875) = 1.875 = X, whose reciprocal is not exact: 2.34375 / X = 1.25 and
  //   4.6875 / X = 2.5 are ties (to the even 1 and 2: 1.875 and 3.75), which x * fl(1 / X) would push up to
  //   1.25000012 and 2.50000024, i.e. 1.5 and 3: the scale-down must be one division.
  std::vector<float> in(5 * 16, 0.0f);
  in[0] = 12.0f, in[1] = 5.0f, in[2] = -0.6f;
  in[16] = 2688.0f, in[17] = 1000.0f;
  in[32] = 7.0f;
  in[48] = 0.001f, in[49] = -0.0005f;
  in[64] = 11.25f, in[65] = 2.34375f, in[66] = -4.6875f;
  const quantized q = both(safeamp::nvfp4, in);
  CHECK(q.result.tensor_scale == 1.0f);
  CHECK(q.scales[0] == 2.0f);
  CHECK(q.out[0] == 12.0f);
  CHECK(q.out[1] == 4.0f);
  CHECK(q.out[2] == -1.0f);
  CHECK(q.scales[1] == 448.0f);
  CHECK(q.out[16] == 2688.0f);
  CHECK(q.out[17] == 896.0f);
  CHECK(q.scales[2] == 1.125f);
  CHECK(q.out[32] == 6.75f);
  CHECK(q.scales[3] == 0.0f);
  CHECK(q.out[48] == 0.0f);
  CHECK(bits(q.out[49]) == 0x80000000u);
  CHECK(q.result.stats.underflow >= 2u);  // both elements of block 3 (plus any rounded to 0 elsewhere)
  CHECK(q.scales[4] == 1.875f);
  CHECK(q.out[64] == 11.25f);
  CHECK(q.out[65] == 1.875f);
  CHECK(q.out[66] == -3.75f);

  // The tensor scale follows the tensor: everything 2x larger gives s = 2 and the same block scales.
  std::vector<float> twice(in);
  for (float& v : twice) v *= 2.0f;
  const quantized t = both(safeamp::nvfp4, twice);
  CHECK(t.result.tensor_scale == 2.0f);
  CHECK(t.scales[2] == 1.125f);
  CHECK(t.out[32] == 13.5f);
}

TEST_CASE("columns: blocks run down columns; the transpose of the rows result") {
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const std::size_t rows = 70, cols = 9;  // 70 = 2 full blocks of 32 and a partial one of 6
  std::vector<float> a(rows * cols), at(rows * cols);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < cols; ++c) {
      a[r * cols + c] = normal(gen);
      at[c * rows + r] = a[r * cols + c];
    }
  }
  const quantized down = both(safeamp::mxfp8_e5m2, a, {.rows = rows, .axis = block_axis::columns});
  const quantized along = both(safeamp::mxfp8_e5m2, at, {.rows = cols, .axis = block_axis::rows});
  int mismatches = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < cols; ++c) mismatches += bits(down.out[r * cols + c]) != bits(along.out[c * rows + r]);
  }
  CHECK(mismatches == 0);
  // Scales: down is (3 strips, 9 columns); along is (9 rows, 3 blocks).
  for (std::size_t s = 0; s < 3; ++s) {
    for (std::size_t c = 0; c < cols; ++c) CHECK(down.scales[s * cols + c] == along.scales[c * 3 + s]);
  }
}

TEST_CASE("the fast path matches the reference on random matrices of every block format") {
  std::mt19937_64 gen(16);
  std::uniform_int_distribution<int> exponent(-40, 40);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::bernoulli_distribution negative(0.5), zero(0.05);
  const block_format formats[] = {safeamp::mxfp8_e4m3,
                                  safeamp::mxfp8_e5m2,
                                  safeamp::mxfp6_e2m3,
                                  safeamp::mxfp6_e3m2,
                                  safeamp::mxfp4,
                                  safeamp::nvfp4,
                                  block_format{safeamp::fp8_e4m3fnuz, safeamp::e8m0, 8},
                                  block_format{safeamp::fp4_e2m1, safeamp::e8m0, 7}};
  const std::size_t shapes[][2] = {{33, 97}, {64, 64}, {5, 1030}, {129, 3}};
  for (const block_format& b : formats) {
    for (const auto& shape : shapes) {
      std::vector<float> in(shape[0] * shape[1]);
      for (float& v : in) {
        v = zero(gen) ? 0.0f : std::ldexp(mantissa(gen), exponent(gen) / 4) * (negative(gen) ? -1.0f : 1.0f);
      }
      in[in.size() / 2] = std::ldexp(1.0f, -140);  // a float subnormal somewhere
      for (const auto axis : {block_axis::rows, block_axis::columns}) {
        for (const auto mode : {rounding::nearest_even, rounding::stochastic}) {
          INFO(safeamp::block_format_name(b) << " " << shape[0] << "x" << shape[1] << " axis " << static_cast<int>(axis)
                                             << " mode " << static_cast<int>(mode));
          (void)both(b, in,
                     {.rows = shape[0], .axis = axis, .mode = mode, .key = {.seed = 5, .stream = 1, .offset = 3}});
        }
      }
    }
  }
}

TEST_CASE("stochastic rounding is unbiased within its binomial bound, and keyed by (seed, stream, index)") {
  // 1.25 in E2M1 with X = 1 (amax 4 sets X = 2^(2 - 2) = 1) lies halfway between 1 and 1.5: P(1.5) = 1/2.
  const std::size_t n = 32 * 2048;
  std::vector<float> in(n, 1.25f), out(n), scales(n / 32);
  for (std::size_t i = 0; i < n; i += 32) in[i] = 4.0f;
  const auto r = safeamp::quantize_blocks(safeamp::mxfp4, in, out, scales,
                                          {.mode = rounding::stochastic, .key = {.seed = 11, .stream = 2}});
  std::size_t ups = 0, count = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (i % 32 == 0) continue;
    ++count;
    ups += out[i] == 1.5f ? 1u : 0u;
    CHECK((out[i] == 1.0f || out[i] == 1.5f));
  }
  // Binomial(count, 1/2): 5 standard deviations is sqrt(count) * 2.5.
  const double sd = std::sqrt(static_cast<double>(count) * 0.25);
  CHECK(std::fabs(static_cast<double>(ups) - static_cast<double>(count) / 2) < 5 * sd);
  CHECK(r.stats.elements == n);
  // Same key, same bits; another seed, other bits.
  std::vector<float> again(n), other(n);
  (void)safeamp::quantize_blocks(safeamp::mxfp4, in, again, scales,
                                 {.mode = rounding::stochastic, .key = {.seed = 11, .stream = 2}});
  (void)safeamp::quantize_blocks(safeamp::mxfp4, in, other, scales,
                                 {.mode = rounding::stochastic, .key = {.seed = 12, .stream = 2}});
  CHECK(again == out);
  CHECK(other != out);
}

TEST_CASE("quantize_blocks rejects bad formats, shapes and modes with a clear error") {
  std::vector<float> in(64, 1.0f), out(64), scales(2), few(1);
  auto message = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const safeamp::error& e) {
      return e.what();
    }
    return "no error";
  };
  CHECK(message([&] {
          (void)safeamp::quantize_blocks(safeamp::fp16, safeamp::e8m0, 32, in, out, scales);
        }).find("block element format is fp16") == 0);
  CHECK(message([&] {
          (void)safeamp::quantize_blocks(safeamp::fp4_e2m1, safeamp::bf16, 32, in, out, scales);
        }).find("block scale format is bf16") == 0);
  CHECK(message([&] {
          (void)safeamp::quantize_blocks(safeamp::fp4_e2m1, safeamp::e8m0, 0, in, out, scales);
        }).find("block size is 0") == 0);
  CHECK(message([&] {
          (void)safeamp::quantize_blocks(safeamp::mxfp4, in, out, few);
        }).find("quantize_blocks scales size is 1") == 0);
  CHECK(message([&] {
          (void)safeamp::quantize_blocks(safeamp::mxfp4, in, out, scales, {.rows = 5});
        }).find("block_options rows is 5") == 0);
  CHECK(message([&] {
          (void)safeamp::quantize_blocks(safeamp::mxfp4, in, out, scales, {.mode = rounding::toward_zero});
        }).find("quantize_blocks rounding") == 0);
  CHECK(message([&] { (void)safeamp::quantize_blocks(safeamp::mxfp4, in, in, scales); }) == "no error");  // in place
  CHECK(safeamp::parse_block_format("MXFP8") == safeamp::mxfp8_e4m3);
  CHECK(safeamp::parse_block_format("mxfp6_e3m2") == safeamp::mxfp6_e3m2);
  CHECK(safeamp::block_format_name(safeamp::parse_block_format("nvfp4")) == "nvfp4");
  CHECK(message([] { (void)safeamp::parse_block_format("mxfp3"); }).find("block format name is 'mxfp3'") == 0);
  // Memory: 32 MXFP8 elements are 32 bytes plus a 1-byte scale; 32 NVFP4 elements 16 bytes, 2 scales, 4 bytes.
  CHECK(safeamp::block_storage_bytes(safeamp::mxfp8_e4m3, 32) == 33u);
  CHECK(safeamp::block_storage_bytes(safeamp::mxfp4, 64) == 34u);
  CHECK(safeamp::block_storage_bytes(safeamp::nvfp4, 32) == 22u);
}

namespace {

// One block of 32 of a chosen kind: the inputs that steer the MX scale and the element rounding to their edges.
void fill_edge_block(std::mt19937_64& gen, int kind, float* block, std::size_t n) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<std::size_t> where(0, n - 1);
  std::uniform_int_distribution<int> any_exponent(-149, 127);
  for (std::size_t j = 0; j < n; ++j) block[j] = normal(gen);
  const float inf = std::numeric_limits<float>::infinity();
  switch (kind) {
    case 0:  // all zeros, with signs: the smallest scale, 2^-127
      for (std::size_t j = 0; j < n; ++j) block[j] = j % 3 == 0 ? -0.0f : 0.0f;
      break;
    case 1:  // float subnormals only (exponent field 0, like zero)
      for (std::size_t j = 0; j < n; ++j) block[j] = std::ldexp(normal(gen), -135);
      break;
    case 2:  // a NaN somewhere (either half of the block)
      block[where(gen)] = std::numeric_limits<float>::quiet_NaN();
      break;
    case 3:  // an infinity somewhere
      block[where(gen)] = normal(gen) < 0.0f ? -inf : inf;
      break;
    case 4:  // amax at the top of float's range: the largest scales
      for (std::size_t j = 0; j < n; ++j) block[j] = std::ldexp(normal(gen), 125);
      block[where(gen)] = std::numeric_limits<float>::max() * (normal(gen) < 0.0f ? -1.0f : 1.0f);
      break;
    case 5:  // amax at the smallest normal floats: the clamp of shared_exp at -127 and the step to -126
      for (std::size_t j = 0; j < n; ++j) block[j] = std::ldexp(normal(gen), -118);
      block[where(gen)] = std::ldexp(1.0f, -126 + static_cast<int>(where(gen) % 12));
      break;
    case 6:  // every element at a random exponent: overflow, subnormal and zero results in one block
      for (std::size_t j = 0; j < n; ++j)
        block[j] = std::ldexp(1.0f + 0.99f * std::fabs(normal(gen)) / 4, any_exponent(gen));
      break;
    case 7:  // amax just below a power of two (mantissa all ones): the saturating clamp of the largest element
      block[where(gen)] = std::nextafter(std::ldexp(1.0f, any_exponent(gen) / 2 + 1), 0.0f);
      break;
    default:  // ordinary N(0,1) data scaled by a random power of two
      for (std::size_t j = 0; j < n; ++j) block[j] = std::ldexp(block[j], any_exponent(gen) / 2);
      break;
  }
}

}  // namespace

TEST_CASE("MX blocks of 32: the fast path matches the reference on edge blocks (every kernel path)") {
  // Zero, subnormal-only, NaN and infinity blocks, amax at float's largest and smallest exponents, saturating
  // elements, rows with a short last block (4, 15, 17 and 31 elements), on every MX format with blocks of 32.
  std::mt19937_64 gen(1616);
  std::uniform_int_distribution<int> kind(0, 9);
  const block_format formats[] = {safeamp::mxfp8_e4m3, safeamp::mxfp8_e5m2, safeamp::mxfp6_e2m3, safeamp::mxfp6_e3m2,
                                  safeamp::mxfp4};
  const std::size_t shapes[][2] = {{40, 96}, {8, 4096}, {17, 100}, {11, 47}, {9, 49}, {6, 63}, {12, 32}};
  for (const block_format& b : formats) {
    for (const auto& shape : shapes) {
      const std::size_t rows = shape[0], cols = shape[1];
      std::vector<float> in(rows * cols);
      int block = 0;  // the first ten blocks take the ten kinds in turn, the others a random kind
      for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t s = 0; s < cols; s += 32, ++block) {
          fill_edge_block(gen, block < 10 ? block : kind(gen), in.data() + r * cols + s, cols - s < 32 ? cols - s : 32);
        }
      }
      for (const auto mode : {rounding::nearest_even, rounding::stochastic}) {
        INFO(safeamp::block_format_name(b) << " " << rows << "x" << cols << " mode " << static_cast<int>(mode));
        const quantized q = both(b, in, {.rows = rows, .mode = mode, .key = {.seed = 9, .stream = 4, .offset = 1}});
        CHECK(q.result.stats.nan > 0u);  // the data held NaN and infinity blocks
      }
    }
  }
}

TEST_CASE("MX blocks wholly in the element's normal range: ties go to even, at every scale") {
  // Whole blocks of 32 whose elements all lie in the element format's normal range once scaled (the vectors the
  // one-pass kernels round with the fixed cut, on the AVX2 path applied to x itself): element 0 of each block
  // is max_finite, so X = 2^t exactly for a block scaled by 2^t; every other element is the midpoint between two
  // adjacent values lo = 2^e (1 + m 2^-M) and hi = lo + 2^(e - M), which must go to the one with the even
  // mantissa (m even: lo). Written from the definition, at scales from 2^-100 to 2^60, both signs.
  const block_format formats[] = {safeamp::mxfp8_e4m3, safeamp::mxfp8_e5m2, safeamp::mxfp6_e2m3, safeamp::mxfp6_e3m2,
                                  safeamp::mxfp4};
  for (const block_format& b : formats) {
    const safeamp::format_spec f = b.element;
    const int mant = f.mantissa_bits, emin = safeamp::min_exponent(f), emax = safeamp::max_exponent(f);
    const float max = safeamp::max_finite(f);
    for (const int t : {-100, -3, 0, 7, 60}) {
      std::vector<float> in(64), want(64);
      for (std::size_t j = 0; j < in.size(); ++j) {
        float v = max, w = max;
        if (j % 32 != 0) {
          const int e = emin + static_cast<int>(j % static_cast<std::size_t>(emax - emin + 1));
          int m = static_cast<int>(j % (std::size_t{1} << mant));
          if (std::ldexp(1.0f + static_cast<float>(m + 1) * std::ldexp(1.0f, -mant), e) > max) m = 0;
          const float lo = std::ldexp(1.0f + static_cast<float>(m) * std::ldexp(1.0f, -mant), e);
          const float hi = lo + std::ldexp(1.0f, e - mant);
          v = (lo + hi) / 2;
          w = m % 2 == 0 ? lo : hi;
        }
        const float sign = j % 3 == 0 ? -1.0f : 1.0f;
        in[j] = sign * std::ldexp(v, t);
        want[j] = sign * std::ldexp(w, t);
      }
      INFO(safeamp::block_format_name(b) << " scale 2^" << t);
      const quantized q = both(b, in, {.rows = 2});
      int wrong = 0;
      for (std::size_t j = 0; j < in.size(); ++j) {
        if (bits(q.out[j]) != bits(want[j]) && wrong++ < 4) {
          FAIL_CHECK("element " << j << " " << hex(bits(in[j])) << " -> " << hex(bits(q.out[j])) << ", want "
                                << hex(bits(want[j])));
        }
      }
      CHECK(wrong == 0);
      CHECK(q.scales[0] == std::ldexp(1.0f, t));
      CHECK(q.result.stats.underflow + q.result.stats.subnormal + q.result.stats.overflow == 0u);
    }
  }
}

TEST_CASE("NVFP4 blocks of 16: the fast path matches the reference on edge blocks (every kernel path)") {
  // A finite tensor (a NaN or an infinity makes all of NVFP4 NaN; the hand-worked test covers that): blocks of
  // N(0,1) data scaled by 2^U(-24, 24), all-zero blocks, float-subnormal blocks and blocks so small beside the
  // tensor's maximum that their E4M3 scale rounds to 0 (X = 0: zeros of the inputs' signs, underflow counted),
  // blocks whose scale saturates at 448 or is an E4M3 subnormal; short last blocks of 4, 15 and 1.
  std::mt19937_64 gen(1617);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> kind(0, 7), exponent(-24, 24);
  const std::size_t shapes[][2] = {{40, 96}, {8, 4096}, {17, 100}, {11, 47}, {9, 49}, {5, 33}, {12, 16}};
  for (const auto& shape : shapes) {
    const std::size_t rows = shape[0], cols = shape[1];
    std::vector<float> in(rows * cols);
    int block = 0;
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t s = 0; s < cols; s += 16, ++block) {
        const std::size_t len = cols - s < 16 ? cols - s : 16;
        float* x = in.data() + r * cols + s;
        const int k = block < 8 ? block : kind(gen);
        const int e = exponent(gen);
        for (std::size_t j = 0; j < len; ++j) {
          const float g = normal(gen);
          x[j] = k == 0   ? (j % 3 == 0 ? -0.0f : 0.0f)  // all zeros: S = 0
                 : k == 1 ? std::ldexp(g, -140)          // float subnormals: S = 0
                 : k == 2 ? std::ldexp(g, -40)           // tiny beside the tensor's 2^24-ish maximum: S = 0
                 : k == 3 ? std::ldexp(g, 13)            // S near E4M3 subnormals (2^-9..2^-6)
                 : k == 4 ? std::ldexp(g, 30)            // the tensor's maximum: S = 448 (saturated)
                          : std::ldexp(g, e);
        }
      }
    }
    for (const auto mode : {rounding::nearest_even, rounding::stochastic}) {
      INFO("nvfp4 " << rows << "x" << cols << " mode " << static_cast<int>(mode));
      const quantized q = both(safeamp::nvfp4, in, {.rows = rows, .mode = mode, .key = {.seed = 7, .stream = 2}});
      CHECK(q.result.stats.underflow > 0u);  // the zero-scale blocks' elements
      CHECK(q.result.stats.nan == 0u);
    }
  }
}

TEST_CASE("large inputs: in place, misaligned, rows of every alignment, and the chunked path's streaming stores") {
  std::mt19937_64 gen(3216);
  std::uniform_int_distribution<int> kind(0, 9);
  // 4 Mi floats (16 MiB: from this size on the chunked path writes with streaming stores on the AVX-512 path)
  // as (1024, 4096).
  const std::size_t rows = 1024, cols = 4096, n = rows * cols;
  std::vector<float> in(n);
  for (std::size_t s = 0; s < n; s += 32) fill_edge_block(gen, kind(gen), in.data() + s, 32);
  const block_options opt{.rows = rows};
  const quantized q = both(safeamp::mxfp8_e4m3, in, opt);
  // One float past a 64-byte boundary (in and out alike; std::vector's own large buffers sit 16 bytes past
  // one).
  std::vector<float> shifted_in(n + 1), shifted_out(n + 1), scales(n / 32);
  std::copy(in.begin(), in.end(), shifted_in.begin() + 1);
  const std::span<const float> src(shifted_in.data() + 1, n);
  (void)safeamp::quantize_blocks(safeamp::mxfp8_e4m3, src, std::span<float>(shifted_out.data() + 1, n), scales, opt);
  int mismatches = 0;
  for (std::size_t i = 0; i < n; ++i) mismatches += bits(shifted_out[i + 1]) != bits(q.out[i]);
  CHECK(mismatches == 0);
  // In place: out == in.
  std::vector<float> inplace(in);
  const auto r = safeamp::quantize_blocks(safeamp::mxfp8_e4m3, inplace, inplace, scales, opt);
  mismatches = 0;
  for (std::size_t i = 0; i < n; ++i) mismatches += bits(inplace[i]) != bits(q.out[i]);
  CHECK(mismatches == 0);
  CHECK(r.stats == q.result.stats);
  // Rows of 4095 (every alignment of a row's start, a short last block of 31), in stochastic rounding (words
  // made per group of blocks), and a format whose narrow normal range sends most vectors through the exact
  // rounding path.
  const std::size_t odd_rows = 1025, odd_cols = 4095;  // 16.0 MiB and a little more
  std::vector<float> odd(odd_rows * odd_cols);
  for (std::size_t s = 0; s < odd.size(); s += 32) {
    fill_edge_block(gen, kind(gen), odd.data() + s, odd.size() - s < 32 ? odd.size() - s : 32);
  }
  (void)both(safeamp::mxfp4, odd, {.rows = odd_rows, .mode = rounding::stochastic, .key = {.seed = 2, .offset = 5}});
  (void)both(safeamp::mxfp6_e3m2, odd, {.rows = odd_rows});
  // The chunked path at this size (it streams on the AVX-512 path): an element format without a vector kernel,
  // and NVFP4 with NaNs in the tensor (every output NaN).
  (void)both(block_format{safeamp::fp8_e4m3fnuz, safeamp::e8m0, 32}, odd, {.rows = odd_rows});
  CHECK(both(safeamp::nvfp4, odd, {.rows = odd_rows}).result.stats.nan == odd.size());
  // NVFP4's one-pass kernels: the same rows with the non-finite values zeroed.
  for (float& x : odd) x = std::isfinite(x) ? x : 0.0f;
  (void)both(safeamp::nvfp4, odd, {.rows = odd_rows});
  (void)both(safeamp::nvfp4, odd, {.rows = odd_rows, .mode = rounding::stochastic, .key = {.seed = 3}});
}

// The AVX-512 rows count the exact path's results in 16-bit lanes, widened once per group of blocks: one row of 2^20
// elements (the longest accepted: 65536 vectors) whose blocks hold one large value and tiny ones (subnormal or zero
// after the scale) makes lanes 1-15 count 2^16 times, so a missed widening wraps them to 0 and shows as a mismatch
// with the reference's counts.
TEST_CASE("a long row whose every vector has subnormal or zero results counts them all (16-bit counters widened)") {
  const std::size_t n = std::size_t{1} << 20;
  for (const block_format& b : {safeamp::mxfp8_e4m3, safeamp::nvfp4}) {
    std::vector<float> in(n, 0x1p-16f);
    for (std::size_t s = 0; s < n; s += static_cast<std::size_t>(b.block_size)) in[s] = -1.0f;
    for (const auto mode : {rounding::nearest_even, rounding::stochastic}) {
      INFO(safeamp::block_format_name(b) << " mode " << static_cast<int>(mode));
      const quantized q = both(b, in, {.rows = 1, .mode = mode, .key = {.seed = 9}});
      CHECK(q.result.stats.subnormal + q.result.stats.underflow >= n - n / 16);
    }
  }
}
