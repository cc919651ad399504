// Gaussian-cluster and character-corpus data (see datasets.hpp).
#include "safeamp/sim/datasets.hpp"

#include <algorithm>
#include <array>
#include <filesystem>
#include <string>

#include "safeamp/error.hpp"
#include "safeamp/format/philox.hpp"
#include "safeamp/sim/parameter.hpp"
#include "safeamp/sim/report_files.hpp"

namespace safeamp::sim {
namespace {

// Philox streams of the data (the initialisation uses 0x1000 and up).
constexpr std::uint32_t stream_means = 1;
constexpr std::uint32_t stream_train_index = 2;
constexpr std::uint32_t stream_train_sample = 3;
constexpr std::uint32_t stream_eval_sample = 4;
// Held-out MLP samples are numbered from here so they never coincide with training indices.
constexpr std::uint64_t eval_index_base = std::uint64_t{1} << 40;

philox4x32_block draw(std::uint64_t seed, std::uint32_t stream, std::uint64_t counter, std::uint32_t sub = 0) {
  return philox4x32_10(static_cast<std::uint32_t>(counter), static_cast<std::uint32_t>(counter >> 32), stream, sub,
                       static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
}

// A uniform index in [0, n) from 64 random bits (modulo; the bias is below n / 2^64).
std::uint64_t uniform_index(const philox4x32_block& r, std::uint64_t n) {
  const std::uint64_t bits = (static_cast<std::uint64_t>(r.v[0]) << 32) | r.v[1];
  return bits % n;
}

}  // namespace

// ---- clusters ----------------------------------------------------------------------------------------

cluster_data::cluster_data(const mlp_shape& shape, const data_config& cfg) : shape_(shape), cfg_(cfg) {
  means_.resize(shape.classes, shape.input_dim);
  for (Eigen::Index c = 0; c < means_.rows(); ++c) {
    for (Eigen::Index j = 0; j < means_.cols(); ++j) {
      const philox4x32_block r = draw(cfg.seed, stream_means, static_cast<std::uint64_t>(c * means_.cols() + j));
      means_(c, j) = static_cast<float>(normal_from_bits(r.v[0], r.v[1]));
    }
  }
}

batch cluster_data::make_batch(const std::vector<std::uint64_t>& index, std::uint32_t stream) const {
  batch b;
  const auto rows = static_cast<Eigen::Index>(index.size());
  b.samples = rows;
  b.features.resize(rows, shape_.input_dim);
  b.targets.resize(index.size());
  b.slices.resize(index.size());
  for (Eigen::Index r = 0; r < rows; ++r) {
    const std::uint64_t i = index[static_cast<std::size_t>(r)];
    const auto cls = static_cast<std::int32_t>(uniform_index(draw(cfg_.seed, stream, i, 0xC1A55u),
                                                             static_cast<std::uint64_t>(shape_.classes)));
    b.targets[static_cast<std::size_t>(r)] = cls;
    b.slices[static_cast<std::size_t>(r)] = cls;
    for (Eigen::Index j = 0; j < shape_.input_dim; j += 2) {
      const philox4x32_block n = draw(cfg_.seed, stream, i, static_cast<std::uint32_t>(j / 2 + 1));
      const double z0 = normal_from_bits(n.v[0], n.v[1]);
      const double z1 = normal_from_bits(n.v[2], n.v[3]);
      b.features(r, j) = static_cast<float>(cfg_.input_scale * (means_(cls, j) + cfg_.cluster_spread * z0));
      if (j + 1 < shape_.input_dim) {
        b.features(r, j + 1) = static_cast<float>(cfg_.input_scale * (means_(cls, j + 1) + cfg_.cluster_spread * z1));
      }
    }
  }
  return b;
}

batch cluster_data::train_batch(const batch_request& req) const { return train_rows(req, 0, req.samples); }

batch cluster_data::train_rows(const batch_request& req, std::int64_t first, std::int64_t count) const {
  if (first < 0 || count < 0 || first + count > req.samples) {
    throw error("batch rows", "[" + std::to_string(first) + ", " + std::to_string(first + count) + ")",
                "a range inside the batch's " + std::to_string(req.samples) + " samples");
  }
  std::vector<std::uint64_t> index(static_cast<std::size_t>(count));
  for (std::int64_t k = first; k < first + count; ++k) {
    const philox4x32_block r =
        draw(cfg_.seed, stream_train_index, static_cast<std::uint64_t>(req.step), static_cast<std::uint32_t>(k));
    index[static_cast<std::size_t>(k - first)] = uniform_index(r, static_cast<std::uint64_t>(cfg_.train_samples));
  }
  return make_batch(index, stream_train_sample);
}

batch cluster_data::eval_set() const {
  std::vector<std::uint64_t> index(static_cast<std::size_t>(cfg_.eval_samples));
  for (std::size_t k = 0; k < index.size(); ++k) index[k] = eval_index_base + k;
  return make_batch(index, stream_eval_sample);
}

batch cluster_data::probe() const {
  std::vector<std::uint64_t> index(static_cast<std::size_t>(std::min(cfg_.probe_rows, cfg_.eval_samples)));
  for (std::size_t k = 0; k < index.size(); ++k) index[k] = eval_index_base + k;
  return make_batch(index, stream_eval_sample);
}

std::vector<std::string> cluster_data::slice_names() const {
  std::vector<std::string> names;
  for (std::int64_t c = 0; c < shape_.classes; ++c) names.push_back("class " + std::to_string(c));
  return names;
}

// ---- corpus ------------------------------------------------------------------------------------------

void require_default_corpus(const data_config& cfg) {
  // The default corpus comes from a Debian package: where it is missing, say which.
  if (cfg.corpus_path == data_config{}.corpus_path && !std::filesystem::exists(cfg.corpus_path)) {
    throw error("data.corpus_path", "'" + cfg.corpus_path + "' (missing)",
                "a readable text file (default /usr/share/common-licenses/GPL-3, Debian package base-files)");
  }
}

corpus_data::corpus_data(const transformer_shape& shape, const data_config& cfg) : shape_(shape), cfg_(cfg) {
  require_default_corpus(cfg);
  // The checked reader, as the run settings' fingerprint reads it: a directory, FIFO or device (/dev/zero) is
  // refused by name before any byte is read, and a file over its 64 MiB cap by its size.
  const std::string bytes = read_input_file(cfg.corpus_path, "data.corpus_path");
  const auto n = static_cast<std::int64_t>(bytes.size());
  // Training needs context+1 tokens; the held-out tail needs one more window.
  const std::int64_t needed = 4 * (shape.context + 1);
  if (n < needed) {
    throw error("data.corpus_path", "'" + cfg.corpus_path + "' (" + std::to_string(n) + " bytes)",
                "a text file of at least " + std::to_string(needed) + " bytes (4 windows of context+1)");
  }
  std::array<bool, 256> seen{};
  for (const char c : bytes) seen[static_cast<std::uint8_t>(c)] = true;
  std::array<std::int32_t, 256> id{};
  for (int c = 0; c < 256; ++c) {
    if (seen[static_cast<std::size_t>(c)]) {
      id[static_cast<std::size_t>(c)] = static_cast<std::int32_t>(alphabet_.size());
      alphabet_.push_back(static_cast<std::uint8_t>(c));
    }
  }
  ids_.reserve(bytes.size());
  for (const char c : bytes) ids_.push_back(id[static_cast<std::uint8_t>(c)]);
  split_ = n - static_cast<std::int64_t>(cfg.eval_fraction * static_cast<double>(n));
  if (split_ < 2 * (shape.context + 1) || n - split_ < shape.context + 1) {
    throw error("data eval_fraction", std::to_string(cfg.eval_fraction),
                "a fraction leaving at least 2 windows to train on and 1 to hold out of the " + std::to_string(n) +
                    "-byte corpus");
  }
}

batch corpus_data::make_batch(const std::vector<std::int64_t>& starts) const {
  batch b;
  const std::int64_t t = shape_.context;
  b.samples = static_cast<std::int64_t>(starts.size());
  const std::int64_t buckets = position_buckets_of(t), bucket = t / buckets;
  for (const std::int64_t s : starts) {
    for (std::int64_t k = 0; k < t; ++k) {
      b.tokens.push_back(ids_[static_cast<std::size_t>(s + k)]);
      b.targets.push_back(ids_[static_cast<std::size_t>(s + k + 1)]);
      b.slices.push_back(static_cast<std::int32_t>(std::min(k / bucket, buckets - 1)));
    }
  }
  return b;
}

batch corpus_data::train_batch(const batch_request& req) const {
  std::vector<std::int64_t> starts(static_cast<std::size_t>(req.samples));
  const auto positions = static_cast<std::uint64_t>(split_ - shape_.context - 1);
  for (std::int64_t k = 0; k < req.samples; ++k) {
    const philox4x32_block r =
        draw(cfg_.seed, stream_train_index, static_cast<std::uint64_t>(req.step), static_cast<std::uint32_t>(k));
    starts[static_cast<std::size_t>(k)] = static_cast<std::int64_t>(uniform_index(r, positions + 1));
  }
  return make_batch(starts);
}

batch corpus_data::eval_set() const {
  const std::int64_t t = shape_.context;
  const std::int64_t available = (static_cast<std::int64_t>(ids_.size()) - split_ - 1) / t;
  const std::int64_t count = std::min(available, cfg_.eval_samples);
  std::vector<std::int64_t> starts;
  for (std::int64_t i = 0; i < count; ++i) starts.push_back(split_ + i * t);
  return make_batch(starts);
}

batch corpus_data::probe() const {
  const std::int64_t t = shape_.context;
  const std::int64_t available = (static_cast<std::int64_t>(ids_.size()) - split_ - 1) / t;
  std::vector<std::int64_t> starts;
  for (std::int64_t i = 0; i < std::min({cfg_.probe_rows, available, cfg_.eval_samples}); ++i) {
    starts.push_back(split_ + i * t);
  }
  return make_batch(starts);
}

std::vector<std::string> corpus_data::slice_names() const {
  std::vector<std::string> names;
  const std::int64_t t = shape_.context;
  const std::int64_t buckets = position_buckets_of(t), bucket = t / buckets;
  for (std::int64_t k = 0; k < buckets; ++k) {
    const std::int64_t lo = k * bucket;
    const std::int64_t hi = k == buckets - 1 ? t - 1 : lo + bucket - 1;
    names.push_back("positions " + std::to_string(lo) + "-" + std::to_string(hi));
  }
  return names;
}

}  // namespace safeamp::sim
