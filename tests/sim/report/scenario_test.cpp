// Scenario parsing: the embedded default, did-you-mean for unknown keys and values, malformed JSON and
// impossible values named by their key path, and the run configurations a scenario produces.
#include "safeamp/sim/scenario.hpp"

#include <catch2/catch.hpp>
#include <cmath>

#include "safeamp/error.hpp"
#include "safeamp/policy/policy_presets.hpp"
#include "safeamp/policy/policy_string.hpp"
#include "safeamp/sim/did_you_mean.hpp"
#include "safeamp/sim/json_input.hpp"
#include "safeamp/sim/report_files.hpp"

using namespace safeamp::sim;

namespace {
std::string error_of(const std::string& text) {
  try {
    (void)parse_scenario(text, "test");
  } catch (const safeamp::error& e) {
    return e.what();
  }
  return "(no error)";
}
const std::string minimal_candidates = R"("candidates": [{"name": "b", "policy": "bf16-mixed"}])";
std::string with(const std::string& body) { return "{" + body + ", " + minimal_candidates + "}"; }
}  // namespace

TEST_CASE("edit distance and did-you-mean") {
  CHECK(typo_distance("kitten", "sitting") == 3);  // the textbook example
  CHECK(typo_distance("", "abc") == 3);
  CHECK(typo_distance("same", "same") == 0);
  CHECK(typo_distance("lerning_rate", "learning_rate") == 1);
  CHECK(typo_distance("laerning_rate", "learning_rate") == 1);  // a swap is one edit (Levenshtein: 2)
  CHECK(did_you_mean("learning_rat", {"momentum", "learning_rate", "beta1"}) == "learning_rate");
  CHECK(did_you_mean("candidats", {"candidates", "baselines"}) == "candidates");
  CHECK(did_you_mean("zzzzzzzz", {"steps", "seed"}).empty());
  // A swapped pair in a short key: one edit, within the one allowed for 5 letters (Levenshtein's two are not).
  CHECK(did_you_mean("setps", {"steps", "seed"}) == "steps");
}

TEST_CASE("the embedded default scenario parses and says what it expects") {
  const scenario s = parse_scenario(default_scenario_json(), "embedded default");
  CHECK(s.name == "default");
  CHECK(s.base.model == model_kind::transformer);
  CHECK(s.base.policy == safeamp::presets::fp32);
  REQUIRE(s.candidates.size() == 4);
  CHECK(s.candidates[0].policy == safeamp::presets::fp16_mixed);
  CHECK(s.candidates[0].scaler.kind == scaler_kind::none);
  CHECK(s.candidates[0].expect == expectation::fail);
  CHECK(s.candidates[1].scaler.kind == scaler_kind::dynamic);
  CHECK(s.candidates[1].expect == expectation::pass);
  CHECK(s.candidates[2].policy == safeamp::presets::bf16_mixed);
  CHECK(s.candidates[2].expect == expectation::pass);
  CHECK_FALSE(s.candidates[3].faults.empty());
  CHECK(s.baselines == std::vector<std::string>{"bf16-mixed", "fp32"});
  // Candidate tolerances come from the coarsest format: fp16 for the fp16 runs, bf16 for bf16-mixed.
  CHECK(tolerances_for(s, s.candidates[0]).terms == default_tolerances(safeamp::fp16));
  CHECK(tolerances_for(s, s.candidates[2]).terms == default_tolerances(safeamp::bf16));
}

TEST_CASE("configurations: the loss multiplier is a tiny_loss fault at every step of every run") {
  scenario s =
      parse_scenario(with(R"("model": {"kind": "mlp"}, "training": {"steps": 12, "loss_multiplier": 0.001})"), "test");
  const run_config ref = reference_config(s);
  REQUIRE(ref.faults.size() == 1);
  CHECK(ref.faults[0].kind == fault_kind::tiny_loss);
  CHECK(ref.faults[0].factor == 0.001);
  CHECK(ref.faults[0].steps.size() == 12);
  CHECK(ref.scaler.kind == scaler_kind::none);
  const run_config c = candidate_config(s, s.candidates[0]);
  CHECK(c.policy == safeamp::presets::bf16_mixed);
  CHECK(c.label == "b");
  CHECK(c.faults.size() == 1);
  // No scaler given: none for bf16 (fp32's exponent range), dynamic for fp16.
  CHECK(c.scaler.kind == scaler_kind::none);
  s = parse_scenario(R"({"model": {"kind": "mlp"}, "candidates": [{"name": "h", "policy": "fp16-mixed"}]})", "t");
  CHECK(s.candidates[0].scaler.kind == scaler_kind::dynamic);
  override_seed(s, 99);
  CHECK(reference_config(s).seed == 99);
  CHECK(candidate_config(s, s.candidates[0]).seed == 99);
}

