// cuBLASLt GEMM: per stream, a workspace and a cache of plans (matmul descriptor, layouts, the heuristic's
// algorithm) keyed by the problem and the operands' alignment, so two streams never share a workspace or a
// descriptor whose pointer attributes are being set. Each stream's slot is used under its own lock
// (stream_slots.hpp), so cache_stats() from another thread never reads a plan cache that run() is changing;
// the per-thread default stream (cudaStreamPerThread) gets a slot per host thread, since each thread's is a
// different stream. Every status checked.
#include "safeamp/cuda/gemm.hpp"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <utility>

#include "check.hpp"
#include "safeamp/cuda/memory_probe.hpp"
#include "safeamp/cuda/nvtx.hpp"
#include "safeamp/cuda/stream_slots.hpp"
#include "safeamp/format/round.hpp"

namespace safeamp::cuda {

int to_cublaslt_epilogue(epilogue e) noexcept {
  switch (e) {
    case epilogue::none:
      return CUBLASLT_EPILOGUE_DEFAULT;
    case epilogue::relu:
      return CUBLASLT_EPILOGUE_RELU;
    case epilogue::gelu:
      return CUBLASLT_EPILOGUE_GELU;
    case epilogue::bias:
      return CUBLASLT_EPILOGUE_BIAS;
    case epilogue::bias_relu:
      return CUBLASLT_EPILOGUE_RELU_BIAS;
    case epilogue::bias_gelu:
      return CUBLASLT_EPILOGUE_GELU_BIAS;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

namespace {

// What a null stream handle names in this file's runtime calls: the legacy default stream unless this library was
// compiled with per-thread default streams (nvcc --default-stream per-thread or CUDA_API_PER_THREAD_DEFAULT_STREAM,
// which then names the calling thread's stream).
#ifdef CUDA_API_PER_THREAD_DEFAULT_STREAM
constexpr null_stream library_null_stream = null_stream::per_thread;
#else
constexpr null_stream library_null_stream = null_stream::legacy;
#endif

// The handle handed to cuBLASLt: a null handle made explicit where this file's null is the per-thread stream, so that
// cuBLASLt (compiled on its own, where null is the legacy stream) runs on the stream the slot was chosen for.
cudaStream_t runtime_stream(void* stream) noexcept {
  if (stream == nullptr && library_null_stream == null_stream::per_thread) return cudaStreamPerThread;
  return static_cast<cudaStream_t>(stream);
}

struct lt_plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};

  lt_plan() = default;
  lt_plan(const lt_plan&) = delete;
  lt_plan& operator=(const lt_plan&) = delete;
  lt_plan(lt_plan&& o) noexcept : op(o.op), a(o.a), b(o.b), c(o.c), d(o.d), algo(o.algo) {
    o.op = nullptr;
    o.a = o.b = o.c = o.d = nullptr;
  }
  ~lt_plan() {
    // Destruction statuses cannot be reported from a destructor; the handles are freed best-effort.
    if (a != nullptr) (void)cublasLtMatrixLayoutDestroy(a);
    if (b != nullptr) (void)cublasLtMatrixLayoutDestroy(b);
    if (c != nullptr) (void)cublasLtMatrixLayoutDestroy(c);
    if (d != nullptr) (void)cublasLtMatrixLayoutDestroy(d);
    if (op != nullptr) (void)cublasLtMatmulDescDestroy(op);
  }
};

cublasLtMatrixLayout_t make_layout(const matrix_layout& l) {
  cublasLtMatrixLayout_t h = nullptr;
  SAFEAMP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&h, static_cast<cudaDataType_t>(to_cuda_data_type(l.type)),
                                                  static_cast<std::uint64_t>(l.rows),
                                                  static_cast<std::uint64_t>(l.cols), l.ld));
  return h;
}

template <class T>
void set_desc(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attr, const T& value) {
  SAFEAMP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, attr, &value, sizeof(value)));
}

}  // namespace

struct stream_slot {
  device_buffer workspace;
  plan_cache<lt_plan, plan_key, plan_key_hash> plans;
};

