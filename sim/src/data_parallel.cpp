// Data parallelism across ranks (see data_parallel.hpp), and slice_batch for the trainer's parts.
#include "safeamp/sim/data_parallel.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "data_parallel_json.hpp"
#include "safeamp/error.hpp"
#include "safeamp/scaling/communicator.hpp"
#include "safeamp/sim/json_input.hpp"

namespace safeamp::sim {

batch slice_batch(const batch& b, std::int64_t first, std::int64_t count) {
  if (first < 0 || count < 1 || first + count > b.samples) {
    throw error("batch part", "samples [" + std::to_string(first) + ", " + std::to_string(first + count) + ")",
                "a range inside the batch's " + std::to_string(b.samples) + " samples");
  }
  const auto cut = [&](const auto& v) {
    using vec = std::decay_t<decltype(v)>;
    const std::size_t per = v.size() / static_cast<std::size_t>(b.samples);
    return vec(v.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(first) * per),
               v.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(first + count) * per));
  };
  batch part;
  part.samples = count;
  part.inject_nan = b.inject_nan;
  if (b.features.size() > 0) part.features = b.features.middleRows(first, count);
  if (b.target_values.size() > 0) part.target_values = b.target_values.middleRows(first, count);  // regression
  part.tokens = cut(b.tokens);
  part.targets = cut(b.targets);
  part.slices = cut(b.slices);
  return part;
}