TEST_CASE("data.corpus_path is relative to the scenario's folder, as its .npy files are") {
  const std::string body = R"("data": {"corpus_path": "text/corpus.txt"}, )" + minimal_candidates;
  const scenario s = parse_scenario("{" + body + "}", "runs/nightly/s.json");
  CHECK(s.base.data.corpus_path == "runs/nightly/text/corpus.txt");
  CHECK(parse_scenario("{" + body + "}", "s.json").base.data.corpus_path == "text/corpus.txt");
  const scenario absolute =
      parse_scenario(R"({"data": {"corpus_path": "/srv/corpus.txt"}, )" + minimal_candidates + "}", "runs/s.json");
  CHECK(absolute.base.data.corpus_path == "/srv/corpus.txt");
  // Without the key the default corpus, an absolute path, stays as it is.
  CHECK(parse_scenario(with(R"("name": "n")"), "runs/s.json").base.data.corpus_path == data_config{}.corpus_path);
}

TEST_CASE("text shown on terminals and in the reports: names and descriptions without control characters") {
  // A NUL in the scenario's name cut the printed summary after "scenario 'quick"; an ESC reached terminals and
  // report.html raw. Names take no control character, a description its line breaks and tabs only.
  CHECK_THAT(error_of(with(R"("name": "quick\u0000hidden")")),
             Catch::Contains("name") && Catch::Contains("without control characters"));
  CHECK_THAT(error_of(with(R"("name": "\u001b[2Jquick")")), Catch::Contains("without control characters"));
  CHECK(parse_scenario(with(R"("name": "quick \u00e9t\u00e9")"), "t").name == "quick \xc3\xa9t\xc3\xa9");
  CHECK(parse_scenario(with(R"("description": "line one\n\tline two")"), "t").description == "line one\n\tline two");
  CHECK_THAT(error_of(with(R"("description": "one\u001b[31m two")")),
             Catch::Contains("description") && Catch::Contains("other than line breaks and tabs"));
  CHECK_THAT(error_of(with(R"("name": ")" + std::string(257, 'n') + "\"")),
             Catch::Contains("(257 bytes)") && Catch::Contains("at most 256 bytes"));
  CHECK(parse_scenario(with(R"("name": ")" + std::string(256, 'n') + "\""), "t").name.size() == 256);
  const auto layer_named = [](const std::string& name) {
    return R"({"model": {"kind": "stack", "layers": [{"type": "linear", "out": 4, "name": ")" + name +
           R"("}, {"type": "linear"}]}, "candidates": [{"name": "b", "policy": "bf16-mixed"}]})";
  };
  CHECK(parse_scenario(layer_named("enc"), "t").base.stack.layers.at(0).name == "enc");
  CHECK_THAT(error_of(layer_named(R"(enc\u0007)")),
             Catch::Contains("model.layers[0].name") && Catch::Contains("without control characters"));
  CHECK_THAT(error_of(layer_named(std::string(129, 'l'))),
             Catch::Contains("model.layers[0].name") && Catch::Contains("at most 128 bytes"));
}

TEST_CASE("a data path under a folder whose name is not UTF-8 is refused before anything trains") {
  // The path enters every run's manifest, which the JSON writer refused after the reference had trained.
  const std::string body = R"({"model": {"kind": "stack", "layers": [{"type": "linear"}]},
      "data": {"inputs": "x.npy", "targets": "y.npy"}, )" +
                           minimal_candidates + "}";
  CHECK(parse_scenario(body, "runs/s.json").base.data.inputs_path == "runs/x.npy");
  const std::string e = [&] {
    try {
      (void)parse_scenario(body,
                           "bad\xff"
                           "dir/s.json");
    } catch (const safeamp::error& x) {
      return std::string(x.what());
    }
    return std::string("(no error)");
  }();
  CHECK_THAT(e, Catch::Contains("data.inputs") && Catch::Contains("not UTF-8") && Catch::Contains("a path in UTF-8"));
  CHECK(is_valid_utf8("d\xc3\xa9j\xc3\xa0"));
  CHECK_FALSE(is_valid_utf8("bad\xff"));
  CHECK_FALSE(is_valid_utf8("\xc3"));  // a character cut in half
}

