// The stateful loss scaler: drives one training step in the only safe order (scale the loss; unscale every
// gradient buffer in place while detecting inf/NaN; clip on true magnitudes; apply only if all finite;
// update) and turns misuse of that order into a safeamp::error. The scale rule (dynamic, static, none) is a
// template parameter; loss_scaler, static_loss_scaler and noop_loss_scaler are the three instances.
#pragma once

#include <algorithm>
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
#include "safeamp/scaling/scaler_block.hpp"
#include "safeamp/scaling/scaler_checkpoint.hpp"
#include "safeamp/scaling/step_report.hpp"
#include "safeamp/scaling/unscale.hpp"

namespace safeamp {

/// Where a scaler is inside a step: ready (after update or construction), unscaled (an inf check is
/// recorded), stepped (step() ran; only update() is allowed next).
enum class scaler_stage : std::uint8_t { ready, unscaled, stepped };

namespace detail {
/// The error max_overflows_at_min = k raises after `overflows` consecutive overflows at min_scale.
[[nodiscard]] inline error floor_error(std::int32_t overflows, float min_scale, std::int32_t k) {
  return error("loss_scaler: " + std::to_string(overflows) +
               " consecutive overflows with the scale already at min_scale (" + number_text(min_scale) +
               "); gradients are not finite even unscaled. max_overflows_at_min is " + std::to_string(k) +
               " (0 disables this error)");
}
/// A buffer's bytes [begin, end) by address (the host and the deferred scalers check buffers by address).
using byte_range = std::pair<std::uintptr_t, std::uintptr_t>;
/// True when two non-empty ranges share a byte (the test of unscale()'s refusal of a buffer unscaled twice).
[[nodiscard]] inline bool overlap(byte_range a, byte_range b) noexcept {
  return a.first < a.second && b.first < b.second && a.first < b.second && b.first < a.second;
}
/// The byte range of a host buffer.
[[nodiscard]] inline byte_range bytes_of(std::span<const float> g) noexcept {
  const std::uintptr_t begin = reinterpret_cast<std::uintptr_t>(g.data());
  return {begin, begin + g.size() * sizeof(float)};
}
/// The unscaled ranges as clip_grad_norm checks them: empty ones dropped, sorted by begin. unscale() refuses
/// overlapping buffers, so these are disjoint.
[[nodiscard]] inline std::vector<byte_range> sorted_unscaled(std::vector<byte_range> ranges) {
  std::erase_if(ranges, [](const byte_range& r) { return r.first == r.second; });
  std::sort(ranges.begin(), ranges.end());
  return ranges;
}
/// True when every byte of `g` lies in the union of `sorted` (from sorted_unscaled): a buffer unscaled in
/// pieces (its halves, say) is covered when the pieces meet; a gap of even one element is not. An empty `g`
/// is covered.
[[nodiscard]] inline bool covered(const std::vector<byte_range>& sorted, byte_range g) noexcept {
  if (g.first == g.second) return true;
  // The last range that begins at or before g: the only one that can hold g's first byte.
  auto it = std::upper_bound(sorted.begin(), sorted.end(), g.first,
                             [](std::uintptr_t at, const byte_range& r) { return at < r.first; });
  if (it == sorted.begin()) return false;
  --it;
  std::uintptr_t reached = g.first;  // [g.first, reached) is unscaled
  for (; it != sorted.end() && it->first <= reached; ++it) {
    reached = std::max(reached, it->second);
    if (reached >= g.second) return true;
  }
  return false;
}
/// The memory a new scaler starts with: the dynamic rule's state, empty flags and counters.
template <class Rule>
[[nodiscard]] scaler_block make_block(const Rule& rule) noexcept {
  scaler_block b{};
  if constexpr (requires { rule.state; }) b.state = rule.state;
  return b;
}
}  // namespace detail

/// Where a scaler keeps its memory (scaler_block) and its gradients: host_memory runs every pass inline on
/// std::span<float> buffers. A device memory space (safeamp::cuda::device_memory) is another argument of the
/// same template, specialised in deferred_loss_scaler.hpp.
struct host_memory {};

template <class Rule, class Memory = host_memory>
class basic_loss_scaler;

/// The host scaler: every pass runs inline, update() throws at once on max_overflows_at_min.
template <class Rule>
class basic_loss_scaler<Rule, host_memory> {
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
    const detail::byte_range g = detail::bytes_of(grads);
    for (const detail::byte_range& b : unscaled_) {
      if (detail::overlap(g, b)) {
        throw error("loss_scaler: unscale() called twice on the same gradient buffer (" + std::to_string(grads.size()) +
                    " elements) in one step; it would be divided by the scale twice");
      }
    }
    const bool bad = unscale_and_check(grads, inverse_scale(rule_.scale()));
    unscaled_.push_back(g);
    if (bad) block_.found_inf = block_.gradient_inf = 1;
    stage_ = scaler_stage::unscaled;
    return bad;
  }

  /// Records an inf check done elsewhere (a device kernel, or a flag all-reduced with MAX over ranks).
  void record_found_inf(bool found_inf) {
    if (stage_ == scaler_stage::stepped) {
      throw error("loss_scaler: record_found_inf() called after step() in the same step; call update() first");
    }
    if (found_inf) block_.found_inf = block_.gradient_inf = 1;
    stage_ = scaler_stage::unscaled;
  }

