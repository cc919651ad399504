// Cross-entropy and the regression losses in the policy's loss format (see loss.hpp).
#include "safeamp/sim/loss.hpp"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "layer_common.hpp"
#include "safeamp/error.hpp"
#include "safeamp/sim/parallel.hpp"
#include "scalar_round.hpp"

namespace safeamp::sim {
namespace {

// Rows per task of cross_entropy, which takes threads only for logits of loss_parallel_min_elements or more (each
// element costs two exponentials). The split depends on the shape alone.
constexpr std::int64_t loss_rows_per_task = 32;
constexpr Eigen::Index loss_parallel_min_elements = 8192;

// The loss gradient's last rounding, into the loss format f, then its cast into policy.gradient, each element
// counted once (detail::counted_once): an element the loss format zeroed is an underflow of the loss gradient even
// where policy.gradient could have held it. The first is round_scalar's nearest even as one keyless pass (the same
// bits on any thread count; no key taken, so the casts after it keep theirs).
cast_stats round_and_store_gradient(exec_context& ctx, const precision_policy& pol, format_spec f, matrix& g) {
  const cast_stats in_loss_format = cast_span(ctx.threads, span_of(g), f, round_options{}, philox_key{});
  return detail::counted_once(in_loss_format, cast_in_place(ctx, g, pol.gradient));
}

}  // namespace

loss_result cross_entropy(exec_context& ctx, const precision_policy& pol, const matrix& logits,
                          const std::vector<std::int32_t>& targets, double grad_scale, matrix* dlogits) {
  if (static_cast<Eigen::Index>(targets.size()) != logits.rows()) {
    throw error("cross_entropy targets", std::to_string(targets.size()),
                "one per logits row (" + std::to_string(logits.rows()) + ")");
  }
  const format_spec f = pol.format_for(op_class::loss);
  const Eigen::Index rows = logits.rows();
  const Eigen::Index classes = logits.cols();
  // Every target is checked before any row is computed, so the error names the first bad one in row order.
  for (const std::int32_t t : targets) {
    if (t < 0 || t >= classes)
      throw error("cross_entropy target", std::to_string(t), "0.." + std::to_string(classes - 1));
  }
  loss_result out;
  out.row_loss.resize(static_cast<std::size_t>(rows));
  out.predicted.resize(static_cast<std::size_t>(rows));
  if (dlogits != nullptr) dlogits->resize(rows, classes);
  const float coef = static_cast<float>(grad_scale / static_cast<double>(rows));
  // Rows are independent: tasks of whole rows write their own row_loss, predicted and dlogits rows, and the mean's
  // sum runs afterwards in row order, so the bits do not depend on the thread count.
  const int workers = logits.size() >= loss_parallel_min_elements ? ctx.threads : 1;
  detail::with_round(f, [&](auto round) {
    parallel_chunks(workers, rows, loss_rows_per_task, [&](std::int64_t r0, std::int64_t r1) {
      std::vector<float> x(static_cast<std::size_t>(classes));
      for (Eigen::Index r = r0; r < r1; ++r) {
        const std::int32_t t = targets[static_cast<std::size_t>(r)];
        float m = -std::numeric_limits<float>::infinity();
        std::int32_t arg = -1;
        bool finite = true;
        for (Eigen::Index j = 0; j < classes; ++j) {
          const float v = round(logits(r, j));
          x[static_cast<std::size_t>(j)] = v;
          finite = finite && std::isfinite(v);
          if (v > m) {
            m = v;
            arg = static_cast<std::int32_t>(j);
          }
        }
        float sum = 0.0f;
        for (Eigen::Index j = 0; j < classes; ++j) {
          sum = round(sum + round(std::exp(round(x[static_cast<std::size_t>(j)] - m))));
        }
        const float lse = round(m + round(std::log(sum)));
        out.row_loss[static_cast<std::size_t>(r)] =
            finite ? round(lse - x[static_cast<std::size_t>(t)]) : std::numeric_limits<float>::quiet_NaN();
        out.predicted[static_cast<std::size_t>(r)] = finite ? arg : -1;
        if (dlogits != nullptr) {
          for (Eigen::Index j = 0; j < classes; ++j) {
            const float p = finite ? round(std::exp(round(x[static_cast<std::size_t>(j)] - lse)))
                                   : std::numeric_limits<float>::quiet_NaN();
            const float target = j == t ? 1.0f : 0.0f;
            (*dlogits)(r, j) = coef * round(p - target);  // rounded to f below, counted
          }
        }
      }
    });
  });
  float total = 0.0f;
  for (const float row_loss : out.row_loss) total = round_scalar(f, total + row_loss);
  out.loss = static_cast<double>(round_scalar(f, total / static_cast<float>(rows)));
  if (dlogits != nullptr) out.gradient_stats = round_and_store_gradient(ctx, pol, f, *dlogits);
  return out;
}

loss_result regression_loss(exec_context& ctx, const precision_policy& pol, loss_kind kind, const matrix& outputs,
                            const matrix& targets, double grad_scale, matrix* doutputs) {
  if (targets.rows() != outputs.rows() || targets.cols() != outputs.cols()) {
    throw error("regression targets", std::to_string(targets.rows()) + "x" + std::to_string(targets.cols()),
                "the output's shape " + std::to_string(outputs.rows()) + "x" + std::to_string(outputs.cols()));
  }
  const format_spec f = pol.format_for(op_class::loss);
  const Eigen::Index rows = outputs.rows();
  const Eigen::Index cols = outputs.cols();
  loss_result out;
  out.row_loss.resize(static_cast<std::size_t>(rows));
  out.predicted.assign(static_cast<std::size_t>(rows), -1);
  if (doutputs != nullptr) doutputs->resize(rows, cols);
  const float coef = static_cast<float>(grad_scale / static_cast<double>(rows * cols));
  float total = 0.0f;
  for (Eigen::Index r = 0; r < rows; ++r) {
    float row = 0.0f;
    for (Eigen::Index j = 0; j < cols; ++j) {
      const float d = round_scalar(f, round_scalar(f, outputs(r, j)) - targets(r, j));
      const float a = std::fabs(d);
      const float sign = d > 0.0f ? 1.0f : (d < 0.0f ? -1.0f : d);  // NaN stays NaN
      float e = 0.0f, g = 0.0f;
      switch (kind) {
        case loss_kind::mse:
          e = round_scalar(f, d * d);
          g = round_scalar(f, 2.0f * d);
          break;
        case loss_kind::l1:
          e = a;
          g = sign;
          break;
        case loss_kind::huber:
          e = a < 1.0f ? round_scalar(f, 0.5f * round_scalar(f, d * d)) : round_scalar(f, a - 0.5f);
          g = a < 1.0f ? d : sign;
          break;
        case loss_kind::cross_entropy:
          throw error("regression_loss kind", "cross_entropy", "mse, l1 or huber");
      }
      row = round_scalar(f, row + e);
      total = round_scalar(f, total + e);
      if (doutputs != nullptr) (*doutputs)(r, j) = coef * g;  // rounded to f below, counted
    }
    out.row_loss[static_cast<std::size_t>(r)] = round_scalar(f, row / static_cast<float>(cols));
  }
  out.loss = static_cast<double>(round_scalar(f, total / static_cast<float>(rows * cols)));
  if (doutputs != nullptr) out.gradient_stats = round_and_store_gradient(ctx, pol, f, *doutputs);
  return out;
}

}  // namespace safeamp::sim
