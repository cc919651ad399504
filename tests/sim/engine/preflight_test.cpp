// The preflight (issue 12): parameter shapes computed without allocating agree with the models, fault
// targets are checked against them, and the estimate counts what it says it counts (hand-worked parameter
// state, linear terms, no overflow for terabyte scenarios). That the estimate bounds the real peak memory
// is checked on the tool's own runs (tests/sim/report, CHECK_FILES).
#include "safeamp/sim/preflight.hpp"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "safeamp/error.hpp"
#include "safeamp/sim/datasets.hpp"
#include "safeamp/sim/file_data.hpp"
#include "safeamp/sim/models.hpp"
#include "safeamp/sim/npy.hpp"
#include "sim/engine/sim_test_util.hpp"

using namespace safeamp;
using namespace safeamp::sim;

namespace {

std::vector<parameter_shape> actual_shapes(const model& m) {
  std::vector<parameter_shape> out;
  for (const parameter& p : m.parameters()) out.push_back({p.name, p.value.rows(), p.value.cols()});
  return out;
}

run_config small_mlp(std::int64_t hidden_layers) {
  auto c = sim_test::mlp_config(presets::fp32, 10);
  c.mlp = mlp_shape{.input_dim = 4,
                    .hidden_dim = 8,
                    .hidden_layers = hidden_layers,
                    .classes = 3,
                    .activation = activation_kind::gelu};
  return c;
}

const estimate_term& term(const preflight_estimate& e, const std::string& starts_with) {
  for (const estimate_term& t : e.terms) {
    if (t.what.rfind(starts_with, 0) == 0) return t;
  }
  FAIL("no term " << starts_with);
  return e.terms.front();
}

preflight_estimate estimate_one(const run_config& c) {
  preflight_inputs in;
  in.flops_per_second = 1e9;
  return estimate_runs({c}, false, in);
}

}  // namespace

TEST_CASE("parameter shapes computed from the configuration are the models' parameters") {
  for (const std::int64_t layers : {0, 1, 3}) {
    const run_config c = small_mlp(layers);
    const auto m = make_mlp(c.mlp, 1, c.policy.param);
    CHECK(parameter_shapes(c, 0) == actual_shapes(*m));
  }
  auto t = sim_test::transformer_config(presets::fp32, 1);
  t.transformer.layers = 3;
  t.transformer.ffn_multiplier = 2;
  const corpus_data data(t.transformer, t.data);
  const auto m = make_transformer(t.transformer, data.vocab_size(), 1, t.policy.param);
  CHECK(parameter_shapes(t, data.vocab_size()) == actual_shapes(*m));
}

TEST_CASE("a fault target that names no parameter is refused, naming the parameters") {
  run_config c = small_mlp(2);
  c.label = "fp16 faulty";
  c.faults = {{.kind = fault_kind::gradient_inf, .steps = {1}, .target = "fc1.weight", .factor = 1.0}};
  CHECK_NOTHROW(check_fault_targets(c, 0));
  c.faults[0].target = "";  // the first parameter
  CHECK_NOTHROW(check_fault_targets(c, 0));
  c.faults[0].target = "fc2.weight";  // two hidden layers: fc0, fc1, head
  CHECK_THROWS_WITH(check_fault_targets(c, 0), Catch::Contains("candidate 'fp16 faulty' fault target") &&
                                                   Catch::Contains("'fc2.weight'") &&
                                                   Catch::Contains("fc0.weight, fc0.bias, fc1.weight"));
  c.faults[0].target = std::string(100000, 'x');  // the message stays short
  try {
    check_fault_targets(c, 0);
    FAIL("accepted");
  } catch (const safeamp::error& e) {
    CHECK(std::string(e.what()).size() < 2000);
  }
}

TEST_CASE("the parameter-state term is parameters x 4 bytes x the tensors the optimizer keeps (hand-worked)") {
  // MLP 4 -> 8 -> 3: fc0 4x8 + 8, head 8x3 + 3 = 32 + 8 + 24 + 3 = 67 parameters.
  run_config c = small_mlp(1);
  c.optimizer.kind = optimizer_kind::adamw;
  c.optimizer.master_weights = master_weights_mode::off;
  preflight_estimate e = estimate_one(c);
  CHECK(e.parameters == 67);
  CHECK(term(e, "parameters").bytes == 67.0 * 4 * 4);  // value, gradient, two moments
  c.optimizer.kind = optimizer_kind::sgd_momentum;
  CHECK(term(estimate_one(c), "parameters").bytes == 67.0 * 4 * 3);  // value, gradient, velocity
  c.optimizer.kind = optimizer_kind::adamw;
  c.optimizer.master_weights = master_weights_mode::on;
  CHECK(term(estimate_one(c), "parameters").bytes == 67.0 * 4 * 5);  // and the fp32 master copy
}

