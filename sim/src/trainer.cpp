// The simulated trainer (see trainer.hpp). One step, as every trainer does it:
//   forward under the policy -> loss; backward of scale * loss; unscale every gradient buffer (inf/NaN
//   check); clip on the unscaled norm; step(apply) runs the optimizer only when all is finite; update().
#include "safeamp/sim/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "safeamp/error.hpp"
#include "safeamp/policy/precision_policy.hpp"
#include "safeamp/scaling/communicator.hpp"
#include "safeamp/scaling/loss_scaler.hpp"
#include "safeamp/sim/checkpoint.hpp"
#include "safeamp/sim/communicator.hpp"
#include "safeamp/sim/datasets.hpp"
#include "safeamp/sim/file_data.hpp"
#include "safeamp/sim/loss.hpp"
#include "safeamp/sim/models.hpp"
#include "safeamp/sim/optimizer.hpp"
#include "safeamp/sim/reference.hpp"
#include "safeamp/sim/regression_baseline.hpp"
#include "safeamp/sim/report_files.hpp"
#include "safeamp/sim/stop_request.hpp"

namespace safeamp::sim {
namespace {

using clock_type = std::chrono::steady_clock;
// With data parallelism, part k's casts use sites from k << 16 and the optimizer's from here.
constexpr std::uint32_t optimizer_cast_sites = 0xFFFF0000u;
using any_scaler = std::variant<loss_scaler, static_loss_scaler, noop_loss_scaler>;

any_scaler make_scaler(const scaler_choice& s) {
  switch (s.kind) {
    case scaler_kind::dynamic:
      return loss_scaler(dynamic_scale_rule(s.dynamic));
    case scaler_kind::static_scale:
      return static_loss_scaler(static_scale_rule(s.static_scale));
    case scaler_kind::none:
      return noop_loss_scaler();
  }
  return noop_loss_scaler();
}

bool fault_at(const run_config& cfg, fault_kind kind, std::int64_t step) {
  for (const fault_spec& f : cfg.faults) {
    if (f.kind == kind && std::find(f.steps.begin(), f.steps.end(), step) != f.steps.end()) return true;
  }
  return false;
}

// Loss multiplier of the loss-spike and tiny-loss faults at this step.
double loss_factor(const run_config& cfg, std::int64_t step) {
  double factor = cfg.loss_weight;
  for (const fault_spec& f : cfg.faults) {
    if (is_loss_fault(f.kind) && std::find(f.steps.begin(), f.steps.end(), step) != f.steps.end()) {
      factor *= f.factor;
    }
  }
  return factor;
}

std::size_t parameter_index(const parameter_list& params, const std::string& name) {
  if (name.empty()) return 0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (params[i].name == name) return i;
  }
  std::string names;
  for (const parameter& p : params) names += (names.empty() ? "" : ", ") + p.name;
  throw error("fault target", "'" + name + "'", names);
}

// Any data source behind one interface: Gaussian clusters, a text corpus or the user's .npy files.
struct data_source {
  std::variant<cluster_data, corpus_data, file_data> source;
  [[nodiscard]] batch train_batch(const batch_request& r) const {
    return std::visit([&](const auto& d) { return d.train_batch(r); }, source);
  }
  /// Samples [first, first + count) of train_batch(r): the Gaussian clusters make only those rows (their Box-Muller
  /// draws were a third of a data-parallel step when every rank made the whole batch); the corpus and file data,
  /// copies of stored samples, are cut from the whole batch.
  [[nodiscard]] batch train_part(const batch_request& r, std::int64_t first, std::int64_t count) const {
    if (const auto* clusters = std::get_if<cluster_data>(&source)) return clusters->train_rows(r, first, count);
    return slice_batch(train_batch(r), first, count);
  }
  [[nodiscard]] batch eval_set() const {
    return std::visit([](const auto& d) { return d.eval_set(); }, source);
  }
  [[nodiscard]] batch probe() const {
    return std::visit([](const auto& d) { return d.probe(); }, source);
  }
  [[nodiscard]] std::vector<std::string> slice_names() const {
    return std::visit([](const auto& d) { return d.slice_names(); }, source);
  }
  /// Samples (sequences) a step trains on: the batch size, or every row of a data file with fewer rows.
  [[nodiscard]] std::int64_t step_samples(std::int64_t batch_size) const {
    if (const auto* f = std::get_if<file_data>(&source)) return std::min(batch_size, f->train_rows());
    return batch_size;
  }
};

// The run's data and its model (the preset or the described stack, sized to the data).
data_source make_data(const run_config& cfg, const model_stack& stack) {
  if (cfg.data.from_files()) return {file_data(cfg.data, cfg.loss, token_inputs(stack))};
  if (stack.layers.front().kind == layer_kind::embedding) {
    transformer_shape shape = cfg.transformer;
    shape.context = stack.layers.front().context;
    return {corpus_data(shape, cfg.data)};
  }
  mlp_shape shape = cfg.mlp;
  shape.input_dim = stack.input_dim;
  return {cluster_data(shape, cfg.data)};
}

std::unique_ptr<model> make_model(const run_config& cfg, const model_stack& stack, const data_source& data) {
  std::int64_t vocab = 0, width = cfg.mlp.classes;
  if (const auto* corpus = std::get_if<corpus_data>(&data.source)) vocab = width = corpus->vocab_size();
  if (const auto* files = std::get_if<file_data>(&data.source)) {
    width = files->output_width();
    vocab = token_inputs(stack).vocab;  // token ids from files: the embedding's vocab (0 for features)
  }
  std::unique_ptr<model> net = make_stack_model(stack, vocab, width, cfg.seed, cfg.policy.param);
  load_initial_weights(cfg.data, net->parameters(), cfg.policy.param);
  return net;
}

// The training loss of the run and, when d is not null, its gradient scaled by grad_scale.
loss_result run_loss(exec_context& ctx, const run_config& cfg, const matrix& out, const batch& b, double grad_scale,
                     matrix* d) {
  if (cfg.loss == loss_kind::cross_entropy) return cross_entropy(ctx, cfg.policy, out, b.targets, grad_scale, d);
  return regression_loss(ctx, cfg.policy, cfg.loss, out, b.target_values, grad_scale, d);
}

eval_metrics evaluate(exec_context& ctx, const run_config& cfg, model& m, const batch& b,
                      const std::vector<std::string>& slice_names) {
  const precision_policy& pol = cfg.policy;
  matrix logits;
  m.forward(ctx, pol, b, logits);
  const loss_result r = run_loss(ctx, cfg, logits, b, 1.0, nullptr);
  eval_metrics e;
  std::vector<double> loss_sum(slice_names.size(), 0.0), right(slice_names.size(), 0.0);
  std::vector<std::int64_t> count(slice_names.size(), 0);
  double total = 0.0, total_right = 0.0;
  for (std::size_t i = 0; i < r.row_loss.size(); ++i) {
    const auto s = static_cast<std::size_t>(b.slices[i]);
    const double ok = r.predicted[i] == b.targets[i] ? 1.0 : 0.0;
    loss_sum[s] += r.row_loss[i];
    right[s] += ok;
    ++count[s];
    total += r.row_loss[i];
    total_right += ok;
  }
  const auto n = static_cast<double>(r.row_loss.size());
  e.loss = total / n;
  e.accuracy = total_right / n;
  for (std::size_t s = 0; s < slice_names.size(); ++s) {
    const double c = static_cast<double>(count[s]);
    e.slices.push_back(slice_metrics{.name = slice_names[s],
                                     .count = count[s],
                                     .loss = count[s] > 0 ? loss_sum[s] / c : 0.0,
                                     .accuracy = count[s] > 0 ? right[s] / c : 0.0});
  }
  // Every prediction, for the gate's paired comparison.
  e.rows.loss = r.row_loss;
  e.rows.slice.assign(b.slices.begin(), b.slices.end());
  e.rows.correct.resize(r.row_loss.size());
  for (std::size_t i = 0; i < r.row_loss.size(); ++i) e.rows.correct[i] = r.predicted[i] == b.targets[i] ? 1 : 0;
  // A regression's trivial predictor on these targets, what the parity gate measures its learning against.
  if (cfg.loss != loss_kind::cross_entropy && b.samples > 0) {
    e.regression = trivial_regression_baseline(cfg.loss, b.target_values, b.slices, slice_names.size());
  }
  // A classifier's: the held-out labels' class frequencies.
  if (cfg.loss == loss_kind::cross_entropy && !b.targets.empty()) {
    e.classes = trivial_class_prior(b.targets, b.slices, slice_names.size());
  }
  return e;
}

// Times one phase of a step: the time since the last lap, less the casts made meanwhile, goes to the phase; the
// casts go to phases.casts.
class phase_clock {
 public:
  explicit phase_clock(step_phase_seconds& phases) noexcept
      : phases_(phases), last_(clock_type::now()), last_casts_(cast_seconds_this_thread()) {}
  void lap(double step_phase_seconds::*phase) noexcept {
    const auto now = clock_type::now();
    const double casts = cast_seconds_this_thread();
    const double cast_part = casts - last_casts_;
    phases_.*phase += std::chrono::duration<double>(now - last_).count() - cast_part;
    phases_.casts += cast_part;
    last_ = now;
    last_casts_ = casts;
  }
  /// Starts the next phase here without charging the time since the last lap to any phase.
  void skip() noexcept {
    last_ = clock_type::now();
    last_casts_ = cast_seconds_this_thread();
  }

