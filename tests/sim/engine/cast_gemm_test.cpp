// Casts of emulated tensors (the fast path against the core round_span, bit for bit and counter for
// counter) and the emulated GEMM (error within the textbook bound against an fp64 reference for several
// K, alpha/beta semantics, bit-identical results for 1 and 2 threads, shape errors). The GEMM's exact bits
// (accumulation order, output rounding options) are checked in gemm_order_test.cpp.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "safeamp/error.hpp"
#include "safeamp/format.hpp"
#include "safeamp/sim/gemm.hpp"
#include "safeamp/sim/parameter.hpp"
#include "safeamp/sim/tensor.hpp"

using namespace safeamp;
using namespace safeamp::sim;

namespace {

std::uint32_t bits_of(float x) {
  std::uint32_t u = 0;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
float from_bits(std::uint32_t u) {
  float x = 0.0f;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

matrix random_matrix(Eigen::Index rows, Eigen::Index cols, std::uint32_t stream, double std_dev = 1.0) {
  matrix m(rows, cols);
  init_normal(m, std_dev, 42, stream, fp32);
  return m;
}

// gamma_n = n u / (1 - n u) (Higham, Accuracy and Stability of Numerical Algorithms, Lemma 3.1).
double gamma(std::int64_t n, double u) { return static_cast<double>(n) * u / (1.0 - static_cast<double>(n) * u); }

}  // namespace

TEST_CASE("cast_in_place and cast_copy give round_span's bits and counters on a strided sweep of all floats") {
  // Every 61st bit pattern plus the neighbourhoods of each format's boundaries (max, min normal,
  // min subnormal, ties), signed, NaN and inf included.
  std::vector<float> inputs;
  for (std::uint64_t u = 0; u < (std::uint64_t{1} << 32); u += 61)
    inputs.push_back(from_bits(static_cast<std::uint32_t>(u)));
  for (const format_spec f : {fp16, bf16, tf32}) {
    for (const float edge : {max_finite(f), min_normal(f), min_subnormal(f), 1.0f}) {
      for (std::int32_t d = -4096; d <= 4096; ++d) {
        const float v = from_bits(static_cast<std::uint32_t>(static_cast<std::int64_t>(bits_of(edge)) + d));
        inputs.push_back(v);
        inputs.push_back(-v);
        inputs.push_back(v * 0.5f);  // half-way cases of the next binade down
      }
    }
  }
  for (const format_spec f : {fp16, bf16, tf32}) {
    INFO("format " << format_name(f));
    const matrix source = Eigen::Map<const matrix>(inputs.data(), 1, static_cast<Eigen::Index>(inputs.size()));
    matrix m = source;
    const cast_stats fast = cast_in_place(m, f, round_options{}, philox_key{});
    matrix copied;
    CHECK(cast_copy(source, copied, f, round_options{}, philox_key{}) == fast);
    CHECK(std::memcmp(copied.data(), m.data(), sizeof(float) * inputs.size()) == 0);
    std::vector<float> expected(inputs.size());
    const cast_stats core = round_span(f, std::span<const float>(inputs), std::span<float>(expected));
    CHECK(fast == core);
    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const float got = m.data()[i];
      const bool same = bits_of(got) == bits_of(expected[i]) || (std::isnan(got) && std::isnan(expected[i]));
      if (!same && mismatches++ < 5) {
        UNSCOPED_INFO("input 0x" << std::hex << bits_of(inputs[i]) << " fast 0x" << bits_of(got) << " core 0x"
                                 << bits_of(expected[i]));
      }
    }
    CHECK(mismatches == 0);
    CHECK(core.overflow > 0);
    CHECK(core.underflow > 0);
    CHECK(core.subnormal > 0);
  }
}

TEST_CASE("stochastic casts depend on key and index only, and round to a neighbour") {
  const matrix x = random_matrix(64, 64, 7, 1e-3);
  const round_options sr{.mode = rounding::stochastic};
  matrix a = x, b = x, c = x;
  (void)cast_in_place(a, fp16, sr, philox_key{.seed = 9, .stream = 3, .offset = 0});
  (void)cast_in_place(b, fp16, sr, philox_key{.seed = 9, .stream = 3, .offset = 0});
  (void)cast_in_place(c, fp16, sr, philox_key{.seed = 10, .stream = 3, .offset = 0});
  CHECK(std::memcmp(a.data(), b.data(), sizeof(float) * static_cast<std::size_t>(a.size())) == 0);
  CHECK(std::memcmp(a.data(), c.data(), sizeof(float) * static_cast<std::size_t>(a.size())) != 0);
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    const float down = round_to(fp16, x.data()[i], round_options{.mode = rounding::toward_neg_inf});
    const float up = round_to(fp16, x.data()[i], round_options{.mode = rounding::toward_pos_inf});
    REQUIRE((a.data()[i] == down || a.data()[i] == up));
  }
  CHECK(representable(a, fp16));
}

