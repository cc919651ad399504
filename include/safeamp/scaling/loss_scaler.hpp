// The stateful loss scaler: drives one training step in the only safe order (scale the loss; unscale every
// gradient buffer in place while detecting inf/NaN; clip on true magnitudes; apply only if all finite;
// update) and turns misuse of that order into a safeamp::error. The scale rule (dynamic, static, none) is a
// template parameter; loss_scaler, static_loss_scaler and noop_loss_scaler are the three instances.
#pragma once

#include <concepts>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "safeamp/error.hpp"
#include "safeamp/scaling/grad_clip.hpp"
#include "safeamp/scaling/scale_rules.hpp"
#include "safeamp/scaling/scaler_checkpoint.hpp"
#include "safeamp/scaling/step_report.hpp"
#include "safeamp/scaling/unscale.hpp"

namespace safeamp {

/// Where a scaler is inside a step: ready (after update or construction), unscaled (an inf check is
/// recorded), stepped (step() ran; only update() is allowed next).
enum class scaler_stage : std::uint8_t { ready, unscaled, stepped };

template <class Rule>
class basic_loss_scaler {
 public:
  basic_loss_scaler() = default;
  explicit basic_loss_scaler(Rule rule) : rule_(std::move(rule)) {}

  /// The scale the loss is multiplied by in this step.
  [[nodiscard]] float scale() const noexcept { return rule_.scale(); }
  /// loss * scale, in the loss's own type.
  template <std::floating_point T>
  [[nodiscard]] T scale_loss(T loss) const noexcept {
    return loss * static_cast<T>(rule_.scale());
  }

  /// Unscales one gradient buffer in place (multiplies by f32(1/scale)) and detects inf/NaN in the same pass.
  /// Call once per buffer per step (several buffers allowed). Returns true when this buffer overflowed.
  bool unscale(std::span<float> grads) {
    if (stage_ == scaler_stage::stepped) {
      throw error("loss_scaler: unscale() called after step() in the same step; call update() first");
    }
    for (const buffer_range& b : unscaled_) {
      if (overlaps(b, grads)) {
        throw error("loss_scaler: unscale() called twice on the same gradient buffer (" + std::to_string(grads.size()) +
                    " elements) in one step; it would be divided by the scale twice");
      }
    }
    const bool bad = unscale_and_check(grads, inverse_scale(rule_.scale()));
    unscaled_.push_back({grads.data(), grads.size()});
    found_inf_ = found_inf_ || bad;
    gradient_inf_ = gradient_inf_ || bad;
    stage_ = scaler_stage::unscaled;
    return bad;
  }

  /// Records an inf check done elsewhere (a device kernel, or a flag all-reduced with MAX over ranks).
  void record_found_inf(bool found_inf) {
    if (stage_ == scaler_stage::stepped) {
      throw error("loss_scaler: record_found_inf() called after step() in the same step; call update() first");
    }
    found_inf_ = found_inf_ || found_inf;
    gradient_inf_ = gradient_inf_ || found_inf;
    stage_ = scaler_stage::unscaled;
  }

  /// Clips the global L2 norm of unscaled buffers to max_norm. Every buffer must have been unscaled in this
  /// step (clipping a scaled gradient clips the wrong magnitude). A non-finite norm scales nothing and is
  /// recorded as an overflow, so the step is skipped. The report's reason is found_inf when unscale() or
  /// record_found_inf() saw inf/NaN (before or after this call), and non_finite_norm only when every check
  /// was finite and the norm alone is not (e.g. a buffer changed to inf after it was unscaled).
  clip_result clip_grad_norm(std::span<const std::span<float>> buffers, double max_norm) {
    if (stage_ == scaler_stage::stepped) throw error("loss_scaler: clip_grad_norm() called after step()");
    for (const std::span<float> b : buffers) {
      if (!b.empty() && !was_unscaled(b)) {
        throw error("loss_scaler: clip_grad_norm() on a gradient buffer (" + std::to_string(b.size()) +
                    " elements) that was not unscaled in this step; unscale(grads) first, or the clip acts on "
                    "scaled magnitudes");
      }
    }
    const clip_result r = safeamp::clip_grad_norm(buffers, max_norm);
    norm_before_ = r.norm_before;
    norm_after_ = r.norm_after;
    if (!r.finite) {
      found_inf_ = true;
      norm_non_finite_ = true;
    }
    return r;
  }
  clip_result clip_grad_norm(std::span<float> buffer, double max_norm) {
    const std::span<float> one[] = {buffer};
    return clip_grad_norm(std::span<const std::span<float>>(one), max_norm);
  }

