// The emulated GEMM's exact bits: the documented accumulation order (gemm.hpp) reproduced by an independent
// scalar oracle, bit for bit, on data where a more accurate summation (double) gives other bits; and the
// output cast honouring the caller's rounding options (directed and stochastic) through the core round_to.
#include <catch2/catch.hpp>
#include <cstdint>
#include <iomanip>
#include <limits>
#include <sstream>
#include <string>

#include "safeamp/format.hpp"
#include "safeamp/policy.hpp"
#include "safeamp/sim/gemm.hpp"
#include "safeamp/sim/layers.hpp"
#include "safeamp/sim/parameter.hpp"
#include "sim/engine/sim_test_util.hpp"

using namespace safeamp;
using namespace safeamp::sim;

namespace {

using sim_test::bits_of;
using sim_test::hex;

// fl32(x op y) computed in double and rounded once to float: a double holds the exact product of two floats,
// and for a sum double rounding through 53 bits is innocuous for a 24-bit result (53 >= 2 * 24 + 2), so
// these are the correctly rounded float results whatever the compiler does with float expressions.
float mul32(float x, float y) { return static_cast<float>(static_cast<double>(x) * static_cast<double>(y)); }
float add32(float x, float y) { return static_cast<float>(static_cast<double>(x) + static_cast<double>(y)); }

// The documented order for one element, written from gemm.hpp: inputs through round_to(compute), acc = +0,
// k ascending, acc = R(acc + fl32(a b)), then fl32(alpha acc) [+ fl32(beta c)]. op(A) = a, op(B) = b here.
float oracle(const gemm_formats& f, const matrix& a, const matrix& b, Eigen::Index i, Eigen::Index j, float alpha,
             float beta, float c) {
  float acc = 0.0f;
  for (Eigen::Index k = 0; k < a.cols(); ++k) {
    const float p = mul32(round_to(f.compute, a(i, k)), round_to(f.compute, b(k, j)));
    acc = add32(acc, p);
    if (f.accumulate != fp32) acc = round_to(f.accumulate, acc);
  }
  const float scaled = mul32(alpha, acc);
  return beta == 0.0f ? scaled : add32(scaled, mul32(beta, c));
}

// The same sum kept in double (what a too-accurate emulator returns), rounded to float at the end.
float double_sum(const matrix& a, const matrix& b, Eigen::Index i, Eigen::Index j) {
  double acc = 0.0;
  for (Eigen::Index k = 0; k < a.cols(); ++k) acc += static_cast<double>(a(i, k)) * static_cast<double>(b(k, j));
  return static_cast<float>(acc);
}

// Cancellation-heavy rows: normal values times 2^e with e uniform in [-12, 12], so each sum adds terms of
// very different magnitudes whose low bits fp32 accumulation loses and double accumulation keeps.
matrix wide_range(Eigen::Index rows, Eigen::Index cols, std::uint32_t stream) {
  matrix m(rows, cols);
  init_normal(m, 1.0, 5, stream, fp32);
  for (Eigen::Index i = 0; i < m.size(); ++i) {
    const auto e = static_cast<int>(stochastic_bits(5, stream + 100u, static_cast<std::uint64_t>(i)) % 25u) - 12;
    m.data()[i] = std::ldexp(m.data()[i], e);
  }
  return m;
}

}  // namespace

TEST_CASE("an fp32 sum that double accumulation would keep is lost, as the documented order says") {
  // 1 + 2^-30 rounds to 1 in fp32 (half an ulp of 1 is 2^-24), then 1 - 1 = 0. The exact sum is 2^-30.
  matrix a(1, 3), b(3, 1);
  a << 1.0f, 0x1p-30f, -1.0f;
  b << 1.0f, 1.0f, 1.0f;
  matrix d;
  (void)gemm({fp32, fp32, fp32}, a, b, d);
  INFO("d = " << hex(d(0, 0)));
  CHECK(bits_of(d(0, 0)) == 0x00000000u);
}

