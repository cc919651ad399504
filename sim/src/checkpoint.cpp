// Binary checkpoints with checksum, written atomically (see checkpoint.hpp).
#include "safeamp/sim/checkpoint.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string_view>
#include <vector>

#include "safeamp/error.hpp"
#include "safeamp/sim/data_parallel_config.hpp"
#include "safeamp/sim/report_files.hpp"

namespace safeamp::sim {
namespace {

constexpr char magic[16] = {'S', 'A', 'F', 'E', 'A', 'M', 'P', '-', 'S', 'I', 'M', '-', 'C', 'K', 'P', 'T'};

std::uint64_t fnv1a(const std::uint8_t* p, std::size_t n) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

class writer {
 public:
  template <class T>
  void put(const T& v) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof(T));
  }
  void put_string(std::string_view s) {
    put(static_cast<std::uint64_t>(s.size()));
    bytes.insert(bytes.end(), s.begin(), s.end());
  }
  void put_matrix(const matrix& m) {
    put(static_cast<std::int64_t>(m.rows()));
    put(static_cast<std::int64_t>(m.cols()));
    const auto* p = reinterpret_cast<const std::uint8_t*>(m.data());
    bytes.insert(bytes.end(), p, p + static_cast<std::size_t>(m.size()) * sizeof(float));
  }
  std::vector<std::uint8_t> bytes;
};

class reader {
 public:
  reader(const std::string& path, const std::vector<std::uint8_t>& b, std::size_t end) : path_(path), bytes_(b), end_(end) {}
  template <class T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string get_string() {
    const auto n = get<std::uint64_t>();
    need(n);
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return s;
  }
  matrix get_matrix(const std::string& what, Eigen::Index rows, Eigen::Index cols) {
    const auto r = get<std::int64_t>();
    const auto c = get<std::int64_t>();
    if (r != rows || c != cols) {
      throw error("checkpoint '" + path_ + "' " + what + " shape", std::to_string(r) + "x" + std::to_string(c),
                  std::to_string(rows) + "x" + std::to_string(cols) + " (the model of this run)");
    }
    matrix m(rows, cols);
    const std::size_t n = static_cast<std::size_t>(m.size()) * sizeof(float);
    need(n);
    std::memcpy(m.data(), bytes_.data() + pos_, n);
    pos_ += n;
    return m;
  }
  [[nodiscard]] std::size_t position() const noexcept { return pos_; }

 private:
  void need(std::uint64_t n) const {
    if (n > end_ - pos_) throw error("checkpoint '" + path_ + "'", "truncated", "a complete checkpoint file");
  }
  const std::string& path_;
  const std::vector<std::uint8_t>& bytes_;
  std::size_t end_;
  std::size_t pos_ = 0;
};

// A name read from the file, shortened for an error message.
std::string bounded_name(const std::string& s) { return s.size() <= 64 ? s : s.substr(0, 64) + "..."; }

// Every value of a tensor is finite (and, for the AdamW second moment, not negative: its square root
// divides the update). A NaN or inf loaded from a file would poison every later step.
// Non-finite values are restored as saved: a run that diverged (no loss scaling, or an overflow it applied) holds
// inf and NaN in its weights and moments, and its resume must return what the uninterrupted run does (until
// 2026-12-06 they were refused, so such a run could not be resumed). A second moment is a running mean of squares:
// a negative one (-inf included) cannot come from any run.
void check_second_moment(const std::string& path, const std::string& what, const matrix& m) {
  for (Eigen::Index k = 0; k < m.size(); ++k) {
    const float v = m.data()[k];
    if (v < 0.0f) {
      throw error("checkpoint '" + path + "' " + what + " [" + std::to_string(k) + "]", std::to_string(v),
                  "a value >= 0 (or NaN or +inf, as a diverged run saves it)");
    }
  }
}

// The largest file a checkpoint of this model can be: header, names and shapes, the parameters and up to
// three optimizer tensors each, the update count, plus room for the loss scaler's JSON (a few hundred bytes).
constexpr std::uintmax_t scaler_json_allowance_bytes = std::uintmax_t{1} << 20;

// Bytes of one step record: step, loss, scale, found_inf, skipped, two norms, seconds, the overflowing ranks'
// count and ranks (at most one per micro-batch), the wire overflows, the counter count, then per counter its
// name and five counts (at most one counter per parameter plus the loss gradient).
constexpr std::uintmax_t record_fixed_bytes =
    8 + 8 + 4 + 1 + 1 + 8 + 8 + 8 + 8 + static_cast<std::uintmax_t>(max_micro_batches) * 4 + 8 + 8;
