// Every layer's backward against central finite differences of its forward (fp32 policy, loss
// L = sum(w * y) with random w), and the softmax-overflow demonstration: scores beyond 65504 overflow
// when softmax runs in fp16, not under fp16-mixed (softmax in fp32).
#include "safeamp/sim/layers.hpp"

#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "safeamp/error.hpp"
#include "safeamp/format.hpp"
#include "safeamp/policy.hpp"
#include "safeamp/sim/attention.hpp"
#include "safeamp/sim/gemm.hpp"
#include "safeamp/sim/loss.hpp"
#include "safeamp/sim/parameter.hpp"
#include "safeamp/sim/tensor.hpp"

using namespace safeamp;
using namespace safeamp::sim;

namespace {

constexpr precision_policy fp32_policy = presets::fp32;

std::uint64_t bits_of_double(double x) { return std::bit_cast<std::uint64_t>(x); }

matrix random_matrix(Eigen::Index rows, Eigen::Index cols, std::uint32_t stream, double std_dev = 1.0) {
  matrix m(rows, cols);
  init_normal(m, std_dev, 77, stream, fp32);
  return m;
}

double weighted_sum(const matrix& y, const matrix& w) {
  double s = 0.0;
  for (Eigen::Index i = 0; i < y.size(); ++i) s += static_cast<double>(y.data()[i]) * w.data()[i];
  return s;
}

// Central difference of loss() with respect to *x, step h; restores *x.
double central_difference(float* x, float h, const std::function<double()>& loss) {
  const float saved = *x;
  *x = saved + h;
  const double up = loss();
  *x = saved - h;
  const double down = loss();
  *x = saved;
  return (up - down) / (2.0 * static_cast<double>(h));
}

// Checks analytic gradient entries against finite differences for up to `samples` entries of `values`.
// Tolerance: the truncation error of a central difference is O(h^2) and the float rounding of the loss
// is about u * sum|w y| / h; we accept 1e-2 relative to the gradient's own scale.
void check_gradient(const char* what, matrix& values, const matrix& analytic, const std::function<double()>& loss,
                    float h = 1e-2f, Eigen::Index samples = 24) {
  INFO(what);
  REQUIRE(values.size() == analytic.size());
  const double scale = std::max(1e-3, static_cast<double>(analytic.cwiseAbs().maxCoeff()));
  const Eigen::Index stride = std::max<Eigen::Index>(1, values.size() / samples);
  for (Eigen::Index i = 0; i < values.size(); i += stride) {
    const double numeric = central_difference(values.data() + i, h, loss);
    INFO("element " << i << ": analytic " << analytic.data()[i] << ", numeric " << numeric);
    CHECK(std::abs(numeric - analytic.data()[i]) <= 1e-2 * scale);
  }
}

}  // namespace

TEST_CASE("linear backward matches finite differences") {
  parameter_list params;
  exec_context ctx;
  linear_layer l = make_linear(params, "fc", 6, 5);
  params[l.weight].value = random_matrix(6, 5, 1);
  params[l.bias].value = random_matrix(1, 5, 2);
  matrix x = random_matrix(7, 6, 3);
  const matrix w = random_matrix(7, 5, 4);
  matrix y, dx;
  auto loss = [&] {
    matrix out;
    l.forward(ctx, fp32_policy, params, x, out, fp32);
    return weighted_sum(out, w);
  };
  l.forward(ctx, fp32_policy, params, x, y, fp32);
  l.backward(ctx, fp32_policy, params, w, &dx);
  check_gradient("dx", x, dx, loss);
  check_gradient("dW", params[l.weight].value, params[l.weight].grad, loss);
  check_gradient("db", params[l.bias].value, params[l.bias].grad, loss);
  // Mismatched shapes are errors naming the field, never a silent broadcast.
  matrix wrong = random_matrix(7, 4, 5);
  CHECK_THROWS_WITH(l.forward(ctx, fp32_policy, params, wrong, y, fp32), Catch::Contains("linear input columns"));
  CHECK_THROWS_WITH(l.backward(ctx, fp32_policy, params, wrong, &dx),
                    Catch::Contains("linear output-gradient columns"));
}

