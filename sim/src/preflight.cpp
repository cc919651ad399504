// Preflight estimates of memory and time (see preflight.hpp). The memory model counts what the engine
// holds, per row of a batch: every layer caches its input for the backward pass (linear, activation, layer
// norm, attention with its probabilities), the GEMM rounds copies of its operands, the loss keeps logits,
// probabilities and their gradient. Per run it adds parameters, gradients, optimizer moments and master
// weights, the step records every run keeps until the report is written, and a checkpoint's serialised
// copy. The sum is multiplied by a margin (1.5) for allocator overhead and temporaries not itemised, so
// that it bounds the measured peak from above (checked against the peak RSS of real scenarios in tests).
#include "safeamp/sim/preflight.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "safeamp/error.hpp"
#include "safeamp/policy/policy_presets.hpp"
#include "safeamp/sim/datasets.hpp"
#include "safeamp/sim/models.hpp"
#include "safeamp/sim/run_result.hpp"
#include "safeamp/sim/trainer.hpp"

namespace safeamp::sim {
namespace {

constexpr double float_bytes = 4.0;
constexpr double margin = 1.5;  // allocator overhead and temporaries not itemised

double d(std::int64_t v) { return static_cast<double>(v); }

// The width of a described stack's head when its `out` is 0: the width the data files give (`file_head`: the
// targets' columns, the largest class + 1, or the vocabulary, from check_data_files), else the vocabulary on token
// data (the embedding's `vocab` for token ids from files), the clusters' classes, or (files not read) 1.
std::int64_t stack_head_width(const run_config& c, std::int64_t vocab, std::int64_t file_head) {
  if (c.data.from_files()) {
    if (file_head > 0) return file_head;
    return c.model == model_kind::stack ? std::max<std::int64_t>(1, c.stack.layers.front().vocab) : 1;
  }
  return c.model == model_kind::transformer ||
                 (c.model == model_kind::stack && c.stack.layers.front().kind == layer_kind::embedding)
             ? vocab
             : c.mlp.classes;
}

// A described stack's per-row floats (as the presets' formulas below count them, layer by layer).
double stack_floats_per_row(const run_config& c, std::int64_t vocab, std::int64_t file_head) {
  double floats = 2.0 * d(c.stack.input_dim), widest = d(c.stack.input_dim);
  std::int64_t width = c.stack.input_dim, context = 1;
  for (std::size_t i = 0; i < c.stack.layers.size(); ++i) {
    const layer_spec& l = c.stack.layers[i];
    if (l.kind == layer_kind::linear) {
      width = l.out > 0 ? l.out : stack_head_width(c, vocab, file_head);
      floats += 4.0 * d(width);
    } else if (l.kind == layer_kind::embedding) {
      width = l.width;
      context = l.context;
      floats += 4.0 * d(width);
    } else if (l.kind == layer_kind::transformer_block) {
      floats += 13.0 * d(width) + 4.0 * d(l.ffn_multiplier * width) + 2.0 * d(l.heads) * d(context);
      widest = std::max(widest, d(l.ffn_multiplier * width));
    } else {
      floats += 3.0 * d(width);
    }
    widest = std::max(widest, 3.0 * d(width));
  }
  return floats + 4.0 * widest;
}

std::int64_t stack_context(const run_config& c) {
  const layer_spec& first = c.stack.layers.front();
  return first.kind == layer_kind::embedding ? first.context : 1;
}

// Floats cached or allocated per row (MLP sample, transformer token) by one forward and backward pass.
double floats_per_row(const run_config& c, std::int64_t vocab, std::int64_t file_head) {
  if (c.model == model_kind::stack) return stack_floats_per_row(c, vocab, file_head);
  if (c.model == model_kind::mlp) {
    const mlp_shape& m = c.mlp;
    const double widest = std::max({d(m.input_dim), d(m.hidden_dim), d(m.classes)});
    // linear inputs and the input batch, activation inputs and outputs, logits/probabilities/gradient,
    // the GEMM's rounded operand copy and the backward's two input-gradient buffers.
    return 2.0 * d(m.input_dim) + 4.0 * d(m.hidden_layers) * d(m.hidden_dim) + 4.0 * d(m.classes) + 4.0 * widest;
  }
  const transformer_shape& t = c.transformer;
  const double w = d(t.width), f = d(t.ffn_multiplier) * w, v = d(vocab);
  // Per layer: LN inputs and normalised values, QKV output and the attention's copies of Q, K, V, its
  // scores and probabilities (heads x context per token), projection and MLP inputs and outputs.
  const double layer = 13.0 * w + 4.0 * f + 2.0 * d(t.heads) * d(t.context);
  const double widest = std::max({3.0 * w, f, v});
  return d(t.layers) * layer + 4.0 * w + 3.0 * v + 2.0 * widest;
}

// Rows of one training batch and of the held-out pass. Data from files: a step trains on min(batch size, the
// file's rows), and the held-out pass covers every row of the held-out file (the training file without one).
double train_rows(const run_config& c, const preflight_inputs& in) {
  if (c.model == model_kind::stack) {
    const std::int64_t batch = in.file_rows > 0 ? std::min(c.batch_size, in.file_rows) : c.batch_size;
    return d(batch) * d(stack_context(c));
  }
  return c.model == model_kind::mlp ? d(c.batch_size) : d(c.batch_size) * d(c.transformer.context);
}
double held_out_rows(const run_config& c, const preflight_inputs& in) {
  if (c.model == model_kind::stack) {
    if (c.data.from_files() && in.file_eval_rows > 0) return d(in.file_eval_rows) * d(stack_context(c));
    return stack_context(c) > 1 ? d(in.eval_sequences) * d(stack_context(c)) : d(c.data.eval_samples);
  }
  return c.model == model_kind::mlp ? d(c.data.eval_samples) : d(in.eval_sequences) * d(c.transformer.context);
}

// Multiply-adds x 2 of one training step (forward 2, backward 4 per weight and row) and of one forward pass
// over `rows` rows (2 per weight and row), attention's two context x context products included.
struct step_flops {
  double train = 0.0;
  double forward_per_row = 0.0;
};

// An element a layer writes costs the emulated rounding of its value besides the arithmetic: counted as
// this many floating-point operations (the transformer, with its layer norms, softmax and attention
// probabilities, writes many more elements per GEMM operation than the MLP the rate is measured on).
constexpr double element_cost_flops = 20.0;

step_flops flops_of(const run_config& c, std::int64_t vocab, const preflight_inputs& in) {
  const std::vector<parameter_shape> shapes = parameter_shapes(c, vocab, in.file_head_width);
  double weights = 0.0;  // GEMM weights (matrices with more than one row; embeddings are lookups)
  for (const parameter_shape& p : shapes) {
    if (p.rows > 1 && p.name.find("embed.") != 0) weights += d(p.rows) * d(p.cols);
  }
  step_flops f;
  f.forward_per_row = 2.0 * weights + element_cost_flops * floats_per_row(c, vocab, in.file_head_width);
  if (c.model == model_kind::transformer) {
    const transformer_shape& t = c.transformer;
    f.forward_per_row += d(t.layers) * 4.0 * d(t.context) * d(t.width);  // QK^T and PV per token
  } else if (c.model == model_kind::stack) {
    for (const parameter_shape& p : shapes) {  // QK^T and PV per token of each block (its qkv weight: (w, 3w))
      if (p.name.ends_with(".qkv.weight")) f.forward_per_row += 4.0 * d(stack_context(c)) * d(p.rows);
    }
  }
  f.train = 3.0 * f.forward_per_row * train_rows(c, in);
  return f;
}

std::string model_fields(const run_config& c) {
  if (c.model == model_kind::stack) return "model.layers, model.input_dim";
  return c.model == model_kind::mlp ? "model.hidden_dim, model.hidden_layers, model.input_dim, model.classes"
                                    : "model.width, model.layers, model.ffn_multiplier, the corpus's vocabulary";
}

std::string row_fields(const run_config& c) {
  if (c.model == model_kind::stack) return "model.layers";
  return c.model == model_kind::mlp ? "model.hidden_dim, model.hidden_layers"
                                    : "model.width, model.layers, model.context, model.heads";
}

}  // namespace

std::vector<parameter_shape> parameter_shapes(const run_config& c, std::int64_t vocab, std::int64_t head_width) {
  std::vector<parameter_shape> out;
  const auto linear = [&out](const std::string& name, std::int64_t in, std::int64_t n) {
    out.push_back({name + ".weight", in, n});
    out.push_back({name + ".bias", 1, n});
  };
  const auto norm = [&out](const std::string& name, std::int64_t width) {
    out.push_back({name + ".gain", 1, width});
    out.push_back({name + ".bias", 1, width});
  };
  // The same walk as the model's constructor (models.cpp), over the preset's or the described stack.
  const model_stack stack = preset_stack(c);
  std::int64_t width = stack.input_dim;
  for (std::size_t i = 0; i < stack.layers.size(); ++i) {
    const layer_spec& l = stack.layers[i];
    const std::string name = layer_name(l, i);
    if (l.kind == layer_kind::linear) {
      const std::int64_t n = l.out > 0 ? l.out : stack_head_width(c, vocab, head_width);
      linear(name, width, n);
      width = n;
    } else if (l.kind == layer_kind::layer_norm) {
      norm(name, width);
    } else if (l.kind == layer_kind::embedding) {
      out.push_back({name + ".tokens", l.vocab > 0 ? l.vocab : vocab, l.width});
      out.push_back({name + ".positions", l.context, l.width});
      width = l.width;
    } else if (l.kind == layer_kind::transformer_block) {
      const std::string p = name + ".";
      norm(p + "ln1", width);
      linear(p + "qkv", width, 3 * width);
      linear(p + "proj", width, width);
      norm(p + "ln2", width);
      linear(p + "fc1", width, l.ffn_multiplier * width);
      linear(p + "fc2", l.ffn_multiplier * width, width);
    }
  }
  return out;
}

void check_fault_targets(const run_config& c, std::int64_t vocab) {
  const std::vector<parameter_shape> shapes = parameter_shapes(c, vocab);
  for (const fault_spec& f : c.faults) {
    if (f.target.empty()) continue;
    if (std::any_of(shapes.begin(), shapes.end(), [&f](const parameter_shape& p) { return p.name == f.target; })) {
      continue;
    }
    std::string names;
    for (const parameter_shape& p : shapes) names += (names.empty() ? "" : ", ") + p.name;
    const std::string shown = f.target.size() <= 64 ? f.target : f.target.substr(0, 64) + "...";
    throw error("candidate '" + c.label + "' fault target", "'" + shown + "'", "a parameter of the model: " + names);
  }
}

preflight_estimate estimate_runs(const std::vector<run_config>& runs, bool reference_reused,
                                 const preflight_inputs& in) {
  preflight_estimate e;
  if (runs.empty()) return e;
  double largest_run = 0.0;
  std::vector<estimate_term> largest_terms;
  double kept = 0.0;  // what every finished run leaves until the report is written
  double kept_records = 0.0;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const run_config& c = runs[i];
    const std::vector<parameter_shape> shapes = parameter_shapes(c, in.vocab, in.file_head_width);
    double elements = 0.0;
    for (const parameter_shape& p : shapes) elements += d(p.rows) * d(p.cols);
    e.parameters = static_cast<std::int64_t>(std::min(elements, 9.0e18));
    const bool adam = c.optimizer.kind == optimizer_kind::adamw || c.optimizer.kind == optimizer_kind::adamw_torch;
    const double moments = adam ? 2.0 : 1.0;
    const double tensors = 2.0 + moments + (keeps_master_weights(c) ? 1.0 : 0.0);  // value, gradient, ...
    const double states = elements * float_bytes * tensors;
    const double row = floats_per_row(c, in.vocab, in.file_head_width) * float_bytes;
    const double train = row * train_rows(c, in);
    const double eval = row * held_out_rows(c, in);
    // Step records (kept for the report) and, per checkpoint, a copy of them and of the tensors serialised.
    const double counters = d(static_cast<std::int64_t>(shapes.size()) + 1);
    const double record = d(sizeof(step_record)) + counters * (d(sizeof(layer_counts)) + 32.0);
    const double records = d(c.steps) * record;
    const double telemetry_text = d(c.steps) * (200.0 + counters * 100.0);
    const bool checkpoints = !c.checkpoint.save_path.empty();
    const double checkpoint_records = checkpoints ? 2.0 * records : 0.0;  // the history copied and serialised
    const double data = 5.0 * d(in.corpus_bytes) + in.file_bytes;         // the corpus, or the data files
    const double report = 2.0 * 1048576.0 + d(c.steps) * 200.0;           // summary, report and its charts
    std::vector<estimate_term> terms = {
        {"parameters, gradients and optimizer state (" + std::to_string(e.parameters) + " parameters)", model_fields(c),
         states},
        {"activations of a training batch", "training.batch_size, " + row_fields(c), train},
        {"activations of the held-out pass",
         (c.data.from_files() ? "data.eval_inputs (or data.inputs), " : "data.eval_samples, ") + row_fields(c), eval},
        {"step records, telemetry and the report", "training.steps",
         records + telemetry_text + checkpoint_records + report},
    };
    if (checkpoints) {
      terms.push_back({"a checkpoint's serialised copy of the parameters and optimizer state",
                       model_fields(c) + " (or --checkpoint-every 0)", states});
    }
    if (c.data_parallel) {
      // The exchange's buffers in each process (data_parallel.cpp): K parts over N ranks, S = ceil(K / N) parts
      // per rank. Canonical fp32: the rank's record of S parts' gradients, the all-gathered N records and the
      // reduced sum; a wire format: S kept parts, the rank's sum, N gathered sums and N contributions, the sum.
      const double k = d(c.data_parallel->config.micro_batches);
      const double n = d(std::max<std::int64_t>(c.data_parallel->ranks, 1));
      const double slots = std::ceil(k / n);
      const bool canonical = c.data_parallel->config.reduction.order == reduce_order::canonical;
      const double copies = canonical ? slots + n * slots + 1.0 : slots + 1.0 + 2.0 * n + 1.0;
      terms.push_back({"data-parallel gradient buffers (" + std::to_string(c.data_parallel->config.micro_batches) +
                           " micro-batches over " + std::to_string(c.data_parallel->ranks) + " rank(s), per process)",
                       "data_parallel.micro_batches, " + model_fields(c), copies * elements * float_bytes});
    }
    if (data > 0.0) {
      terms.push_back(c.data.from_files()
                          ? estimate_term{"data files and their copies", "data.inputs, data.targets", data}
                          : estimate_term{"corpus and its token ids", "data.corpus_path", data});
    }
    double run_bytes = 0.0;
    for (const estimate_term& t : terms) run_bytes += t.bytes;
    // The training batch and the held-out pass never coexist: count only the larger.
    run_bytes -= std::min(train, eval);
    if (run_bytes > largest_run) {
      largest_run = run_bytes;
      largest_terms = terms;
    }
    const double eval_predictions = held_out_rows(c, in) * 9.0;  // loss, correct, slice per prediction
    const double probe = d(c.data.probe_rows) * 1024.0 * float_bytes;
    kept += records + eval_predictions + probe;
    kept_records += records;

    const step_flops f = flops_of(c, in.vocab, in);
    const double run_flops = d(c.steps) * f.train + f.forward_per_row * (held_out_rows(c, in) + d(c.data.probe_rows));
    if (!(i == 0 && reference_reused)) e.flops += run_flops;
  }
  e.peak_bytes = in.base_bytes + margin * (largest_run + kept);
  largest_terms.push_back({"step records kept for the report (every run)", "training.steps", kept_records});
  std::stable_sort(largest_terms.begin(), largest_terms.end(),
                   [](const estimate_term& a, const estimate_term& b) { return a.bytes > b.bytes; });
  e.terms = std::move(largest_terms);
  // One thread's rate: the simulator's GEMMs are small and its threads gained little in measurement (the default
  // scenario, 2 threads on 2 cores: 21 s against 10 s predicted with a 2x speed-up, 19 s without), so the
  // estimate does not divide by the thread count and errs long.
  e.seconds = e.flops / std::max(in.flops_per_second, 1.0);
  e.time_fields = "training.steps, training.batch_size, " + model_fields(runs.front()) + ", the number of candidates";
  return e;
}