data_parallel_config parse_data_parallel(const nlohmann::json& j, std::string_view path) {
  const std::string p(path);
  if (!j.is_object()) throw error(p, summarize_json(j), "an object");
  static const char* const keys[] = {"micro_batches", "reduction",    "fault_micro_batch", "exit_rank",
                                     "exit_step",     "corrupt_rank", "corrupt_step"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (std::find_if(std::begin(keys), std::end(keys), [&](const char* k) { return it.key() == k; }) ==
        std::end(keys)) {
      throw error(p + "." + it.key(), "an unknown key",
                  "micro_batches, reduction, fault_micro_batch, exit_rank, exit_step, corrupt_rank, corrupt_step");
    }
  }
  const auto integer = [&](const char* key, std::int64_t fallback, std::int64_t lo, std::int64_t hi) {
    if (!j.contains(key)) return fallback;
    const nlohmann::json& v = j.at(key);
    if (!v.is_number_integer() || v.get<std::int64_t>() < lo || v.get<std::int64_t>() > hi) {
      throw error(p + "." + key, summarize_json(v),
                  "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    return v.get<std::int64_t>();
  };
  data_parallel_config c;
  c.micro_batches = integer("micro_batches", c.micro_batches, 1, max_micro_batches);
  c.fault_micro_batch = integer("fault_micro_batch", c.fault_micro_batch, 0, c.micro_batches - 1);
  c.exit_rank = integer("exit_rank", c.exit_rank, -1, 1 << 20);
  c.exit_step = integer("exit_step", c.exit_step, -1, std::int64_t{1} << 40);
  c.corrupt_rank = integer("corrupt_rank", c.corrupt_rank, -1, 1 << 20);
  c.corrupt_step = integer("corrupt_step", c.corrupt_step, -1, std::int64_t{1} << 40);
  if (j.contains("reduction")) {
    const nlohmann::json& v = j.at("reduction");
    if (!v.is_string()) throw error(p + ".reduction", summarize_json(v), reduce_specs_accepted);
    c.reduction = parse_reduce_spec(v.get<std::string>(), p + ".reduction");
  }
  return c;
}

void validate(const data_parallel_config& cfg, std::int64_t ranks, std::int64_t batch_size) {
  if (cfg.micro_batches < 1 || batch_size % cfg.micro_batches != 0) {
    throw error("data_parallel.micro_batches", std::to_string(cfg.micro_batches),
                "a divisor of the batch size " + std::to_string(batch_size));
  }
  if (ranks > cfg.micro_batches) {
    throw error("mpirun -np", std::to_string(ranks),
                "at most data_parallel.micro_batches = " + std::to_string(cfg.micro_batches) +
                    " ranks (every rank computes at least one micro-batch)");
  }
  if (cfg.fault_micro_batch < 0 || cfg.fault_micro_batch >= cfg.micro_batches) {
    throw error("data_parallel.fault_micro_batch", std::to_string(cfg.fault_micro_batch),
                "a micro-batch index in [0, " + std::to_string(cfg.micro_batches - 1) + "]");
  }
  const std::int64_t f = cfg.reduction.predivide;
  if (f < 1 || f > max_predivide || (f & (f - 1)) != 0 || (cfg.reduction.order == reduce_order::canonical && f != 1)) {
    throw error("data_parallel.reduction", to_string(cfg.reduction), reduce_specs_accepted);
  }
}

data_parallel_summary summarize_data_parallel(const data_parallel_setup& setup) {
  data_parallel_summary s;
  s.ranks = setup.ranks;
  s.micro_batches = setup.config.micro_batches;
  s.reduction = to_string(setup.config.reduction);
  s.table_elements = 1024;
  s.table_sigma = 1.0;
  s.table_seed = 17;
  s.rank_counts = report_rank_counts();
  s.table = reduction_error_table(report_reduce_specs(), s.rank_counts, s.table_elements, s.table_sigma, s.table_seed);
  return s;
}

data_parallel::data_parallel(communicator& ranks, data_parallel_config cfg) : ranks_(&ranks), cfg_(cfg) {
  for (int r = 0; r < ranks_->size(); ++r)
    max_local_parts_ = std::max(max_local_parts_, first_part(r + 1) - first_part(r));
}

std::int64_t data_parallel::first_part(int rank) const noexcept { return cfg_.micro_batches * rank / ranks_->size(); }

std::vector<batch_part> data_parallel::local_parts(std::int64_t global_samples) const {
  validate(cfg_, ranks_->size(), global_samples);
  const std::int64_t per = global_samples / cfg_.micro_batches;
  std::vector<batch_part> parts;
  for (std::int64_t k = first_part(ranks_->rank()); k < first_part(ranks_->rank() + 1); ++k) {
    parts.push_back(batch_part{.index = k, .first_sample = k * per, .samples = per});
  }
  return parts;
}

bool data_parallel::gradient_faults_in(std::int64_t index) const { return index == cfg_.fault_micro_batch; }

void data_parallel::begin_step(std::int64_t step) {
  if (ranks_->rank() == cfg_.exit_rank && step == cfg_.exit_step) {
    std::fprintf(stderr, "safeamp sim: rank %d ends abruptly at step %lld (data_parallel.exit_rank, a test hook)\n",
                 ranks_->rank(), static_cast<long long>(step));
    std::fflush(stderr);
    std::_Exit(3);  // a crash: no clean-up, no MPI_Finalize
  }
  results_.clear();
}

bool data_parallel::corrupts_scaler_at(std::int64_t step) const {
  return ranks_->rank() == cfg_.corrupt_rank && step == cfg_.corrupt_step;
}

std::string data_parallel::checkpoint_settings() const {
  std::string s = "data_parallel micro_batches=" + std::to_string(cfg_.micro_batches) +
                  " reduction=" + to_string(cfg_.reduction) +
                  " fault_micro_batch=" + std::to_string(cfg_.fault_micro_batch);
  if (cfg_.reduction.order != reduce_order::canonical) s += " ranks=" + std::to_string(ranks_->size());
  return s;
}

namespace {
constexpr std::size_t counter_fields = 6;  // elements, overflow, underflow, subnormal, nan, infinity
constexpr std::size_t floats_per_u64 = sizeof(std::uint64_t) / sizeof(float);
static_assert(sizeof(double) == sizeof(std::uint64_t) && sizeof(std::uint64_t) == 2 * sizeof(float));

// 1 when x is inf or NaN (all exponent bits set), else 0: integer operations, so a loop OR-ing it vectorizes
// (a float reduction would not, its order being fixed without -ffast-math).
inline std::uint32_t non_finite(float x) noexcept {
  constexpr std::uint32_t exponent = 0x7f800000u;
  return (std::bit_cast<std::uint32_t>(x) & exponent) == exponent ? 1u : 0u;
}

bool all_finite(const float* g, std::size_t len) noexcept {
  std::uint32_t any = 0;
  for (std::size_t i = 0; i < len; ++i) any |= non_finite(g[i]);
  return any == 0;
}
}  // namespace

void data_parallel::keep(const batch_part& part, std::span<const std::span<float>> grads, part_result result) {
  const bool canonical = cfg_.reduction.order == reduce_order::canonical;
  const auto slots = static_cast<std::size_t>(max_local_parts_);
  if (results_.empty()) {  // the step's first part: lay out the record
    elements_ = 0;
    for (const std::span<float> g : grads) elements_ += g.size();
    header_ = floats_per_u64 * (slots + result.counts.size() * counter_fields);
    record_ = header_ + (canonical ? slots : 1) * elements_;
    send_.resize(record_);  // slots this rank does not fill are never read
    if (!canonical) kept_.resize(slots * elements_);
  }
  const std::size_t slot = static_cast<std::size_t>(part.index - first_part(ranks_->rank()));
  float* out = (canonical ? send_.data() + header_ : kept_.data()) + slot * elements_;
  for (const std::span<float> g : grads) out = std::copy(g.begin(), g.end(), out);
  results_.push_back(std::move(result));
}

part_result data_parallel::reduce(std::span<const std::span<float>> grads) {
  communicator& c = *ranks_;
  const auto n = static_cast<std::size_t>(c.size());
  const auto slots = static_cast<std::size_t>(max_local_parts_);
  const std::int64_t k_total = cfg_.micro_batches;
  const bool canonical = cfg_.reduction.order == reduce_order::canonical;
  const std::size_t counters = results_.front().counts.size();

  // This rank's record: losses and counters in the header, then (wire) the fp32 sum of its own parts.
  std::vector<double> losses(slots, 0.0);
  for (std::size_t s = 0; s < results_.size(); ++s) losses[s] = results_[s].loss;
  std::memcpy(send_.data(), losses.data(), slots * sizeof(double));
  std::vector<std::uint64_t> counts(counters * counter_fields, 0);
  for (const part_result& r : results_) {
    for (std::size_t i = 0; i < counters; ++i) {
      const cast_stats& s = r.counts[i];
      const std::uint64_t f[counter_fields] = {s.elements, s.overflow, s.underflow, s.subnormal, s.nan, s.infinity};
      for (std::size_t k = 0; k < counter_fields; ++k) counts[i * counter_fields + k] += f[k];
    }
  }
  // memcpy from an empty vector's data() (null) is undefined even for zero bytes: fp32 runs have no counters.
  if (!counts.empty())
    std::memcpy(send_.data() + floats_per_u64 * slots, counts.data(), counts.size() * sizeof(std::uint64_t));
  if (!canonical) {
    float* mine = send_.data() + header_;
    for (std::size_t s = 0; s < results_.size(); ++s) {
      const float* g = kept_.data() + s * elements_;
      for (std::size_t i = 0; i < elements_; ++i) mine[i] = s == 0 ? g[i] : mine[i] + g[i];
    }
  }
  // One all-gather per step: every rank's record to every rank.
  gathered_.resize(n * record_);
  c.allgather(std::as_bytes(std::span<const float>(send_)), std::as_writable_bytes(std::span<float>(gathered_)));
  const auto record_of = [&](std::size_t rank) { return gathered_.data() + rank * record_; };

  // Which ranks sent a non-finite gradient (a part's, or a rank's sum: inf and NaN survive the sum).
  std::vector<std::int32_t> overflowed;
  const auto note = [&](int rank) {
    if (overflowed.empty() || overflowed.back() != rank) overflowed.push_back(rank);
  };
  std::int64_t wire_overflows = 0;
  reduced_.resize(elements_);
  float* acc = reduced_.data();
  if (canonical) {
    // One fixed-order fp32 sum over parts 0..K-1, checking each part as it is added.
    for (std::int64_t k = 0; k < k_total; ++k) {
      int owner = 0;
      while (first_part(owner + 1) <= k) ++owner;
      const float* g = record_of(static_cast<std::size_t>(owner)) + header_ +
                       static_cast<std::size_t>(k - first_part(owner)) * elements_;
      std::uint32_t any = 0;
      if (k == 0) {
        for (std::size_t i = 0; i < elements_; ++i) {
          acc[i] = g[i];
          any |= non_finite(g[i]);
        }
      } else {
        for (std::size_t i = 0; i < elements_; ++i) {
          acc[i] += g[i];
          any |= non_finite(g[i]);
        }
      }
      if (any != 0) note(owner);
    }
  } else {
    // The emulated collective over the ranks' sums.
    std::vector<float> contributions(n * elements_);
    for (std::size_t r = 0; r < n; ++r) {
      const float* g = record_of(r) + header_;
      if (!all_finite(g, elements_)) note(static_cast<int>(r));
      std::copy(g, g + elements_, contributions.begin() + static_cast<std::ptrdiff_t>(r * elements_));
    }
    wire_overflows = reduce_across_ranks(cfg_.reduction, contributions, c.size(), reduced_);
  }
  const auto parts = static_cast<float>(k_total);
  const float* src = acc;
  for (const std::span<float> g : grads) {
    for (float& v : g) v = *src++ / parts;  // the mean over parts; exact when K is a power of two
  }

  // The loss: every part's loss, summed in part order; the counters: integer sums (order-free).
  part_result total;
  total.non_finite_ranks = std::move(overflowed);
  total.wire_overflows = wire_overflows;
  for (std::int64_t k = 0; k < k_total; ++k) {
    int owner = 0;
    while (first_part(owner + 1) <= k) ++owner;
    double loss = 0.0;
    std::memcpy(
        &loss,
        record_of(static_cast<std::size_t>(owner)) + floats_per_u64 * static_cast<std::size_t>(k - first_part(owner)),
        sizeof(double));
    total.loss += loss;
  }
  total.loss /= static_cast<double>(k_total);
  if (counters > 0) {
    total.counts.assign(counters, cast_stats{});
    std::vector<std::uint64_t> theirs(counters * counter_fields);
    for (std::size_t r = 0; r < n; ++r) {
      std::memcpy(theirs.data(), record_of(r) + floats_per_u64 * slots, theirs.size() * sizeof(std::uint64_t));
      for (std::size_t i = 0; i < counters; ++i) {
        const std::uint64_t* f = theirs.data() + i * counter_fields;
        cast_stats& s = total.counts[i];
        s.elements += f[0];
        s.overflow += f[1];
        s.underflow += f[2];
        s.subnormal += f[3];
        s.nan += f[4];
        s.infinity += f[5];
      }
    }
  }
  return total;
}

}  // namespace safeamp::sim
