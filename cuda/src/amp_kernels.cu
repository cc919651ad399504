// Device kernels of the scaler path on a scaler_block in device memory: multi-tensor unscale with the block's
// found_inf flag, loss scaling, the global norm and clip (gradients in f32, f16 or bf16; lists of any length,
// cut into launch groups), the single-thread advance (the core advance_step, unchanged), SGD and AdamW
// predicated on the flag.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "check.hpp"
#include "norm_plan.hpp"
#include "safeamp/cuda/amp_ops.hpp"
#include "safeamp/error.hpp"
#include "safeamp/format/round.hpp"
#include "safeamp/scaling/scaler_block.hpp"
#include "safeamp/scaling/unscale.hpp"
#include "safeamp/scaling/update_scale.hpp"
#include "tensor_groups.hpp"

namespace safeamp::cuda {
namespace detail {

inline constexpr unsigned unscale_threads = 512;

// The buffers of one launch (a kernel argument: 64 x 17 bytes + 4, well inside the 4 KiB limit).
struct tensor_list {
  void* data[max_tensors_per_launch];
  std::uint64_t elements[max_tensors_per_launch];
  device_dtype type[max_tensors_per_launch];
  int count;
};

tensor_list make_list(std::span<const gradient_span> buffers, std::span<const std::size_t> group,
                      std::uint64_t& largest) {
  tensor_list list{};
  largest = 0;
  for (const std::size_t i : group) {
    list.data[list.count] = buffers[i].data;
    list.elements[list.count] = buffers[i].elements;
    list.type[list.count] = buffers[i].type;
    largest = std::max(largest, buffers[i].elements);
    ++list.count;
  }
  return list;
}

// Element i of a gradient buffer as a float (a 16-bit code decoded by the core routine).
__device__ inline float load_element(const void* p, std::uint64_t i, device_dtype t) {
  if (t == device_dtype::f16) return safeamp::decode<safeamp::fp16>(static_cast<const std::uint16_t*>(p)[i]);
  if (t == device_dtype::bf16) return safeamp::decode<safeamp::bf16>(static_cast<const std::uint16_t*>(p)[i]);
  return static_cast<const float*>(p)[i];
}

// Stores v into element i rounded to the buffer's type (the core routine: nearest even, IEEE overflow to inf)
// and returns the value stored, so a check sees what the buffer now holds.
__device__ inline float store_element(void* p, std::uint64_t i, device_dtype t, float v) {
  if (t == device_dtype::f16) {
    const auto code = static_cast<std::uint16_t>(safeamp::encode<safeamp::fp16>(v));
    static_cast<std::uint16_t*>(p)[i] = code;
    return safeamp::decode<safeamp::fp16>(code);
  }
  if (t == device_dtype::bf16) {
    const auto code = static_cast<std::uint16_t>(safeamp::encode<safeamp::bf16>(v));
    static_cast<std::uint16_t*>(p)[i] = code;
    return safeamp::decode<safeamp::bf16>(code);
  }
  static_cast<float*>(p)[i] = v;
  return v;
}

// Each block walks every tensor of the list with a grid-stride loop: fp32 four floats at a time where the
// pointer is 16-byte aligned, 16-bit types element by element. The flag is raised once per block that saw a
// non-finite result.
__global__ void unscale_kernel(tensor_list list, scaler_block* state) {
  const float inv = safeamp::inverse_scale(state->state.scale);
  std::uint32_t bad = 0;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  const std::uint64_t first = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int t = 0; t < list.count; ++t) {
    void* const p = list.data[t];
    const std::uint64_t n = list.elements[t];
    const device_dtype type = list.type[t];
    if (type != device_dtype::f32) {
      for (std::uint64_t i = first; i < n; i += stride) {
        bad |= safeamp::detail::non_finite_bit(store_element(p, i, type, load_element(p, i, type) * inv));
      }
      continue;
    }
    float* const pf = static_cast<float*>(p);
    const std::uint64_t vec = (reinterpret_cast<std::uintptr_t>(pf) % 16 == 0) ? n / 4 : 0;
    float4* const p4 = reinterpret_cast<float4*>(pf);
    for (std::uint64_t i = first; i < vec; i += stride) {
      float4 v = p4[i];
      v.x *= inv;
      v.y *= inv;
      v.z *= inv;
      v.w *= inv;
      p4[i] = v;
      bad |= safeamp::detail::non_finite_bit(v.x) | safeamp::detail::non_finite_bit(v.y) |
             safeamp::detail::non_finite_bit(v.z) | safeamp::detail::non_finite_bit(v.w);
    }
    for (std::uint64_t i = 4 * vec + first; i < n; i += stride) {
      const float y = pf[i] * inv;
      pf[i] = y;
      bad |= safeamp::detail::non_finite_bit(y);
    }
  }
  if (__syncthreads_or(static_cast<int>(bad)) && threadIdx.x == 0) {
    atomicOr(&state->found_inf, 1);
    atomicOr(&state->gradient_inf, 1);
  }
}

__global__ void write_block_kernel(scaler_block* state, scaler_block value) { *state = value; }

__global__ void record_flag_kernel(scaler_block* state, const std::int32_t* flag) {
  if (*flag != 0) {
    state->found_inf = 1;
    state->gradient_inf = 1;
  }
}

__global__ void scale_loss_kernel(float* p, std::uint64_t n, const scaler_block* state) {
  const float s = state->state.scale;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    p[i] *= s;
  }
}

