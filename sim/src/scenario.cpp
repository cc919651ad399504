// Scenario JSON: strict parsing (unknown keys with a did-you-mean, types, ranges), the run configurations
// and manifests derived from a scenario, and the gate tolerances of each candidate.
#include "safeamp/sim/scenario.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "safeamp/error.hpp"
#include "safeamp/policy/precision_policy.hpp"
#include "safeamp/quoted_input.hpp"
#include "safeamp/scaling/scaler_presets.hpp"
#include "safeamp/scaling/scaler_validate.hpp"
#include "data_parallel_json.hpp"
#include "safeamp/sim/did_you_mean.hpp"
#include "safeamp/sim/file_data.hpp"
#include "safeamp/sim/npz.hpp"
#include "safeamp/sim/json_input.hpp"
#include "safeamp/sim/report.hpp"
#include "safeamp/sim/report_files.hpp"

namespace safeamp::sim {
namespace {

using json = nlohmann::json;


std::string type_name(const json& j) { return j.type_name(); }

/// Reads one JSON object: refuses keys outside `keys` (with a suggestion) and values of the wrong type
/// or outside their range, naming the full key path.
class object_reader {
 public:
  object_reader(const json& j, std::string path, std::vector<std::string> keys) : j_(j), path_(std::move(path)) {
    if (!j.is_object()) throw error(path_, summarize_json(j) + " (" + type_name(j) + ")", "a JSON object");
    for (const auto& [key, value] : j.items()) {
      if (std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
      const std::string guess = did_you_mean(key, keys);
      std::string accepted = guess.empty() ? "" : "did you mean '" + guess + "'? ";
      accepted += "known keys: ";
      for (std::size_t i = 0; i < keys.size(); ++i) accepted += (i ? ", " : "") + keys[i];
      throw error(where(key), "an unknown key", accepted);
    }
  }

  [[nodiscard]] std::string where(std::string_view key) const {
    return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  }
  [[nodiscard]] bool has(const char* key) const { return j_.contains(key); }
  [[nodiscard]] const json& at(const char* key) const { return j_.at(key); }

  [[nodiscard]] std::string text(const char* key, std::string fallback, bool non_empty = true) const {
    if (!has(key)) return fallback;
    const json& v = at(key);
    if (!v.is_string()) throw error(where(key), summarize_json(v), "a string");
    std::string s = v.get<std::string>();
    if (non_empty && s.empty()) throw error(where(key), "\"\"", "a non-empty string");
    return s;
  }

  /// A string shown on terminals and in the reports (a name, a description): at most `max_bytes` bytes and no
  /// control characters (an ESC reached terminals and report.html raw, a NUL cut the printed summary short), but
  /// line breaks and tabs where `line_breaks` (a description's paragraphs). `what` says where the text goes.
  [[nodiscard]] std::string display_text(const char* key, std::string fallback, std::size_t max_bytes, bool line_breaks,
                                         const std::string& what, bool non_empty = true) const {
    std::string s = text(key, std::move(fallback), non_empty);
    if (s.size() > max_bytes) {
      throw error(where(key), "'" + bounded_text(s, 40) + "' (" + std::to_string(s.size()) + " bytes)",
                  "at most " + std::to_string(max_bytes) + " bytes (" + what + ")");
    }
    const auto control = [line_breaks](char ch) {
      if (line_breaks && (ch == '\n' || ch == '\t')) return false;
      return is_control_byte(ch);
    };
    if (std::any_of(s.begin(), s.end(), control)) {
      throw error(where(key), summarize_json(at(key)),
                  std::string(line_breaks ? "text without control characters other than line breaks and tabs"
                                          : "a name without control characters") +
                      " (" + what + ")");
    }
    return s;
  }

  [[nodiscard]] double number(const char* key, double fallback, double lo, double hi, const char* accepted) const {
    if (!has(key)) return fallback;
    const json& v = at(key);
    if (!v.is_number()) throw error(where(key), summarize_json(v), std::string("a number, ") + accepted);
    const double x = v.get<double>();
    if (!(x >= lo && x <= hi)) throw error(where(key), summarize_json(v), accepted);
    return x;
  }

  [[nodiscard]] std::int64_t integer(const char* key, std::int64_t fallback, std::int64_t lo, std::int64_t hi) const {
    if (!has(key)) return fallback;
    const json& v = at(key);
    const std::string accepted = "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    if (!v.is_number()) throw error(where(key), summarize_json(v), accepted);
    std::int64_t i = 0;
    if (v.is_number_unsigned()) {
      const auto u = v.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        throw error(where(key), summarize_json(v), accepted);
      }
      i = static_cast<std::int64_t>(u);
    } else if (v.is_number_integer()) {
      i = v.get<std::int64_t>();
    } else {
      // A float: whole and inside int64's range before converting (2^63 itself is out of range, although
      // double(INT64_MAX) rounds up to it).
      const double x = v.get<double>();
      if (!(x >= -0x1p63 && x < 0x1p63) || std::floor(x) != x) throw error(where(key), summarize_json(v), accepted);
      i = static_cast<std::int64_t>(x);
    }
    if (i < lo || i > hi) throw error(where(key), summarize_json(v), accepted);
    return i;
  }

