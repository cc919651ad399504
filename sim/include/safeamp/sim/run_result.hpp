// What one simulated training run produced: a record of every step (loss, scale, skip, norms, per-layer
// gradient cast counters), held-out metrics with per-slice breakdown, the probe batch's logits and a
// hash of the final weights' bits. Consumed by the reference lock, the parity gate and the report.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "safeamp/policy/precision_policy.hpp"

namespace safeamp::sim {

inline constexpr const char* loss_gradient_name = "loss.dlogits";

/// Gradient cast counters of one layer (parameter tensor) in one step, from the cast of the scaled
/// gradient into the policy's gradient format (before unscaling). The first entry of a step, named
/// loss_gradient_name, counts the loss gradient d(scale * loss)/d logits through its last rounding in the loss
/// format and its cast into the gradient format, each element once (an element the loss format zeroed is its
/// underflow: docs/simulator.md, "Cast counters"): when it underflows, everything downstream is exactly zero and no
/// parameter cast sees a nonzero value to lose.
struct layer_counts {
  std::string name;
  std::uint64_t elements = 0;
  std::uint64_t overflow = 0;
  std::uint64_t underflow = 0;  // finite nonzero values that became zero
  std::uint64_t subnormal = 0;
  std::uint64_t nan = 0;

  friend bool operator==(const layer_counts&, const layer_counts&) = default;
};

/// One optimizer step.
struct step_record {
  std::int64_t step = 0;
  double loss = 0.0;                   // unscaled training loss of the batch
  float scale = 1.0f;                  // loss scale used for this step's backward
  bool found_inf = false;              // an inf/NaN gradient was detected after unscaling
  bool skipped = false;                // the optimizer did not run
  double grad_norm_before_clip = 0.0;  // global L2 norm of the unscaled gradient (inf/NaN when found_inf)
  double grad_norm_after_clip = 0.0;
  std::vector<layer_counts> grads;     // "loss.dlogits" (the loss gradient), then one per parameter tensor
  // Data parallel only: the ranks whose own gradients held inf/NaN (ascending), and how many finite values the
  // reduction's wire format could not hold (they became inf, or fp8 clamped them: part_result).
  std::vector<std::int32_t> overflow_ranks;
  std::int64_t wire_overflows = 0;
  double step_seconds = 0.0;           // wall time; the only non-deterministic field

  /// Equality of the deterministic fields (step_seconds excluded); a NaN loss or norm equals a NaN (a skipped
  /// step's norm is NaN in both of two identical runs).
  friend bool operator==(const step_record& a, const step_record& b) {
    const auto same = [](double x, double y) { return x == y || (x != x && y != y); };
    return a.step == b.step && same(a.loss, b.loss) && a.scale == b.scale && a.found_inf == b.found_inf &&
           a.skipped == b.skipped && same(a.grad_norm_before_clip, b.grad_norm_before_clip) &&
           same(a.grad_norm_after_clip, b.grad_norm_after_clip) && a.grads == b.grads &&
           a.overflow_ranks == b.overflow_ranks && a.wire_overflows == b.wire_overflows;
  }
};

/// Metrics of one slice of the held-out set (MLP: one class; transformer: one position bucket).
struct slice_metrics {
  std::string name;
  std::int64_t count = 0;
  double loss = 0.0;
  double accuracy = 0.0;

  friend bool operator==(const slice_metrics&, const slice_metrics&) = default;
};

/// Every prediction of the held-out set, in evaluation order (the same for every run of a scenario): the
/// parity gate compares candidate and reference prediction by prediction (a paired comparison).
struct eval_rows {
  std::vector<float> loss;           // loss of each prediction (cross-entropy in nats, or its mean regression loss)
  std::vector<std::uint8_t> correct; // 1 when the argmax prediction is the target
  std::vector<std::int32_t> slice;   // index of the prediction's slice in eval_metrics::slices

