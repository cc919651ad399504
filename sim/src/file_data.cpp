// Data and initial weights from .npy files and .npz archives (see file_data.hpp).
#include "safeamp/sim/file_data.hpp"

#include <algorithm>
#include <cstdio>

#include "safeamp/error.hpp"
#include "safeamp/sim/npz.hpp"

namespace safeamp::sim {
namespace {

matrix as_matrix(const npy_array& a) {
  matrix m(a.rows(), a.cols());
  std::copy(a.values.begin(), a.values.end(), m.data());
  return m;
}

std::string shape_text(const npy_array& a) {
  std::string s = "(";
  for (std::size_t i = 0; i < a.shape.size(); ++i) s += (i ? ", " : "") + std::to_string(a.shape[i]);
  return s + (a.shape.size() == 1 ? ",)" : ")");
}

std::string quoted(const std::string& path) { return " '" + path + "'"; }

// The ids of an integer (rows, context) array, each in [0, vocab). `where` names the field and the file; `role`
// says what the ids are ("token ids", "target ids").
std::vector<std::int32_t> token_ids(const npy_array& a, const std::string& where, file_tokens t, const char* role) {
  const std::string wanted = "(rows, " + std::to_string(t.context) + ")";
  if (!a.is_integer) {
    throw error(
        where + " dtype", "float of shape " + shape_text(a),
        std::string("int32 or int64 ") + role + " of shape " + wanted + " for a stack that starts with an embedding");
  }
  if (a.shape.size() != 2 || a.shape[0] < 1 || a.shape[1] != t.context) {
    throw error(where + " shape", shape_text(a),
                wanted + ", rows >= 1: one sequence of model.layers[0].context = " + std::to_string(t.context) +
                    " ids per row");
  }
  std::vector<std::int32_t> ids(a.integers.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::int64_t v = a.integers[i];
    if (v < 0 || v >= t.vocab) {
      const auto cols = static_cast<std::size_t>(t.context);
      throw error(where + " element [" + std::to_string(i / cols) + ", " + std::to_string(i % cols) + "]",
                  std::to_string(v), "a token id in [0, " + std::to_string(t.vocab) + ") (model.layers[0].vocab)");
    }
    ids[i] = static_cast<std::int32_t>(v);
  }
  return ids;
}

}  // namespace

file_tokens token_inputs(const model_stack& stack) noexcept {
  if (stack.layers.empty() || stack.layers.front().kind != layer_kind::embedding) return {};
  return {.context = stack.layers.front().context, .vocab = stack.layers.front().vocab};
}

void file_data::load(const std::string& in_path, const std::string& tgt_path, const char* in_field,
                     const char* tgt_field, split& out) const {
  const npy_array x = read_array_file(in_path, in_field);
  const npy_array y = read_array_file(tgt_path, tgt_field);
  const std::string in_where = std::string(in_field) + quoted(in_path);
  const std::string tgt_where = std::string(tgt_field) + quoted(tgt_path);
  if (tokens_.context > 0) {
    out.tokens = token_ids(x, in_where, tokens_, "token ids");
  } else if (x.shape.empty() || x.rows() < 1) {
    throw error(in_where + " shape", shape_text(x), "(rows, features) or (rows,), rows >= 1");
  }
  out.rows = x.rows();
  if (y.shape.empty() || y.rows() != x.rows()) {
    throw error(tgt_where + " shape", shape_text(y),
                "one target row per input row (" + std::to_string(x.rows()) + " rows, as in " + in_field + ")");
  }
  if (tokens_.context > 0) {
    out.classes = token_ids(y, tgt_where, tokens_, "target ids");
    return;
  }
  out.inputs = as_matrix(x);
  if (regression_) {
    if (y.cols() < 1) {
      throw error(tgt_where + " shape", shape_text(y), "(rows, outputs) with outputs >= 1, or (rows,)");
    }
    out.values = as_matrix(y);
    return;
  }
  if (!y.is_integer) {
    throw error(tgt_where + " dtype", "float of shape " + shape_text(y),
                "int32 or int64 class indices of shape (rows,) for cross_entropy (float targets need a regression "
                "loss: training.loss mse, l1 or huber)");
  }
  if (y.cols() != 1) {
    throw error(tgt_where + " shape", shape_text(y),
                "(rows,) or (rows, 1): one class index per row for cross_entropy (several target columns need a "
                "regression loss: training.loss mse, l1 or huber)");
  }
  for (std::size_t i = 0; i < y.integers.size(); ++i) {
    if (y.integers[i] < 0 || y.integers[i] > (std::int64_t{1} << 20)) {
      throw error(tgt_where + " element [" + std::to_string(i) + "]", std::to_string(y.integers[i]),
                  "a class index in [0, 2^20]");
    }
    out.classes.push_back(static_cast<std::int32_t>(y.integers[i]));
  }
}

file_data::file_data(const data_config& cfg, loss_kind loss, file_tokens tokens)
    : cfg_(cfg), regression_(loss != loss_kind::cross_entropy), tokens_(tokens) {
  load(cfg.inputs_path, cfg.targets_path, "data.inputs", "data.targets", train_);
  if (cfg.eval_inputs_path.empty()) {
    eval_ = train_;
  } else {
    load(cfg.eval_inputs_path, cfg.eval_targets_path, "data.eval_inputs", "data.eval_targets", eval_);
    if (eval_.inputs.cols() != train_.inputs.cols()) {
      throw error("data.eval_inputs" + quoted(cfg.eval_inputs_path) + " columns", std::to_string(eval_.inputs.cols()),
                  std::to_string(train_.inputs.cols()) + ", those of data.inputs" + quoted(cfg.inputs_path));
    }
    if (eval_.values.cols() != train_.values.cols()) {
      throw error("data.eval_targets" + quoted(cfg.eval_targets_path) + " columns", std::to_string(eval_.values.cols()),
                  std::to_string(train_.values.cols()) + ", those of data.targets" + quoted(cfg.targets_path));
    }
  }
  if (tokens_.context > 0) {
    output_width_ = tokens_.vocab;  // the head scores every token id
  } else if (regression_) {
    output_width_ = train_.values.cols();
  } else {
    std::int32_t top = 1;
    for (const std::int32_t c : train_.classes) top = std::max(top, c);
    for (const std::int32_t c : eval_.classes) top = std::max(top, c);
    output_width_ = std::int64_t{top} + 1;
  }
}

batch file_data::rows_of(const split& s, std::int64_t first, std::int64_t count) const {
  const std::int64_t n = s.rows;
  batch b;
  b.samples = count;
  if (tokens_.context > 0) {  // count sequences: their ids and every position's target, one slice
    const auto t = static_cast<std::size_t>(tokens_.context);
    for (std::int64_t r = 0; r < count; ++r) {
      const auto i = static_cast<std::size_t>((first + r) % n);
      b.tokens.insert(b.tokens.end(), s.tokens.begin() + static_cast<std::ptrdiff_t>(i * t),
                      s.tokens.begin() + static_cast<std::ptrdiff_t>((i + 1) * t));
      b.targets.insert(b.targets.end(), s.classes.begin() + static_cast<std::ptrdiff_t>(i * t),
                       s.classes.begin() + static_cast<std::ptrdiff_t>((i + 1) * t));
    }
    b.slices.assign(b.targets.size(), 0);
    return b;
  }
  b.features.resize(count, s.inputs.cols());
  if (regression_) b.target_values.resize(count, s.values.cols());
  b.slices.assign(static_cast<std::size_t>(count), 0);
  for (std::int64_t r = 0; r < count; ++r) {
    const std::int64_t i = (first + r) % n;
    b.features.row(r) = s.inputs.row(i);
    if (regression_) {
      b.target_values.row(r) = s.values.row(i);
      b.targets.push_back(0);
    } else {
      b.targets.push_back(s.classes[static_cast<std::size_t>(i)]);
    }
  }
  return b;
}

batch file_data::train_batch(const batch_request& req) const {
  const std::int64_t step = req.step;
  const std::int64_t batch_size = req.samples;
  const std::int64_t n = train_.rows;
  if (batch_size >= n) return rows_of(train_, 0, n);  // a fixed batch: every row
  return rows_of(train_, (step % n) * (batch_size % n) % n, batch_size);
}

batch file_data::eval_set() const { return rows_of(eval_, 0, eval_.rows); }

batch file_data::probe() const { return rows_of(eval_, 0, std::min(cfg_.probe_rows, eval_.rows)); }

void load_initial_weights(const data_config& cfg, parameter_list& params, format_spec param_format) {
  for (const auto& [name, path] : cfg.initial_weights) {
    const std::string field = "data.initial_weights." + name;
    const std::string& wanted = name;  // (clang 14 cannot capture a structured binding)
    const auto it = std::find_if(params.begin(), params.end(), [&](const parameter& p) { return p.name == wanted; });
    if (it == params.end()) {
      std::string names;
      for (const parameter& p : params) names += (names.empty() ? "" : ", ") + p.name;
      throw error(field, "an unknown parameter", names);
    }
    const npy_array a = read_array_file(path, field);
    const matrix& v = it->value;
    const bool same = (a.shape.size() == 2 && a.shape[0] == v.rows() && a.shape[1] == v.cols()) ||
                      (a.shape.size() == 1 && v.rows() == 1 && a.shape[0] == v.cols());
    if (!same) {
      throw error(field + quoted(path) + " shape", shape_text(a),
                  "(" + std::to_string(v.rows()) + ", " + std::to_string(v.cols()) + ")" +
                      (v.rows() == 1 ? " or (" + std::to_string(v.cols()) + ",)" : "") +
                      " (a linear weight is (in, out): PyTorch's Linear.weight.T)");
    }
    std::copy(a.values.begin(), a.values.end(), it->value.data());
    // A value beyond the parameter format's range would start the run at inf (every step then skipped, the
    // scaler blamed): refused, naming the format and its largest value.
    const cast_stats st = cast_in_place(it->value, param_format, round_options{}, philox_key{});
    if (st.infinity > 0 || st.nan > 0) {  // the inputs are finite (read_array_file): these overflowed
      char largest[32];
      std::snprintf(largest, sizeof largest, "%.9g", static_cast<double>(max_finite(param_format)));
      throw error(field + quoted(path),
                  std::to_string(st.infinity + st.nan) + " value(s) beyond " + format_name(param_format) +
                      "'s range (the run's parameter format)",
                  "values whose magnitude rounds to at most " + format_name(param_format) + "'s largest, " + largest);
    }
  }
}

bool reads_corpus(const run_config& cfg) {
  if (cfg.data.from_files()) return false;
  const model_stack stack = preset_stack(cfg);
  return !stack.layers.empty() && stack.layers.front().kind == layer_kind::embedding;
}

double file_data::held_bytes(bool eval) const noexcept {
  const split& s = eval ? eval_ : train_;
  return 4.0 * static_cast<double>(s.inputs.size() + s.values.size()) +
         static_cast<double>(sizeof(std::int32_t)) * static_cast<double>(s.tokens.size() + s.classes.size());
}

data_files_shape check_data_files(const run_config& cfg) {
  if (!cfg.data.from_files()) return {};
  const model_stack stack = preset_stack(cfg);
  const file_tokens tokens = token_inputs(stack);
  const file_data data(cfg.data, cfg.loss, tokens);
  if (tokens.context == 0 && data.input_width() != stack.input_dim) {
    throw error("data.inputs '" + cfg.data.inputs_path + "' columns", std::to_string(data.input_width()),
                std::to_string(stack.input_dim) + " (model.input_dim)");
  }
  // A batch at least as large as the file trains on every row each step: the micro-batches cut those.
  if (cfg.data_parallel && cfg.batch_size > data.train_rows()) {
    const std::int64_t parts = cfg.data_parallel->config.micro_batches;
    if (parts > 0 && data.train_rows() % parts != 0) {
      throw error("data_parallel.micro_batches", std::to_string(parts),
                  "a divisor of the samples of a step: training.batch_size " + std::to_string(cfg.batch_size) +
                      " is above the " + std::to_string(data.train_rows()) + " rows of data.inputs '" +
                      cfg.data.inputs_path + "', so each step trains on those " + std::to_string(data.train_rows()) +
                      " (a batch size of at most the rows, or micro-batches that divide them)");
    }
  }
  const std::unique_ptr<model> net =
      make_stack_model(stack, tokens.vocab, data.output_width(), cfg.seed, cfg.policy.param);
  load_initial_weights(cfg.data, net->parameters(), cfg.policy.param);
  return {.train_rows = data.train_rows(),
          .eval_rows = data.eval_rows(),
          .output_width = data.output_width(),
          .bytes = 5.0 * data.held_bytes(false) + 2.0 * data.held_bytes(true)};
}

}  // namespace safeamp::sim