std::uintmax_t max_record_bytes(const parameter_list& params) {
  std::uintmax_t longest = std::string_view(loss_gradient_name).size();
  for (const parameter& p : params) longest = std::max<std::uintmax_t>(longest, p.name.size());
  return record_fixed_bytes + (params.size() + 1) * (8 + longest + 5 * 8);
}

std::uintmax_t max_checkpoint_bytes(const parameter_list& params, std::int64_t max_next_step) {
  constexpr std::uintmax_t word = sizeof(std::uint64_t);
  constexpr std::uintmax_t optimizer_tensor_kinds = 3;  // first moment, second moment, master weights
  std::uintmax_t total = sizeof magic + sizeof(std::uint32_t) + 3 * word;  // magic, version, print, step, count
  for (const parameter& p : params) {
    const std::uintmax_t tensor = 2 * word + static_cast<std::uintmax_t>(p.value.size()) * sizeof(float);
    total += word + p.name.size() + tensor * (1 + optimizer_tensor_kinds);
  }
  total += optimizer_tensor_kinds * word + word;  // tensor counts, update count
  total += word + scaler_json_allowance_bytes + word;  // scaler JSON and checksum
  // The history: one record per step before next_step (saturating: a huge step count caps nothing less).
  const std::uintmax_t record = max_record_bytes(params);
  const auto steps = static_cast<std::uintmax_t>(std::max<std::int64_t>(max_next_step, 0));
  const std::uintmax_t room = std::numeric_limits<std::uintmax_t>::max() - total - word;
  return steps > room / record ? std::numeric_limits<std::uintmax_t>::max() : total + word + steps * record;
}

void put_history(writer& w, const std::vector<step_record>& history) {
  w.put(static_cast<std::uint64_t>(history.size()));
  for (const step_record& r : history) {
    w.put(r.step);
    w.put(r.loss);
    w.put(r.scale);
    w.put(static_cast<std::uint8_t>(r.found_inf ? 1 : 0));
    w.put(static_cast<std::uint8_t>(r.skipped ? 1 : 0));
    w.put(r.grad_norm_before_clip);
    w.put(r.grad_norm_after_clip);
    w.put(r.step_seconds);
    w.put(static_cast<std::uint64_t>(r.overflow_ranks.size()));
    for (const std::int32_t rank : r.overflow_ranks) w.put(rank);
    w.put(r.wire_overflows);
    w.put(static_cast<std::uint64_t>(r.grads.size()));
    for (const layer_counts& g : r.grads) {
      w.put_string(g.name);
      for (const std::uint64_t v : {g.elements, g.overflow, g.underflow, g.subnormal, g.nan}) w.put(v);
    }
  }
}

bool read_flag(reader& r, const std::string& path, const std::string& what) {
  const auto v = r.get<std::uint8_t>();
  if (v > 1) throw error("checkpoint '" + path + "' " + what, std::to_string(v), "0 or 1");
  return v == 1;
}

