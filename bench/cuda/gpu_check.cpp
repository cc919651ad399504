// The GPU acceptance checks of scripts/gpu-check, written as one JSON object: GPU casts bit-identical to the
// CPU's round_span on inputs from all 2^16 fp16 codes and on a seeded sample of 10^8 floats (every format
// and rounding mode), and the number of host synchronisations in the scaler path of a step (shown to be
// zero: the device is still busy after 100 steps have been enqueued behind a long kernel).
// Usage: cuda_gpu_check [--sample N] [--out FILE]. Exit 0 all passed, 1 a check failed, 77 no GPU.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "safeamp/cuda/amp_ops.hpp"
#include "safeamp/cuda/core_kernels.hpp"
#include "safeamp/cuda/device.hpp"
#include "safeamp/cuda/memory_probe.hpp"
#include "safeamp/cuda/status.hpp"
#include "safeamp/format.hpp"

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
std::vector<cast_result> compare_casts(const std::string& set, const std::vector<float>& in, bool all_modes) {
  std::vector<cast_result> results;
  device_buffer d_in(in.size() * 4), d_out(in.size() * 4), d_counts(5 * sizeof(unsigned long long));
  CHECK_CUDA(cudaMemcpy(d_in.data(), in.data(), in.size() * 4, cudaMemcpyHostToDevice));
  std::vector<float> cpu(in.size()), gpu(in.size());
  const philox_key key{.seed = 0x9E3779B97F4A7C15ull, .stream = 5, .offset = 12345};
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

// Returns the number of host synchronisations observed while enqueuing `steps` scaler-path steps: 0 when
// the stream is still busy with the long kernel queued before them, otherwise 1 (at least one wait).
int host_syncs_in_scaler_path(int steps, double& enqueue_seconds) {
  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const std::size_t n = std::size_t{1} << 20;
  device_buffer g(n * 4), w(n * 4), v(n * 4), st(sizeof(device_amp_state));
  CHECK_CUDA(cudaMemset(g.data(), 0, n * 4));
  CHECK_CUDA(cudaMemset(w.data(), 0, n * 4));
  CHECK_CUDA(cudaMemset(v.data(), 0, n * 4));
  const scaler_config cfg{};
  const tensor_span grads[] = {{g.as<float>(), n}};
  // One step first, so that module loading of every kernel is done before the measured enqueue.
  amp_reset(st.as<device_amp_state>(), cfg, stream);
  multi_tensor_unscale(grads, st.as<device_amp_state>(), stream);
  sgd_momentum_step({w.as<float>(), n}, g.as<float>(), v.as<float>(), sgd_options{}, st.as<device_amp_state>(), stream);
  scale_update(cfg, st.as<device_amp_state>(), stream);
  launch_busy_wait(1000, stream);
  CHECK_CUDA(cudaStreamSynchronize(stream));
  launch_busy_wait(500'000'000, stream);
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) {
    multi_tensor_unscale(grads, st.as<device_amp_state>(), stream);
    sgd_momentum_step({w.as<float>(), n}, g.as<float>(), v.as<float>(), sgd_options{}, st.as<device_amp_state>(),
                      stream);
    scale_update(cfg, st.as<device_amp_state>(), stream);
  }
  enqueue_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const cudaError_t q = cudaStreamQuery(stream);
  CHECK_CUDA(cudaStreamSynchronize(stream));
  CHECK_CUDA(cudaStreamDestroy(stream));
  if (q != cudaErrorNotReady && q != cudaSuccess) CHECK_CUDA(q);
  return q == cudaErrorNotReady ? 0 : 1;
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
  if (device_count() == 0) {
    std::printf("SKIPPED: no CUDA device is present; the GPU checks need one.\n");
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
      const std::vector<cast_result> part = compare_casts("sample", in, false);
      sample_combinations = part.size();
      for (const cast_result& r : part) {
        sample_mismatches += r.mismatches;
        sample_counters = sample_counters && r.counters_equal;
      }
    }
    double enqueue_seconds = 0.0;
    const int steps = 100;
    const int syncs = host_syncs_in_scaler_path(steps, enqueue_seconds);

    std::uint64_t code_mismatches = 0;
    bool code_counters = true;
    for (const cast_result& r : casts) {
      code_mismatches += r.mismatches;
      code_counters = code_counters && r.counters_equal;
    }
    const bool pass = code_mismatches == 0 && code_counters && sample_mismatches == 0 && sample_counters && syncs == 0;
    std::ostringstream js;
    js << "{\n  \"device\": \"" << json_escape(info.name)
       << "\",\n  \"compute_capability\": " << info.compute_capability << ",\n  \"table_row\": \""
       << (find_device_for_runtime_name(info.name) ? std::string(find_device_for_runtime_name(info.name)->name) : "")
       << "\",\n  \"cast_fp16_codes\": {\"inputs\": " << codes.size() << ", \"combinations\": " << casts.size()
       << ", \"mismatches\": " << code_mismatches << ", \"counters_equal\": " << (code_counters ? "true" : "false")
       << "},\n  \"cast_seeded_sample\": {\"inputs\": " << sample << ", \"combinations\": " << sample_combinations
       << ", \"mismatches\": " << sample_mismatches << ", \"counters_equal\": " << (sample_counters ? "true" : "false")
       << "},\n  \"scaler_path\": {\"steps\": " << steps << ", \"host_synchronizations\": " << syncs
       << ", \"enqueue_seconds\": " << enqueue_seconds << "},\n  \"pass\": " << (pass ? "true" : "false") << "\n}\n";
    std::fputs(js.str().c_str(), stdout);
    if (!out_path.empty()) {
      const std::string tmp = out_path + ".tmp";
      {
        std::ofstream f(tmp);
        f << js.str();
        if (!f) throw safeamp::error("--out", out_path, "a writable path");
      }
      if (std::rename(tmp.c_str(), out_path.c_str()) != 0) throw safeamp::error("--out", out_path, "a writable path");
    }
    return pass ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_gpu_check: %s\n", e.what());
    return 1;
  }
}