TEST_CASE("a mixed-policy linear layer keeps only its rounded input, with the bits of a backward from x itself") {
  const precision_policy pol = presets::fp16_mixed;
  parameter_list params;
  exec_context ctx;
  linear_layer l = make_linear(params, "fc", 6, 5);
  params[l.weight].value = random_matrix(6, 5, 1);
  params[l.bias].value = random_matrix(1, 5, 2);
  const matrix x = random_matrix(7, 6, 3);
  const matrix dy = random_matrix(7, 5, 4);
  matrix y, dx;
  l.forward(ctx, pol, params, x, y, pol.output);
  CHECK(l.input.size() == 0);  // x itself is not copied: the backward reads x rounded to the matmul format
  CHECK(l.input_low.rows() == 7);
  CHECK(l.input_low.cols() == 6);
  l.backward(ctx, pol, params, dy, &dx);
  // dW = x^T dy as one GEMM on x itself gives, rounding x on the way in.
  const gemm_formats f{pol.format_for(op_class::matmul), pol.accumulate, pol.gradient, pol.matmul_blocks};
  matrix want;
  (void)gemm(f, x, dy, want, {.trans_a = transpose::transposed});
  REQUIRE(want.rows() == params[l.weight].grad.rows());
  REQUIRE(want.cols() == params[l.weight].grad.cols());
  for (Eigen::Index i = 0; i < want.size(); ++i) {
    INFO("dW element " << i);
    CHECK(std::bit_cast<std::uint32_t>(params[l.weight].grad.data()[i]) ==
          std::bit_cast<std::uint32_t>(want.data()[i]));
  }
  // A backward whose batch is not the forward's has no input to use: an error naming both shapes.
  const matrix other = random_matrix(9, 5, 5);
  CHECK_THROWS_WITH(l.backward(ctx, pol, params, other, &dx),
                    Catch::Contains("linear backward input") && Catch::Contains("9 x 6"));
}

TEST_CASE("forward_in_place and stored-format promises give forward()'s and backward()'s bits; a false one is an error when checked") {
  const bool checks_were_on = format_checks_enabled();
  set_format_checks(true);
  parameter_list params;
  linear_layer a = make_linear(params, "a", 6, 5);
  params[a.weight].value = random_matrix(6, 5, 1);
  params[a.bias].value = random_matrix(1, 5, 2);
  linear_layer b = a;  // the same parameters
  matrix x = random_matrix(7, 6, 3);
  matrix dy = random_matrix(7, 5, 4);
  for (const precision_policy& pol : {presets::fp16_mixed, presets::bf16_mixed, presets::fp32}) {
    INFO("policy compute " << format_name(pol.compute));
    // Values of the formats the producers would have stored them in, as the block's layers are.
    matrix x_stored = x, dy_stored = dy;
    (void)cast_in_place(x_stored, pol.output, round_options{}, philox_key{});
    (void)cast_in_place(dy_stored, pol.gradient, round_options{}, philox_key{});
    for (int step = 0; step < 2; ++step) {  // twice: the fp32 path swaps its buffers between the slot and `input`
      INFO("step " << step);
      exec_context ctx_a, ctx_b;
      matrix y_a, y_b, dx_a, dx_b;
      a.forward(ctx_a, pol, params, x_stored, y_a, pol.output);
      a.backward(ctx_a, pol, params, dy_stored, &dx_a);
      const matrix dw_a = params[a.weight].grad, db_a = params[a.bias].grad;
      b.input_slot() = x_stored;
      b.forward_in_place(ctx_b, pol, params, pol.output, y_b, pol.output);
      b.backward(ctx_b, pol, params, dy_stored, &dx_b, pol.gradient);
      const auto same_bits = [](const matrix& p, const matrix& q) {
        if (p.rows() != q.rows() || p.cols() != q.cols()) return false;
        for (Eigen::Index i = 0; i < p.size(); ++i) {
          if (std::bit_cast<std::uint32_t>(p.data()[i]) != std::bit_cast<std::uint32_t>(q.data()[i])) return false;
        }
        return true;
      };
      CHECK(same_bits(y_a, y_b));
      CHECK(same_bits(dx_a, dx_b));
      CHECK(same_bits(dw_a, params[b.weight].grad));
      CHECK(same_bits(db_a, params[b.bias].grad));
    }
  }
  // Promises that do not hold: x and dy are fp32 values, not fp16 ones.
  const precision_policy pol = presets::fp16_mixed;
  exec_context ctx;
  matrix y, dx;
  b.input_slot() = x;
  CHECK_THROWS_WITH(b.forward_in_place(ctx, pol, params, fp16, y, pol.output),
                    Catch::Contains("linear input (format check)") && Catch::Contains("element 0") &&
                        Catch::Contains("not a value of fp16"));
  b.forward(ctx, pol, params, x, y, pol.output);
  CHECK_THROWS_WITH(b.backward(ctx, pol, params, dy, &dx, fp16), Catch::Contains("linear output gradient"));
  // The same for attention's QKV (the forward) and dO (the backward).
  attention_op att;
  att.sequences = 1;
  att.context = 4;
  att.heads = 1;
  att.head_dim = 4;
  att.input_slot() = random_matrix(4, 12, 5);
  matrix out, dqkv;
  CHECK_THROWS_WITH(att.forward_in_place(ctx, pol, fp16, out), Catch::Contains("attention qkv (format check)"));
  att.forward(ctx, pol, random_matrix(4, 12, 5), out);
  CHECK_THROWS_WITH(att.backward(ctx, pol, random_matrix(4, 4, 6), dqkv, fp16),
                    Catch::Contains("attention output gradient (format check)"));
  // Unchecked, nothing is looked at (a false promise would change the bits instead: the callers' to keep).
  set_format_checks(false);
  b.input_slot() = x;
  CHECK_NOTHROW(b.forward_in_place(ctx, pol, params, fp16, y, pol.output));
  set_format_checks(checks_were_on);
}