  [[nodiscard]] bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const json& v = at(key);
    if (!v.is_boolean()) throw error(where(key), summarize_json(v), "true or false");
    return v.get<bool>();
  }

  template <class E>
  [[nodiscard]] E choice(const char* key, E fallback, const std::vector<std::pair<std::string, E>>& options) const {
    if (!has(key)) return fallback;
    const json& v = at(key);
    std::vector<std::string> names;
    std::string accepted;
    for (const auto& [n, e] : options) {
      names.push_back(n);
      accepted += (accepted.empty() ? "" : ", ") + n;
    }
    if (v.is_string()) {
      for (const auto& [n, e] : options) {
        if (n == v.get<std::string>()) return e;
      }
      const std::string guess = did_you_mean(v.get<std::string>(), names);
      if (!guess.empty()) accepted = "did you mean '" + guess + "'? one of " + accepted;
    }
    throw error(where(key), summarize_json(v), accepted);
  }

 private:
  const json& j_;
  std::string path_;
};

constexpr std::int64_t max_steps = 1'000'000;
constexpr std::int64_t max_dimension = 1 << 16;
constexpr double huge = std::numeric_limits<double>::max();
constexpr std::size_t max_name_bytes = 128;               // a candidate's, a layer's
constexpr std::size_t max_scenario_name_bytes = 256;      // the report's title
constexpr std::size_t max_description_bytes = 64 * 1024;  // paragraphs of the report's header

tolerance_overrides parse_tolerances(const json& j, const std::string& path) {
  const object_reader r(j, path,
                        {"loss_rel", "accuracy_abs", "curve_gap_rel", "logit_abs", "logit_rel", "slice_loss_rel",
                         "slice_accuracy_abs", "max_skip_fraction"});
  tolerance_overrides o;
  const auto get = [&r](const char* key, std::optional<double>& out) {
    if (r.has(key)) out = r.number(key, 0.0, 0.0, huge, "a finite number >= 0");
  };
  get("loss_rel", o.loss_rel);
  get("accuracy_abs", o.accuracy_abs);
  get("curve_gap_rel", o.curve_gap_rel);
  get("logit_abs", o.logit_abs);
  get("logit_rel", o.logit_rel);
  get("slice_loss_rel", o.slice_loss_rel);
  get("slice_accuracy_abs", o.slice_accuracy_abs);
  if (r.has("max_skip_fraction")) {
    o.max_skip_fraction = r.number("max_skip_fraction", 0.0, 0.0, 1.0, "a fraction in [0, 1]");
  }
  return o;
}

tolerance_overrides merge(tolerance_overrides base, const tolerance_overrides& top) {
  const auto m = [](std::optional<double>& b, const std::optional<double>& t) {
    if (t) b = t;
  };
  m(base.loss_rel, top.loss_rel);
  m(base.accuracy_abs, top.accuracy_abs);
  m(base.curve_gap_rel, top.curve_gap_rel);
  m(base.logit_abs, top.logit_abs);
  m(base.logit_rel, top.logit_rel);
  m(base.slice_loss_rel, top.slice_loss_rel);
  m(base.slice_accuracy_abs, top.slice_accuracy_abs);
  m(base.max_skip_fraction, top.max_skip_fraction);
  return base;
}

precision_policy parse_policy_field(const std::string& text, const std::string& path) {
  try {
    return parse_policy(text);
  } catch (const error& e) {
    throw error(path, quoted_input(text) + " (" + e.what() + ")",
                "a preset (" + std::string(policy_preset_names) + ") or a policy string");
  }
}

const std::vector<std::pair<std::string, activation_kind>> activation_names = {{"gelu", activation_kind::gelu},
                                                                               {"relu", activation_kind::relu}};

/// model.layers of a stack: [{"type": "linear", "out": 32}, {"type": "gelu"}, {"type": "layer_norm"}, ...].
std::vector<layer_spec> parse_layers(const json& j) {
  if (!j.is_array() || j.empty() || j.size() > 256) {
    throw error("model.layers", summarize_json(j), "an array of 1 to 256 layers ending in a linear head");
  }
  std::vector<layer_spec> out;
  for (std::size_t i = 0; i < j.size(); ++i) {
    const std::string p = "model.layers[" + std::to_string(i) + "]";
    const object_reader r(j[i], p, {"type", "name", "out", "width", "context", "vocab", "heads", "ffn_multiplier"});
    if (!r.has("type"))
      throw error(p + ".type", "missing", "linear, gelu, relu, layer_norm, embedding, transformer_block");
    layer_spec l;
    enum class t : std::uint8_t { linear, gelu, relu, layer_norm, embedding, block };
    const t type = r.choice<t>("type", t::linear,
                               {{"linear", t::linear},
                                {"gelu", t::gelu},
                                {"relu", t::relu},
                                {"layer_norm", t::layer_norm},
                                {"embedding", t::embedding},
                                {"transformer_block", t::block}});
    l.kind = type == t::linear       ? layer_kind::linear
             : type == t::layer_norm ? layer_kind::layer_norm
             : type == t::embedding  ? layer_kind::embedding
             : type == t::block      ? layer_kind::transformer_block
                                     : layer_kind::activation;
    l.activation = type == t::relu ? activation_kind::relu : activation_kind::gelu;
    l.name = r.display_text("name", "", max_name_bytes, false,
                            "its parameters are named after it in the reports and in fault targets");
    const bool head = i + 1 == j.size();
    const auto only = [&](const char* key, bool allowed) {
      if (r.has(key) && !allowed)
        throw error(r.where(key), "not a setting of a " + to_string(l.kind) + " layer", "remove it");
    };
    only("out", l.kind == layer_kind::linear);
    only("width", l.kind == layer_kind::embedding);
    only("context", l.kind == layer_kind::embedding);
    only("vocab", l.kind == layer_kind::embedding);
    only("heads", l.kind == layer_kind::transformer_block);
    only("ffn_multiplier", l.kind == layer_kind::transformer_block);
    if (l.kind == layer_kind::linear && !head && !r.has("out"))
      throw error(r.where("out"), "missing", "an integer in [1, 65536]");
    l.out = r.integer("out", 0, 1, max_dimension);
    l.width = r.integer("width", 64, 1, max_dimension);
    l.context = r.integer("context", 32, 2, 4096);
    l.vocab = r.integer("vocab", 0, 1, max_dimension);  // token ids from data.inputs; absent: the corpus
    l.heads = r.integer("heads", l.heads, 1, max_dimension);
    l.ffn_multiplier = r.integer("ffn_multiplier", l.ffn_multiplier, 1, 64);
    out.push_back(std::move(l));
  }
  return out;
}

void parse_model(const json& j, run_config& c) {
  const object_reader r(j, "model",
                        {"kind", "context", "width", "heads", "layers", "ffn_multiplier", "input_dim", "hidden_dim",
                         "hidden_layers", "classes", "activation"});
  c.model = r.choice<model_kind>(
      "kind", model_kind::transformer,
      {{"transformer", model_kind::transformer}, {"mlp", model_kind::mlp}, {"stack", model_kind::stack}});
  if (c.model == model_kind::stack) {
    for (const char* key :
         {"context", "width", "heads", "ffn_multiplier", "hidden_dim", "hidden_layers", "activation"}) {
      if (r.has(key))
        throw error(r.where(key), "a preset's setting", "for model.kind \"stack\": input_dim, classes, layers");
    }
    if (!r.has("layers")) throw error("model.layers", "missing", "an array of layers ending in a linear head");
    c.stack.layers = parse_layers(r.at("layers"));
    c.mlp.input_dim = r.integer("input_dim", c.mlp.input_dim, 1, max_dimension);
    c.mlp.classes = r.integer("classes", c.mlp.classes, 2, max_dimension);
    c.stack.input_dim = c.stack.layers.front().kind == layer_kind::embedding ? 0 : c.mlp.input_dim;
    return;
  }
  auto& t = c.transformer;
  t.context = r.integer("context", t.context, 1, max_dimension);
  t.width = r.integer("width", t.width, 1, max_dimension);
  t.heads = r.integer("heads", t.heads, 1, max_dimension);
  t.layers = r.integer("layers", t.layers, 1, 64);
  t.ffn_multiplier = r.integer("ffn_multiplier", t.ffn_multiplier, 1, 64);
  if (t.width % t.heads != 0) {
    throw error("model.width", std::to_string(t.width), "a multiple of model.heads (" + std::to_string(t.heads) + ")");
  }
  auto& m = c.mlp;
  m.input_dim = r.integer("input_dim", m.input_dim, 1, max_dimension);
  m.hidden_dim = r.integer("hidden_dim", m.hidden_dim, 1, max_dimension);
  m.hidden_layers = r.integer("hidden_layers", m.hidden_layers, 0, 64);
  m.classes = r.integer("classes", m.classes, 2, max_dimension);
  m.activation = r.choice<activation_kind>("activation", m.activation, activation_names);
}

/// A file named in the scenario, resolved against the scenario's folder (`base`) unless absolute.
std::string scenario_path(const object_reader& r, const char* key, const std::filesystem::path& base) {
  const std::string p = r.text(key, "");
  if (p.empty() || std::filesystem::path(p).is_absolute()) return p;
  std::string joined = (base / p).lexically_normal().string();
  // The JSON text is UTF-8, the scenario's folder need not be: the path enters every run's manifest (summary.json,
  // reference.json), whose writer refused it with an internal error after the reference had trained.
  if (!is_valid_utf8(joined)) {
    throw error(r.where(key), summarize_json(json(joined), 120) + " (not UTF-8: the scenario's folder)",
                "a path in UTF-8, which the JSON reports can hold: move the scenario and its files to a folder "
                "whose name is UTF-8");
  }
  return joined;
}

void parse_data(const json& j, run_config& c, const std::filesystem::path& base) {
  const object_reader r(
      j, "data",
      {"seed", "corpus_path", "eval_fraction", "eval_samples", "train_samples", "cluster_spread", "input_scale",
       "probe_rows", "inputs", "targets", "eval_inputs", "eval_targets", "initial_weights"});
  auto& d = c.data;
  d.inputs_path = scenario_path(r, "inputs", base);
  d.targets_path = scenario_path(r, "targets", base);
  d.eval_inputs_path = scenario_path(r, "eval_inputs", base);
  d.eval_targets_path = scenario_path(r, "eval_targets", base);
  if (r.has("initial_weights")) {
    const json& w = r.at("initial_weights");
    const char* accepted_weights =
        "an object {parameter name: .npy path or 'x.npz:array'}, or the path of an .npz archive with one array "
        "per parameter name (numpy.savez(path, **{name: value}))";
    if (w.is_string()) {  // every array of one archive, by name
      const std::string path = scenario_path(r, "initial_weights", base);
      const array_file_ref ref = parse_array_file_ref(path);
      if (!ref.archive || !ref.array.empty()) throw error("data.initial_weights", summarize_json(w), accepted_weights);
      for (const std::string& name : read_npz_names(path, "data.initial_weights")) {
        d.initial_weights.emplace_back(name, path + ":" + name);
      }
    } else if (w.is_object()) {
      std::vector<std::string> names;
      for (const auto& [name, value] : w.items()) names.push_back(name);
      const object_reader wr(w, "data.initial_weights", names);
      for (const std::string& name : names) d.initial_weights.emplace_back(name, scenario_path(wr, name.c_str(), base));
    } else {
      throw error("data.initial_weights", summarize_json(w), accepted_weights);
    }
  }
  d.seed = static_cast<std::uint64_t>(
      r.integer("seed", static_cast<std::int64_t>(d.seed), 0, std::numeric_limits<std::int64_t>::max()));
  // Relative to the scenario's folder like the .npy files (until 2026-12-06 it was the working directory's).
  if (r.has("corpus_path")) d.corpus_path = scenario_path(r, "corpus_path", base);
  d.eval_fraction = r.number("eval_fraction", d.eval_fraction, 0.001, 0.9, "in [0.001, 0.9]");
  d.eval_samples = r.integer("eval_samples", d.eval_samples, 1, 1 << 24);
  d.train_samples = r.integer("train_samples", d.train_samples, 1, 1 << 24);
  d.cluster_spread = r.number("cluster_spread", d.cluster_spread, 0.0, 1e6, "in [0, 1e6]");
  d.input_scale = r.number("input_scale", d.input_scale, 1e-30, 1e30, "in [1e-30, 1e30]");
  d.probe_rows = r.integer("probe_rows", d.probe_rows, 1, 4096);
}

void parse_training(const json& j, scenario& s) {
  const object_reader r(
      j, "training",
      {"steps", "batch_size", "seed", "threads", "clip_norm", "clip", "loss", "loss_multiplier", "optimizer"});
  run_config& c = s.base;
  c.steps = r.integer("steps", c.steps, 1, max_steps);
  c.batch_size = r.integer("batch_size", c.batch_size, 1, 1 << 20);
  c.seed = static_cast<std::uint64_t>(
      r.integer("seed", static_cast<std::int64_t>(c.seed), 0, std::numeric_limits<std::int64_t>::max()));
  c.threads = static_cast<int>(r.integer("threads", c.threads, 1, 256));
  c.clip_norm = r.number("clip_norm", c.clip_norm, 0.0, huge, "a finite number >= 0 (0: no clipping)");
  s.loss_multiplier = r.number("loss_multiplier", s.loss_multiplier, 1e-30, 1e30, "in [1e-30, 1e30]");
  c.clip = r.choice<clip_mode>("clip", c.clip, {{"exact", clip_mode::exact}, {"torch", clip_mode::torch}});
  c.loss = r.choice<loss_kind>("loss", c.loss,
                               {{"cross_entropy", loss_kind::cross_entropy},
                                {"mse", loss_kind::mse},
                                {"l1", loss_kind::l1},
                                {"huber", loss_kind::huber}});
  if (r.has("optimizer")) {
    const object_reader o(r.at("optimizer"), "training.optimizer",
                          {"kind", "learning_rate", "momentum", "beta1", "beta2", "epsilon", "weight_decay",
                           "dampening", "nesterov", "master_weights", "stochastic_write_back"});
    auto& op = c.optimizer;
    op.kind = o.choice<optimizer_kind>("kind", op.kind,
                                       {{"adamw", optimizer_kind::adamw},
                                        {"sgd-momentum", optimizer_kind::sgd_momentum},
                                        {"adamw-torch", optimizer_kind::adamw_torch},
                                        {"sgd-torch", optimizer_kind::sgd_torch}});
    op = torch_defaults(op.kind, op);  // the torch kinds start from PyTorch's defaults
    op.learning_rate = o.number("learning_rate", op.learning_rate, 1e-12, 10.0, "in [1e-12, 10]");
    op.momentum = o.number("momentum", op.momentum, 0.0, 0.999999, "in [0, 1)");
    op.beta1 = o.number("beta1", op.beta1, 0.0, 0.999999, "in [0, 1)");
    op.beta2 = o.number("beta2", op.beta2, 0.0, 0.999999999, "in [0, 1)");
    op.epsilon = o.number("epsilon", op.epsilon, 1e-30, 1.0, "in [1e-30, 1]");
    op.weight_decay = o.number("weight_decay", op.weight_decay, 0.0, 1.0, "in [0, 1]");
    op.dampening = o.number("dampening", op.dampening, 0.0, 1.0, "in [0, 1]");
    op.nesterov = o.boolean("nesterov", op.nesterov);
    if (o.has("master_weights")) {
      op.master_weights = o.boolean("master_weights", false) ? master_weights_mode::on : master_weights_mode::off;
    }
    op.stochastic_write_back = o.boolean("stochastic_write_back", op.stochastic_write_back);
  }
}

scaler_choice parse_scaler(const json& j, const std::string& path) {
  const object_reader r(j, path,
                        {"kind", "preset", "init_scale", "growth_factor", "backoff_factor", "growth_interval",
                         "hysteresis", "min_scale", "max_scale", "static_scale"});
  scaler_choice sc;
  sc.kind = r.choice<scaler_kind>("kind", scaler_kind::dynamic,
                                  {{"dynamic", scaler_kind::dynamic},
                                   {"static", scaler_kind::static_scale},
                                   {"none", scaler_kind::none}});
  // A key the kind does not read is refused: {"kind": "static", "init_scale": 1024} ran at scale 1.
  for (const auto& [key, value] : j.items()) {
    const bool dynamic_key = key != "kind" && key != "static_scale";
    if (sc.kind == scaler_kind::none && key != "kind") {
      throw error(r.where(key), "given with kind none", "no other key: kind none trains without a loss scale");
    }
    if (sc.kind == scaler_kind::static_scale && dynamic_key) {
      throw error(r.where(key), "given with kind static",
                  "static_scale only (the fixed scale); the other keys belong to kind dynamic");
    }
    if (sc.kind == scaler_kind::dynamic && key == "static_scale") {
      throw error(r.where(key), "given with kind dynamic",
                  "init_scale (a dynamic scaler's first scale), or kind static");
    }
  }
  if (sc.kind == scaler_kind::static_scale && !r.has("static_scale")) {
    throw error(r.where("static_scale"), "missing", "the fixed loss scale of kind static (a finite number > 0)");
  }
  if (r.has("preset")) {
    const std::string name = r.text("preset", "");
    try {
      sc.dynamic = scaler_presets::by_name(name);
    } catch (const error&) {
      throw error(r.where("preset"), "'" + name + "'", std::string(scaler_presets::names));
    }
  }
  scaler_config& d = sc.dynamic;
  const double fmax = static_cast<double>(std::numeric_limits<float>::max());
  d.init_scale = static_cast<float>(r.number("init_scale", d.init_scale, 1e-30, fmax, "a finite number > 0"));
  d.growth_factor = r.number("growth_factor", d.growth_factor, 1.0, 1e6, "in (1, 1e6]");
  d.backoff_factor = r.number("backoff_factor", d.backoff_factor, 0.0, 1.0, "in (0, 1)");
  d.growth_interval = static_cast<std::int32_t>(r.integer("growth_interval", d.growth_interval, 1, 1 << 30));
  d.hysteresis = static_cast<std::int32_t>(r.integer("hysteresis", d.hysteresis, 1, 1 << 30));
  d.min_scale = static_cast<float>(r.number("min_scale", d.min_scale, 1e-30, fmax, "a finite number > 0"));
  d.max_scale = static_cast<float>(r.number("max_scale", d.max_scale, 1e-30, fmax, "a finite number > 0"));
  sc.static_scale = static_cast<float>(r.number("static_scale", sc.static_scale, 1e-30, fmax, "a finite number > 0"));
  if (sc.kind == scaler_kind::dynamic) {
    try {
      validate(d);
    } catch (const error& e) {
      throw error(path, std::string("an invalid dynamic scaler (") + e.what() + ")", "a valid scaler_config");
    }
  }
  return sc;
}

std::vector<fault_spec> parse_faults(const json& j, const std::string& path, std::int64_t steps) {
  if (!j.is_array()) throw error(path, summarize_json(j), "an array of faults");
  std::vector<fault_spec> out;
  for (std::size_t i = 0; i < j.size(); ++i) {
    const std::string p = path + "[" + std::to_string(i) + "]";
    const object_reader r(j[i], p, {"kind", "steps", "target", "factor"});
    fault_spec f;
    if (!r.has("kind")) throw error(p + ".kind", "missing", "gradient_inf, gradient_nan, loss_spike, tiny_loss, input_nan");
    f.kind = r.choice<fault_kind>("kind", f.kind,
                                  {{"gradient_inf", fault_kind::gradient_inf},
                                   {"gradient_nan", fault_kind::gradient_nan},
                                   {"loss_spike", fault_kind::loss_spike},
                                   {"tiny_loss", fault_kind::tiny_loss},
                                   {"input_nan", fault_kind::input_nan}});
    if (!r.has("steps") || !r.at("steps").is_array() || r.at("steps").empty()) {
      throw error(p + ".steps", r.has("steps") ? summarize_json(r.at("steps")) : "missing",
                  "a non-empty array of step indices in [0, training.steps)");
    }
    for (const json& s : r.at("steps")) {
      if (!s.is_number_integer() || s.get<std::int64_t>() < 0 || s.get<std::int64_t>() >= steps) {
        throw error(p + ".steps", summarize_json(s), "step indices in [0, " + std::to_string(steps) + ")");
      }
      f.steps.push_back(s.get<std::int64_t>());
    }
    // Repeats are refused, so the list is at most `steps` long (a 2-million-entry list of one step was accepted and
    // printed whole in every output).
    if (const std::optional<std::int64_t> twice = repeated_step(f.steps)) {
      throw error(p + ".steps", std::to_string(*twice) + " given twice", "each step at most once");
    }
    // A key the kind does not read used to be accepted and printed as if it acted ("loss-spike x1e+06 in
    // head.bias" spiked the whole loss; a loss_spike without a factor multiplied by 1 and was diagnosed as the cause
    // of the skips it never made).
    const bool gradient_fault = is_gradient_fault(f.kind);
    const bool loss_fault = is_loss_fault(f.kind);
    if (r.has("target") && !gradient_fault) {
      throw error(r.where("target"), "given for " + r.at("kind").get<std::string>(),
                  "target only on gradient_inf and gradient_nan (the parameter whose gradient is poisoned)");
    }
    if (r.has("factor") && !loss_fault) {
      throw error(r.where("factor"), "given for " + r.at("kind").get<std::string>(),
                  "factor only on loss_spike and tiny_loss (the loss multiplier)");
    }
    if (loss_fault && !r.has("factor")) {
      throw error(r.where("factor"), "missing",
                  "the loss multiplier of a " + r.at("kind").get<std::string>() + ", in [1e-30, 1e30] and not 1");
    }
    f.target = r.text("target", "", false);
    f.factor = r.number("factor", f.factor, 1e-30, 1e30, "in [1e-30, 1e30]");
    if (loss_fault && f.factor == 1.0) {
      throw error(r.where("factor"), "1 (a multiplier that changes nothing)", "in [1e-30, 1e30] and not 1");
    }
    out.push_back(std::move(f));
  }
  return out;
}

candidate_spec parse_candidate(const json& j, const std::string& path, std::int64_t steps) {
  const object_reader r(j, path, {"name", "policy", "scaler", "master_weights", "faults", "expect", "tolerances"});
  candidate_spec c;
  if (!r.has("name")) throw error(path + ".name", "missing", "a non-empty string");
  // The name names files (telemetry/<slug>.jsonl, checkpoints/<slug>.ckpt and their temporaries, within a file
  // system's 255-byte names) and is printed on terminals: a 5000-character name used to train the reference and
  // then fail writing the first candidate's checkpoint.
  c.name = r.display_text("name", "", max_name_bytes, false, "telemetry and checkpoint files are named after it");
  if (!r.has("policy")) throw error(path + ".policy", "missing", "a preset name or a policy string");
  c.policy_text = r.text("policy", "");
  c.policy = parse_policy_field(c.policy_text, r.where("policy"));
  if (r.has("scaler")) {
    c.scaler = parse_scaler(r.at("scaler"), r.where("scaler"));
  } else {
    // No scaler given: dynamic when the gradient format needs one, none otherwise.
    c.scaler.kind = needs_loss_scaling(c.policy) ? scaler_kind::dynamic : scaler_kind::none;
  }
  if (r.has("master_weights")) c.master_weights = r.boolean("master_weights", false);
  if (r.has("faults")) c.faults = parse_faults(r.at("faults"), r.where("faults"), steps);
  c.expect = r.choice<expectation>("expect", expectation::pass,
                                   {{"pass", expectation::pass},
                                    {"fail", expectation::fail},
                                    {"inconclusive", expectation::inconclusive},
                                    {"any", expectation::any}});
  if (r.has("tolerances")) c.tolerances = parse_tolerances(r.at("tolerances"), r.where("tolerances"));
  return c;
}

}  // namespace

