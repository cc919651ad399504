// The loss scaler on a GPU: the core basic_loss_scaler over device_memory, a deferred memory whose passes
// are kernels queued on one stream, on gradients in f32, f16 or bf16 (gradient_span), any number per call. The step
// only enqueues (unscale, clip, the predicated optimizer, update); the scaler_block (found_inf, scale, trackers,
// counters, last report) stays in device memory and the host reads it lazily: stats(), last_report(), scale(),
// checkpoint() each wait for the stream once. Checkpoints are the host scaler's, bit for bit, in both directions.
//
//   safeamp::cuda::device_loss_scaler scaler(safeamp::scaler_presets::pytorch, safeamp::cuda::device_memory(stream));
//   per step: backward of scale * loss, the scale read on the device from scaler.scale_in_memory();
//             scaler.unscale(grads); scaler.clip_grad_norm(grads, 1.0);   // std::span<const gradient_span>
//             scaler.step([&] { sgd_momentum_step(w, g, v, opt, scaler.block_in_memory(), stream); });
//             scaler.update();
//   every N steps (outside the step): scaler.stats(), scaler.save_json().
#pragma once

#include <cstdint>
#include <span>
#include <utility>

#include "safeamp/cuda/amp_ops.hpp"
#include "safeamp/cuda/memory_probe.hpp"
#include "safeamp/scaling/deferred_loss_scaler.hpp"

namespace safeamp::cuda {

/// The device memory of one scaler: its scaler_block, the norm scratch (norm_scratch_doubles, whatever the
/// number of buffers) and a pinned mirror for reads, all used on one stream (a cudaStream_t as void*;
/// nullptr = the default stream). Each pass is an NVTX range ("safeamp unscale", "safeamp clip", ...) on the
/// host timeline (nvtx.hpp). Move-only.
class device_memory {
 public:
  using buffer = gradient_span;

  /// Allocates nothing: the block, the scratch and the pinned mirror are allocated on the current device by
  /// the first write() (the scaler's constructor, after its config is validated; cuda_error on failure).
  explicit device_memory(void* stream = nullptr);

  [[nodiscard]] static std::pair<std::uintptr_t, std::uintptr_t> address(const gradient_span& b) noexcept {
    const auto p = reinterpret_cast<std::uintptr_t>(b.data);
    return {p, p + b.elements * static_cast<std::uint64_t>(dtype_bytes(b.type))};
  }
  void write(const scaler_block& value);
  void unscale(std::span<const gradient_span> buffers);
  void record_found_inf(const std::int32_t* flag);
  void clip(std::span<const gradient_span> buffers, double max_norm);
  void advance(const scaler_config& cfg, bool stepped);
  /// Copies the block into pinned memory and waits for the stream: the one host wait.
  [[nodiscard]] scaler_block read();
  /// The block in device memory (nullptr before the first write).
  [[nodiscard]] scaler_block* block() const noexcept { return block_.as<scaler_block>(); }
  [[nodiscard]] void* stream() const noexcept { return stream_; }
  /// read() calls so far (each one host synchronisation).
  [[nodiscard]] std::int64_t reads() const noexcept { return reads_; }

 private:
  device_buffer block_;
  device_buffer scratch_;
  pinned_buffer mirror_;
  void* stream_ = nullptr;
  std::int64_t reads_ = 0;
};

/// The dynamic loss scaler with its memory on the device (the same template as safeamp::loss_scaler).
using device_loss_scaler = basic_loss_scaler<dynamic_scale_rule, device_memory>;
static_assert(deferred_memory<device_memory>);

}  // namespace safeamp::cuda
