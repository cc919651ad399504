// The torch-faithful pieces against values computed by hand from PyTorch's update rules (the arithmetic is
// written out next to each expectation, evaluated here in double as an independent oracle): AdamW
// (torch.optim.AdamW, _single_tensor_adamw), SGD (torch.optim.SGD with momentum, dampening, nesterov, weight
// decay), torch.nn.utils.clip_grad_norm_, and the regression losses.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "safeamp/policy.hpp"
#include "safeamp/scaling/grad_clip.hpp"
#include "safeamp/sim/autocast.hpp"
#include "safeamp/sim/loss.hpp"
#include "safeamp/sim/optimizer.hpp"

using namespace safeamp;
using namespace safeamp::sim;

namespace {

// One 1x1 parameter p0 under fp32, stepped with gradients g1, g2; returns p after each step.
std::vector<float> two_steps(const optimizer_config& cfg, float p0, float g1, float g2) {
  parameter_list params;
  (void)add_parameter(params, "p", 1, 1);
  params[0].value(0, 0) = p0;
  optimizer opt(cfg, presets::fp32, true, params);
  exec_context ctx;
  std::vector<float> out;
  for (const float g : {g1, g2}) {
    params[0].grad(0, 0) = g;
    opt.step(ctx, params);
    out.push_back(params[0].value(0, 0));
  }
  return out;
}

// |a - b| within a few float roundings of b (each float op of the update rounds once, relative 2^-24).
void check_close(float got, double want) {
  INFO("got " << got << " want " << want);
  CHECK(std::fabs(static_cast<double>(got) - want) <= 8.0 * std::ldexp(std::fabs(want), -24));
}

}  // namespace

TEST_CASE("adamw-torch follows torch.optim.AdamW step by step", "[torch]") {
  optimizer_config cfg = torch_defaults(optimizer_kind::adamw_torch);
  REQUIRE(cfg.weight_decay == 0.01);  // torch's defaults by name
  REQUIRE(cfg.epsilon == 1e-8);
  REQUIRE(cfg.beta1 == 0.9);
  REQUIRE(cfg.beta2 == 0.999);
  cfg.learning_rate = 0.1;
  const std::vector<float> p = two_steps(cfg, 1.0f, 0.5f, -0.25f);
  // Step 1: p = 1 * (1 - 0.1*0.01) = 0.999; m = 0 + 0.1*(0.5 - 0) = 0.05; v = 0.001 * 0.5^2 = 0.00025;
  // bias corrections 1 - 0.9 = 0.1 and 1 - 0.999 = 0.001; step size 0.1 / 0.1 = 1;
  // denom = sqrt(0.00025)/sqrt(0.001) + 1e-8 = 0.5 + 1e-8; p = 0.999 - 1 * 0.05 / (0.5 + 1e-8).
  const double p1 = 0.999 - 0.05 / (0.5 + 1e-8);
  check_close(p[0], p1);  // 0.8990000002
  // Step 2: p = p1 * 0.999; m = 0.05 + 0.1*(-0.25 - 0.05) = 0.02; v = 0.00025*0.999 + 0.001*0.0625 = 0.00031225;
  // bias corrections 1 - 0.81 = 0.19 and 1 - 0.998001 = 0.001999; step size 0.1 / 0.19;
  // denom = sqrt(0.00031225)/sqrt(0.001999) + 1e-8.
  const double p2 = p1 * 0.999 - (0.1 / 0.19) * 0.02 / (std::sqrt(0.00031225) / std::sqrt(0.001999) + 1e-8);
  check_close(p[1], p2);  // 0.87146...
}

TEST_CASE("sgd-torch: momentum with dampening and weight decay, and nesterov", "[torch]") {
  const optimizer_config defaults = torch_defaults(optimizer_kind::sgd_torch);
  CHECK(defaults.momentum == 0.0);
  CHECK(defaults.weight_decay == 0.0);
  optimizer_config cfg = defaults;
  cfg.learning_rate = 0.1;
  cfg.momentum = 0.9;
  cfg.dampening = 0.5;
  cfg.weight_decay = 0.1;
  std::vector<float> p = two_steps(cfg, 1.0f, 0.5f, -0.25f);
  // Step 1: d = 0.5 + 0.1*1 = 0.6; the first buffer is d itself (no dampening): 0.6; p = 1 - 0.1*0.6 = 0.94.
  check_close(p[0], 0.94);
  // Step 2: d = -0.25 + 0.1*0.94 = -0.156; buf = 0.9*0.6 + (1 - 0.5)*(-0.156) = 0.462; p = 0.94 - 0.0462.
  check_close(p[1], 0.8938);

  cfg.dampening = 0.0;
  cfg.weight_decay = 0.0;
  cfg.nesterov = true;
  p = two_steps(cfg, 1.0f, 0.5f, -0.25f);
  // Step 1: buf = 0.5; d = 0.5 + 0.9*0.5 = 0.95; p = 1 - 0.095 = 0.905.
  check_close(p[0], 0.905);
  // Step 2: buf = 0.9*0.5 - 0.25 = 0.2; d = -0.25 + 0.9*0.2 = -0.07; p = 0.905 + 0.007 = 0.912.
  check_close(p[1], 0.912);
}