TEST_CASE("emulated GEMM gives the documented order's bits, not those of a more accurate sum") {
  struct formats_case {
    gemm_formats formats;
    float input_scale;  // a power of two (exact); keeps fp16 partial sums below 65504
    const char* name;
  };
  const formats_case cases[] = {
      {{fp32, fp32, fp32}, 1.0f, "fp32 in, fp32 accumulate"},
      {{bf16, fp32, fp32}, 1.0f, "bf16 in, fp32 accumulate"},
      {{fp16, fp32, fp32}, 1.0f, "fp16 in, fp32 accumulate"},
      {{fp16, fp16, fp32}, 0x1p-8f, "fp16 in, fp16 accumulate"},
  };
  // M = 131 spans two row blocks and ends in a partial register tile; N = 19 ends in a partial column panel.
  const Eigen::Index m = 131, n = 19, k = 300;
  const matrix a_wide = wide_range(m, k, 1);
  const matrix b_wide = wide_range(k, n, 2);
  const matrix c = wide_range(m, n, 3);
  for (const formats_case& fc : cases) {
    const matrix a = a_wide * fc.input_scale;
    const matrix b = b_wide * fc.input_scale;
    for (const float beta : {0.0f, 0.375f}) {
      INFO(fc.name << ", alpha 0.75, beta " << beta);
      matrix d = c;
      (void)gemm(fc.formats, a, b, d, {.alpha = 0.75f, .beta = beta, .threads = 2});
      std::int64_t mismatches = 0;
      for (Eigen::Index i = 0; i < m; ++i) {
        for (Eigen::Index j = 0; j < n; ++j) {
          const float want = oracle(fc.formats, a, b, i, j, 0.75f, beta, c(i, j));
          if (bits_of(d(i, j)) != bits_of(want) && ++mismatches <= 3) {
            UNSCOPED_INFO("d(" << i << ", " << j << ") = " << hex(d(i, j)) << ", documented order " << hex(want));
          }
        }
      }
      CHECK(mismatches == 0);
    }
  }
  // The data can tell the orders apart: with fp32 inputs, double accumulation changes most elements.
  std::int64_t differ = 0;
  for (Eigen::Index i = 0; i < m; ++i) {
    for (Eigen::Index j = 0; j < n; ++j) {
      differ += bits_of(double_sum(a_wide, b_wide, i, j)) != bits_of(oracle({}, a_wide, b_wide, i, j, 1.0f, 0.0f, 0.0f))
                    ? 1
                    : 0;
    }
  }
  CHECK(differ > m * n / 2);
}

TEST_CASE("the output cast uses the caller's rounding mode and key (directed and stochastic)") {
  // 1400 x 24 outputs are more than two of the cast's chunks of 16384 (the last partial), which two threads share.
  const Eigen::Index m = 1400, n = 24, k = 64;
  const matrix a = wide_range(m, k, 11) * 0x1p-10f;  // keeps D well inside fp16's range (65504)
  const matrix b = wide_range(k, n, 12) * 0x1p-10f;
  matrix acc32;  // the fp32-accumulated result, before the output cast
  (void)gemm({bf16, fp32, fp32}, a, b, acc32);
  const philox_key key{.seed = 77, .stream = 5, .offset = 1000};
  const round_options modes[] = {
      {.mode = rounding::toward_zero}, {.mode = rounding::toward_pos_inf}, {.mode = rounding::stochastic}};
  for (const format_spec out : {bf16, fp16}) {
    for (const round_options& opt : modes) {
      for (const int threads : {1, 2}) {
        INFO(format_name(out) << " output, mode " << static_cast<int>(opt.mode) << ", threads " << threads);
        matrix d;
        const cast_stats stats = gemm({bf16, fp32, out}, a, b, d, {.rounding = opt, .key = key, .threads = threads});
        CHECK(stats.elements == static_cast<std::uint64_t>(m * n));
        std::int64_t mismatches = 0, unlike_nearest = 0;
        for (Eigen::Index i = 0; i < acc32.size(); ++i) {
          const auto index = static_cast<std::uint64_t>(i);  // row-major element index of D
          const float want =
              round_to(out, acc32.data()[i], opt, stochastic_bits(key.seed, key.stream, key.offset + index));
          unlike_nearest += want != round_to(out, acc32.data()[i]) ? 1 : 0;
          if (bits_of(d.data()[i]) != bits_of(want) && ++mismatches <= 3) {
            UNSCOPED_INFO("element " << i << ": " << hex(d.data()[i]) << ", expected " << hex(want));
          }
        }
        CHECK(mismatches == 0);
        // A cast that ignored the options (nearest even) would differ on these elements.
        CHECK(unlike_nearest > acc32.size() / 8);
      }
    }
  }
  // Another key gives other stochastic bits.
  matrix d1, d2;
  (void)gemm({bf16, fp32, bf16}, a, b, d1, {.rounding = {.mode = rounding::stochastic}, .key = key});
  (void)gemm({bf16, fp32, bf16}, a, b, d2,
             {.rounding = {.mode = rounding::stochastic}, .key = {.seed = 78, .stream = 5, .offset = 1000}});
  CHECK(d1 != d2);
}