struct gemm_engine::impl {
  cublasLtHandle_t handle = nullptr;
  std::size_t workspace_bytes = 0;
  int compute_capability = 0;
  stream_slots<stream_slot> slots{library_null_stream};  // a stream's plans and workspace, used under its lock

  [[nodiscard]] stream_slot new_slot() const {
    stream_slot fresh;
    fresh.workspace = device_buffer(workspace_bytes);
    return fresh;
  }

  lt_plan make_plan(const plan_key& key, std::uint64_t ws) {
    const gemm_problem& p = key.problem;
    const gemm_layouts l = describe(p);
    lt_plan plan;
    SAFEAMP_CUBLAS_CHECK(
        cublasLtMatmulDescCreate(&plan.op, static_cast<cublasComputeType_t>(to_cublas_compute_type(p.types.compute)),
                                 static_cast<cudaDataType_t>(to_cuda_data_type(p.types.scale))));
    const cublasOperation_t ta = p.op_a == transpose::transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = p.op_b == transpose::transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
    set_desc(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, ta);
    set_desc(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, tb);
    const auto epi = static_cast<cublasLtEpilogue_t>(to_cublaslt_epilogue(p.epi));
    set_desc(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE, epi);
    if (has_bias(p.epi)) {
      const auto bias_type = static_cast<std::int32_t>(to_cuda_data_type(p.types.bias));
      set_desc(plan.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type);
    }
    plan.a = make_layout(l.a);
    plan.b = make_layout(l.b);
    plan.c = make_layout(l.c);
    plan.d = make_layout(l.d);

    cublasLtMatmulPreference_t pref = nullptr;
    SAFEAMP_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    cublasStatus_t status =
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    // Only algorithms that work with these operands' alignment (an operand at an offset into a buffer).
    const std::pair<cublasLtMatmulPreferenceAttributes_t, std::uint32_t> alignments[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_d}};
    for (const auto& [attr, bytes] : alignments) {
      if (status == CUBLAS_STATUS_SUCCESS) {
        status = cublasLtMatmulPreferenceSetAttribute(pref, attr, &bytes, sizeof(bytes));
      }
    }
    if (status == CUBLAS_STATUS_SUCCESS) {
      status =
          cublasLtMatmulAlgoGetHeuristic(handle, plan.op, plan.a, plan.b, plan.c, plan.d, pref, 1, &result, &found);
    }
    (void)cublasLtMatmulPreferenceDestroy(pref);
    // cublasLt.h: NOT_SUPPORTED when no heuristic exists for this configuration, and on SUCCESS each returned
    // result's own `state` says whether it is usable: both are "no algorithm for this problem", a safeamp::error
    // naming the problem, not a cuBLAS failure.
    const bool no_algorithm =
        status == CUBLAS_STATUS_NOT_SUPPORTED ||
        (status == CUBLAS_STATUS_SUCCESS && (found == 0 || result.state != CUBLAS_STATUS_SUCCESS));
    if (no_algorithm) {
      throw error("gemm problem",
                  std::to_string(p.m) + " x " + std::to_string(p.n) + " x " + std::to_string(p.k) + " " +
                      std::string(dtype_name(p.types.a)) + " -> " + std::string(dtype_name(p.types.d)),
                  "a problem for which cuBLASLt's heuristic returns an algorithm on this GPU");
    }
    SAFEAMP_CUBLAS_CHECK(status);
    plan.algo = result.algo;
    return plan;
  }
};

gemm_engine::gemm_engine(gemm_engine_options options) : impl_(std::make_unique<impl>()) {
  int device = 0;
  SAFEAMP_CUDA_CHECK(cudaGetDevice(&device));
  int major = 0, minor = 0;
  SAFEAMP_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  SAFEAMP_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  impl_->compute_capability = 10 * major + minor;
  impl_->workspace_bytes = options.workspace_bytes;
  SAFEAMP_CUBLAS_CHECK(cublasLtCreate(&impl_->handle));
  try {
    // the default stream's workspace, allocated up front
    impl_->slots.with_slot(
        nullptr, [this] { return impl_->new_slot(); }, [](stream_slot&) {});
  } catch (...) {
    (void)cublasLtDestroy(impl_->handle);
    throw;
  }
}

