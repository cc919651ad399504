// The trivial predictor of a regression and its loss on the held-out targets (see regression_baseline.hpp).
#include "safeamp/sim/regression_baseline.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "safeamp/error.hpp"

namespace safeamp::sim {
namespace {

void require_regression(loss_kind kind, const char* what) {
  if (kind == loss_kind::cross_entropy) throw error(what, "cross_entropy", "mse, l1 or huber");
}

/// Huber (delta 1): the sum of clamp(c - y, -1, 1), the derivative of sum huber(c - y) in c; nondecreasing in c.
double huber_slope(double c, const std::vector<double>& values) {
  double s = 0.0;
  for (const double y : values) s += std::clamp(c - y, -1.0, 1.0);
  return s;
}

}  // namespace

double elementwise_loss(loss_kind kind, double d) {
  const double a = std::abs(d);
  switch (kind) {
    case loss_kind::mse:
      return d * d;
    case loss_kind::l1:
      return a;
    case loss_kind::huber:
      return a < 1.0 ? 0.5 * d * d : a - 0.5;
    case loss_kind::cross_entropy:
      break;
  }
  throw error("regression baseline loss", "cross_entropy", "mse, l1 or huber");
}

double best_constant(loss_kind kind, std::vector<double> values) {
  require_regression(kind, "regression baseline loss");
  if (values.empty()) throw error("regression baseline targets", "none", "at least one held-out target");
  for (const double y : values) {
    if (!std::isfinite(y)) throw error("regression baseline target", std::to_string(y), "finite targets");
  }
  switch (kind) {
    case loss_kind::mse: {
      double sum = 0.0;
      for (const double y : values) sum += y;
      return sum / static_cast<double>(values.size());
    }
    case loss_kind::l1: {
      // The lower median: for an even count every c between the two middle values gives the same sum.
      const auto mid = values.begin() + static_cast<std::ptrdiff_t>((values.size() - 1) / 2);
      std::nth_element(values.begin(), mid, values.end());
      return *mid;
    }
    case loss_kind::huber: {
      // The slope is -n at min y and +n at max y; bisect until the interval stops shrinking (the midpoint
      // equals an end): the minimizer to the last bit. The loss is flat to first order there.
      double lo = *std::min_element(values.begin(), values.end());
      double hi = *std::max_element(values.begin(), values.end());
      while (true) {
        const double mid = lo + 0.5 * (hi - lo);
        if (mid <= lo || mid >= hi) return mid;
        (huber_slope(mid, values) < 0.0 ? lo : hi) = mid;
      }
    }
    case loss_kind::cross_entropy:
      break;
  }
  throw error("regression baseline loss", "cross_entropy", "mse, l1 or huber");
}

regression_baseline trivial_regression_baseline(loss_kind kind, const matrix& targets,
                                                const std::vector<std::int32_t>& slices, std::size_t slice_count) {
  require_regression(kind, "regression baseline loss");
  const Eigen::Index rows = targets.rows();
  const Eigen::Index cols = targets.cols();
  if (rows == 0 || cols == 0) {
    throw error("regression baseline targets", std::to_string(rows) + "x" + std::to_string(cols),
                "at least one held-out target");
  }
  if (slices.size() != static_cast<std::size_t>(rows)) {
    throw error("regression baseline slices", std::to_string(slices.size()),
                "one per target row (" + std::to_string(rows) + ")");
  }
  std::vector<double> constant(static_cast<std::size_t>(cols));
  std::vector<double> column(static_cast<std::size_t>(rows));
  for (Eigen::Index j = 0; j < cols; ++j) {
    for (Eigen::Index r = 0; r < rows; ++r) column[static_cast<std::size_t>(r)] = targets(r, j);
    constant[static_cast<std::size_t>(j)] = best_constant(kind, column);
  }
  std::vector<double> slice_sum(slice_count, 0.0);
  std::vector<std::int64_t> slice_elements(slice_count, 0);
  double total = 0.0;
  for (Eigen::Index r = 0; r < rows; ++r) {
    const std::int32_t s = slices[static_cast<std::size_t>(r)];
    if (s < 0 || static_cast<std::size_t>(s) >= slice_count) {
      throw error("regression baseline slice [" + std::to_string(r) + "]", std::to_string(s),
                  "a slice index below " + std::to_string(slice_count));
    }
    for (Eigen::Index j = 0; j < cols; ++j) {
      const double e = elementwise_loss(kind, constant[static_cast<std::size_t>(j)] - targets(r, j));
      total += e;
      slice_sum[static_cast<std::size_t>(s)] += e;
      slice_elements[static_cast<std::size_t>(s)] += 1;
    }
  }
  regression_baseline b;
  b.loss = to_string(kind);
  b.trivial_loss = total / static_cast<double>(rows * cols);
  for (std::size_t s = 0; s < slice_count; ++s) {
    b.slice_trivial_loss.push_back(slice_elements[s] > 0 ? slice_sum[s] / static_cast<double>(slice_elements[s]) : 0.0);
  }
  return b;
}

class_prior trivial_class_prior(const std::vector<std::int32_t>& labels, const std::vector<std::int32_t>& slices,
                                std::size_t slice_count) {
  if (labels.empty()) throw error("class prior labels", "none", "at least one held-out label");
  if (slices.size() != labels.size()) {
    throw error("class prior slices", std::to_string(slices.size()),
                "one per label (" + std::to_string(labels.size()) + ")");
  }
  std::map<std::int32_t, std::int64_t> count;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0) {
      throw error("class prior label [" + std::to_string(i) + "]", std::to_string(labels[i]), "a class index >= 0");
    }
    if (slices[i] < 0 || static_cast<std::size_t>(slices[i]) >= slice_count) {
      throw error("class prior slice [" + std::to_string(i) + "]", std::to_string(slices[i]),
                  "a slice index below " + std::to_string(slice_count));
    }
    ++count[labels[i]];
  }
  const auto n = static_cast<double>(labels.size());
  std::vector<double> loss_sum(slice_count, 0.0), p_sum(slice_count, 0.0);
  std::vector<std::int64_t> members(slice_count, 0);
  double total_loss = 0.0, total_p = 0.0;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    const double p = static_cast<double>(count[labels[i]]) / n;
    const auto s = static_cast<std::size_t>(slices[i]);
    total_loss -= std::log(p);
    total_p += p;
    loss_sum[s] -= std::log(p);
    p_sum[s] += p;
    ++members[s];
  }
  class_prior c;
  c.classes = static_cast<std::int64_t>(count.size());
  c.trivial_loss = total_loss / n;
  c.trivial_accuracy = total_p / n;
  for (std::size_t s = 0; s < slice_count; ++s) {
    const auto m = static_cast<double>(members[s]);
    c.slice_trivial_loss.push_back(members[s] > 0 ? loss_sum[s] / m : 0.0);
    c.slice_trivial_accuracy.push_back(members[s] > 0 ? p_sum[s] / m : 0.0);
  }
  return c;
}

}  // namespace safeamp::sim