TEST_CASE("GELU forward_in_place reads its kept input: forward()'s bits") {
  const precision_policy pol = presets::fp16_mixed;
  matrix x = random_matrix(40, 30, 7, 2.0);
  (void)cast_in_place(x, pol.output, round_options{}, philox_key{});
  activation_layer a, b;
  exec_context ctx;
  matrix y_a, y_b;
  a.forward(ctx, pol, x, y_a);
  b.input_slot() = x;
  b.forward_in_place(ctx, pol, y_b);
  REQUIRE(y_a.size() == y_b.size());
  CHECK(std::memcmp(y_a.data(), y_b.data(), sizeof(float) * static_cast<std::size_t>(y_a.size())) == 0);
  CHECK(b.input.size() == x.size());  // kept for the backward
}

TEST_CASE("linear bias on a large batch: y starts from b and db sums each column in row order, on 1 and 2 threads") {
  // 300 x 150 outputs: past the size from which the bias broadcast and the column sums take threads; 150 columns
  // are three blocks of the sums' 64 (the last partial).
  const Eigen::Index rows = 300, in = 20, out = 150;
  for (const int threads : {1, 2}) {
    INFO("threads " << threads);
    parameter_list params;
    exec_context ctx;
    ctx.threads = threads;
    linear_layer l = make_linear(params, "fc", in, out);
    params[l.weight].value = random_matrix(in, out, 1);
    params[l.bias].value = random_matrix(1, out, 2);
    const matrix zero = matrix::Zero(rows, in);
    matrix y;
    l.forward(ctx, fp32_policy, params, zero, y, fp32);
    std::int64_t wrong = 0;
    for (Eigen::Index i = 0; i < rows; ++i) {
      for (Eigen::Index j = 0; j < out; ++j) wrong += y(i, j) == params[l.bias].value(0, j) ? 0 : 1;
    }
    CHECK(wrong == 0);
    const matrix dy = random_matrix(rows, out, 3);
    l.backward(ctx, fp32_policy, params, dy, nullptr);
    std::int64_t sums_wrong = 0;
    for (Eigen::Index j = 0; j < out; ++j) {
      float sum = 0.0f;
      for (Eigen::Index i = 0; i < rows; ++i) sum += dy(i, j);  // fp32 additions in row order
      sums_wrong +=
          std::bit_cast<std::uint32_t>(params[l.bias].grad(0, j)) == std::bit_cast<std::uint32_t>(sum) ? 0 : 1;
    }
    CHECK(sums_wrong == 0);
    // The same sums in an fp16 reduction format: every addition rounded to fp16, in row order (the columns' running
    // values are kept in blocks of 16: 150 = 64 + 64 + 16 + 6, a partial block last).
    const precision_policy fp16_sums = fp32_policy.with_op(op_class::reduction, fp16);
    l.backward(ctx, fp16_sums, params, dy, nullptr);
    std::int64_t fp16_wrong = 0;
    for (Eigen::Index j = 0; j < out; ++j) {
      float sum = 0.0f;
      for (Eigen::Index i = 0; i < rows; ++i) sum = round_to<fp16>(sum + dy(i, j));
      fp16_wrong +=
          std::bit_cast<std::uint32_t>(params[l.bias].grad(0, j)) == std::bit_cast<std::uint32_t>(sum) ? 0 : 1;
    }
    CHECK(fp16_wrong == 0);
  }
  // A bias whose width is not the weight's is an error, not a read past its end.
  parameter_list params;
  exec_context ctx;
  linear_layer l = make_linear(params, "fc", 6, 5);
  params[l.bias].value = random_matrix(1, 4, 2);
  matrix y;
  CHECK_THROWS_WITH(l.forward(ctx, fp32_policy, params, random_matrix(3, 6, 3), y, fp32),
                    Catch::Contains("linear bias columns"));
}

TEST_CASE("GELU and ReLU backward match finite differences") {
  exec_context ctx;
  for (const activation_fn fn : {activation_fn::gelu, activation_fn::relu}) {
    activation_layer a{.fn = fn, .input = {}};
    matrix x = random_matrix(5, 8, 5);
    for (Eigen::Index i = 0; i < x.size(); ++i) {  // keep ReLU inputs away from its kink
      if (std::abs(x.data()[i]) < 0.1f) x.data()[i] = 0.5f;
    }
    const matrix w = random_matrix(5, 8, 6);
    auto loss = [&] {
      matrix out;
      activation_layer probe{.fn = fn, .input = {}};
      probe.forward(ctx, fp32_policy, x, out);
      return weighted_sum(out, w);
    };
    matrix y, dx;
    a.forward(ctx, fp32_policy, x, y);
    a.backward(ctx, fp32_policy, w, dx);
    check_gradient(fn == activation_fn::gelu ? "gelu dx" : "relu dx", x, dx, loss, 1e-3f);
  }
  // GELU(1) = 0.5 (1 + tanh(sqrt(2/pi) 1.044715)) = 0.841192 (tanh approximation, hand-computed).
  CHECK(gelu(1.0f) == Approx(0.841192).epsilon(1e-5));
}

