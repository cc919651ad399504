// The adapter (amp_adapter.hpp) driven the way a libtorch or hand-written CUDA loop drives it: a model of 300
// parameters in raw device memory, f32, f16 and bf16 in turn (more tensors than one multi-tensor launch
// takes), a backward of (loss * scale) that reads the scale on the device, then adapter.step() (unscale and
// check, the reduce hook, clip, AdamW predicated on the flag, 16-bit write-back, update), with lazy reads of
// the scaler's stats every 10 steps and a checkpoint at the end. A NaN is injected into one step; fp16
// gradients overflow by themselves each time the scale grows to 2^14.
//
// The run checks itself against references computed on the host, and exits 1 when one disagrees:
//   - the device scaler's report of every step (applied, found_inf, reason, scales, trackers, event) and its
//     counters equal the host loss_scaler's fed the flags the host computes from the same gradient bits;
//   - the reported norm of each applied step equals the host's double-precision norm of the unscaled
//     gradients within n 2^-52 (relative);
//   - the skipped step writes nothing (parameters and master weights bit for bit), the next applied one does;
//   - a checkpoint taken on the device restores on the host and the reverse, with the same JSON text.
// Exit codes: 0 all agree, 1 a check failed (or a device error), 77 no GPU.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "adapter_backward.hpp"
#include "amp_adapter.hpp"
#include "safeamp/cuda/device.hpp"
#include "safeamp/cuda/memory_probe.hpp"
#include "safeamp/cuda/nvtx.hpp"
#include "safeamp/cuda/status.hpp"
#include "safeamp/format/round.hpp"
#include "safeamp/scaling/loss_scaler.hpp"
#include "safeamp/scaling/unscale.hpp"

