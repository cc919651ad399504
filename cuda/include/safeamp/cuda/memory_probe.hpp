// Device memory accounting: capacity and free bytes from the runtime, our own allocation counters with
// peak tracking, and a leak detector that flags live bytes growing step over step (the classic cause:
// retained tensors keeping buffers alive). The counters and the detector are plain host code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>

namespace safeamp::cuda {

/// Counts of our own device allocations (device_buffer goes through the process-wide instance). Safe to use from
/// several threads at once: every buffer of every thread (two GEMM engines, a user's own threads) counts into the
/// one process-wide instance, so each change and each read holds a lock.
class allocation_counters {
 public:
  void on_allocate(std::uint64_t bytes) noexcept {
    const std::lock_guard<std::mutex> hold(mutex_);
    live_bytes_ += bytes;
    ++allocations_;
    ++live_allocations_;
    if (live_bytes_ > peak_bytes_) peak_bytes_ = live_bytes_;
  }
  /// Returns false (and changes nothing) when more bytes or buffers are freed than are live: a
  /// double free or a free of a buffer we never counted.
  [[nodiscard]] bool on_free(std::uint64_t bytes) noexcept {
    const std::lock_guard<std::mutex> hold(mutex_);
    if (bytes > live_bytes_ || live_allocations_ == 0) return false;
    live_bytes_ -= bytes;
    --live_allocations_;
    ++frees_;
    return true;
  }
  void reset_peak() noexcept {
    const std::lock_guard<std::mutex> hold(mutex_);
    peak_bytes_ = live_bytes_;
  }

  [[nodiscard]] std::uint64_t live_bytes() const noexcept { return read(live_bytes_); }
  [[nodiscard]] std::uint64_t peak_bytes() const noexcept { return read(peak_bytes_); }
  [[nodiscard]] std::uint64_t live_allocations() const noexcept { return read(live_allocations_); }
  [[nodiscard]] std::uint64_t allocations() const noexcept { return read(allocations_); }
  [[nodiscard]] std::uint64_t frees() const noexcept { return read(frees_); }

 private:
  [[nodiscard]] std::uint64_t read(const std::uint64_t& field) const noexcept {
    const std::lock_guard<std::mutex> hold(mutex_);
    return field;
  }

  mutable std::mutex mutex_;
  std::uint64_t live_bytes_ = 0, peak_bytes_ = 0, live_allocations_ = 0, allocations_ = 0, frees_ = 0;
};

struct leak_detector_options {
  int window_steps = 4;               // flag after live bytes grew in this many consecutive steps
  std::uint64_t tolerance_bytes = 0;  // growth at or below this per step is not growth (allocator slack)
};

struct leak_verdict {
  bool leaking = false;
  int growing_steps = 0;           // consecutive steps with growth above tolerance
  std::uint64_t growth_bytes = 0;  // live bytes gained over those steps
  std::string message;             // empty unless leaking
};

/// Fed the live bytes at the end of every step (after the optimizer, when activations are freed): a
/// steady state is flat, a leak grows every step. Warm-up steps that allocate once are not flagged
/// because growth must continue for window_steps consecutive steps.
class leak_detector {
 public:
  explicit leak_detector(leak_detector_options options = {}) : options_(options) {}

  leak_verdict observe(std::int64_t step, std::uint64_t live_bytes) {
    if (has_last_ && live_bytes > last_ + options_.tolerance_bytes) {
      if (growing_ == 0) start_bytes_ = last_;
      ++growing_;
    } else {
      growing_ = 0;
    }
    last_ = live_bytes;
    has_last_ = true;
    leak_verdict v;
    v.growing_steps = growing_;
    v.growth_bytes = growing_ > 0 ? live_bytes - start_bytes_ : 0;
    v.leaking = growing_ >= options_.window_steps;
    if (v.leaking) {
      v.message = "live device bytes grew in each of the last " + std::to_string(growing_) + " steps (by " +
                  std::to_string(v.growth_bytes) + " bytes, up to step " + std::to_string(step) +
                  "): a retained tensor is probably keeping buffers alive";
    }
    return v;
  }

 private:
  leak_detector_options options_;
  std::uint64_t last_ = 0, start_bytes_ = 0;
  bool has_last_ = false;
  int growing_ = 0;
};

/// What the runtime reports for the current device (cudaMemGetInfo).
struct device_memory_info {
  std::uint64_t free_bytes = 0;
  std::uint64_t capacity_bytes = 0;
};
[[nodiscard]] device_memory_info query_device_memory();

/// The process-wide counters of device_buffer allocations.
[[nodiscard]] allocation_counters& device_allocations() noexcept;

/// Owning device allocation (cudaMalloc / cudaFree), counted in device_allocations().
class device_buffer {
 public:
  device_buffer() = default;
  explicit device_buffer(std::size_t bytes);
  ~device_buffer();
  device_buffer(device_buffer&& o) noexcept : data_(o.data_), bytes_(o.bytes_) {
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  device_buffer& operator=(device_buffer&& o) noexcept;
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;

  [[nodiscard]] void* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size_bytes() const noexcept { return bytes_; }
  template <class T>
  [[nodiscard]] T* as() const noexcept {
    return static_cast<T*>(data_);
  }

 private:
  void release() noexcept;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

/// Owning pinned host allocation (cudaMallocHost), for asynchronous device-to-host copies.
class pinned_buffer {
 public:
  pinned_buffer() = default;
  explicit pinned_buffer(std::size_t bytes);
  ~pinned_buffer();
  pinned_buffer(pinned_buffer&& o) noexcept : data_(o.data_), bytes_(o.bytes_) {
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  pinned_buffer& operator=(pinned_buffer&& o) noexcept;
  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;

  [[nodiscard]] void* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size_bytes() const noexcept { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace safeamp::cuda
