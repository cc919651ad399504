// GPU trainer: the simulator's MLP classifier on the GPU, driven by the same scenario / run_config as the
// simulator and writing the same JSON Lines step records, then compared step by step with a simulator run.
//
//   gpu_trainer [--scenario FILE] [--candidate NAME | --reference] [--steps N] [--out DIR]
//               [--telemetry-every N] [--max-loss-gap R] [--no-sim]
//       trains on the GPU (DIR/gpu.jsonl) and in the simulator (DIR/sim.jsonl), compares them
//       (DIR/comparison.json) and prints the verdict. Without --scenario: a built-in fp16-mixed MLP run with
//       an injected inf gradient at step 10. Without a GPU: says so and exits with 77 (CTest's skip code).
//   gpu_trainer --compare A.jsonl B.jsonl [--max-loss-gap R] [--json FILE]
//       compares two step-record files (no GPU needed).
// Exit codes: 0 the runs agree, 1 they differ, 2 bad input, 77 no GPU.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "gpu_mlp_trainer.hpp"
#include "gpu_support.hpp"
#include "safeamp/cuda/device.hpp"
#include "safeamp/cuda/status.hpp"
#include "safeamp/error.hpp"
#include "safeamp/policy.hpp"
#include "safeamp/scaling.hpp"
#include "safeamp/sim/report.hpp"
#include "safeamp/sim/report_files.hpp"
#include "safeamp/sim/scenario.hpp"
#include "safeamp/sim/trainer.hpp"
#include "step_compare.hpp"

namespace {

using namespace safeamp;
namespace fs = std::filesystem;

struct arguments {
  std::vector<std::string> compare;  // two files in --compare mode
  std::string json_out;
  std::string scenario_path;
  std::string candidate;
  bool reference = false;
  std::int64_t steps = -1;
  std::string out_dir = "gpu-trainer-out";
  std::int64_t telemetry_every = 10;
  double max_loss_gap = 0.05;
  bool run_sim = true;
};

std::int64_t parse_int(const std::string& flag, const std::string& v, std::int64_t min) {
  std::size_t used = 0;
  long long x = 0;
  try {
    x = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || x < min) throw error(flag, "'" + v + "'", "an integer >= " + std::to_string(min));
  return x;
}

double parse_double(const std::string& flag, const std::string& v) {
  std::size_t used = 0;
  double x = -1.0;
  try {
    x = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || !(x >= 0.0)) throw error(flag, "'" + v + "'", "a number >= 0");
  return x;
}

arguments parse_arguments(int argc, char** argv) {
  arguments a;
  const auto value = [&](int& i, const std::string& flag) -> std::string {
    if (i + 1 >= argc) throw error(flag, "missing value", "a value after " + flag);
    return argv[++i];
  };
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "--compare") {
      a.compare.push_back(value(i, f));
      a.compare.push_back(value(i, f));
    } else if (f == "--json") {
      a.json_out = value(i, f);
    } else if (f == "--scenario") {
      a.scenario_path = value(i, f);
    } else if (f == "--candidate") {
      a.candidate = value(i, f);
    } else if (f == "--reference") {
      a.reference = true;
    } else if (f == "--steps") {
      a.steps = parse_int(f, value(i, f), 1);
    } else if (f == "--out") {
      a.out_dir = value(i, f);
    } else if (f == "--telemetry-every") {
      a.telemetry_every = parse_int(f, value(i, f), 1);
    } else if (f == "--max-loss-gap") {
      a.max_loss_gap = parse_double(f, value(i, f));
    } else if (f == "--no-sim") {
      a.run_sim = false;
    } else {
      throw error("argument", "'" + f + "'",
                  "--compare A B, --json, --scenario, --candidate, --reference, --steps, --out, --telemetry-every, "
                  "--max-loss-gap, --no-sim");
    }
  }
  if (!a.candidate.empty() && a.reference) throw error("--candidate", a.candidate, "not together with --reference");
  return a;
}

