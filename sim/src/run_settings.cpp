// The settings of a run that change its numbers (see run_settings in reference.hpp): one list for the
// manifest of a locked reference and for the fingerprint of a checkpoint.
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "safeamp/error.hpp"
#include "safeamp/policy/precision_policy.hpp"
#include "safeamp/sim/datasets.hpp"
#include "safeamp/sim/file_data.hpp"
#include "safeamp/sim/npz.hpp"
#include "safeamp/sim/reference.hpp"
#include "safeamp/sim/report_files.hpp"

namespace safeamp::sim {
namespace {

/// The fault kind as the scenario file spells it ("gradient_inf").
std::string fault_setting_name(fault_kind k) {
  switch (k) {
    case fault_kind::gradient_inf:
      return "gradient_inf";
    case fault_kind::gradient_nan:
      return "gradient_nan";
    case fault_kind::loss_spike:
      return "loss_spike";
    case fault_kind::tiny_loss:
      return "tiny_loss";
    case fault_kind::input_nan:
      return "input_nan";
  }
  return "?";
}

/// "0-39" for a run of consecutive steps, "3,7" otherwise (in the order given).
std::string step_list(const std::vector<std::int64_t>& steps) {
  std::string out;
  for (std::size_t i = 0; i < steps.size();) {
    std::size_t j = i;
    while (j + 1 < steps.size() && steps[j + 1] == steps[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(steps[i]);
    if (j > i) out.append("-").append(std::to_string(steps[j]));
    i = j + 1;
  }
  return out;
}

/// A described stack as one line: "input_dim=16 | linear fc0 out=32 | gelu | layer_norm | linear head out=0".
std::string stack_setting(const model_stack& m) {
  std::string out = "input_dim=" + std::to_string(m.input_dim);
  for (const layer_spec& l : m.layers) {
    out += " | " + (l.kind == layer_kind::activation ? to_string(l.activation) : to_string(l.kind));
    if (!l.name.empty()) out += " " + l.name;
    if (l.kind == layer_kind::linear) out += " out=" + std::to_string(l.out);
    if (l.kind == layer_kind::embedding) {
      out += " width=" + std::to_string(l.width) + " context=" + std::to_string(l.context);
      if (l.vocab > 0) out += " vocab=" + std::to_string(l.vocab);  // token ids from files (absent on the corpus)
    }
    if (l.kind == layer_kind::transformer_block) {
      out += " heads=" + std::to_string(l.heads) + " ffn_multiplier=" + std::to_string(l.ffn_multiplier);
    }
  }
  return out;
}

/// "<file name> (<bytes> bytes, fnv1a64 <hex>)": a changed file changes the setting even under the same name. An
/// array of an archive ("file.npz:name") hashes the whole archive: any change to it refuses a locked reference.
/// The file's name without its folder: where the scenario and its files lie, and the working directory of the
/// run, change nothing (a reference locked in one folder is reused from another), the bytes are what count. Read in
/// pieces, any size; a file that cannot be read is an error naming `field` (the run cannot read it either).
std::string file_setting(const std::string& path, const std::string& field) {
  const array_file_ref ref = parse_array_file_ref(path);
  const file_digest d = digest_input_file(ref.path, field);
  std::string name = std::filesystem::path(ref.path).filename().string();
  if (ref.archive && !ref.array.empty()) name += ":" + ref.array;
  return name + " (" + std::to_string(d.bytes) + " bytes, fnv1a64 " + hex64(d.fnv1a64) + ")";
}

/// What of a data-parallel run changes its numbers, listed only for data-parallel runs (the manifests and
/// fingerprints of the others stay as they were):
/// - data_parallel.micro_batches, shared: the global batch is cut into K parts whose gradients are summed in
///   fp32 in part order, so K changes the reference's bits as much as a candidate's;
/// - data_parallel.reduction, reference_only: the reduction is the run's own numerics, like its policy (the
///   locked reference is reduced in canonical fp32, a candidate may send bf16 over the wire); a wire-format
///   reduction's bits depend on the rank count (each rank rounds its own sum), so its value carries
///   "ranks=N", while the canonical fp32 reduction's bits are the same for any N and its value does not;
/// - data_parallel.fault_micro_batch, reference_only with the faults, and only when the run injects gradient
///   faults (it says which part, hence which rank, they land in; without such faults it changes nothing).
/// The test hooks exit_rank and exit_step change no number and are left out.
void data_parallel_settings(const data_parallel_setup& dp, const std::vector<fault_spec>& faults,
                            std::vector<manifest_setting>& v) {
  using enum manifest_scope;
  const data_parallel_config& c = dp.config;
  v.push_back({"data_parallel.micro_batches", std::to_string(c.micro_batches), shared});
  std::string reduction = to_string(c.reduction);
  if (c.reduction.order != reduce_order::canonical) reduction += " ranks=" + std::to_string(dp.ranks);
  v.push_back({"data_parallel.reduction", std::move(reduction), reference_only});
  const bool gradient_faults =
      std::any_of(faults.begin(), faults.end(), [](const fault_spec& f) { return is_gradient_fault(f.kind); });
  if (gradient_faults) {
    v.push_back({"data_parallel.fault_micro_batch", std::to_string(c.fault_micro_batch), reference_only});
  }
}

}  // namespace

std::string rounding_name(rounding r) {
  switch (r) {
    case rounding::nearest_even:
      return "nearest_even";
    case rounding::toward_zero:
      return "toward_zero";
    case rounding::toward_pos_inf:
      return "toward_pos_inf";
    case rounding::toward_neg_inf:
      return "toward_neg_inf";
    case rounding::stochastic:
      return "stochastic";
  }
  return "?";
}

std::string scaler_setting(const scaler_choice& sc) {
  switch (sc.kind) {
    case scaler_kind::none:
      return "none";
    case scaler_kind::static_scale:
      return "static scale=" + manifest_number(sc.static_scale);
    case scaler_kind::dynamic: {
      const scaler_config& d = sc.dynamic;
      return "dynamic init_scale=" + manifest_number(d.init_scale) +
             " growth_factor=" + manifest_number(d.growth_factor) +
             " backoff_factor=" + manifest_number(d.backoff_factor) +
             " growth_interval=" + std::to_string(d.growth_interval) + " hysteresis=" + std::to_string(d.hysteresis) +
             " min_scale=" + manifest_number(d.min_scale) + " max_scale=" + manifest_number(d.max_scale) +
             " max_overflows_at_min=" + std::to_string(d.max_overflows_at_min);
    }
  }
  return "?";
}

std::string faults_setting(const std::vector<fault_spec>& faults) {
  if (faults.empty()) return "none";
  std::string out;
  for (const fault_spec& f : faults) {
    if (!out.empty()) out += "; ";
    out += fault_setting_name(f.kind) + " factor=" + manifest_number(f.factor) + " target='" + f.target +
           "' steps=" + step_list(f.steps);
  }
  return out;
}

std::vector<manifest_setting> run_settings(const run_config& c) {
  using enum manifest_scope;
  std::vector<manifest_setting> v;
  const auto set = [&v](std::string field, std::string value, manifest_scope scope = shared) {
    v.push_back({std::move(field), std::move(value), scope});
  };
  const auto num = [](double x) { return manifest_number(x); };
  const auto integer = [](std::int64_t x) { return std::to_string(x); };
  // Model: the kind and every shape of that kind; then the data of that kind.
  set("model.kind", to_string(c.model));
  // Settings added with the described models and file data appear only when used, so the fingerprints and
  // locked references of runs without them are unchanged.
  if (c.model == model_kind::stack) set("model.layers", stack_setting(c.stack));
  if (c.data.from_files()) {
    set("data.inputs", file_setting(c.data.inputs_path, "data.inputs"));
    set("data.targets", file_setting(c.data.targets_path, "data.targets"));
    if (!c.data.eval_inputs_path.empty()) {
      set("data.eval_inputs", file_setting(c.data.eval_inputs_path, "data.eval_inputs"));
      set("data.eval_targets", file_setting(c.data.eval_targets_path, "data.eval_targets"));
    }
  }
  for (const auto& [name, path] : c.data.initial_weights)
    set("data.initial_weights." + name, file_setting(path, "data.initial_weights." + name));
  if (c.loss != loss_kind::cross_entropy) set("training.loss", to_string(c.loss));
  if (c.clip != clip_mode::exact) set("training.clip", "torch");
  if (c.optimizer.dampening != 0.0) set("optimizer.dampening", manifest_number(c.optimizer.dampening));
  if (c.optimizer.nesterov) set("optimizer.nesterov", "true");
  if (c.data.from_files()) {
    // The files are the data: the clusters' and corpus's settings below do not apply.
  } else if (reads_corpus(c)) {
    const transformer_shape& t = c.transformer;
    if (c.model == model_kind::transformer) {
      set("model.context", integer(t.context));
      set("model.width", integer(t.width));
      set("model.heads", integer(t.heads));
      set("model.layers", integer(t.layers));
      set("model.ffn_multiplier", integer(t.ffn_multiplier));
    }
    require_default_corpus(c.data);
    set("data.corpus_path", file_setting(c.data.corpus_path, "data.corpus_path"));
    set("data.eval_fraction", num(c.data.eval_fraction));
  } else {
    const mlp_shape& p = c.mlp;
    if (c.model == model_kind::stack) set("model.classes", integer(p.classes));
    if (c.model == model_kind::mlp) {
      set("model.input_dim", integer(p.input_dim));
      set("model.hidden_dim", integer(p.hidden_dim));
      set("model.hidden_layers", integer(p.hidden_layers));
      set("model.classes", integer(p.classes));
      set("model.activation", to_string(p.activation));
    }
    set("data.train_samples", integer(c.data.train_samples));
    set("data.cluster_spread", num(c.data.cluster_spread));
    set("data.input_scale", num(c.data.input_scale));
  }
  set("data.eval_samples", integer(c.data.eval_samples));
  set("data.probe_rows", integer(c.data.probe_rows));
  // Training and optimizer: every hyper-parameter, whether or not this optimizer kind reads it (a changed
  // value the run ignores refuses too, which is cheaper than missing one it reads).
  set("training.clip_norm", num(c.clip_norm));
  set("training.loss_weight", num(c.loss_weight));
  const optimizer_config& o = c.optimizer;
  set("optimizer.kind", to_string(o.kind));
  set("optimizer.learning_rate", num(o.learning_rate));
  set("optimizer.momentum", num(o.momentum));
  set("optimizer.beta1", num(o.beta1));
  set("optimizer.beta2", num(o.beta2));
  set("optimizer.epsilon", num(o.epsilon));
  set("optimizer.weight_decay", num(o.weight_decay));
  set("optimizer.stochastic_write_back", o.stochastic_write_back ? "true" : "false");
  // The run's own numerics: a candidate sets its own, so these refuse only the reuse of a lock.
  set("optimizer.master_weights", to_string(o.master_weights), reference_only);
  set("rounding.mode", rounding_name(c.rounding.mode), reference_only);
  set("rounding.overflow", c.rounding.on_overflow == overflow::saturate ? "saturate" : "to_infinity", reference_only);
  set("rounding.flush_subnormals", c.rounding.flush_subnormals ? "true" : "false", reference_only);
  set("reference.scaler", scaler_setting(c.scaler), reference_only);
  set("reference.faults", faults_setting(c.faults), reference_only);
  if (c.data_parallel) data_parallel_settings(*c.data_parallel, c.faults, v);
  return v;
}

std::uint64_t run_fingerprint(const run_config& c) { return run_fingerprint(c, bit_changing_environment()); }

std::uint64_t run_fingerprint(const run_config& c, const build_environment& build) {
  std::string text;
  for (const manifest_setting& s : run_settings(c)) text.append(s.field).append("=").append(s.value).append("|");
  text += "training.seed=" + std::to_string(c.seed) + "|data.seed=" + std::to_string(c.data.seed) +
          "|training.steps=" + std::to_string(c.steps) + "|training.batch_size=" + std::to_string(c.batch_size) +
          "|policy=" + to_string(c.policy) + "|master_weights_kept=" + (keeps_master_weights(c) ? "1" : "0");
  // The build's bit-changing fields of the manifest too (a reference's checkpoint from a -ffast-math build, or
  // another version, was resumed by this one and locked as if one build had trained it).
  text.append("|library_version=")
      .append(build.library_version)
      .append("|build.float_flags=")
      .append(build.float_flags);
  return fnv1a64(text);
}

}  // namespace safeamp::sim
