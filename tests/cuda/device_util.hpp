// Helpers for the device tests: checked copies and a typed device array.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

#include "safeamp/cuda/memory_probe.hpp"
#include "safeamp/cuda/status.hpp"

#define TEST_CUDA_CHECK(call)                                                                                          \
  ::safeamp::cuda::check_status(::safeamp::cuda::status_source::cuda_runtime, static_cast<int>(call), #call, __FILE__, \
                                __LINE__)

namespace safeamp::cuda::testing {

template <class T>
class device_array {
 public:
  explicit device_array(std::size_t n) : buf_(n * sizeof(T)), n_(n) {}
  explicit device_array(const std::vector<T>& host) : device_array(host.size()) { upload(host); }
  void upload(const std::vector<T>& host) {
    TEST_CUDA_CHECK(cudaMemcpy(buf_.data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  [[nodiscard]] std::vector<T> download() const {
    std::vector<T> host(n_);
    TEST_CUDA_CHECK(cudaMemcpy(host.data(), buf_.data(), n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  [[nodiscard]] T* data() const noexcept { return buf_.as<T>(); }
  [[nodiscard]] std::size_t size() const noexcept { return n_; }

 private:
  device_buffer buf_;
  std::size_t n_;
};

}  // namespace safeamp::cuda::testing