TEST_CASE("emulated GEMM error stays within gamma_K(u_acc) sum|a||b| + u_out |d| of an fp64 reference") {
  struct formats_case {
    gemm_formats formats;
    const char* name;
  };
  const formats_case cases[] = {
      {{fp16, fp32, fp16}, "fp16 in, fp32 accumulate, fp16 out"},
      {{bf16, fp32, bf16}, "bf16 in, fp32 accumulate, bf16 out"},
      {{fp16, fp32, fp32}, "fp16 in, fp32 accumulate, fp32 out"},
      {{tf32, fp32, fp32}, "tf32 in, fp32 accumulate, fp32 out"},
      {{fp16, fp16, fp16}, "fp16 in, fp16 accumulate, fp16 out"},
  };
  for (const std::int64_t k : {16, 256, 1024, 4096}) {
    const Eigen::Index m = 24, n = 20;
    const matrix a = random_matrix(m, k, 1);
    const matrix b = random_matrix(k, n, 2);
    for (const formats_case& fc : cases) {
      if (fc.formats.accumulate == fp16 && k > 256) continue;  // the reference path is O(MNK) scalar rounding
      INFO(fc.name << ", K = " << k);
      matrix d;
      (void)gemm(fc.formats, a, b, d);
      matrix ar = a, br = b;  // the inputs as the GEMM sees them
      (void)round_span(fc.formats.compute, span_of(ar));
      (void)round_span(fc.formats.compute, span_of(br));
      const double u_acc = unit_roundoff(fc.formats.accumulate);
      const double u_out = fc.formats.output == fp32 ? 0.0 : unit_roundoff(fc.formats.output);
      double worst_ratio = 0.0;
      for (Eigen::Index i = 0; i < m; ++i) {
        for (Eigen::Index j = 0; j < n; ++j) {
          double exact = 0.0, abs_sum = 0.0;
          for (Eigen::Index q = 0; q < k; ++q) {
            const double p = static_cast<double>(ar(i, q)) * static_cast<double>(br(q, j));
            exact += p;
            abs_sum += std::abs(p);
          }
          const double acc_bound = gamma(k, u_acc) * abs_sum;
          const double bound = acc_bound + u_out * (std::abs(exact) + acc_bound) + 1e-300;
          worst_ratio = std::max(worst_ratio, std::abs(static_cast<double>(d(i, j)) - exact) / bound);
        }
      }
      CHECK(worst_ratio <= 1.0);
      CHECK(representable(d, fc.formats.output));
    }
  }
}

TEST_CASE("fp16 accumulation breaks the fp32-accumulation bound that the fp32 path meets") {
  const std::int64_t k = 256;
  const matrix a = random_matrix(8, k, 11);
  const matrix b = random_matrix(k, 8, 12);
  matrix d16, d32;
  (void)gemm({fp16, fp16, fp32}, a, b, d16);
  (void)gemm({fp16, fp32, fp32}, a, b, d32);
  matrix ar = a, br = b;
  (void)round_span(fp16, span_of(ar));
  (void)round_span(fp16, span_of(br));
  double worst16 = 0.0, worst32 = 0.0;
  for (Eigen::Index i = 0; i < 8; ++i) {
    for (Eigen::Index j = 0; j < 8; ++j) {
      double exact = 0.0, abs_sum = 0.0;
      for (Eigen::Index q = 0; q < k; ++q) {
        exact += static_cast<double>(ar(i, q)) * br(q, j);
        abs_sum += std::abs(static_cast<double>(ar(i, q)) * br(q, j));
      }
      const double bound32 = gamma(k, unit_roundoff(fp32)) * abs_sum;
      worst16 = std::max(worst16, std::abs(d16(i, j) - exact) / bound32);
      worst32 = std::max(worst32, std::abs(d32(i, j) - exact) / bound32);
    }
  }
  CHECK(worst32 <= 1.0);
  CHECK(worst16 > 1.0);
}