__global__ void advance_kernel(scaler_config cfg, scaler_block* state, bool stepped) {
  safeamp::advance_step(cfg, *state, stepped);
}

__global__ void copy_report_kernel(const scaler_block* state, step_report* report) { *report = state->last; }

// Where the running sum of squares lives in the scratch: after the partial sums of one group's parts.
constexpr std::uint64_t norm_running_sum = max_tensors_per_launch * norm_max_parts;

// Where each buffer's parts start in a launch's run of parts (norm_plan.hpp's partition): buffer t of the list has
// parts begin[t] .. begin[t + 1] - 1, its partial sums partial[begin[t]] ...
struct norm_part_list {
  std::uint32_t begin[max_tensors_per_launch + 1];
};

norm_part_list make_part_list(const tensor_list& list) {
  norm_part_list parts{};
  for (int t = 0; t < list.count; ++t) {
    parts.begin[t + 1] = parts.begin[t] + static_cast<std::uint32_t>(norm_parts(list.elements[t]));
  }
  return parts;
}

// The lanes' sums of one block meet pairwise in shared memory (s[j] += s[j + half], half = 128, ..., 1), the order of
// norm_lane_tree_sum; returns the total to thread 0 (0 to the others). Every thread of the block calls it; the next
// call may follow at once: after the last barrier only thread 0 reads s, and only s[0], which only it writes.
__device__ inline double block_tree_sum(double* s, double lane_sum) {
  s[threadIdx.x] = lane_sum;
  __syncthreads();
  for (unsigned half = norm_threads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) s[threadIdx.x] = __dadd_rn(s[threadIdx.x], s[threadIdx.x + half]);
    __syncthreads();
  }
  return threadIdx.x == 0 ? s[0] : 0.0;
}

// Sums of squares in double, part by part: block b makes the parts b, b + gridDim.x, ... of the list's run of parts
// (how many blocks there are changes who makes a part, never its sum). Lane j of part p of buffer t (P parts) adds
// the squares of elements p * 256 + j + k * 256 P in order; the part's sum goes to partial[begin[t] + p].
__global__ void sum_squares_kernel(tensor_list list, norm_part_list parts, double* partial) {
  __shared__ double s[norm_threads];
  const std::uint32_t total = parts.begin[list.count];
  int t = 0;
  for (std::uint32_t g = blockIdx.x; g < total; g += gridDim.x) {
    while (parts.begin[t + 1] <= g) ++t;  // g only grows, so t does too
    const std::uint64_t part = g - parts.begin[t];
    const std::uint64_t stride = static_cast<std::uint64_t>(parts.begin[t + 1] - parts.begin[t]) * norm_threads;
    const void* const p = list.data[t];
    const std::uint64_t n = list.elements[t];
    const device_dtype type = list.type[t];
    double acc = 0.0;
    for (std::uint64_t i = part * norm_threads + threadIdx.x; i < n; i += stride) {
      const double v = static_cast<double>(load_element(p, i, type));
      acc = __dadd_rn(acc, __dmul_rn(v, v));
    }
    const double sum = block_tree_sum(s, acc);
    if (threadIdx.x == 0) partial[g] = sum;
  }
}