TEST_CASE("clip_grad_norm_torch reproduces torch.nn.utils.clip_grad_norm_", "[torch][clip]") {
  std::vector<float> a = {3.0f}, b = {4.0f};
  std::span<float> bufs[] = {a, b};
  const clip_result r = clip_grad_norm_torch(bufs, 1.0);
  // Per-tensor norms 3 and 4, their norm 5; coef = 1 / (5 + 1e-6) = 0.19999996 (float).
  CHECK(r.norm_before == 5.0);
  CHECK(r.clipped);
  const float coef = 1.0f / (5.0f + 1e-6f);
  CHECK(a[0] == 3.0f * coef);
  CHECK(b[0] == 4.0f * coef);
  CHECK(a[0] != 0.6f);  // the exact clip's factor is max/norm = 0.2: 0.6 and 0.8

  std::vector<float> c = {3.0f}, d = {4.0f};
  std::span<float> exact_bufs[] = {c, d};
  (void)clip_grad_norm(exact_bufs, 1.0);
  CHECK(c[0] == 3.0f * 0.2f);

  // Below the limit: coef = 10 / (5 + 1e-6) > 1 is clamped to 1; nothing changes.
  std::vector<float> e = {3.0f}, f = {4.0f};
  std::span<float> small[] = {e, f};
  CHECK_FALSE(clip_grad_norm_torch(small, 10.0).clipped);
  CHECK(e[0] == 3.0f);

  // 1e20 squared is 1e40 > float max 3.4e38: the norm is inf, coef = 1/(inf + 1e-6) = 0 and the gradients
  // are zeroed; safeamp's clip sums in double (norm 1e20) and scales them to norm 1.
  std::vector<float> big = {1e20f, 1e20f};
  std::span<float> one[] = {big};
  const clip_result z = clip_grad_norm_torch(one, 1.0);
  CHECK(std::isinf(z.norm_before));
  CHECK_FALSE(z.finite);
  CHECK(big[0] == 0.0f);
  CHECK(big[1] == 0.0f);
  std::vector<float> big2 = {1e20f, 1e20f};
  std::span<float> one2[] = {big2};
  const clip_result x = clip_grad_norm(one2, 1.0);
  CHECK(x.finite);
  CHECK(std::fabs(big2[0] - static_cast<float>(1.0 / std::sqrt(2.0))) < 1e-6f);
}

TEST_CASE("regression losses: mse, l1 and huber by hand", "[loss]") {
  matrix y(2, 2), t(2, 2), dy;
  y << 1.0f, 2.0f, 3.0f, 5.0f;
  t << 0.5f, 2.0f, 1.0f, 1.0f;  // d = y - t = [0.5, 0, 2, 4]
  exec_context ctx;
  const precision_policy pol = presets::fp32;
  // mse: (0.25 + 0 + 4 + 16) / 4 = 5.0625; gradient 2d/4 = [0.25, 0, 1, 2].
  loss_result r = regression_loss(ctx, pol, loss_kind::mse, y, t, 1.0, &dy);
  CHECK(r.loss == 5.0625);
  CHECK(dy(0, 0) == 0.25f);
  CHECK(dy(1, 1) == 2.0f);
  CHECK(r.row_loss[1] == 10.0f);  // (4 + 16) / 2
  // l1: (0.5 + 0 + 2 + 4) / 4 = 1.625; gradient sign(d)/4 = [0.25, 0, 0.25, 0.25] (sign(0) = 0 as torch.sign).
  r = regression_loss(ctx, pol, loss_kind::l1, y, t, 1.0, &dy);
  CHECK(r.loss == 1.625);
  CHECK(dy(0, 1) == 0.0f);
  CHECK(dy(1, 0) == 0.25f);
  // huber (delta 1): 0.5*0.25 = 0.125; 0; 2 - 0.5 = 1.5; 4 - 0.5 = 3.5; mean 5.125/4 = 1.28125;
  // gradient clamp(d, -1, 1)/4 = [0.125, 0, 0.25, 0.25]; times a grad_scale of 1024.
  r = regression_loss(ctx, pol, loss_kind::huber, y, t, 1024.0, &dy);
  CHECK(r.loss == 1.28125);
  CHECK(dy(0, 0) == 0.125f * 1024.0f);
  CHECK(dy(1, 1) == 0.25f * 1024.0f);
  matrix wrong(2, 3);
  CHECK_THROWS_AS(regression_loss(ctx, pol, loss_kind::mse, y, wrong, 1.0, nullptr), safeamp::error);
}

