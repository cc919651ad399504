// What one simulated training run is: model and shapes, data, precision policy, loss scaler, optimizer,
// steps, seed, threads, injected faults, clipping and checkpointing. A plain value; validate() checks
// every field and throws safeamp::error naming it. train() (trainer.hpp) runs it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "safeamp/format/round_options.hpp"
#include "safeamp/policy/precision_policy.hpp"
#include "safeamp/scaling/scaler_config.hpp"
#include "safeamp/sim/data_parallel_config.hpp"

namespace safeamp::sim {

/// mlp and transformer are presets (fixed shapes below, expanded into a layer stack by preset_stack in
/// models.hpp); stack is a model described layer by layer in the scenario.
enum class model_kind : std::uint8_t { mlp, transformer, stack };
enum class activation_kind : std::uint8_t { gelu, relu };

/// One layer of a described model, in order from the input to the head.
enum class layer_kind : std::uint8_t { linear, activation, layer_norm, embedding, transformer_block };

struct layer_spec {
  layer_kind kind = layer_kind::linear;
  std::string name;      // parameter prefix ("fc0" gives fc0.weight, fc0.bias); empty: "<kind><index>"
  std::int64_t out = 0;  // linear: output width (0 on the last linear: the width the data's targets need)
  activation_kind activation = activation_kind::gelu;  // activation
  std::int64_t width = 0;                              // embedding: model width
  std::int64_t context = 0;                            // embedding: tokens per sequence
  std::int64_t vocab = 0;           // embedding: token ids in [0, vocab) from data.inputs; 0 on the corpus (its bytes)
  std::int64_t heads = 1;           // transformer_block (pre-norm attention + GELU MLP, residuals)
  std::int64_t ffn_multiplier = 4;  // transformer_block
  friend bool operator==(const layer_spec&, const layer_spec&) = default;
};

/// The name of layer `index` of a stack, the prefix of its parameters: its own name, else "<kind><index>"
/// ("linear2"). validate() refuses a stack in which two layers have the same one.
[[nodiscard]] std::string layer_name(const layer_spec& s, std::size_t index);

/// model.kind "stack": features of input_dim columns (or tokens, when the first layer is an embedding)
/// through `layers`; the last layer is a linear head.
struct model_stack {
  std::int64_t input_dim = 0;
  std::vector<layer_spec> layers;
  friend bool operator==(const model_stack&, const model_stack&) = default;
};

/// The training loss: cross-entropy over integer class targets, or a regression loss over float targets of
/// any width (mean over every element, as PyTorch's reduction='mean'); huber with delta 1 (PyTorch's default).
enum class loss_kind : std::uint8_t { cross_entropy, mse, l1, huber };

/// MLP classifier: input_dim -> hidden_dim (x hidden_layers, activation) -> classes.
struct mlp_shape {
  std::int64_t input_dim = 32;
  std::int64_t hidden_dim = 64;
  std::int64_t hidden_layers = 2;
  std::int64_t classes = 8;
  activation_kind activation = activation_kind::gelu;
  friend bool operator==(const mlp_shape&, const mlp_shape&) = default;
};

/// Decoder-only transformer (pre-norm, learned positions, GELU MLP, tied nothing). The vocabulary is
/// the set of bytes of the corpus.
struct transformer_shape {
  std::int64_t context = 32;  // tokens per sequence
  std::int64_t width = 64;    // model dimension; a multiple of heads
  std::int64_t heads = 4;
  std::int64_t layers = 2;
  std::int64_t ffn_multiplier = 4;
  friend bool operator==(const transformer_shape&, const transformer_shape&) = default;
};

/// Data: the MLP trains on Gaussian clusters (one per class, means drawn from `seed`), the transformer
/// on the bytes of `corpus_path` (the last eval_fraction of the file is held out).
struct data_config {
  std::uint64_t seed = 1;
  std::int64_t train_samples = 4096;  // MLP: training set size
  std::int64_t eval_samples = 1024;   // MLP: held-out set size; transformer: held-out sequences
  double cluster_spread = 1.0;        // MLP: standard deviation of each cluster around its mean
  double input_scale = 1.0;           // MLP: every input is multiplied by this (large values stress fp16)
  std::string corpus_path = "/usr/share/common-licenses/GPL-3";
  double eval_fraction = 0.1;   // transformer: fraction of the corpus held out (its tail)
  std::int64_t probe_rows = 8;  // MLP: probe samples; transformer: probe sequences
  // Data from .npy files (resolved against the scenario's folder when parsed): inputs (rows, input_dim) or
  // (rows,); targets int (rows,) for cross-entropy, float (rows, k) or (rows,) for regression. A stack that
  // starts with an embedding reads token ids instead: inputs and targets int (rows, context), ids in
  // [0, vocab), one sequence per row and its target id per position. Batch s is rows [s*B, s*B+B) modulo the
  // row count (a fixed batch when B >= rows). Eval files default to the training files.
  std::string inputs_path, targets_path, eval_inputs_path, eval_targets_path;
  /// Initial values of parameters by name (a linear weight is (in, out): PyTorch's Linear.weight.T).
  std::vector<std::pair<std::string, std::string>> initial_weights;
  [[nodiscard]] bool from_files() const noexcept { return !inputs_path.empty(); }
  friend bool operator==(const data_config&, const data_config&) = default;
};

enum class scaler_kind : std::uint8_t { dynamic, static_scale, none };

struct scaler_choice {
  scaler_kind kind = scaler_kind::dynamic;
  scaler_config dynamic{};    // used when kind == dynamic
  float static_scale = 1.0f;  // used when kind == static_scale
  friend bool operator==(const scaler_choice&, const scaler_choice&) = default;
};

/// sgd_momentum and adamw are safeamp's own; sgd_torch and adamw_torch follow torch.optim.SGD and
/// torch.optim.AdamW update for update (see optimizer.hpp), with their defaults by name (torch_defaults).
enum class optimizer_kind : std::uint8_t { sgd_momentum, adamw, sgd_torch, adamw_torch };

/// Whether an fp32 master copy of the parameters is kept: as the policy says (precision_policy::
/// master_weights), or forced on/off (off with fp16 parameters shows the stagnation master weights fix).
enum class master_weights_mode : std::uint8_t { from_policy, on, off };

struct optimizer_config {
  optimizer_kind kind = optimizer_kind::adamw;
  double learning_rate = 1e-3;
  double momentum = 0.9;  // SGD
  double beta1 = 0.9;     // AdamW
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double weight_decay = 0.0;  // AdamW decoupled decay; SGD (torch) L2 term added to the gradient
  double dampening = 0.0;     // SGD (torch)
  bool nesterov = false;      // SGD (torch)
  master_weights_mode master_weights = master_weights_mode::from_policy;
  bool stochastic_write_back = false;  // round the updated weights to the parameter format stochastically
  friend bool operator==(const optimizer_config&, const optimizer_config&) = default;
};

enum class fault_kind : std::uint8_t {
  gradient_inf,  // +inf written into one element of the gradient of parameter `target`
  gradient_nan,  // NaN written into one element of the gradient of parameter `target`
  loss_spike,    // the loss is multiplied by `factor` (e.g. 1e6) so the scaled backward overflows
  tiny_loss,     // the loss is multiplied by `factor` (e.g. 1e-6) so gradients underflow
  input_nan,     // one input value of the batch is NaN (MLP: a feature; transformer: an embedding row)
};

/// One fault, active at the listed steps (0-based step indices).
/// The gradient kinds (inf/NaN written into parameter `target`'s gradient) and the loss kinds (the loss times
/// `factor`): `target` is read by the first only, `factor` by the second only, and a field the kind does not read is
/// refused (validate, the scenario reader).
[[nodiscard]] constexpr bool is_gradient_fault(fault_kind k) noexcept {
  return k == fault_kind::gradient_inf || k == fault_kind::gradient_nan;
}
[[nodiscard]] constexpr bool is_loss_fault(fault_kind k) noexcept {
  return k == fault_kind::loss_spike || k == fault_kind::tiny_loss;
}

struct fault_spec {
  fault_kind kind = fault_kind::gradient_inf;
  std::vector<std::int64_t> steps;
  std::string target;   // parameter name for gradient faults (empty: the first parameter)
  double factor = 1.0;  // loss_spike / tiny_loss multiplier
  friend bool operator==(const fault_spec&, const fault_spec&) = default;
};

/// exact: safeamp's clip (norm in double; a non-finite norm skips the step). torch: torch.nn.utils.
/// clip_grad_norm_ (per-tensor norms and their norm in float, gradients times min(1, max/(norm + 1e-6)), so
/// a norm that overflows float zeroes every gradient).
enum class clip_mode : std::uint8_t { exact, torch };

struct checkpoint_options {
  std::string save_path;  // written (atomically) after step save_after_step; empty: never
  std::int64_t save_after_step = -1;
  std::int64_t save_every = 0;         // with save_path: also after every save_every-th step and after the last
                                       // step (each save replaces the previous one); 0: only save_after_step
  std::string resume_path;             // when set, the run starts from this checkpoint
  std::int64_t stop_after_steps = -1;  // stop early after this many steps (simulates an interruption); -1: run all
  friend bool operator==(const checkpoint_options&, const checkpoint_options&) = default;
};

struct run_config {
  std::string label = "run";
  model_kind model = model_kind::mlp;
  mlp_shape mlp{};
  transformer_shape transformer{};
  data_config data{};
  precision_policy policy{};
  scaler_choice scaler{};
  optimizer_config optimizer{};
  round_options rounding{};  // how every cast of the run rounds (stochastic: keyed by seed, tensor, step)
  std::int64_t steps = 100;
  std::int64_t batch_size = 64;  // MLP: samples; transformer: sequences
  std::uint64_t seed = 1;        // initialisation, batch order, stochastic rounding
  int threads = 1;               // results are bit-identical for any thread count
  std::vector<fault_spec> faults;
  double clip_norm = 0.0;  // global L2 clip of the unscaled gradient; 0: off
  clip_mode clip = clip_mode::exact;
  loss_kind loss = loss_kind::cross_entropy;
  model_stack stack{};       // model == stack
  double loss_weight = 1.0;  // the training loss is multiplied by this (an auxiliary-loss weight); the
                             // step records report the weighted loss, final_eval the unweighted one
  bool record_layer_counts = true;
  checkpoint_options checkpoint{};
  /// Set when the run trains data parallel (mpirun -np N with a scenario's "data_parallel" block); what of it
  /// changes the numbers is in run_settings. The exchange that does the work is passed to train() beside.
  std::optional<data_parallel_setup> data_parallel;
  friend bool operator==(const run_config&, const run_config&) = default;
};

/// Throws safeamp::error naming the first invalid field (shapes, steps, learning rate, threads, faults,
/// a policy the model cannot run, ...).
void validate(const run_config& cfg);

[[nodiscard]] std::string to_string(model_kind k);
[[nodiscard]] std::string to_string(optimizer_kind k);
[[nodiscard]] std::string to_string(scaler_kind k);
[[nodiscard]] std::string to_string(fault_kind k);
[[nodiscard]] std::string to_string(activation_kind k);      // "gelu", "relu"
[[nodiscard]] std::string to_string(master_weights_mode m);  // "from_policy", "on", "off"
[[nodiscard]] std::string to_string(loss_kind k);            // "cross_entropy", "mse", "l1", "huber"
[[nodiscard]] std::string to_string(layer_kind k);           // "linear", "activation", ...

/// PyTorch's defaults for an optimizer kind (torch.optim.AdamW: lr 1e-3, betas (0.9, 0.999), eps 1e-8,
/// weight_decay 1e-2; torch.optim.SGD: momentum 0, dampening 0, weight_decay 0, nesterov off); the other kinds
/// keep `base`.
[[nodiscard]] optimizer_config torch_defaults(optimizer_kind k, optimizer_config base = {});
/// torch.optim.AdamW(params, lr=learning_rate): adamw_torch with torch's other defaults.
[[nodiscard]] optimizer_config torch_adamw(double learning_rate);

/// True when the run keeps fp32 master weights (the mode, resolved against the policy).
[[nodiscard]] bool keeps_master_weights(const run_config& cfg) noexcept;

/// A step listed more than once in a fault's steps (the smallest such), or none.
[[nodiscard]] std::optional<std::int64_t> repeated_step(std::vector<std::int64_t> steps);

}  // namespace safeamp::sim
