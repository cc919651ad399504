// cuBLASLt GEMMs against a double-precision CPU product of the same (exactly representable) inputs.
// Tolerance: |D - ref| <= (2 k u_acc + u_out) sum_l |a_il b_lj| + the output format's smallest subnormal,
// the classical bound k u sum|a||b| for recursive summation (Higham, Thm 3.1 / eq. 3.5) with a factor 2
// for the unspecified summation order inside tensor cores, plus the final rounding of D to its format.
#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "device_util.hpp"
#include "safeamp/cuda/device.hpp"
#include "safeamp/cuda/gemm.hpp"
#include "safeamp/cuda/memory_probe.hpp"
#include "safeamp/format.hpp"

using namespace safeamp;
using namespace safeamp::cuda;
using safeamp::cuda::testing::device_array;

namespace {

// Values in [-1, 1) rounded to the input format, so the products the GPU forms are the ones we form.
std::vector<float> inputs(std::size_t n, format_spec f, std::uint32_t stream) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const float x = static_cast<float>(stochastic_bits(3, stream, i)) / 2147483648.0f - 1.0f;
    v[i] = round_to(f, x);
  }
  return v;
}

// Device bytes of the values in format f (codes for 8/16-bit formats, floats for fp32/tf32).
struct device_operand {
  explicit device_operand(const std::vector<float>& v, format_spec f) : buf(v.size() * 4) {
    const int bytes = storage_bytes(f);
    std::vector<unsigned char> raw(v.size() * static_cast<std::size_t>(bytes));
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (bytes == 4) {
        std::memcpy(&raw[4 * i], &v[i], 4);
      } else {
        const std::uint32_t code = encode(f, v[i]);
        for (int b = 0; b < bytes; ++b)
          raw[static_cast<std::size_t>(bytes) * i + static_cast<std::size_t>(b)] =
              static_cast<unsigned char>(code >> (8 * b));
      }
    }
    TEST_CUDA_CHECK(cudaMemcpy(buf.data(), raw.data(), raw.size(), cudaMemcpyHostToDevice));
  }
  device_buffer buf;
};

std::vector<float> download_output(const device_buffer& d, std::size_t n, format_spec f) {
  const int bytes = storage_bytes(f);
  std::vector<unsigned char> raw(n * static_cast<std::size_t>(bytes));
  TEST_CUDA_CHECK(cudaMemcpy(raw.data(), d.data(), raw.size(), cudaMemcpyDeviceToHost));
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (bytes == 4) {
      std::memcpy(&out[i], &raw[4 * i], 4);
    } else {
      std::uint32_t code = 0;
      for (int b = 0; b < bytes; ++b)
        code |= static_cast<std::uint32_t>(raw[static_cast<std::size_t>(bytes) * i + static_cast<std::size_t>(b)])
                << (8 * b);
      out[i] = decode(f, code);
    }
  }
  return out;
}

struct case_spec {
  format_spec a, b, accumulate, out;
  epilogue epi = epilogue::none;
};

