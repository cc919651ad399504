// CUDA-event stream timer.
#include "safeamp/cuda/timer.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>

#include "check.hpp"

namespace safeamp::cuda {

timing_result summarize(std::vector<double> seconds) {
  if (seconds.empty()) throw error("timing repeats", "0", ">= 1 measured run");
  for (const double s : seconds) {
    if (!(s > 0.0) || !std::isfinite(s)) {
      throw error("measured seconds", std::to_string(s), "a finite time > 0 (0 means the events were not ordered)");
    }
  }
  timing_result r;
  r.seconds = seconds;
  std::sort(seconds.begin(), seconds.end());
  const std::size_t n = seconds.size();
  r.median_seconds = n % 2 == 1 ? seconds[n / 2] : 0.5 * (seconds[n / 2 - 1] + seconds[n / 2]);
  r.min_seconds = seconds.front();
  r.max_seconds = seconds.back();
  return r;
}

struct stream_timer::impl {
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
};

stream_timer::stream_timer(void* stream) : impl_(std::make_unique<impl>()) {
  impl_->stream = static_cast<cudaStream_t>(stream);
  SAFEAMP_CUDA_CHECK(cudaEventCreate(&impl_->start));
  const cudaError_t status = cudaEventCreate(&impl_->stop);
  if (status != cudaSuccess) {
    (void)cudaEventDestroy(impl_->start);
    SAFEAMP_CUDA_CHECK(status);
  }
}

stream_timer::~stream_timer() {
  (void)cudaEventDestroy(impl_->start);
  (void)cudaEventDestroy(impl_->stop);
}

timing_result stream_timer::measure(const std::function<void()>& enqueue, timing_options options) {
  if (options.warmup < 0) throw error("timing warmup", std::to_string(options.warmup), ">= 0");
  if (options.repeats < 1) throw error("timing repeats", std::to_string(options.repeats), ">= 1");
  for (int i = 0; i < options.warmup; ++i) enqueue();
  SAFEAMP_CUDA_CHECK(cudaStreamSynchronize(impl_->stream));
  std::vector<double> seconds;
  seconds.reserve(static_cast<std::size_t>(options.repeats));
  for (int i = 0; i < options.repeats; ++i) {
    // An untimed lead-in run first, not waited for: the stream is busy with it while the host enqueues the timed
    // run, so the start event completes when the lead-in ends, with the timed run already queued behind it.
    // Recorded on an idle stream instead, the start event completes at once and the interval includes the host's
    // time to enqueue the run (cuBLASLt's call and the launch), understating the device's throughput.
    enqueue();
    SAFEAMP_CUDA_CHECK(cudaEventRecord(impl_->start, impl_->stream));
    enqueue();
    SAFEAMP_CUDA_CHECK(cudaEventRecord(impl_->stop, impl_->stream));
    SAFEAMP_CUDA_CHECK(cudaEventSynchronize(impl_->stop));  // read only a finished interval
    float ms = 0.0f;
    SAFEAMP_CUDA_CHECK(cudaEventElapsedTime(&ms, impl_->start, impl_->stop));
    seconds.push_back(static_cast<double>(ms) * 1e-3);
  }
  return summarize(std::move(seconds));
}

}  // namespace safeamp::cuda