const char* expectation_name(expectation e) noexcept {
  switch (e) {
    case expectation::pass: return "pass";
    case expectation::fail: return "fail";
    case expectation::inconclusive: return "inconclusive";
    case expectation::any: return "any";
  }
  return "any";
}

bool meets_expectation(expectation e, verdict v) noexcept {
  switch (e) {
    case expectation::pass: return v == verdict::pass;
    case expectation::fail: return v == verdict::fail;
    case expectation::inconclusive: return v == verdict::inconclusive;
    case expectation::any: return true;
  }
  return false;
}

scenario parse_scenario(std::string_view text, std::string_view source) {
  const json j = parse_json_input(text, "scenario", source);
  const object_reader r(j, "",
                        {"name", "description", "model", "data", "training", "reference", "candidates", "tolerances",
                         "baselines", "cost", "data_parallel"});
  scenario s;
  s.base.model = model_kind::transformer;
  s.name = r.display_text("name", s.name, max_scenario_name_bytes, false, "the report's title and the terminal's");
  s.description =
      r.display_text("description", "", max_description_bytes, true, "the report's header and summary.json", false);
  if (r.has("model")) parse_model(r.at("model"), s.base);
  // Files a scenario names are relative to its folder (the embedded default names none).
  const std::filesystem::path base =
      source == "embedded default" ? std::filesystem::path{} : std::filesystem::path(source).parent_path();
  if (r.has("data")) parse_data(r.at("data"), s.base, base);
  // With data from files the head's width comes from data.targets: a model.classes would be ignored in silence.
  if (s.base.data.from_files() && r.has("model") && r.at("model").is_object() && r.at("model").contains("classes")) {
    throw error("model.classes", summarize_json(r.at("model").at("classes")),
                "no model.classes with data.inputs and data.targets: the classes are the labels of data.targets "
                "(the head is as wide as the largest label + 1)");
  }
  if (r.has("training")) parse_training(r.at("training"), s);
  if (r.has("reference")) {
    const object_reader ref(r.at("reference"), "reference", {"policy"});
    s.reference_policy_text = ref.text("policy", s.reference_policy_text);
  }
  s.base.policy = parse_policy_field(s.reference_policy_text, "reference.policy");
  s.base.label = "reference " + s.reference_policy_text;
  s.base.scaler.kind = scaler_kind::none;
  if (!r.has("candidates") || !r.at("candidates").is_array() || r.at("candidates").empty()) {
    throw error("candidates", r.has("candidates") ? summarize_json(r.at("candidates")) : "missing",
                "a non-empty array of candidate runs");
  }
  std::set<std::string> names;
  // Each run's telemetry file is telemetry/<file_slug(name)>.jsonl: two names with one slug would overwrite
  // each other's file while summary.json points both at it.
  std::map<std::string, std::string> slugs{{file_slug(s.base.label), s.base.label}};
  for (std::size_t i = 0; i < r.at("candidates").size(); ++i) {
    const std::string p = "candidates[" + std::to_string(i) + "]";
    candidate_spec c = parse_candidate(r.at("candidates")[i], p, s.base.steps);
    if (!names.insert(c.name).second) throw error(p + ".name", "'" + c.name + "' (used twice)", "unique names");
    if (c.name == s.base.label) throw error(p + ".name", "'" + c.name + "'", "a name other than the reference's");
    const auto [at, fresh] = slugs.emplace(file_slug(c.name), c.name);
    if (!fresh) {
      throw error(p + ".name",
                  "'" + c.name + "' (its telemetry file telemetry/" + at->first + ".jsonl is also '" + at->second + "''s)",
                  "names that differ in more than case, spaces and punctuation");
    }
    s.candidates.push_back(std::move(c));
  }
  if (r.has("tolerances")) s.tolerances = parse_tolerances(r.at("tolerances"), "tolerances");
  if (r.has("baselines")) {
    const json& b = r.at("baselines");
    if (!b.is_array()) throw error("baselines", summarize_json(b), "an array of candidate or policy names");
    for (const json& x : b) {
      if (!x.is_string() || x.get<std::string>().empty()) {
        throw error("baselines", summarize_json(x), "non-empty candidate or policy names");
      }
      // A candidate's name stays as written; anything else must be a policy, kept in its canonical spelling so
      // the fallback recognises "BF16_Mixed" or "params=fp32,compute=fp16,output=fp16" as the policy a candidate
      // ran (or failed) under. A typo is refused here, not recommended as "run instead".
      const std::string name = x.get<std::string>();
      const bool candidate = std::any_of(s.candidates.begin(), s.candidates.end(),
                                         [&name](const candidate_spec& c) { return c.name == name; });
      if (candidate) {
        s.baselines.push_back(name);
        continue;
      }
      try {
        s.baselines.push_back(to_string(parse_policy(name)));
      } catch (const error& e) {
        throw error("baselines[" + std::to_string(s.baselines.size()) + "]", quoted_input(name),
                    "a candidate's name or a policy (" + std::string(e.what()) + ")");
      }
    }
  }
  if (r.has("cost")) {
    const object_reader c(r.at("cost"), "cost", {"dollars_per_hour"});
    s.dollars_per_hour = c.number("dollars_per_hour", 0.0, 0.0, 1e9, "a finite number >= 0");
  }
  if (r.has("data_parallel")) {
    s.data_parallel = parse_data_parallel(r.at("data_parallel"), "data_parallel");
    validate(*s.data_parallel, 1, s.base.batch_size);
  }
  // The simulator's own validation of every run this scenario makes (shapes, policy vs model, faults).
  validate(reference_config(s));
  for (std::size_t i = 0; i < s.candidates.size(); ++i) {
    try {
      validate(candidate_config(s, s.candidates[i]));
    } catch (const error& e) {
      // "candidates[0] (fp16 x): policy gradient is e5m2; accepted: ...": the simulator's own message, placed.
      throw error("candidates[" + std::to_string(i) + "] (" + s.candidates[i].name + "): " + e.what());
    }
  }
  return s;
}