// The records of steps 0 .. next_step-1, each checked: its number, a positive finite scale, a skip only with
// a non-finite gradient, counters named after the loss gradient or a parameter, none above its elements.
std::vector<step_record> get_history(reader& r, const std::string& path, std::int64_t next_step,
                                     const parameter_list& params) {
  const auto count = r.get<std::uint64_t>();
  if (count != static_cast<std::uint64_t>(next_step)) {
    throw error("checkpoint '" + path + "' step records", std::to_string(count),
                std::to_string(next_step) + " (one per step before the checkpoint's next step)");
  }
  std::vector<step_record> out;
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::string at = "step record " + std::to_string(i);
    step_record rec;
    rec.step = r.get<std::int64_t>();
    if (rec.step != static_cast<std::int64_t>(i)) {
      throw error("checkpoint '" + path + "' " + at + " step", std::to_string(rec.step), std::to_string(i));
    }
    rec.loss = r.get<double>();
    rec.scale = r.get<float>();
    if (!std::isfinite(rec.scale) || !(rec.scale > 0.0f)) {
      throw error("checkpoint '" + path + "' " + at + " scale", std::to_string(rec.scale), "a finite number > 0");
    }
    rec.found_inf = read_flag(r, path, at + " found_inf");
    rec.skipped = read_flag(r, path, at + " skipped");
    if (rec.skipped && !rec.found_inf) {
      throw error("checkpoint '" + path + "' " + at + " skipped", "true with found_inf false",
                  "a step skipped only because its gradient was not finite");
    }
    rec.grad_norm_before_clip = r.get<double>();
    rec.grad_norm_after_clip = r.get<double>();
    rec.step_seconds = r.get<double>();
    if (!std::isfinite(rec.step_seconds) || rec.step_seconds < 0.0) {
      throw error("checkpoint '" + path + "' " + at + " seconds", std::to_string(rec.step_seconds),
                  "a finite number >= 0");
    }
    const auto ranks = r.get<std::uint64_t>();
    if (ranks > static_cast<std::uint64_t>(max_micro_batches)) {
      throw error("checkpoint '" + path + "' " + at + " overflowing ranks", std::to_string(ranks),
                  "0 to " + std::to_string(max_micro_batches) + " (one per rank, at most one per micro-batch)");
    }
    for (std::uint64_t k = 0; k < ranks; ++k) {
      const auto rank = r.get<std::int32_t>();
      const std::int32_t after = rec.overflow_ranks.empty() ? -1 : rec.overflow_ranks.back();
      if (rank <= after || rank >= max_micro_batches) {
        throw error("checkpoint '" + path + "' " + at + " overflowing rank", std::to_string(rank),
                    "ranks in ascending order, each from " + std::to_string(after + 1) + " to " +
                        std::to_string(max_micro_batches - 1));
      }
      rec.overflow_ranks.push_back(rank);
    }
    rec.wire_overflows = r.get<std::int64_t>();
    if (rec.wire_overflows < 0) {
      throw error("checkpoint '" + path + "' " + at + " wire overflows", std::to_string(rec.wire_overflows),
                  "a count >= 0");
    }
    const auto grads = r.get<std::uint64_t>();
    if (grads > params.size() + 1) {
      throw error("checkpoint '" + path + "' " + at + " gradient counters", std::to_string(grads),
                  "0 to " + std::to_string(params.size() + 1) + " (the loss gradient and each parameter)");
    }
    for (std::uint64_t k = 0; k < grads; ++k) {
      layer_counts g;
      g.name = r.get_string();
      const bool known =
          g.name == loss_gradient_name ||
          std::any_of(params.begin(), params.end(), [&](const parameter& p) { return p.name == g.name; });
      if (!known) {
        throw error("checkpoint '" + path + "' " + at + " counter name", "'" + bounded_name(g.name) + "'",
                    std::string(loss_gradient_name) + " or a parameter of this model");
      }
      g.elements = r.get<std::uint64_t>();
      g.overflow = r.get<std::uint64_t>();
      g.underflow = r.get<std::uint64_t>();
      g.subnormal = r.get<std::uint64_t>();
      g.nan = r.get<std::uint64_t>();
      for (const std::uint64_t v : {g.overflow, g.underflow, g.subnormal, g.nan}) {
        if (v > g.elements) {
          throw error("checkpoint '" + path + "' " + at + " counters of " + g.name, std::to_string(v),
                      "at most the " + std::to_string(g.elements) + " elements counted");
        }
      }
      rec.grads.push_back(std::move(g));
    }
    out.push_back(std::move(rec));
  }
  return out;
}

void put_matrices(writer& w, const std::vector<matrix>& ms) {
  w.put(static_cast<std::uint64_t>(ms.size()));
  for (const matrix& m : ms) w.put_matrix(m);
}

std::vector<matrix> get_matrices(reader& r, const std::string& what, const parameter_list& params) {
  const auto n = r.get<std::uint64_t>();
  if (n != 0 && n != params.size()) {
    throw error("checkpoint " + what + " tensors", std::to_string(n), "0 or " + std::to_string(params.size()));
  }
  std::vector<matrix> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back(r.get_matrix(what + " " + params[i].name, params[i].value.rows(), params[i].value.cols()));
  return out;
}

}  // namespace

void save_checkpoint(const std::string& path, const checkpoint_data& meta, const parameter_list& params,
                     const optimizer_state& opt) {
  writer w;
  for (const char c : magic) w.put(c);
  w.put(checkpoint_version);
  w.put(meta.config_fingerprint);
  w.put(meta.next_step);
  w.put(static_cast<std::uint64_t>(params.size()));
  for (const parameter& p : params) {
    w.put_string(p.name);
    w.put_matrix(p.value);
  }
  put_matrices(w, opt.first);
  put_matrices(w, opt.second);
  put_matrices(w, opt.master);
  w.put(opt.updates);
  w.put_string(meta.scaler_json);
  put_history(w, meta.history);
  w.put(fnv1a(w.bytes.data(), w.bytes.size()));

  // Temp file + fsync + rename: a failed or interrupted save never replaces a good checkpoint.
  write_file_atomically(std::filesystem::path(path),
                        std::string_view(reinterpret_cast<const char*>(w.bytes.data()), w.bytes.size()));
}

