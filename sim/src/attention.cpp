// Causal multi-head attention and row softmax (see attention.hpp).
#include "safeamp/sim/attention.hpp"

#include <cmath>
#include <limits>
#include <string>

#include "gemm_views.hpp"
#include "safeamp/error.hpp"
#include "safeamp/sim/parallel.hpp"
#include "scalar_round.hpp"

namespace safeamp::sim {

void softmax_rows(format_spec f, const matrix& s, matrix& p, bool causal) {
  p.setZero(s.rows(), s.cols());
  detail::with_round(f, [&](auto rf) {  // rf(v) == round_scalar(f, v)
    for (Eigen::Index r = 0; r < s.rows(); ++r) {
      const float* sr = s.data() + r * s.cols();
      float* pr = p.data() + r * p.cols();
      const Eigen::Index limit = causal ? std::min<Eigen::Index>(r + 1, s.cols()) : s.cols();
      float m = -std::numeric_limits<float>::infinity();
      bool any_nan = false;
      for (Eigen::Index j = 0; j < limit; ++j) {
        const float x = sr[j];
        any_nan = any_nan || std::isnan(x);
        m = x > m ? x : m;
      }
      if (any_nan) m = std::numeric_limits<float>::quiet_NaN();
      float sum = 0.0f;
      for (Eigen::Index j = 0; j < limit; ++j) {
        const float e = rf(std::exp(rf(sr[j] - m)));
        pr[j] = e;
        sum = rf(sum + e);
      }
      for (Eigen::Index j = 0; j < limit; ++j) pr[j] = rf(pr[j] / sum);
    }
  });
}

void softmax_rows_backward(format_spec f, const matrix& p, const matrix& dp, matrix& ds) {
  ds.resize(p.rows(), p.cols());
  detail::with_round(f, [&](auto rf) {  // rf(v) == round_scalar(f, v)
    for (Eigen::Index r = 0; r < p.rows(); ++r) {
      const float* pr = p.data() + r * p.cols();
      const float* dpr = dp.data() + r * dp.cols();
      float* dsr = ds.data() + r * ds.cols();
      float dot = 0.0f;
      for (Eigen::Index j = 0; j < p.cols(); ++j) dot = rf(dot + rf(dpr[j] * pr[j]));
      for (Eigen::Index j = 0; j < p.cols(); ++j) dsr[j] = rf(pr[j] * rf(dpr[j] - dot));
    }
  });
}

namespace {

philox_key task_key(philox_key base, std::int64_t task, std::int64_t elements_per_task) {
  base.offset = static_cast<std::uint64_t>(task) * static_cast<std::uint64_t>(elements_per_task);
  return base;
}

}  // namespace

void attention_op::forward(exec_context& ctx, const precision_policy& pol, const matrix& qkv_in, matrix& out) {
  if (&qkv_in != &qkv) qkv = qkv_in;
  forward_in_place(ctx, pol, fp32, out);
}

void attention_op::forward_in_place(exec_context& ctx, const precision_policy& pol, format_spec qkv_format_in,
                                    matrix& out) {
  const std::int64_t width = heads * head_dim;
  if (qkv.cols() != 3 * width || qkv.rows() != sequences * context) {
    throw error("attention qkv shape", std::to_string(qkv.rows()) + "x" + std::to_string(qkv.cols()),
                std::to_string(sequences * context) + "x" + std::to_string(3 * width));
  }
  out.resize(sequences * context, width);
  const std::int64_t tasks = sequences * heads;
  // P of every (b, h) is kept for the backward; between steps of the same shape the matrices keep their memory.
  if (probs.size() != static_cast<std::size_t>(tasks)) probs.assign(static_cast<std::size_t>(tasks), matrix());
  std::vector<cast_stats> stats(static_cast<std::size_t>(tasks));
  const format_spec fs = pol.format_for(op_class::softmax);
  const format_spec fm = pol.format_for(op_class::matmul);
  const float alpha = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const philox_key k_scores = ctx.next_key();
  const philox_key k_probs = ctx.next_key();
  const philox_key k_out = ctx.next_key();
  const std::int64_t tt = context * context;
  // The head GEMMs' operands are rounded to the matmul format before them: QKV once per call, in place (the
  // backward reads it only rounded), unless its producer stored it in that format; P once per head, unless the
  // policy stores it in that format.
  const detail::prerounded both{.a = true, .b = true};
  detail::operand_in_place(fm, qkv_format_in, qkv, ctx.threads, "attention qkv");
  qkv_format = fm;
  const matrix& low = qkv;
  auto run = [&](std::int64_t task) {
    const std::int64_t b = task / heads;
    const std::int64_t h = task % heads;
    // Q, K, V of this head are read in place, and O is written in place into `out`.
    const detail::strided_view q = detail::block_of(low, b * context, h * head_dim, context, head_dim);
    const detail::strided_view k = detail::block_of(low, b * context, width + h * head_dim, context, head_dim);
    const detail::strided_view v = detail::block_of(low, b * context, 2 * width + h * head_dim, context, head_dim);
    thread_local matrix s, p_low;  // scores (T, T) and P in the matmul format, reused by this thread's tasks
    s.resize(context, context);
    cast_stats& st = stats[static_cast<std::size_t>(task)];
    st += detail::gemm_views(
        {fm, pol.accumulate, fs}, q, k.transposed(), detail::output_block(s, 0, 0, context, context),
        {.alpha = alpha, .rounding = ctx.rounding, .key = task_key(k_scores, task, tt), .threads = 1}, both);
    matrix& p = probs[static_cast<std::size_t>(task)];
    softmax_rows(fs, s, p, true);
    (void)cast_in_place(p, pol.output, ctx.rounding, task_key(k_probs, task, tt));
    const matrix& p_m = detail::operand_from(fm, pol.output, p, p_low, 1, "attention probabilities");
    (void)detail::gemm_views({fm, pol.accumulate, pol.output}, detail::view_of(p_m), v,
                             detail::output_block(out, b * context, h * head_dim, context, head_dim),
                             {.rounding = ctx.rounding, .key = task_key(k_out, task, tt), .threads = 1}, both);
  };
  parallel_for(ctx.threads, tasks, run);
  score_stats = cast_stats{};
  for (const cast_stats& s : stats) score_stats += s;
  ctx.activation_stats += score_stats;
}

void attention_op::backward(exec_context& ctx, const precision_policy& pol, const matrix& dout, matrix& dqkv,
                            format_spec dout_format) {
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
  const detail::prerounded both{.a = true, .b = true};  // as in the forward: QKV, dO, P and dS rounded beforehand
  thread_local matrix qkv_scratch, dout_scratch;        // the caller's; the tasks reach them through the references
  const matrix& qkv_low = detail::operand_from(fm, qkv_format, qkv, qkv_scratch, ctx.threads, "attention kept qkv");
  const matrix& dout_low =
      detail::operand_from(fm, dout_format, dout, dout_scratch, ctx.threads, "attention output gradient");
  auto run = [&](std::int64_t task) {
    const std::int64_t b = task / heads;
    const std::int64_t h = task % heads;
    const std::int64_t row = b * context;
    // Operands read in place; dQ, dK, dV written in place into dqkv (each task its own blocks, which no task reads).
    const detail::strided_view q = detail::block_of(qkv_low, row, h * head_dim, context, head_dim);
    const detail::strided_view k = detail::block_of(qkv_low, row, width + h * head_dim, context, head_dim);
    const detail::strided_view v = detail::block_of(qkv_low, row, 2 * width + h * head_dim, context, head_dim);
    const detail::strided_view dout_h = detail::block_of(dout_low, row, h * head_dim, context, head_dim);
    const matrix& p = probs[static_cast<std::size_t>(task)];
    thread_local matrix dp, ds, p_low, ds_low;  // (T, T), reused by the tasks this thread runs
    dp.resize(context, context);
    const auto opts = [&](int key, float a) {
      return gemm_options{.alpha = a, .rounding = ctx.rounding, .key = task_key(keys[key], task, tt), .threads = 1};
    };
    (void)detail::gemm_views(fg, dout_h, v.transposed(), detail::output_block(dp, 0, 0, context, context),
                             opts(0, 1.0f), both);  // dP = dO V^T
    const matrix& p_m = detail::operand_from(fm, pol.output, p, p_low, 1, "attention probabilities");
    (void)detail::gemm_views(fg, detail::view_of(p_m, transpose::transposed), dout_h,
                             detail::output_block(dqkv, row, 2 * width + h * head_dim, context, head_dim),
                             opts(1, 1.0f), both);  // dV = P^T dO
    softmax_rows_backward(fs, p, dp, ds);
    if (pol.gradient != fs) (void)cast_in_place(ds, pol.gradient, ctx.rounding, task_key(keys[2], task, tt));
    // dS is a value of the gradient format after that cast, and of the softmax format without it.
    const matrix& ds_m =
        detail::operand_from(fm, pol.gradient != fs ? pol.gradient : fs, ds, ds_low, 1, "attention score gradient");
    (void)detail::gemm_views(fg, detail::view_of(ds_m), k,
                             detail::output_block(dqkv, row, h * head_dim, context, head_dim), opts(3, alpha),
                             both);  // dQ = alpha dS K
    (void)detail::gemm_views(fg, detail::view_of(ds_m, transpose::transposed), q,
                             detail::output_block(dqkv, row, width + h * head_dim, context, head_dim), opts(4, alpha),
                             both);  // dK = alpha dS^T Q
  };
  parallel_for(ctx.threads, sequences * heads, run);
}

}  // namespace safeamp::sim