 private:
  step_phase_seconds& phases_;
  clock_type::time_point last_;
  double last_casts_;
};

// The data-parallel test hook corrupt_rank/corrupt_step (gradient_exchange::corrupts_scaler_at): a dynamic
// scaler's scale moves one ulp (toward zero, or up when it sits at min_scale), as a flipped low bit of the
// state would; the other scalers hold no state to corrupt. Moved off the floor, the count of overflows there
// goes too (restore() refuses a count at another scale: no transition leaves one).
template <class Scaler>
void corrupt_scale(Scaler& s) {
  if constexpr (requires { s.checkpoint(); }) {
    scaler_checkpoint c = s.checkpoint();
    const bool at_floor = !(c.state.scale > c.config.min_scale);
    c.state.scale = std::nextafter(c.state.scale, at_floor ? c.config.max_scale : 0.0f);
    if (at_floor) c.state.overflows_at_min = 0;
    s.restore(c);
  }
}

// A data-parallel run's bits depend on its exchange's settings too (micro-batches, reduction, and for a
// wire-format reduction the rank count); a run without an exchange keeps the fingerprint it always had.
std::uint64_t checkpoint_fingerprint(const run_config& cfg, const gradient_exchange* exchange) {
  return exchange == nullptr ? run_fingerprint(cfg)
                             : fnv1a64(hex64(run_fingerprint(cfg)) + "|" + exchange->checkpoint_settings());
}

// What a checkpoint restores, loaded into copies so that a bad file leaves nothing half-restored.
struct restored_state {
  parameter_list params;
  optimizer_state opt;
  checkpoint_data meta;
};

// Reads cfg.checkpoint.resume_path for a run whose fresh parameters and optimizer state are `params` and
// `opt`; every check of load_checkpoint, then the configuration fingerprint.
restored_state load_resume_state(const run_config& cfg, const parameter_list& params, const optimizer_state& opt,
                                 std::uint64_t fingerprint) {
  restored_state r{.params = params, .opt = opt, .meta = {}};
  r.meta = load_checkpoint(cfg.checkpoint.resume_path, r.params, r.opt, cfg.steps);
  if (r.meta.config_fingerprint != fingerprint) {
    throw error("checkpoint '" + cfg.checkpoint.resume_path + "' configuration", "saved by a run with other settings",
                "a checkpoint of this run: the same model, data, policy, rounding, scaler, optimizer, faults, "
                "clip, loss weight, steps, batch, seeds and data-parallel settings (micro-batches, reduction; "
                "the rank count too for a wire-format reduction); only threads and the label may differ");
  }
  return r;
}

}  // namespace