TEST_CASE("GELU of every fp16 and bf16 value has the bits of gelu() and gelu_derivative() (the tanh tables)") {
  // Under a mixed policy the GELU layer takes tanh from a table of the policy's 16-bit format and its backward
  // reuses the forward's tanh; gelu() and gelu_derivative() call tanh themselves. Every code of the format, with
  // subnormals, zeros, infinities and NaNs, and floats just off those values must come out with the same bits.
  struct format_case {
    format_spec format;
    precision_policy policy;
  };
  for (const format_case& fc : {format_case{fp16, presets::fp16_mixed}, format_case{bf16, presets::bf16_mixed}}) {
    INFO(format_name(fc.format));
    // Every code of the format, then as many floats that are not values of it (no table entry may be taken for
    // them): each a code's value with one of the low 16 mantissa bits set.
    matrix x(512, 256);
    for (std::uint32_t c = 0; c < 65536u; ++c) {
      x.data()[c] = decode(fc.format, c);
      const std::uint32_t bits = safeamp::bit_cast<std::uint32_t>(decode(fc.format, c)) | (1u << (c % 16));
      x.data()[65536u + c] = safeamp::bit_cast<float>(bits);
    }
    exec_context ctx;
    ctx.threads = 2;  // the forward's chunks on two threads
    activation_layer a{.fn = activation_fn::gelu, .input = {}};
    matrix y, dx;
    a.forward(ctx, fc.policy, x, y);
    a.backward(ctx, fc.policy, matrix::Ones(512, 256), dx);
    std::int64_t mismatches = 0;
    const auto same = [](float u, float v) {
      return (std::isnan(u) && std::isnan(v)) ||
             safeamp::bit_cast<std::uint32_t>(u) == safeamp::bit_cast<std::uint32_t>(v);
    };
    for (std::uint32_t c = 0; c < 2 * 65536u; ++c) {
      const float v = x.data()[c];
      const float want_y = round_to(fc.format, gelu(v));  // the elementwise (and storage) format of the policy
      const float want_dx = round_to(fc.format, 1.0f * gelu_derivative(v));
      if ((!same(y.data()[c], want_y) || !same(dx.data()[c], want_dx)) && ++mismatches <= 3) {
        UNSCOPED_INFO("code 0x" << std::hex << c << std::dec << " (x = " << v << "): y " << y.data()[c] << " want "
                                << want_y << ", dx " << dx.data()[c] << " want " << want_dx);
      }
    }
    CHECK(mismatches == 0);
  }
}

TEST_CASE("layer norm rows processed side by side give each row's own bits (fp32, fp16 and bf16 normalization)") {
  // The forward's and backward's sums run over several rows at once; each row's bits must be those of the
  // documented per-row order, written out here with round_to after every operation. 11 rows: groups of rows and
  // rows left over; 37 columns.
  const Eigen::Index rows = 11, width = 37;
  for (const format_spec f : {fp32, fp16, bf16}) {
    INFO("normalization " << format_name(f));
    const precision_policy pol = presets::fp32.with_op(op_class::normalization, f);
    const auto rf = [&](float v) { return round_to(f, v); };
    const matrix x = random_matrix(rows, width, 21, 3.0);
    matrix gv = random_matrix(1, width, 22), bv = random_matrix(1, width, 23);
    const matrix dy = random_matrix(rows, width, 24);
    parameter gain, bias;
    gain.value = gv;
    bias.value = bv;
    exec_context ctx;
    layer_norm_saved saved;
    matrix y, dx;
    layer_norm_forward(ctx, pol, gv, bv, 1e-5f, x, y, saved);
    layer_norm_backward(ctx, pol, gain, bias, saved, dy, dx);
    const float inv_width = 1.0f / static_cast<float>(width);
    std::int64_t mismatches = 0;
    const auto expect = [&](const char* what, Eigen::Index r, Eigen::Index j, float got, float want) {
      if (std::bit_cast<std::uint32_t>(got) != std::bit_cast<std::uint32_t>(want) && ++mismatches <= 3) {
        UNSCOPED_INFO(what << " (" << r << ", " << j << "): " << got << ", want " << want);
      }
    };
    for (Eigen::Index r = 0; r < rows; ++r) {
      float sum = 0.0f, sq = 0.0f;
      for (Eigen::Index j = 0; j < width; ++j) sum = rf(sum + rf(x(r, j)));
      const float mean = rf(sum * inv_width);
      for (Eigen::Index j = 0; j < width; ++j) {
        const float d = rf(rf(x(r, j)) - mean);
        sq = rf(sq + rf(d * d));
      }
      const float rs = rf(1.0f / std::sqrt(rf(rf(sq * inv_width) + 1e-5f)));
      expect("rstd", r, 0, saved.rstd[static_cast<std::size_t>(r)], rs);
      std::vector<float> xh(static_cast<std::size_t>(width)), dxh(static_cast<std::size_t>(width));
      float s1 = 0.0f, s2 = 0.0f;
      for (Eigen::Index j = 0; j < width; ++j) {
        xh[static_cast<std::size_t>(j)] = rf(rf(rf(x(r, j)) - mean) * rs);
        expect("y", r, j, y(r, j), rf(rf(xh[static_cast<std::size_t>(j)] * gv(0, j)) + bv(0, j)));
        const float d = rf(dy(r, j) * gv(0, j));
        dxh[static_cast<std::size_t>(j)] = d;
        s1 = rf(s1 + d);
        s2 = rf(s2 + rf(d * xh[static_cast<std::size_t>(j)]));
      }
      const float m1 = rf(s1 * inv_width), m2 = rf(s2 * inv_width);
      for (Eigen::Index j = 0; j < width; ++j) {
        const float inner = rf(dxh[static_cast<std::size_t>(j)] - m1 - xh[static_cast<std::size_t>(j)] * m2);
        expect("dx", r, j, dx(r, j), rf(rs * inner));
      }
    }
    CHECK(mismatches == 0);
  }
}

