// The GPU trainer (see gpu_mlp_trainer.hpp). One step, in the library's order and with no host
// synchronisation: forward under the policy (cuBLASLt GEMMs in the policy's matmul format, fp32 output,
// bias + cast with the core rounding), fp32 loss, backward of scale * loss (the scale read on the device),
// fused unscale + found_inf, norm + clip, optimizer and parameter write-back cast predicated on the flag (a
// skipped step writes nothing), device-side scale update, telemetry copied asynchronously every N steps; the
// scaler is safeamp::cuda::device_loss_scaler (the core scaler over device memory). Step records stay on the
// device until the end of the run.
#include "gpu_mlp_trainer.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "gpu_support.hpp"
#include "layer_kernels.hpp"
#include "optimizer_phase.hpp"
#include "phase_timing.hpp"
#include "safeamp/cuda/amp_ops.hpp"
#include "safeamp/cuda/core_kernels.hpp"
#include "safeamp/cuda/device.hpp"
#include "safeamp/cuda/device_scaler.hpp"
#include "safeamp/cuda/gemm.hpp"
#include "safeamp/cuda/memory_probe.hpp"
#include "safeamp/cuda/nvtx.hpp"
#include "safeamp/cuda/status.hpp"
#include "safeamp/cuda/telemetry_reader.hpp"
#include "safeamp/sim/datasets.hpp"
#include "safeamp/sim/models.hpp"
#include "safeamp/sim/parameter.hpp"
#include "safeamp/sim/tensor.hpp"

#define SAFEAMP_GPU_TRAINER_CHECK(call)                                                                                \
  ::safeamp::cuda::check_status(::safeamp::cuda::status_source::cuda_runtime, static_cast<int>(call), #call, __FILE__, \
                                __LINE__)