TEST_CASE("malformed JSON and unknown keys are named, with a suggestion") {
  CHECK_THAT(error_of("{\"name\": \"x\",,}"), Catch::Contains("not valid JSON"));
  CHECK_THAT(error_of("[1, 2]"), Catch::Contains("a JSON object"));
  CHECK_THAT(error_of(with(R"("trainig": {})")),
             Catch::Contains("trainig") && Catch::Contains("did you mean 'training'"));
  CHECK_THAT(error_of(with(R"("training": {"optimizer": {"learning_rat": 0.1}})")),
             Catch::Contains("training.optimizer.learning_rat") && Catch::Contains("did you mean 'learning_rate'"));
  CHECK_THAT(error_of(R"({"candidates": [{"name": "a", "policy": "fp16-mixed", "scaler": {"kind": "dynamc"}}]})"),
             Catch::Contains("candidates[0].scaler.kind") && Catch::Contains("did you mean 'dynamic'"));
  CHECK_THAT(error_of(R"({"candidates": [{"name": "a", "polcy": "fp16-mixed"}]})"),
             Catch::Contains("did you mean 'policy'"));
}

TEST_CASE("hostile numbers and documents: 2^63, 1e400, duplicate keys, deep nesting; INT64_MAX itself is fine") {
  // 2^63 as a float compares <= double(INT64_MAX) (which rounds up to 2^63): it must not reach the conversion.
  CHECK_THAT(error_of(with(R"("training": {"seed": 9223372036854775808.0})")), Catch::Contains("training.seed"));
  CHECK_THAT(error_of(with(R"("training": {"seed": 9223372036854775808})")), Catch::Contains("training.seed"));
  CHECK_THAT(error_of(with(R"("training": {"seed": -1})")), Catch::Contains("training.seed"));
  const scenario big =
      parse_scenario(with(R"("model": {"kind": "mlp"}, "training": {"seed": 9223372036854775807})"), "t");
  CHECK(big.base.seed == 9223372036854775807ull);
  CHECK_THAT(error_of(with(R"("training": {"clip_norm": 1e400})")), Catch::Contains("outside double's range"));
  CHECK_THAT(error_of(with(R"("name": "a", "name": "b")")), Catch::Contains("duplicate key"));
  CHECK_THAT(error_of(std::string(100000, '[') + std::string(100000, ']')), Catch::Contains("nested deeper"));
}

