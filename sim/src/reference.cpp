// Reference lock: manifest comparison, JSON (de)serialization and atomic storage of the fp32 reference.
#include "safeamp/sim/reference.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "safeamp/config.hpp"
#include "safeamp/error.hpp"
#include "safeamp/sim/report_files.hpp"

namespace safeamp::sim {
namespace {

using json = nlohmann::json;

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) {
        std::string v = line.substr(colon + 1);
        while (!v.empty() && v.front() == ' ') v.erase(v.begin());
        return v;
      }
    }
  }
  return "unknown CPU";
}

std::string inferred_flags() {
  std::string f;
#if defined(__OPTIMIZE__)
  f += "-O2/-O3 (optimized)";
#else
  f += "-O0 (not optimized)";
#endif
#if defined(NDEBUG)
  f += " -DNDEBUG";
#endif
#if defined(__FAST_MATH__)
  f += " -ffast-math";
#endif
#if defined(__AVX512F__)
  f += " avx512f";
#elif defined(__AVX2__)
  f += " avx2";
#elif defined(__SSE2__)
  f += " sse2";
#endif
#if defined(__FMA__)
  f += " fma";
#endif
  f += " -std=c++" + std::to_string(__cplusplus / 100 % 100);
  return f;
}

struct field_view {
  const char* name;
  std::string reference_value;
  std::string candidate_value;
  bool identity;
};

std::vector<field_view> fields_of(const run_manifest& a, const run_manifest& b) {
  return {
      {"scenario", a.scenario, b.scenario, false},
      {"model", a.model, b.model, true},
      {"data", a.data, b.data, true},
      {"data_fingerprint", a.data_fingerprint, b.data_fingerprint, true},
      {"seed", std::to_string(a.seed), std::to_string(b.seed), true},
      {"data_seed", std::to_string(a.data_seed), std::to_string(b.data_seed), true},
      {"steps", std::to_string(a.steps), std::to_string(b.steps), true},
      {"batch_size", std::to_string(a.batch_size), std::to_string(b.batch_size), true},
      {"optimizer", a.optimizer, b.optimizer, true},
      {"probe_rows", std::to_string(a.probe_rows), std::to_string(b.probe_rows), true},
      {"probe_cols", std::to_string(a.probe_cols), std::to_string(b.probe_cols), true},
      {"library_version", a.library_version, b.library_version, false},
      {"compiler", a.compiler, b.compiler, false},
      {"compiler_flags", a.compiler_flags, b.compiler_flags, false},
      {"hardware", a.hardware, b.hardware, false},
      {"threads", std::to_string(a.threads), std::to_string(b.threads), false},
  };
}

json manifest_json(const run_manifest& m) {
  return json{{"scenario", m.scenario},
              {"model", m.model},
              {"data", m.data},
              {"data_fingerprint", m.data_fingerprint},
              {"seed", m.seed},
              {"data_seed", m.data_seed},
              {"steps", m.steps},
              {"batch_size", m.batch_size},
              {"optimizer", m.optimizer},
              {"probe_rows", m.probe_rows},
              {"probe_cols", m.probe_cols},
              {"policy", m.policy},
              {"library_version", m.library_version},
              {"compiler", m.compiler},
              {"compiler_flags", m.compiler_flags},
              {"hardware", m.hardware},
              {"threads", m.threads}};
}

template <class T>
T required(const json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) {
    throw error("reference " + where + key, "missing", "a reference file written by this version of safeamp");
  }
  try {
    return j.at(key).get<T>();
  } catch (const json::exception&) {
    throw error("reference " + where + key, j.at(key).dump(), "a value of the right type");
  }
}

run_manifest manifest_from_json(const json& j) {
  const std::string w = "manifest.";
  run_manifest m;
  m.scenario = required<std::string>(j, "scenario", w);
  m.model = required<std::string>(j, "model", w);
  m.data = required<std::string>(j, "data", w);
  m.data_fingerprint = required<std::string>(j, "data_fingerprint", w);
  m.seed = required<std::uint64_t>(j, "seed", w);
  m.data_seed = required<std::uint64_t>(j, "data_seed", w);
  m.steps = required<std::int64_t>(j, "steps", w);
  m.batch_size = required<std::int64_t>(j, "batch_size", w);
  m.optimizer = required<std::string>(j, "optimizer", w);
  m.probe_rows = required<std::int64_t>(j, "probe_rows", w);
  m.probe_cols = required<std::int64_t>(j, "probe_cols", w);
  m.policy = required<std::string>(j, "policy", w);
  m.library_version = required<std::string>(j, "library_version", w);
  m.compiler = required<std::string>(j, "compiler", w);
  m.compiler_flags = required<std::string>(j, "compiler_flags", w);
  m.hardware = required<std::string>(j, "hardware", w);
  m.threads = required<std::int64_t>(j, "threads", w);
  return m;
}

