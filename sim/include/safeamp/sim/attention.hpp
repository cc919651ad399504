// Causal multi-head softmax attention on a fused QKV input, per (sequence, head) as independent tasks:
//   S = alpha Q K^T (alpha = 1/sqrt(head_dim); GEMM output in the softmax format, as fused attention
//   keeps scores in its softmax precision), causal mask, P = softmax(S) in the softmax format,
//   O = P V (output in policy.output). Under a policy with fp16 softmax, scores beyond 65504 overflow
//   here; with an fp32 softmax (fp16-mixed) they do not.
#pragma once

#include <cstdint>
#include <vector>

#include "safeamp/policy/precision_policy.hpp"
#include "safeamp/sim/tensor.hpp"

namespace safeamp::sim {

/// Row softmax of s (columns > limit(r) masked when causal) in format f: inputs taken as they are, the
/// max subtracted, exp and the left-to-right sum rounded to f at every step, p = e / sum rounded to f.
void softmax_rows(format_spec f, const matrix& s, matrix& p, bool causal);

/// Row softmax backward: ds = p * (dp - sum_j dp_j p_j), in format f.
void softmax_rows_backward(format_spec f, const matrix& p, const matrix& dp, matrix& ds);

struct attention_op {
  std::int64_t sequences = 0;  // B
  std::int64_t context = 0;    // T
  std::int64_t heads = 0;      // H
  std::int64_t head_dim = 0;   // width / H
  matrix qkv;                  // cached (B*T, 3*width), rounded to the matmul format by the forward
  format_spec qkv_format = fp32;  // the format qkv holds values of (the forward's matmul format)
  std::vector<matrix> probs;   // cached P per (b, h), (T, T)
  cast_stats score_stats{};    // counters of this call's score casts (overflow shows up here)

  /// qkv (B*T, 3*width) -> out (B*T, width).
  void forward(exec_context& ctx, const precision_policy& pol, const matrix& qkv_in, matrix& out);
  /// Where a caller may write the next forward's qkv itself (then calling forward_in_place): kept for the backward
  /// without a copy.
  [[nodiscard]] matrix& input_slot() noexcept { return qkv; }
  /// forward() on the qkv the caller wrote into input_slot(). qkv_format_in: a format every element of it is
  /// already a value of (policy.output for a stored activation); its rounding to the matmul format is skipped
  /// when it is that format (the same bits). fp32 promises nothing.
  void forward_in_place(exec_context& ctx, const precision_policy& pol, format_spec qkv_format_in, matrix& out);
  /// dout (B*T, width) -> dqkv (B*T, 3*width). dout_format: as qkv_format_in, for dout; fp32 promises nothing.
  void backward(exec_context& ctx, const precision_policy& pol, const matrix& dout, matrix& dqkv,
                format_spec dout_format = fp32);
};

}  // namespace safeamp::sim