TEST_CASE("layer norm backward matches finite differences") {
  parameter_list params;
  exec_context ctx;
  layer_norm_layer ln = make_layer_norm(params, "ln", 8);
  params[ln.gain].value = random_matrix(1, 8, 7);
  params[ln.bias].value = random_matrix(1, 8, 8);
  matrix x = random_matrix(4, 8, 9);
  const matrix w = random_matrix(4, 8, 10);
  auto loss = [&] {
    layer_norm_layer probe = ln;
    matrix out;
    probe.forward(ctx, fp32_policy, params, x, out);
    return weighted_sum(out, w);
  };
  matrix y, dx;
  ln.forward(ctx, fp32_policy, params, x, y);
  // Normalised rows: mean 0, variance 1 (with gain 1, bias 0 this is y itself).
  ln.backward(ctx, fp32_policy, params, w, dx);
  check_gradient("dx", x, dx, loss, 1e-2f);
  check_gradient("dgain", params[ln.gain].value, params[ln.gain].grad, loss);
  check_gradient("dbias", params[ln.bias].value, params[ln.bias].grad, loss);
}

TEST_CASE("causal attention backward matches finite differences, and the mask holds") {
  exec_context ctx;
  attention_op att;
  att.sequences = 2;
  att.context = 5;
  att.heads = 2;
  att.head_dim = 3;
  matrix qkv = random_matrix(10, 18, 11);
  const matrix w = random_matrix(10, 6, 12);
  auto loss = [&] {
    attention_op probe = att;
    matrix out;
    probe.forward(ctx, fp32_policy, qkv, out);
    return weighted_sum(out, w);
  };
  matrix out, dqkv;
  att.forward(ctx, fp32_policy, qkv, out);
  for (const matrix& p : att.probs) {
    for (Eigen::Index r = 0; r < p.rows(); ++r) {
      CHECK(p.row(r).sum() == Approx(1.0).epsilon(1e-6));
      for (Eigen::Index c = r + 1; c < p.cols(); ++c) CHECK(p(r, c) == 0.0f);
    }
  }
  att.backward(ctx, fp32_policy, w, dqkv);
  check_gradient("dqkv", qkv, dqkv, loss, 1e-2f, 60);
}

