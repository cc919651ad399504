// The locked fp32 reference: what an fp32 run of a scenario produced (loss curve, held-out metrics and
// slices, golden logits of the probe batch) plus a manifest saying exactly what ran where. It is written
// atomically, versioned, and refused when anything that changes the run's numbers differs.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "safeamp/sim/run_config.hpp"
#include "safeamp/sim/run_result.hpp"

namespace safeamp::sim {

/// Version of the reference file layout; a file with another version is refused. 2: every setting that
/// changes the reference's numbers is in the manifest, one field each, with its scope. 3: final_eval.regression,
/// a regression's trivial-predictor losses (null for a classifier), which the parity gate's loss checks use.
/// 4: final_eval.class_prior, a classifier's (the held-out labels' class frequencies; null for a regression).
inline constexpr int reference_format_version = 4;

/// Which comparisons a manifest field takes part in.
enum class manifest_scope : std::uint8_t {
  shared,          // the same for every run of a scenario (model, data, seeds, steps, optimizer, build):
                   // compared when a lock is reused and for every candidate
  reference_only,  // the reference run's own numerics (policy, rounding, scaler, faults, master weights):
                   // compared when a lock is reused; a candidate legitimately differs
  environment,     // recorded and reported, never refused (compiler, hardware, threads)
  label,           // recorded only (the scenario's name: a renamed scenario may reuse its lock)
};
[[nodiscard]] const char* scope_name(manifest_scope s) noexcept;  // "shared", "reference_only", ...

/// What a manifest is compared for: reusing a locked reference for this run, or checking that a candidate
/// run is comparable with the reference.
enum class manifest_check : std::uint8_t { reuse, candidate };

/// One scenario setting: a dotted name as in the scenario file ("optimizer.beta2") and its canonical
/// text (numbers in the shortest form that reads back to the same double, see manifest_number).
struct manifest_setting {
  std::string field;
  std::string value;
  manifest_scope scope = manifest_scope::shared;
  friend bool operator==(const manifest_setting&, const manifest_setting&) = default;
};

/// Every setting of a run that changes its numbers, one field each with its scope and canonical text: the
/// model's shape, the data, training.clip_norm and .loss_weight, every optimizer hyper-parameter, the
/// rounding, the scaler and the faults. The one list both the manifest (manifest_for) and the checkpoint
/// fingerprint (run_fingerprint) are built from. Seeds, steps, batch size and policy are not in it (the
/// manifest keeps them as typed members); label, threads, checkpointing and record_layer_counts change no
/// number and are left out. A file (the corpus, .npy and .npz data, initial weights) appears by its name without
/// its folder, its size and the FNV-1a 64 of its bytes, so a run from another working directory or a moved
/// scenario folder keeps its settings; reading or hashing it may throw safeamp::error naming its field.
[[nodiscard]] std::vector<manifest_setting> run_settings(const run_config& c);

/// FNV-1a over run_settings(c) plus the seeds, steps, batch size, policy and whether master weights are
/// kept, and this build's library version and bit-changing flags (run_fingerprint(c, bit_changing_environment())): a
/// checkpoint resumes only a run whose fingerprint it carries.
[[nodiscard]] std::uint64_t run_fingerprint(const run_config& c);

/// Canonical names used in run_settings (and in reports).
[[nodiscard]] std::string rounding_name(rounding r);                              // "nearest_even", ..., "stochastic"
[[nodiscard]] std::string scaler_setting(const scaler_choice& s);                 // "dynamic init_scale=65536 ..."
[[nodiscard]] std::string faults_setting(const std::vector<fault_spec>& faults);  // "none" or "<kind> ..."

/// What ran and where. The typed members are the ones the report shows; `settings` holds every other
/// hyper-parameter, one field each. Each field's scope says where it refuses (manifest_scope).
struct run_manifest {
  std::string scenario;  // label: recorded, not compared
  // Summaries for the report (recorded, not compared: every part of them is a field below).
  std::string model;      // e.g. "mlp input_dim=16 hidden_dim=32 hidden_layers=1 classes=4 activation=gelu"
  std::string data;       // dataset / corpus description
  std::string optimizer;  // e.g. "adamw lr=0.003 clip=1"
  // shared
  std::string data_fingerprint;  // FNV-1a of the data's bytes and settings (hex)
  std::uint64_t seed = 0;        // model init + batch order + stochastic rounding
  std::uint64_t data_seed = 0;   // dataset generation / split
  std::int64_t steps = 0;
  std::int64_t batch_size = 0;
  std::int64_t probe_rows = 0;  // shape of the probe logits; 0 = not known yet (before the run)
  std::int64_t probe_cols = 0;
  std::string library_version;
  std::string float_flags;                 // the build flags that change bits (see build_environment)
  std::vector<manifest_setting> settings;  // model.*, data.*, training.*, optimizer.*, rounding.*, reference.*
  // reference_only
  std::string policy;  // to_string(policy), which parse_policy reads back to the same policy
  // environment
  std::string compiler;
  std::string compiler_flags;
  std::string hardware;
  std::int64_t threads = 1;  // results are bit-identical for any thread count (engine determinism test)