TEST_CASE("data parallel: the exchange's gradient buffers per process (hand-worked)") {
  // 67 parameters (see above). Canonical fp32, K parts over N ranks, S = ceil(K / N): S parts' gradients sent,
  // N records of S parts gathered, one reduced sum.
  run_config c = small_mlp(1);
  for (const estimate_term& t : estimate_one(c).terms) CHECK(t.what.rfind("data-parallel", 0) != 0);  // none alone
  c.data_parallel = data_parallel_setup{.ranks = 1, .config = data_parallel_config{.micro_batches = 256}};
  CHECK(term(estimate_one(c), "data-parallel").bytes == (256.0 + 256.0 + 1.0) * 67 * 4);
  c.data_parallel = data_parallel_setup{.ranks = 3, .config = data_parallel_config{.micro_batches = 16}};
  CHECK(term(estimate_one(c), "data-parallel").bytes == (6.0 + 3 * 6.0 + 1.0) * 67 * 4);  // S = ceil(16 / 3) = 6
  // A wire format: S kept parts, the rank's sum, N gathered sums, N contributions and the reduced sum.
  c.data_parallel->config.reduction = parse_reduce_spec("fp16-wire", "reduction");
  CHECK(term(estimate_one(c), "data-parallel").bytes == (6.0 + 1.0 + 3.0 + 3.0 + 1.0) * 67 * 4);
}

TEST_CASE("activations grow with the batch and the held-out set, records with the steps, time with all three") {
  run_config c = small_mlp(2);
  c.data.eval_samples = 64;  // below the batch: the training batch is the larger activation peak
  run_config twice_batch = c;
  twice_batch.batch_size *= 2;
  run_config twice_eval = c;
  twice_eval.data.eval_samples *= 2;
  run_config twice_steps = c;
  twice_steps.steps *= 2;
  const preflight_estimate e = estimate_one(c);
  CHECK(term(estimate_one(twice_batch), "activations of a training").bytes ==
        Approx(2 * term(e, "activations of a training").bytes));
  CHECK(term(estimate_one(twice_eval), "activations of the held-out").bytes ==
        Approx(2 * term(e, "activations of the held-out").bytes));
  CHECK(term(estimate_one(twice_steps), "step records kept").bytes == Approx(2 * term(e, "step records kept").bytes));
  CHECK(estimate_one(twice_batch).seconds > e.seconds);
  CHECK(estimate_one(twice_steps).seconds > e.seconds);
  CHECK(estimate_one(twice_batch).peak_bytes > e.peak_bytes);
  // The estimate is a bound: the process's own memory is added as it is.
  preflight_inputs in;
  in.base_bytes = 1e8;
  CHECK(estimate_runs({c}, false, in).peak_bytes - e.peak_bytes == Approx(1e8));
}

TEST_CASE("a reused reference costs no time; the time is the operations over the measured rate") {
  const run_config c = small_mlp(2);
  preflight_inputs in;
  in.flops_per_second = 1e9;
  const preflight_estimate four = estimate_runs({c, c, c, c}, false, in);
  const preflight_estimate reused = estimate_runs({c, c, c, c}, true, in);
  CHECK(reused.flops == Approx(0.75 * four.flops));
  in.flops_per_second = 2e9;
  CHECK(estimate_runs({c, c, c, c}, false, in).seconds == Approx(four.seconds / 2));
}

TEST_CASE("terabyte and century scenarios give finite estimates that name the field to change") {
  run_config wide = small_mlp(64);
  wide.mlp.hidden_dim = 65536;
  const preflight_estimate e = estimate_one(wide);
  CHECK(std::isfinite(e.peak_bytes));
  CHECK(e.peak_bytes > 4e12);  // 64 x 65536^2 parameters x 16 bytes
  CHECK(e.terms.front().what.rfind("parameters", 0) == 0);
  CHECK_THAT(e.terms.front().fields, Catch::Contains("model.hidden_dim"));

  run_config long_run = small_mlp(1);
  long_run.batch_size = std::int64_t{1} << 20;
  long_run.steps = 1000000;
  const preflight_estimate l = estimate_one(long_run);
  CHECK(std::isfinite(l.seconds));
  CHECK(l.seconds > 1e6);
  CHECK_THAT(l.time_fields, Catch::Contains("training.steps") && Catch::Contains("training.batch_size"));

  run_config extreme = small_mlp(64);
  extreme.mlp.hidden_dim = std::int64_t{1} << 40;
  extreme.steps = std::int64_t{1} << 62;
  const preflight_estimate x = estimate_one(extreme);
  CHECK(std::isfinite(x.peak_bytes));
  CHECK(std::isfinite(x.seconds));
}