namespace safeamp::gpu_trainer {
namespace {

namespace cu = safeamp::cuda;

template <class T>
class device_array {
 public:
  device_array() = default;
  explicit device_array(std::size_t n) : buf_(std::max<std::size_t>(n, 1) * sizeof(T)), n_(n) {}
  [[nodiscard]] T* data() const noexcept { return buf_.as<T>(); }
  [[nodiscard]] std::size_t size() const noexcept { return n_; }
  void upload(const T* host, std::size_t n, std::size_t offset = 0) {
    SAFEAMP_GPU_TRAINER_CHECK(cudaMemcpy(data() + offset, host, n * sizeof(T), cudaMemcpyHostToDevice));
  }
  [[nodiscard]] std::vector<T> download(std::size_t n) const {
    std::vector<T> host(n);
    SAFEAMP_GPU_TRAINER_CHECK(cudaMemcpy(host.data(), data(), n * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  cu::device_buffer buf_;
  std::size_t n_ = 0;
};

constexpr int counter_slots = static_cast<int>(cu::cast_counter::count);

double loss_factor(const sim::run_config& cfg, std::int64_t step) {
  double factor = cfg.loss_weight;
  for (const sim::fault_spec& f : cfg.faults) {
    if ((f.kind == sim::fault_kind::loss_spike || f.kind == sim::fault_kind::tiny_loss) &&
        std::find(f.steps.begin(), f.steps.end(), step) != f.steps.end()) {
      factor *= f.factor;
    }
  }
  return factor;
}

bool fault_at(const sim::run_config& cfg, sim::fault_kind kind, std::int64_t step) {
  for (const sim::fault_spec& f : cfg.faults) {
    if (f.kind == kind && std::find(f.steps.begin(), f.steps.end(), step) != f.steps.end()) return true;
  }
  return false;
}

std::size_t parameter_index(const sim::parameter_list& params, const std::string& name) {
  if (name.empty()) return 0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (params[i].name == name) return i;
  }
  std::string names;
  for (const sim::parameter& p : params) {
    if (!names.empty()) names += ", ";
    names += p.name;
  }
  throw error("fault target", "'" + name + "'", names);
}

bool is_half_format(format_spec f) noexcept { return f == fp16 || f == bf16; }

// A row-major product D(m x n) = op(A) op(B) with an fp32 D, in the policy's matmul format: fp16/bf16
// operands are first converted to 16-bit codes (round to nearest, the simulator's input conversion), fp32
// and TF32 read the float buffers (TF32 through CUBLAS_COMPUTE_32F_FAST_TF32).
class matmul_runner {
 public:
  matmul_runner(format_spec matmul_format, std::size_t max_a, std::size_t max_b, void* stream)
      : format_(matmul_format), types_(cu::gemm_types_for(matmul_format, matmul_format, fp32, fp32)), stream_(stream) {
    if (is_half_format(format_)) {
      a16_ = device_array<std::uint16_t>(max_a);
      b16_ = device_array<std::uint16_t>(max_b);
    }
  }

  // a: stored row-major (ta ? k x m : m x k); b: stored row-major (tb ? n x k : k x n); d: (m x n) row-major.
  void run(const float* a, bool ta, const float* b, bool tb, float* d, std::int64_t m, std::int64_t n, std::int64_t k) {
    const void* pa = a;
    const void* pb = b;
    if (is_half_format(format_)) {
      const auto na = static_cast<std::uint64_t>(m * k), nb = static_cast<std::uint64_t>(k * n);
      cu::check_status(cu::status_source::cuda_runtime,
                       cu::launch_encode16(format_, round_options{}, philox_key{}, a, a16_.data(), na, stream_),
                       "launch_encode16(A)", __FILE__, __LINE__);
      cu::check_status(cu::status_source::cuda_runtime,
                       cu::launch_encode16(format_, round_options{}, philox_key{}, b, b16_.data(), nb, stream_),
                       "launch_encode16(B)", __FILE__, __LINE__);
      pa = a16_.data();
      pb = b16_.data();
    }
    // Column-major view: D^T (n x m) = op(B)^T op(A)^T, so cuBLASLt's A is our B and its B is our A.
    cu::gemm_problem p;
    p.m = n;
    p.n = m;
    p.k = k;
    p.op_a = tb ? cu::transpose::transposed : cu::transpose::none;
    p.op_b = ta ? cu::transpose::transposed : cu::transpose::none;
    p.types = types_;
    cu::gemm_operands ops;
    ops.a = pb;
    ops.b = pa;
    ops.d = d;
    engine_.run(p, ops, stream_);
  }

 private:
  format_spec format_;
  cu::gemm_types types_;
  void* stream_;
  cu::gemm_engine engine_;
  device_array<std::uint16_t> a16_, b16_;
};

struct layer_dims {
  std::int64_t in = 0, out = 0;
  std::size_t weight = 0, bias = 0;  // parameter indices
};

struct stream_owner {
  cudaStream_t s = nullptr;
  stream_owner() { SAFEAMP_GPU_TRAINER_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~stream_owner() { (void)cudaStreamDestroy(s); }
  stream_owner(const stream_owner&) = delete;
  stream_owner& operator=(const stream_owner&) = delete;
};

// The optimizer phase on the device: every kernel predicated on the scaler's found_inf flag.
class device_optimizer_backend {
 public:
  device_optimizer_backend(const cu::sgd_options& sgd, const cu::adamw_options& adamw, format_spec param,
                           round_options write_back, sim::exec_context& ctx, const scaler_block* state, void* stream)
      : sgd_(sgd), adamw_(adamw), param_(param), write_back_(write_back), ctx_(ctx), state_(state), stream_(stream) {}
  void sgd(float* w, const float* g, float* v, std::uint64_t n, const std::int32_t* skip_if) {
    require_scaler_flag(skip_if);
    cu::sgd_momentum_step({w, n}, g, v, sgd_, state_, stream_);
  }
  void adamw(float* w, const float* g, float* m, float* v, std::uint64_t n, const std::int32_t* skip_if) {
    require_scaler_flag(skip_if);
    cu::adamw_step({w, n}, g, m, v, adamw_, state_, stream_);
  }
  void write_back(const float* from, float* to, std::uint64_t n, const std::int32_t* skip_if) {
    cu::check_status(cu::status_source::cuda_runtime,
                     cu::launch_round_unless(skip_if, param_, write_back_, ctx_.next_key(), from, to, n, stream_),
                     "launch_round_unless(write-back)", __FILE__, __LINE__);
  }

 private:
  // The optimizer kernels read the flag from the scaler block; any other flag would be ignored.
  void require_scaler_flag(const std::int32_t* skip_if) const {
    if (skip_if != &state_->found_inf) {
      throw error("optimizer predicate", "a flag other than the scaler's found_inf", "the scaler's found_inf flag");
    }
  }
  cu::sgd_options sgd_;
  cu::adamw_options adamw_;
  format_spec param_;
  round_options write_back_;
  sim::exec_context& ctx_;
  const scaler_block* state_;
  void* stream_;
};

struct event_list {
  std::vector<cudaEvent_t> events;
  explicit event_list(std::size_t n) : events(n, nullptr) {
    for (cudaEvent_t& e : events) SAFEAMP_GPU_TRAINER_CHECK(cudaEventCreate(&e));
  }
  ~event_list() {
    for (cudaEvent_t e : events) (void)cudaEventDestroy(e);
  }
  event_list(const event_list&) = delete;
  event_list& operator=(const event_list&) = delete;
};

}  // namespace

gpu_run train_on_gpu(const sim::run_config& cfg, const gpu_train_options& options) {
  sim::validate(cfg);
  check_gpu_supported(cfg);
  if (options.telemetry_every < 1) {
    throw error("telemetry every", std::to_string(options.telemetry_every), ">= 1 steps");
  }
  if (cu::device_count() == 0) throw error("CUDA device", "none present", "a GPU (the trainer runs on the device)");

  const precision_policy& pol = cfg.policy;
  const bool master = sim::keeps_master_weights(cfg);
  const auto wall_start = std::chrono::steady_clock::now();
  gpu_run run;
  run.device = cu::current_device().name;

  // ---- host side: the simulator's weights and data, bit for bit -----------------------------------------
  const std::unique_ptr<sim::model> net = sim::make_mlp(cfg.mlp, cfg.seed, pol.param);
  sim::parameter_list& params = net->parameters();
  const sim::cluster_data data(cfg.mlp, cfg.data);
  std::vector<layer_dims> layers;
  for (std::size_t i = 0; i + 1 < params.size(); i += 2) {
    layers.push_back(
        layer_dims{.in = params[i].value.rows(), .out = params[i].value.cols(), .weight = i, .bias = i + 1});
  }
  std::vector<std::size_t> fault_targets;
  for (const sim::fault_spec& f : cfg.faults) fault_targets.push_back(parameter_index(params, f.target));

  const std::int64_t batch_rows = cfg.batch_size;
  const std::int64_t in_dim = cfg.mlp.input_dim;
  const std::int64_t classes = cfg.mlp.classes;
  const sim::batch eval_set = data.eval_set();
  const sim::batch probe = data.probe();
  const std::int64_t max_rows = std::max({batch_rows, eval_set.features.rows(), probe.features.rows()});
  std::int64_t max_width = in_dim;
  std::size_t max_weight = 0;
  for (const layer_dims& l : layers) {
    max_width = std::max({max_width, l.in, l.out});
    max_weight = std::max(max_weight, static_cast<std::size_t>(l.in * l.out));
  }

  // Every training batch, generated on the host and uploaded once (no copies inside the loop).
  const auto steps = static_cast<std::size_t>(cfg.steps);
  const auto batch_floats = static_cast<std::size_t>(batch_rows * in_dim);
  device_array<float> features(steps * batch_floats);
  device_array<std::int32_t> targets(steps * static_cast<std::size_t>(batch_rows));
  for (std::int64_t step = 0; step < cfg.steps; ++step) {
    sim::batch b = data.train_batch({.step = step, .samples = batch_rows});
    if (fault_at(cfg, sim::fault_kind::input_nan, step) && b.features.size() > 0) {
      b.features(0, 0) = std::numeric_limits<float>::quiet_NaN();
    }
    features.upload(b.features.data(), batch_floats, static_cast<std::size_t>(step) * batch_floats);
    targets.upload(b.targets.data(), static_cast<std::size_t>(batch_rows), static_cast<std::size_t>(step * batch_rows));
  }

  // ---- device state -------------------------------------------------------------------------------------
  struct device_param {
    device_array<float> value, grad, first, second, master;
    std::uint64_t n = 0;
  };
  std::vector<device_param> dev(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto n = static_cast<std::size_t>(params[i].value.size());
    dev[i].n = n;
    dev[i].value = device_array<float>(n);
    dev[i].value.upload(params[i].value.data(), n);
    dev[i].grad = device_array<float>(n);
    dev[i].first = device_array<float>(n);
    SAFEAMP_GPU_TRAINER_CHECK(cudaMemset(dev[i].first.data(), 0, n * sizeof(float)));
    if (cfg.optimizer.kind == sim::optimizer_kind::adamw) {
      dev[i].second = device_array<float>(n);
      SAFEAMP_GPU_TRAINER_CHECK(cudaMemset(dev[i].second.data(), 0, n * sizeof(float)));
    }
    if (master) {
      dev[i].master = device_array<float>(n);
      dev[i].master.upload(params[i].value.data(), n);
    }
  }
  std::vector<cu::gradient_span> grads;
  for (device_param& d : dev) grads.push_back(cu::tensor_span{.data = d.grad.data(), .elements = d.n});

  const auto act_count = static_cast<std::size_t>(max_rows * max_width);
  std::vector<device_array<float>> xs, zs;  // xs[i]: input of linear i; zs[i]: its output
  for (std::size_t i = 0; i < layers.size(); ++i) {
    xs.emplace_back(act_count);
    zs.emplace_back(act_count);
  }
  device_array<float> dlogits(act_count), d_a(act_count), d_z(act_count);
  device_array<float> row_loss(static_cast<std::size_t>(max_rows));
  device_array<std::int32_t> predicted(static_cast<std::size_t>(max_rows));
  const std::size_t count_layers = 1 + params.size();  // loss.dlogits, then every parameter
  device_array<unsigned long long> counters(steps * count_layers * counter_slots);
  device_array<cu::device_step_record> records(steps);
  device_array<step_report> reports(steps);
  device_array<double> norm_scratch(cu::norm_scratch_doubles);
  SAFEAMP_GPU_TRAINER_CHECK(cudaMemset(counters.data(), 0, counters.size() * sizeof(unsigned long long)));
  SAFEAMP_GPU_TRAINER_CHECK(cudaMemset(records.data(), 0, records.size() * sizeof(cu::device_step_record)));
  SAFEAMP_GPU_TRAINER_CHECK(cudaDeviceSynchronize());  // setup done; the training loop below never waits

  stream_owner stream;
  void* const s = stream.s;
  cu::device_loss_scaler scaler(device_scaler_config(cfg.scaler), cu::device_memory(s));  // validated here, once
  scaler_block* const amp = scaler.block_in_memory();
  matmul_runner mm(pol.format_for(op_class::matmul), act_count, std::max(max_weight, act_count), s);
  cu::telemetry_reader telemetry(options.telemetry_every);
  event_list marks(steps * phase_count + 1);  // the start of every phase of every step, then the end of the run

  const format_spec fe = pol.format_for(op_class::elementwise);
  const format_spec fr = pol.format_for(op_class::reduction);
  const format_spec fl = pol.format_for(op_class::loss);
  const cu::activation_fn act =
      cfg.mlp.activation == sim::activation_kind::gelu ? cu::activation_fn::gelu : cu::activation_fn::relu;
  sim::exec_context ctx{
      .rounding = cfg.rounding, .seed = cfg.seed, .step = 0, .cast_site = 0, .threads = 1, .activation_stats = {}};
  const auto cast_to = [&](format_spec f) {
    return cu::cast_spec{.format = f, .rounding = cfg.rounding, .key = ctx.next_key()};
  };
  const auto cast_counted = [&](format_spec f, float* p, std::uint64_t n, unsigned long long* slot) {
    cu::check_status(cu::status_source::cuda_runtime,
                     cu::launch_round_counted(f, cfg.rounding, ctx.next_key(), p, p, n, slot, s),
                     "launch_round_counted", __FILE__, __LINE__);
  };
  const std::size_t last = layers.size() - 1;

  // Forward of `rows` rows whose input (already in policy.output) is xs[0]; logits land in zs[last].
  const auto forward = [&](std::int64_t rows) {
    for (std::size_t i = 0; i < layers.size(); ++i) {
      const layer_dims& l = layers[i];
      mm.run(xs[i].data(), false, dev[l.weight].value.data(), false, zs[i].data(), rows, l.out, l.in);
      cu::add_bias_and_cast(zs[i].data(), dev[l.bias].value.data(), rows, l.out, cast_to(i == last ? fl : pol.output),
                            s);
      if (i != last) {
        const cu::cast_spec op = cast_to(fe);  // keys taken in a fixed order (stochastic rounding)
        const cu::cast_spec store = cast_to(pol.output);
        cu::activation_forward(act, zs[i].data(), xs[i + 1].data(), static_cast<std::uint64_t>(rows * l.out), op, store,
                               s);
      }
    }
  };
  const cu::sgd_options sgd{.learning_rate = static_cast<float>(cfg.optimizer.learning_rate),
                            .momentum = static_cast<float>(cfg.optimizer.momentum)};
  const cu::adamw_options adamw{.learning_rate = static_cast<float>(cfg.optimizer.learning_rate),
                                .beta1 = cfg.optimizer.beta1,
                                .beta2 = cfg.optimizer.beta2,
                                .epsilon = static_cast<float>(cfg.optimizer.epsilon),
                                .weight_decay = static_cast<float>(cfg.optimizer.weight_decay)};
  const round_options write_back{
      .mode = cfg.optimizer.stochastic_write_back ? rounding::stochastic : rounding::nearest_even,
      .on_overflow = overflow::to_infinity,
      .flush_subnormals = false};

  device_optimizer_backend optimizer(sgd, adamw, pol.param, write_back, ctx, amp, s);
  std::vector<parameter_buffers> phase_params;
  for (device_param& d : dev) {
    phase_params.push_back(parameter_buffers{.value = d.value.data(),
                                             .grad = d.grad.data(),
                                             .first = d.first.data(),
                                             .second = d.second.data(),
                                             .master = master ? d.master.data() : nullptr,
                                             .elements = d.n});
  }
  const optimizer_phase_options phase_options{.adamw = cfg.optimizer.kind == sim::optimizer_kind::adamw,
                                              .master_weights = master,
                                              .param_is_fp32 = pol.param == fp32};

  // ---- the training loop: enqueue only --------------------------------------------------------------------
  const auto enqueue_start = std::chrono::steady_clock::now();
  for (std::int64_t step = 0; step < cfg.steps; ++step) {
    const auto st = static_cast<std::size_t>(step);
    // Each phase starts with an event on the stream (its time is checked against the roofline after the run)
    // and an NVTX range (Nsight Systems' timeline, docs/cuda.md "Profiling").
    std::optional<cu::nvtx_range> phase;
    const auto begin_phase = [&](step_phase p) {
      SAFEAMP_GPU_TRAINER_CHECK(
          cudaEventRecord(marks.events[st * phase_count + static_cast<std::size_t>(p)], stream.s));
      phase.reset();
      phase.emplace(phase_name(p).data());
    };
    begin_phase(step_phase::forward);
    ctx.begin_step(step);
    unsigned long long* step_counters = counters.data() + st * count_layers * counter_slots;
    cu::device_step_record* rec = records.data() + st;

    cu::check_status(cu::status_source::cuda_runtime,
                     cu::launch_round(pol.output, cfg.rounding, ctx.next_key(), features.data() + st * batch_floats,
                                      xs[0].data(), batch_floats, s),
                     "launch_round(input)", __FILE__, __LINE__);
    forward(batch_rows);
    cu::softmax_cross_entropy(zs[last].data(), targets.data() + st * static_cast<std::size_t>(batch_rows), batch_rows,
                              classes, fl, loss_factor(cfg, step), amp, row_loss.data(), nullptr, dlogits.data(), rec,
                              s);
    cast_counted(pol.gradient, dlogits.data(), static_cast<std::uint64_t>(batch_rows * classes), step_counters);

    begin_phase(step_phase::backward);
    // Backward: head first; d_a is the gradient of the current layer's input.
    const float* dy = dlogits.data();
    for (std::size_t i = layers.size(); i-- > 0;) {
      const layer_dims& l = layers[i];
      if (i != last) {
        const cu::cast_spec op = cast_to(fe);
        const cu::cast_spec grad = cast_to(pol.gradient);
        cu::activation_backward(act, zs[i].data(), d_a.data(), d_z.data(),
                                static_cast<std::uint64_t>(batch_rows * l.out), op, grad, s);
        dy = d_z.data();
      }
      // dW (in x out) = x^T dy
      mm.run(xs[i].data(), true, dy, false, dev[l.weight].grad.data(), l.in, l.out, batch_rows);
      cast_counted(pol.gradient, dev[l.weight].grad.data(), dev[l.weight].n,
                   step_counters + (1 + l.weight) * counter_slots);
      // db = 1^T dy in the reduction format, then the gradient cast
      cu::column_sums(dy, batch_rows, l.out, fr, dev[l.bias].grad.data(), s);
      cast_counted(pol.gradient, dev[l.bias].grad.data(), dev[l.bias].n, step_counters + (1 + l.bias) * counter_slots);
      if (i != 0) {  // dx (rows x in) = dy W^T, into d_a for the layer below
        mm.run(dy, false, dev[l.weight].value.data(), true, d_a.data(), batch_rows, l.in, l.out);
        cu::add_bias_and_cast(d_a.data(), nullptr, batch_rows, l.in, cast_to(pol.gradient), s);
      }
    }
    for (std::size_t f = 0; f < cfg.faults.size(); ++f) {
      const sim::fault_spec& fs = cfg.faults[f];
      if ((fs.kind == sim::fault_kind::gradient_inf || fs.kind == sim::fault_kind::gradient_nan) &&
          std::find(fs.steps.begin(), fs.steps.end(), step) != fs.steps.end()) {
        cu::write_value(dev[fault_targets[f]].grad.data(),
                        fs.kind == sim::fault_kind::gradient_inf ? std::numeric_limits<float>::infinity()
                                                                 : std::numeric_limits<float>::quiet_NaN(),
                        s);
      }
    }

    begin_phase(step_phase::unscale_check_clip);
    scaler.unscale(grads);
    if (cfg.clip_norm > 0.0) {
      scaler.clip_grad_norm(grads, cfg.clip_norm);
    } else {  // no clip: the norm is still recorded, as the simulator does
      cu::global_norm_and_clip(grads, 0.0, norm_scratch.data(), amp, s);
    }
    begin_phase(step_phase::optimizer);
    scaler.step([&] { optimizer_phase(optimizer, phase_params, phase_options, scaler.found_inf_flag()); });
    begin_phase(step_phase::scaler_update);
    scaler.update();
    cu::copy_last_report(amp, reports.data() + st, s);
    telemetry.on_step(step, amp, s);
    if (const auto snap = telemetry.poll()) {
      ++run.telemetry_snapshots;
      if (options.print_progress) {
        std::printf("gpu_trainer: snapshot of step %lld: scale %g, %lld of %lld steps skipped\n",
                    static_cast<long long>(snap->requested_at_step), static_cast<double>(snap->state.state.scale),
                    static_cast<long long>(snap->state.stats.skipped_steps),
                    static_cast<long long>(snap->state.stats.steps));
      }
    }
  }
  SAFEAMP_GPU_TRAINER_CHECK(cudaEventRecord(marks.events[steps * phase_count], stream.s));
  run.enqueue_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - enqueue_start).count();
  SAFEAMP_GPU_TRAINER_CHECK(cudaStreamSynchronize(stream.s));  // the end of the run: one wait
  if (telemetry.poll()) ++run.telemetry_snapshots;
  run.telemetry_skipped_in_flight = telemetry.copies_skipped_in_flight();
  // The scaler's first host read: raises max_overflows_at_min here if a step of the run reached it (the
  // device cannot throw; the simulator raises at that step), so such a run fails on the GPU too.
  (void)scaler.stats();

  // ---- step records -----------------------------------------------------------------------------------
  const std::vector<cu::device_step_record> recs = records.download(steps);
  const std::vector<step_report> reps = reports.download(steps);
  const std::vector<unsigned long long> counts = counters.download(counters.size());
  sim::run_result& result = run.result;
  result.label = cfg.label;
  result.policy = pol;
  std::vector<double> phase_seconds(steps * phase_count);
  std::vector<bool> applied_steps(steps);
  const auto elapsed = [&](std::size_t from, std::size_t to) {
    float ms = 0.0f;
    SAFEAMP_GPU_TRAINER_CHECK(cudaEventElapsedTime(&ms, marks.events[from], marks.events[to]));
    return static_cast<double>(ms) * 1e-3;
  };
  for (std::size_t st = 0; st < steps; ++st) {
    for (std::size_t p = 0; p < phase_count; ++p) {
      phase_seconds[st * phase_count + p] = elapsed(st * phase_count + p, st * phase_count + p + 1);
    }
    applied_steps[st] = reps[st].applied;
    const double step_seconds = elapsed(st * phase_count, (st + 1) * phase_count);
    run.gpu_seconds += step_seconds;
    sim::step_record r;
    r.step = static_cast<std::int64_t>(st);
    r.loss = recs[st].loss;
    r.scale = recs[st].scale;
    r.found_inf = reps[st].found_inf;
    r.skipped = !reps[st].applied;
    r.grad_norm_before_clip = reps[st].grad_norm_before_clip;
    r.grad_norm_after_clip = reps[st].grad_norm_after_clip;
    r.step_seconds = step_seconds;  // device time of the step (CUDA events)
    if (cfg.record_layer_counts) {
      for (std::size_t l = 0; l < count_layers; ++l) {
        const unsigned long long* c = counts.data() + (st * count_layers + l) * counter_slots;
        const bool is_loss = l == 0;
        r.grads.push_back(
            sim::layer_counts{.name = is_loss ? std::string(sim::loss_gradient_name) : params[l - 1].name,
                              .elements = is_loss ? static_cast<std::uint64_t>(batch_rows * classes) : dev[l - 1].n,
                              .overflow = c[static_cast<int>(cu::cast_counter::overflow)],
                              .underflow = c[static_cast<int>(cu::cast_counter::underflow)],
                              .subnormal = c[static_cast<int>(cu::cast_counter::subnormal)],
                              .nan = c[static_cast<int>(cu::cast_counter::nan)]});
      }
    }
    result.steps.push_back(std::move(r));
  }

  // ---- every timed phase against the device's roofline (phase_timing.hpp) ----------------------------------
  if (const device_spec* spec = cu::find_device_for_runtime_name(run.device)) {
    std::vector<linear_shape> shapes;
    for (const layer_dims& l : layers) shapes.push_back(linear_shape{.in = l.in, .out = l.out});
    std::uint64_t elements = 0;
    for (const device_param& d : dev) elements += d.n;
    const auto work = mlp_phase_work(shapes, batch_rows, pol.format_for(op_class::matmul), elements,
                                     cfg.optimizer.kind == sim::optimizer_kind::adamw);
    run.phase_checks = check_phase_times(*spec, work, phase_seconds, applied_steps);
    run.roofline_device = std::string(spec->name);
  } else {
    run.phase_check_note = "'" + run.device +
                           "' is not in the device table (safeamp plan --device all lists it), so its phase times "
                           "were not checked against a roofline";
  }

  // ---- held-out metrics and probe logits on the device --------------------------------------------------
  const auto run_rows = [&](const sim::batch& b) {
    const std::int64_t rows = b.features.rows();
    device_array<float> x(static_cast<std::size_t>(b.features.size()));
    x.upload(b.features.data(), x.size());
    device_array<std::int32_t> t(b.targets.size());
    t.upload(b.targets.data(), b.targets.size());
    // The uploads went through the legacy default stream (a pageable copy may still be in flight when cudaMemcpy
    // returns), which the non-blocking training stream `s` does not wait for: let them land before it reads them.
    SAFEAMP_GPU_TRAINER_CHECK(cudaDeviceSynchronize());
    ctx.begin_step(-1);
    cu::check_status(cu::status_source::cuda_runtime,
                     cu::launch_round(pol.output, cfg.rounding, ctx.next_key(), x.data(), xs[0].data(), x.size(), s),
                     "launch_round(eval input)", __FILE__, __LINE__);
    forward(rows);
    cu::softmax_cross_entropy(zs[last].data(), t.data(), rows, classes, fl, 1.0, nullptr, row_loss.data(),
                              predicted.data(), nullptr, nullptr, s);
    SAFEAMP_GPU_TRAINER_CHECK(cudaStreamSynchronize(stream.s));
  };
  run_rows(eval_set);
  {
    const auto n = static_cast<std::size_t>(eval_set.features.rows());
    const std::vector<float> losses = row_loss.download(n);
    const std::vector<std::int32_t> pred = predicted.download(n);
    const std::vector<std::string> names = data.slice_names();
    std::vector<double> loss_sum(names.size(), 0.0), right(names.size(), 0.0);
    std::vector<std::int64_t> count(names.size(), 0);
    double total = 0.0, total_right = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      const auto sl = static_cast<std::size_t>(eval_set.slices[i]);
      const double ok = pred[i] == eval_set.targets[i] ? 1.0 : 0.0;
      loss_sum[sl] += static_cast<double>(losses[i]);
      right[sl] += ok;
      ++count[sl];
      total += static_cast<double>(losses[i]);
      total_right += ok;
    }
    result.final_eval.loss = total / static_cast<double>(n);
    result.final_eval.accuracy = total_right / static_cast<double>(n);
    for (std::size_t k = 0; k < names.size(); ++k) {
      const auto c = static_cast<double>(count[k]);
      result.final_eval.slices.push_back(sim::slice_metrics{.name = names[k],
                                                            .count = count[k],
                                                            .loss = count[k] > 0 ? loss_sum[k] / c : 0.0,
                                                            .accuracy = count[k] > 0 ? right[k] / c : 0.0});
    }
  }
  run_rows(probe);
  result.probe_rows = probe.features.rows();
  result.probe_cols = classes;
  result.probe_logits = zs[last].download(static_cast<std::size_t>(result.probe_rows * classes));

  // ---- final weights, hashed as the simulator hashes them ---------------------------------------------------
  std::vector<std::vector<float>> masters;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::vector<float> v = dev[i].value.download(dev[i].n);
    std::copy(v.begin(), v.end(), params[i].value.data());
    if (master) masters.push_back(dev[i].master.download(dev[i].n));
  }
  std::uint64_t h = sim::hash_parameters(params);
  for (const std::vector<float>& m : masters) h = sim::hash_bits(m, h);
  result.weights_hash = h;
  result.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  result.samples_per_second =
      run.gpu_seconds > 0.0 ? static_cast<double>(cfg.steps * cfg.batch_size) / run.gpu_seconds : 0.0;
  return run;
}

}  // namespace safeamp::gpu_trainer
