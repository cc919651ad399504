// The GPU acceptance checks of scripts/gpu-check, written as one JSON object: GPU casts bit-identical to the
// CPU's round_span on inputs from all 2^16 fp16 codes and on a seeded sample of 10^8 floats (every format
// and rounding mode), and the number of host synchronisations in the scaler path of a step, through
// device_loss_scaler (shown to be zero: the scaler made no read and the device is still busy after 50 steps
// have been enqueued behind a long kernel).
// Usage: cuda_gpu_check [--sample N] [--out FILE]. Exit 0 all passed, 1 a check failed, 77 no GPU.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <string>
#include <vector>

#include "busy_wait.hpp"
#include "safeamp/cuda/amp_ops.hpp"
#include "safeamp/cuda/core_kernels.hpp"
#include "safeamp/cuda/device.hpp"
#include "safeamp/cuda/device_scaler.hpp"
#include "safeamp/cuda/memory_probe.hpp"
#include "safeamp/cuda/status.hpp"
#include "safeamp/format.hpp"
#include "safeamp/scaling/scaler_checkpoint.hpp"

using namespace safeamp;
using namespace safeamp::cuda;

namespace {

#define CHECK_CUDA(call) check_status(status_source::cuda_runtime, static_cast<int>(call), #call, __FILE__, __LINE__)

struct cast_result {
  std::string name;
  std::uint64_t elements = 0, mismatches = 0;
  bool counters_equal = true;
};

// all_modes: every rounding mode and overflow behaviour; otherwise the two that training uses (nearest
// even and stochastic, IEEE overflow), which keeps the 10^8 sample within the script's time budget.
std::vector<cast_result> compare_casts(const std::string& set, const std::vector<float>& in, bool all_modes,
                                       std::uint64_t first_index = 0) {
  std::vector<cast_result> results;
  device_buffer d_in(in.size() * 4), d_out(in.size() * 4), d_counts(5 * sizeof(unsigned long long));
  CHECK_CUDA(cudaMemcpy(d_in.data(), in.data(), in.size() * 4, cudaMemcpyHostToDevice));
  std::vector<float> cpu(in.size()), gpu(in.size());
  // first_index: the position of in[0] in the whole sample, so every chunk's stochastic words are those of its own
  // logical indices (the device's 64-bit offset + index arithmetic is exercised beyond 2^32 elements' worth).
  const philox_key key{.seed = 0x9E3779B97F4A7C15ull, .stream = 5, .offset = 12345 + first_index};
  for (format_spec f : {fp16, bf16, fp8_e4m3, fp8_e5m2}) {
    for (rounding r : {rounding::nearest_even, rounding::toward_zero, rounding::toward_pos_inf,
                       rounding::toward_neg_inf, rounding::stochastic}) {
      for (overflow ov : {overflow::to_infinity, overflow::saturate}) {
        if (!all_modes && ((r != rounding::nearest_even && r != rounding::stochastic) || ov != overflow::to_infinity)) {
          continue;
        }
        const round_options opt{.mode = r, .on_overflow = ov};
        const cast_stats stats = round_span(f, in, cpu, opt, key);
        CHECK_CUDA(cudaMemset(d_counts.data(), 0, d_counts.size_bytes()));
        CHECK_CUDA(static_cast<cudaError_t>(launch_round_counted(
            f, opt, key, d_in.as<float>(), d_out.as<float>(), in.size(), d_counts.as<unsigned long long>(), nullptr)));
        CHECK_CUDA(cudaMemcpy(gpu.data(), d_out.data(), in.size() * 4, cudaMemcpyDeviceToHost));
        unsigned long long counts[5] = {};
        CHECK_CUDA(cudaMemcpy(counts, d_counts.data(), sizeof(counts), cudaMemcpyDeviceToHost));
        cast_result res;
        res.name = set + " " + format_name(f) + " mode" + std::to_string(static_cast<int>(r)) +
                   (ov == overflow::saturate ? " saturate" : " to_infinity");
        res.elements = in.size();
        for (std::size_t i = 0; i < in.size(); ++i) {
          res.mismatches += safeamp::bit_cast<std::uint32_t>(cpu[i]) != safeamp::bit_cast<std::uint32_t>(gpu[i]);
        }
        res.counters_equal = counts[0] == stats.overflow && counts[1] == stats.underflow &&
                             counts[2] == stats.subnormal && counts[3] == stats.nan && counts[4] == stats.infinity;
        results.push_back(res);
      }
    }
  }
  return results;
}

// Host synchronisations in `steps` steps of the scaler path as a trainer runs it: device_loss_scaler (the one
// scaler) on an fp32 and an fp16 gradient, unscale, clip, the SGD steps predicated on its flag, update, all
// enqueued behind a long kernel. None happened when the scaler made no read (its own count of host waits) and
// the stream is still busy once everything is enqueued; after the wait, the scaler must have counted every step.
struct scaler_path_result {
  int steps = 0;
  int host_synchronizations = 0;
  std::int64_t scaler_reads = 0;  // device_memory::reads() during the steps
  bool stream_busy_after_enqueue = false;
  std::int64_t steps_counted = 0;  // stats().steps after the wait (the warm-up step included)
  double enqueue_seconds = 0.0;
};

scaler_path_result host_syncs_in_scaler_path(int steps) {
  scaler_path_result r;
  r.steps = steps;
  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  {
    const std::size_t n = std::size_t{1} << 20, n16 = std::size_t{1} << 18;
    device_buffer g(n * 4), g16(n16 * 2), w(n * 4), v(n * 4), w16(n16 * 4), v16(n16 * 4);
    for (device_buffer* b : {&g, &g16, &w, &v, &w16, &v16}) CHECK_CUDA(cudaMemset(b->data(), 0, b->size_bytes()));
    CHECK_CUDA(cudaDeviceSynchronize());  // the memsets ran on the legacy stream, which `stream` does not wait for
    device_loss_scaler scaler(scaler_config{.growth_interval = 10}, device_memory(stream));
    const gradient_span grads[] = {tensor_span{g.as<float>(), n},
                                   gradient_span{.data = g16.data(), .elements = n16, .type = device_dtype::f16}};
    const auto one_step = [&] {
      scaler.unscale(grads);
      scaler.clip_grad_norm(grads, 1.0);
      scaler.step([&] {
        sgd_momentum_step({w.as<float>(), n}, grads[0], v.as<float>(), sgd_options{}, scaler.block_in_memory(), stream);
        sgd_momentum_step({w16.as<float>(), n16}, grads[1], v16.as<float>(), sgd_options{}, scaler.block_in_memory(),
                          stream);
      });
      scaler.update();
    };
    one_step();  // module loading of every kernel before the measured enqueue
    safeamp::cuda::testing::launch_busy_wait(1000, stream);
    CHECK_CUDA(cudaStreamSynchronize(stream));
    const std::int64_t reads0 = scaler.memory().reads();
    safeamp::cuda::testing::launch_busy_wait(500'000'000, stream);
    const auto t0 = std::chrono::steady_clock::now();
    for (int s = 0; s < steps; ++s) one_step();
    r.enqueue_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const cudaError_t q = cudaStreamQuery(stream);
    if (q != cudaErrorNotReady && q != cudaSuccess) CHECK_CUDA(q);
    r.scaler_reads = scaler.memory().reads() - reads0;
    r.stream_busy_after_enqueue = q == cudaErrorNotReady;
    r.host_synchronizations = static_cast<int>(r.scaler_reads) + (r.stream_busy_after_enqueue ? 0 : 1);
    r.steps_counted = scaler.stats().steps;  // the lazy read: waits once, after the measured steps
  }
  CHECK_CUDA(cudaStreamDestroy(stream));
  return r;
}

std::string json_escape(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    r += c;
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t sample = 100'000'000;
  std::string out_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--sample" && i + 1 < argc) {
      sample = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--out" && i + 1 < argc) {
      out_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: cuda_gpu_check [--sample N] [--out FILE]\n");
      return 2;
    }
  }
  int devices = 0;
  try {
    devices = device_count();
  } catch (const std::exception& e) {  // a driver older than this CUDA runtime: the message names both versions
    std::fprintf(stderr, "cuda_gpu_check: %s\n", e.what());
    return 1;
  }
  if (devices == 0) {
    int n = 0;
    const cudaError_t status = cudaGetDeviceCount(&n);
    std::printf("SKIPPED: no CUDA device is usable (cudaGetDeviceCount: %s); the GPU checks need one.\n",
                cudaGetErrorName(status));
    return ctest_skip_code;
  }
  try {
    const device_info info = current_device();
    std::vector<float> codes;
    for (std::uint32_t c = 0; c < (1u << 16); ++c) {
      const std::uint32_t b = safeamp::bit_cast<std::uint32_t>(decode(fp16, c));
      for (std::uint32_t off : {0u, 0x0FFFu, 0x1000u, 0x1001u}) codes.push_back(safeamp::bit_cast<float>(b + off));
    }
    std::vector<cast_result> casts = compare_casts("fp16-codes", codes, true);
    // The seeded sample in chunks of 2^24 (the key's offset keeps the logical indices continuous).
    std::uint64_t sample_mismatches = 0;
    bool sample_counters = true;
    std::size_t sample_combinations = 0;
    const std::uint64_t chunk = std::uint64_t{1} << 24;
    for (std::uint64_t start = 0; start < sample; start += chunk) {
      const std::uint64_t len = sample - start < chunk ? sample - start : chunk;
      std::vector<float> in(len);
      for (std::uint64_t i = 0; i < len; ++i) in[i] = safeamp::bit_cast<float>(stochastic_bits(20260101, 9, start + i));
      const std::vector<cast_result> part = compare_casts("sample", in, false, start);
      sample_combinations = part.size();
      for (const cast_result& r : part) {
        sample_mismatches += r.mismatches;
        sample_counters = sample_counters && r.counters_equal;
      }
    }
    const scaler_path_result path = host_syncs_in_scaler_path(50);
    const bool path_ok = path.host_synchronizations == 0 && path.steps_counted == path.steps + 1;

    std::uint64_t code_mismatches = 0;
    bool code_counters = true;
    for (const cast_result& r : casts) {
      code_mismatches += r.mismatches;
      code_counters = code_counters && r.counters_equal;
    }
    const bool pass = code_mismatches == 0 && code_counters && sample_mismatches == 0 && sample_counters && path_ok;
    std::ostringstream js;
    js << "{\n  \"device\": \"" << json_escape(info.name)
       << "\",\n  \"compute_capability\": " << info.compute_capability << ",\n  \"table_row\": \""
       << (find_device_for_runtime_name(info.name) ? std::string(find_device_for_runtime_name(info.name)->name) : "")
       << "\",\n  \"cast_fp16_codes\": {\"inputs\": " << codes.size() << ", \"combinations\": " << casts.size()
       << ", \"mismatches\": " << code_mismatches << ", \"counters_equal\": " << (code_counters ? "true" : "false")
       << "},\n  \"cast_seeded_sample\": {\"inputs\": " << sample << ", \"combinations\": " << sample_combinations
       << ", \"mismatches\": " << sample_mismatches << ", \"counters_equal\": " << (sample_counters ? "true" : "false")
       << "},\n  \"scaler_path\": {\"scaler\": \"device_loss_scaler\", \"steps\": " << path.steps
       << ", \"host_synchronizations\": " << path.host_synchronizations
       << ", \"scaler_reads_in_steps\": " << path.scaler_reads
       << ", \"stream_busy_after_enqueue\": " << (path.stream_busy_after_enqueue ? "true" : "false")
       << ", \"steps_counted\": " << path.steps_counted << ", \"enqueue_seconds\": " << path.enqueue_seconds
       << "},\n  \"pass\": " << (pass ? "true" : "false") << "\n}\n";
    std::fputs(js.str().c_str(), stdout);
    if (!out_path.empty()) safeamp::write_file_atomically(out_path, js.str(), "--out");
    return pass ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_gpu_check: %s\n", e.what());
    return 1;
  }
}
