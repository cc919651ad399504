// `safeamp sim`: runs a scenario (the embedded default, or --scenario file.json): locks (or reuses) the
// fp32 reference, trains every candidate, applies the parity gate, names fallbacks, prints the summary and
// writes report.html, summary.json, telemetry/*.jsonl, reference/, known_good.json and decisions.jsonl; only files
// it can show it wrote are ever moved or removed (report_invocation.hpp).
// Every run checkpoints into checkpoints/ as it goes; --resume continues an interrupted invocation from them
// (bit-identical results), and a finished invocation removes them.
// Exit codes: 0 every verdict as the scenario expects, 1 some verdict is not, 2 bad input, 130, 143 or 138 stopped by
// SIGINT, SIGTERM or SIGUSR1 while the runs trained (stop_on_signals).
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "command_registry.hpp"
#include "data_parallel_run.hpp"
#include "plan_inputs.hpp"
#include "safeamp/error.hpp"
#include "safeamp/memory/bytes.hpp"
#include "safeamp/sim/datasets.hpp"
#include "safeamp/sim/file_data.hpp"
#include "safeamp/sim/kill_point.hpp"
#include "safeamp/sim/parity.hpp"
#include "safeamp/sim/parity_fallback.hpp"
#include "safeamp/sim/preflight.hpp"
#include "safeamp/sim/progress.hpp"
#include "safeamp/sim/reference.hpp"
#include "safeamp/sim/report.hpp"
#include "safeamp/sim/report_files.hpp"
#include "safeamp/sim/report_invocation.hpp"
#include "safeamp/sim/scenario.hpp"
#include "safeamp/sim/stop_request.hpp"
#include "safeamp/sim/trainer.hpp"