TEST_CASE("autocast: fp16 linear and mse as torch.autocast runs them, casts counted", "[autocast]") {
  autocast ac(presets::fp16_mixed);
  matrix x(1, 2), w(2, 1), b(1, 1);
  x << 1.0f, 2049.0f;  // 2049 is not an fp16 value: the matmul input rounds to 2048 (spacing 2 in [2048, 4096))
  w << 1.0f, 1.0f;
  b << 0.5f;
  // fp16 inputs 1 and 2048, fp32 accumulation 2049, bias in the epilogue 2049.5, output rounded once to fp16:
  // 2049.5 lies between 2048 and 2050, nearer 2050.
  const matrix y = ac.linear(x, w, b);
  CHECK(y(0, 0) == 2050.0f);
  CHECK(ac.counts(op_class::matmul).elements == 1);

  // mse in fp32 (the loss format of fp16-mixed); the gradient 2 (y - t) = 2e-8 is below half of fp16's
  // smallest subnormal 2^-24 (5.96e-8): it underflows to 0 unless the loss is scaled (2^16: 1.3e-3 survives).
  matrix y1(1, 1), t1(1, 1), dy;
  t1(0, 0) = 1.0f;
  y1(0, 0) = 1.0f + 0x1p-23f;  // d = 2^-23, gradient 2 d = 2^-22 (representable: fp16 subnormal, no underflow)
  (void)ac.mse_loss(y1, t1, 1.0, &dy);
  CHECK(dy(0, 0) == 0x1p-22f);
  CHECK(ac.counts(op_class::loss).underflow == 0);
  y1(0, 0) = 1.0f;
  t1(0, 0) = 1.0f - 0x1p-24f;  // d = 2^-24, gradient 2^-23 ... still an fp16 subnormal (2^-24 is the smallest)
  (void)ac.mse_loss(y1, t1, 1.0, &dy);
  CHECK(dy(0, 0) == 0x1p-23f);
  matrix y2(1, 1), t2(1, 1);
  y2 << 1e-8f;
  t2 << 0.0f;  // d = 1e-8, gradient 2e-8 < 2^-25: underflows in fp16
  (void)ac.mse_loss(y2, t2, 1.0, &dy);
  CHECK(dy(0, 0) == 0.0f);
  CHECK(ac.counts(op_class::loss).underflow == 1);
  (void)ac.mse_loss(y2, t2, 65536.0, &dy);  // scaled: 2e-8 * 2^16 = 1.31e-3
  CHECK(dy(0, 0) == round_to(fp16, 2e-8f * 65536.0f));
  CHECK(ac.counts(op_class::loss).underflow == 1);

  // Backward of the linear: dW = x^T dy in fp16 inputs (x's 2049 rounds to 2048), stored in fp16.
  parameter pw{.name = "w", .value = w, .grad = {}, .grad_stats = {}};
  parameter pb{.name = "b", .value = b, .grad = {}, .grad_stats = {}};
  matrix g(1, 1);
  g << 0.5f;
  matrix dx;
  ac.linear_backward(x, pw, pb, g, &dx);
  CHECK(pw.grad(0, 0) == 0.5f);
  CHECK(pw.grad(1, 0) == 1024.0f);  // 2048 * 0.5
  CHECK(pb.grad(0, 0) == 0.5f);
  CHECK(dx(0, 1) == 0.5f);  // dy W^T
  const std::uint64_t before = ac.casts();
  matrix m(1, 1);
  m << 70000.0f;  // beyond fp16's max 65504: the output cast overflows, counted
  const cast_stats s = ac.cast_output(m);
  CHECK(std::isinf(m(0, 0)));
  CHECK(s.overflow == 1);
  CHECK(ac.casts() == before + 1);
}