TEST_CASE("attention has the bits of its per-head GEMMs on copies, with matmuls narrower than storage") {
  // The heads read Q, K, V in place from operands rounded to the matmul format once per call; the reference does
  // what each head means with the public gemm() on copied blocks (inputs rounded per GEMM). fp32 storage and
  // gradients with fp16 matmuls, so those roundings are not the identity; nearest rounding, so keys do not matter.
  // And fp16-mixed, where P and dS are stored in the matmul format (so the heads do not round them again) and the
  // caller writes QKV in place, saying it is fp16 already (forward_in_place), and says dO is (backward's format).
  const bool in_place = GENERATE(false, true);
  const precision_policy pol = in_place ? presets::fp16_mixed : presets::fp32.with_op(op_class::matmul, fp16);
  INFO((in_place ? "fp16-mixed, forward_in_place" : "fp32 storage, fp16 matmuls"));
  const gemm_formats fs_formats{fp16, fp32, pol.format_for(op_class::softmax)};
  const gemm_formats fo{fp16, fp32, pol.output};
  const gemm_formats fg{fp16, fp32, pol.gradient};
  exec_context ctx;
  attention_op att;
  att.sequences = 2;
  att.context = 6;
  att.heads = 2;
  att.head_dim = 8;
  const Eigen::Index t = att.context, dh = att.head_dim, width = att.heads * dh;
  matrix qkv = random_matrix(2 * t, 3 * width, 13);
  matrix dout = random_matrix(2 * t, width, 14);
  matrix out, dqkv;
  if (in_place) {
    (void)cast_in_place(qkv, pol.output, round_options{}, philox_key{});
    (void)cast_in_place(dout, pol.gradient, round_options{}, philox_key{});
    att.input_slot() = qkv;
    att.forward_in_place(ctx, pol, pol.output, out);
    att.backward(ctx, pol, dout, dqkv, pol.gradient);
  } else {
    att.forward(ctx, pol, qkv, out);
    att.backward(ctx, pol, dout, dqkv);
  }
  const float alpha = 1.0f / std::sqrt(static_cast<float>(dh));
  std::int64_t mismatches = 0;
  const auto compare = [&](const char* what, const matrix& got, const matrix& want) {
    for (Eigen::Index i = 0; i < got.size(); ++i) {
      if (safeamp::bit_cast<std::uint32_t>(got.data()[i]) != safeamp::bit_cast<std::uint32_t>(want.data()[i]) &&
          ++mismatches <= 3) {
        UNSCOPED_INFO(what << " element " << i << ": " << got.data()[i] << ", reference " << want.data()[i]);
      }
    }
  };
  for (Eigen::Index b = 0; b < 2; ++b) {
    for (Eigen::Index h = 0; h < att.heads; ++h) {
      const matrix q = qkv.block(b * t, h * dh, t, dh);
      const matrix k = qkv.block(b * t, width + h * dh, t, dh);
      const matrix v = qkv.block(b * t, 2 * width + h * dh, t, dh);
      const matrix dout_h = dout.block(b * t, h * dh, t, dh);
      matrix s, p, o, dp, dv, ds, dq, dk;
      (void)gemm(fs_formats, q, k, s, {.alpha = alpha, .trans_b = transpose::transposed});
      softmax_rows(fp32, s, p, true);
      (void)cast_in_place(p, pol.output, round_options{}, philox_key{});
      (void)gemm(fo, p, v, o);
      compare("O", out.block(b * t, h * dh, t, dh), o);
      (void)gemm(fg, dout_h, v, dp, {.trans_b = transpose::transposed});
      (void)gemm(fg, p, dout_h, dv, {.trans_a = transpose::transposed});
      softmax_rows_backward(fp32, p, dp, ds);
      (void)cast_in_place(ds, pol.gradient, round_options{}, philox_key{});
      (void)gemm(fg, ds, k, dq, {.alpha = alpha});
      (void)gemm(fg, ds, q, dk, {.alpha = alpha, .trans_a = transpose::transposed});
      compare("dQ", dqkv.block(b * t, h * dh, t, dh), dq);
      compare("dK", dqkv.block(b * t, width + h * dh, t, dh), dk);
      compare("dV", dqkv.block(b * t, 2 * width + h * dh, t, dh), dv);
    }
  }
  CHECK(mismatches == 0);
}

TEST_CASE("ops round their scalar steps to a narrow op format (sums stagnate, the fp16 variance overflows)") {
  // Hand-derived: bf16 has 8 significant bits, so 256 + 1 rounds back to 256 (spacing 2, tie to even); fp16 has
  // 11, so 2048 + 1 rounds to 2048; fp16's largest value is 65504, below 300^2.
  exec_context ctx;
  SECTION("linear bias gradient summed in bf16") {
    parameter_list params;
    linear_layer l = make_linear(params, "fc", 1, 2);
    const precision_policy pol = presets::fp32.with_op(op_class::reduction, bf16);
    const matrix x = matrix::Ones(300, 1);
    matrix y;
    l.forward(ctx, pol, params, x, y, fp32);
    l.backward(ctx, pol, params, matrix::Ones(300, 2), nullptr);
    CHECK(params[l.bias].grad(0, 0) == 256.0f);  // 300 in fp32
    CHECK(params[l.bias].grad(0, 1) == 256.0f);
  }
  SECTION("embedding gradient summed in bf16") {
    parameter_list params;
    embedding_layer e = make_embedding(params, "embed", 3, 300, 2);
    const precision_policy pol = presets::fp32.with_op(op_class::reduction, bf16);
    matrix y;
    e.forward(ctx, pol, params, std::vector<std::int32_t>(300, 1), y);  // token 1 at every position
    e.backward(ctx, pol, params, matrix::Ones(300, 2));
    CHECK(params[e.tokens_table].grad(1, 0) == 256.0f);
    CHECK(params[e.positions_table].grad(7, 1) == 1.0f);
  }
  SECTION("embedding rows added in fp32 and rounded to the elementwise format") {
    parameter_list params;
    embedding_layer e = make_embedding(params, "embed", 5, 4, 6);
    params[e.tokens_table].value = random_matrix(5, 6, 15);  // fp32 values, most of them not fp16 values
    params[e.positions_table].value = random_matrix(4, 6, 16);
    const std::vector<std::int32_t> tokens = {3, 0, 4, 4, 1, 2, 0, 3};
    matrix y;
    e.forward(ctx, presets::fp16_mixed, params, tokens, y);
    for (Eigen::Index r = 0; r < 8; ++r) {
      for (Eigen::Index j = 0; j < 6; ++j) {
        const float sum = params[e.tokens_table].value(tokens[static_cast<std::size_t>(r)], j) +
                          params[e.positions_table].value(r % 4, j);
        CHECK(y(r, j) == round_to(fp16, sum));
        CHECK(y(r, j) != sum);  // random values: the rounding shows
      }
    }
  }
  SECTION("softmax summed in fp16") {
    matrix p;
    softmax_rows(fp16, matrix::Zero(1, 3000), p, false);  // 3000 terms exp(0) = 1; the sum stops at 2048
    CHECK(p(0, 0) == 0x1p-11f);
  }
  SECTION("layer norm variance in fp16") {
    parameter_list params;
    layer_norm_layer ln = make_layer_norm(params, "ln", 4);
    params[ln.bias].value << 0.25f, 0.5f, 0.75f, 1.0f;
    matrix x(1, 4);
    x << 300.0f, -300.0f, 300.0f, -300.0f;
    matrix y;
    ln.forward(ctx, presets::fp32.with_op(op_class::normalization, fp16), params, x, y);
    CHECK(y == params[ln.bias].value);  // 300^2 overflows, 1/sqrt(inf) = 0, so x_hat = 0
    ln.forward(ctx, presets::fp32, params, x, y);
    CHECK(y(0, 0) != 0.25f);
  }
}

