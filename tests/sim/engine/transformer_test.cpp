// The shipped decoder-only transformer on the GPL-3 text (Debian base-files): it learns, fp16-mixed with
// dynamic scaling and bf16-mixed track fp32, per-position metrics and probe logits are reported, and
// 1 and 2 threads give bit-identical runs.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "safeamp/format.hpp"
#include "safeamp/policy.hpp"
#include "safeamp/scaling.hpp"
#include "safeamp/sim/datasets.hpp"
#include "safeamp/sim/trainer.hpp"
#include "sim/engine/sim_test_util.hpp"

using namespace safeamp;
using namespace safeamp::sim;
using sim_test::transformer_config;

namespace {

double tracking_tolerance(format_spec f) { return 16.0 * unit_roundoff(f); }

}  // namespace

TEST_CASE("the transformer learns the corpus and fp16-mixed (dynamic scaling) and bf16-mixed track fp32") {
  if (!std::filesystem::exists(data_config{}.corpus_path)) {
    WARN("no corpus at " << data_config{}.corpus_path << " (Debian package base-files); skipping");
    std::exit(77);
  }
  const run_result ref = train(transformer_config(presets::fp32, 120));
  auto cfg = transformer_config(presets::fp16_mixed, 120);
  cfg.scaler.kind = scaler_kind::dynamic;
  cfg.scaler.dynamic = scaler_presets::pytorch;
  const run_result half = train(cfg);
  const run_result bf16r = train(transformer_config(presets::bf16_mixed, 120));

  const double vocab = static_cast<double>(ref.probe_cols);
  std::printf("transformer: vocab %.0f, first loss %.4f, held-out loss fp32 %.4f fp16-mixed %.4f bf16-mixed %.4f;"
              " accuracy fp32 %.3f\n",
              vocab, ref.steps.front().loss, ref.final_eval.loss, half.final_eval.loss, bf16r.final_eval.loss,
              ref.final_eval.accuracy);
  for (const slice_metrics& s : ref.final_eval.slices) {
    std::printf("  %-16s count %lld loss %.4f accuracy %.3f\n", s.name.c_str(), static_cast<long long>(s.count),
                s.loss, s.accuracy);
  }
  // Learning: from about ln(vocab) to well below it.
  CHECK(ref.steps.front().loss > 0.9 * std::log(vocab));
  CHECK(ref.final_eval.loss < 0.7 * std::log(vocab));
  CHECK(ref.final_eval.accuracy > 0.15);
  REQUIRE(ref.final_eval.slices.size() == 4);
  for (const slice_metrics& s : ref.final_eval.slices) CHECK(s.count > 0);
  for (const slice_metrics& s : ref.final_eval.slices) CHECK(s.loss < 0.75 * std::log(vocab));
  CHECK(ref.probe_rows == 8 * 32);
  CHECK(ref.probe_logits.size() == static_cast<std::size_t>(ref.probe_rows * ref.probe_cols));

  CHECK(std::abs(half.final_eval.loss - ref.final_eval.loss) / ref.final_eval.loss < tracking_tolerance(fp16));
  CHECK(std::abs(bf16r.final_eval.loss - ref.final_eval.loss) / ref.final_eval.loss < tracking_tolerance(bf16));
  for (const step_record& s : half.steps) CHECK_FALSE(s.skipped);
}

TEST_CASE("the transformer gives bit-identical runs on 1 and 2 threads") {
  if (!std::filesystem::exists(data_config{}.corpus_path)) std::exit(77);
  auto cfg = transformer_config(presets::fp16_mixed, 10);
  cfg.scaler.kind = scaler_kind::dynamic;
  cfg.threads = 1;
  const run_result one = train(cfg);
  cfg.threads = 2;
  const run_result two = train(cfg);
  CHECK(one.steps == two.steps);
  CHECK(one.weights_hash == two.weights_hash);
  CHECK(one.probe_logits == two.probe_logits);
}

TEST_CASE("the block's stored-format promises hold under every preset policy, stochastic casts included") {
  // The block writes each layer's input into the layer and says it holds values of policy.output (and its
  // gradients values of policy.gradient), so the layers skip rounding them to the matmul format. With the
  // checks on, every such promise is verified element by element and one that fails throws: a run finishing is
  // the evidence that each skipped rounding would have changed nothing.
  if (!std::filesystem::exists(data_config{}.corpus_path)) std::exit(77);
  const bool checks_were_on = format_checks_enabled();
  set_format_checks(true);
  for (const named_policy& p : policy_presets) {
    // fp8-hybrid's e5m2 gradients need per-tensor scaling, which the simulator refuses to train without: its
    // fp8 matmuls with bf16 gradients instead.
    precision_policy pol = p.policy;
    if (p.name == "fp8-hybrid") pol.gradient = bf16;
    for (const bool stochastic : {false, true}) {
      INFO(p.name << (stochastic ? ", stochastic casts" : ", nearest casts"));
      auto cfg = transformer_config(pol, 4);
      cfg.scaler.kind = scaler_kind::dynamic;
      if (stochastic) cfg.rounding.mode = rounding::stochastic;
      run_result r;
      CHECK_NOTHROW(r = train(cfg));
      CHECK(r.steps.size() == 4);
    }
  }
  set_format_checks(checks_were_on);
}

// Short contexts get as many position buckets as positions, each with predictions (a context of 2 had four
// buckets, "positions 2-2" and "positions 3-1" empty, which kept every run INCONCLUSIVE); 4 or more get four, the
// last taking the remainder.
TEST_CASE("position buckets of short contexts: one per position, none empty") {
  if (!std::filesystem::exists(data_config{}.corpus_path)) std::exit(77);
  const auto names_and_counts = [](std::int64_t context) {
    transformer_shape shape;
    shape.context = context;
    const corpus_data corpus(shape, data_config{});
    const batch held_out = corpus.eval_set();
    std::vector<std::int64_t> counts(corpus.slice_names().size(), 0);
    for (const std::int32_t s : held_out.slices) ++counts.at(static_cast<std::size_t>(s));
    return std::pair{corpus.slice_names(), counts};
  };
  const auto [two, two_counts] = names_and_counts(2);
  CHECK(two == std::vector<std::string>{"positions 0-0", "positions 1-1"});
  CHECK(two_counts[0] > 0);
  CHECK(two_counts[0] == two_counts[1]);
  const auto [five, five_counts] = names_and_counts(5);
  CHECK(five == std::vector<std::string>{"positions 0-0", "positions 1-1", "positions 2-2", "positions 3-4"});
  CHECK(five_counts[3] == 2 * five_counts[0]);
  const auto [wide, wide_counts] = names_and_counts(32);
  CHECK(wide == std::vector<std::string>{"positions 0-7", "positions 8-15", "positions 16-23", "positions 24-31"});
}
