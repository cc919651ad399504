// Device-side entry points that run the core headers' code unchanged on the GPU: this file is also the
// build-time proof that every core header compiles under nvcc.
#include <algorithm>
#include <cstdint>

#include "safeamp/cuda/core_kernels.hpp"
#include "safeamp/format/round_kernel.hpp"
#include "safeamp/safeamp.hpp"
#include "safeamp/scaling/deferred_loss_scaler.hpp"
#include "safeamp/scaling/delayed_scaling_step.hpp"
#include "safeamp/scaling/scaler_block.hpp"

namespace safeamp::cuda::detail {

__device__ inline std::uint32_t random_word(const round_options& opt, const philox_key& key, std::uint64_t i) {
  return opt.mode == rounding::stochastic ? stochastic_bits(key.seed, key.stream, key.offset + i) : 0u;
}

__global__ void round_kernel(format_spec f, round_options opt, philox_key key, const float* in, float* out,
                             std::uint64_t n, const std::int32_t* skip_if) {
  if (skip_if != nullptr && *skip_if != 0) return;  // a skipped step writes nothing
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = round_to(f, in[i], opt, random_word(opt, key, i));
  }
}

// The same branch-free per-element routine (and counter definitions) as round_span on the CPU.
template <rounding R>
__global__ void round_counted_kernel(format_spec f, round_options opt, philox_key key, const float* in, float* out,
                                     std::uint64_t n, unsigned long long* counters) {
  safeamp::detail::local_counts c;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const std::uint32_t rnd = random_word(opt, key, i);
    safeamp::detail::round_floats<R>(f, in + i, out + i, 1, opt.on_overflow, opt.flush_subnormals, &rnd, c);
  }
  // Counts are rare (most casts count nothing), so one atomic per nonzero counter per thread is cheap.
  if (c.overflow) atomicAdd(&counters[0], static_cast<unsigned long long>(c.overflow));
  if (c.underflow) atomicAdd(&counters[1], static_cast<unsigned long long>(c.underflow));
  if (c.subnormal) atomicAdd(&counters[2], static_cast<unsigned long long>(c.subnormal));
  if (c.nan) atomicAdd(&counters[3], static_cast<unsigned long long>(c.nan));
  if (c.infinity) atomicAdd(&counters[4], static_cast<unsigned long long>(c.infinity));
}

__global__ void encode16_kernel(format_spec f, round_options opt, philox_key key, const float* in, std::uint16_t* out,
                                std::uint64_t n, const std::int32_t* skip_if) {
  if (skip_if != nullptr && *skip_if != 0) return;  // a skipped step writes nothing
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = static_cast<std::uint16_t>(encode(f, in[i], opt, random_word(opt, key, i)));
  }
}

constexpr unsigned cast_threads = 256;

unsigned cast_blocks(std::uint64_t n) {
  constexpr std::uint64_t max_blocks = 4096;
  return static_cast<unsigned>(std::max<std::uint64_t>(1, std::min((n + cast_threads - 1) / cast_threads, max_blocks)));
}

}  // namespace safeamp::cuda::detail

namespace safeamp::cuda {

int launch_round(format_spec f, round_options opt, philox_key key, const float* in, float* out, std::uint64_t n,
                 void* stream) {
  if (n == 0) return 0;
  detail::round_kernel<<<detail::cast_blocks(n), detail::cast_threads, 0, static_cast<cudaStream_t>(stream)>>>(
      f, opt, key, in, out, n, nullptr);
  return static_cast<int>(cudaGetLastError());
}

int launch_round_unless(const std::int32_t* skip_if, format_spec f, round_options opt, philox_key key, const float* in,
                        float* out, std::uint64_t n, void* stream) {
  if (n == 0) return 0;
  if (skip_if == nullptr) return static_cast<int>(cudaErrorInvalidValue);
  detail::round_kernel<<<detail::cast_blocks(n), detail::cast_threads, 0, static_cast<cudaStream_t>(stream)>>>(
      f, opt, key, in, out, n, skip_if);
  return static_cast<int>(cudaGetLastError());
}

int launch_round_counted(format_spec f, round_options opt, philox_key key, const float* in, float* out, std::uint64_t n,
                         unsigned long long* counters, void* stream) {
  if (n == 0) return 0;
  const auto s = static_cast<cudaStream_t>(stream);
  const unsigned blocks = detail::cast_blocks(n);
  switch (opt.mode) {
    case rounding::nearest_even:
      detail::round_counted_kernel<rounding::nearest_even>
          <<<blocks, detail::cast_threads, 0, s>>>(f, opt, key, in, out, n, counters);
      break;
    case rounding::toward_zero:
      detail::round_counted_kernel<rounding::toward_zero>
          <<<blocks, detail::cast_threads, 0, s>>>(f, opt, key, in, out, n, counters);
      break;
    case rounding::toward_pos_inf:
      detail::round_counted_kernel<rounding::toward_pos_inf>
          <<<blocks, detail::cast_threads, 0, s>>>(f, opt, key, in, out, n, counters);
      break;
    case rounding::toward_neg_inf:
      detail::round_counted_kernel<rounding::toward_neg_inf>
          <<<blocks, detail::cast_threads, 0, s>>>(f, opt, key, in, out, n, counters);
      break;
    case rounding::stochastic:
      detail::round_counted_kernel<rounding::stochastic>
          <<<blocks, detail::cast_threads, 0, s>>>(f, opt, key, in, out, n, counters);
      break;
  }
  return static_cast<int>(cudaGetLastError());
}

int launch_encode16(format_spec f, round_options opt, philox_key key, const float* in, std::uint16_t* out,
                    std::uint64_t n, void* stream) {
  if (n == 0) return 0;
  detail::encode16_kernel<<<detail::cast_blocks(n), detail::cast_threads, 0, static_cast<cudaStream_t>(stream)>>>(
      f, opt, key, in, out, n, nullptr);
  return static_cast<int>(cudaGetLastError());
}

int launch_encode16_unless(const std::int32_t* skip_if, format_spec f, round_options opt, philox_key key,
                           const float* in, std::uint16_t* out, std::uint64_t n, void* stream) {
  if (n == 0) return 0;
  if (skip_if == nullptr) return static_cast<int>(cudaErrorInvalidValue);
  detail::encode16_kernel<<<detail::cast_blocks(n), detail::cast_threads, 0, static_cast<cudaStream_t>(stream)>>>(
      f, opt, key, in, out, n, skip_if);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace safeamp::cuda