  /// Clips the global L2 norm of unscaled buffers to max_norm. Every element of every buffer must have been
  /// unscaled in this step, by one unscale() call or several that together cover it (clipping a scaled
  /// gradient clips the wrong magnitude). A non-finite norm scales nothing and is
  /// recorded as an overflow, so the step is skipped. The report's reason is found_inf when unscale() or
  /// record_found_inf() saw inf/NaN (before or after this call), and non_finite_norm only when every check
  /// was finite and the norm alone is not (e.g. a buffer changed to inf after it was unscaled).
  clip_result clip_grad_norm(std::span<const std::span<float>> buffers, double max_norm) {
    if (stage_ == scaler_stage::stepped) throw error("loss_scaler: clip_grad_norm() called after step()");
    const std::vector<detail::byte_range> unscaled = detail::sorted_unscaled(unscaled_);
    for (const std::span<float> b : buffers) {
      if (!detail::covered(unscaled, detail::bytes_of(b))) {
        throw error("loss_scaler: clip_grad_norm() on a gradient buffer (" + std::to_string(b.size()) +
                    " elements) with elements not unscaled in this step; unscale(grads) first (every element, in one "
                    "buffer or several), or the clip acts on scaled magnitudes");
      }
    }
    const clip_result r = safeamp::clip_grad_norm(buffers, max_norm);
    block_.norm_before = r.norm_before;
    block_.norm_after = r.norm_after;
    if (!r.finite) block_.found_inf = block_.norm_non_finite = 1;
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
    if (!found_inf()) std::forward<Apply>(apply)();
    stage_ = scaler_stage::stepped;
    return make_step_report(block_, rule_.scale(), rule_.preview(found_inf()), true);
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
    const scale_transition t = rule_.preview(found_inf());
    std::int32_t k = 0;
    if constexpr (requires { rule_.config.max_overflows_at_min; }) k = rule_.config.max_overflows_at_min;
    finish_step(block_, rule_.scale(), t, stage_ == scaler_stage::stepped, k);
    rule_.commit(t);
    if constexpr (requires { rule_.state; }) block_.state = rule_.state;
    reset_step();
    if constexpr (requires { rule_.config.min_scale; }) {
      if (k > 0 && block_.floor_error_step == block_.last.step) {
        throw detail::floor_error(block_.last.overflows_at_min, rule_.config.min_scale, k);
      }
    }
    return block_.last;
  }

  [[nodiscard]] const step_report& last_report() const noexcept { return block_.last; }
  [[nodiscard]] const scaler_stats& stats() const noexcept { return block_.stats; }
  /// The scaler's memory: state, this step's flags and norms, last report, counters.
  [[nodiscard]] const scaler_block& block() const noexcept { return block_; }
  [[nodiscard]] const Rule& rule() const noexcept { return rule_; }
  [[nodiscard]] scaler_stage stage() const noexcept { return stage_; }
  /// Overflow recorded so far in this step.
  [[nodiscard]] bool found_inf() const noexcept { return block_.found_inf != 0; }

  // ---- checkpoints (dynamic rule only) ----------------------------------------------------------------
  /// Every config and state field and the counters. Only between steps (after update()).
  [[nodiscard]] scaler_checkpoint checkpoint() const requires std::same_as<Rule, dynamic_scale_rule> {
    if (stage_ != scaler_stage::ready)
      throw error("loss_scaler: checkpoint() in the middle of a step; call update() first");
    return scaler_checkpoint{
        .version = scaler_checkpoint_version, .config = rule_.config, .state = rule_.state, .stats = block_.stats};
  }
  /// Restores a checkpoint (validated first; on any error the scaler keeps its previous state).
  void restore(const scaler_checkpoint& c) requires std::same_as<Rule, dynamic_scale_rule> {
    if (stage_ != scaler_stage::ready)
      throw error("loss_scaler: restore() in the middle of a step; call update() first");
    validate(c);
    rule_.config = c.config;
    rule_.state = c.state;
    block_ = scaler_block{};  // no step in flight, no floor error from before the restore
    block_.state = c.state;
    block_.stats = c.stats;
  }
  [[nodiscard]] std::string save_json() const requires std::same_as<Rule, dynamic_scale_rule> {
    return to_json(checkpoint());
  }
  void load_json(std::string_view text) requires std::same_as<Rule, dynamic_scale_rule> {
    restore(checkpoint_from_json(text));
  }

 private:
  void reset_step() noexcept {
    stage_ = scaler_stage::ready;
    unscaled_.clear();
  }

  Rule rule_{};
  scaler_block block_ = detail::make_block(rule_);
  scaler_stage stage_ = scaler_stage::ready;
  std::vector<detail::byte_range> unscaled_;  // the buffers unscaled in this step, in call order
};

/// Dynamic loss scaler: construct from a scaler_config (validated) or a preset, e.g.
/// `loss_scaler s(scaler_presets::pytorch);`.
using loss_scaler = basic_loss_scaler<dynamic_scale_rule>;
/// Fixed scale: `static_loss_scaler s(static_scale_rule(1024.0f));`.
using static_loss_scaler = basic_loss_scaler<static_scale_rule>;
/// Scale 1 (bf16/fp32 policies); still skips non-finite steps.
using noop_loss_scaler = basic_loss_scaler<no_scale_rule>;

}  // namespace safeamp