json body_json(const locked_reference& r) {
  json slices = json::array();
  for (const slice_metrics& s : r.final_eval.slices) {
    slices.push_back({{"name", s.name}, {"count", s.count}, {"loss", s.loss}, {"accuracy", s.accuracy}});
  }
  return json{{"format_version", r.format_version},
              {"locked_utc", r.locked_utc},
              {"manifest", manifest_json(r.manifest)},
              {"label", r.label},
              {"loss_curve", r.loss_curve},
              {"scale_curve", r.scale_curve},
              {"final_eval", {{"loss", r.final_eval.loss}, {"accuracy", r.final_eval.accuracy}, {"slices", slices}}},
              {"probe_rows", r.probe_rows},
              {"probe_cols", r.probe_cols},
              {"probe_logits", r.probe_logits},
              {"weights_hash", hex64(r.weights_hash)},
              {"wall_seconds", r.wall_seconds},
              {"samples_per_second", r.samples_per_second}};
}

bool all_finite(const std::vector<double>& v) {
  for (const double x : v) {
    if (!std::isfinite(x)) return false;
  }
  return true;
}

}  // namespace

build_environment current_environment() {
  build_environment e;
  e.library_version = SAFEAMP_VERSION_STRING;
#if defined(__clang__)
  e.compiler = std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  e.compiler = std::string("g++ ") + __VERSION__;
#else
  e.compiler = "unknown compiler";
#endif
  e.compiler_flags = inferred_flags();
  e.hardware = cpu_model_name() + ", " + std::to_string(std::thread::hardware_concurrency()) + " logical cores";
  return e;
}

std::vector<manifest_difference> compare_manifests(const run_manifest& reference, const run_manifest& candidate) {
  std::vector<manifest_difference> out;
  for (const field_view& f : fields_of(reference, candidate)) {
    const bool probe = std::string_view(f.name).rfind("probe_", 0) == 0;
    if (probe && (f.reference_value == "0" || f.candidate_value == "0")) continue;  // not known before a run
    if (f.reference_value != f.candidate_value) {
      out.push_back({f.name, f.reference_value, f.candidate_value, f.identity});
    }
  }
  std::stable_partition(out.begin(), out.end(), [](const manifest_difference& d) { return d.refuses; });
  return out;
}

void require_matching_manifest(const run_manifest& reference, const run_manifest& candidate) {
  std::string what;
  for (const manifest_difference& d : compare_manifests(reference, candidate)) {
    if (!d.refuses) continue;
    if (!what.empty()) what += "; ";
    what += d.field + ": reference '" + d.reference_value + "', candidate '" + d.candidate_value + "'";
  }
  if (!what.empty()) {
    throw error("reference manifest", "different from the candidate run (" + what + ")",
                "a reference locked from the same scenario, data, shapes and seeds (lock a new one in another "
                "--out folder, or pass --relock)");
  }
}

locked_reference lock_reference(const run_result& run, const run_manifest& manifest) {
  if (run.steps.empty()) throw error("reference run steps", "0", "a run with at least one step");
  locked_reference r;
  r.locked_utc = utc_now_iso8601();
  r.manifest = manifest;
  r.label = run.label;
  for (const step_record& s : run.steps) {
    r.loss_curve.push_back(s.loss);
    r.scale_curve.push_back(s.scale);
  }
  if (!all_finite(r.loss_curve)) {
    throw error("reference run loss", "non-finite", "a finite loss at every step of the reference run");
  }
  if (!std::isfinite(run.final_eval.loss) || !std::isfinite(run.final_eval.accuracy)) {
    throw error("reference held-out metrics", "non-finite", "finite loss and accuracy");
  }
  if (run.probe_rows < 0 || run.probe_cols < 0 ||
      static_cast<std::size_t>(run.probe_rows * run.probe_cols) != run.probe_logits.size()) {
    throw error("reference probe logits",
                std::to_string(run.probe_logits.size()) + " values for " + std::to_string(run.probe_rows) + " x " +
                    std::to_string(run.probe_cols),
                "probe_rows * probe_cols values");
  }
  for (const float z : run.probe_logits) {
    if (!std::isfinite(z)) throw error("reference probe logits", "non-finite", "finite golden logits");
  }
  r.final_eval = run.final_eval;
  r.probe_logits = run.probe_logits;
  r.probe_rows = run.probe_rows;
  r.probe_cols = run.probe_cols;
  r.weights_hash = run.weights_hash;
  r.wall_seconds = run.wall_seconds;
  r.samples_per_second = run.samples_per_second;
  r.manifest.probe_rows = run.probe_rows;
  r.manifest.probe_cols = run.probe_cols;
  r.reference_id = hex64(fnv1a64(body_json(r).dump()));
  return r;
}