// One block of 256 threads adds each buffer's part sums (lane j: parts j, j + 256, ... in order, then the tree) and
// thread 0 adds the buffers' sums, in list order, to the running sum: the total is the same sum in buffer order
// wherever the list was cut into groups.
__global__ void norm_accumulate_kernel(norm_part_list parts, int count, const double* partial, double* running) {
  __shared__ double s[norm_threads];
  double sum = 0.0;
  if (threadIdx.x == 0) sum = *running;
  for (int t = 0; t < count; ++t) {
    double acc = 0.0;
    for (std::uint32_t q = parts.begin[t] + threadIdx.x; q < parts.begin[t + 1]; q += norm_threads) {
      acc = __dadd_rn(acc, partial[q]);
    }
    const double buffer_sum = block_tree_sum(s, acc);
    if (threadIdx.x == 0) sum = __dadd_rn(sum, buffer_sum);
  }
  if (threadIdx.x == 0) *running = sum;
}

__global__ void norm_finish_kernel(const double* running, double max_norm, scaler_block* state) {
  const double norm = sqrt(*running);
  state->norm_before = norm;
  if (max_norm > 0.0 && !isfinite(norm)) {
    state->found_inf = 1;
    state->norm_non_finite = 1;
  }
  if (max_norm > 0.0 && isfinite(norm) && norm > max_norm) {
    const auto factor = static_cast<float>(max_norm / norm);
    state->norm_after = norm * static_cast<double>(factor);
  } else {
    state->norm_after = norm;
  }
}

// Block (x, y) clips part x of tensor y of the list.
__global__ void clip_kernel(tensor_list list, double max_norm, const scaler_block* state) {
  const double norm = state->norm_before;
  if (!(isfinite(norm) && norm > max_norm)) return;
  const auto factor = static_cast<float>(max_norm / norm);
  const auto t = static_cast<int>(blockIdx.y);
  void* const p = list.data[t];
  const std::uint64_t n = list.elements[t];
  const device_dtype type = list.type[t];
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    (void)store_element(p, i, type, __fmul_rn(load_element(p, i, type), factor));
  }
}

// __fmul_rn / __fadd_rn are never contracted into an fma, so the arithmetic is the simulator's, op for op.
__global__ void sgd_kernel(float* w, const void* g, device_dtype gt, float* v, std::uint64_t n, sgd_options o,
                           const scaler_block* state) {
  if (state->found_inf != 0) return;  // the step is skipped: weights and momentum stay as they are
  const float neg_lr = -o.learning_rate;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float vel = __fadd_rn(__fmul_rn(o.momentum, v[i]), load_element(g, i, gt));
    v[i] = vel;
    w[i] = __fadd_rn(w[i], __fmul_rn(neg_lr, vel));
  }
}

__global__ void adamw_kernel(float* w, const void* g, device_dtype gt, float* m, float* v, std::uint64_t n,
                             adamw_options o, const scaler_block* state) {
  if (state->found_inf != 0) return;
  const double t = static_cast<double>(state->stats.applied_steps + 1);
  const float c1 = static_cast<float>(1.0 / (1.0 - pow(o.beta1, t)));
  const float c2 = static_cast<float>(1.0 / (1.0 - pow(o.beta2, t)));
  const float b1 = static_cast<float>(o.beta1), b2 = static_cast<float>(o.beta2);
  const float one_minus_b1 = __fadd_rn(1.0f, -b1), one_minus_b2 = __fadd_rn(1.0f, -b2);
  const float neg_lr = -o.learning_rate;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float gi = load_element(g, i, gt);
    const float mi = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(one_minus_b1, gi));
    const float vi = __fadd_rn(__fmul_rn(b2, v[i]), __fmul_rn(__fmul_rn(one_minus_b2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    const float ratio = __fdiv_rn(__fmul_rn(mi, c1), __fadd_rn(__fsqrt_rn(__fmul_rn(vi, c2)), o.epsilon));
    const float upd = __fmul_rn(neg_lr, __fadd_rn(ratio, __fmul_rn(o.weight_decay, w[i])));
    w[i] = __fadd_rn(w[i], upd);
  }
}

unsigned grid_for(std::uint64_t elements, unsigned threads) {
  // Enough blocks to fill any of our target GPUs (132 SMs x 4) without one block per element.
  constexpr std::uint64_t max_blocks = 1056;
  const std::uint64_t want = (elements + threads - 1) / threads;
  return static_cast<unsigned>(std::max<std::uint64_t>(1, std::min(want, max_blocks)));
}

}  // namespace detail