TEST_CASE("embedding backward matches finite differences") {
  parameter_list params;
  exec_context ctx;
  embedding_layer e = make_embedding(params, "embed", 6, 4, 3);
  params[e.tokens_table].value = random_matrix(6, 3, 13);
  params[e.positions_table].value = random_matrix(4, 3, 14);
  const std::vector<std::int32_t> tokens = {1, 5, 1, 0, 2, 2, 3, 1};  // two sequences of 4, token 1 repeated
  const matrix w = random_matrix(8, 3, 15);
  auto loss = [&] {
    embedding_layer probe = e;
    matrix out;
    probe.forward(ctx, fp32_policy, params, tokens, out);
    return weighted_sum(out, w);
  };
  matrix y;
  e.forward(ctx, fp32_policy, params, tokens, y);
  e.backward(ctx, fp32_policy, params, w);
  check_gradient("tokens table", params[e.tokens_table].value, params[e.tokens_table].grad, loss);
  check_gradient("positions table", params[e.positions_table].value, params[e.positions_table].grad, loss);
  CHECK_THROWS_AS(e.forward(ctx, fp32_policy, params, std::vector<std::int32_t>{0, 1, 9, 2}, y), safeamp::error);
}

TEST_CASE("cross-entropy gradient matches finite differences and the hand-computed value") {
  exec_context ctx;
  matrix logits = random_matrix(6, 5, 16);
  const std::vector<std::int32_t> targets = {0, 4, 2, 2, 1, 3};
  auto loss = [&] { return cross_entropy(ctx, fp32_policy, logits, targets, 1.0, nullptr).loss; };
  matrix dlogits;
  (void)cross_entropy(ctx, fp32_policy, logits, targets, 1.0, &dlogits);
  check_gradient("dlogits", logits, dlogits, loss, 1e-2f, 30);
  // Two equal logits: loss ln 2, gradient (0.5 - 1, 0.5) / rows.
  matrix two(1, 2);
  two << 3.0f, 3.0f;
  matrix d;
  const loss_result r = cross_entropy(ctx, fp32_policy, two, {0}, 1.0, &d);
  CHECK(r.loss == Approx(std::log(2.0)).epsilon(1e-6));
  CHECK(d(0, 0) == -0.5f);
  CHECK(d(0, 1) == 0.5f);
  CHECK_THROWS_AS(cross_entropy(ctx, fp32_policy, two, {2}, 1.0, nullptr), safeamp::error);
  CHECK_THROWS_AS(cross_entropy(ctx, fp32_policy, two, {0, 1}, 1.0, nullptr), safeamp::error);
}

