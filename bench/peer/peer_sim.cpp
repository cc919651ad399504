// The simulator's side of the PyTorch peer benchmark (bench/peer/peer_bench.py): trains the embedded default
// scenario's transformer, or a copy `--width-multiplier` times wider, under its fp32 reference or its
// "fp16-mixed dynamic" candidate, by calling train() directly (no report is written, so the time is training's
// own), and prints one JSON object with the times and the weights hash. `--describe` prints the scenario's
// shape and recipe instead, which the Python side builds its PyTorch model and optimizer from.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>

#include "safeamp/error.hpp"
#include "safeamp/sim/datasets.hpp"
#include "safeamp/sim/scenario.hpp"
#include "safeamp/sim/trainer.hpp"

namespace {

using namespace safeamp::sim;

constexpr std::string_view mixed_candidate = "fp16-mixed dynamic";

struct options {
  bool describe = false;
  std::string policy = "fp32";  // "fp32" (the reference) or "fp16-mixed" (the scenario's dynamic-scaling candidate)
  std::int64_t width_multiplier = 1;
  int threads = 1;
  std::int64_t steps = 0;  // 0: the scenario's
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "%s\nusage: safeamp_peer_sim --describe [--width-multiplier N]\n"
               "       safeamp_peer_sim --policy fp32|fp16-mixed [--width-multiplier N] [--threads N] [--steps N]\n",
               why.c_str());
  std::exit(2);
}

std::int64_t positive(std::string_view flag, const char* text) {
  std::size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || text[used] != '\0' || v < 1) usage(std::string(flag) + " '" + text + "': expected an integer >= 1");
  return v;
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--describe") {
      o.describe = true;
    } else if (a == "--policy" && has_value) {
      o.policy = argv[++i];
      if (o.policy != "fp32" && o.policy != "fp16-mixed")
        usage("--policy '" + o.policy + "': expected fp32 or fp16-mixed");
    } else if (a == "--width-multiplier" && has_value) {
      o.width_multiplier = positive(a, argv[++i]);
    } else if (a == "--threads" && has_value) {
      o.threads = static_cast<int>(positive(a, argv[++i]));
    } else if (a == "--steps" && has_value) {
      o.steps = positive(a, argv[++i]);
    } else {
      usage("unknown or incomplete option '" + std::string(a) + "'");
    }
  }
  return o;
}

// The run: the default scenario's reference or mixed candidate, widened, with the requested threads and steps.
run_config make_config(const scenario& s, const options& o) {
  run_config c = reference_config(s);
  if (o.policy == "fp16-mixed") {
    const candidate_spec* mixed = nullptr;
    for (const candidate_spec& cand : s.candidates) {
      if (cand.name == mixed_candidate) mixed = &cand;
    }
    if (mixed == nullptr)
      throw std::runtime_error("the default scenario has no '" + std::string(mixed_candidate) + "'");
    c = candidate_config(s, *mixed);
  }
  c.transformer.width *= o.width_multiplier;
  c.threads = o.threads;
  if (o.steps > 0) c.steps = o.steps;
  return c;
}

void describe(const scenario& s, const run_config& c) {
  const corpus_data corpus(c.transformer, c.data);
  const transformer_shape& t = c.transformer;
  const optimizer_config& opt = c.optimizer;
  std::printf(
      "{\"scenario\": \"%s\", \"corpus_path\": \"%s\", \"vocab\": %lld, \"context\": %lld, \"width\": %lld, "
      "\"heads\": %lld, \"layers\": %lld, \"ffn_multiplier\": %lld, \"batch_size\": %lld, \"steps\": %lld, "
      "\"eval_fraction\": %.17g, \"eval_samples\": %lld, \"probe_rows\": %lld, \"optimizer\": \"%s\", "
      "\"learning_rate\": %.17g, \"beta1\": %.17g, \"beta2\": %.17g, \"epsilon\": %.17g, \"weight_decay\": %.17g, "
      "\"clip_norm\": %.17g, \"loss_multiplier\": %.17g}\n",
      s.name.c_str(), c.data.corpus_path.c_str(), static_cast<long long>(corpus.vocab_size()),
      static_cast<long long>(t.context), static_cast<long long>(t.width), static_cast<long long>(t.heads),
      static_cast<long long>(t.layers), static_cast<long long>(t.ffn_multiplier), static_cast<long long>(c.batch_size),
      static_cast<long long>(c.steps), c.data.eval_fraction, static_cast<long long>(c.data.eval_samples),
      static_cast<long long>(c.data.probe_rows), to_string(opt.kind).c_str(), opt.learning_rate, opt.beta1, opt.beta2,
      opt.epsilon, opt.weight_decay, c.clip_norm, s.loss_multiplier);
}

void train_and_print(const run_config& c, const options& o) {
  const run_result r = train(c);
  const step_phase_seconds& p = r.phases;
  std::printf(
      "{\"policy\": \"%s\", \"width\": %lld, \"threads\": %d, \"steps\": %lld, \"wall_seconds\": %.9g, "
      "\"step_seconds\": %.9g, \"forward\": %.9g, \"loss\": %.9g, \"backward\": %.9g, \"casts\": %.9g, "
      "\"unscale_check\": %.9g, \"clip\": %.9g, \"optimizer\": %.9g, \"final_loss\": %.9g, "
      "\"weights_hash\": \"%016llx\"}\n",
      o.policy.c_str(), static_cast<long long>(c.transformer.width), c.threads, static_cast<long long>(p.steps),
      r.wall_seconds, p.step_total, p.forward, p.loss, p.backward, p.casts, p.unscale_check, p.clip, p.optimizer,
      r.final_eval.loss, static_cast<unsigned long long>(r.weights_hash));
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  try {
    const scenario s = parse_scenario(default_scenario_json(), "embedded default");
    const run_config c = make_config(s, o);
    if (o.describe) {
      describe(s, c);
    } else {
      train_and_print(c, o);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "safeamp_peer_sim: %s\n", e.what());
    return 2;
  }
  return 0;
}
