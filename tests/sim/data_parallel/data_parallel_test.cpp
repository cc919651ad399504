// Data parallelism in the simulator on N ranks of an in-process thread group (the same trainer code mpirun
// runs, see mpirun_hashes.sh for the real processes): the exchange is transparent on one rank and one part;
// the canonical fp32 reduction gives the same bits for N = 1, 2, 4; an overflow in one rank's micro-batch skips
// the step on every rank; a rank whose loss scale is corrupted is named; bad configurations are refused by name.
#include "safeamp/sim/data_parallel.hpp"

#include <catch2/catch.hpp>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "../../support/thread_communicator.hpp"
#include "safeamp/error.hpp"
#include "safeamp/policy/policy_presets.hpp"
#include "safeamp/scaling/scaler_presets.hpp"
#include "safeamp/sim/datasets.hpp"
#include "safeamp/sim/gradient_exchange.hpp"
#include "safeamp/sim/scenario.hpp"
#include "safeamp/sim/trainer.hpp"

using namespace safeamp;
using namespace safeamp::sim;
using safeamp::testing::thread_world;

namespace {

run_config tiny_run() {
  run_config c;
  c.model = model_kind::mlp;
  c.mlp = mlp_shape{.input_dim = 8, .hidden_dim = 16, .hidden_layers = 1, .classes = 4};
  c.data.train_samples = 256;
  c.data.eval_samples = 64;
  c.data.probe_rows = 4;
  c.policy = presets::fp16_mixed;
  c.scaler.kind = scaler_kind::dynamic;
  c.scaler.dynamic = scaler_config{.init_scale = 1024.0f, .growth_interval = 4};
  c.steps = 8;
  c.batch_size = 16;
  c.clip_norm = 1.0;
  return c;
}

// Trains `cfg` data parallel on `ranks` thread ranks; returns every rank's result. As the tool does, only
// rank 0 saves checkpoints.
std::vector<run_result> train_on(int ranks, const run_config& cfg, const data_parallel_config& dp) {
  thread_world w(ranks);
  std::vector<run_result> out(static_cast<std::size_t>(ranks));
  w.run([&](thread_world::rank_handle& h) {
    communicator_adapter<thread_world::rank_handle> c(h);
    data_parallel exchange(c, dp);
    run_config mine = cfg;
    if (h.rank() != 0) mine.checkpoint.save_path.clear();
    out[static_cast<std::size_t>(h.rank())] = train(mine, {}, &exchange);
  });
  return out;
}

// Trains `cfg` on `ranks` ranks until the checkpoint rank 0 saves to `file` after step 4 (stopping after step 5);
// returns cfg set to resume from it.
run_config checkpoint_after_step_4(int ranks, const run_config& cfg, const data_parallel_config& dp,
                                   const std::string& file) {
  run_config first = cfg;
  first.checkpoint.save_path = file;
  first.checkpoint.save_after_step = 4;
  first.checkpoint.stop_after_steps = 5;
  (void)train_on(ranks, first, dp);
  run_config rest = cfg;
  rest.checkpoint.resume_path = file;
  return rest;
}

}  // namespace

TEST_CASE("a rank's own rows of the Gaussian clusters are the whole batch's rows, bit for bit", "[data_parallel]") {
  // A data-parallel rank makes only its micro-batches' rows (cluster_data::train_rows); they must be the rows of the
  // step's whole batch that one process makes, or every rank count would train on other data alike, unseen by the
  // tests that compare rank counts with each other.
  data_config d;
  d.train_samples = 1000;
  const cluster_data data(mlp_shape{.input_dim = 7, .hidden_dim = 8, .hidden_layers = 1, .classes = 3}, d);
  for (const std::int64_t step : {0, 3, 17}) {
    const batch_request request{.step = step, .samples = 24};
    const batch whole = data.train_batch(request);
    for (const auto& [first, count] : {std::pair{0, 24}, std::pair{0, 6}, std::pair{6, 6}, std::pair{18, 6},
                                       std::pair{5, 1}, std::pair{23, 1}, std::pair{8, 16}}) {
      INFO("step " << step << ", rows " << first << " + " << count);
      const batch mine = data.train_rows(request, first, count);
      const batch cut = slice_batch(whole, first, count);
      CHECK(mine.samples == count);
      CHECK(mine.features == cut.features);
      CHECK(mine.targets == cut.targets);
      CHECK(mine.slices == cut.slices);
    }
  }
  CHECK_THROWS_WITH(data.train_rows({.step = 0, .samples = 24}, 20, 5),
                    Catch::Contains("[20, 25)") && Catch::Contains("inside the batch's 24 samples"));
  CHECK_THROWS(data.train_rows({.step = 0, .samples = 24}, -1, 2));
}

