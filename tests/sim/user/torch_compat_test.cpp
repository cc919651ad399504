// The torch-faithful pieces against PyTorch's update rules, three ways: values computed by hand (the arithmetic
// written out next to each expectation, evaluated in double), closed forms where eps decides the update (tiny
// constant gradients), and bit for bit over long runs against float references written out here from
// torch/optim/adamw.py and sgd.py and the CPU kernels they call (torch_adamw_reference, torch_sgd_reference; the
// test is built with -ffp-contract=off so each float operation rounds once, as torch's scalar kernels do).
// Also torch.nn.utils.clip_grad_norm_, the regression losses and the autocast's linear and mse.
#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "safeamp/policy.hpp"
#include "safeamp/scaling/grad_clip.hpp"
#include "safeamp/sim/autocast.hpp"
#include "safeamp/sim/loss.hpp"
#include "safeamp/sim/optimizer.hpp"

using namespace safeamp;
using namespace safeamp::sim;

namespace {

// A 1 x n parameter under fp32 with initial values p0, stepped by the optimizer once per entry of `grads` (each
// a gradient of n values); returns the parameter after each step.
std::vector<std::vector<float>> run_steps(const optimizer_config& cfg, const std::vector<float>& p0,
                                          const std::vector<std::vector<float>>& grads) {
  parameter_list params;
  const auto n = static_cast<Eigen::Index>(p0.size());
  (void)add_parameter(params, "p", 1, n);
  for (Eigen::Index k = 0; k < n; ++k) params[0].value(0, k) = p0[static_cast<std::size_t>(k)];
  optimizer opt(cfg, presets::fp32, true, params);
  exec_context ctx;
  std::vector<std::vector<float>> out;
  for (const std::vector<float>& g : grads) {
    for (Eigen::Index k = 0; k < n; ++k) params[0].grad(0, k) = g[static_cast<std::size_t>(k)];
    opt.step(ctx, params);
    out.emplace_back(params[0].value.data(), params[0].value.data() + n);
  }
  return out;
}

// One 1x1 parameter p0 under fp32, stepped with gradients g1, g2; returns p after each step.
std::vector<float> two_steps(const optimizer_config& cfg, float p0, float g1, float g2) {
  const std::vector<std::vector<float>> p = run_steps(cfg, {p0}, {{g1}, {g2}});
  return {p[0][0], p[1][0]};
}

// |a - b| within a few float roundings of b (each float op of the update rounds once, relative 2^-24).
void check_close(float got, double want) {
  INFO("got " << got << " want " << want);
  CHECK(std::fabs(static_cast<double>(got) - want) <= 8.0 * std::ldexp(std::fabs(want), -24));
}

// torch.optim.AdamW's single-tensor update on CPU, written out from torch/optim/adamw.py (_single_tensor_adamw,
// amsgrad off, maximize off, not capturable) and the CPU kernels it calls. Python numbers are doubles; a Python
// number meeting a float tensor is converted to float; every tensor operation rounds to float once:
//   param.mul_(1 - lr * weight_decay)                          p = p * f32(1 - lr wd)
//   exp_avg.lerp_(grad, 1 - beta1)                             w < 0.5: m = m + w (g - m); else g - (g - m)(1 - w)
//   exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2)     v = v * f32(b2); v = v + (f32(1 - b2) g) g
//   bias_correction1 = 1 - beta1 ** step; bias_correction2 = 1 - beta2 ** step        (doubles)
//   step_size = lr / bias_correction1; bias_correction2_sqrt = sqrt(bias_correction2)  (doubles)
//   denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)    sqrtf(v) / f32(bc2_sqrt) + f32(eps)
//   param.addcdiv_(exp_avg, denom, value=-step_size)           p = p + (f32(-step_size) m) / denom
struct torch_adamw_reference {
  double lr, beta1, beta2, eps, wd;
  std::vector<float> p, m, v;
  std::int64_t step = 0;