TEST_CASE("every transpose, tile edge, block split and kernel path gives the documented order's bits") {
  // Run once per kernel path (CTest sets SAFEAMP_CPU_PATH: sim_gemm_order_test_portable, _avx2, _avx512).
  INFO("kernel path " << cpu_path_name(active_cpu_path()));
  struct shape_case {
    Eigen::Index m, n, k;
    const char* what;
  };
  const shape_case shapes[] = {
      // 131 rows: partial register tiles of every path (4, 8 rows); 19 columns: a partial vector of columns
      // (masked loads of op(B) read in place).
      {131, 19, 77, "partial tiles, op(B) read in place"},
      // 300 rows: more than two row blocks (op(B) packed); 150 columns: two column blocks, a partial panel.
      {300, 150, 40, "two row and column blocks, op(B) packed"},
      // K = 230 = 3 x 64 + 38: pack_b transposes op(B) in blocks of 64 rows and a partial one; 230 x 150 is past
      // the size from which two threads pack its panels.
      {300, 150, 230, "K past the pack's row blocks, op(B) packed by two threads"},
      // Edge tiles of every row count and vector count. A block's last rows, when more than one tile's and less
      // than two, are two tiles of about half each (gemm.cpp). Up to 32 columns the AVX-512 tile is 8 x 32 (rows
      // 1-8 below: 13 = 7 + 6, 8, 7, 6, 5, 4, 3, 2, 1; 5, 10, 20, 25 columns keep 1 or 2 vectors of 16), past it
      // 6 x 64 (13 = 6 + 4 + 3, 8 = 4 + 4, 7 = 4 + 3, 5, 4, 3, 2, 1; the last panel of 70, 100, 120 columns keeps
      // 1, 3, 4 vectors); AVX2's 6 x 16 tile ends in 1-5 rows (131 = 120 + 4 + 4 in the first block, 3 in the
      // second; 5, 4, 3, 2, 1 rows below). op(B) in place loads masked, packed panels read their zero padding. A
      // transposed op(A) is copied row-major where D has 32 columns or more (8 x 8 blocks on the vector
      // paths: 13, 131 and 300 rows and K = 33, 77, 230 end in partial blocks), read in place below that.
      {13, 5, 33, "edge tiles: 13 rows, 5 columns"},
      {7, 30, 33, "edge tiles: 7 rows, 30 columns"},
      {13, 70, 33, "edge tiles: 13 rows, 70 columns"},
      {7, 100, 33, "edge tiles: 7 rows, 100 columns"},
      {13, 120, 33, "edge tiles: 13 rows, 120 columns"},
      {5, 120, 33, "edge tiles: 5 rows, 120 columns"},
      {4, 64, 33, "edge tiles: 4 rows, 64 columns"},
      {3, 70, 33, "edge tiles: 3 rows, 70 columns"},
      {2, 100, 33, "edge tiles: 2 rows, 100 columns"},
      {1, 20, 33, "edge tiles: 1 row, 20 columns"},
      {2, 32, 33, "edge tiles: 2 rows, 32 columns"},
      {4, 10, 33, "edge tiles: 4 rows, 10 columns"},
      {6, 25, 33, "edge tiles: 6 rows, 25 columns"},
      {8, 20, 33, "edge tiles: 8 rows, 20 columns"},
      {5, 30, 33, "edge tiles: 5 rows, 30 columns"},
      {3, 10, 33, "edge tiles: 3 rows, 10 columns"},
      {8, 70, 33, "edge tiles: 8 rows, 70 columns (4 + 4)"},
      {1, 64, 33, "edge tiles: 1 row, 64 columns"},
  };
  for (const shape_case& sc : shapes) {
    const matrix a = wide_range(sc.m, sc.k, 21);  // op(A) and op(B) as the oracle reads them
    const matrix b = wide_range(sc.k, sc.n, 22);
    const matrix c = wide_range(sc.m, sc.n, 23);
    for (const format_spec compute : {fp32, fp16, bf16}) {
      const gemm_formats f{compute, fp32, fp32};
      // The oracle once per format (beta 0.375), then every transpose and thread count must give its bits.
      matrix want(sc.m, sc.n);
      for (Eigen::Index i = 0; i < sc.m; ++i) {
        for (Eigen::Index j = 0; j < sc.n; ++j) want(i, j) = oracle(f, a, b, i, j, 0.75f, 0.375f, c(i, j));
      }
      for (const bool ta : {false, true}) {
        for (const bool tb : {true, false}) {  // transposed first: its pack must not find the panels ready
          for (const int threads : {1, 2}) {
            INFO(sc.what << ", compute " << format_name(compute) << ", trans_a " << ta << ", trans_b " << tb
                         << ", threads " << threads);
            const matrix a_arg = ta ? matrix(a.transpose()) : a;  // stored so that op() gives a and b back
            const matrix b_arg = tb ? matrix(b.transpose()) : b;
            matrix d = c;
            (void)gemm(f, a_arg, b_arg, d,
                       {.alpha = 0.75f,
                        .beta = 0.375f,
                        .trans_a = ta ? transpose::transposed : transpose::none,
                        .trans_b = tb ? transpose::transposed : transpose::none,
                        .threads = threads});
            std::int64_t mismatches = 0;
            for (Eigen::Index i = 0; i < sc.m; ++i) {
              for (Eigen::Index j = 0; j < sc.n; ++j) {
                if (bits_of(d(i, j)) != bits_of(want(i, j)) && ++mismatches <= 3) {
                  UNSCOPED_INFO("d(" << i << ", " << j << ") = " << hex(d(i, j)) << ", documented order "
                                     << hex(want(i, j)));
                }
              }
            }
            CHECK(mismatches == 0);
          }
        }
      }
    }
  }
}