TEST_CASE("cross-entropy on a large batch: rows on two threads give one thread's bits, each row its own value") {
  // 300 x 77 logits: past the size from which rows take threads (tasks of 32 rows: 9 whole and one of 12). Row 5
  // has a NaN (its loss NaN, no prediction), row 200 a logit of 70000 (inf in an fp16 loss, not in fp32); std dev 3
  // so that the rows' maxima differ.
  matrix logits = random_matrix(300, 77, 18, 3.0);
  logits(5, 40) = std::numeric_limits<float>::quiet_NaN();
  logits(200, 3) = 70000.0f;
  std::vector<std::int32_t> targets(300);
  for (std::size_t r = 0; r < targets.size(); ++r) targets[r] = static_cast<std::int32_t>((r * 31) % 77);
  for (const precision_policy& pol : {fp32_policy, fp32_policy.with_op(op_class::loss, fp16)}) {
    INFO("loss format " << format_name(pol.format_for(op_class::loss)));
    exec_context one, two;
    two.threads = 2;
    matrix d1, d2;
    const loss_result r1 = cross_entropy(one, pol, logits, targets, 8.0, &d1);
    const loss_result r2 = cross_entropy(two, pol, logits, targets, 8.0, &d2);
    CHECK(std::memcmp(r1.row_loss.data(), r2.row_loss.data(), r1.row_loss.size() * sizeof(float)) == 0);
    CHECK(r1.predicted == r2.predicted);
    CHECK(std::memcmp(d1.data(), d2.data(), static_cast<std::size_t>(d1.size()) * sizeof(float)) == 0);
    CHECK(bits_of_double(r1.loss) == bits_of_double(r2.loss));
    CHECK(r1.gradient_stats.elements == r2.gradient_stats.elements);
    CHECK(r1.gradient_stats.nan == r2.gradient_stats.nan);
    // The mean: the row losses summed in row order in the loss format (loss.hpp), then divided by the rows.
    float total = 0.0f;
    for (const float v : r2.row_loss) total = round_scalar(pol.format_for(op_class::loss), total + v);
    CHECK(bits_of_double(r2.loss) ==
          bits_of_double(static_cast<double>(round_scalar(pol.format_for(op_class::loss), total / 300.0f))));
    CHECK(std::isnan(r2.row_loss[5]));
    CHECK(r2.predicted[5] == -1);
    CHECK(r2.predicted[200] == (pol.format_for(op_class::loss) == fp32 ? 3 : -1));
  }
  // In fp32, every finite row against its log-sum-exp in double, and its prediction the first largest logit.
  exec_context ctx;
  ctx.threads = 2;
  const loss_result r = cross_entropy(ctx, fp32_policy, logits, targets, 1.0, nullptr);
  for (Eigen::Index i = 0; i < logits.rows(); ++i) {
    if (i == 5) continue;
    INFO("row " << i);
    double m = -std::numeric_limits<double>::infinity();
    Eigen::Index arg = 0;
    for (Eigen::Index j = 0; j < logits.cols(); ++j) {
      if (logits(i, j) > m) {
        m = logits(i, j);
        arg = j;
      }
    }
    double sum = 0.0;
    for (Eigen::Index j = 0; j < logits.cols(); ++j) sum += std::exp(static_cast<double>(logits(i, j)) - m);
    const double want = m + std::log(sum) - static_cast<double>(logits(i, targets[static_cast<std::size_t>(i)]));
    CHECK(static_cast<double>(r.row_loss[static_cast<std::size_t>(i)]) == Approx(want).epsilon(1e-5).margin(1e-4));
    CHECK(r.predicted[static_cast<std::size_t>(i)] == arg);
  }
  // The first bad target in row order is the one named, whichever task would have met another first.
  std::vector<std::int32_t> bad = targets;
  bad[250] = 99;
  bad[40] = -7;
  CHECK_THROWS_WITH(cross_entropy(ctx, fp32_policy, logits, bad, 1.0, nullptr),
                    "cross_entropy target is -7; accepted: 0..76");
}

TEST_CASE("attention scores overflow when softmax runs in fp16, not under fp16-mixed (softmax in fp32)") {
  // Q and K entries of 300 (exact in fp16): every score is 300 * 300 * 16 / sqrt(16) = 360000 > 65504.
  attention_op att;
  att.sequences = 1;
  att.context = 4;
  att.heads = 1;
  att.head_dim = 16;
  matrix qkv = matrix::Constant(4, 48, 300.0f);
  qkv.rightCols(16) = random_matrix(4, 16, 17);  // V
  const precision_policy mixed = presets::fp16_mixed;
  REQUIRE(mixed.format_for(op_class::softmax) == fp32);
  const precision_policy low_softmax = mixed.with_op(op_class::softmax, fp16);

  exec_context ctx;
  matrix out_mixed, out_low, out_ref;
  attention_op a1 = att, a2 = att, a3 = att;
  a1.forward(ctx, mixed, qkv, out_mixed);
  a2.forward(ctx, low_softmax, qkv, out_low);
  a3.forward(ctx, presets::fp32, qkv, out_ref);
  CHECK(a1.score_stats.overflow == 0);
  CHECK(a2.score_stats.overflow == 16);  // all 4x4 scores (the mask is applied after the GEMM)
  CHECK(out_mixed.allFinite());
  CHECK_FALSE(out_low.allFinite());
  // fp16-mixed matches fp32 up to the fp16 rounding of V, P and the output: 3 u_fp16 relative to max |V|.
  const double tol = 3.0 * unit_roundoff(fp16) * static_cast<double>(qkv.rightCols(16).cwiseAbs().maxCoeff());
  CHECK((out_mixed - out_ref).cwiseAbs().maxCoeff() <= tol);

  // The same with the loss: logits of 70000 are inf in an fp16 loss, finite in an fp32 one.
  matrix logits(1, 3);
  logits << 70000.0f, 1.0f, 2.0f;
  const loss_result fp32_loss = cross_entropy(ctx, mixed, logits, {0}, 1.0, nullptr);
  const loss_result fp16_loss = cross_entropy(ctx, mixed.with_op(op_class::loss, fp16), logits, {0}, 1.0, nullptr);
  CHECK(std::isfinite(fp32_loss.loss));
  CHECK(fp32_loss.loss == Approx(0.0).margin(1e-6));
  CHECK_FALSE(std::isfinite(fp16_loss.loss));
}