  friend bool operator==(const eval_rows&, const eval_rows&) = default;
};

/// The trivial predictor of a regression (training.loss mse, l1 or huber): per output column the constant that
/// minimizes the loss over the held-out targets (regression_baseline.hpp). Its mean loss is the parity gate's
/// "learned nothing" point for the loss checks, as class_prior's is for a classifier.
struct regression_baseline {
  std::string loss;                        // "mse", "l1" or "huber"
  double trivial_loss = 0.0;               // over the whole held-out set
  std::vector<double> slice_trivial_loss;  // over each slice, in eval_metrics::slices order

  friend bool operator==(const regression_baseline&, const regression_baseline&) = default;
};

/// The trivial predictor of a classifier (training.loss cross_entropy): the class frequencies p of the held-out
/// labels, predicted for every input, the constant prediction with the least cross-entropy on them, as the
/// regression's constants are for its losses (regression_baseline.hpp). Its loss over a set of predictions is the
/// mean of -ln p(y) over their labels (the labels' entropy on the whole held-out set); its accuracy is that of a
/// guess drawn with the frequencies, the mean of p(y) (the sum of p^2 on the whole set, 1/C for C balanced
/// classes). A model that learned only the frequencies scores its loss: the parity gate's "learned nothing" point.
struct class_prior {
  std::int64_t classes = 0;                    // distinct labels in the held-out set
  double trivial_loss = 0.0;                   // over the whole held-out set, nats
  double trivial_accuracy = 0.0;               // over the whole held-out set
  std::vector<double> slice_trivial_loss;      // over each slice, in eval_metrics::slices order (0 when empty)
  std::vector<double> slice_trivial_accuracy;  // likewise

  friend bool operator==(const class_prior&, const class_prior&) = default;
};

struct eval_metrics {
  double loss = 0.0;      // mean loss over the held-out set (cross-entropy in nats, or the regression loss)
  double accuracy = 0.0;  // fraction of argmax predictions that are right (0 for a regression: no classes)
  std::vector<slice_metrics> slices;
  eval_rows rows;
  std::optional<regression_baseline> regression;  // set for a regression, absent for a classifier
  // Set for a classifier evaluated by the simulator. Absent in results assembled by hand without labels (the gate
  // then falls back to uniform probabilities, ln C and 1/C); a reference file requires it.
  std::optional<class_prior> classes;

  friend bool operator==(const eval_metrics&, const eval_metrics&) = default;
};

/// Where the steps' wall time went (steady clock, summed over the steps this call trained: a resumed run's earlier
/// steps are not in it). Every phase excludes the casts made in it on the trainer's thread, which are summed in
/// `casts`, so the phases add up to at most `step_total`; the rest (batch, zeroing, faults, counters) is untimed.
struct step_phase_seconds {
  std::int64_t steps = 0;      // steps timed
  double step_total = 0.0;     // sum of their step_seconds
  double forward = 0.0;        // the model's forward: GEMMs, layer and attention ops
  double loss = 0.0;           // cross-entropy and its scaled gradient
  double backward = 0.0;       // the model's backward
  double casts = 0.0;          // every cast_in_place/cast_copy of the step on the trainer's thread
  double unscale_check = 0.0;  // unscaling every gradient buffer and the inf/NaN check
  double clip = 0.0;           // the gradient norm (and clipping when configured)
  double optimizer = 0.0;      // the optimizer step (zero on skipped steps) and the scaler's update
};

struct run_result {
  std::string label;                 // e.g. "fp16-mixed dynamic"
  precision_policy policy;           // what ran
  std::vector<step_record> steps;    // every step
  eval_metrics final_eval;           // held-out metrics at the end
  std::vector<float> probe_logits;   // logits of the fixed probe batch at the end (row-major)
  std::int64_t probe_rows = 0;
  std::int64_t probe_cols = 0;
  std::uint64_t weights_hash = 0;    // FNV-1a over the bits of the final weights (determinism checks)
  double wall_seconds = 0.0;
  double samples_per_second = 0.0;
  step_phase_seconds phases;              // where the step time went (not deterministic)
  std::uint64_t activation_elements = 0;  // elements of the activations one training forward rounds (batch_size
                                          // x those of one sample in the final evaluation's forward)
};

}  // namespace safeamp::sim