void run_case(gemm_engine& engine, const case_spec& c, std::int64_t m, std::int64_t n, std::int64_t k) {
  gemm_problem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.types = gemm_types_for(c.a, c.b, c.accumulate, c.out);
  p.epi = c.epi;
  const bool fp8 = p.types.tensor_scales;
  if (fp8) p.op_a = transpose::transposed;  // TN: A stored k x m
  const auto mu = static_cast<std::size_t>(m), nu = static_cast<std::size_t>(n), ku = static_cast<std::size_t>(k);
  const std::vector<float> a = inputs(mu * ku, c.a, 1), b = inputs(ku * nu, c.b, 2);
  const format_spec bias_format = p.types.bias == device_dtype::bf16 ? bf16 : c.out;
  const std::vector<float> bias = inputs(mu, bias_format, 3);
  device_operand da(a, c.a), db(b, c.b), dbias(bias, bias_format);
  device_buffer dd(mu * nu * 4);
  device_array<float> scales(std::vector<float>{0.5f, 4.0f});  // product 2: an ignored scale shows
  gemm_operands o;
  o.a = da.buf.data();
  o.b = db.buf.data();
  o.d = dd.data();
  o.bias = has_bias(c.epi) ? dbias.buf.data() : nullptr;
  o.alpha = 1.0f;
  if (fp8) {
    o.a_scale = scales.data();
    o.b_scale = scales.data() + 1;
  }
  engine.run(p, o, nullptr);
  TEST_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> d = download_output(dd, mu * nu, c.out);

  const double u_acc = unit_roundoff(c.accumulate), u_out = unit_roundoff(c.out);
  const double scale = fp8 ? 0.5 * 4.0 : 1.0;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < mu; ++i) {
    for (std::size_t j = 0; j < nu; ++j) {
      double ref = 0.0, mag = 0.0;
      for (std::size_t l = 0; l < ku; ++l) {
        const double av = fp8 ? a[l + i * ku] : a[i + l * mu];  // TN: A(i,l) stored at [l + i k]
        const double prod = av * b[l + j * ku] * scale;
        ref += prod;
        mag += std::fabs(prod);
      }
      if (has_bias(c.epi)) {
        ref += bias[i];
        mag += std::fabs(bias[i]);
      }
      if (c.epi == epilogue::bias_relu || c.epi == epilogue::relu) ref = ref > 0.0 ? ref : 0.0;
      const double tol = (2.0 * static_cast<double>(k) * u_acc + u_out) * mag + min_subnormal(c.out);
      const double got = d[i + j * mu];
      if (!(std::fabs(got - ref) <= tol)) {
        if (bad++ == 0) {
          INFO("D(" << i << "," << j << ") = " << got << ", reference " << ref << ", tolerance " << tol);
          CHECK(std::fabs(got - ref) <= tol);
        }
      }
    }
  }
  INFO(format_name(c.a) << " x " << format_name(c.b) << " -> " << format_name(c.out) << " epilogue "
                        << static_cast<int>(c.epi));
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("cuBLASLt GEMMs match a double reference within the accumulation bound", "[cuda][gpu][gemm]") {
  gemm_engine engine;
  const int cc = current_device().compute_capability;
  run_case(engine, {fp32, fp32, fp32, fp32}, 96, 80, 200);
  run_case(engine, {tf32, tf32, fp32, fp32}, 96, 80, 200);
  run_case(engine, {fp16, fp16, fp32, fp32}, 96, 80, 200);
  run_case(engine, {fp16, fp16, fp32, fp16}, 96, 80, 200);
  run_case(engine, {bf16, bf16, fp32, bf16}, 96, 80, 200);
  run_case(engine, {fp16, fp16, fp32, fp32, epilogue::bias_relu}, 96, 80, 200);
  run_case(engine, {bf16, bf16, fp32, fp32, epilogue::bias}, 96, 80, 200);
  run_case(engine, {fp16, fp16, fp16, fp16}, 64, 48, 64);
  if (cc >= 89) {
    run_case(engine, {fp8_e4m3, fp8_e4m3, fp32, bf16}, 96, 80, 208);
    run_case(engine, {fp8_e5m2, fp8_e4m3, fp32, fp32}, 96, 80, 208);
  } else {
    WARN("fp8 GEMMs need sm_89+; this device is sm_" << cc);
  }
}

namespace {
// D (m x n, fp32) = A (m x k, fp16) B (k x n, fp16), column-major, no transposes.
gemm_problem fp16_problem(std::int64_t m, std::int64_t n, std::int64_t k) {
  gemm_problem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.types = gemm_types_for(fp16, fp16, fp32, fp32);
  return p;
}
}  // namespace

TEST_CASE("the plan cache runs the heuristic once per problem", "[cuda][gpu][gemm]") {
  gemm_engine engine;
  const std::int64_t m = 128, n = 64, k = 32;
  gemm_problem p = fp16_problem(m, n, k);
  device_buffer a(static_cast<std::size_t>(m * k) * 2), b(static_cast<std::size_t>(k * n) * 2),
      d(static_cast<std::size_t>(m * n) * 4);
  TEST_CUDA_CHECK(cudaMemset(a.data(), 0, a.size_bytes()));
  TEST_CUDA_CHECK(cudaMemset(b.data(), 0, b.size_bytes()));
  const gemm_operands o{.a = a.data(), .b = b.data(), .d = d.data()};
  for (int i = 0; i < 5; ++i) engine.run(p, o, nullptr);
  p.n = 32;
  engine.run(p, o, nullptr);
  TEST_CUDA_CHECK(cudaDeviceSynchronize());
  CHECK(engine.cache_stats() == plan_cache_stats{.hits = 4, .misses = 2, .entries = 2});
  // operands are checked before any call into cuBLASLt
  gemm_operands missing = o;
  missing.d = nullptr;
  CHECK_THROWS_AS(engine.run(p, missing, nullptr), safeamp::error);
}

