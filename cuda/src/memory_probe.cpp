// Runtime memory queries and the counted device/pinned allocations.
#include "safeamp/cuda/memory_probe.hpp"

#include <cuda_runtime_api.h>

#include "check.hpp"

namespace safeamp::cuda {

device_memory_info query_device_memory() {
  std::size_t free_bytes = 0, total_bytes = 0;
  SAFEAMP_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return device_memory_info{free_bytes, total_bytes};
}

allocation_counters& device_allocations() noexcept {
  static allocation_counters counters;
  return counters;
}

device_buffer::device_buffer(std::size_t bytes) {
  if (bytes == 0) return;
  SAFEAMP_CUDA_CHECK(cudaMalloc(&data_, bytes));
  bytes_ = bytes;
  device_allocations().on_allocate(bytes);
}

void device_buffer::release() noexcept {
  if (data_ == nullptr) return;
  (void)cudaFree(data_);  // a destructor cannot throw; a failed free leaves the counters accurate anyway
  (void)device_allocations().on_free(bytes_);
  data_ = nullptr;
  bytes_ = 0;
}

device_buffer::~device_buffer() { release(); }

device_buffer& device_buffer::operator=(device_buffer&& o) noexcept {
  if (this != &o) {
    release();
    data_ = o.data_;
    bytes_ = o.bytes_;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

pinned_buffer::pinned_buffer(std::size_t bytes) {
  if (bytes == 0) return;
  SAFEAMP_CUDA_CHECK(cudaMallocHost(&data_, bytes));
  bytes_ = bytes;
}

pinned_buffer::~pinned_buffer() {
  if (data_ != nullptr) (void)cudaFreeHost(data_);
}

pinned_buffer& pinned_buffer::operator=(pinned_buffer&& o) noexcept {
  if (this != &o) {
    if (data_ != nullptr) (void)cudaFreeHost(data_);
    data_ = o.data_;
    bytes_ = o.bytes_;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

}  // namespace safeamp::cuda
