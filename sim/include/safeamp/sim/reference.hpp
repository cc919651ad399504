// The locked fp32 reference: what an fp32 run of a scenario produced (loss curve, held-out metrics and
// slices, golden logits of the probe batch) plus a manifest saying exactly what ran where. It is written
// atomically, versioned, and refused for a candidate whose run identity (data, shapes, seeds) differs.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "safeamp/sim/run_result.hpp"

namespace safeamp::sim {

/// Version of the reference file layout; a file with another version is refused.
inline constexpr int reference_format_version = 1;

/// What ran and where. Identity fields must match between a reference and a candidate (else the
/// comparison is meaningless and is refused); environment fields are recorded and reported.
struct run_manifest {
  std::string scenario;          // scenario name (recorded, not compared: a renamed scenario may reuse it)
  // identity
  std::string model;             // model and every shape, e.g. "transformer layers=2 heads=2 d_model=32 ..."
  std::string data;              // dataset / corpus description
  std::string data_fingerprint;  // FNV-1a of the data description and contents (hex)
  std::uint64_t seed = 0;        // model init + batch order
  std::uint64_t data_seed = 0;   // dataset generation / split
  std::int64_t steps = 0;
  std::int64_t batch_size = 0;
  std::string optimizer;         // e.g. "adamw lr=0.003 clip=1"
  std::int64_t probe_rows = 0;   // shape of the probe logits; 0 = not known yet (before the run)
  std::int64_t probe_cols = 0;
  // environment
  std::string policy;            // policy of the run that produced the file ("fp32" for a reference)
  std::string library_version;
  std::string compiler;
  std::string compiler_flags;
  std::string hardware;
  std::int64_t threads = 1;

  friend bool operator==(const run_manifest&, const run_manifest&) = default;
};

/// The build and machine this process runs on: library version, compiler, flags (inferred from the
/// predefined macros: optimisation, NDEBUG, vector ISA), CPU model and core count.
struct build_environment {
  std::string library_version;
  std::string compiler;
  std::string compiler_flags;
  std::string hardware;
};
[[nodiscard]] build_environment current_environment();

/// One field that differs between two manifests.
struct manifest_difference {
  std::string field;
  std::string reference_value;
  std::string candidate_value;
  bool refuses = false;  // true for identity fields
};

/// Every differing field, identity fields first.
[[nodiscard]] std::vector<manifest_difference> compare_manifests(const run_manifest& reference,
                                                                 const run_manifest& candidate);

/// Throws safeamp::error("reference manifest", "<field: reference X, candidate Y>; ...", ...) when an
/// identity field differs; environment differences are not an error (they are listed in the report).
void require_matching_manifest(const run_manifest& reference, const run_manifest& candidate);

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
/// be a reference: no steps, a non-finite loss, probe logits that do not match probe_rows x probe_cols.
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

}  // namespace safeamp::sim