void check_resume(const run_config& cfg, const gradient_exchange* exchange) {
  validate(cfg);
  if (cfg.checkpoint.resume_path.empty()) return;
  const model_stack stack = preset_stack(cfg);
  const data_source data = make_data(cfg, stack);
  const std::unique_ptr<model> net = make_model(cfg, stack, data);
  const optimizer opt(cfg.optimizer, cfg.policy, keeps_master_weights(cfg), net->parameters());
  (void)load_resume_state(cfg, net->parameters(), opt.state(), checkpoint_fingerprint(cfg, exchange));
}

run_result train(const run_config& cfg, const step_observer& on_step, gradient_exchange* exchange) {
  validate(cfg);
  const auto wall_start = clock_type::now();
  const precision_policy& pol = cfg.policy;
  const bool master = keeps_master_weights(cfg);

  const model_stack stack = preset_stack(cfg);
  const data_source data = make_data(cfg, stack);
  const std::unique_ptr<model> net = make_model(cfg, stack, data);
  parameter_list& params = net->parameters();
  std::vector<std::size_t> fault_targets;
  for (const fault_spec& f : cfg.faults) fault_targets.push_back(parameter_index(params, f.target));

  optimizer opt(cfg.optimizer, pol, master, params);
  any_scaler scaler = make_scaler(cfg.scaler);
  std::int64_t start = 0;
  std::vector<step_record> history;
  const std::uint64_t config_print = checkpoint_fingerprint(cfg, exchange);
  if (!cfg.checkpoint.resume_path.empty()) {
    restored_state loaded = load_resume_state(cfg, params, opt.state(), config_print);
    if (auto* dyn = std::get_if<loss_scaler>(&scaler)) dyn->load_json(loaded.meta.scaler_json);
    params = std::move(loaded.params);
    opt.state() = std::move(loaded.opt);
    start = loaded.meta.next_step;
    history = std::move(loaded.meta.history);
  }

  exec_context ctx{.rounding = cfg.rounding,
                   .seed = cfg.seed,
                   .step = 0,
                   .cast_site = 0,
                   .threads = cfg.threads,
                   .activation_stats = {}};
  run_result result;
  result.label = cfg.label;
  result.policy = pol;
  result.steps = std::move(history);  // a resumed run reports the steps before its checkpoint too

  single_rank solo;
  std::vector<std::span<float>> buffers;
  for (parameter& p : params) buffers.push_back(span_of(p.grad));

  // The stop request (stop_request.hpp) this process acts on. The ranks of a data-parallel run take the MAX of
  // theirs at the same points (before the first step, after each step): a signal reaches them at different moments,
  // or reaches one of them only, and a rank that stopped alone would leave the others waiting in a collective.
  const auto agreed_stop = [exchange]() -> int {
    const int sig = stop_requested();
    return exchange != nullptr ? exchange->ranks().max_i32(sig) : sig;
  };
  // A stop requested before this run began: nothing to save; resumed, it begins where it would have begun now (the
  // checkpoint it was resumed from, if any, holds that step).
  if (const int sig = agreed_stop(); sig != 0) {
    throw run_stopped(sig, cfg.label, start, cfg.steps, cfg.checkpoint.resume_path);
  }
  const checkpoint_options& k = cfg.checkpoint;
  const auto save = [&](std::int64_t next_step) {
    checkpoint_data meta{
        .config_fingerprint = config_print, .next_step = next_step, .scaler_json = {}, .history = result.steps};
    if (const auto* dyn = std::get_if<loss_scaler>(&scaler)) meta.scaler_json = dyn->save_json();
    save_checkpoint(k.save_path, meta, params, opt.state());
  };

  matrix logits, dlogits;
  std::int64_t steps_run = 0;
  for (std::int64_t step = start; step < cfg.steps; ++step) {
    if (cfg.checkpoint.stop_after_steps >= 0 && steps_run >= cfg.checkpoint.stop_after_steps) break;
    const auto t0 = clock_type::now();
    ctx.begin_step(step);
    const batch_request request{.step = step, .samples = cfg.batch_size};
    const bool input_nan = fault_at(cfg, fault_kind::input_nan, step);
    batch b;  // the step's whole batch, in one process (a data-parallel rank makes its own parts alone, below)
    if (exchange == nullptr) {
      b = data.train_batch(request);
      b.inject_nan = input_nan;
    } else {
      exchange->begin_step(step);
    }
    phase_clock phase(result.phases);

    step_record rec;
    rec.step = step;
    const double factor = loss_factor(cfg, step);
    std::visit(
        [&](auto& s) {
          if (exchange != nullptr && exchange->corrupts_scaler_at(step)) corrupt_scale(s);
          rec.scale = s.scale();
          // Forward and backward of one part of the batch (the whole batch without data parallelism).
          const auto run_part = [&](const batch& part, bool with_gradient_faults) {
            zero_grads(params);
            net->forward(ctx, pol, part, logits);
            phase.lap(&step_phase_seconds::forward);
            const loss_result lr = run_loss(ctx, cfg, logits, part, static_cast<double>(s.scale()) * factor, &dlogits);
            phase.lap(&step_phase_seconds::loss);
            net->backward(ctx, pol, dlogits);
            phase.lap(&step_phase_seconds::backward);
            for (std::size_t i = 0; with_gradient_faults && i < cfg.faults.size(); ++i) {
              const fault_spec& f = cfg.faults[i];
              if (is_gradient_fault(f.kind) && std::find(f.steps.begin(), f.steps.end(), step) != f.steps.end()) {
                params[fault_targets[i]].grad.data()[0] = f.kind == fault_kind::gradient_inf
                                                              ? std::numeric_limits<float>::infinity()
                                                              : std::numeric_limits<float>::quiet_NaN();
              }
            }
            part_result r;
            r.loss = lr.loss * factor;
            if (cfg.record_layer_counts) {
              r.counts.push_back(lr.gradient_stats);  // where the backward starts: the loss gradient's cast
              for (const parameter& p : params) r.counts.push_back(p.grad_stats);
            }
            return r;
          };
          part_result total;
          if (exchange == nullptr) {
            total = run_part(b, true);
            // The optimizer's casts take the keys they take in a data-parallel run, so one micro-batch on one rank
            // is this run bit for bit with stochastic write-back too (its keys followed the backward's before
            // 2026-12-06, and that run differed).
            ctx.cast_site = optimizer_cast_sites;
          } else {
            // Data parallel: this rank's parts, each with its own cast-site range so stochastic rounding
            // bits depend on the part, not on which rank computes it; then the reduction across ranks.
            for (const batch_part& part : exchange->local_parts(request.samples)) {
              ctx.begin_step(step);
              ctx.cast_site = static_cast<std::uint32_t>(part.index) << 16;
              batch mine = data.train_part(request, part.first_sample, part.samples);
              mine.inject_nan = input_nan;
              exchange->keep(part, buffers, run_part(mine, exchange->gradient_faults_in(part.index)));
            }
            total = exchange->reduce(buffers);
            ctx.begin_step(step);
            ctx.cast_site = optimizer_cast_sites;  // the optimizer's casts: the same keys on every rank
          }
          rec.loss = total.loss;
          for (std::size_t i = 0; i < total.counts.size(); ++i) {
            const cast_stats& d = total.counts[i];
            rec.grads.push_back(layer_counts{.name = i == 0 ? std::string(loss_gradient_name) : params[i - 1].name,
                                             .elements = d.elements,
                                             .overflow = d.overflow,
                                             .underflow = d.underflow,
                                             .subnormal = d.subnormal,
                                             .nan = d.nan});
          }
          phase.skip();  // fault injection, counters and the cross-rank reduction are not a phase
          // Unscale with the element-wise check, then one found_inf for every rank (integer MAX).
          communicator& group = exchange != nullptr ? exchange->ranks() : solo;
          rec.overflow_ranks = std::move(total.non_finite_ranks);
          rec.wire_overflows = total.wire_overflows;
          (void)unscale_and_agree(group, s, std::span<const std::span<float>>(buffers), !rec.overflow_ranks.empty());
          phase.lap(&step_phase_seconds::unscale_check);
          const std::span<const std::span<float>> all(buffers);
          if (cfg.clip_norm > 0.0) {
            const clip_result c = cfg.clip == clip_mode::torch ? clip_grad_norm_torch(all, cfg.clip_norm)
                                                               : s.clip_grad_norm(all, cfg.clip_norm);
            rec.grad_norm_before_clip = c.norm_before;
            rec.grad_norm_after_clip = c.norm_after;
          } else {
            rec.grad_norm_before_clip = global_grad_norm(all);
            rec.grad_norm_after_clip = rec.grad_norm_before_clip;
          }
          phase.lap(&step_phase_seconds::clip);
          const step_report report = s.step([&] { opt.step(ctx, params); });
          rec.found_inf = report.found_inf;
          rec.skipped = !report.applied;
          const step_report done = s.update();
          phase.lap(&step_phase_seconds::optimizer);
          check_scaler_consensus(group, scaler_consensus_hash(done), done.step);  // names diverging ranks
        },
        scaler);
    rec.step_seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
    ++result.phases.steps;
    result.phases.step_total += rec.step_seconds;
    result.steps.push_back(std::move(rec));
    ++steps_run;
    if (on_step) on_step(step + 1, cfg.steps);

    const bool periodic = k.save_every > 0 && ((step + 1) % k.save_every == 0 || step + 1 == cfg.steps);
    const bool saved = !k.save_path.empty() && (step == k.save_after_step || periodic);
    if (saved) save(step + 1);
    // A stop requested during this step: its checkpoint (unless just saved), then the run ends here. Checked after
    // the last step too: the run is then whole, but the caller asked to stop before what follows it.
    if (const int sig = agreed_stop(); sig != 0) {
      if (!saved && !k.save_path.empty()) save(step + 1);
      throw run_stopped(sig, cfg.label, step + 1, cfg.steps, k.save_path);
    }
  }

  ctx.begin_step(-1);
  const batch eval_batch = data.eval_set();
  result.final_eval = evaluate(ctx, cfg, *net, eval_batch, data.slice_names());
  // The forward rounds the same activations for every sample (sequence), so a training step's count follows from
  // the evaluation's, also when a resumed run trains no step here.
  if (eval_batch.samples > 0) {
    result.activation_elements = ctx.activation_stats.elements / static_cast<std::uint64_t>(eval_batch.samples) *
                                 static_cast<std::uint64_t>(data.step_samples(cfg.batch_size));
  }
  const batch probe = data.probe();
  matrix probe_logits;
  net->forward(ctx, pol, probe, probe_logits);
  result.probe_rows = probe_logits.rows();
  result.probe_cols = probe_logits.cols();
  result.probe_logits.assign(probe_logits.data(), probe_logits.data() + probe_logits.size());
  std::uint64_t h = hash_parameters(params);
  for (const matrix& m : opt.state().master) h = hash_bits(span_of(m), h);
  result.weights_hash = h;
  result.wall_seconds = std::chrono::duration<double>(clock_type::now() - wall_start).count();
  const double samples =
      static_cast<double>(steps_run * data.step_samples(cfg.batch_size) *
                          (stack.layers.front().kind == layer_kind::embedding ? stack.layers.front().context : 1));
  result.samples_per_second = result.wall_seconds > 0.0 ? samples / result.wall_seconds : 0.0;
  return result;
}

}  // namespace safeamp::sim
