// A deferred memory on the host, for testing the device scaler's code path without a GPU: it queues every pass
// as a CUDA stream would and runs the queue only when the scaler reads (read() is the one wait, counted). The
// passes do what the device kernels of safeamp::cuda do, element for element, on host spans.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "safeamp/scaling/grad_clip.hpp"
#include "safeamp/scaling/scaler_block.hpp"
#include "safeamp/scaling/unscale.hpp"

namespace safeamp::testing {

class queued_memory {
 public:
  using buffer = std::span<float>;

  [[nodiscard]] static std::pair<std::uintptr_t, std::uintptr_t> address(const buffer& b) noexcept {
    const auto p = reinterpret_cast<std::uintptr_t>(b.data());
    return {p, p + b.size() * sizeof(float)};
  }
  void write(const scaler_block& b) {
    queue_.push_back([b](scaler_block& k) { k = b; });
  }
  void unscale(std::span<const buffer> bs) {
    std::vector<buffer> copy(bs.begin(), bs.end());
    queue_.push_back([copy](scaler_block& k) {
      const float inv = inverse_scale(k.state.scale);  // the scale of this point in the queue
      for (const buffer& g : copy) {
        if (unscale_and_check(g, inv)) k.found_inf = k.gradient_inf = 1;
      }
    });
  }
  void record_found_inf(const std::int32_t* flag) {
    queue_.push_back([flag](scaler_block& k) {
      if (*flag != 0) k.found_inf = k.gradient_inf = 1;
    });
  }
  void clip(std::span<const buffer> bs, double max_norm) {
    std::vector<buffer> copy(bs.begin(), bs.end());
    queue_.push_back([copy, max_norm](scaler_block& k) {
      const clip_result r = clip_grad_norm(std::span<const buffer>(copy), max_norm);
      k.norm_before = r.norm_before;
      k.norm_after = r.norm_after;
      if (!r.finite) k.found_inf = k.norm_non_finite = 1;
    });
  }
  void advance(const scaler_config& cfg, bool stepped) {
    queue_.push_back([cfg, stepped](scaler_block& k) { advance_step(cfg, k, stepped); });
  }
  /// Runs what the "apply" of a step enqueued: fn(found_inf) at its point in the queue (a predicated kernel).
  void enqueue_predicated(std::function<void(bool)> fn) {
    queue_.push_back([fn = std::move(fn)](scaler_block& k) { fn(k.found_inf != 0); });
  }
  [[nodiscard]] scaler_block read() {
    ++waits_;
    run();
    return block_;
  }
  [[nodiscard]] scaler_block* block() noexcept { return &block_; }

  [[nodiscard]] std::int64_t waits() const noexcept { return waits_; }
  [[nodiscard]] std::size_t queued() const noexcept { return queue_.size(); }

 private:
  void run() {
    for (auto& f : queue_) f(block_);
    queue_.clear();
  }
  std::vector<std::function<void(scaler_block&)>> queue_;  // no captured `this`: the memory may move
  scaler_block block_{};
  std::int64_t waits_ = 0;
};

}  // namespace safeamp::testing