// The built-in run: the simulator example's fp16-mixed MLP with a dynamic scaler and an inf gradient at step 10.
sim::run_config builtin_config() {
  sim::run_config cfg;
  cfg.label = "fp16-mixed dynamic (gpu_trainer built-in)";
  cfg.policy = presets::fp16_mixed;
  cfg.scaler.kind = sim::scaler_kind::dynamic;
  cfg.scaler.dynamic = scaler_presets::pytorch;
  cfg.optimizer.kind = sim::optimizer_kind::sgd_momentum;
  cfg.optimizer.learning_rate = 0.1;
  cfg.steps = 40;
  cfg.batch_size = 128;
  cfg.faults = {{.kind = sim::fault_kind::gradient_inf, .steps = {10}, .target = "head.weight", .factor = 1.0}};
  return cfg;
}

sim::run_config config_from(const arguments& a) {
  sim::run_config cfg = builtin_config();
  if (!a.scenario_path.empty()) {
    const sim::scenario sc = sim::parse_scenario(sim::read_whole_file(a.scenario_path), a.scenario_path);
    if (a.reference) {
      cfg = sim::reference_config(sc);
    } else {
      if (sc.candidates.empty()) throw error("scenario candidates", "none", "at least one (or pass --reference)");
      const sim::candidate_spec* chosen = &sc.candidates.front();
      if (!a.candidate.empty()) {
        chosen = nullptr;
        std::string names;
        for (const sim::candidate_spec& c : sc.candidates) {
          if (!names.empty()) names += ", ";
          names += c.name;
          if (c.name == a.candidate) chosen = &c;
        }
        if (chosen == nullptr) throw error("--candidate", "'" + a.candidate + "'", names);
      }
      cfg = sim::candidate_config(sc, *chosen);
    }
  }
  if (a.steps > 0) cfg.steps = a.steps;
  cfg.threads = 1;
  return cfg;
}

// Prints every phase's check and writes them to `file`; false when a phase's time is impossible.
bool report_phase_checks(const gpu_trainer::gpu_run& g, const fs::path& file) {
  nlohmann::json j;
  j["device"] = g.device;
  j["roofline_device"] = g.roofline_device.empty() ? nlohmann::json(nullptr) : nlohmann::json(g.roofline_device);
  if (!g.phase_check_note.empty()) j["note"] = g.phase_check_note;
  j["phases"] = nlohmann::json::array();
  bool ok = true;
  if (!g.phase_check_note.empty()) std::printf("gpu_trainer: %s\n", g.phase_check_note.c_str());
  for (const gpu_trainer::phase_check& c : g.phase_checks) {
    const std::string name(gpu_trainer::phase_name(c.phase));
    ok = ok && c.plausible;
    j["phases"].push_back({{"phase", name},
                           {"steps_timed", c.steps_timed},
                           {"fastest_seconds", c.fastest_seconds},
                           {"median_seconds", c.median_seconds},
                           {"flops_per_step", c.flops},
                           {"checked", c.checked},
                           {"plausible", c.plausible},
                           {"fraction_of_peak", c.fraction_of_peak},
                           {"note", c.note}});
    char verdict[64];
    std::snprintf(verdict, sizeof verdict, "%.2f %% of peak, plausible", c.fraction_of_peak * 100.0);
    std::printf("gpu_trainer: phase %-18s median %9.2f us, fastest %9.2f us over %lld steps: %s\n", name.c_str(),
                c.median_seconds * 1e6, c.fastest_seconds * 1e6, static_cast<long long>(c.steps_timed),
                c.checked && c.plausible ? verdict : c.note.c_str());
  }
  j["plausible"] = ok;
  sim::write_file_atomically(file, j.dump(1) + "\n");
  if (!ok) std::fprintf(stderr, "gpu_trainer: timing error: a phase ran faster than the device's roofline allows\n");
  return ok;
}