  void update(const std::vector<float>& g) {
    ++step;
    const auto t = static_cast<double>(step);
    const double bias_correction1 = 1.0 - std::pow(beta1, t);
    const double bias_correction2 = 1.0 - std::pow(beta2, t);
    const double step_size = lr / bias_correction1;
    const double bias_correction2_sqrt = std::sqrt(bias_correction2);
    const auto w = static_cast<float>(1.0 - beta1);
    for (std::size_t k = 0; k < p.size(); ++k) {
      p[k] = p[k] * static_cast<float>(1.0 - lr * wd);
      m[k] = w < 0.5f ? m[k] + w * (g[k] - m[k]) : g[k] - (g[k] - m[k]) * (1.0f - w);
      v[k] = v[k] * static_cast<float>(beta2);
      v[k] = v[k] + static_cast<float>(1.0 - beta2) * g[k] * g[k];
      const float denom = std::sqrt(v[k]) / static_cast<float>(bias_correction2_sqrt) + static_cast<float>(eps);
      p[k] = p[k] + static_cast<float>(-step_size) * m[k] / denom;
    }
  }
};

// torch.optim.SGD's single-tensor update on CPU, from torch/optim/sgd.py (_single_tensor_sgd, maximize off):
//   grad = grad.add(param, alpha=weight_decay)          d = g + f32(wd) p        (when wd != 0)
//   buf = clone(grad) on the first step                 buf = d                  (no dampening on step 1)
//   else buf.mul_(momentum).add_(grad, alpha=1 - damp)  buf = buf f32(mu); buf = buf + f32(1 - damp) d
//   nesterov: grad = grad.add(buf, alpha=momentum)      d = d + f32(mu) buf; else d = buf   (when mu != 0)
//   param.add_(grad, alpha=-lr)                          p = p + f32(-lr) d
struct torch_sgd_reference {
  double lr, momentum, dampening, wd;
  bool nesterov;
  std::vector<float> p, buf;
  bool has_buf = false;

  void update(const std::vector<float>& g) {
    for (std::size_t k = 0; k < p.size(); ++k) {
      float d = g[k];
      if (wd != 0.0) d = d + static_cast<float>(wd) * p[k];
      if (momentum != 0.0) {
        if (!has_buf) {
          buf[k] = d;
        } else {
          buf[k] = buf[k] * static_cast<float>(momentum);
          buf[k] = buf[k] + static_cast<float>(1.0 - dampening) * d;
        }
        d = nesterov ? d + static_cast<float>(momentum) * buf[k] : buf[k];
      }
      p[k] = p[k] + static_cast<float>(-lr) * d;
    }
    has_buf = true;
  }
};

// The gradient of element k at step s (from 1) for the long runs: tiny constant gradients (1e-7 and -3e-8, of
// the order of eps = 1e-8, where eps's placement changes the update by tens of percent), a tiny gradient that
// changes sign, a zero gradient (decay only), sign flips of 0.5 and -0.25, and a slowly varying 1e-3 one.
float long_run_gradient(std::size_t k, std::int64_t s) {
  const auto t = static_cast<double>(s);
  switch (k) {
    case 0:
      return 1e-7f;
    case 1:
      return -3e-8f;
    case 2:
      return static_cast<float>(1e-7 * static_cast<double>(s % 3 - 1));
    case 3:
      return 0.0f;
    case 4:
      return s % 2 == 1 ? 0.5f : -0.25f;
    default:
      return static_cast<float>(1e-3 * std::sin(0.3 * t));
  }
}

std::string hex_bits(float f) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", std::bit_cast<std::uint32_t>(f));
  return buf;
}

// The long runs: n = 6 elements from these initial values, long_run_gradient for 300 steps.
const std::vector<float> long_run_start = {1.0f, -0.5f, 0.25f, 2.0f, -1.5f, 0.75f};
constexpr std::int64_t long_run_steps = 300;

std::vector<std::vector<float>> long_run_gradients() {
  std::vector<std::vector<float>> grads;
  for (std::int64_t s = 1; s <= long_run_steps; ++s) {
    std::vector<float> g(long_run_start.size());
    for (std::size_t k = 0; k < g.size(); ++k) g[k] = long_run_gradient(k, s);
    grads.push_back(g);
  }
  return grads;
}

