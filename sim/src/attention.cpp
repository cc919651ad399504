// Causal multi-head attention and row softmax (see attention.hpp).
#include "safeamp/sim/attention.hpp"

#include <cmath>
#include <limits>
#include <string>

#include "safeamp/error.hpp"
#include "safeamp/sim/gemm.hpp"
#include "safeamp/sim/parallel.hpp"

namespace safeamp::sim {

void softmax_rows(format_spec f, const matrix& s, matrix& p, bool causal) {
  p.setZero(s.rows(), s.cols());
  for (Eigen::Index r = 0; r < s.rows(); ++r) {
    const Eigen::Index limit = causal ? std::min<Eigen::Index>(r + 1, s.cols()) : s.cols();
    float m = -std::numeric_limits<float>::infinity();
    bool any_nan = false;
    for (Eigen::Index j = 0; j < limit; ++j) {
      const float x = s(r, j);
      any_nan = any_nan || std::isnan(x);
      m = x > m ? x : m;
    }
    if (any_nan) m = std::numeric_limits<float>::quiet_NaN();
    float sum = 0.0f;
    for (Eigen::Index j = 0; j < limit; ++j) {
      const float e = round_scalar(f, std::exp(round_scalar(f, s(r, j) - m)));
      p(r, j) = e;
      sum = round_scalar(f, sum + e);
    }
    for (Eigen::Index j = 0; j < limit; ++j) p(r, j) = round_scalar(f, p(r, j) / sum);
  }
}

void softmax_rows_backward(format_spec f, const matrix& p, const matrix& dp, matrix& ds) {
  ds.resize(p.rows(), p.cols());
  for (Eigen::Index r = 0; r < p.rows(); ++r) {
    float dot = 0.0f;
    for (Eigen::Index j = 0; j < p.cols(); ++j) dot = round_scalar(f, dot + round_scalar(f, dp(r, j) * p(r, j)));
    for (Eigen::Index j = 0; j < p.cols(); ++j) ds(r, j) = round_scalar(f, p(r, j) * round_scalar(f, dp(r, j) - dot));
  }
}

namespace {

philox_key task_key(philox_key base, std::int64_t task, std::int64_t elements_per_task) {
  base.offset = static_cast<std::uint64_t>(task) * static_cast<std::uint64_t>(elements_per_task);
  return base;
}

}  // namespace

void attention_op::forward(exec_context& ctx, const precision_policy& pol, const matrix& qkv_in, matrix& out) {
  const std::int64_t width = heads * head_dim;
  if (qkv_in.cols() != 3 * width || qkv_in.rows() != sequences * context) {
    throw error("attention qkv shape", std::to_string(qkv_in.rows()) + "x" + std::to_string(qkv_in.cols()),
                std::to_string(sequences * context) + "x" + std::to_string(3 * width));
  }
  qkv = qkv_in;
  out.resize(sequences * context, width);
  const std::int64_t tasks = sequences * heads;
  probs.assign(static_cast<std::size_t>(tasks), matrix());
  std::vector<cast_stats> stats(static_cast<std::size_t>(tasks));
  const format_spec fs = pol.format_for(op_class::softmax);
  const format_spec fm = pol.format_for(op_class::matmul);
  const float alpha = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const philox_key k_scores = ctx.next_key();
  const philox_key k_probs = ctx.next_key();
  const philox_key k_out = ctx.next_key();
  const std::int64_t tt = context * context;
  auto run = [&](std::int64_t task) {
    const std::int64_t b = task / heads;
    const std::int64_t h = task % heads;
    const matrix q = qkv.block(b * context, h * head_dim, context, head_dim);
    const matrix k = qkv.block(b * context, width + h * head_dim, context, head_dim);
    const matrix v = qkv.block(b * context, 2 * width + h * head_dim, context, head_dim);
    matrix s;
    cast_stats& st = stats[static_cast<std::size_t>(task)];
    st += gemm({fm, pol.accumulate, fs}, q, k, s,
               {.alpha = alpha, .trans_b = transpose::transposed, .rounding = ctx.rounding,
                .key = task_key(k_scores, task, tt), .threads = 1});
    matrix& p = probs[static_cast<std::size_t>(task)];
    softmax_rows(fs, s, p, true);
    (void)cast_in_place(p, pol.output, ctx.rounding, task_key(k_probs, task, tt));
    matrix o;
    (void)gemm({fm, pol.accumulate, pol.output}, p, v, o,
               {.rounding = ctx.rounding, .key = task_key(k_out, task, tt), .threads = 1});
    out.block(b * context, h * head_dim, context, head_dim) = o;
  };
  parallel_for(ctx.threads, tasks, run);
  score_stats = cast_stats{};
  for (const cast_stats& s : stats) score_stats += s;
  ctx.activation_stats += score_stats;
}

void attention_op::backward(exec_context& ctx, const precision_policy& pol, const matrix& dout, matrix& dqkv) {
  const std::int64_t width = heads * head_dim;
  if (dout.cols() != width || dout.rows() != sequences * context) {
    throw error("attention output-gradient shape", std::to_string(dout.rows()) + "x" + std::to_string(dout.cols()),
                std::to_string(sequences * context) + "x" + std::to_string(width));
  }
  dqkv.resize(sequences * context, 3 * width);
  const format_spec fs = pol.format_for(op_class::softmax);
  const format_spec fm = pol.format_for(op_class::matmul);
  const gemm_formats fg{fm, pol.accumulate, pol.gradient};
  const float alpha = 1.0f / std::sqrt(static_cast<float>(head_dim));
  philox_key keys[5];
  for (philox_key& k : keys) k = ctx.next_key();
  const std::int64_t tt = context * context;
  auto run = [&](std::int64_t task) {
    const std::int64_t b = task / heads;
    const std::int64_t h = task % heads;
    const matrix q = qkv.block(b * context, h * head_dim, context, head_dim);
    const matrix k = qkv.block(b * context, width + h * head_dim, context, head_dim);
    const matrix v = qkv.block(b * context, 2 * width + h * head_dim, context, head_dim);
    const matrix dout_h = dout.block(b * context, h * head_dim, context, head_dim);
    const matrix& p = probs[static_cast<std::size_t>(task)];
    matrix dp, dv, ds, dq, dk;
    (void)gemm(fg, dout_h, v, dp,
               {.trans_b = transpose::transposed, .rounding = ctx.rounding, .key = task_key(keys[0], task, tt), .threads = 1});
    (void)gemm(fg, p, dout_h, dv,
               {.trans_a = transpose::transposed, .rounding = ctx.rounding, .key = task_key(keys[1], task, tt), .threads = 1});
    softmax_rows_backward(fs, p, dp, ds);
    if (pol.gradient != fs) (void)cast_in_place(ds, pol.gradient, ctx.rounding, task_key(keys[2], task, tt));
    (void)gemm(fg, ds, k, dq, {.alpha = alpha, .rounding = ctx.rounding, .key = task_key(keys[3], task, tt), .threads = 1});
    (void)gemm(fg, ds, q, dk,
               {.alpha = alpha, .trans_a = transpose::transposed, .rounding = ctx.rounding,
                .key = task_key(keys[4], task, tt), .threads = 1});
    dqkv.block(b * context, h * head_dim, context, head_dim) = dq;
    dqkv.block(b * context, width + h * head_dim, context, head_dim) = dk;
    dqkv.block(b * context, 2 * width + h * head_dim, context, head_dim) = dv;
  };
  parallel_for(ctx.threads, sequences * heads, run);
}

}  // namespace safeamp::sim