TEST_CASE("one rank, one micro-batch: the exchange changes no bit of a run", "[data_parallel]") {
  run_config cfg = tiny_run();
  cfg.faults = {fault_spec{.kind = fault_kind::gradient_inf, .steps = {2}, .target = {}, .factor = 1.0}};
  const run_result plain = train(cfg);
  const std::vector<run_result> dp = train_on(1, cfg, data_parallel_config{.micro_batches = 1});
  CHECK(dp[0].weights_hash == plain.weights_hash);
  REQUIRE(dp[0].steps.size() == plain.steps.size());
  for (std::size_t i = 0; i < plain.steps.size(); ++i) {
    CHECK(dp[0].steps[i].loss == plain.steps[i].loss);
    CHECK(dp[0].steps[i].scale == plain.steps[i].scale);
    CHECK(dp[0].steps[i].skipped == plain.steps[i].skipped);
  }
  CHECK(plain.steps[2].skipped);
}

TEST_CASE("one rank, one micro-batch: the same bits with stochastic write-back into fp16 parameters",
          "[data_parallel]") {
  // The write-back is the optimizer's one stochastic cast: its keys must not depend on whether an exchange ran.
  run_config cfg = tiny_run();
  cfg.policy = safeamp::parse_policy("p=fp16");
  cfg.optimizer.master_weights = master_weights_mode::off;
  cfg.optimizer.stochastic_write_back = true;
  const run_result plain = train(cfg);
  const std::vector<run_result> dp = train_on(1, cfg, data_parallel_config{.micro_batches = 1});
  CHECK(dp[0].weights_hash == plain.weights_hash);
  REQUIRE(dp[0].steps.size() == plain.steps.size());
  for (std::size_t i = 0; i < plain.steps.size(); ++i) CHECK(dp[0].steps[i].loss == plain.steps[i].loss);
  // Not a test that cannot fail: the write-back's bits reach the weights (nearest rounding trains others).
  cfg.optimizer.stochastic_write_back = false;
  CHECK(train(cfg).weights_hash != plain.weights_hash);
}

TEST_CASE("canonical fp32 reduction: the same bits for N = 1, 2 and 4 ranks", "[data_parallel]") {
  const run_config cfg = tiny_run();
  const data_parallel_config dp{.micro_batches = 4};
  const run_result one = train_on(1, cfg, dp).front();
  for (const int n : {2, 4}) {
    for (const run_result& r : train_on(n, cfg, dp)) {
      CHECK(r.weights_hash == one.weights_hash);
      REQUIRE(r.steps.size() == one.steps.size());
      for (std::size_t i = 0; i < r.steps.size(); ++i) {
        CHECK(r.steps[i].loss == one.steps[i].loss);
        CHECK(r.steps[i].grad_norm_before_clip == one.steps[i].grad_norm_before_clip);
      }
      CHECK(r.probe_logits == one.probe_logits);
    }
  }
  // Four micro-batches are not the plain run of the whole batch (each part's mean, then the mean of the parts).
  CHECK(one.weights_hash != train(cfg).weights_hash);
}

TEST_CASE("an overflow in one rank's micro-batch skips the step on every rank", "[data_parallel]") {
  run_config cfg = tiny_run();
  cfg.faults = {fault_spec{.kind = fault_kind::gradient_nan, .steps = {3}, .target = {}, .factor = 1.0}};
  // Micro-batch 3 belongs to rank 3 alone: the other ranks' own gradients are finite.
  const std::vector<run_result> four =
      train_on(4, cfg, data_parallel_config{.micro_batches = 4, .fault_micro_batch = 3});
  for (const run_result& r : four) {
    for (const step_record& s : r.steps) CHECK(s.skipped == (s.step == 3));
    CHECK(r.steps[4].scale == r.steps[3].scale * 0.5f);  // one backoff, on every rank
    CHECK(r.weights_hash == four[0].weights_hash);
  }
}

