// Deterministic data: Gaussian clusters for the MLP (one cluster per class; every sample a pure function
// of (seed, index)) and a character-level corpus for the transformer (bytes of a text file, by default
// /usr/share/common-licenses/GPL-3 from Debian's base-files; the tail is held out). Training batches are a
// pure function of (seed, step), so the data position of a checkpoint is just the step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "safeamp/sim/models.hpp"
#include "safeamp/sim/run_config.hpp"

namespace safeamp::sim {

class cluster_data {
 public:
  cluster_data(const mlp_shape& shape, const data_config& cfg);
  [[nodiscard]] batch train_batch(const batch_request& r) const;  // r.samples rows
  /// Rows [first, first + count) of train_batch(r), made alone (each row is a function of (seed, step, row)): a
  /// data-parallel rank makes only its own micro-batches' rows.
  [[nodiscard]] batch train_rows(const batch_request& r, std::int64_t first, std::int64_t count) const;
  [[nodiscard]] batch eval_set() const;   // eval_samples rows, classes in turn
  [[nodiscard]] batch probe() const;      // the first probe_rows rows of the eval set
  [[nodiscard]] std::vector<std::string> slice_names() const;

 private:
  [[nodiscard]] batch make_batch(const std::vector<std::uint64_t>& index, std::uint32_t stream) const;
  mlp_shape shape_;
  data_config cfg_;
  matrix means_;  // (classes, input_dim)
};

/// Throws safeamp::error naming data.corpus_path and the Debian package that ships it when the default corpus is
/// missing (any other missing corpus is reported by the reader that opens it).
void require_default_corpus(const data_config& cfg);

class corpus_data {
 public:
  corpus_data(const transformer_shape& shape, const data_config& cfg);
  [[nodiscard]] std::int64_t vocab_size() const noexcept { return static_cast<std::int64_t>(alphabet_.size()); }
  [[nodiscard]] batch train_batch(const batch_request& r) const;  // r.samples sequences
  [[nodiscard]] batch eval_set() const;
  [[nodiscard]] batch probe() const;
  [[nodiscard]] std::vector<std::string> slice_names() const;  // position buckets
  [[nodiscard]] std::int64_t train_tokens() const noexcept { return split_; }

 private:
  [[nodiscard]] batch make_batch(const std::vector<std::int64_t>& starts) const;
  transformer_shape shape_;
  data_config cfg_;
  std::vector<std::uint8_t> alphabet_;
  std::vector<std::int32_t> ids_;  // the corpus as token ids
  std::int64_t split_ = 0;         // first held-out token
};

/// Number of position buckets the transformer's held-out metrics are sliced into.
inline constexpr std::int64_t position_buckets = 4;
/// The buckets of a context of t positions: position_buckets, or t when it is shorter (a context of 2 had
/// buckets "positions 2-2" and "positions 3-1" with no predictions).
[[nodiscard]] constexpr std::int64_t position_buckets_of(std::int64_t t) noexcept {
  return t < position_buckets ? (t < 1 ? 1 : t) : position_buckets;
}

}  // namespace safeamp::sim