int compare_files(const arguments& a) {
  const gpu_trainer::comparison_options opt{.max_relative_loss_gap = a.max_loss_gap};
  const auto ra = gpu_trainer::parse_step_records(sim::read_whole_file(a.compare[0]), a.compare[0]);
  const auto rb = gpu_trainer::parse_step_records(sim::read_whole_file(a.compare[1]), a.compare[1]);
  const gpu_trainer::comparison c = gpu_trainer::compare_steps(ra, rb, opt);
  std::fputs(gpu_trainer::comparison_text(c, a.compare[0], a.compare[1], opt).c_str(), stdout);
  if (!a.json_out.empty()) {
    sim::write_file_atomically(a.json_out, gpu_trainer::comparison_json(c, a.compare[0], a.compare[1], opt) + "\n");
  }
  return c.agree ? 0 : 1;
}

int train_and_compare(const arguments& a) {
  const sim::run_config cfg = config_from(a);
  sim::validate(cfg);
  gpu_trainer::check_gpu_supported(cfg);  // bad input is reported before the device is looked for
  if (cuda::device_count() == 0) {
    std::printf(
        "SKIPPED: no CUDA device is present (or no driver); gpu_trainer needs a GPU to train. "
        "`gpu_trainer --compare A.jsonl B.jsonl` works without one.\n");
    return cuda::ctest_skip_code;
  }
  const fs::path out = a.out_dir;
  sim::prepare_output_folder(out);
  std::printf("gpu_trainer: '%s', policy %s, %lld steps of %lld samples\n", cfg.label.c_str(),
              to_string(cfg.policy).c_str(), static_cast<long long>(cfg.steps), static_cast<long long>(cfg.batch_size));
  const gpu_trainer::gpu_run g =
      gpu_trainer::train_on_gpu(cfg, {.telemetry_every = a.telemetry_every, .print_progress = true});
  sim::write_file_atomically(out / "gpu.jsonl", sim::telemetry_jsonl(g.result));
  std::printf(
      "gpu_trainer: %s: %.3f s of device time, %.3f s to enqueue, %lld telemetry snapshots, "
      "held-out loss %.4f accuracy %.3f -> %s\n",
      g.device.c_str(), g.gpu_seconds, g.enqueue_seconds, static_cast<long long>(g.telemetry_snapshots),
      g.result.final_eval.loss, g.result.final_eval.accuracy, (out / "gpu.jsonl").c_str());
  const bool timing_ok = report_phase_checks(g, out / "phases.json");
  if (!a.run_sim) return timing_ok ? 0 : 1;
  const sim::run_result s = sim::train(cfg);
  sim::write_file_atomically(out / "sim.jsonl", sim::telemetry_jsonl(s));
  std::printf("gpu_trainer: simulator held-out loss %.4f accuracy %.3f -> %s\n", s.final_eval.loss,
              s.final_eval.accuracy, (out / "sim.jsonl").c_str());
  const gpu_trainer::comparison_options opt{.max_relative_loss_gap = a.max_loss_gap};
  const gpu_trainer::comparison c = gpu_trainer::compare_steps(s.steps, g.result.steps, opt);
  std::fputs(gpu_trainer::comparison_text(c, "sim", "gpu", opt).c_str(), stdout);
  sim::write_file_atomically(out / "comparison.json", gpu_trainer::comparison_json(c, "sim", "gpu", opt) + "\n");
  return c.agree && timing_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const arguments a = parse_arguments(argc, argv);
    return a.compare.empty() ? train_and_compare(a) : compare_files(a);
  } catch (const safeamp::cuda::cuda_error& e) {  // a device failure, not bad input
    std::fprintf(stderr, "gpu_trainer: device error: %s\n", e.what());
    return 1;
  } catch (const safeamp::error& e) {
    std::fprintf(stderr, "gpu_trainer: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_trainer: error: %s\n", e.what());
    return 2;
  }
}