gemm_engine::~gemm_engine() {
  if (impl_ && impl_->handle != nullptr) {
    impl_->slots.clear();
    (void)cublasLtDestroy(impl_->handle);
  }
}

void gemm_engine::release_stream(void* stream) {
  if (impl_->slots.key_of(stream) == stream_key{}) return;  // the legacy default stream's slot stays
  SAFEAMP_CUDA_CHECK(cudaStreamSynchronize(runtime_stream(stream)));
  (void)impl_->slots.erase(stream);
}

void gemm_engine::run(const gemm_problem& p, const gemm_operands& o, void* stream) {
  if (p.types.min_compute_capability > impl_->compute_capability) {
    throw error("gemm types",
                std::string(dtype_name(p.types.a)) + " x " + std::string(dtype_name(p.types.b)) + " (needs sm_" +
                    std::to_string(p.types.min_compute_capability) + ")",
                "types this GPU (sm_" + std::to_string(impl_->compute_capability) + ") supports");
  }
  if (o.a == nullptr || o.b == nullptr || o.d == nullptr) {
    throw error("gemm operands", "a null A, B or D pointer", "device pointers for A, B and D");
  }
  if (o.beta != 0.0f && o.c == nullptr) throw error("gemm operands C", "nullptr with beta != 0", "a C pointer");
  if (has_bias(p.epi) && o.bias == nullptr) throw error("gemm operands bias", "nullptr", "a bias pointer");
  if (p.types.tensor_scales && (o.a_scale == nullptr || o.b_scale == nullptr)) {
    throw error("gemm operands fp8 scales", "nullptr", "device pointers to A's and B's per-tensor scales");
  }
  const void* c = o.c != nullptr ? o.c : o.d;
  // alpha/beta in the descriptor's scale type: fp32, or fp16 bits for CUBLAS_COMPUTE_16F.
  float alpha32 = o.alpha, beta32 = o.beta;
  std::uint16_t alpha16 = static_cast<std::uint16_t>(encode(fp16, o.alpha));
  std::uint16_t beta16 = static_cast<std::uint16_t>(encode(fp16, o.beta));
  const bool half_scale = p.types.scale == device_dtype::f16;
  const void* alpha = half_scale ? static_cast<const void*>(&alpha16) : static_cast<const void*>(&alpha32);
  const void* beta = half_scale ? static_cast<const void*>(&beta16) : static_cast<const void*>(&beta32);
  const plan_key key = make_plan_key(p, o.a, o.b, c, o.d);
  const nvtx_range range("safeamp gemm");
  // The slot stays locked while its plan's pointer attributes are set and the call is enqueued (no wait).
  impl_->slots.with_slot(
      stream, [this] { return impl_->new_slot(); },
      [&](stream_slot& slot) {
        const std::uint64_t ws = slot.workspace.size_bytes();
        lt_plan& plan =
            slot.plans.get_or_create(key, [this, ws](const plan_key& k) { return impl_->make_plan(k, ws); });
        if (has_bias(p.epi)) set_desc(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, o.bias);
        if (p.types.tensor_scales) {
          set_desc(plan.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(o.a_scale));
          set_desc(plan.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(o.b_scale));
        }
        SAFEAMP_CUBLAS_CHECK(cublasLtMatmul(impl_->handle, plan.op, alpha, o.a, plan.a, o.b, plan.b, beta, c, plan.c,
                                            o.d, plan.d, &plan.algo, slot.workspace.data(), ws,
                                            runtime_stream(stream)));
      });
}

plan_cache_stats gemm_engine::cache_stats() const {
  plan_cache_stats total;
  impl_->slots.for_each([&total](const stream_slot& slot) { total += slot.plans.stats(); });
  return total;
}
std::size_t gemm_engine::workspace_bytes() const noexcept { return impl_->workspace_bytes; }
std::size_t gemm_engine::streams() const { return impl_->slots.size(); }

}  // namespace safeamp::cuda