  /// Runs apply() only when every recorded check was finite. Returns the step's report, including the scale
  /// update() will set (the transition is a pure function of the recorded flag).
  template <class Apply>
  step_report step(Apply&& apply) {
    if (stage_ == scaler_stage::stepped) throw error("loss_scaler: step() called twice; call update() between steps");
    if (stage_ == scaler_stage::ready) {
      throw error(
          "loss_scaler: step() with no inf check recorded in this step; call unscale(grads) for every "
          "gradient buffer (or record_found_inf) first");
    }
    if (!found_inf_) std::forward<Apply>(apply)();
    stage_ = scaler_stage::stepped;
    return make_report(rule_.preview(found_inf_), true);
  }

  /// Advances the scale (the transition) and the counters, and starts the next step.
  /// With a dynamic rule and max_overflows_at_min = K > 0, throws after committing the step when K consecutive
  /// overflows have found the scale at min_scale.
  step_report update() {
    if (stage_ == scaler_stage::ready) {
      throw error(
          "loss_scaler: update() with no inf check recorded since the last update(); call unscale(grads) "
          "and step(apply) first");
    }
    const scale_transition t = rule_.preview(found_inf_);
    last_ = make_report(t, stage_ == scaler_stage::stepped);
    rule_.commit(t);
    count(last_, t);
    reset_step();
    if constexpr (requires { rule_.config.max_overflows_at_min; }) {
      const std::int32_t k = rule_.config.max_overflows_at_min;
      if (k > 0 && t.next.overflows_at_min >= k) {
        throw error("loss_scaler: " + std::to_string(t.next.overflows_at_min) +
                    " consecutive overflows with the scale already at min_scale (" +
                    detail::number_text(rule_.config.min_scale) +
                    "); gradients are not finite even unscaled. max_overflows_at_min is " + std::to_string(k) +
                    " (0 disables this error)");
      }
    }
    return last_;
  }

  [[nodiscard]] const step_report& last_report() const noexcept { return last_; }
  [[nodiscard]] const scaler_stats& stats() const noexcept { return stats_; }
  [[nodiscard]] const Rule& rule() const noexcept { return rule_; }
  [[nodiscard]] scaler_stage stage() const noexcept { return stage_; }
  /// Overflow recorded so far in this step.
  [[nodiscard]] bool found_inf() const noexcept { return found_inf_; }

  // ---- checkpoints (dynamic rule only) ----------------------------------------------------------------
  /// Every config and state field and the counters. Only between steps (after update()).
  [[nodiscard]] scaler_checkpoint checkpoint() const requires std::same_as<Rule, dynamic_scale_rule> {
    if (stage_ != scaler_stage::ready)
      throw error("loss_scaler: checkpoint() in the middle of a step; call update() first");
    return scaler_checkpoint{
        .version = scaler_checkpoint_version, .config = rule_.config, .state = rule_.state, .stats = stats_};
  }
  /// Restores a checkpoint (validated first; on any error the scaler keeps its previous state).
  void restore(const scaler_checkpoint& c) requires std::same_as<Rule, dynamic_scale_rule> {
    if (stage_ != scaler_stage::ready)
      throw error("loss_scaler: restore() in the middle of a step; call update() first");
    validate(c);
    rule_.config = c.config;
    rule_.state = c.state;
    stats_ = c.stats;
  }
  [[nodiscard]] std::string save_json() const requires std::same_as<Rule, dynamic_scale_rule> {
    return to_json(checkpoint());
  }
  void load_json(std::string_view text) requires std::same_as<Rule, dynamic_scale_rule> {
    restore(checkpoint_from_json(text));
  }

