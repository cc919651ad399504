// Data from the user's .npy files or arrays of .npz archives ("x.npz:name", npz.hpp): data.inputs / data.targets
// and an optional held-out pair (see data_config), read and validated once, then served as a deterministic
// stream of batches: batch s is rows [s*B, s*B + B) modulo the row count, a fixed batch when B covers every
// row. Features for a stack that starts with a linear layer; token ids for one that starts with an embedding
// (file_tokens). Also the initial weights.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "safeamp/sim/models.hpp"
#include "safeamp/sim/run_config.hpp"

namespace safeamp::sim {

/// Token inputs of a stack that starts with an embedding: each row of data.inputs is one sequence of `context`
/// ids in [0, vocab), each row of data.targets the target id of every position. context 0: feature inputs.
struct file_tokens {
  std::int64_t context = 0;
  std::int64_t vocab = 0;
};

/// The token shape of a stack's inputs: its embedding's context and vocab, or {} when it starts otherwise.
[[nodiscard]] file_tokens token_inputs(const model_stack& stack) noexcept;

class file_data {
 public:
  /// Reads and checks the files: row counts agree, classification targets are integers in [0, 2^20],
  /// regression targets are floats of one width; with `tokens`, inputs and targets are integer (rows, context)
  /// with every id in [0, vocab). Throws safeamp::error naming the field, the file and the element.
  file_data(const data_config& cfg, loss_kind loss, file_tokens tokens = {});
  [[nodiscard]] batch train_batch(const batch_request& r) const;
  [[nodiscard]] batch eval_set() const;
  [[nodiscard]] batch probe() const;  // the first probe_rows rows of the eval set
  [[nodiscard]] std::vector<std::string> slice_names() const { return {"all"}; }
  /// Training rows (a step trains on min(batch size, rows) of them) and held-out rows (all evaluated).
  [[nodiscard]] std::int64_t train_rows() const noexcept { return train_.rows; }
  [[nodiscard]] std::int64_t eval_rows() const noexcept { return eval_.rows; }
  /// Bytes the loaded training or held-out split holds (inputs, token ids, targets).
  [[nodiscard]] double held_bytes(bool eval) const noexcept;
  /// Feature columns (0 for token inputs).
  [[nodiscard]] std::int64_t input_width() const noexcept { return train_.inputs.cols(); }
  /// Regression: the targets' width; classification: the largest class index + 1 (at least 2); tokens: vocab.
  [[nodiscard]] std::int64_t output_width() const noexcept { return output_width_; }

 private:
  struct split {
    matrix inputs;                      // features (rows, input width); empty for tokens
    std::vector<std::int32_t> tokens;   // token inputs: (rows, context) in C order
    matrix values;                      // regression targets
    std::vector<std::int32_t> classes;  // classification targets (tokens: one per position)
    std::int64_t rows = 0;
  };
  void load(const std::string& in_path, const std::string& tgt_path, const char* in_field, const char* tgt_field,
            split& out) const;
  [[nodiscard]] batch rows_of(const split& s, std::int64_t first, std::int64_t count) const;
  data_config cfg_;
  bool regression_ = false;
  file_tokens tokens_;
  split train_, eval_;
  std::int64_t output_width_ = 0;
};

/// Overwrites the named parameters with data.initial_weights (rounded to `param_format`). Throws safeamp::error
/// naming "data.initial_weights.<name>" for an unknown parameter, a shape other than the parameter's, or a
/// bad file.
void load_initial_weights(const data_config& cfg, parameter_list& params, format_spec param_format);

/// True when the run trains on the text corpus (the transformer, or a stack that starts with an embedding).
[[nodiscard]] bool reads_corpus(const run_config& cfg);

/// What check_data_files read, for the preflight estimate (preflight_inputs' file_* fields); all 0 when the run
/// reads no files.
struct data_files_shape {
  std::int64_t train_rows = 0;
  std::int64_t eval_rows = 0;
  std::int64_t output_width = 0;  // the head's width: target columns, the largest class + 1, or the vocabulary
  double bytes = 0.0;             // a run's data in memory at its largest (see check_data_files)
};

/// Every file the run reads besides the corpus (data.inputs, data.targets, the eval pair, the initial weights)
/// read and checked as train() will: the tool calls it before anything trains so that a bad file exits 2. A
/// data-parallel run's micro-batches must divide the samples of a step, min(training.batch_size, the rows).
/// Returns the data's shape. Its bytes: the two splits as loaded (the held-out split a copy of the training
/// split without eval files), the held-out batch the evaluation copies, and while the training split loads its
/// file bytes, the reader's float and integer copies and the matrix (4 times the split, counted as such).
data_files_shape check_data_files(const run_config& cfg);

}  // namespace safeamp::sim