TEST_CASE("impossible values are refused with the key path and the accepted range") {
  CHECK_THAT(error_of(with(R"("training": {"steps": 0})")), Catch::Contains("training.steps"));
  CHECK_THAT(error_of(with(R"("training": {"steps": 2.5})")), Catch::Contains("an integer"));
  CHECK_THAT(error_of(with(R"("training": {"batch_size": "many"})")), Catch::Contains("training.batch_size"));
  CHECK_THAT(error_of(with(R"("model": {"width": 30, "heads": 4})")), Catch::Contains("multiple of model.heads"));
  CHECK_THAT(error_of(with(R"("tolerances": {"loss_rel": -1})")), Catch::Contains("tolerances.loss_rel"));
  CHECK_THAT(error_of(with(R"("cost": {"dollars_per_hour": -3})")), Catch::Contains("cost.dollars_per_hour"));
  CHECK_THAT(error_of(R"({"candidates": []})"), Catch::Contains("candidates"));
  CHECK_THAT(error_of(R"({"model": {"kind": "mlp"}})"), Catch::Contains("candidates"));
  CHECK_THAT(error_of(R"({"candidates": [{"name": "a", "policy": "fp17"}]})"), Catch::Contains("candidates[0].policy"));
  CHECK_THAT(error_of(R"({"candidates": [{"name": "a", "policy": "fp32"}, {"name": "a", "policy": "fp32"}]})"),
             Catch::Contains("used twice"));
  // Names that map to one telemetry file (file_slug) would overwrite each other's telemetry.
  CHECK_THAT(
      error_of(R"({"candidates": [{"name": "fp16 a", "policy": "fp32"}, {"name": "FP16-A", "policy": "fp32"}]})"),
      Catch::Contains("candidates[1].name") && Catch::Contains("telemetry/fp16-a.jsonl") &&
          Catch::Contains("'fp16 a'"));
  CHECK_THAT(error_of(R"({"candidates": [{"name": "Reference FP32", "policy": "fp32"}]})"),
             Catch::Contains("telemetry/reference-fp32.jsonl"));
  CHECK_THAT(error_of(R"({"training": {"steps": 10}, "candidates": [{"name": "a", "policy": "fp16-mixed",
             "faults": [{"kind": "gradient_inf", "steps": [10]}]}]})"),
             Catch::Contains("candidates[0].faults[0].steps"));
  CHECK_THAT(error_of(R"({"candidates": [{"name": "a", "policy": "fp16-mixed",
             "scaler": {"kind": "dynamic", "backoff_factor": 1.5}}]})"),
             Catch::Contains("backoff_factor"));
  CHECK_THAT(error_of(R"({"candidates": [{"name": "a", "policy": "fp16-mixed", "expect": "maybe"}]})"),
             Catch::Contains("candidates[0].expect"));
  CHECK_THAT(error_of(with(R"("baselines": "fp32")")), Catch::Contains("baselines"));
  // A name is a file name too: 128 bytes are accepted, 129 refused before anything trains (a 5000-character
  // one used to fail at its first checkpoint), with the name cut in the message; so are control characters.
  const auto named = [](const std::string& name) {
    return R"({"model": {"kind": "mlp"}, "candidates": [{"name": ")" + name + R"(", "policy": "fp32"}]})";
  };
  CHECK(parse_scenario(named(std::string(128, 'n')), "t").candidates.at(0).name.size() == 128);
  const std::string long_name = error_of(named(std::string(129, 'n')));
  CHECK_THAT(long_name, Catch::Contains("candidates[0].name") && Catch::Contains("(129 bytes)") &&
                            Catch::Contains("at most 128 bytes"));
  CHECK(long_name.size() < 300);
  CHECK_THAT(error_of(named(R"(fp16\u001b[2J)")),
             Catch::Contains("candidates[0].name") && Catch::Contains("without control characters"));
  // Block-scaled matmuls accumulate in fp32: another accumulation is refused with the scenario, not at the first
  // GEMM of a run (the reference had trained and the folder was left INCOMPLETE).
  CHECK_THAT(error_of(R"({"model": {"kind": "mlp"}, "candidates": [{"name": "mx",
             "policy": "preset=bf16-mixed,matmul=mxfp8,accumulate=fp16"}]})"),
             Catch::Contains("policy accumulate") && Catch::Contains("fp32 with block-scaled matmul inputs (mxfp8"));
  // A policy string that does not parse is quoted bounded and with control characters escaped.
  const std::string hostile =
      error_of(R"({"candidates": [{"name": "a", "policy": "\u001b[31mfp16)" + std::string(5000, 'x') + R"("}]})");
  CHECK_THAT(hostile, Catch::Contains("candidates[0].policy") && Catch::Contains("\\x1b[31mfp16"));
  CHECK(hostile.find('\x1b') == std::string::npos);
  CHECK(hostile.size() < 2000);
  // The simulator's refusal of a run, placed in the scenario, reads as one sentence.
  CHECK_THAT(error_of(R"({"model": {"kind": "mlp"}, "candidates": [{"name": "e5", "policy": "fp8-hybrid"}]})"),
             Catch::StartsWith("candidates[0] (e5): ") &&
                 Catch::Contains("e5m2; accepted: a format of at least 16 bits") && !Catch::Contains(" is policy "));
}