namespace {

using namespace safeamp;
namespace cu = safeamp::cuda;
namespace ad = safeamp::cuda_adapter;

constexpr std::uint64_t seed = 20261;
constexpr std::uint32_t steps = 40;
constexpr std::uint32_t poisoned_step = 7;
constexpr std::uint32_t poisoned_parameter = 5;  // a bf16 tensor (5 % 3 == 2): a NaN, not an overflow of the format
constexpr std::size_t parameter_count = 300;
constexpr double max_grad_norm = 50.0;

void check(cudaError_t e, const char* call) {
  cu::check_status(cu::status_source::cuda_runtime, static_cast<int>(e), call, __FILE__, __LINE__);
}

// The model: types f32, f16, bf16 in turn; sizes from a short cycle (a 1-element tensor included).
struct tensor_spec {
  cu::device_dtype type;
  std::uint64_t elements;
  float magnitude;  // of the unscaled gradient: fp16's 4 overflows 65504 once the scale reaches 2^14
};

tensor_spec spec_of(std::size_t i) {
  constexpr std::uint64_t sizes[] = {4096, 1000, 257, 33, 1};
  const auto type = static_cast<cu::device_dtype>(i % 3);  // f32, f16, bf16 (the enum's first three)
  return {type, sizes[i % 5], type == cu::device_dtype::f16 ? 4.0f : 1.0f};
}

format_spec format_of(cu::device_dtype t) { return t == cu::device_dtype::f16 ? fp16 : bf16; }

// The value a gradient buffer holds after the backward, as a float (what the device kernel stores).
float stored_gradient(std::size_t p, std::uint32_t step, std::uint64_t i, float scale) {
  const tensor_spec t = spec_of(p);
  float g = ad::demo::true_gradient(seed, static_cast<std::uint32_t>(p), step, i, t.magnitude) * scale;
  if (p == poisoned_parameter && step == poisoned_step && i == 0) g = std::numeric_limits<float>::quiet_NaN();
  return t.type == cu::device_dtype::f32 ? g : round_to(format_of(t.type), g);
}

// Host reference of one step's gradients: found_inf as the device's unscale sees it (every result as stored
// in the buffer's type) and the double-precision norm of the unscaled values.
struct host_step {
  bool found_inf = false;
  double norm = 0.0;
  std::uint64_t elements = 0;
};

host_step reference_step(std::uint32_t step, float scale) {
  host_step r;
  const float inv = inverse_scale(scale);
  double sum = 0.0;
  for (std::size_t p = 0; p < parameter_count; ++p) {
    const tensor_spec t = spec_of(p);
    for (std::uint64_t i = 0; i < t.elements; ++i) {
      const float scaled = stored_gradient(p, step, i, scale);
      float y = scaled * inv;
      if (t.type != cu::device_dtype::f32) y = round_to(format_of(t.type), y);
      r.found_inf = r.found_inf || !std::isfinite(y);
      sum += static_cast<double>(y) * static_cast<double>(y);
    }
    r.elements += t.elements;
  }
  r.norm = std::sqrt(sum);
  return r;
}

struct model {
  std::vector<cu::device_buffer> values, grads;
  std::vector<ad::parameter_view> views;
};

model make_model() {
  model m;
  for (std::size_t p = 0; p < parameter_count; ++p) {
    const tensor_spec t = spec_of(p);
    const auto bytes = static_cast<std::size_t>(t.elements) * static_cast<std::size_t>(cu::dtype_bytes(t.type));
    m.values.emplace_back(bytes);
    m.grads.emplace_back(bytes);
    // initial weights in [-0.5, 0.5), in the parameter's type
    std::vector<std::uint8_t> host(bytes);
    for (std::uint64_t i = 0; i < t.elements; ++i) {
      const float w = ad::demo::true_gradient(seed + 1, static_cast<std::uint32_t>(p), 0, i, 0.5f);
      if (t.type == cu::device_dtype::f32) {
        std::memcpy(host.data() + 4 * i, &w, 4);
      } else {
        const auto code = static_cast<std::uint16_t>(encode(format_of(t.type), w));
        std::memcpy(host.data() + 2 * i, &code, 2);
      }
    }
    check(cudaMemcpy(m.values.back().data(), host.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy(weights)");
    m.views.push_back(ad::parameter_view{.name = "layer" + std::to_string(p / 3) + ".w" + std::to_string(p % 3),
                                         .value = m.values.back().data(),
                                         .grad = m.grads.back().data(),
                                         .elements = t.elements,
                                         .type = t.type});
  }
  return m;
}

// Every parameter's bytes and every master copy (one host wait: outside the step).
std::vector<std::vector<std::uint8_t>> snapshot(const model& m, const ad::amp_adapter& a) {
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  std::vector<std::vector<std::uint8_t>> out;
  for (std::size_t p = 0; p < parameter_count; ++p) {
    out.emplace_back(m.values[p].size_bytes());
    check(cudaMemcpy(out.back().data(), m.values[p].data(), out.back().size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
    out.emplace_back(m.views[p].elements * 4);
    check(cudaMemcpy(out.back().data(), a.master_weights(p), out.back().size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
  }
  return out;
}

int failures = 0;
void expect(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

bool same_report(const step_report& d, const step_report& h) {
  return d.step == h.step && d.applied == h.applied && d.found_inf == h.found_inf && d.reason == h.reason &&
         d.scale_before == h.scale_before && d.scale_after == h.scale_after && d.growth_tracker == h.growth_tracker &&
         d.hysteresis_tracker == h.hysteresis_tracker && d.overflows_at_min == h.overflows_at_min && d.event == h.event;
}

int run() {
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  model m = make_model();
  cu::device_buffer wire(sizeof(std::int32_t));  // the flag a data-parallel loop all-reduces (one rank here)
  const scaler_config cfg{.init_scale = 1024.0f, .growth_interval = 4};
  ad::adapter_options options{.scaler = cfg,
                              .max_grad_norm = max_grad_norm,
                              .adamw = cu::adamw_options{.learning_rate = 1e-3f},
                              .stream = stream,
                              .reduce = {}};
  // One rank: the flag goes "over the wire" (here a device copy; ncclAllReduce MAX with more ranks) and comes
  // back into the scaler, as issue 17's agree_found_inf does.
  options.reduce = [&](cu::device_loss_scaler& scaler, std::span<const cu::gradient_span>) {
    check(cudaMemcpyAsync(wire.data(), scaler.found_inf_flag(), sizeof(std::int32_t), cudaMemcpyDeviceToDevice, stream),
          "cudaMemcpyAsync(flag)");
    scaler.record_found_inf(wire.as<std::int32_t>());
  };
  ad::amp_adapter adapter(m.views, options);
  cu::device_buffer reports(steps * sizeof(step_report));

  std::vector<std::vector<std::uint8_t>> before_skip, after_skip, after_applied;
  std::int64_t lazy_reads = 0;
  for (std::uint32_t step = 0; step < steps; ++step) {
    if (step == poisoned_step) before_skip = snapshot(m, adapter);
    {
      const cu::nvtx_range range("backward");
      for (std::size_t p = 0; p < parameter_count; ++p) {
        const tensor_spec t = spec_of(p);
        ad::demo::fake_backward(m.views[p].grad, t.elements, t.type, t.magnitude, seed, static_cast<std::uint32_t>(p),
                                step, step == poisoned_step && p == poisoned_parameter, adapter.loss_scale(), stream);
      }
    }
    adapter.step();
    cu::copy_last_report(adapter.scaler().block_in_memory(), reports.as<step_report>() + step, stream);
    if (step == poisoned_step) after_skip = snapshot(m, adapter);
    if (step == poisoned_step + 1) after_applied = snapshot(m, adapter);
    if (step % 10 == 9) {  // telemetry: a lazy read, outside the step
      const scaler_stats s = adapter.stats();
      ++lazy_reads;
      std::printf("step %u: scale %g, %lld of %lld steps skipped\n", step,
                  static_cast<double>(adapter.scaler().scale()), static_cast<long long>(s.skipped_steps),
                  static_cast<long long>(s.steps));
      ++lazy_reads;
    }
  }
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  std::vector<step_report> got(steps);
  check(cudaMemcpy(got.data(), reports.data(), steps * sizeof(step_report), cudaMemcpyDeviceToHost), "cudaMemcpy");

  // The host reference: the host loss_scaler fed the flag the host computes from the same gradient bits.
  loss_scaler host(cfg);
  int overflows = 0, natural = 0, growths = 0, norm_far = 0, report_diffs = 0;
  for (std::uint32_t step = 0; step < steps; ++step) {
    const host_step ref = reference_step(step, host.scale());
    std::vector<float> flag{ref.found_inf ? std::numeric_limits<float>::infinity() : 0.0f};
    (void)host.unscale(flag);
    (void)host.step([] {});
    const step_report want = host.update();
    overflows += want.found_inf ? 1 : 0;
    natural += want.found_inf && step != poisoned_step ? 1 : 0;
    growths += want.event == scale_event::grew ? 1 : 0;
    if (!same_report(got[step], want)) {
      ++report_diffs;
      std::printf("step %u: device applied %d scale %g -> %g, host applied %d scale %g -> %g\n", step,
                  got[step].applied, static_cast<double>(got[step].scale_before),
                  static_cast<double>(got[step].scale_after), want.applied, static_cast<double>(want.scale_before),
                  static_cast<double>(want.scale_after));
    }
    if (!ref.found_inf) {
      const double tol = static_cast<double>(ref.elements) * 0x1p-52 * ref.norm;
      if (!(std::fabs(got[step].grad_norm_before_clip - ref.norm) <= tol)) ++norm_far;
    }
  }
  expect(report_diffs == 0, "every step's report equals the host scaler's (" + std::to_string(steps) + " steps)");
  expect(overflows >= 3 && natural >= 2 && growths >= 2,
         "the run skipped steps (" + std::to_string(overflows) + ", of which " + std::to_string(natural) +
             " fp16 overflows) and grew the scale (" + std::to_string(growths) + " times)");
  expect(norm_far == 0, "the norm of every applied step equals the host's within n 2^-52");
  expect(adapter.stats() == host.stats(), "the device counters equal the host scaler's");
  expect(adapter.scaler().memory().reads() == lazy_reads + 1,
         "the scaler read its device memory only at the lazy reads (" + std::to_string(lazy_reads + 1) + ")");
  expect(
      !before_skip.empty() && before_skip == after_skip,
      "the skipped step (NaN at step " + std::to_string(poisoned_step) + ") wrote no parameter and no master weight");
  expect(after_applied != after_skip, "the next step was applied and changed the weights");

  loss_scaler restored(scaler_config{});
  restored.load_json(adapter.save_checkpoint());
  expect(restored.checkpoint() == host.checkpoint(), "a device checkpoint restores on the host bit for bit");
  adapter.load_checkpoint(host.save_json());
  expect(adapter.save_checkpoint() == host.save_json(), "a host checkpoint restores on the device, same JSON text");
  check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main() {
  try {
    // Inside the try: a driver older than this CUDA runtime is an error naming both versions, not "no GPU".
    if (cu::device_count() == 0) {
      std::printf("SKIPPED: no CUDA device is present; the adapter example needs a GPU.\n");
      return cu::ctest_skip_code;
    }
    const int rc = run();
    std::printf("%s\n", rc == 0 ? "adapter example: all checks passed" : "adapter example: FAILED");
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "adapter example: %s\n", e.what());
    return 1;
  }
}
