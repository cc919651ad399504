// The trivial predictor of a regression: per output column the constant that minimizes the run's loss over the
// held-out targets (mse: the mean, l1: a median, huber: the root of the clamped residual sum). Its loss is what
// the parity gate measures a regression's learning against (docs/report.md). And a classifier's: the held-out
// labels' class frequencies.
#pragma once

#include <cstdint>
#include <vector>

#include "safeamp/sim/run_config.hpp"
#include "safeamp/sim/run_result.hpp"
#include "safeamp/sim/tensor.hpp"

namespace safeamp::sim {

/// The constant c minimizing sum_i loss(c - y_i) over `values` (in double): mse the mean; l1 the lower median
/// (every c between the two middle values has the same sum); huber (delta 1) the c where sum clamp(c - y_i, -1, 1)
/// changes sign, found by bisection on [min y, max y] to the last bit. Throws safeamp::error for cross_entropy
/// or no values.
[[nodiscard]] double best_constant(loss_kind kind, std::vector<double> values);

/// The loss of one residual d in double: mse d^2, l1 |d|, huber 0.5 d^2 when |d| < 1 else |d| - 0.5.
[[nodiscard]] double elementwise_loss(loss_kind kind, double d);

/// The trivial predictor's loss on held-out targets (rows, k) whose rows belong to `slices` (slice index per
/// row, below slice_count): the per-column best constants are fitted on every row; its mean loss over all
/// rows * k elements, and over each slice's elements (0 for an empty slice). Throws safeamp::error for
/// cross_entropy, no rows, or a slice index out of range.
[[nodiscard]] regression_baseline trivial_regression_baseline(loss_kind kind, const matrix& targets,
                                                              const std::vector<std::int32_t>& slices,
                                                              std::size_t slice_count);

/// A classifier's trivial predictor on held-out labels whose predictions belong to `slices` (slice index per
/// label, below slice_count): the frequencies p fitted on every label; its loss (mean of -ln p(y)) and accuracy
/// (mean of p(y)) over all labels and over each slice's (0 for an empty slice). Throws safeamp::error for no
/// labels, a negative label, sizes that differ or a slice index out of range.
[[nodiscard]] class_prior trivial_class_prior(const std::vector<std::int32_t>& labels,
                                              const std::vector<std::int32_t>& slices, std::size_t slice_count);

}  // namespace safeamp::sim
