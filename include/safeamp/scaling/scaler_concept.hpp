// The scaler concept: what a trainer may call on any scaler (dynamic, static, none), so that training code
// is generic over them, e.g. `template <gradient_scaler S> void train_step(S& scaler, ...)`.
#pragma once

#include <concepts>
#include <span>

#include "safeamp/scaling/grad_clip.hpp"
#include "safeamp/scaling/step_report.hpp"

namespace safeamp {

template <class S>
concept gradient_scaler = requires(S s, const S cs, std::span<float> g, float loss_f, double loss_d, void (*apply)()) {
  { cs.scale() } -> std::same_as<float>;
  { cs.scale_loss(loss_f) } -> std::same_as<float>;
  { cs.scale_loss(loss_d) } -> std::same_as<double>;
  { s.unscale(g) } -> std::same_as<bool>;
  {s.record_found_inf(true)};
  { s.clip_grad_norm(g, 1.0) } -> std::same_as<clip_result>;
  { s.step(apply) } -> std::same_as<step_report>;
  { s.update() } -> std::same_as<step_report>;
  { cs.stats() } -> std::convertible_to<const scaler_stats&>;
};

}  // namespace safeamp
