// Data from the user's .npy files or arrays of .npz archives ("x.npz:name", npz.hpp): data.inputs / data.targets
// and an optional held-out pair (see data_config), read and validated once, then served as a deterministic
// stream of batches: batch s is rows [s*B, s*B + B) modulo the row count, a fixed batch when B covers every
// row. Also the initial weights.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "safeamp/sim/models.hpp"
#include "safeamp/sim/run_config.hpp"

namespace safeamp::sim {

class file_data {
 public:
  /// Reads and checks the files: row counts agree, classification targets are integers in [0, 2^31),
  /// regression targets are floats of one width. Throws safeamp::error naming the field and the file.
  file_data(const data_config& cfg, loss_kind loss);
  [[nodiscard]] batch train_batch(std::int64_t step, std::int64_t batch_size) const;
  [[nodiscard]] batch eval_set() const;
  [[nodiscard]] batch probe() const;  // the first probe_rows rows of the eval set
  [[nodiscard]] std::vector<std::string> slice_names() const { return {"all"}; }
  [[nodiscard]] std::int64_t input_width() const noexcept { return train_.inputs.cols(); }
  /// Regression: the targets' width; classification: the largest class index + 1 (at least 2).
  [[nodiscard]] std::int64_t output_width() const noexcept { return output_width_; }

 private:
  struct split {
    matrix inputs;
    matrix values;                      // regression targets
    std::vector<std::int32_t> classes;  // classification targets
  };
  [[nodiscard]] batch rows_of(const split& s, std::int64_t first, std::int64_t count) const;
  data_config cfg_;
  bool regression_ = false;
  split train_, eval_;
  std::int64_t output_width_ = 0;
};

/// Overwrites the named parameters with data.initial_weights (rounded to `param_format`). Throws safeamp::error
/// naming "data.initial_weights.<name>" for an unknown parameter, a shape other than the parameter's, or a
/// bad file.
void load_initial_weights(const data_config& cfg, parameter_list& params, format_spec param_format);

/// True when the run trains on the text corpus (the transformer, or a stack that starts with an embedding).
[[nodiscard]] bool reads_corpus(const run_config& cfg);

/// Every file the run reads besides the corpus (data.inputs, data.targets, the eval pair, the initial weights)
/// read and checked as train() will: the tool calls it before anything trains so that a bad file exits 2.
void check_data_files(const run_config& cfg);

}  // namespace safeamp::sim