TEST_CASE("fault and scaler keys the kind does not read are refused; a fault's step is listed once") {
  const auto faulted = [](const std::string& fault) {
    return R"({"model": {"kind": "mlp"}, "training": {"steps": 12}, "candidates": [{"name": "a",
              "policy": "fp16-mixed", "faults": [)" +
           fault + "]}]}";
  };
  // Accepted: what each kind reads.
  const scenario ok = parse_scenario(faulted(R"({"kind": "gradient_inf", "steps": [3, 1], "target": "fc0.weight"},
      {"kind": "loss_spike", "steps": [4], "factor": 1e6}, {"kind": "tiny_loss", "steps": [5], "factor": 1e-8},
      {"kind": "input_nan", "steps": [6]})"),
                                     "t");
  REQUIRE(ok.candidates.at(0).faults.size() == 4);
  CHECK(ok.candidates[0].faults[0].steps == std::vector<std::int64_t>{3, 1});
  // Until 2026-12-06 each of these was accepted and printed as if it acted.
  CHECK_THAT(error_of(faulted(R"({"kind": "loss_spike", "steps": [3]})")),
             Catch::Contains("candidates[0].faults[0].factor") && Catch::Contains("missing"));
  CHECK_THAT(error_of(faulted(R"({"kind": "tiny_loss", "steps": [3], "factor": 1})")),
             Catch::Contains("candidates[0].faults[0].factor") && Catch::Contains("not 1"));
  CHECK_THAT(error_of(faulted(R"({"kind": "gradient_inf", "steps": [3], "factor": 4})")),
             Catch::Contains("candidates[0].faults[0].factor") && Catch::Contains("only on loss_spike and tiny_loss"));
  CHECK_THAT(error_of(faulted(R"({"kind": "loss_spike", "steps": [3], "factor": 1e6, "target": "head.bias"})")),
             Catch::Contains("candidates[0].faults[0].target") && Catch::Contains("given for loss_spike"));
  CHECK_THAT(error_of(faulted(R"({"kind": "input_nan", "steps": [3], "target": "head.weight"})")),
             Catch::Contains("candidates[0].faults[0].target"));
  CHECK_THAT(error_of(faulted(R"({"kind": "gradient_nan", "steps": [3, 7, 3]})")),
             Catch::Contains("candidates[0].faults[0].steps") && Catch::Contains("3 given twice"));
  // The scaler: keys of another kind ({"kind": "static", "init_scale": 1024} ran at scale 1).
  const auto scaled = [](const std::string& scaler) {
    return R"({"model": {"kind": "mlp"}, "candidates": [{"name": "a", "policy": "fp16-mixed", "scaler": )" + scaler +
           "}]}";
  };
  CHECK(parse_scenario(scaled(R"({"kind": "static", "static_scale": 1024})"), "t").candidates[0].scaler.static_scale ==
        1024.0f);
  CHECK_THAT(error_of(scaled(R"({"kind": "static", "init_scale": 1024})")),
             Catch::Contains("candidates[0].scaler.init_scale") && Catch::Contains("given with kind static"));
  CHECK_THAT(error_of(scaled(R"({"kind": "static"})")),
             Catch::Contains("candidates[0].scaler.static_scale") && Catch::Contains("missing"));
  CHECK_THAT(error_of(scaled(R"({"kind": "none", "preset": "megatron", "hysteresis": 5})")),
             Catch::Contains("candidates[0].scaler.") && Catch::Contains("given with kind none"));
  CHECK_THAT(error_of(scaled(R"({"kind": "dynamic", "static_scale": 4})")),
             Catch::Contains("candidates[0].scaler.static_scale") && Catch::Contains("given with kind dynamic"));
  CHECK_THAT(error_of(scaled(R"({"static_scale": 4})")), Catch::Contains("given with kind dynamic"));
}

TEST_CASE("baselines: a candidate's name as written, any other must be a policy, kept in its canonical spelling") {
  const auto baselines = [](const std::string& list) {
    return parse_scenario(R"({"model": {"kind": "mlp"}, "candidates": [{"name": "b", "policy": "bf16-mixed"},
        {"name": "FP16 run", "policy": "fp16-mixed"}], "baselines": )" +
                              list + "}",
                          "test")
        .baselines;
  };
  // Spellings of one policy compare equal to the policy a candidate ran under (its label is to_string's).
  CHECK(baselines(R"(["BF16_Mixed", "params=fp32,compute=fp16,output=fp16", "FP32"])") ==
        std::vector<std::string>{"bf16-mixed", "fp16-mixed", "fp32"});
  CHECK(baselines(R"(["b", "FP16 run"])") == std::vector<std::string>{"b", "FP16 run"});
  // A typo was accepted and recommended as "run instead: bf16-mixd"; now it is refused by position.
  CHECK_THAT(error_of(R"({"model": {"kind": "mlp"}, "candidates": [{"name": "b", "policy": "bf16-mixed"}],
                          "baselines": ["fp32", "bf16-mixd"]})"),
             Catch::Contains("baselines[1]") && Catch::Contains("'bf16-mixd'") &&
                 Catch::Contains("a candidate's name or a policy"));
}