double measure_training_rate(model_kind kind, const data_config& data) {
  if (kind == model_kind::stack) kind = model_kind::mlp;  // callers pass transformer for a stack on a corpus
  run_config c;
  c.label = "preflight calibration";
  c.model = kind;
  c.policy = presets::fp16_mixed;
  c.threads = 1;
  std::int64_t vocab = 0;
  double eval = 0.0;
  if (kind == model_kind::mlp) {
    c.mlp = mlp_shape{
        .input_dim = 32, .hidden_dim = 128, .hidden_layers = 2, .classes = 8, .activation = activation_kind::gelu};
    c.data.train_samples = 512;
    c.data.eval_samples = 64;
    c.data.probe_rows = 4;
    c.steps = 8;
    c.batch_size = 128;
    eval = d(c.data.eval_samples + c.data.probe_rows);
  } else {
    c.transformer = transformer_shape{.context = 32, .width = 64, .heads = 4, .layers = 1, .ffn_multiplier = 4};
    c.data = data;
    c.data.eval_samples = 8;
    c.data.probe_rows = 2;
    c.steps = 4;
    c.batch_size = 8;
    const corpus_data corpus(c.transformer, c.data);
    vocab = corpus.vocab_size();
    eval = d(corpus.eval_set().samples + c.data.probe_rows) * d(c.transformer.context);
  }
  const step_flops f = flops_of(c, vocab, preflight_inputs{});
  const double flops = d(c.steps) * f.train + f.forward_per_row * eval;
  double best = 0.0;
  for (int i = 0; i < 2; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    (void)train(c);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0.0) best = std::max(best, flops / s);
  }
  return best > 0.0 ? best : 1e9;
}

namespace {

// The number of kB of a "<key>:   <n> kB" line of a /proc file; 0 when absent.
std::uint64_t proc_kb(const char* file, const char* key) noexcept {
  try {
    std::ifstream in(file);
    std::string line;
    const std::size_t n = std::strlen(key);
    while (std::getline(in, line)) {
      if (line.compare(0, n, key) == 0) return std::stoull(line.substr(n)) * 1024ull;
    }
  } catch (...) {
  }
  return 0;
}

}  // namespace

std::uint64_t available_memory_bytes() noexcept {
  if (const std::uint64_t b = proc_kb("/proc/meminfo", "MemAvailable:"); b > 0) return b;
  const long pages = ::sysconf(_SC_AVPHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : 0;
}

std::uint64_t current_rss_bytes() noexcept { return proc_kb("/proc/self/status", "VmRSS:"); }

}  // namespace safeamp::sim