  friend bool operator==(const run_manifest&, const run_manifest&) = default;
};

/// `v` in the shortest decimal text that reads back to the same double ("0.999", "1e-08").
[[nodiscard]] std::string manifest_number(double v);

/// The build and machine this process runs on: library version, compiler, flags (inferred from the
/// predefined macros: optimisation, NDEBUG, vector ISA), the subset of them that changes bits
/// (-ffast-math, -ffinite-math-only), CPU model and core count.
struct build_environment {
  std::string library_version;
  std::string compiler;
  std::string compiler_flags;
  std::string float_flags;
  std::string hardware;
};
[[nodiscard]] build_environment current_environment();

/// The fields of current_environment() that change bits, the others left empty: library_version and float_flags,
/// without reading the CPU's model (run_fingerprint hashes them on every call, the scenario fuzz target's included).
[[nodiscard]] build_environment bit_changing_environment();

/// The fingerprint of `c` trained by `build` (only its library_version and float_flags count).
[[nodiscard]] std::uint64_t run_fingerprint(const run_config& c, const build_environment& build);

/// One field that differs between two manifests.
struct manifest_difference {
  std::string field;
  std::string reference_value;
  std::string candidate_value;  // the value of the run compared with the reference (this run, or a candidate)
  manifest_scope scope = manifest_scope::shared;
  bool refuses = false;  // true when this field's scope refuses in this comparison
};

/// Every differing field, refusing fields first. For manifest_check::candidate, reference_only fields
/// are not compared (a candidate runs another policy, scaler and faults by design).
[[nodiscard]] std::vector<manifest_difference> compare_manifests(const run_manifest& reference, const run_manifest& now,
                                                                 manifest_check check);

/// Throws safeamp::error naming every refusing field with both values ("optimizer.beta2: reference '0.999',
/// now '0.99'") and how to proceed; environment differences are not an error (they are listed in the report).
void require_matching_manifest(const run_manifest& reference, const run_manifest& now, manifest_check check);

struct locked_reference {
  int format_version = reference_format_version;
  std::string reference_id;            // FNV-1a of the serialized content (hex); names this lock
  std::string locked_utc;
  run_manifest manifest;
  std::string label;
  std::vector<double> loss_curve;      // training loss per step
  std::vector<float> scale_curve;      // loss scale per step (1 for fp32)
  eval_metrics final_eval;
  std::vector<float> probe_logits;     // golden logits, row-major probe_rows x probe_cols
  std::int64_t probe_rows = 0;
  std::int64_t probe_cols = 0;
  std::uint64_t weights_hash = 0;
  double wall_seconds = 0.0;
  double samples_per_second = 0.0;
};

/// The reference recorded from `run` under `manifest`. Throws safeamp::error when the run is not fit to
/// be a reference: no steps, a non-finite loss, probe logits that do not match probe_rows x probe_cols, a
/// regression baseline without one finite trivial loss per slice.
[[nodiscard]] locked_reference lock_reference(const run_result& run, const run_manifest& manifest);

/// The run_result view of a reference (steps carry loss and scale only), for plotting it beside candidates.
[[nodiscard]] run_result as_run_result(const locked_reference& ref);

/// JSON text of a reference (floats written with enough digits to round-trip exactly).
[[nodiscard]] std::string to_json_text(const locked_reference& ref);
/// Parses a reference; throws safeamp::error naming the field for a corrupt, truncated or other-version file.
[[nodiscard]] locked_reference reference_from_json_text(const std::string& text);

/// Atomic write (temp + rename) of the reference to `path`.
void write_reference(const std::filesystem::path& path, const locked_reference& ref);
[[nodiscard]] locked_reference read_reference(const std::filesystem::path& path);

/// Keeps the reference at `path` under a name in the same folder that says what it is and is not in use:
/// "reference-<reference_id>-<locked_utc, compact>.json", then "-2", "-3", ... (the id and time are read
/// leniently, so a file of another format version or a damaged one is kept too). The file at `path` stays
/// in place: the caller replaces it atomically with the new reference, so no moment lacks a reference.
/// Returns the kept file's path; throws safeamp::error naming the path when it cannot be kept.
[[nodiscard]] std::filesystem::path keep_previous_reference(const std::filesystem::path& path);

}  // namespace safeamp::sim