namespace {

// gemm(f, a, b) at 1 and 2 threads must give `expected` in every element (the first 3 misses are printed).
void check_every_element(const gemm_formats& f, const matrix& a, const matrix& b, float expected) {
  for (const int threads : {1, 2}) {
    INFO("threads " << threads);
    matrix d;
    (void)gemm(f, a, b, d, {.threads = threads});
    std::int64_t wrong = 0;
    for (Eigen::Index i = 0; i < d.size(); ++i) {
      if (bits_of(d.data()[i]) != bits_of(expected) && ++wrong <= 3) {
        UNSCOPED_INFO("d[" << i << "] = " << hex(d.data()[i]) << ", documented order " << hex(expected));
      }
    }
    CHECK(wrong == 0);
  }
}

}  // namespace

TEST_CASE("a bf16 product past fp32's range rounds on its own before the add (no fma on any path)") {
  // Run once per kernel path, like the test above. bf16 keeps fp32's exponent range, so a product of bf16
  // values can overflow fp32: here k = 0 gives fl32(-2^64 * 1.5 * 2^63) = -1.5 * 2^127, and k = 1 gives
  // fl32(2^64 * 2^64) = +inf, so the documented order's sum is +inf. An fma (one rounding of
  // -1.5 * 2^127 + 2^128) would give 2^126: only formats whose products are all exact may be fused.
  INFO("kernel path " << cpu_path_name(active_cpu_path()));
  const float big = std::ldexp(1.0f, 64);
  matrix a(7, 2), b(2, 20);
  a.col(0).setConstant(-big);
  a.col(1).setConstant(big);
  b.row(0).setConstant(1.5f * std::ldexp(1.0f, 63));
  b.row(1).setConstant(big);
  REQUIRE(round_to(bf16, a(0, 0)) == a(0, 0));
  REQUIRE(round_to(bf16, b(0, 0)) == b(0, 0));
  check_every_element({bf16, fp32, fp32}, a, b, std::numeric_limits<float>::infinity());
}

