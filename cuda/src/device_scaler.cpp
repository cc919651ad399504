// device_memory: the passes of the device loss scaler as kernels on one stream (amp_kernels.cu), each an NVTX
// range on the host timeline, and the one host wait, read().
#include "safeamp/cuda/device_scaler.hpp"

#include <cuda_runtime_api.h>

#include "check.hpp"
#include "safeamp/cuda/nvtx.hpp"

namespace safeamp::cuda {

device_memory::device_memory(void* stream) : stream_(stream) {}

void device_memory::write(const scaler_block& value) {
  if (block_.data() == nullptr) {  // first write (the scaler's constructor, after validating its config)
    block_ = device_buffer(sizeof(scaler_block));
    scratch_ = device_buffer(norm_scratch_doubles * sizeof(double));
    mirror_ = pinned_buffer(sizeof(scaler_block));
  }
  write_block(block(), value, stream_);
}

void device_memory::unscale(std::span<const gradient_span> buffers) {
  const nvtx_range range("safeamp unscale");
  multi_tensor_unscale(buffers, block(), stream_);
}

void device_memory::record_found_inf(const std::int32_t* flag) {
  if (flag == nullptr) throw error("record_found_inf flag", "nullptr", "a device pointer to an int32 flag");
  const nvtx_range range("safeamp record_found_inf");
  cuda::record_found_inf(block(), flag, stream_);
}

void device_memory::clip(std::span<const gradient_span> buffers, double max_norm) {
  const nvtx_range range("safeamp clip");
  global_norm_and_clip(buffers, max_norm, scratch_.as<double>(), block(), stream_);
}

void device_memory::advance(const scaler_config& cfg, bool stepped) {
  const nvtx_range range("safeamp scaler update");
  advance_scaler(cfg, block(), stepped, stream_);
}

scaler_block device_memory::read() {
  const nvtx_range range("safeamp scaler read (host wait)");
  const auto s = static_cast<cudaStream_t>(stream_);
  SAFEAMP_CUDA_CHECK(cudaMemcpyAsync(mirror_.data(), block(), sizeof(scaler_block), cudaMemcpyDeviceToHost, s));
  SAFEAMP_CUDA_CHECK(cudaStreamSynchronize(s));
  ++reads_;
  return *static_cast<const scaler_block*>(mirror_.data());
}

}  // namespace safeamp::cuda