TEST_CASE("a master_weights override is part of the candidate's policy: its label and memory see it") {
  // fp16-pure-master keeps an fp32 master copy; "master_weights": false on the candidate (or on the scenario's
  // optimizer) runs without one, which the policy printed in the report and the memory column must say.
  const scenario s = parse_scenario(R"({"model": {"kind": "mlp"}, "candidates": [
      {"name": "plain", "policy": "fp16-pure-master"},
      {"name": "off", "policy": "fp16-pure-master", "master_weights": false},
      {"name": "on", "policy": "fp16-mixed", "master_weights": true}]})",
                                    "test");
  const run_config plain = candidate_config(s, s.candidates[0]);
  const run_config off = candidate_config(s, s.candidates[1]);
  const run_config on = candidate_config(s, s.candidates[2]);
  CHECK(plain.policy == safeamp::presets::fp16_pure_master);
  CHECK_FALSE(off.policy.master_weights);
  CHECK_FALSE(keeps_master_weights(off));
  CHECK(to_string(off.policy) != to_string(plain.policy));
  CHECK_FALSE(safeamp::parse_policy(to_string(off.policy)).master_weights);  // the printed policy says it
  CHECK(on.policy.master_weights);
  CHECK(safeamp::parse_policy(to_string(on.policy)).master_weights);
  const scenario top =
      parse_scenario(R"({"model": {"kind": "mlp"}, "training": {"optimizer": {"master_weights": false}},
      "candidates": [{"name": "p", "policy": "fp16-pure-master"}]})",
                     "test");
  CHECK_FALSE(candidate_config(top, top.candidates[0]).policy.master_weights);
}

TEST_CASE("the shipped scenario files parse, and scenarios/default.json is the embedded default") {
  const std::string dir = SAFEAMP_SCENARIOS_DIR;
  const std::string text = safeamp::sim::read_whole_file(dir + "/default.json");
  CHECK(text == std::string(default_scenario_json()) + "\n");
  CHECK(parse_scenario(text, "default.json").candidates.size() == 4);
  const scenario quick = parse_scenario(safeamp::sim::read_whole_file(dir + "/mlp-quick.json"), "mlp-quick.json");
  CHECK(quick.base.model == model_kind::mlp);
  CHECK(quick.candidates.size() == 3);
}

// The gate's format terms follow the coarser of the two runs compared: an fp32 candidate against a bf16-mixed
// reference differs from it by bf16's rounding, so it gets bf16's limits (sqrt(2^-8) = 0.0625), not fp32's.
TEST_CASE("tolerances: the coarser of the candidate's and the reference's formats") {
  const std::string two = R"("candidates": [{"name": "f", "policy": "fp32"}, {"name": "h", "policy": "fp16-mixed"}])";
  const scenario s =
      parse_scenario(R"({"model": {"kind": "mlp"}, "reference": {"policy": "bf16-mixed"}, )" + two + "}", "t");
  CHECK(tolerances_for(s, s.candidates[0]).terms.loss_rel == Approx(0.0625));
  CHECK(tolerances_for(s, s.candidates[1]).terms.loss_rel == Approx(0.0625));  // bf16 is coarser than fp16 too
  const scenario fp32_ref = parse_scenario(R"({"model": {"kind": "mlp"}, )" + two + "}", "t");
  CHECK(tolerances_for(fp32_ref, fp32_ref.candidates[1]).terms.loss_rel == Approx(std::sqrt(0x1p-11)));
  CHECK(tolerances_for(fp32_ref, fp32_ref.candidates[0]).terms.loss_rel < 1e-3);
}