void override_seed(scenario& s, std::uint64_t seed) noexcept { s.base.seed = seed; }

namespace {
/// The loss multiplier is the simulator's tiny_loss fault (loss times factor) at every step.
void add_loss_multiplier(const scenario& s, run_config& c) {
  if (s.loss_multiplier == 1.0) return;
  fault_spec f;
  f.kind = fault_kind::tiny_loss;
  f.factor = s.loss_multiplier;
  for (std::int64_t i = 0; i < c.steps; ++i) f.steps.push_back(i);
  c.faults.insert(c.faults.begin(), std::move(f));
}
}  // namespace

run_config reference_config(const scenario& s) {
  run_config c = s.base;
  c.faults.clear();
  add_loss_multiplier(s, c);
  return c;
}

run_config candidate_config(const scenario& s, const candidate_spec& cand) {
  run_config c = s.base;
  c.label = cand.name;
  c.policy = cand.policy;
  c.scaler = cand.scaler;
  if (cand.master_weights) {
    c.optimizer.master_weights = *cand.master_weights ? master_weights_mode::on : master_weights_mode::off;
  }
  // The policy says what the run keeps (its label, the report's memory and the manifest read it): a candidate's
  // or the scenario's master_weights override is part of the candidate's policy.
  c.policy.master_weights = keeps_master_weights(c);
  c.faults = cand.faults;
  add_loss_multiplier(s, c);
  return c;
}