 private:
  struct buffer_range {
    const float* data;
    std::size_t size;
  };
  [[nodiscard]] static bool overlaps(const buffer_range& b, std::span<float> g) noexcept {
    if (b.size == 0 || g.empty()) return false;
    const std::uintptr_t b0 = reinterpret_cast<std::uintptr_t>(b.data);
    const std::uintptr_t b1 = b0 + b.size * sizeof(float);
    const std::uintptr_t g0 = reinterpret_cast<std::uintptr_t>(g.data());
    const std::uintptr_t g1 = g0 + g.size() * sizeof(float);
    return g0 < b1 && b0 < g1;
  }
  [[nodiscard]] bool was_unscaled(std::span<float> g) const noexcept {
    const std::uintptr_t g0 = reinterpret_cast<std::uintptr_t>(g.data());
    const std::uintptr_t g1 = g0 + g.size() * sizeof(float);
    for (const buffer_range& b : unscaled_) {
      const std::uintptr_t b0 = reinterpret_cast<std::uintptr_t>(b.data);
      if (g0 >= b0 && g1 <= b0 + b.size * sizeof(float)) return true;
    }
    return false;
  }
  /// The norm overflowed while every gradient check was finite (the only case reported as non_finite_norm).
  [[nodiscard]] bool norm_only_overflow() const noexcept { return norm_non_finite_ && !gradient_inf_; }
  [[nodiscard]] step_report make_report(const scale_transition& t, bool stepped) const noexcept {
    step_report r;
    r.step = stats_.steps;
    r.applied = stepped && !found_inf_;
    r.found_inf = found_inf_;
    r.reason = !found_inf_            ? (stepped ? skip_reason::none : skip_reason::not_stepped)
               : norm_only_overflow() ? skip_reason::non_finite_norm
                                      : skip_reason::found_inf;
    r.scale_before = rule_.scale();
    r.scale_after = t.next.scale;
    r.growth_tracker = t.next.growth_tracker;
    r.hysteresis_tracker = t.next.hysteresis_tracker;
    r.overflows_at_min = t.next.overflows_at_min;
    r.event = t.event;
    r.grad_norm_before_clip = norm_before_;
    r.grad_norm_after_clip = norm_after_;
    return r;
  }
  void count(const step_report& r, const scale_transition& t) noexcept {
    ++stats_.steps;
    if (r.applied) {
      ++stats_.applied_steps;
      stats_.consecutive_skips = 0;
    } else {
      ++stats_.skipped_steps;
      ++stats_.consecutive_skips;
    }
    if (r.found_inf) stats_.last_overflow_step = r.step;
    if (norm_only_overflow()) ++stats_.non_finite_norms;
    switch (t.event) {
      case scale_event::grew:
        ++stats_.growth_events;
        break;
      case scale_event::growth_refused:
        ++stats_.growth_refusals;
        break;
      case scale_event::absorbed:
        ++stats_.absorbed_overflows;
        break;
      case scale_event::backed_off:
        ++stats_.backoff_events;
        break;
      case scale_event::clamped_at_min:
        ++stats_.backoff_events;
        break;
      case scale_event::none:
        break;
    }
    // overflows_at_min only grows on a non-absorbed overflow at the floor (a clean step resets it).
    if (r.found_inf && t.event != scale_event::absorbed && t.next.overflows_at_min > 0) {
      ++stats_.floor_hits;
    }
  }
  void reset_step() noexcept {
    stage_ = scaler_stage::ready;
    found_inf_ = false;
    gradient_inf_ = false;
    norm_non_finite_ = false;
    norm_before_ = -1.0;
    norm_after_ = -1.0;
    unscaled_.clear();
  }

  Rule rule_{};
  scaler_stats stats_{};
  step_report last_{};
  scaler_stage stage_ = scaler_stage::ready;
  bool found_inf_ = false;        // any overflow in this step: a gradient check or the norm
  bool gradient_inf_ = false;     // unscale() or record_found_inf() saw inf/NaN
  bool norm_non_finite_ = false;  // clip_grad_norm() computed an inf/NaN norm
  double norm_before_ = -1.0;
  double norm_after_ = -1.0;
  std::vector<buffer_range> unscaled_;
};

/// Dynamic loss scaler: construct from a scaler_config (validated) or a preset, e.g.
/// `loss_scaler s(scaler_presets::pytorch);`.
using loss_scaler = basic_loss_scaler<dynamic_scale_rule>;
/// Fixed scale: `static_loss_scaler s(static_scale_rule(1024.0f));`.
using static_loss_scaler = basic_loss_scaler<static_scale_rule>;
/// Scale 1 (bf16/fp32 policies); still skips non-finite steps.
using noop_loss_scaler = basic_loss_scaler<no_scale_rule>;

}  // namespace safeamp