TEST_CASE("the measured training rate and the machine's memory are positive") {
  CHECK(measure_training_rate() > 1e6);  // at least a megaflop per second, on any machine
  CHECK(measure_training_rate(model_kind::transformer, sim_test::transformer_config(presets::fp32, 1).data) > 1e6);
  CHECK(available_memory_bytes() > 0);
  CHECK(current_rss_bytes() > 0);
}

// A described stack on data files: the preflight gets the files' shapes from check_data_files (the tool passes
// them in preflight_inputs). The head is as wide as the data make it (a class index of 2999 makes 3000 classes;
// counted 1 wide before 2026-12-06), a step trains on min(batch size, rows), the held-out pass covers every
// held-out row (data.eval_samples does not apply to files), and the loaded arrays are a term of their own.
TEST_CASE("data files: the head's width, the rows a step and the held-out pass cover, and the arrays") {
  run_config c;
  c.model = model_kind::stack;
  c.stack.input_dim = 8;
  c.stack.layers = {layer_spec{.kind = layer_kind::linear, .name = {}, .out = 16},
                    layer_spec{.kind = layer_kind::activation, .name = {}},
                    layer_spec{.kind = layer_kind::linear, .name = {}}};
  c.data.inputs_path = "x.npy";
  c.data.targets_path = "y.npy";
  c.batch_size = 32;
  c.steps = 10;
  preflight_inputs in;
  in.file_rows = 1000;
  in.file_eval_rows = 5000;
  in.file_head_width = 3000;
  in.file_bytes = 1e6;
  const preflight_estimate e = estimate_runs({c}, false, in);
  // 8 x 16 + 16, then 16 x 3000 + 3000: 51,144 parameters (161 with a head 1 wide).
  CHECK(e.parameters == 8 * 16 + 16 + 16 * 3000 + 3000);
  const std::vector<parameter_shape> shapes = parameter_shapes(c, 0, 3000);
  CHECK(shapes.back() == parameter_shape{"linear2.bias", 1, 3000});
  CHECK(term(e, "data files and their copies").bytes == 1e6);
  CHECK(term(e, "data files and their copies").fields == "data.inputs, data.targets");
  // Held-out activations follow the held-out file's rows, training activations the batch until the rows run out.
  preflight_inputs more = in;
  more.file_eval_rows = 10000;
  CHECK(term(estimate_runs({c}, false, more), "activations of the held-out").bytes ==
        Approx(2 * term(e, "activations of the held-out").bytes));
  CHECK(term(e, "activations of the held-out").fields.rfind("data.eval_inputs (or data.inputs)", 0) == 0);
  CHECK(term(e, "activations of a training").bytes ==
        Approx(32.0 / 5000.0 * term(e, "activations of the held-out").bytes));
  preflight_inputs few = in;
  few.file_rows = 10;  // a batch of 32 over 10 rows trains on the 10
  CHECK(term(estimate_runs({c}, false, few), "activations of a training").bytes ==
        Approx(10.0 / 32.0 * term(e, "activations of a training").bytes));
  // The checked files give those inputs: rows, held-out rows (the training file's without eval files), the width.
  const auto dir = std::filesystem::temp_directory_path() / ("safeamp-preflight-files-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::vector<float> x(50 * 8, 0.25f);
  std::vector<std::int32_t> y(50, 1);
  y[7] = 2999;
  std::ofstream(dir / "x.npy", std::ios::binary) << npy_bytes(std::vector<std::int64_t>{50, 8}, x);
  std::ofstream(dir / "y.npy", std::ios::binary) << npy_bytes(std::vector<std::int64_t>{50}, y);
  c.data.inputs_path = (dir / "x.npy").string();
  c.data.targets_path = (dir / "y.npy").string();
  const data_files_shape files = check_data_files(c);
  CHECK(files.train_rows == 50);
  CHECK(files.eval_rows == 50);
  CHECK(files.output_width == 3000);
  // Inputs 50 x 8 floats and 50 class indices, 4 bytes each, in both splits: 5 x 1800 + 2 x 1800.
  CHECK(files.bytes == Approx(7.0 * (50 * 8 + 50) * 4));
  std::filesystem::remove_all(dir);
}