checkpoint_data load_checkpoint(const std::string& path, parameter_list& params, optimizer_state& opt,
                                std::int64_t max_next_step) {
  const std::string text =
      read_input_file(std::filesystem::path(path), "checkpoint", max_checkpoint_bytes(params, max_next_step));
  const std::vector<std::uint8_t> bytes(text.begin(), text.end());
  constexpr std::size_t min_size = sizeof magic + sizeof(std::uint32_t) + sizeof(std::uint64_t);
  if (bytes.size() < min_size || std::memcmp(bytes.data(), magic, sizeof magic) != 0) {
    throw error("checkpoint '" + path + "'", bytes.size() < min_size ? "truncated" : "not a safeamp checkpoint (bad magic)",
                "a file written by safeamp::sim::save_checkpoint");
  }
  const std::size_t body = bytes.size() - sizeof(std::uint64_t);
  std::uint64_t stored = 0;
  std::memcpy(&stored, bytes.data() + body, sizeof stored);
  if (stored != fnv1a(bytes.data(), body)) {
    throw error("checkpoint '" + path + "'", "corrupt or truncated (checksum mismatch)", "an intact checkpoint file");
  }
  reader r(path, bytes, body);
  for (std::size_t i = 0; i < sizeof magic; ++i) (void)r.get<char>();
  const auto version = r.get<std::uint32_t>();
  if (version != checkpoint_version) {
    throw error("checkpoint '" + path + "' version", std::to_string(version),
                std::to_string(checkpoint_version) +
                    " (a checkpoint of another safeamp version cannot be resumed; run without it to start over)");
  }
  checkpoint_data meta;
  meta.config_fingerprint = r.get<std::uint64_t>();
  meta.next_step = r.get<std::int64_t>();
  if (meta.next_step < 0 || meta.next_step > max_next_step) {
    throw error("checkpoint '" + path + "' next step", std::to_string(meta.next_step),
                "0 to " + std::to_string(max_next_step) + " (the steps of this run)");
  }
  const auto count = r.get<std::uint64_t>();
  if (count != params.size()) {
    throw error("checkpoint '" + path + "' parameters", std::to_string(count), std::to_string(params.size()));
  }
  std::vector<matrix> values;
  for (const parameter& p : params) {
    const std::string name = r.get_string();
    if (name != p.name) {
      throw error("checkpoint '" + path + "' parameter", "'" + bounded_name(name) + "'", "'" + p.name + "'");
    }
    values.push_back(r.get_matrix(name, p.value.rows(), p.value.cols()));
  }
  optimizer_state loaded;
  loaded.first = get_matrices(r, "optimizer first moment", params);
  loaded.second = get_matrices(r, "optimizer second moment", params);
  loaded.master = get_matrices(r, "master weights", params);
  loaded.updates = r.get<std::int64_t>();
  meta.scaler_json = r.get_string();
  meta.history = get_history(r, path, meta.next_step, params);
  if (r.position() != body) {
    throw error("checkpoint '" + path + "'", "has " + std::to_string(body - r.position()) + " unexpected trailing bytes",
                "a file written by this version");
  }
  if (loaded.first.size() != opt.first.size() || loaded.second.size() != opt.second.size() ||
      loaded.master.size() != opt.master.size()) {
    throw error("checkpoint '" + path + "' optimizer state",
                std::to_string(loaded.first.size()) + "/" + std::to_string(loaded.second.size()) + "/" +
                    std::to_string(loaded.master.size()) + " tensors",
                std::to_string(opt.first.size()) + "/" + std::to_string(opt.second.size()) + "/" +
                    std::to_string(opt.master.size()) + " (this run's optimizer)");
  }
  // Each step applies at most one update, so the count lies between 0 and the steps already run.
  if (loaded.updates < 0 || loaded.updates > meta.next_step) {
    throw error("checkpoint '" + path + "' optimizer updates", std::to_string(loaded.updates),
                "0 to " + std::to_string(meta.next_step) + " (the checkpoint's next step)");
  }
  for (std::size_t i = 0; i < loaded.second.size() && i < params.size(); ++i) {
    check_second_moment(path, "optimizer second moment " + params[i].name, loaded.second[i]);
  }
  // Everything parsed and checked: commit.
  for (std::size_t i = 0; i < params.size(); ++i) params[i].value = std::move(values[i]);
  opt = std::move(loaded);
  return meta;
}

}  // namespace safeamp::sim