TEST_CASE("two streams get their own workspace and plans; offset operands their own plan", "[cuda][gpu][gemm]") {
  gemm_engine engine;
  const std::int64_t m = 64, n = 64, k = 64;
  const gemm_problem p = fp16_problem(m, n, k);
  // A at an offset of 2 bytes (one fp16) into a larger buffer: only 2-byte alignment
  device_buffer a(static_cast<std::size_t>(m * k) * 2 + 256), b(static_cast<std::size_t>(k * n) * 2),
      d1(static_cast<std::size_t>(m * n) * 4), d2(static_cast<std::size_t>(m * n) * 4);
  TEST_CUDA_CHECK(cudaMemset(a.data(), 0, a.size_bytes()));
  TEST_CUDA_CHECK(cudaMemset(b.data(), 0, b.size_bytes()));
  cudaStream_t s1 = nullptr, s2 = nullptr;
  TEST_CUDA_CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  TEST_CUDA_CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  const gemm_operands aligned{.a = a.data(), .b = b.data(), .d = d1.data()};
  const gemm_operands offset{.a = static_cast<const char*>(a.data()) + 2, .b = b.data(), .d = d2.data()};
  for (int i = 0; i < 3; ++i) {
    engine.run(p, aligned, s1);
    engine.run(p, offset, s2);
  }
  TEST_CUDA_CHECK(cudaStreamSynchronize(s1));
  TEST_CUDA_CHECK(cudaStreamSynchronize(s2));
  CHECK(engine.streams() == 3);  // default stream + s1 + s2
  CHECK(engine.cache_stats() == plan_cache_stats{.hits = 4, .misses = 2, .entries = 2});
  // Released before its stream is destroyed: s2's workspace is freed (live bytes down by exactly one workspace),
  // s1's and the default stream's stay; releasing the default stream changes nothing.
  const std::uint64_t live = device_allocations().live_bytes();
  engine.release_stream(s2);
  CHECK(engine.streams() == 2);
  CHECK(device_allocations().live_bytes() == live - engine.workspace_bytes());
  engine.release_stream(nullptr);
  engine.release_stream(s2);  // no slot left: nothing
  CHECK(engine.streams() == 2);
  engine.run(p, offset, s2);  // used again: a new slot
  TEST_CUDA_CHECK(cudaStreamSynchronize(s2));
  CHECK(engine.streams() == 3);
  engine.release_stream(s1);
  engine.release_stream(s2);
  CHECK(engine.streams() == 1);
  TEST_CUDA_CHECK(cudaStreamDestroy(s1));
  TEST_CUDA_CHECK(cudaStreamDestroy(s2));
}

TEST_CASE("each thread's per-thread default stream gets its own workspace", "[cuda][gpu][gemm]") {
  // cudaStreamPerThread is a different stream on every host thread, and two threads' streams run at once: one shared
  // workspace would be written by both GEMMs (the slot used to be keyed by the handle value, the same on every thread).
  gemm_engine engine;
  const std::int64_t m = 64, n = 64, k = 64;
  const gemm_problem p = fp16_problem(m, n, k);
  device_buffer a(static_cast<std::size_t>(m * k) * 2), b(static_cast<std::size_t>(k * n) * 2);
  TEST_CUDA_CHECK(cudaMemset(a.data(), 0, a.size_bytes()));
  TEST_CUDA_CHECK(cudaMemset(b.data(), 0, b.size_bytes()));
  constexpr int threads = 3;
  std::vector<device_buffer> d;
  d.reserve(threads);
  for (int t = 0; t < threads; ++t) d.emplace_back(static_cast<std::size_t>(m * n) * 4);
  std::atomic<int> ran{0}, released{0};
  std::atomic<bool> release_now{false};
  std::vector<std::thread> workers;
  std::vector<int> failures(threads, 0);
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      try {
        TEST_CUDA_CHECK(cudaSetDevice(0));
        const gemm_operands o{.a = a.data(), .b = b.data(), .d = d[static_cast<std::size_t>(t)].data()};
        engine.run(p, o, cudaStreamPerThread);
        engine.run(p, o, cudaStreamPerThread);  // the same thread keeps its slot
        TEST_CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread));
        ++ran;
        while (!release_now) std::this_thread::yield();
        engine.release_stream(cudaStreamPerThread);  // this thread's slot only
        ++released;
      } catch (...) {
        failures[static_cast<std::size_t>(t)] = 1;
        ++ran;
        ++released;
      }
    });
  }
  while (ran < threads) std::this_thread::yield();
  CHECK(engine.streams() == 1 + threads);  // the legacy default stream's slot and one per thread
  release_now = true;
  for (std::thread& w : workers) w.join();
  CHECK(engine.streams() == 1);
  for (const int f : failures) CHECK(f == 0);
}