void amp_reset(scaler_block* state, const scaler_config& cfg, void* stream) {
  write_block(state, initial_block(cfg), stream);
}

void write_block(scaler_block* state, const scaler_block& value, void* stream) {
  detail::write_block_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(state, value);
  SAFEAMP_CUDA_CHECK(cudaGetLastError());
}

void multi_tensor_unscale(std::span<const gradient_span> buffers, scaler_block* state, void* stream) {
  detail::check_gradient_buffers(buffers, "unscale");
  detail::for_each_group(buffers, max_tensors_per_launch, [&](std::span<const std::size_t> group) {
    std::uint64_t largest = 0;
    const detail::tensor_list list = detail::make_list(buffers, group, largest);
    const unsigned blocks = detail::grid_for(largest / 4 + 1, detail::unscale_threads);
    detail::unscale_kernel<<<blocks, detail::unscale_threads, 0, static_cast<cudaStream_t>(stream)>>>(list, state);
    SAFEAMP_CUDA_CHECK(cudaGetLastError());
  });
}

void record_found_inf(scaler_block* state, const std::int32_t* flag, void* stream) {
  detail::record_flag_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(state, flag);
  SAFEAMP_CUDA_CHECK(cudaGetLastError());
}

namespace {

void check_norm_arguments(std::span<const gradient_span> buffers, const double* scratch) {
  detail::check_gradient_buffers(buffers, "clip_grad_norm");
  if (scratch == nullptr) throw error("global_norm_and_clip scratch", "nullptr", "norm_scratch_doubles device doubles");
}

// global_norm_and_clip on checked arguments, its sum-of-squares launches sized for `geometry`.
void norm_and_clip(std::span<const gradient_span> buffers, double max_norm, double* scratch, scaler_block* state,
                   void* stream, detail::device_geometry geometry) {
  const auto s = static_cast<cudaStream_t>(stream);
  double* const running = scratch + detail::norm_running_sum;
  SAFEAMP_CUDA_CHECK(cudaMemsetAsync(running, 0, sizeof(double), s));
  // Groups run one after another on the stream, so they share the partial sums' scratch.
  detail::for_each_group(buffers, max_tensors_per_launch, [&](std::span<const std::size_t> group) {
    std::uint64_t largest = 0;
    const detail::tensor_list list = detail::make_list(buffers, group, largest);
    const detail::norm_part_list parts = detail::make_part_list(list);
    const unsigned blocks = detail::norm_blocks(parts.begin[list.count], geometry);
    detail::sum_squares_kernel<<<blocks, detail::norm_threads, 0, s>>>(list, parts, scratch);
    SAFEAMP_CUDA_CHECK(cudaGetLastError());
    detail::norm_accumulate_kernel<<<1, detail::norm_threads, 0, s>>>(parts, list.count, scratch, running);
    SAFEAMP_CUDA_CHECK(cudaGetLastError());
  });
  detail::norm_finish_kernel<<<1, 1, 0, s>>>(running, max_norm, state);
  SAFEAMP_CUDA_CHECK(cudaGetLastError());
  if (max_norm > 0.0) {
    detail::for_each_group(buffers, max_tensors_per_launch, [&](std::span<const std::size_t> group) {
      std::uint64_t largest = 0;
      const detail::tensor_list list = detail::make_list(buffers, group, largest);
      const dim3 grid(detail::grid_for(largest, detail::norm_threads), static_cast<unsigned>(list.count));
      detail::clip_kernel<<<grid, detail::norm_threads, 0, s>>>(list, max_norm, state);
      SAFEAMP_CUDA_CHECK(cudaGetLastError());
    });
  }
}

}  // namespace

