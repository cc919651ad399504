// Emulated GEMM (see gemm.hpp for the semantics and the accumulation order).
#include "safeamp/sim/gemm.hpp"

#include <string>

#include "safeamp/error.hpp"
#include "safeamp/format/format_names.hpp"
#include "safeamp/sim/parallel.hpp"

namespace safeamp::sim {
namespace {

std::string shape(Eigen::Index r, Eigen::Index c) { return std::to_string(r) + "x" + std::to_string(c); }

// Work (multiply-adds) below which threads are not started: their start-up costs more than they save.
constexpr double parallel_min_work = 1 << 18;

template <class A, class B>
void blocked_fp32(const A& a, const B& b, matrix& d, float alpha, float beta, int threads) {
  const Eigen::Index m = d.rows();
  const std::int64_t blocks = (m + gemm_row_block - 1) / gemm_row_block;
  auto run = [&](std::int64_t blk) {
    const Eigen::Index r0 = blk * gemm_row_block;
    const Eigen::Index rows = std::min<Eigen::Index>(gemm_row_block, m - r0);
    auto dblk = d.middleRows(r0, rows);
    if (beta == 0.0f) {
      dblk.setZero();
    } else if (beta != 1.0f) {
      dblk *= beta;
    }
    if (alpha == 1.0f) {
      dblk.noalias() += a.middleRows(r0, rows) * b;
    } else {
      dblk.noalias() += alpha * (a.middleRows(r0, rows) * b);
    }
  };
  const double work = static_cast<double>(m) * static_cast<double>(d.cols()) * static_cast<double>(b.rows());
  parallel_for(work >= parallel_min_work ? threads : 1, blocks, run);
}

template <class A, class B>
void sequential_acc(format_spec acc_format, const A& a, const B& b, matrix& d, float alpha, float beta) {
  for (Eigen::Index i = 0; i < d.rows(); ++i) {
    for (Eigen::Index j = 0; j < d.cols(); ++j) {
      float acc = 0.0f;
      for (Eigen::Index k = 0; k < a.cols(); ++k) acc = round_scalar(acc_format, acc + a(i, k) * b(k, j));
      d(i, j) = beta == 0.0f ? alpha * acc : alpha * acc + beta * d(i, j);
    }
  }
}

}  // namespace

cast_stats gemm(const gemm_formats& f, const matrix& a, const matrix& b, matrix& d, const gemm_options& opt) {
  const bool ta = opt.trans_a == transpose::transposed;
  const bool tb = opt.trans_b == transpose::transposed;
  const Eigen::Index m = ta ? a.cols() : a.rows();
  const Eigen::Index ka = ta ? a.rows() : a.cols();
  const Eigen::Index kb = tb ? b.cols() : b.rows();
  const Eigen::Index n = tb ? b.rows() : b.cols();
  if (ka != kb) {
    throw error("gemm op(B) rows", std::to_string(kb) + " (op(A) " + shape(m, ka) + ", op(B) " + shape(kb, n) + ")",
                "the columns of op(A) (" + std::to_string(ka) + ")");
  }
  if (opt.beta != 0.0f && (d.rows() != m || d.cols() != n)) {
    throw error("gemm C shape", shape(d.rows(), d.cols()), shape(m, n) + " when beta != 0");
  }
  if (!is_valid(f.compute) || !is_valid(f.accumulate) || !is_valid(f.output)) {
    throw error("gemm formats", format_name(f.compute) + "/" + format_name(f.accumulate) + "/" + format_name(f.output),
                "valid formats");
  }
  if (opt.beta == 0.0f) d.resize(m, n);

  // Inputs in the compute format (a conversion: round to nearest). Copies are made in op() layout.
  matrix a_low, b_low;
  const bool round_inputs = f.compute != fp32;
  if (round_inputs) {
    if (ta) {
      a_low = a.transpose();
      (void)cast_in_place(a_low, f.compute, round_options{}, philox_key{});
    } else {
      (void)cast_copy(a, a_low, f.compute, round_options{}, philox_key{});
    }
    if (tb) {
      b_low = b.transpose();
      (void)cast_in_place(b_low, f.compute, round_options{}, philox_key{});
    } else {
      (void)cast_copy(b, b_low, f.compute, round_options{}, philox_key{});
    }
  }

  if (f.accumulate == fp32) {
    if (round_inputs) {
      blocked_fp32(a_low, b_low, d, opt.alpha, opt.beta, opt.threads);
    } else if (!ta && !tb) {
      blocked_fp32(a, b, d, opt.alpha, opt.beta, opt.threads);
    } else if (ta && !tb) {
      blocked_fp32(a.transpose(), b, d, opt.alpha, opt.beta, opt.threads);
    } else if (!ta && tb) {
      blocked_fp32(a, b.transpose(), d, opt.alpha, opt.beta, opt.threads);
    } else {
      blocked_fp32(a.transpose(), b.transpose(), d, opt.alpha, opt.beta, opt.threads);
    }
  } else {
    if (!round_inputs) {
      if (ta) a_low = a.transpose(); else a_low = a;
      if (tb) b_low = b.transpose(); else b_low = b;
    }
    sequential_acc(f.accumulate, a_low, b_low, d, opt.alpha, opt.beta);
  }
  return cast_in_place(d, f.output, opt.rounding, opt.key);
}

void plain_gemm(const matrix& a, const matrix& b, matrix& d) {
  d.resize(a.rows(), b.cols());
  d.noalias() = a * b;
}

}  // namespace safeamp::sim
