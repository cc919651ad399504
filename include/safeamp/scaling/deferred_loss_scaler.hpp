// The same loss_scaler over a deferred memory (a GPU's): basic_loss_scaler<dynamic_scale_rule, Memory>, where
// Memory keeps the scaler_block and the gradients in its own memory and queues every pass (a CUDA stream). The
// step only enqueues: the found_inf flag, the scale and the counters stay in that memory, and the host reads them
// lazily (stats, last_report, checkpoint), each read waiting for the work queued so far. The config is validated
// once, at construction; max_overflows_at_min raises safeamp::error at the first read after the step that hit it.
#pragma once

#include <concepts>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "safeamp/error.hpp"
#include "safeamp/scaling/loss_scaler.hpp"
#include "safeamp/scaling/scaler_block.hpp"
#include "safeamp/scaling/scaler_checkpoint.hpp"

namespace safeamp {

/// A memory whose passes are queued: write/unscale/record_found_inf/clip/advance enqueue work and return at
/// once; read() waits for everything queued so far and returns the block. address() gives a buffer's byte
/// range (for the double-unscale check, done on the host without reading the memory).
template <class M>
concept deferred_memory = requires(M m, const typename M::buffer& b, std::span<const typename M::buffer> bs,
                                   const scaler_config& cfg, const scaler_block& block, const std::int32_t* flag) {
  typename M::buffer;
  { M::address(b) } -> std::same_as<std::pair<std::uintptr_t, std::uintptr_t>>;
  m.write(block);            // the block becomes `block` (after earlier work)
  m.unscale(bs);             // every buffer *= inverse_scale(block.state.scale); raise found_inf, gradient_inf
  m.record_found_inf(flag);  // OR a flag kept in that memory (an all-reduced flag) into found_inf
  m.clip(bs, 1.0);           // global norm into norm_before/after; clip; a non-finite norm raises found_inf
  m.advance(cfg, true);      // advance_step(cfg, block, stepped) in that memory
  { m.read() } -> std::same_as<scaler_block>;    // waits for the queued work
  { m.block() } -> std::same_as<scaler_block*>;  // the block's address in that memory (for kernels)
};

template <deferred_memory Memory>
class basic_loss_scaler<dynamic_scale_rule, Memory> {
 public:
  using buffer = typename Memory::buffer;

  /// Validates `cfg` (safeamp::error) and writes the initial block into the memory.
  explicit basic_loss_scaler(const scaler_config& cfg, Memory memory = Memory{})
      : rule_(cfg), memory_(std::move(memory)) {
    memory_.write(initial_block(cfg));
  }

  // ---- the step: enqueue only, never waits ---------------------------------------------------------------
  /// Unscales the buffers in place and raises the flag in the memory on any inf/NaN result.
  void unscale(std::span<const buffer> grads) {
    if (stage_ == scaler_stage::stepped) {
      throw error("loss_scaler: unscale() called after step() in the same step; call update() first");
    }
    for (const buffer& g : grads) {
      const auto [g0, g1] = Memory::address(g);
      for (const detail::byte_range& b : unscaled_) {
        if (detail::overlap({g0, g1}, b)) {
          throw error("loss_scaler: unscale() called twice on the same gradient buffer (" + std::to_string(g1 - g0) +
                      " bytes) in one step; it would be divided by the scale twice");
        }
      }
      unscaled_.emplace_back(g0, g1);
    }
    memory_.unscale(grads);
    stage_ = scaler_stage::unscaled;
  }
  void unscale(const buffer& g) { unscale(std::span<const buffer>(&g, 1)); }

  /// ORs a flag kept in the scaler's memory (e.g. found_inf all-reduced with MAX over ranks) into found_inf.
  void record_found_inf(const std::int32_t* flag) {
    if (stage_ == scaler_stage::stepped) {
      throw error("loss_scaler: record_found_inf() called after step() in the same step; call update() first");
    }
    memory_.record_found_inf(flag);
    stage_ = scaler_stage::unscaled;
  }

  /// Clips the global L2 norm of unscaled buffers to max_norm (> 0); a non-finite norm skips the step. Every
  /// byte of every buffer must have been unscaled in this step (by one unscale() buffer or several that meet).
  void clip_grad_norm(std::span<const buffer> grads, double max_norm) {
    if (stage_ == scaler_stage::stepped) throw error("loss_scaler: clip_grad_norm() called after step()");
    if (!(max_norm > 0.0) || !(max_norm <= std::numeric_limits<double>::max())) {
      throw error("clip max_norm", detail::number_text(max_norm), "a finite number > 0");
    }
    const std::vector<detail::byte_range> unscaled = detail::sorted_unscaled(unscaled_);
    for (const buffer& g : grads) {
      const auto [g0, g1] = Memory::address(g);
      if (!detail::covered(unscaled, {g0, g1})) {
        throw error("loss_scaler: clip_grad_norm() on a gradient buffer (" + std::to_string(g1 - g0) +
                    " bytes) with bytes not unscaled in this step; unscale(grads) first (every byte, in one buffer "
                    "or several), or the clip acts on scaled magnitudes");
      }
    }
    memory_.clip(grads, max_norm);
  }