TEST_CASE("a small format whose products fall below fp32's subnormal grid is not fused either") {
  // 5 exponent bits, 2 mantissa bits, bias_offset 64 (bias 79): values are multiples of 2^-80, so a product
  // of two can be finer than fp32's smallest subnormal 2^-149 and round on its own. k = 0: 2^-70 * 2^-79 =
  // 2^-149 exactly; k = 1: 1.5 * 2^-70 * 2^-79 = 1.5 * 2^-149 rounds to 2 * 2^-149 (tie to even), so the
  // documented order gives 3 * 2^-149. An fma rounds 2^-149 + 1.5 * 2^-149 = 2.5 * 2^-149 once, to 2 * 2^-149.
  INFO("kernel path " << cpu_path_name(active_cpu_path()));
  const format_spec tiny{5, 2, special_values::ieee, 64};
  REQUIRE(is_valid(tiny));
  matrix a(7, 2), b(2, 20);
  a.col(0).setConstant(std::ldexp(1.0f, -70));
  a.col(1).setConstant(1.5f * std::ldexp(1.0f, -70));
  b.setConstant(std::ldexp(1.0f, -79));
  REQUIRE(round_to(tiny, a(0, 1)) == a(0, 1));
  REQUIRE(round_to(tiny, b(0, 0)) == b(0, 0));
  check_every_element({tiny, fp32, fp32}, a, b, 3.0f * std::ldexp(1.0f, -149));
}

TEST_CASE("a linear layer's bias epilogue (C read from the bias row, not from D) gives the documented bits") {
  // The tiles read C from the bias row instead of a D filled with it: y(i, j) = out(fl32(acc) + b(j)), with
  // alpha = beta = 1. Edge tiles of every path (run once per path, as above); the fp32 policy's GEMM, which does
  // not round its operands; and the paths that read C from D (block-scaled inputs, fp16 accumulation), which
  // fill D with the bias row first, against the public gemm() on a D filled by hand.
  INFO("kernel path " << cpu_path_name(active_cpu_path()));
  struct shape_case {
    Eigen::Index m, n, k;
  };
  for (const shape_case sc : {shape_case{13, 5, 33}, shape_case{7, 30, 33}, shape_case{13, 70, 33},
                              shape_case{7, 100, 33}, shape_case{300, 150, 40}}) {
    for (const precision_policy& pol : {presets::fp16_mixed, presets::fp32, presets::fp32.with_op(op_class::matmul, fp16),
                                        [] {
                                          precision_policy p = presets::fp32;
                                          p.matmul_blocks = mxfp8_e4m3;
                                          return p;
                                        }(),
                                        [] {
                                          precision_policy p = presets::fp16_mixed;
                                          p.accumulate = fp16;
                                          return p;
                                        }()}) {
      const gemm_formats f{pol.format_for(op_class::matmul), pol.accumulate, pol.output, pol.matmul_blocks};
      INFO(sc.m << " x " << sc.n << " (K " << sc.k << "), matmul " << format_name(f.compute) << ", accumulate "
                << format_name(f.accumulate) << (is_block_scaled(f.input_blocks) ? ", mxfp8 inputs" : ""));
      parameter_list params;
      exec_context ctx;
      ctx.threads = 2;
      linear_layer l = make_linear(params, "fc", sc.k, sc.n);
      params[l.weight].value = wide_range(sc.k, sc.n, 31);
      params[l.bias].value = wide_range(1, sc.n, 32);
      const matrix x = wide_range(sc.m, sc.k, 33);
      matrix y;
      l.forward(ctx, pol, params, x, y, pol.output);
      REQUIRE(y.rows() == sc.m);
      REQUIRE(y.cols() == sc.n);
      const matrix& b = params[l.bias].value;
      matrix want(sc.m, sc.n);
      if (f.accumulate == fp32 && !is_block_scaled(f.input_blocks)) {
        for (Eigen::Index i = 0; i < sc.m; ++i) {
          for (Eigen::Index j = 0; j < sc.n; ++j) {
            want(i, j) = round_to(f.output, oracle(f, x, params[l.weight].value, i, j, 1.0f, 1.0f, b(0, j)));
          }
        }
      } else {
        for (Eigen::Index i = 0; i < sc.m; ++i) want.row(i) = b;
        (void)gemm(f, x, params[l.weight].value, want, {.beta = 1.0f});
      }
      std::int64_t mismatches = 0;
      for (Eigen::Index i = 0; i < sc.m; ++i) {
        for (Eigen::Index j = 0; j < sc.n; ++j) {
          if (bits_of(y(i, j)) != bits_of(want(i, j)) && ++mismatches <= 3) {
            UNSCOPED_INFO("(" << i << ", " << j << "): " << hex(y(i, j)) << ", want " << hex(want(i, j)));
          }
        }
      }
      CHECK(mismatches == 0);
    }
  }
}
