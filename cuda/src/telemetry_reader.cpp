// Pinned-memory, event-polled telemetry of the device scaler state.
#include "safeamp/cuda/telemetry_reader.hpp"

#include <cuda_runtime_api.h>

#include <string>

#include "check.hpp"
#include "safeamp/cuda/memory_probe.hpp"

namespace safeamp::cuda {

struct telemetry_reader::impl {
  std::int64_t every = 1;
  pinned_buffer host;
  cudaEvent_t landed = nullptr;
  bool in_flight = false;
  std::int64_t requested_at = 0;
  std::int64_t enqueued = 0, skipped = 0;
};

telemetry_reader::telemetry_reader(std::int64_t every_n_steps) : impl_(std::make_unique<impl>()) {
  if (every_n_steps < 1) throw error("telemetry every_n_steps", std::to_string(every_n_steps), ">= 1");
  impl_->every = every_n_steps;
  impl_->host = pinned_buffer(sizeof(device_amp_state));
  SAFEAMP_CUDA_CHECK(cudaEventCreateWithFlags(&impl_->landed, cudaEventDisableTiming));
}

telemetry_reader::~telemetry_reader() {
  if (impl_ && impl_->landed != nullptr) (void)cudaEventDestroy(impl_->landed);
}

void telemetry_reader::on_step(std::int64_t step, const device_amp_state* state, void* stream) {
  if (!snapshot_due(step, impl_->every)) return;
  if (impl_->in_flight) {
    const cudaError_t q = cudaEventQuery(impl_->landed);
    if (q == cudaErrorNotReady) {
      ++impl_->skipped;
      return;
    }
    SAFEAMP_CUDA_CHECK(q);
    // The previous snapshot landed but was not polled: it is replaced by the newer one.
  }
  const auto s = static_cast<cudaStream_t>(stream);
  SAFEAMP_CUDA_CHECK(cudaMemcpyAsync(impl_->host.data(), state, sizeof(device_amp_state), cudaMemcpyDeviceToHost, s));
  SAFEAMP_CUDA_CHECK(cudaEventRecord(impl_->landed, s));
  impl_->in_flight = true;
  impl_->requested_at = step;
  ++impl_->enqueued;
}

std::optional<amp_snapshot> telemetry_reader::poll() {
  if (!impl_->in_flight) return std::nullopt;
  const cudaError_t q = cudaEventQuery(impl_->landed);
  if (q == cudaErrorNotReady) return std::nullopt;
  SAFEAMP_CUDA_CHECK(q);
  impl_->in_flight = false;
  amp_snapshot snap;
  snap.requested_at_step = impl_->requested_at;
  snap.state = *static_cast<const device_amp_state*>(impl_->host.data());
  return snap;
}

std::int64_t telemetry_reader::copies_enqueued() const noexcept { return impl_->enqueued; }
std::int64_t telemetry_reader::copies_skipped_in_flight() const noexcept { return impl_->skipped; }

}  // namespace safeamp::cuda