  /// Enqueues apply(). Whatever apply() enqueues must be predicated on found_inf_flag() (the optimizer kernels
  /// of safeamp::cuda are): the host cannot know yet whether the step is skipped, and does not wait to find out.
  template <class Apply>
  void step(Apply&& apply) {
    if (stage_ == scaler_stage::stepped) throw error("loss_scaler: step() called twice; call update() between steps");
    if (stage_ == scaler_stage::ready) {
      throw error(
          "loss_scaler: step() with no inf check recorded in this step; call unscale(grads) for every "
          "gradient buffer (or record_found_inf) first");
    }
    std::forward<Apply>(apply)();
    stage_ = scaler_stage::stepped;
  }

  /// Enqueues the update (transition, report, counters) and starts the next step.
  void update() {
    if (stage_ == scaler_stage::ready) {
      throw error(
          "loss_scaler: update() with no inf check recorded since the last update(); call unscale(grads) "
          "and step(apply) first");
    }
    memory_.advance(rule_.config, stage_ == scaler_stage::stepped);
    stage_ = scaler_stage::ready;
    unscaled_.clear();
    ++steps_enqueued_;
  }

  // ---- addresses in the scaler's memory, for the step's kernels ---------------------------------------------
  [[nodiscard]] scaler_block* block_in_memory() { return memory_.block(); }
  [[nodiscard]] const std::int32_t* found_inf_flag() { return &memory_.block()->found_inf; }
  [[nodiscard]] const float* scale_in_memory() { return &memory_.block()->state.scale; }

  // ---- lazy reads: each waits for the work queued so far (never call one inside the step) -------------------
  /// The whole block. Throws safeamp::error when a step since the last read hit max_overflows_at_min.
  [[nodiscard]] scaler_block read() {
    const scaler_block b = memory_.read();
    if (b.floor_error_step > reported_floor_step_) {
      reported_floor_step_ = b.floor_error_step;
      const std::int32_t k = rule_.config.max_overflows_at_min;
      const error e = detail::floor_error(b.last.step == b.floor_error_step ? b.last.overflows_at_min : k,
                                          rule_.config.min_scale, k);
      throw error(std::string(e.what()) + "; raised at this read for step " + std::to_string(b.floor_error_step));
    }
    return b;
  }
  [[nodiscard]] float scale() { return read().state.scale; }
  [[nodiscard]] scaler_stats stats() { return read().stats; }
  [[nodiscard]] step_report last_report() { return read().last; }

  [[nodiscard]] scaler_checkpoint checkpoint() {
    if (stage_ != scaler_stage::ready)
      throw error("loss_scaler: checkpoint() in the middle of a step; call update() first");
    const scaler_block b = read();
    return scaler_checkpoint{
        .version = scaler_checkpoint_version, .config = rule_.config, .state = b.state, .stats = b.stats};
  }
  /// Restores a checkpoint (validated first; on any error the scaler keeps its previous state).
  void restore(const scaler_checkpoint& c) {
    if (stage_ != scaler_stage::ready)
      throw error("loss_scaler: restore() in the middle of a step; call update() first");
    validate(c);
    scaler_block b{};
    b.state = c.state;
    b.stats = c.stats;
    reported_floor_step_ = -1;
    memory_.write(b);
    rule_.config = c.config;
    rule_.state = c.state;
  }
  [[nodiscard]] std::string save_json() { return to_json(checkpoint()); }
  void load_json(std::string_view text) { restore(checkpoint_from_json(text)); }

  [[nodiscard]] const scaler_config& config() const noexcept { return rule_.config; }
  [[nodiscard]] scaler_stage stage() const noexcept { return stage_; }
  /// update() calls so far (a host counter: no read).
  [[nodiscard]] std::int64_t steps_enqueued() const noexcept { return steps_enqueued_; }
  [[nodiscard]] Memory& memory() noexcept { return memory_; }

 private:
  dynamic_scale_rule rule_;  // the validated config; its state is only the initial or restored one
  Memory memory_;
  scaler_stage stage_ = scaler_stage::ready;
  std::vector<detail::byte_range> unscaled_;
  std::int64_t steps_enqueued_ = 0;
  std::int64_t reported_floor_step_ = -1;
};

}  // namespace safeamp
