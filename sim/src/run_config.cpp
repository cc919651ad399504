// Validation and names of run_config (see run_config.hpp).
#include "safeamp/sim/run_config.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "safeamp/error.hpp"
#include "safeamp/format/block_names.hpp"
#include "safeamp/format/format_names.hpp"
#include "safeamp/policy/precision_policy.hpp"
#include "safeamp/scaling/scaler_validate.hpp"

namespace safeamp::sim {
namespace {

void require(bool ok, const std::string& field, const std::string& value, const std::string& accepted) {
  if (!ok) throw error(field, value, accepted);
}

std::string num(double v) { return std::to_string(v); }

void validate_policy(const precision_policy& p) {
  const format_spec roles[] = {p.param, p.compute, p.output, p.accumulate, p.gradient};
  const char* names[] = {"policy param", "policy compute", "policy output", "policy accumulate", "policy gradient"};
  for (std::size_t i = 0; i < 5; ++i) {
    require(is_valid(roles[i]), names[i], format_name(roles[i]), "a valid format (2..8 exponent, 1..23 mantissa bits)");
  }
  for (const op_class c : all_op_classes) {
    require(is_valid(p.format_for(c)), "policy " + std::string(op_class_name(c)), format_name(p.format_for(c)),
            "a valid format");
  }
  // The simulator keeps one global loss scale; 8-bit gradients need per-tensor (delayed) scaling factors,
  // which its trainer does not implement, and 8-bit parameter storage has no meaningful update path.
  require(required_scaling(p) != gradient_scaling::per_tensor_scaling, "policy gradient", format_name(p.gradient),
          "a format of at least 16 bits (8-bit gradients need per-tensor scaling, which the simulator does not run)");
  require(storage_bytes(p.param) >= 2, "policy param", format_name(p.param),
          "a format of at least 16 bits (the simulator does not store parameters in fp8)");
  require(p.accumulate.mantissa_bits >= p.format_for(op_class::matmul).mantissa_bits, "policy accumulate",
          format_name(p.accumulate), "a format at least as precise as the matmul inputs");
  // Block-scaled GEMMs accumulate in fp32 (as the hardware's MX/NVFP4 instructions do); the GEMM refuses another,
  // which surfaced only once the run had started.
  require(!is_block_scaled(p.matmul_blocks) || p.accumulate == fp32, "policy accumulate", format_name(p.accumulate),
          "fp32 with block-scaled matmul inputs (" + std::string(block_format_name(p.matmul_blocks)) + ")");
}

}  // namespace

std::optional<std::int64_t> repeated_step(std::vector<std::int64_t> steps) {
  std::sort(steps.begin(), steps.end());
  const auto at = std::adjacent_find(steps.begin(), steps.end());
  return at == steps.end() ? std::nullopt : std::optional<std::int64_t>(*at);
}

bool keeps_master_weights(const run_config& cfg) noexcept {
  switch (cfg.optimizer.master_weights) {
    case master_weights_mode::on:
      return true;
    case master_weights_mode::off:
      return false;
    case master_weights_mode::from_policy:
      return cfg.policy.master_weights;
  }
  return false;
}

void validate(const run_config& c) {
  require(c.steps >= 0, "steps", std::to_string(c.steps), ">= 0");
  require(c.batch_size >= 1, "batch_size", std::to_string(c.batch_size), ">= 1");
  require(c.threads >= 1 && c.threads <= 256, "threads", std::to_string(c.threads), "1..256");
  require(std::isfinite(c.clip_norm) && c.clip_norm >= 0.0, "clip_norm", num(c.clip_norm),
          "a finite number >= 0 (0: off)");
  require(std::isfinite(c.loss_weight) && c.loss_weight > 0.0, "loss_weight", num(c.loss_weight),
          "a finite number > 0");
  validate_policy(c.policy);

  if (c.model == model_kind::stack) {
    require(!c.stack.layers.empty(), "model layers", "[]", "a non-empty list of layers ending in a linear head");
    const bool tokens = c.stack.layers.front().kind == layer_kind::embedding;
    require(tokens || c.stack.input_dim >= 1, "model input_dim", std::to_string(c.stack.input_dim),
            ">= 1 (the columns of the inputs) when the first layer is not an embedding");
    // Two layers of one name would share parameter names: initial weights, faults and telemetry would reach the
    // first only.
    for (std::size_t i = 0; i < c.stack.layers.size(); ++i) {
      for (std::size_t k = 0; k < i; ++k) {
        const std::string name = layer_name(c.stack.layers[i], i);
        require(name != layer_name(c.stack.layers[k], k), "model.layers[" + std::to_string(i) + "].name",
                "'" + name + "' (the name of model.layers[" + std::to_string(k) + "] too)",
                "a name no other layer has (a layer without one is named <kind><index>, e.g. linear2)");
      }
    }
    const std::int64_t vocab = c.stack.layers.front().vocab;
    if (tokens && c.data.from_files()) {
      require(vocab >= 1, "model.layers[0].vocab", std::to_string(vocab),
              ">= 1 when data.inputs holds token ids (the ids lie in [0, vocab))");
      require(c.loss == loss_kind::cross_entropy, "training loss", to_string(c.loss),
              "cross_entropy for token inputs (data.targets holds a token id per position)");
    } else if (tokens) {
      require(vocab == 0, "model.layers[0].vocab", std::to_string(vocab),
              "only with token ids from data.inputs (on the corpus the vocabulary is its bytes)");
    }
  }
  require(c.loss == loss_kind::cross_entropy || c.data.from_files(), "training loss", to_string(c.loss),
          "cross_entropy unless the data come from files (regression targets are read from data.targets)");
  require(c.data.from_files() == !c.data.targets_path.empty(), "data targets", "'" + c.data.targets_path + "'",
          "set together with data.inputs");
  require(c.data.eval_inputs_path.empty() == c.data.eval_targets_path.empty(), "data eval_targets",
          "'" + c.data.eval_targets_path + "'", "set together with data.eval_inputs");
  require(!c.data.from_files() || c.model == model_kind::stack, "data inputs", "'" + c.data.inputs_path + "'",
          "input files only with model.kind \"stack\"");
  if (c.data.from_files()) {
    // Clusters and corpus settings do not apply; the model checks its widths against the files.
  } else if (c.model == model_kind::mlp ||
             (c.model == model_kind::stack && c.stack.layers.front().kind != layer_kind::embedding)) {
    const mlp_shape& m = c.mlp;
    require(m.input_dim >= 1, "mlp input_dim", std::to_string(m.input_dim), ">= 1");
    require(m.hidden_dim >= 1, "mlp hidden_dim", std::to_string(m.hidden_dim), ">= 1");
    require(m.hidden_layers >= 0 && m.hidden_layers <= 64, "mlp hidden_layers", std::to_string(m.hidden_layers),
            "0..64");
    require(m.classes >= 2, "mlp classes", std::to_string(m.classes), ">= 2");
    require(c.data.train_samples >= 1, "data train_samples", std::to_string(c.data.train_samples), ">= 1");
    require(std::isfinite(c.data.cluster_spread) && c.data.cluster_spread >= 0.0, "data cluster_spread",
            num(c.data.cluster_spread), "a finite number >= 0");
    require(std::isfinite(c.data.input_scale) && c.data.input_scale > 0.0, "data input_scale", num(c.data.input_scale),
            "a finite number > 0");
  } else {
    const transformer_shape& t = c.transformer;
    require(t.context >= 2 && t.context <= 4096, "transformer context", std::to_string(t.context), "2..4096");
    require(t.heads >= 1, "transformer heads", std::to_string(t.heads), ">= 1");
    require(t.width >= 1 && t.width % t.heads == 0, "transformer width", std::to_string(t.width),
            "a positive multiple of heads (" + std::to_string(t.heads) + ")");
    require(t.layers >= 1 && t.layers <= 64, "transformer layers", std::to_string(t.layers), "1..64");
    require(t.ffn_multiplier >= 1, "transformer ffn_multiplier", std::to_string(t.ffn_multiplier), ">= 1");
    require(c.data.eval_fraction > 0.0 && c.data.eval_fraction <= 0.5, "data eval_fraction", num(c.data.eval_fraction),
            "(0, 0.5]");
    require(!c.data.corpus_path.empty(), "data corpus_path", "''", "a path to a text file");
  }
  require(c.data.eval_samples >= 1, "data eval_samples", std::to_string(c.data.eval_samples), ">= 1");
  require(c.data.probe_rows >= 1, "data probe_rows", std::to_string(c.data.probe_rows), ">= 1");

  const optimizer_config& o = c.optimizer;
  require(std::isfinite(o.learning_rate) && o.learning_rate > 0.0, "optimizer learning_rate", num(o.learning_rate),
          "a finite number > 0");
  require(o.momentum >= 0.0 && o.momentum < 1.0, "optimizer momentum", num(o.momentum), "[0, 1)");
  require(o.beta1 >= 0.0 && o.beta1 < 1.0, "optimizer beta1", num(o.beta1), "[0, 1)");
  require(o.beta2 >= 0.0 && o.beta2 < 1.0, "optimizer beta2", num(o.beta2), "[0, 1)");
  require(std::isfinite(o.epsilon) && o.epsilon > 0.0, "optimizer epsilon", num(o.epsilon), "a finite number > 0");
  require(o.dampening >= 0.0 && o.dampening <= 1.0, "optimizer dampening", num(o.dampening), "[0, 1]");
  require(!o.nesterov || (o.momentum > 0.0 && o.dampening == 0.0), "optimizer nesterov", "true",
          "only with momentum > 0 and dampening 0 (torch.optim.SGD refuses it too)");
  require(std::isfinite(o.weight_decay) && o.weight_decay >= 0.0, "optimizer weight_decay", num(o.weight_decay),
          "a finite number >= 0");

  if (c.scaler.kind == scaler_kind::dynamic) {
    validate(c.scaler.dynamic);
  } else if (c.scaler.kind == scaler_kind::static_scale) {
    require(std::isfinite(c.scaler.static_scale) && c.scaler.static_scale >= float_min_normal, "scaler static_scale",
            num(c.scaler.static_scale), "a finite normal float >= 2^-126");
  }
  for (const fault_spec& f : c.faults) {
    const std::string field = "fault " + to_string(f.kind);
    for (const std::int64_t s : f.steps) require(s >= 0, field + " step", std::to_string(s), ">= 0");
    const std::optional<std::int64_t> twice = repeated_step(f.steps);
    require(!twice, field + " step", std::to_string(twice.value_or(0)) + " given twice", "each step at most once");
    // Fields the kind does not read are refused: they were reported as if they acted.
    const bool gradient_fault = is_gradient_fault(f.kind);
    const bool loss_fault = is_loss_fault(f.kind);
    require(gradient_fault || f.target.empty(), field + " target", f.target,
            "empty (a target only on gradient_inf and gradient_nan)");
    if (loss_fault) {
      require(std::isfinite(f.factor) && f.factor > 0.0 && f.factor != 1.0, field + " factor", num(f.factor),
              "a finite number > 0 other than 1 (1 changes nothing)");
    } else {
      require(f.factor == 1.0, field + " factor", num(f.factor), "1 (a factor only on loss_spike and tiny_loss)");
    }
  }
  const checkpoint_options& k = c.checkpoint;
  require(k.save_every >= 0, "checkpoint save_every", std::to_string(k.save_every), ">= 0 (0: off)");
  require(k.save_path.empty() || (k.save_after_step >= 0 && k.save_after_step < c.steps) ||
              (k.save_after_step == -1 && k.save_every > 0),
          "checkpoint save_after_step", std::to_string(k.save_after_step),
          "0..steps-1 when save_path is set (or -1 with save_every > 0)");
  require(k.stop_after_steps >= -1, "checkpoint stop_after_steps", std::to_string(k.stop_after_steps), ">= -1");
  if (c.data_parallel) {
    require(c.data_parallel->ranks >= 1, "data_parallel ranks", std::to_string(c.data_parallel->ranks),
            ">= 1 (mpirun -np)");
    validate(c.data_parallel->config, c.data_parallel->ranks, c.batch_size);
  }
}

std::string to_string(model_kind k) {
  return k == model_kind::mlp ? "mlp" : k == model_kind::transformer ? "transformer" : "stack";
}
std::string to_string(loss_kind k) {
  switch (k) {
    case loss_kind::cross_entropy:
      return "cross_entropy";
    case loss_kind::mse:
      return "mse";
    case loss_kind::l1:
      return "l1";
    case loss_kind::huber:
      return "huber";
  }
  return "unknown";
}
std::string layer_name(const layer_spec& s, std::size_t index) {
  return s.name.empty() ? to_string(s.kind) + std::to_string(index) : s.name;
}

std::string to_string(layer_kind k) {
  switch (k) {
    case layer_kind::linear:
      return "linear";
    case layer_kind::activation:
      return "activation";
    case layer_kind::layer_norm:
      return "layer_norm";
    case layer_kind::embedding:
      return "embedding";
    case layer_kind::transformer_block:
      return "transformer_block";
  }
  return "unknown";
}
optimizer_config torch_defaults(optimizer_kind k, optimizer_config base) {
  base.kind = k;
  if (k == optimizer_kind::adamw_torch) {
    base.learning_rate = 1e-3;
    base.beta1 = 0.9;
    base.beta2 = 0.999;
    base.epsilon = 1e-8;
    base.weight_decay = 1e-2;
  } else if (k == optimizer_kind::sgd_torch) {
    base.momentum = 0.0;
    base.dampening = 0.0;
    base.weight_decay = 0.0;
    base.nesterov = false;
  }
  return base;
}
optimizer_config torch_adamw(double learning_rate) {
  optimizer_config c = torch_defaults(optimizer_kind::adamw_torch);
  c.learning_rate = learning_rate;
  return c;
}
std::string to_string(activation_kind k) { return k == activation_kind::gelu ? "gelu" : "relu"; }
std::string to_string(master_weights_mode m) {
  switch (m) {
    case master_weights_mode::from_policy:
      return "from_policy";
    case master_weights_mode::on:
      return "on";
    case master_weights_mode::off:
      return "off";
  }
  return "unknown";
}
std::string to_string(optimizer_kind k) {
  switch (k) {
    case optimizer_kind::sgd_momentum:
      return "sgd-momentum";
    case optimizer_kind::adamw:
      return "adamw";
    case optimizer_kind::sgd_torch:
      return "sgd-torch";
    case optimizer_kind::adamw_torch:
      return "adamw-torch";
  }
  return "unknown";
}
std::string to_string(scaler_kind k) {
  switch (k) {
    case scaler_kind::dynamic:
      return "dynamic";
    case scaler_kind::static_scale:
      return "static";
    case scaler_kind::none:
      return "none";
  }
  return "unknown";
}
std::string to_string(fault_kind k) {
  switch (k) {
    case fault_kind::gradient_inf:
      return "gradient-inf";
    case fault_kind::gradient_nan:
      return "gradient-nan";
    case fault_kind::loss_spike:
      return "loss-spike";
    case fault_kind::tiny_loss:
      return "tiny-loss";
    case fault_kind::input_nan:
      return "input-nan";
  }
  return "unknown";
}

}  // namespace safeamp::sim