namespace safeamp::tool {
namespace {

namespace fs = std::filesystem;
using namespace safeamp::sim;

struct sim_options {
  std::string scenario_file;
  std::string out_dir = "safeamp-out";
  // The numbers as typed, parsed by run_sim (parse_whole, parse_real): CLI11 wrapped or saturated out-of-range
  // integers and took inf as a price.
  std::optional<std::string> seed;
  std::optional<std::string> dollars_per_hour;
  bool json = false;
  bool relock = false;
  bool resume = false;
  std::optional<std::string> checkpoint_every;
  std::string memory_budget;  // a size ("8GB", "512MiB"); empty: the machine's available memory
  std::string time_budget = "24h";
  bool print_default = false;
};

// Six significant digits ("1.35621e+11", "24.2703"), for figures in messages; std::to_string's fixed six decimals
// made the time budget's refusal print "135620628000.000000 floating-point operations".
std::string g(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string mib(double bytes) {
  char buf[64];
  if (bytes >= 1024.0 * 1024.0 * 1024.0) {
    std::snprintf(buf, sizeof buf, "%.3g GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  } else {
    std::snprintf(buf, sizeof buf, "%.3g MiB", bytes / (1024.0 * 1024.0));
  }
  return buf;
}

std::string duration_text(double seconds) {
  char buf[64];
  if (seconds < 120.0) {
    std::snprintf(buf, sizeof buf, "%.2g s", seconds);
  } else if (seconds < 7200.0) {
    std::snprintf(buf, sizeof buf, "%.3g min", seconds / 60.0);
  } else {
    std::snprintf(buf, sizeof buf, "%.3g h", seconds / 3600.0);
  }
  return buf;
}

// Before anything trains: every run's configuration is valid, every fault target names a parameter, and the
// estimated memory and time fit the budgets; the estimate is printed (by rank 0: `print`) and kept for the summary.
// The estimate is one process's; the `machine_ranks` ranks of this job on this machine share its memory, so their
// estimates together must fit the memory budget.
preflight_record preflight(const sim_options& o, const std::vector<run_config>& runs, bool reference_reused,
                           int machine_ranks, bool print) {
  for (const run_config& c : runs) validate(c);
  preflight_inputs in;
  const run_config& ref = runs.front();
  if (reads_corpus(ref)) {
    sim::transformer_shape shape = ref.transformer;
    shape.context = preset_stack(ref).layers.front().context;
    const corpus_data data(shape, ref.data);  // reads and checks the corpus
    in.vocab = data.vocab_size();
    std::error_code ec;
    in.corpus_bytes = static_cast<std::int64_t>(fs::file_size(ref.data.corpus_path, ec));
    in.eval_sequences = data.eval_set().samples;
  }
  for (const run_config& c : runs) check_fault_targets(c, in.vocab);

  preflight_record r;
  r.memory_budget_bytes = o.memory_budget.empty()
                              ? static_cast<double>(available_memory_bytes())
                              : static_cast<double>(parse_bytes(o.memory_budget, "--memory-budget"));
  r.time_budget_seconds = parse_duration_seconds("--time-budget", o.time_budget);  // plan --window's parser
  // .npy inputs, targets and initial weights: a bad file exits 2 before any training; their shapes enter the estimate.
  const data_files_shape files = check_data_files(ref);
  in.file_rows = files.train_rows;
  in.file_eval_rows = files.eval_rows;
  in.file_head_width = files.output_width;
  in.file_bytes = files.bytes;
  // Initial weights are rounded to each run's parameter format: a value beyond a candidate's range exits 2 too.
  std::set<std::string> checked_formats{format_name(ref.policy.param)};
  for (const run_config& c : runs) {
    if (!c.data.initial_weights.empty() && checked_formats.insert(format_name(c.policy.param)).second) {
      (void)check_data_files(c);
    }
  }
  in.flops_per_second = measure_training_rate(reads_corpus(ref) ? model_kind::transformer : model_kind::mlp, ref.data);
  // The process's own memory is read after the calibration run: by then the training code is paged in and the
  // allocator holds its pools, which the runs keep (read before it, the estimate came out below the measured peak
  // of a tiny scenario by up to 0.3 MB, as the calibration had grown the process by 2.9-3.9 MB).
  in.base_bytes = static_cast<double>(current_rss_bytes());
  r.training_flops_per_second = in.flops_per_second;
  const preflight_estimate e = estimate_runs(runs, reference_reused, in);
  r.estimated_peak_bytes = e.peak_bytes;
  r.estimated_seconds = e.seconds;
  r.ranks_on_this_machine = machine_ranks;
  const double machine_bytes = e.peak_bytes * machine_ranks;
  const std::string budget = r.memory_budget_bytes > 0.0 ? mib(r.memory_budget_bytes) : "unknown";
  const std::string memory = mib(e.peak_bytes) + " of memory" +
                             (machine_ranks > 1 ? " per rank, " + mib(machine_bytes) + " for the " +
                                                      std::to_string(machine_ranks) + " ranks on this machine"
                                                : "");
  if (print) {
    std::fprintf(stderr,
                 "safeamp sim: preflight: %zu run(s) of %lld parameters, about %s (budget %s) and %s "
                 "(budget %s)\n",
                 runs.size() - (reference_reused ? 1 : 0), static_cast<long long>(e.parameters), memory.c_str(),
                 budget.c_str(), duration_text(e.seconds).c_str(), duration_text(r.time_budget_seconds).c_str());
  }
  if (r.memory_budget_bytes > 0.0 && machine_bytes > r.memory_budget_bytes) {
    const estimate_term& top = e.terms.front();
    throw error("scenario memory",
                "an estimated " + memory + ", most of it " + top.what + " (" + mib(top.bytes) +
                    (machine_ranks > 1 ? " a rank)" : ")"),
                "at most the memory budget " + budget +
                    (o.memory_budget.empty() ? " (the machine's available memory)" : " (--memory-budget)") +
                    ": reduce " + top.fields + (machine_ranks > 1 ? ", run fewer ranks on this machine" : "") +
                    ", or raise --memory-budget");
  }
  if (e.seconds > r.time_budget_seconds) {
    throw error("scenario time",
                "an estimated " + duration_text(e.seconds) + " (" + g(e.flops) +
                    " floating-point operations at a measured " + g(in.flops_per_second / 1e9) + " GFLOP/s)",
                "at most the time budget " + duration_text(r.time_budget_seconds) + " (--time-budget): reduce " +
                    e.time_fields + ", or raise --time-budget");
  }
  return r;
}

// Checkpoints of the runs of one invocation: checkpoints/<slug of the run's label>.ckpt, saved every
// `every` steps and after the last step; resumed from when --resume finds them.
class run_checkpoints {
 public:
  run_checkpoints(fs::path dir, std::int64_t every, bool resume, data_parallel_run& ranks,
                  const std::vector<run_config>& runs)
      : dir_(std::move(dir)), every_(every), resume_(resume), ranks_(&ranks) {
    for (const run_config& c : runs) files_.push_back(file_slug(c.label) + ".ckpt");
  }

  // Trains `cfg` with checkpointing, continuing from its checkpoint when resuming and one exists.
  run_result train_run(run_config cfg, const step_observer& on_step) {
    const fs::path file = dir_ / (file_slug(cfg.label) + ".ckpt");
    std::error_code ec;
    if (every_ > 0 && ranks_->writes_outputs()) {
      cfg.checkpoint.save_path = file.string();
      cfg.checkpoint.save_every = every_;
    }
    if (resume_ && fs::is_regular_file(file, ec)) {
      cfg.checkpoint.resume_path = file.string();
      ++resumed_;
      if (ranks_->writes_outputs()) {  // every rank continues from rank 0's checkpoint; rank 0 says so
        std::fprintf(stderr, "safeamp sim: --resume: %s continues from %s\n", cfg.label.c_str(), file.string().c_str());
      }
    }
    return train(cfg, on_step, ranks_->exchange_for(cfg));
  }

  // When resuming: the checks train_run's resume will make of `cfg`'s checkpoint (intact, of this run's settings),
  // made now, so a bad checkpoint of the last run is refused before the first run trains.
  void check(run_config cfg) {
    const fs::path file = dir_ / (file_slug(cfg.label) + ".ckpt");
    std::error_code ec;
    if (!resume_ || !fs::is_regular_file(file, ec)) return;
    cfg.checkpoint.resume_path = file.string();
    check_resume(cfg, ranks_->exchange_for(cfg));
  }

  // Removes the checkpoints of this scenario's runs, <slug>.ckpt, and their temporaries (<slug>.ckpt.tmp-<pid>-<n>)
  // (stale ones of an invocation not resumed, or all of them once this invocation has finished); returns how
  // many. Nothing else in the folder is touched: until 2026-12-06 any name containing ".ckpt" went, a user's
  // "epoch=3-step=1000.ckpt" included.
  std::size_t clear() const {
    std::vector<fs::path> ours;
    std::error_code ec;
    for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      const bool own = owns(name) || std::any_of(files_.begin(), files_.end(),
                                                 [&name](const std::string& f) { return is_temporary_of(name, f); });
      if (own && fs::is_regular_file(fs::symlink_status(it->path(), ec))) ours.push_back(it->path());
    }
    std::size_t removed = 0;
    for (const fs::path& p : ours) {
      std::error_code rm;
      if (fs::remove(p, rm)) {
        ++removed;
        kill_point("removed " + p.filename().string());
      }
    }
    return removed;
  }

  [[nodiscard]] int resumed() const noexcept { return resumed_; }

  // True for the checkpoint file name of one of the scenario's runs ("<slug>.ckpt").
  [[nodiscard]] bool owns(std::string_view file_name) const {
    return std::find(files_.begin(), files_.end(), file_name) != files_.end();
  }

 private:
  fs::path dir_;
  std::int64_t every_;
  bool resume_;
  data_parallel_run* ranks_;
  std::vector<std::string> files_;  // <slug>.ckpt of every run of the scenario
  int resumed_ = 0;
};

// Writes `text` to `stream` whole: fputs stopped at an embedded NUL and dropped the rest in silence.
void print_all(const std::string& text, std::FILE* stream) { std::fwrite(text.data(), 1, text.size(), stream); }

constexpr std::int64_t max_int64 = std::numeric_limits<std::int64_t>::max();

// --checkpoint-every, or by default about ten checkpoints per run.
std::int64_t checkpoint_interval(const sim_options& o, const scenario& s) {
  if (o.checkpoint_every) {
    return parse_whole("--checkpoint-every", *o.checkpoint_every, 0, max_int64,
                       "a step count >= 1 (a whole number up to 2^63 - 1), or 0 for none");
  }
  return std::max<std::int64_t>(1, (s.base.steps + 9) / 10);
}

std::string scaler_text(const scaler_choice& s) {
  switch (s.kind) {
    case scaler_kind::none:
      return "none";
    case scaler_kind::static_scale:
      return "static " + g(static_cast<double>(s.static_scale));
    case scaler_kind::dynamic: {
      // Every field that shapes the trajectory: two runs that differ only in hysteresis or a cap used to read alike.
      const scaler_config& d = s.dynamic;
      std::string t = "dynamic (init " + g(static_cast<double>(d.init_scale)) + ", x" + g(d.growth_factor) + " every " +
                      std::to_string(d.growth_interval) + " clean steps, x" + g(d.backoff_factor) + " on overflow";
      if (d.hysteresis > 1) {
        t += d.mode == hysteresis_mode::consecutive
                 ? " after " + std::to_string(d.hysteresis) + " consecutive overflows"
                 : " after " + std::to_string(d.hysteresis) + " overflows since the last growth";
      }
      t += ", floor " + g(static_cast<double>(d.min_scale));
      if (d.max_scale < float_max) t += ", cap " + g(static_cast<double>(d.max_scale));
      if (d.max_overflows_at_min > 0) {
        t += ", error after " + std::to_string(d.max_overflows_at_min) +
             (d.max_overflows_at_min == 1 ? " overflow" : " overflows") + " at the floor";
      }
      return t + ")";
    }
  }
  return "?";
}

// At most this many steps of one fault are listed; the rest are counted ("... (N more)"), as skipped steps are.
constexpr std::size_t fault_steps_listed = 12;

std::string faults_text(const std::vector<fault_spec>& faults) {
  std::string out;
  for (const fault_spec& f : faults) {
    if (!out.empty()) out += "; ";
    out += to_string(f.kind);
    if (is_loss_fault(f.kind)) out.append(" x").append(g(f.factor));
    if (!f.target.empty()) out.append(" in ").append(f.target);
    out += f.steps.size() == 1 ? " at step" : " at steps";
    const std::size_t listed = std::min(f.steps.size(), fault_steps_listed);
    for (std::size_t i = 0; i < listed; ++i) out.append(i ? "," : " ").append(std::to_string(f.steps[i]));
    if (listed < f.steps.size()) out += " ... (" + std::to_string(f.steps.size() - listed) + " more)";
  }
  return out;
}

// The folders an accepted invocation creates (the output folder and its missing parents, then reference/,
// telemetry/ and checkpoints/), so that one that fails before its folder changed (a disk that is full, a folder
// changed meanwhile) takes them back and leaves the file system as it found it.
class new_folders {
 public:
  // Creates `dir` and its missing parents, remembering those this call created, then checks it as
  // prepare_output_folder does (a directory this user may write; its refusals name --out).
  void create(const fs::path& dir) {
    std::vector<fs::path> missing;  // `dir` first, then its missing parents
    std::error_code ec;
    for (fs::path p = dir.has_filename() ? dir : dir.parent_path();  // "out/" is "out"
         !p.empty() && !fs::exists(fs::symlink_status(p, ec)); p = p.parent_path()) {
      missing.push_back(p);
      if (p == p.parent_path()) break;  // a root
    }
    for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
      if (!fs::create_directory(*it, ec)) break;  // made meanwhile, or failed: prepare_output_folder says why
      made_.push_back(*it);
    }
    prepare_output_folder(dir);
  }

  // Removes the folders it created, deepest first, each only while it is an empty folder (fs::remove is rmdir):
  // nothing another process put there since is lost.
  void remove_empty() noexcept {
    for (auto it = made_.rbegin(); it != made_.rend(); ++it) {
      std::error_code ec;
      if (fs::is_directory(fs::symlink_status(*it, ec))) fs::remove(*it, ec);
    }
    made_.clear();
  }

 private:
  std::vector<fs::path> made_;  // in the order created
};

// Prints incomplete_note when the invocation leaves run_sim by an exception from just before its first change
// (begin_invocation) on, and the folder is marked INCOMPLETE then, so the error that follows is read with what the
// folder holds. (Until 2026-12-07 it was created after begin_invocation returned: a failure right after the marker was
// written, or while the previous outputs moved, left a marked folder and said nothing of it; and a failure after the
// marker was removed said the folder was marked.)
class unfinished_note {
 public:
  explicit unfinished_note(fs::path out) : out_(std::move(out)) {}
  unfinished_note(const unfinished_note&) = delete;
  unfinished_note& operator=(const unfinished_note&) = delete;
  ~unfinished_note() {
    if (!finished_ && invocation_incomplete(out_)) std::fprintf(stderr, "%s\n", incomplete_note(out_).c_str());
  }
  void finished() noexcept { finished_ = true; }