// Steps `ref` (a torch_*_reference) through `grads` and counts the elements of `got` (the optimizer's
// parameters after each step) whose bits differ from the reference's; the first few are reported in hex.
template <class Reference>
int bit_mismatches(const std::vector<std::vector<float>>& got, Reference& ref,
                   const std::vector<std::vector<float>>& grads, const std::string& label) {
  int mismatches = 0;
  for (std::size_t s = 0; s < grads.size(); ++s) {
    ref.update(grads[s]);
    for (std::size_t k = 0; k < ref.p.size(); ++k) {
      const float a = got[s][k], b = ref.p[k];
      if (std::bit_cast<std::uint32_t>(a) != std::bit_cast<std::uint32_t>(b) && mismatches++ < 4) {
        FAIL_CHECK(label << " step " << s + 1 << " element " << k << ": " << hex_bits(a) << " (" << a << "), torch "
                         << hex_bits(b) << " (" << b << ")");
      }
    }
  }
  return mismatches;
}

}  // namespace

TEST_CASE("adamw-torch follows torch.optim.AdamW step by step", "[torch]") {
  optimizer_config cfg = torch_defaults(optimizer_kind::adamw_torch);
  REQUIRE(cfg.weight_decay == 0.01);  // torch's defaults by name
  REQUIRE(cfg.epsilon == 1e-8);
  REQUIRE(cfg.beta1 == 0.9);
  REQUIRE(cfg.beta2 == 0.999);
  REQUIRE(cfg.learning_rate == 1e-3);
  optimizer_config with_lr = cfg;
  with_lr.learning_rate = 1e-2;
  CHECK(torch_adamw(1e-2) == with_lr);  // torch.optim.AdamW(params, lr=1e-2)
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

TEST_CASE("adamw-torch: eps after the bias-corrected root, where tiny gradients make it matter", "[torch]") {
  // A constant gradient g gives m_t = (1 - b1^t) g and v_t = (1 - b2^t) g^2 exactly (in real numbers), so the
  // bias-corrected moments are g and g^2 at every step and torch's update is lr g / (|g| + eps), whatever t:
  //   p_t = p_{t-1} (1 - lr wd) - lr g / (|g| + eps).
  // With g = 1e-7 and eps = 1e-8 that is lr / 1.1. Had eps been added before the bias correction
  // ((sqrt(v) + eps) / sqrt(1 - b2^t), Adam's paper's eps-hat), step 1 would divide by 1e-7 + 1e-8 / sqrt(0.001)
  // = 4.16e-7 (lr * 0.24); inside the root (sqrt(v / bc2 + eps)), by 1e-4 (lr * 0.001).
  optimizer_config cfg = torch_defaults(optimizer_kind::adamw_torch);
  cfg.learning_rate = 0.1;
  constexpr int steps = 100;
  const std::vector<std::vector<float>> grads(steps, std::vector<float>{1e-7f, -3e-8f});
  const std::vector<std::vector<float>> p = run_steps(cfg, {1.0f, 1.0f}, grads);
  double want0 = 1.0, want1 = 1.0;
  for (int s = 0; s < steps; ++s) {
    // The gradients are the float values 1e-7f and -3e-8f, not the decimals.
    const double g0 = static_cast<double>(1e-7f), g1 = static_cast<double>(-3e-8f);
    want0 = want0 * (1.0 - 0.1 * 0.01) - 0.1 * g0 / (std::fabs(g0) + 1e-8);
    want1 = want1 * (1.0 - 0.1 * 0.01) - 0.1 * g1 / (std::fabs(g1) + 1e-8);
    // Tolerance: each step rounds p (about 1) once in the decay and once in the addition, and the decay factor
    // is f32(0.999) = 0.999 + 1.3e-8 (0.22 u): under 3 u |p|. The update lr r (r <= 1) carries the relative
    // errors of m and v (their recurrences, f32(0.1) and f32(0.001) for 1 - beta), the root, the division and
    // f32(eps): under 64 u. Per step 3 u |p| + 64 u lr, summed over the steps so far (|p| < 2 here).
    const auto u = static_cast<double>(unit_roundoff(fp32));  // 2^-24
    const double tol = (s + 1) * (3.0 * u * 2.0 + 64.0 * u * 0.1);
    INFO("step " << s + 1);
    CHECK(std::fabs(static_cast<double>(p[static_cast<std::size_t>(s)][0]) - want0) <= tol);
    CHECK(std::fabs(static_cast<double>(p[static_cast<std::size_t>(s)][1]) - want1) <= tol);
  }
  // Step 1 by hand: 1 * 0.999 - 0.1 * 1e-7 / 1.1e-7 = 0.999 - 0.0909091 = 0.9080909 (eps-hat: 0.999 - 0.024 = 0.975).
  CHECK(std::fabs(p[0][0] - 0.9080909f) < 1e-6f);
  // -3e-8 / (3e-8 + 1e-8) = -0.75: p = 0.999 + 0.075 = 1.074.
  CHECK(std::fabs(p[0][1] - 1.074f) < 1e-6f);
}

TEST_CASE("adamw-torch equals torch's float arithmetic bit for bit over 300 steps", "[torch]") {
  // Six elements with the gradients of long_run_gradient, under torch's defaults and under a large learning
  // rate, weight decay and other betas: every step's parameters must have the bits of torch_adamw_reference.
  // (A reordered bias correction, eps added elsewhere or the decay applied after the update changes the last
  // bits of some element within a few steps.)
  for (const double lr : {1e-3, 0.05}) {
    optimizer_config cfg = torch_defaults(optimizer_kind::adamw_torch);
    cfg.learning_rate = lr;
    if (lr > 0.01) {
      cfg.weight_decay = 0.1;
      cfg.beta1 = 0.8;
      cfg.beta2 = 0.99;
    }
    const std::vector<std::vector<float>> grads = long_run_gradients();
    const std::vector<std::vector<float>> got = run_steps(cfg, long_run_start, grads);
    const std::size_t n = long_run_start.size();
    torch_adamw_reference ref{.lr = cfg.learning_rate,
                              .beta1 = cfg.beta1,
                              .beta2 = cfg.beta2,
                              .eps = cfg.epsilon,
                              .wd = cfg.weight_decay,
                              .p = long_run_start,
                              .m = std::vector<float>(n, 0.0f),
                              .v = std::vector<float>(n, 0.0f)};
    CHECK(bit_mismatches(got, ref, grads, "lr " + std::to_string(lr)) == 0);
  }
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

TEST_CASE("sgd-torch equals torch's float arithmetic bit for bit over 300 steps", "[torch]") {
  struct setting {
    double lr, momentum, dampening, wd;
    bool nesterov;
  };
  const setting settings[] = {{0.05, 0.0, 0.0, 0.0, false},  // plain SGD: no buffer at all
                              {0.05, 0.9, 0.0, 0.0, false},
                              {0.02, 0.9, 0.3, 0.01, false},  // dampening from step 2 on, L2 decay in the gradient
                              {0.01, 0.8, 0.0, 0.05, true}};
  for (const setting& st : settings) {
    optimizer_config cfg = torch_defaults(optimizer_kind::sgd_torch);
    cfg.learning_rate = st.lr;
    cfg.momentum = st.momentum;
    cfg.dampening = st.dampening;
    cfg.weight_decay = st.wd;
    cfg.nesterov = st.nesterov;
    const std::vector<std::vector<float>> grads = long_run_gradients();
    const std::vector<std::vector<float>> got = run_steps(cfg, long_run_start, grads);
    torch_sgd_reference ref{.lr = st.lr,
                            .momentum = st.momentum,
                            .dampening = st.dampening,
                            .wd = st.wd,
                            .nesterov = st.nesterov,
                            .p = long_run_start,
                            .buf = std::vector<float>(long_run_start.size(), 0.0f)};
    const std::string label = "momentum " + std::to_string(st.momentum) + " dampening " + std::to_string(st.dampening) +
                              (st.nesterov ? " nesterov" : "");
    CHECK(bit_mismatches(got, ref, grads, label) == 0);
  }
}

TEST_CASE("sgd-torch: the first step's buffer is the gradient itself, by hand", "[torch]") {
  // momentum 0.5, dampening 0.5, lr 1, no decay, gradients 1, 1, 1 (exact in binary):
  //   step 1: buf = 1 (a copy, not (1 - 0.5) * 1); p = 0 - 1 = -1
  //   step 2: buf = 0.5 * 1 + 0.5 * 1 = 1; p = -2;   step 3: the same, p = -3.
  // Dampening on the first step too would give buf 0.5, 0.75, 0.875 and p -0.5, -1.25, -2.125.
  optimizer_config cfg = torch_defaults(optimizer_kind::sgd_torch);
  cfg.learning_rate = 1.0;
  cfg.momentum = 0.5;
  cfg.dampening = 0.5;
  const std::vector<std::vector<float>> p = run_steps(cfg, {0.0f}, {{1.0f}, {1.0f}, {1.0f}});
  CHECK(p[0][0] == -1.0f);
  CHECK(p[1][0] == -2.0f);
  CHECK(p[2][0] == -3.0f);
  // Nesterov (dampening 0), gradients 1, 1: step 1 buf = 1, d = 1 + 0.5 * 1 = 1.5, p = -1.5;
  // step 2 buf = 0.5 + 1 = 1.5, d = 1 + 0.75 = 1.75, p = -3.25.
  cfg.dampening = 0.0;
  cfg.nesterov = true;
  const std::vector<std::vector<float>> q = run_steps(cfg, {0.0f}, {{1.0f}, {1.0f}});
  CHECK(q[0][0] == -1.5f);
  CHECK(q[1][0] == -3.25f);
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

  // At the limit exactly (norm 5, max_norm 5) torch still scales: float's spacing at 5 is 2^-21 (4.8e-7), so
  // 5 + 1e-6f (2.1 spacings) rounds to 5 + 2^-20, and 5 / (5 + 2^-20) = 1 - 2^-20/5 = 1 - 3.2 * 2^-24 rounds to
  // 1 - 3 * 2^-24 (float's spacing below 1 is 2^-24). max/norm would be exactly 1 and leave the gradients alone.
  std::vector<float> g = {3.0f}, h = {4.0f};
  std::span<float> at_limit[] = {g, h};
  CHECK(5.0f + 1e-6f == 5.0f + 0x1p-20f);
  const clip_result lim = clip_grad_norm_torch(at_limit, 5.0);
  CHECK(lim.clipped);
  const float coef_at_limit = 1.0f - 3.0f * 0x1p-24f;
  CHECK(g[0] == 3.0f * coef_at_limit);
  CHECK(h[0] == 4.0f * coef_at_limit);

  // The squares are summed in float, left to right (grad_clip.hpp; torch's blocked order may differ on long
  // tensors): 1 + (2^-12)^2 = 1 + 2^-24 is a tie between 1 and 1 + 2^-23 and rounds to 1, four times over, so
  // the norm is 1; in double the sum is 1 + 2^-22 and the norm rounds to 1 + 2^-23.
  std::vector<float> fine = {1.0f, 0x1p-12f, 0x1p-12f, 0x1p-12f, 0x1p-12f};
  std::span<float> fine_bufs[] = {fine};
  CHECK(static_cast<float>(global_grad_norm(fine_bufs)) == 1.0f + 0x1p-23f);
  CHECK(clip_grad_norm_torch(fine_bufs, 10.0).norm_before == 1.0);

  // The factor is float arithmetic too: norm 1, 1 + 1e-6f = 1 + 2^-20 (1e-6 is 8.4 of float's spacings 2^-23 at
  // 1), 1 / (1 + 2^-20) = 1 - 2^-20 + 2^-40 rounds to 1 - 2^-20 (= 0.99999905, 16 spacings of 2^-24 below 1);
  // in double 1 / (1 + 1e-6) = 1 - 16.8 * 2^-24 would round to 1 - 17 * 2^-24.
  std::vector<float> unit = {1.0f};
  std::span<float> unit_bufs[] = {unit};
  (void)clip_grad_norm_torch(unit_bufs, 1.0);
  CHECK(unit[0] == 1.0f - 0x1p-20f);

  // The global norm is the norm of the per-tensor norms, each rounded to float: six ones have the tensor norm
  // f32(sqrt 6) = 0x401cc471, whose float square is 6.00000048, not 6; with a second tensor {1} the global norm
  // is sqrtf(7.00000048) = 0x402953fe, where the squares summed as one tensor give sqrtf(7) = 0x402953fd.
  std::vector<float> six(6, 1.0f), single = {1.0f};
  std::span<float> two_tensors[] = {six, single};
  const float sqrt6 = std::sqrt(6.0f);
  REQUIRE(std::bit_cast<std::uint32_t>(sqrt6) == 0x401cc471u);
  REQUIRE(sqrt6 * sqrt6 == 6.00000048f);
  const auto two_norm = static_cast<float>(clip_grad_norm_torch(two_tensors, 10.0).norm_before);
  CHECK(std::bit_cast<std::uint32_t>(two_norm) == 0x402953feu);

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

TEST_CASE("autocast: matmul on spans gives the matrix overload's bits, for every transpose", "[autocast]") {
  // A (2, 3) and B (3, 2) with values that are not fp16 numbers (2049 rounds to 2048, 0.1 to 0.0999755859375):
  // the span overload must round the inputs, accumulate and round the output exactly as the matrix one.
  matrix a(2, 3), b(3, 2);
  a << 1.0f, 2049.0f, 0.1f, -3.0f, 0.5f, 7.0f;
  b << 0.25f, 1.0f, -1.0f, 0.3f, 2.0f, 4097.0f;
  autocast ac(presets::fp16_mixed);
  const matrix bt = b.transpose(), at = a.transpose();
  struct form {
    mm op;
    const matrix& a;
    const matrix& b;
  };
  for (const form f : {form{mm::nn, a, b}, form{mm::tn, at, b}, form{mm::nt, a, bt}}) {
    const matrix want = ac.matmul(f.op, f.a, f.b);
    REQUIRE((want.rows() == 2 && want.cols() == 2));
    std::vector<float> out(4, -1.0f);
    ac.matmul(f.op, span_of(f.a), span_of(f.b), out, 2, 2, 3);
    for (int i = 0; i < 4; ++i)
      CHECK(std::bit_cast<std::uint32_t>(out[static_cast<std::size_t>(i)]) ==
            std::bit_cast<std::uint32_t>(want.data()[i]));
  }
  // Row 0 by hand (nn): fp16 inputs 1, 2048, 0.0999755859375 and 0.25, -1, 2; 0.25 - 2048 + 0.199951171875 =
  // -2047.550048828125, whose fp16 rounding (spacing 1 in [1024, 2048)) is -2048.
  std::vector<float> out(4);
  ac.matmul(mm::nn, span_of(a), span_of(b), out, 2, 2, 3);
  CHECK(out[0] == -2048.0f);
  std::vector<float> short_out(3);
  CHECK_THROWS_WITH(ac.matmul(mm::nn, span_of(a), span_of(b), short_out, 2, 2, 3),
                    Catch::Contains("autocast::matmul out is 3 values") && Catch::Contains("4 (2 x 2)"));
  CHECK_THROWS_WITH(ac.matmul(mm::tn, span_of(a), span_of(b), out, 2, 2, 2),
                    Catch::Contains("autocast::matmul a is 6 values") && Catch::Contains("4 (2 x 2)"));
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
  parameter_list both = {pw, pb};
  const std::vector<std::span<float>> spans = grad_spans(both);  // what unscale and clip take
  REQUIRE(spans.size() == 2);
  CHECK((spans[0].data() == both[0].grad.data() && spans[0].size() == 2));
  CHECK((spans[1].data() == both[1].grad.data() && spans[1].size() == 1));
  const std::uint64_t before = ac.casts();
  matrix m(1, 1);
  m << 70000.0f;  // beyond fp16's max 65504: the output cast overflows, counted
  const cast_stats s = ac.cast_output(m);
  CHECK(std::isinf(m(0, 0)));
  CHECK(s.overflow == 1);
  CHECK(ac.casts() == before + 1);
}