run_result as_run_result(const locked_reference& ref) {
  run_result r;
  r.label = ref.label;
  for (std::size_t i = 0; i < ref.loss_curve.size(); ++i) {
    step_record s;
    s.step = static_cast<std::int64_t>(i);
    s.loss = ref.loss_curve[i];
    s.scale = i < ref.scale_curve.size() ? ref.scale_curve[i] : 1.0f;
    r.steps.push_back(s);
  }
  r.final_eval = ref.final_eval;
  r.probe_logits = ref.probe_logits;
  r.probe_rows = ref.probe_rows;
  r.probe_cols = ref.probe_cols;
  r.weights_hash = ref.weights_hash;
  r.wall_seconds = ref.wall_seconds;
  r.samples_per_second = ref.samples_per_second;
  return r;
}

std::string to_json_text(const locked_reference& ref) {
  json j = body_json(ref);
  j["reference_id"] = ref.reference_id;
  return j.dump(1) + "\n";
}

locked_reference reference_from_json_text(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw error("reference file", std::string("not valid JSON (") + e.what() + ")",
                "a complete reference written by safeamp sim");
  }
  locked_reference r;
  r.format_version = required<int>(j, "format_version", "");
  if (r.format_version != reference_format_version) {
    throw error("reference format_version", std::to_string(r.format_version),
                std::to_string(reference_format_version) + " (lock the reference again with this version)");
  }
  r.reference_id = required<std::string>(j, "reference_id", "");
  r.locked_utc = required<std::string>(j, "locked_utc", "");
  r.manifest = manifest_from_json(required<json>(j, "manifest", ""));
  r.label = required<std::string>(j, "label", "");
  r.loss_curve = required<std::vector<double>>(j, "loss_curve", "");
  r.scale_curve = required<std::vector<float>>(j, "scale_curve", "");
  const json ev = required<json>(j, "final_eval", "");
  r.final_eval.loss = required<double>(ev, "loss", "final_eval.");
  r.final_eval.accuracy = required<double>(ev, "accuracy", "final_eval.");
  for (const json& s : required<json>(ev, "slices", "final_eval.")) {
    r.final_eval.slices.push_back({required<std::string>(s, "name", "slice."), required<std::int64_t>(s, "count", "slice."),
                                   required<double>(s, "loss", "slice."), required<double>(s, "accuracy", "slice.")});
  }
  r.probe_rows = required<std::int64_t>(j, "probe_rows", "");
  r.probe_cols = required<std::int64_t>(j, "probe_cols", "");
  r.probe_logits = required<std::vector<float>>(j, "probe_logits", "");
  if (r.probe_rows < 0 || r.probe_cols < 0 ||
      static_cast<std::size_t>(r.probe_rows * r.probe_cols) != r.probe_logits.size()) {
    throw error("reference probe_logits", std::to_string(r.probe_logits.size()) + " values",
                "probe_rows * probe_cols values (the file is truncated or edited)");
  }
  const std::string hash_hex = required<std::string>(j, "weights_hash", "");
  try {
    r.weights_hash = std::stoull(hash_hex, nullptr, 16);
  } catch (const std::exception&) {
    throw error("reference weights_hash", "'" + hash_hex + "'", "16 hex digits");
  }
  r.wall_seconds = required<double>(j, "wall_seconds", "");
  r.samples_per_second = required<double>(j, "samples_per_second", "");
  const std::string recomputed = hex64(fnv1a64(body_json(r).dump()));
  if (recomputed != r.reference_id) {
    throw error("reference_id", r.reference_id + " (content hashes to " + recomputed + ")",
                "an unmodified reference file (re-lock it instead of editing it)");
  }
  return r;
}

void write_reference(const std::filesystem::path& path, const locked_reference& ref) {
  write_file_atomically(path, to_json_text(ref));
}

locked_reference read_reference(const std::filesystem::path& path) {
  return reference_from_json_text(read_whole_file(path));
}

}  // namespace safeamp::sim