 private:
  fs::path out_;
  bool finished_ = false;
};

// While the runs train, SIGINT (Ctrl-C), SIGTERM (a batch system's notice before its time limit) and SIGUSR1 (the
// signal a batch script asks for, e.g. Slurm's --signal=USR1@120) ask the trainer to stop at the end of the step in
// progress and save that run's checkpoint (stop_request.hpp); the invocation then ends with exit code 128 + the
// signal, as a shell reports a process a signal ended, its folder marked for --resume. The first such signal does
// that; its handler restores the default action of all three, so a second one ends the process at once
// (crash-consistent, as a kill is). A signal ignored when the tool started (nohup, a background job of a script)
// stays ignored. Under mpirun SIGUSR1 only: mpirun passes it on to every rank (Open MPI forwards SIGUSR1 and SIGUSR2),
// and the ranks agree on the step to stop after (train() takes the MAX of their requests after every step), while a
// SIGINT or SIGTERM sent to mpirun ends the job itself (SIGTERM to each rank, SIGKILL a second later), which a
// handler here could not outrun.
class stop_on_signals {
 public:
  stop_on_signals() {
    const bool ranks = launched_by_mpirun();
    for (std::size_t i = 0; i < std::size(signals_); ++i) {
      if (!ranks || signals_[i] == SIGUSR1) installed_[i] = install(signals_[i], &old_[i]);
    }
  }
  ~stop_on_signals() {
    for (std::size_t i = 0; i < std::size(signals_); ++i) {
      if (installed_[i]) ::sigaction(signals_[i], &old_[i], nullptr);
    }
  }
  stop_on_signals(const stop_on_signals&) = delete;
  stop_on_signals& operator=(const stop_on_signals&) = delete;