run_manifest manifest_for(const scenario& s, const run_config& c) {
  run_manifest m;
  m.scenario = s.name;
  m.settings = run_settings(c);
  const auto num = [](double v) { return manifest_number(v); };
  const auto integer = [](std::int64_t v) { return std::to_string(v); };
  std::string data_bytes;
  if (c.data.from_files()) {
    // Without held-out files the held-out metrics are the training rows' own: said here, where the report and
    // summary.json show the data.
    m.data = "files inputs=" + c.data.inputs_path + " targets=" + c.data.targets_path +
             (c.data.eval_inputs_path.empty()
                  ? " (held out: none; the held-out metrics are measured on the training rows)"
                  : " eval_inputs=" + c.data.eval_inputs_path + " eval_targets=" + c.data.eval_targets_path);
  }
  if (c.model == model_kind::stack) {
    m.model = "stack of " + std::to_string(c.stack.layers.size()) + " layers (model.layers), loss " + to_string(c.loss);
  }
  if (c.data.from_files()) {
    // The files' bytes enter through their data.* settings (size and hash).
  } else if (reads_corpus(c)) {
    const auto& t = c.transformer;
    if (c.model == model_kind::transformer) {
      m.model = "transformer context=" + integer(t.context) + " width=" + integer(t.width) +
                " heads=" + integer(t.heads) + " layers=" + integer(t.layers) +
                " ffn_multiplier=" + integer(t.ffn_multiplier);
    }
    const std::string corpus = read_input_file(c.data.corpus_path, "data.corpus_path");
    // Right after data.corpus_path: the data fingerprint below hashes the data.* fields in this order.
    const auto path_field = std::find_if(m.settings.begin(), m.settings.end(),
                                         [](const manifest_setting& x) { return x.field == "data.corpus_path"; });
    m.settings.insert(path_field == m.settings.end() ? path_field : path_field + 1,
                      {"data.corpus_bytes", std::to_string(corpus.size()), manifest_scope::shared});
    m.data = "corpus " + c.data.corpus_path + " (" + std::to_string(corpus.size()) +
             " bytes) eval_fraction=" + num(c.data.eval_fraction) + " eval_samples=" + integer(c.data.eval_samples);
    data_bytes = corpus;
  } else {
    const auto& p = c.mlp;
    if (c.model == model_kind::mlp)
      m.model = "mlp input_dim=" + integer(p.input_dim) + " hidden_dim=" + integer(p.hidden_dim) +
                " hidden_layers=" + integer(p.hidden_layers) + " classes=" + integer(p.classes) +
                " activation=" + to_string(p.activation);
    m.data = "gaussian clusters train=" + integer(c.data.train_samples) + " eval=" + integer(c.data.eval_samples) +
             " spread=" + num(c.data.cluster_spread) + " input_scale=" + num(c.data.input_scale);
  }
  // The scenario's loss multiplier reaches the run as a tiny_loss fault (in reference.faults); recorded here
  // under its own name too, so a changed multiplier is named as such.
  m.settings.push_back({"training.loss_multiplier", num(s.loss_multiplier), manifest_scope::shared});
  const optimizer_config& o = c.optimizer;
  m.optimizer = to_string(o.kind) + " lr=" + num(o.learning_rate) + " clip=" + num(c.clip_norm) +
                " loss_multiplier=" + num(s.loss_multiplier);

  std::string data_settings;
  for (const manifest_setting& x : m.settings) {
    if (x.field.rfind("data.", 0) == 0) data_settings += "|" + x.field + "=" + x.value;
  }
  m.data_fingerprint = hex64(fnv1a64(data_bytes + data_settings + "|seed=" + std::to_string(c.data.seed)));
  m.seed = c.seed;
  m.data_seed = c.data.seed;
  m.steps = c.steps;
  m.batch_size = c.batch_size;
  m.probe_rows = 0;  // 0: known only after the run (lock_reference and the tool fill them in)
  m.probe_cols = 0;
  m.policy = to_string(c.policy);
  const build_environment env = current_environment();
  m.library_version = env.library_version;
  m.float_flags = env.float_flags;
  m.compiler = env.compiler;
  m.compiler_flags = env.compiler_flags;
  m.hardware = env.hardware;
  m.threads = c.threads;
  return m;
}

gate_tolerances tolerances_for(const scenario& s, const candidate_spec& c) {
  // The format terms follow the coarser of the two runs compared: a reference in bf16 differs from an fp32
  // candidate by bf16's rounding, which fp32's limits (2.4e-4) would blame on the candidate.
  const format_spec candidate = coarsest_format(c.policy);
  const format_spec reference = coarsest_format(s.base.policy);
  const format_spec coarser = unit_roundoff(reference) > unit_roundoff(candidate) ? reference : candidate;
  return gate_tolerances_for(coarser, merge(s.tolerances, c.tolerances));
}

}  // namespace safeamp::sim