TEST_CASE("a rank whose loss scale is corrupted is named by the state check at that step", "[data_parallel]") {
  const run_config cfg = tiny_run();
  // corrupt_rank's scale moves one ulp at the start of step 3: its backward, unscale and update differ from
  // the others', so the check after step 3 fails on every rank, naming it against the majority.
  const auto message = [&](int ranks, int corrupt) {
    try {
      (void)train_on(ranks, cfg, data_parallel_config{.micro_batches = 4, .corrupt_rank = corrupt, .corrupt_step = 3});
    } catch (const error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(message(4, 2), Catch::Contains("after step 3: rank(s) 2 differ from the other 3 of 4 ranks"));
  CHECK_THAT(message(4, 0), Catch::Contains("after step 3: rank(s) 0 differ from the other 3 of 4 ranks"));
  CHECK_THAT(message(2, 1), Catch::Contains("after step 3: rank(s) 1 differ from the other 1 of 2 ranks"));
  // One rank has no other to disagree with; a rank the job does not have corrupts nothing.
  CHECK(message(1, 0) == "no error");
  CHECK(message(2, 5) == "no error");
  // A run without a dynamic scaler has no state to corrupt.
  run_config none = cfg;
  none.policy = presets::bf16_mixed;
  none.scaler.kind = scaler_kind::none;
  CHECK_NOTHROW(train_on(2, none, data_parallel_config{.micro_batches = 4, .corrupt_rank = 1, .corrupt_step = 3}));
}

namespace {
// Each step's record of which ranks' own gradients held inf/NaN, as (step, ranks) pairs.
std::vector<std::pair<std::int64_t, std::vector<std::int32_t>>> overflow_log(const run_result& r) {
  std::vector<std::pair<std::int64_t, std::vector<std::int32_t>>> log;
  for (const step_record& s : r.steps) {
    if (!s.overflow_ranks.empty()) log.emplace_back(s.step, s.overflow_ranks);
  }
  return log;
}
}  // namespace

TEST_CASE("the step records name which rank's own gradients overflowed", "[data_parallel]") {
  run_config cfg = tiny_run();
  cfg.faults = {fault_spec{.kind = fault_kind::gradient_inf, .steps = {1, 6}, .target = {}, .factor = 1.0}};
  for (const int n : {2, 4}) {
    // Micro-batch 2 of 4 belongs to rank 2 * n / 4: rank 1 of 2, rank 2 of 4.
    const std::vector<std::pair<std::int64_t, std::vector<std::int32_t>>> expected = {{1, {2 * n / 4}},
                                                                                      {6, {2 * n / 4}}};
    for (const run_result& r : train_on(n, cfg, data_parallel_config{.micro_batches = 4, .fault_micro_batch = 2})) {
      CHECK(overflow_log(r) == expected);
      for (const step_record& s : r.steps) CHECK(s.wire_overflows == 0);  // the canonical fp32 sum
    }
  }
}

TEST_CASE("an inf on one rank skips the step on every rank whatever the wire format", "[data_parallel]") {
  // fp8 collectives saturate: the inf a rank sends arrives as the format's largest finite value, and the reduced
  // gradients look finite. The rank's own check before the wire must still skip the step everywhere.
  run_config cfg = tiny_run();
  cfg.faults = {fault_spec{.kind = fault_kind::gradient_inf, .steps = {1, 6}, .target = {}, .factor = 1.0}};
  for (const char* spec : {"e4m3-wire", "e5m2-tree", "e4m3-ring/4", "fp16-wire", "bf16-ring"}) {
    INFO(spec);
    data_parallel_config dp{.micro_batches = 4, .fault_micro_batch = 3};
    dp.reduction = parse_reduce_spec(spec, "reduction");
    for (const run_result& r : train_on(2, cfg, dp)) {
      const std::vector<std::pair<std::int64_t, std::vector<std::int32_t>>> expected = {{1, {1}}, {6, {1}}};
      CHECK(overflow_log(r) == expected);
      for (const std::int64_t step : {1, 6}) {
        CHECK(r.steps[static_cast<std::size_t>(step)].found_inf);
        CHECK(r.steps[static_cast<std::size_t>(step)].skipped);
      }
      CHECK(r.steps[2].scale == r.steps[1].scale * 0.5f);  // the scaler backed off after step 1
    }
  }
}

TEST_CASE("a resumed run keeps the overflowing ranks and wire overflows of the steps before its checkpoint",
          "[data_parallel]") {
  run_config cfg = tiny_run();
  cfg.faults = {fault_spec{.kind = fault_kind::gradient_inf, .steps = {1, 6}, .target = {}, .factor = 1.0}};
  cfg.scaler.dynamic.init_scale = 131072.0f;  // 2^17: scaled gradients beyond fp16's range at first
  data_parallel_config dp{.micro_batches = 4, .fault_micro_batch = 3};
  dp.reduction = parse_reduce_spec("fp16-wire", "reduction");
  const std::string file = "data_parallel_test_history.ckpt";
  const run_config rest = checkpoint_after_step_4(2, cfg, dp, file);
  const run_result whole = train_on(2, cfg, dp).front();
  const run_result resumed = train_on(2, rest, dp).front();
  REQUIRE(resumed.steps.size() == whole.steps.size());
  // Scale 2^17 overflows fp16 in both ranks' own backward at step 0 (and 2^16 at step 1, beside the injected inf);
  // at step 4 (2^15) the ranks' gradients are finite but one sum is beyond fp16 on the wire. All before the
  // checkpoint; step 6's injected inf after it.
  CHECK(resumed.steps[0].overflow_ranks == std::vector<std::int32_t>{0, 1});
  CHECK(resumed.steps[1].overflow_ranks == std::vector<std::int32_t>{0, 1});
  CHECK(resumed.steps[4].overflow_ranks.empty());
  CHECK(resumed.steps[4].wire_overflows > 0);
  CHECK(resumed.steps[4].skipped);
  CHECK(resumed.steps[6].overflow_ranks == std::vector<std::int32_t>{1});
  for (std::size_t i = 0; i < whole.steps.size(); ++i) {
    INFO("step " << i);
    CHECK(resumed.steps[i] == whole.steps[i]);  // every deterministic field, the overflow records included
  }
  std::remove(file.c_str());
}

TEST_CASE("a checkpoint saved by rank 0 of 2 ranks resumes on 4 ranks bit-identically", "[data_parallel]") {
  const run_config cfg = tiny_run();
  const data_parallel_config dp{.micro_batches = 4};
  const std::uint64_t uninterrupted = train_on(4, cfg, dp).front().weights_hash;
  const std::string file = "data_parallel_test_resume.ckpt";
  const run_config rest = checkpoint_after_step_4(2, cfg, dp, file);
  for (const run_result& r : train_on(4, rest, dp)) CHECK(r.weights_hash == uninterrupted);
  std::remove(file.c_str());
}

TEST_CASE("a checkpoint is refused under other data-parallel settings that change the bits", "[data_parallel]") {
  // The file is saved after step 4 of a run under `saved`; resuming it under `resumed` on `ranks` ranks must be
  // refused (every rank throws at load, before any collective) rather than continue into a run that matches
  // neither setting.
  const run_config cfg = tiny_run();
  const std::string file = "data_parallel_test_refuse.ckpt";
  const auto save = [&](int ranks, const data_parallel_config& dp) {
    (void)checkpoint_after_step_4(ranks, cfg, dp, file);
  };
  run_config rest = cfg;
  rest.checkpoint.resume_path = file;
  const data_parallel_config four{.micro_batches = 4};
  const data_parallel_config ring{.micro_batches = 4, .reduction = parse_reduce_spec("bf16-ring", "reduction")};

  save(2, four);  // K = 4 -> K = 2: another sum over other parts
  CHECK_THROWS_WITH(train_on(2, rest, data_parallel_config{.micro_batches = 2}),
                    Catch::Contains("saved by a run with other settings") && Catch::Contains("data-parallel"));
  CHECK_THROWS_WITH(train_on(2, rest, ring), Catch::Contains("saved by a run with other settings"));
  CHECK_THROWS_WITH(train_on(2, rest, data_parallel_config{.micro_batches = 4, .fault_micro_batch = 1}),
                    Catch::Contains("saved by a run with other settings"));
  CHECK_THROWS_WITH(train(rest), Catch::Contains("saved by a run with other settings"));  // no exchange at all

  save(2, ring);  // a wire-format ring sums depend on the rank count: 2 -> 4 refused, 2 -> 2 resumes
  CHECK_THROWS_WITH(train_on(4, rest, ring), Catch::Contains("saved by a run with other settings"));
  CHECK(train_on(2, rest, ring).front().weights_hash == train_on(2, cfg, ring).front().weights_hash);

  {  // a plain run's checkpoint (no exchange) is not a data-parallel run's
    run_config first = cfg;
    first.checkpoint.save_path = file;
    first.checkpoint.save_after_step = 4;
    first.checkpoint.stop_after_steps = 5;
    (void)train(first);
  }
  CHECK_THROWS_WITH(train_on(1, rest, four), Catch::Contains("saved by a run with other settings"));
  std::remove(file.c_str());
}

TEST_CASE("bf16 ring reduction changes the bits with N, the canonical reduction does not", "[data_parallel]") {
  run_config cfg = tiny_run();
  cfg.policy = presets::bf16_mixed;
  cfg.scaler.kind = scaler_kind::none;
  const data_parallel_config ring{.micro_batches = 4, .reduction = parse_reduce_spec("bf16-ring", "reduction")};
  const std::uint64_t two = train_on(2, cfg, ring).front().weights_hash;
  const std::uint64_t four = train_on(4, cfg, ring).front().weights_hash;
  const std::uint64_t canonical = train_on(4, cfg, data_parallel_config{.micro_batches = 4}).front().weights_hash;
  CHECK(two != four);
  CHECK(four != canonical);
}

TEST_CASE("bad data-parallel settings are refused by name", "[data_parallel]") {
  CHECK_THROWS_WITH(
      validate(data_parallel_config{.micro_batches = 3}, 1, 16),
      Catch::Contains("data_parallel.micro_batches is 3") && Catch::Contains("divisor of the batch size 16"));
  CHECK_THROWS_WITH(validate(data_parallel_config{.micro_batches = 2}, 4, 16),
                    Catch::Contains("mpirun -np is 4") && Catch::Contains("at most data_parallel.micro_batches = 2"));
  CHECK_THROWS_WITH(validate(data_parallel_config{.micro_batches = 4, .fault_micro_batch = 4}, 2, 16),
                    Catch::Contains("fault_micro_batch is 4"));
  CHECK_THROWS_WITH(parse_reduce_spec("bf16-sum", "data_parallel.reduction"),
                    Catch::Contains("data_parallel.reduction is 'bf16-sum'") && Catch::Contains("<wire>-ring"));
  CHECK_THROWS_WITH(parse_reduce_spec("tf32-ring", "r"), Catch::Contains("bf16, fp16, e4m3, e5m2"));
}

TEST_CASE("a scenario's data_parallel block: read, and refused by name when wrong", "[data_parallel]") {
  const auto scenario_with = [](const std::string& block) {
    return R"({"model": {"kind": "mlp"}, "training": {"batch_size": 32}, "data_parallel": )" + block +
           R"(, "candidates": [{"name": "b", "policy": "bf16-mixed"}]})";
  };
  const scenario s = parse_scenario(scenario_with(R"({"micro_batches": 8, "reduction": "e4m3-tree",
                                                      "fault_micro_batch": 7, "corrupt_rank": 3, "corrupt_step": 9})"),
                                    "test");
  REQUIRE(s.data_parallel.has_value());
  CHECK(s.data_parallel->micro_batches == 8);
  CHECK(s.data_parallel->reduction == reduce_spec{.order = reduce_order::tree, .wire = fp8_e4m3});
  CHECK(s.data_parallel->fault_micro_batch == 7);
  CHECK(s.data_parallel->corrupt_rank == 3);
  CHECK(s.data_parallel->corrupt_step == 9);
  CHECK(parse_scenario(scenario_with("{}"), "test").data_parallel->reduction.order == reduce_order::canonical);
  CHECK_THROWS_WITH(parse_scenario(scenario_with(R"({"micro_batch": 4})"), "test"),
                    Catch::Contains("data_parallel.micro_batch is an unknown key"));
  CHECK_THROWS_WITH(parse_scenario(scenario_with(R"({"micro_batches": 0})"), "test"),
                    Catch::Contains("data_parallel.micro_batches is 0"));
  CHECK_THROWS_WITH(parse_scenario(scenario_with(R"({"micro_batches": 5})"), "test"),
                    Catch::Contains("divisor of the batch size 32"));
  CHECK_THROWS_WITH(parse_scenario(scenario_with(R"({"reduction": 16})"), "test"),
                    Catch::Contains("data_parallel.reduction is 16"));
  CHECK_THROWS_WITH(parse_scenario(scenario_with(R"({"micro_batches": 4, "fault_micro_batch": 4})"), "test"),
                    Catch::Contains("data_parallel.fault_micro_batch is 4"));
  CHECK_THROWS_WITH(parse_scenario(scenario_with(R"({"corrupt_step": -2})"), "test"),
                    Catch::Contains("data_parallel.corrupt_step is -2"));
}
