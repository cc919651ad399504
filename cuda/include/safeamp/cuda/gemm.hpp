// GEMM through cuBLASLt: descriptors built from a gemm_problem, and per stream a workspace and the heuristic's
// algorithm choice cached per problem and operand alignment (plan_cache), so several streams can run GEMMs
// of one engine concurrently. Every call is checked (cuda_error).
#pragma once

#include <cstddef>
#include <memory>

#include "safeamp/cuda/gemm_problem.hpp"
#include "safeamp/cuda/plan_cache.hpp"

namespace safeamp::cuda {

/// Device pointers of one GEMM call. Scale pointers are device floats, required for fp8 problems
/// (types.tensor_scales): D = alpha * (a_scale * A) (b_scale * B) + beta * C.
struct gemm_operands {
  const void* a = nullptr;
  const void* b = nullptr;
  const void* c = nullptr;  // may be nullptr when beta == 0 (then D is used as C)
  void* d = nullptr;
  const void* bias = nullptr;  // length m, types.bias, required by bias epilogues
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
  float alpha = 1.0f;
  float beta = 0.0f;
};

struct gemm_engine_options {
  std::size_t workspace_bytes = std::size_t{32} << 20;  // per stream; 32 MiB: what cuBLASLt recommends for Hopper
};

/// cuBLASLt epilogue value (CUBLASLT_EPILOGUE_*) of our epilogue.
[[nodiscard]] int to_cublaslt_epilogue(epilogue e) noexcept;

class gemm_engine {
 public:
  /// Creates the cuBLASLt handle and allocates the default stream's workspace on the current device (throws
  /// cuda_error). Each other stream gets its own workspace and plans at its first run().
  explicit gemm_engine(gemm_engine_options options = {});
  ~gemm_engine();
  gemm_engine(const gemm_engine&) = delete;
  gemm_engine& operator=(const gemm_engine&) = delete;

  /// Enqueues D = op(A) op(B) (+ C, bias, activation) on `stream` (a cudaStream_t). nullptr is the legacy default
  /// stream (this library is compiled without per-thread default streams, so a nullptr from code compiled with
  /// --default-stream per-thread still means the legacy stream here): such code passes cudaStreamPerThread, which
  /// names the calling thread's own default stream and gets a workspace and plans for that thread alone.
  /// Validates the problem (safeamp::error) and operands (missing bias / fp8 scales); a problem whose
  /// types need a newer GPU than the current one throws safeamp::error naming both compute capabilities.
  void run(const gemm_problem& problem, const gemm_operands& operands, void* stream);

  /// Frees the workspace and plans of `stream` (a cudaStream_t that ran GEMMs on this engine), after waiting for
  /// the stream (its queued GEMMs use that workspace): call it before cudaStreamDestroy, and with no thread running
  /// GEMMs on that stream. Otherwise a stream's workspace (32 MiB by default) lives as long as the engine, however
  /// many streams come and go. cudaStreamPerThread releases the calling thread's slot (call it on each thread that
  /// ran GEMMs on its per-thread default stream, before the thread ends). The legacy default stream's (nullptr,
  /// cudaStreamLegacy) lives as long as the engine; releasing it, or a stream this engine never ran on, does nothing.
  /// Throws cuda_error when the wait fails.
  void release_stream(void* stream);

  /// Plan-cache counters summed over every stream.
  [[nodiscard]] plan_cache_stats cache_stats() const;
  /// The workspace of one stream.
  [[nodiscard]] std::size_t workspace_bytes() const noexcept;
  /// Streams with a workspace of their own (the legacy default stream included; each thread's per-thread default
  /// stream counted once).
  [[nodiscard]] std::size_t streams() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace safeamp::cuda
