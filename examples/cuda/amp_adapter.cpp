// The thin adapter of amp_adapter.hpp: parameters checked once, the scaler built once, then per step only
// kernel launches on the loop's stream (the library's passes and optimizer, the core's encode for the
// write-back), each phase an NVTX range.
#include "amp_adapter.hpp"

#include <cuda_runtime_api.h>

#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "safeamp/cuda/core_kernels.hpp"
#include "safeamp/cuda/nvtx.hpp"
#include "safeamp/cuda/status.hpp"
#include "safeamp/error.hpp"
#include "safeamp/format/round.hpp"

namespace safeamp::cuda_adapter {
namespace {

namespace cu = safeamp::cuda;

void check(int status, const char* call) {
  cu::check_status(cu::status_source::cuda_runtime, status, call, __FILE__, __LINE__);
}

format_spec format_of(cu::device_dtype t) { return t == cu::device_dtype::f16 ? fp16 : bf16; }

std::string label(const parameter_view& p, std::size_t i) {
  return "parameter " + std::to_string(i) + " '" + p.name + "'";
}

}  // namespace

void check_parameters(std::span<const parameter_view> params) {
  if (params.empty()) throw error("parameters", "none", "at least one parameter");
  std::set<std::string> names;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const parameter_view& p = params[i];
    const std::string who = label(p, i);
    if (p.type != cu::device_dtype::f32 && p.type != cu::device_dtype::f16 && p.type != cu::device_dtype::bf16) {
      throw error(who + " type", std::string(cu::dtype_name(p.type)), "f32, f16 or bf16");
    }
    if (p.elements == 0) throw error(who + " elements", "0", ">= 1");
    if (p.value == nullptr) throw error(who + " value", "nullptr", "a device pointer");
    if (p.grad == nullptr) throw error(who + " grad", "nullptr", "a device pointer");
    if (p.grad == p.value) throw error(who + " grad", "the value's pointer", "a separate gradient buffer");
    if (!names.insert(p.name).second) throw error(who + " name", "'" + p.name + "' (used twice)", "unique names");
  }
}

namespace {

std::vector<parameter_view> checked(std::vector<parameter_view> params) {
  check_parameters(params);
  return params;
}

adapter_options checked(adapter_options o) {
  if (!(o.max_grad_norm >= 0.0) || !(o.max_grad_norm <= std::numeric_limits<double>::max())) {
    throw error("max_grad_norm", std::to_string(o.max_grad_norm), "a finite number >= 0 (0: no clip)");
  }
  return o;
}

}  // namespace

amp_adapter::amp_adapter(std::vector<parameter_view> params, adapter_options options)
    : params_(checked(std::move(params))),
      options_(checked(std::move(options))),
      scaler_(options_.scaler, cu::device_memory(options_.stream)) {
  const auto s = static_cast<cudaStream_t>(options_.stream);
  // The 16-bit parameters are read below through the legacy default stream, which does not wait for the caller's
  // non-blocking stream: writes to them still queued there (an initialisation) must land first.
  check(static_cast<int>(cudaStreamSynchronize(s)), "cudaStreamSynchronize(parameters)");
  for (const parameter_view& p : params_) {
    grads_.push_back(cu::gradient_span{.data = p.grad, .elements = p.elements, .type = p.type});
    parameter_state st;
    const std::size_t bytes = p.elements * sizeof(float);
    st.first = cu::device_buffer(bytes);
    st.second = cu::device_buffer(bytes);
    check(static_cast<int>(cudaMemsetAsync(st.first.data(), 0, bytes, s)), "cudaMemsetAsync(first moment)");
    check(static_cast<int>(cudaMemsetAsync(st.second.data(), 0, bytes, s)), "cudaMemsetAsync(second moment)");
    if (p.type == cu::device_dtype::f32) {
      st.weights = static_cast<float*>(p.value);
    } else {
      // The master copy holds the 16-bit values exactly (decoded by the core routine, on the host, once).
      std::vector<std::uint16_t> codes(p.elements);
      std::vector<float> master(p.elements);
      check(static_cast<int>(cudaMemcpy(codes.data(), p.value, p.elements * 2, cudaMemcpyDeviceToHost)),
            "cudaMemcpy(parameter)");
      for (std::size_t i = 0; i < codes.size(); ++i) master[i] = decode(format_of(p.type), codes[i]);
      st.master = cu::device_buffer(bytes);
      check(static_cast<int>(cudaMemcpy(st.master.data(), master.data(), bytes, cudaMemcpyHostToDevice)),
            "cudaMemcpy(master)");
      st.weights = st.master.as<float>();
    }
    state_.push_back(std::move(st));
  }
  // Setup is done before the first step: the copies above went through the legacy default stream (a pageable
  // copy may still be in flight when cudaMemcpy returns), which the loop's non-blocking stream does not wait for.
  check(static_cast<int>(cudaDeviceSynchronize()), "cudaDeviceSynchronize(setup)");
}

void amp_adapter::step() {
  void* const s = options_.stream;
  {
    const cu::nvtx_range range("unscale+check");
    scaler_.unscale(grads_);
  }
  if (options_.reduce) {
    const cu::nvtx_range range("reduce");
    options_.reduce(scaler_, grads_);
  }
  if (options_.max_grad_norm > 0.0) {
    const cu::nvtx_range range("clip");
    scaler_.clip_grad_norm(grads_, options_.max_grad_norm);
  }
  {
    const cu::nvtx_range range("optimizer");
    scaler_.step([&] {
      const std::int32_t* skip = scaler_.found_inf_flag();
      for (std::size_t i = 0; i < params_.size(); ++i) {
        const parameter_view& p = params_[i];
        parameter_state& st = state_[i];
        cu::adamw_step(cu::tensor_span{st.weights, p.elements}, grads_[i], st.first.as<float>(), st.second.as<float>(),
                       options_.adamw, scaler_.block_in_memory(), s);
        if (p.type != cu::device_dtype::f32) {  // the forward's 16-bit copy, written only on an applied step
          check(cu::launch_encode16_unless(skip, format_of(p.type), round_options{}, philox_key{}, st.weights,
                                           static_cast<std::uint16_t*>(p.value), p.elements, s),
                "launch_encode16_unless(write-back)");
        }
      }
    });
  }
  const cu::nvtx_range range("scaler update");
  scaler_.update();
}

}  // namespace safeamp::cuda_adapter