TEST_CASE("alpha and beta follow cuBLASLt: D = alpha op(A) op(B) + beta C") {
  // Small integers: every value and every partial sum is exact, so the expected D is hand-computable.
  matrix a(2, 3), b(3, 2), c(2, 2);
  a << 1, 2, 3, 4, 5, 6;
  b << 1, 0, 0, 1, 1, 1;
  c << 1, 1, 1, 1;
  matrix d = c;
  (void)gemm({fp16, fp32, fp16}, a, b, d, {.alpha = 2.0f, .beta = 3.0f});
  // A B = [[4, 5], [10, 11]]; 2 AB + 3 C = [[11, 13], [23, 25]]
  CHECK(d(0, 0) == 11.0f);
  CHECK(d(0, 1) == 13.0f);
  CHECK(d(1, 0) == 23.0f);
  CHECK(d(1, 1) == 25.0f);
  matrix e;
  (void)gemm({fp32, fp32, fp32}, a, b, e, {.trans_a = transpose::none, .trans_b = transpose::none});
  matrix f;
  const matrix at = a.transpose();
  const matrix bt = b.transpose();
  (void)gemm({fp32, fp32, fp32}, at, bt, f, {.trans_a = transpose::transposed, .trans_b = transpose::transposed});
  CHECK(e == f);
}

TEST_CASE("emulated GEMM is bit-identical for 1 and 2 threads") {
  const matrix a = random_matrix(700, 300, 21);
  const matrix b = random_matrix(300, 500, 22);
  for (const gemm_formats& f : {gemm_formats{fp16, fp32, fp16}, gemm_formats{fp32, fp32, fp32}}) {
    matrix d1, d2;
    (void)gemm(f, a, b, d1, {.threads = 1});
    (void)gemm(f, a, b, d2, {.threads = 2});
    REQUIRE(d1.size() == d2.size());
    CHECK(std::memcmp(d1.data(), d2.data(), sizeof(float) * static_cast<std::size_t>(d1.size())) == 0);
  }
}

TEST_CASE("emulated GEMM rejects mismatched shapes with a safeamp::error naming the field") {
  const matrix a = matrix::Ones(3, 4);
  const matrix b = matrix::Ones(5, 2);
  matrix d;
  CHECK_THROWS_AS(gemm({}, a, b, d), safeamp::error);
  CHECK_THROWS_WITH(gemm({}, a, b, d), Catch::Contains("gemm op(B) rows"));
  matrix c = matrix::Ones(2, 2);
  const matrix b2 = matrix::Ones(4, 3);
  CHECK_THROWS_WITH(gemm({}, a, b2, c, {.beta = 1.0f}), Catch::Contains("gemm C shape"));
}

TEST_CASE("output casts count overflow and underflow") {
  matrix a(1, 2), b(2, 1);
  a << 300.0f, 300.0f;
  b << 300.0f, 300.0f;  // 180000 > 65504
  matrix d;
  cast_stats s = gemm({fp16, fp32, fp16}, a, b, d);
  CHECK(s.overflow == 1);
  CHECK(std::isinf(d(0, 0)));
  a << 1e-4f, 0.0f;
  b << 1e-4f, 0.0f;  // 1e-8 < 2^-25 (half the smallest fp16 subnormal): rounds to zero
  s = gemm({fp16, fp32, fp16}, a, b, d);
  CHECK(s.underflow == 1);
  CHECK(d(0, 0) == 0.0f);
}

TEST_CASE("an fp32 cast keeps values, and flushes float subnormals only when asked") {
  matrix m(1, 3);
  m << 1e-40f, -1e-40f, 1.5f;  // 1e-40 is a float subnormal (min normal 2^-126 ~ 1.18e-38)
  matrix kept = m;
  const cast_stats plain = cast_in_place(kept, fp32, round_options{}, philox_key{});
  CHECK(std::memcmp(kept.data(), m.data(), sizeof(float) * 3) == 0);
  CHECK(plain.underflow == 0);
  matrix flushed = m;
  const cast_stats ftz = cast_in_place(flushed, fp32, round_options{.flush_subnormals = true}, philox_key{});
  CHECK(bits_of(flushed(0, 0)) == 0x00000000u);
  CHECK(bits_of(flushed(0, 1)) == 0x80000000u);  // the sign survives the flush
  CHECK(flushed(0, 2) == 1.5f);
  CHECK(ftz.underflow == 2);
}