 private:
  static constexpr int signals_[3] = {SIGINT, SIGTERM, SIGUSR1};

  static bool install(int sig, struct sigaction* old) {
    if (::sigaction(sig, nullptr, old) != 0 || old->sa_handler == SIG_IGN) return false;
    struct sigaction sa {};
    sa.sa_handler = &on_signal;
    sa.sa_flags = SA_RESTART;  // a read, write or fsync under way goes on: only the step loop acts on the request
    sigemptyset(&sa.sa_mask);
    for (int other : signals_) sigaddset(&sa.sa_mask, other);  // one handler at a time
    return ::sigaction(sig, &sa, nullptr) == 0;
  }

  // Async-signal-safe: an atomic store and sigaction. Only the signals this object installed go back to their
  // default action (under mpirun SIGINT and SIGTERM were never ours).
  static void on_signal(int sig) {
    request_stop(sig);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    for (std::size_t i = 0; i < std::size(signals_); ++i) {
      struct sigaction now {};
      if (::sigaction(signals_[i], nullptr, &now) == 0 && now.sa_handler == &on_signal) {
        ::sigaction(signals_[i], &dfl, nullptr);
      }
    }
  }

  struct sigaction old_[3]{};
  bool installed_[3] = {false, false, false};
};

std::string signal_text(int sig) {
  switch (sig) {
    case SIGINT:
      return "SIGINT (Ctrl-C)";
    case SIGTERM:
      return "SIGTERM";
    case SIGUSR1:
      return "SIGUSR1";
    default:
      return "signal " + std::to_string(sig);
  }
}

// What a stopped run leaves, for the user: where it stopped and how to continue.
std::string stopped_text(const run_stopped& e) {
  const std::string where = "step " + std::to_string(e.steps_done()) + " of " + std::to_string(e.steps());
  std::string t = "safeamp sim: stopped by " + signal_text(e.signal()) + " ";
  if (!e.checkpoint().empty()) {
    return t + "after " + where + " of run '" + e.label() + "'; its checkpoint " + e.checkpoint() +
           " holds that step: rerun with --resume to continue from it";
  }
  if (e.steps_done() == 0) return t + "before run '" + e.label() + "' trained a step: rerun with --resume to continue";
  return t + "after " + where + " of run '" + e.label() +
         "', which saves no checkpoint (--checkpoint-every 0): a rerun trains it from its first step";
}

scenario load_scenario(const sim_options& o) {
  if (o.scenario_file.empty()) return parse_scenario(default_scenario_json(), "embedded default");
  return parse_scenario(read_input_file(o.scenario_file, "--scenario"), o.scenario_file);
}

int run_sim(const sim_options& o) {
  if (o.print_default) {
    std::fputs(std::string(default_scenario_json()).c_str(), stdout);
    std::fputs("\n", stdout);
    return exit_ok;
  }
  const auto t0 = std::chrono::steady_clock::now();
  kill_point("start");  // the crash-consistency hook's settings are read (and a malformed one refused) here
  // --seed and --dollars-per-hour before the scenario is read, so a typo is reported first (--checkpoint-every in
  // checkpoint_interval, before the preflight). The seed's range is the scenario's own (training.seed).
  const std::optional<std::int64_t> seed =
      o.seed ? std::optional(parse_whole("--seed", *o.seed, 0, max_int64, "a whole number 0 .. 2^63 - 1"))
             : std::nullopt;
  const std::optional<double> dollars_per_hour =
      o.dollars_per_hour ? std::optional(parse_real("--dollars-per-hour", *o.dollars_per_hour, 0.0,
                                                    std::numeric_limits<double>::max(), false, "a finite number >= 0"))
                         : std::nullopt;
  scenario s = load_scenario(o);
  if (seed) override_seed(s, static_cast<std::uint64_t>(*seed));
  if (dollars_per_hour) s.dollars_per_hour = *dollars_per_hour;
  // Every check of the configurations, the budgets, the output folder and the data happens before minutes
  // of training.
  const fs::path out = o.out_dir;
  const fs::path ref_file = out / "reference" / "reference.json";
  // Under mpirun every rank runs this function; each trains its share, rank 0 alone writes.
  data_parallel_run ranks(s);
  const run_config ref_cfg = ranks.configure(reference_config(s), true);
  const std::int64_t every = checkpoint_interval(o, s);
  std::vector<run_config> runs = {ref_cfg};
  for (const candidate_spec& c : s.candidates) runs.push_back(ranks.configure(candidate_config(s, c), false));
  for (run_config& c : runs) {
    if (every > 0) {  // as run_checkpoints will set it, so the estimate counts the checkpoints
      c.checkpoint.save_path = "checkpoint";
      c.checkpoint.save_every = every;
    }
  }
  const bool writer = ranks.writes_outputs();
  std::error_code exists_ec;
  const int machine_ranks = ranks.ranks_on_this_machine();  // every rank, before any of them can fail a check
  const preflight_record pre = preflight(o, runs, !o.relock && fs::exists(ref_file, exists_ec), machine_ranks, writer);
  // The folder is this invocation's from here to the end, or another's and refused before anything is read.
  // Nothing is created or changed in it until every check has passed, so a refused invocation leaves the file
  // system as it found it: a folder with a lock file is locked now, before anything in it is read; one without
  // (new, or not yet used by safeamp sim) once its checks have passed, creating the file (below).
  std::optional<output_folder_lock> lock;
  if (writer) {
    std::error_code ec;
    if (fs::exists(fs::symlink_status(out / lock_file_name, ec))) {
      lock.emplace(out);
      kill_point("locked " + std::string(lock_file_name));
    }
    // The folders there are now must be directories this user may write (asked of the kernel, changing nothing:
    // until 2026-12-07 a probe file, created and removed, changed the folder's modification time); the missing
    // ones are created once the invocation is accepted.
    for (const fs::path& dir : {out, out / "reference", out / "telemetry", out / "checkpoints"}) {
      if (fs::exists(dir, ec)) check_writable_folder(dir);
    }
    // decisions.jsonl is appended to after every run has trained: a directory or link there is refused now.
    if (fs::is_directory(out, ec)) check_decisions_file(out / decisions_file_name);
  }
  run_checkpoints checkpoints(out / "checkpoints", every, o.resume, ranks, runs);
  const run_manifest ref_manifest = manifest_for(s, ref_cfg);
  const fs::path known_good_file = out / known_good_file_name;
  std::optional<known_good_record> last_good = read_known_good(known_good_file);

  sim_summary summary;
  summary.scenario = s.name;
  summary.description = s.description;
  summary.dollars_per_hour = s.dollars_per_hour;
  summary.recorded_loss_factor = s.base.loss_weight * s.loss_multiplier;
  summary.preflight = pre;

  std::error_code ec;
  const bool reuse_reference = !o.relock && fs::exists(ref_file, ec);
  if (reuse_reference) {
    locked_reference ref = read_reference(ref_file);
    // Every setting that changes the reference's numbers (its policy included) must be the one it was locked with.
    require_matching_manifest(ref.manifest, ref_manifest, manifest_check::reuse);
    for (const manifest_difference& d : compare_manifests(ref.manifest, ref_manifest, manifest_check::reuse)) {
      if (!d.refuses) summary.environment_notes.push_back(d);
    }
    summary.reference = std::move(ref);
    summary.reference_reused = true;
  }
  // --resume: every run's checkpoint is checked before the first run trains.
  for (std::size_t i = reuse_reference ? 1 : 0; i < runs.size(); ++i) checkpoints.check(runs[i]);
  // The locked reference's telemetry stays with reference.json when it is that reference's (its losses are the
  // reference's loss curve): a --relock that failed between the two left another reference's telemetry beside
  // it. When it is another's it goes with the previous outputs. Under --relock it stays until the new reference's
  // replaces it, and a copy goes with the previous outputs.
  const std::string ref_telemetry = file_slug(ref_cfg.label) + ".jsonl";
  std::vector<std::string> kept_telemetry;
  if (fs::exists(ref_file, ec)) {
    std::optional<std::vector<double>> locked_curve;
    if (reuse_reference) {
      locked_curve = summary.reference.loss_curve;
    } else {
      try {
        locked_curve = read_reference(ref_file).loss_curve;
      } catch (const error&) {  // a damaged reference --relock replaces: its telemetry belongs to nothing
      }
    }
    const fs::path file = out / "telemetry" / ref_telemetry;
    if (locked_curve && reference_telemetry_matches(file, *locked_curve)) {
      kept_telemetry.push_back(ref_telemetry);
    } else if (writer && fs::exists(fs::symlink_status(file, ec))) {
      std::fprintf(stderr,
                   "safeamp sim: %s is not the locked reference's telemetry (its losses are not reference.json's "
                   "loss curve): it goes with the previous invocation's outputs\n",
                   file.string().c_str());
    }
  }
  // The last check: only files safeamp sim wrote are ever moved or removed. Then the folder changes: the folders
  // are created and locked, checked again (begin_invocation), marked INCOMPLETE until all is written, the previous
  // invocation's outputs move into previous/, and stale checkpoints of this scenario's runs go (unless resuming).
  std::optional<unfinished_note> note;
  if (writer) {
    check_invocation(out);
    new_folders made_out;  // the output folder and its missing parents
    new_folders made_inside;
    invocation_cleanup moved;
    try {
      made_out.create(out);
      if (!lock) {
        lock.emplace(out);
        // The folder had no lock file when it was checked: another invocation that created one since may have
        // changed what was checked (a lock file, once there, stays: see output_folder_lock).
        if (!lock->created_file()) {
          throw error("--out",
                      "'" + out.string() +
                          "' (another safeamp sim began writing into it while this one checked it; nothing here was "
                          "changed)",
                      "an output folder no other invocation is writing into: run again once that one has finished, "
                      "or pass another --out");
        }
        kill_point("locked " + std::string(lock_file_name));
      }
      for (const char* sub : {"reference", "telemetry", "checkpoints"}) made_inside.create(out / sub);
      note.emplace(out);
      moved = begin_invocation(
          out, {.scenario = s.name, .kept_telemetry = kept_telemetry, .kept_also_in_previous = !reuse_reference});
    } catch (...) {
      // Refused or failed before the folder changed (or with begin_invocation's first change): what this
      // invocation created goes, the lock file only when it is alone in its folder (remove_if_alone), the folders
      // only when empty. A folder begin_invocation did change keeps its marker and the lock file.
      made_inside.remove_empty();
      if (lock) (void)lock->remove_if_alone();
      made_out.remove_empty();
      throw;
    }
    // A killed writer's temporaries are removed when their file is written again; these folders may hold
    // some whose file this run does not rewrite (a reused reference's telemetry), so sweep them now: those of the
    // files safeamp sim writes there, and no other (a user's "notes.tmp-123" is not ours).
    const auto any_of_names = [](std::initializer_list<std::string_view> names) {
      return [names = std::vector<std::string_view>(names)](std::string_view target) {
        return std::find(names.begin(), names.end(), target) != names.end();
      };
    };
    (void)remove_stale_temporaries_in(
        out, any_of_names({"report.html", "summary.json", "data_parallel.json", known_good_file_name,
                           decisions_file_name, incomplete_marker_name, outputs_record_name}));
    (void)remove_stale_temporaries_in(out / "reference", [](std::string_view target) {
      return target == "reference.json" || (target.starts_with("reference-") && target.ends_with(".json"));
    });
    (void)remove_stale_temporaries_in(out / "telemetry",
                                      [](std::string_view target) { return target.ends_with(".jsonl"); });
    (void)remove_stale_temporaries_in(out / "checkpoints",
                                      [&checkpoints](std::string_view target) { return checkpoints.owns(target); });
    if (!o.resume) {
      if (const std::size_t stale = checkpoints.clear(); stale > 0) {
        std::fprintf(stderr,
                     "safeamp sim: removed %zu checkpoint file(s) of an interrupted run (--resume continues one)\n",
                     stale);
      }
    }
    if (!moved.moved.empty()) {
      std::fprintf(stderr,
                   "safeamp sim: the previous invocation's report, summary and telemetry (%zu file(s)) are "
                   "now in %s\n",
                   moved.moved.size(), (out / previous_folder_name).string().c_str());
    }
    if (!moved.removed.empty()) {
      std::fprintf(stderr, "safeamp sim: removed %zu partial output file(s) of an invocation that did not finish\n",
                   moved.removed.size());
    }
    if (moved.withdrawn_decisions > 0) {
      std::fprintf(stderr, "safeamp sim: withdrew the %zu line(s) an invocation that did not finish appended to %s\n",
                   moved.withdrawn_decisions, (out / decisions_file_name).string().c_str());
    }
    if (moved.restored_known_good) {
      // The record this invocation's decisions name is the one from before the unfinished invocation.
      last_good = read_known_good(known_good_file);
      std::fprintf(stderr, "safeamp sim: put %s back as it was before the invocation that did not finish replaced it\n",
                   known_good_file.string().c_str());
    }
  }
  // Progress in steps over every run this invocation trains: a redrawn line on a terminal, plain lines otherwise.
  std::int64_t total_steps = 0;
  for (std::size_t i = reuse_reference ? 1 : 0; i < runs.size(); ++i) total_steps += runs[i].steps;
  const std::int64_t run_count = static_cast<std::int64_t>(runs.size()) - (reuse_reference ? 1 : 0);
  // Only the rank that writes the outputs reports progress.
  progress_bar bar(total_steps, writer ? stderr : nullptr, writer && stream_is_terminal(stderr), {.plain_lines = true});
  std::int64_t steps_before = 0;  // steps of the runs already trained
  std::int64_t run_number = 0;
  // The observer of the next run; counts its steps into steps_before once created.
  const auto observe = [&](const run_config& cfg) {
    ++run_number;
    const std::int64_t base = steps_before;
    steps_before += cfg.steps;
    return [&bar, base, label = cfg.label, n = run_number, run_count](std::int64_t done, std::int64_t steps) {
      bar.update(base + done, label + " (run " + std::to_string(n) + "/" + std::to_string(run_count) + ", step " +
                                  std::to_string(done) + "/" + std::to_string(steps) + ")");
    };
  };
  std::optional<stop_on_signals> stop_on;  // while the runs train (on every rank: a SIGUSR1 may reach one only)
  stop_on.emplace();
  if (!reuse_reference) {
    const run_result ref_run = checkpoints.train_run(ref_cfg, observe(ref_cfg));
    summary.reference = lock_reference(ref_run, ref_manifest);
    ranks.record(ref_run);
    // Its telemetry first and reference.json last, so a reference.json is never beside another reference's
    // telemetry (until 2026-12-06 a failed telemetry write left the new reference with the old one's).
    // --relock never deletes a reference: only now that the new one is trained and checked, the old file is
    // kept beside it under its id and lock time, then reference.json is replaced atomically.
    if (writer) {
      write_invocation_output(out, fs::path("telemetry") / ref_telemetry, telemetry_jsonl(ref_run));
      if (fs::exists(ref_file, ec)) {
        const fs::path kept = keep_previous_reference(ref_file);
        std::fprintf(stderr, "safeamp sim: --relock: the previous reference is kept as %s\n", kept.string().c_str());
      }
      write_reference(ref_file, summary.reference);
    }
  }
  if (reuse_reference) ranks.record_reused(summary.reference);
  const locked_reference& ref = summary.reference;

  std::vector<parity_result> results;
  for (std::size_t i = 0; i < s.candidates.size(); ++i) {
    const candidate_spec& c = s.candidates[i];
    const run_config cfg = ranks.configure(candidate_config(s, c), false);
    candidate_outcome k;
    k.name = c.name;
    k.scaler = scaler_text(c.scaler);
    k.faults = faults_text(c.faults);
    k.scaler_type = c.scaler.kind;
    k.scaler_settings = c.scaler.dynamic;
    k.fault_list = c.faults;
    k.expect = c.expect;
    k.run = checkpoints.train_run(cfg, observe(cfg));
    ranks.record(k.run);
    run_manifest m = manifest_for(s, cfg);
    m.probe_rows = k.run.probe_rows;
    m.probe_cols = k.run.probe_cols;
    require_matching_manifest(ref.manifest, m, manifest_check::candidate);
    k.parity = evaluate_parity(ref, k.run, tolerances_for(s, c));
    k.parity.candidate = c.name;
    k.parity.scaler = k.scaler;
    k.parity.faulted = !c.faults.empty();
    k.telemetry_file = "telemetry/" + file_slug(c.name) + ".jsonl";
    if (writer) write_invocation_output(out, k.telemetry_file, telemetry_jsonl(k.run));
    results.push_back(k.parity);
    summary.candidates.push_back(std::move(k));
  }
  bar.finish();
  stop_on.reset();
  if (const int sig = stop_requested(); sig != 0) {  // during the last run's evaluation, after its last step
    if (writer) {
      std::fprintf(stderr, "safeamp sim: %s arrived once every run had trained: the outputs are written as usual\n",
                   signal_text(sig).c_str());
    }
    clear_stop_request();
  }

  // Verdicts and fallbacks. A known-good record of another reference (another scenario, or the reference before
  // a --relock) is not named.
  std::vector<fallback_decision> decisions;
  bool all_expected = true;
  for (candidate_outcome& k : summary.candidates) {
    k.decision = decide_fallback(k.parity, s.baselines, results, last_good, to_string(s.base.policy), ref.reference_id);
    k.as_expected = meets_expectation(k.expect, k.parity.outcome);
    all_expected = all_expected && k.as_expected;
    decisions.push_back(k.decision);
  }
  if (!writer) return ranks.finish(out, all_expected ? exit_ok : exit_check_failed);  // the others write nothing
  summary.exit_code = all_expected ? exit_ok : exit_check_failed;
  summary.peak_rss_bytes = peak_rss_bytes();
  summary.total_wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  summary.data_parallel = ranks.summary();  // the report's "Data parallel" section (one process: none)

  // The outputs in this order, summary.json last: a failure partway leaves no summary (whose exit_code would
  // read as a finished invocation's) and no record kept across invocations changed before the report is written.
  const std::string json_text = render_summary_json(summary);
  write_invocation_output(out, "report.html", render_html_report(summary));
  // data_parallel.json, when the scenario is data parallel (its table on stderr under --json: stdout is JSON)
  (void)ranks.finish(out, summary.exit_code, o.json ? stderr : stdout);
  if (fs::is_regular_file(fs::symlink_status(out / "data_parallel.json", ec))) {
    record_invocation_output(out, "data_parallel.json");
  }
  // Appended once per invocation: the bytes are recorded first, and the next start withdraws them if this
  // invocation does not finish (a --resume after a failure appended every decision a second time).
  append_decisions(out / decisions_file_name, decisions, [&out](std::uintmax_t offset, std::string_view written) {
    record_decisions_append(out, offset, written);
  });
  // A PASS with injected faults is no evidence for its policy: not recorded as known-good. The last candidate that
  // passed is the record; what the file held before is recorded first, so that the next start puts it back if this
  // invocation does not finish.
  std::optional<known_good_record> good;
  for (const candidate_outcome& k : summary.candidates) {
    if (k.parity.outcome == verdict::pass && !k.parity.faulted) {
      good = known_good_record{k.name, k.parity.policy, k.scaler, s.name, ref.reference_id, k.decision.decided_utc};
    }
  }
  if (good) {
    std::optional<std::string> before;  // the file as it is, byte for byte (read and checked at the start)
    if (last_good) before = read_input_file(known_good_file, "known-good record");
    record_known_good_replacement(out, before, known_good_json_text(*good));
    write_known_good(known_good_file, *good);
  }
  write_invocation_output(out, "summary.json", json_text);
  // Everything is written: the checkpoints of this invocation have served their purpose (and their folder,
  // when nothing else is in it).
  (void)checkpoints.clear();
  std::error_code rm_ec;
  if (fs::remove(out / "checkpoints", rm_ec)) kill_point("removed checkpoints");
  finish_invocation(out);  // the last step: a folder without the marker holds a whole invocation's outputs
  note->finished();
  if (o.resume && checkpoints.resumed() == 0) {
    std::fputs("safeamp sim: --resume: no checkpoint was found, every run started from its first step\n", stderr);
  }
  const std::string files = "wrote " + (out / "report.html").string() + ", " + (out / "summary.json").string() + ", " +
                            (out / "telemetry").string() + "/*.jsonl, " + ref_file.string() + ", " +
                            (out / "decisions.jsonl").string() + "\n";
  if (o.json) {
    print_all(json_text, stdout);
    print_all(files, stderr);
  } else {
    print_all(render_terminal_summary(summary), stdout);
    print_all(files, stdout);
  }
  return summary.exit_code;
}

const register_command reg{tool_command{
    "sim", 20, [](CLI::App& app, int& exit_code) {
      auto* cmd = app.add_subcommand(
          "sim",
          "Run a scenario on the CPU simulator: lock the fp32 reference, train the candidates, apply the parity gate "
          "and write the report (no arguments: the embedded default scenario)");
      auto o = std::make_shared<sim_options>();
      cmd->add_option("--scenario", o->scenario_file, "scenario JSON file (default: the embedded default scenario)");
      cmd->add_option("--out", o->out_dir, "output folder (report.html, summary.json, telemetry/, reference/)")
          ->capture_default_str();
      cmd->add_option("--seed", o->seed, "training seed (initialisation, batch order), overrides the scenario's");
      cmd->add_option("--dollars-per-hour", o->dollars_per_hour, "machine price for the cost section");
      cmd->add_flag("--json", o->json, "print the summary as JSON instead of the table");
      cmd->add_flag("--relock", o->relock,
                    "record a new reference even when the output folder holds one; the old reference.json is "
                    "kept beside it as reference/reference-<id>-<locked time>.json");
      cmd->add_flag("--resume", o->resume,
                    "continue an interrupted invocation with the same scenario and --out: runs with a checkpoint in "
                    "<out>/checkpoints continue from it, bit-identically to an uninterrupted run");
      cmd->add_option("--checkpoint-every", o->checkpoint_every,
                      "steps between the checkpoints of each run (default: about ten per run; 0: none)");
      cmd->add_option("--memory-budget", o->memory_budget,
                      "refuse a scenario whose estimated peak memory exceeds this size (e.g. 8GB, 512MiB; default: "
                      "the machine's available memory); under mpirun the ranks on one machine share it");
      cmd->add_option("--time-budget", o->time_budget,
                      "refuse a scenario whose estimated training time exceeds this (e.g. 90s, 15m, 8h)")
          ->capture_default_str();
      cmd->add_flag("--print-default-scenario", o->print_default, "print the embedded default scenario and exit");
      cmd->callback([o, &exit_code] {
        exit_code = run_on_every_rank([&] {
          try {
            return run_sim(*o);
          } catch (const run_stopped& e) {  // the folder's note is printed as run_sim unwinds
            // Every rank of a data-parallel job stops after the same step (train() agrees on it); rank 0, the one
            // that writes the outputs and the checkpoints, says where.
            if (!launched_by_mpirun() || !mpi_available() || mpi_world().rank() == 0) {
              std::fprintf(stderr, "%s\n", stopped_text(e).c_str());
            }
            return 128 + e.signal();
          }
        });
      });
    }}};

}  // namespace
}  // namespace safeamp::tool