void global_norm_and_clip(std::span<const gradient_span> buffers, double max_norm, double* scratch, scaler_block* state,
                          void* stream) {
  check_norm_arguments(buffers, scratch);
  norm_and_clip(buffers, max_norm, scratch, state, stream, detail::current_device_geometry());
}

void detail::global_norm_and_clip_on(std::span<const gradient_span> buffers, double max_norm, double* scratch,
                                     scaler_block* state, void* stream, device_geometry geometry) {
  check_norm_arguments(buffers, scratch);
  norm_and_clip(buffers, max_norm, scratch, state, stream, geometry);
}

void scale_by_loss_scale(tensor_span data, const scaler_block* state, void* stream) {
  if (data.elements == 0) return;
  constexpr unsigned threads = 256;
  detail::
      scale_loss_kernel<<<detail::grid_for(data.elements, threads), threads, 0, static_cast<cudaStream_t>(stream)>>>(
          data.data, data.elements, state);
  SAFEAMP_CUDA_CHECK(cudaGetLastError());
}

void advance_scaler(const scaler_config& cfg, scaler_block* state, bool stepped, void* stream) {
  detail::advance_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(cfg, state, stepped);
  SAFEAMP_CUDA_CHECK(cudaGetLastError());
}

void scale_update(const scaler_config& cfg, scaler_block* state, void* stream) {
  advance_scaler(cfg, state, true, stream);
}

void copy_last_report(const scaler_block* state, step_report* report, void* stream) {
  detail::copy_report_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(state, report);
  SAFEAMP_CUDA_CHECK(cudaGetLastError());
}

namespace {
void check_optimizer_gradients(const char* what, const tensor_span& weights, const gradient_span& g) {
  const gradient_span one[] = {g};
  detail::check_gradient_buffers(one, what);
  if (g.elements != weights.elements) {
    throw error(std::string(what) + " gradient elements", std::to_string(g.elements),
                std::to_string(weights.elements) + " (the weights' element count)");
  }
}
}  // namespace

void sgd_momentum_step(tensor_span weights, gradient_span gradients, float* velocity, const sgd_options& options,
                       const scaler_block* state, void* stream) {
  check_optimizer_gradients("sgd_momentum_step", weights, gradients);
  if (weights.elements == 0) return;
  constexpr unsigned threads = 256;
  detail::sgd_kernel<<<detail::grid_for(weights.elements, threads), threads, 0, static_cast<cudaStream_t>(stream)>>>(
      weights.data, gradients.data, gradients.type, velocity, weights.elements, options, state);
  SAFEAMP_CUDA_CHECK(cudaGetLastError());
}

void sgd_momentum_step(tensor_span weights, const float* gradients, float* velocity, const sgd_options& options,
                       const scaler_block* state, void* stream) {
  // the kernel only reads the gradient; gradient_span holds a mutable pointer for the passes that write it
  const gradient_span g{.data = const_cast<float*>(gradients), .elements = weights.elements};
  sgd_momentum_step(weights, g, velocity, options, state, stream);
}

void adamw_step(tensor_span weights, gradient_span gradients, float* first_moment, float* second_moment,
                const adamw_options& options, const scaler_block* state, void* stream) {
  check_optimizer_gradients("adamw_step", weights, gradients);
  if (weights.elements == 0) return;
  constexpr unsigned threads = 256;
  detail::adamw_kernel<<<detail::grid_for(weights.elements, threads), threads, 0, static_cast<cudaStream_t>(stream)>>>(
      weights.data, gradients.data, gradients.type, first_moment, second_moment, weights.elements, options, state);
  SAFEAMP_CUDA_CHECK(cudaGetLastError());
}

void adamw_step(tensor_span weights, const float* gradients, float* first_moment, float* second_moment,
                const adamw_options& options, const scaler_block* state, void* stream) {
  const gradient_span g{.data = const_cast<float*>(gradients), .elements = weights.elements};  // read only
  adamw_step(weights, g, first_moment, second_moment, options, state, stream);
}

}  // namespace safeamp::cuda
