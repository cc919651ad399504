// One FP16 training step done safely, in C++: the classic mixed-precision example.
//   1. Without loss scaling, a small gradient underflows to zero when stored in fp16.
//   2. With a loss scale, the fp16 gradient survives; unscaling recovers the true gradient.
//   3. Clipping must come after unscaling: clipping the still-scaled gradient clips the wrong magnitude.
//   4. A scale that is too large overflows fp16; the scaler skips the step and backs off.
// The model is one weight vector w, prediction y = w . x, loss = 0.5 (y - t)^2, so dL/dw = (y - t) x.
// Gradients are stored in fp16 (safeamp::round_to emulates the storage). Exits non-zero if any claim fails.
#include <cmath>
#include <cstdio>
#include <vector>

#include "safeamp/safeamp.hpp"

namespace {
int failures = 0;
void claim(bool ok, const char* what) {
  std::printf("[%s] %s\n", ok ? "ok" : "FAILED", what);
  failures += ok ? 0 : 1;
}

// Backward of (scale * loss), each gradient element stored in fp16 as a half-precision backward pass would.
std::vector<float> fp16_grads(const std::vector<float>& w, const std::vector<float>& x, float target, float scale) {
  double y = 0.0;
  for (std::size_t i = 0; i < w.size(); ++i) y += static_cast<double>(w[i]) * x[i];
  const double dloss_dy = (y - target) * scale;  // the loss is computed in fp32, then scaled
  std::vector<float> g(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) {
    g[i] = safeamp::round_to(safeamp::fp16, static_cast<float>(dloss_dy * x[i]));
  }
  return g;
}

double norm(const std::vector<float>& g) {
  double s = 0.0;
  for (const float v : g) s += static_cast<double>(v) * v;
  return std::sqrt(s);
}
}  // namespace

int main() {
  // A residual of 1e-4 and inputs of 1e-3: true gradients ~1e-7, below fp16's smallest subnormal 2^-24 ~ 6e-8
  // for most elements.
  const std::vector<float> x = {1e-3f, 2e-3f, 3e-3f, 2e-4f};
  std::vector<float> w = {0.25f, 0.5f, 0.125f, 1.0f};
  double y = 0.0;
  for (std::size_t i = 0; i < w.size(); ++i) y += static_cast<double>(w[i]) * x[i];
  const float target = static_cast<float>(y - 1e-4);  // residual y - t = 1e-4
  std::vector<double> true_grad(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) true_grad[i] = 1e-4 * x[i];

  // 1. No scaling: the fp16 gradient of x[3] (2e-8, under half of 2^-24) rounds to zero; the others lose most of their
  // bits.
  const std::vector<float> unscaled = fp16_grads(w, x, target, 1.0f);
  claim(unscaled[3] == 0.0f, "without scaling the smallest gradient (2e-8) underflows to 0 in fp16");

  // 2. The safe order with a dynamic scaler.
  safeamp::loss_scaler scaler(safeamp::scaler_presets::pytorch);  // 2^16
  std::vector<float> g = fp16_grads(w, x, target, scaler.scale());
  const bool overflow = scaler.unscale(g);  // in place, one pass, inf/NaN detected
  claim(!overflow, "scale 2^16: no overflow");
  bool close = true;
  for (std::size_t i = 0; i < g.size(); ++i) {
    // fp16 keeps 11 significant bits: relative error <= u = 2^-11 after scaling moved the value into range.
    close = close && std::fabs(g[i] - true_grad[i]) <= std::ldexp(1.0, -11) * std::fabs(true_grad[i]) * 1.0001;
  }
  claim(close, "with scaling every unscaled gradient is within fp16's unit roundoff of the true gradient");

  const double max_norm = 1e-6;  // larger than the true norm (~3.8e-7): a correct clip changes nothing
  const safeamp::clip_result clip = scaler.clip_grad_norm(g, max_norm);
  claim(!clip.clipped && std::fabs(clip.norm_before - norm(g)) <= 1e-12 * norm(g),
        "clipping after unscaling sees the true norm and leaves the gradient alone");

  // 3. The wrong order: clip the scaled gradient, then unscale. The clip sees a norm 2^16 times too large and
  // shrinks the gradient to max_norm / 2^16 instead of leaving it alone.
  std::vector<float> wrong = fp16_grads(w, x, target, 65536.0f);
  const safeamp::clip_result wrong_clip = safeamp::clip_grad_norm(wrong, max_norm);
  safeamp::scale_in_place(wrong, 1.0f / 65536.0f);
  std::printf("  true norm %.4g, clipped-before-unscale norm %.4g (max_norm %.4g)\n", norm(g), norm(wrong), max_norm);
  claim(wrong_clip.clipped && norm(wrong) < norm(g) / 1000.0,
        "clipping before unscaling clips the wrong (scaled) magnitude: the update shrinks by > 1000x");
  // The scaler refuses the wrong order outright.
  safeamp::loss_scaler guard;
  std::vector<float> scaled = fp16_grads(w, x, target, guard.scale());
  bool refused = false;
  try {
    (void)guard.clip_grad_norm(scaled, max_norm);
  } catch (const safeamp::error& e) {
    refused = true;
    std::printf("  scaler: %s\n", e.what());
  }
  claim(refused, "the scaler reports clip-before-unscale as an error");

  const std::vector<float> w_before = w;
  const safeamp::step_report report = scaler.step([&] {
    for (std::size_t i = 0; i < w.size(); ++i) w[i] -= 0.1f * g[i];
  });
  scaler.update();
  claim(report.applied && w != w_before, "finite gradients: the optimizer step was applied");

  // 4. A scale too large: (y - t) * 2^40 * x overflows fp16's max 65504 -> inf; the step is skipped.
  safeamp::loss_scaler big(safeamp::scaler_config{.init_scale = 0x1p40f});
  std::vector<float> gb = fp16_grads(w, x, target, big.scale());
  const std::vector<float> w_kept = w;
  (void)big.unscale(gb);
  const safeamp::step_report skipped = big.step([&] { w[0] = 1e30f; });
  big.update();
  claim(!skipped.applied && skipped.reason == safeamp::skip_reason::found_inf && w == w_kept,
        "overflowing fp16 gradients: the step is skipped and the weights are untouched");
  claim(big.scale() == 0x1p39f, "the scale backs off by the backoff factor (2^40 -> 2^39)");

  return failures == 0 ? 0 : 1;
}
