// Reference lock: manifest comparison, JSON (de)serialization and atomic storage of the fp32 reference.
#include "safeamp/sim/reference.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>
#include <type_traits>
#include <vector>

#include "safeamp/config.hpp"
#include "safeamp/error.hpp"
#include "safeamp/sim/json_input.hpp"
#include "safeamp/sim/kill_point.hpp"
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

// The subset of the build flags that changes the simulator's bits, so a reference locked by one build is
// refused by another (this file is compiled with the flags of every safeamp::sim source):
//  - -ffast-math / -ffinite-math-only let the compiler reassociate sums and drop inf/NaN handling.
// Not identity: the vector ISA, FMA and the optimisation level. The simulator is compiled with
// -ffp-contract=off (no fused a*b+c) and its fp32 GEMM sums every output in a fixed order (gemm.hpp), so its
// bits do not follow the ISA flags or the CPU's cache sizes: the test sim_bits_flag_independence trains the
// same runs with a default and a -march=native build of the simulator and compares every step's bits.
// NDEBUG and the -std level change no arithmetic. The ISA is still recorded (compiler_flags, reported).
std::string bit_changing_flags() {
  std::string f;
#if defined(__FAST_MATH__)
  f += "-ffast-math";
#endif
#if defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__
  f += f.empty() ? "-ffinite-math-only" : " -ffinite-math-only";
#endif
  return f.empty() ? std::string("ieee") : f;
}

/// One comparable field of two manifests.
struct field_view {
  std::string name;
  std::string reference_value;
  std::string candidate_value;
  manifest_scope scope;
};

constexpr const char* absent = "(not set)";

/// Every field of both manifests, typed members first, then the union of the settings (a setting only one
/// side has reads as "(not set)" on the other, e.g. model.width when the model kind changed).
std::vector<field_view> fields_of(const run_manifest& a, const run_manifest& b) {
  using enum manifest_scope;
  std::vector<field_view> v = {
      {"scenario", a.scenario, b.scenario, label},
      {"data.fingerprint", a.data_fingerprint, b.data_fingerprint, shared},
      {"training.seed", std::to_string(a.seed), std::to_string(b.seed), shared},
      {"data.seed", std::to_string(a.data_seed), std::to_string(b.data_seed), shared},
      {"training.steps", std::to_string(a.steps), std::to_string(b.steps), shared},
      {"training.batch_size", std::to_string(a.batch_size), std::to_string(b.batch_size), shared},
      {"probe_logits.rows", std::to_string(a.probe_rows), std::to_string(b.probe_rows), shared},
      {"probe_logits.cols", std::to_string(a.probe_cols), std::to_string(b.probe_cols), shared},
      {"library_version", a.library_version, b.library_version, shared},
      {"build.float_flags", a.float_flags, b.float_flags, shared},
      {"reference.policy", a.policy, b.policy, reference_only},
      {"compiler", a.compiler, b.compiler, environment},
      {"compiler_flags", a.compiler_flags, b.compiler_flags, environment},
      {"hardware", a.hardware, b.hardware, environment},
      {"threads", std::to_string(a.threads), std::to_string(b.threads), environment},
  };
  const auto find = [](const run_manifest& m, const std::string& field) -> const manifest_setting* {
    for (const manifest_setting& s : m.settings) {
      if (s.field == field) return &s;
    }
    return nullptr;
  };
  for (const manifest_setting& s : a.settings) {
    const manifest_setting* other = find(b, s.field);
    // The scope is the current code's (b's) when it knows the field.
    v.push_back({s.field, s.value, other ? other->value : absent, other ? other->scope : s.scope});
  }
  for (const manifest_setting& s : b.settings) {
    if (find(a, s.field) == nullptr) v.push_back({s.field, absent, s.value, s.scope});
  }
  return v;
}

manifest_scope scope_from_name(const std::string& name, const std::string& where) {
  for (const manifest_scope s : {manifest_scope::shared, manifest_scope::reference_only}) {
    if (name == scope_name(s)) return s;
  }
  throw error("reference " + where, "'" + name + "'", "shared or reference_only");
}

json manifest_json(const run_manifest& m) {
  json settings = json::array();
  for (const manifest_setting& s : m.settings) {
    settings.push_back({{"field", s.field}, {"value", s.value}, {"scope", scope_name(s.scope)}});
  }
  return json{{"scenario", m.scenario},
              {"model", m.model},
              {"data", m.data},
              {"optimizer", m.optimizer},
              {"data_fingerprint", m.data_fingerprint},
              {"seed", m.seed},
              {"data_seed", m.data_seed},
              {"steps", m.steps},
              {"batch_size", m.batch_size},
              {"probe_rows", m.probe_rows},
              {"probe_cols", m.probe_cols},
              {"library_version", m.library_version},
              {"float_flags", m.float_flags},
              {"settings", settings},
              {"policy", m.policy},
              {"compiler", m.compiler},
              {"compiler_flags", m.compiler_flags},
              {"hardware", m.hardware},
              {"threads", m.threads}};
}

/// What a numeric field accepts, for the error message.
template <class T>
std::string number_range() {
  if constexpr (std::is_integral_v<T>) {
    return "an integer from " + std::to_string(static_cast<long long>(std::numeric_limits<T>::min())) + " to " +
           std::to_string(static_cast<unsigned long long>(std::numeric_limits<T>::max()));
  } else if constexpr (std::is_same_v<T, float>) {
    return "a finite number within the float range (magnitude at most 3.4e38)";
  } else {
    return "a finite number";
  }
}

template <class T>
struct is_std_vector : std::false_type {};
template <class E>
struct is_std_vector<std::vector<E>> : std::true_type {};

/// One JSON number as T, or nothing when it does not fit. nlohmann's get<T> converts with a plain cast, which is
/// undefined for a double outside T's range (1e113 read as a byte, 1e300 as a float) and wraps a negative integer
/// read as unsigned; a hand-edited or damaged reference must get an error instead.
template <class T>
std::optional<T> fitting_number(const json& v) {
  if constexpr (std::is_integral_v<T>) {
    if (v.is_number_unsigned()) {
      const auto u = v.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) return std::nullopt;
      return static_cast<T>(u);
    }
    if (v.is_number_integer()) {
      const auto i = v.get<std::int64_t>();
      if constexpr (std::is_unsigned_v<T>) {
        if (i < 0 || static_cast<std::uint64_t>(i) > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) {
          return std::nullopt;
        }
      } else {
        if (i < static_cast<std::int64_t>(std::numeric_limits<T>::min()) ||
            i > static_cast<std::int64_t>(std::numeric_limits<T>::max())) {
          return std::nullopt;
        }
      }
      return static_cast<T>(i);
    }
    return std::nullopt;  // a fraction or a non-number where a count belongs
  } else {
    if (!v.is_number()) return std::nullopt;
    const double d = v.get<double>();
    if (!std::isfinite(d) || std::fabs(d) > static_cast<double>(std::numeric_limits<T>::max())) return std::nullopt;
    return static_cast<T>(d);
  }
}

template <class T>
T required(const json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) {
    throw error("reference " + where + key, "missing", "a reference file written by this version of safeamp");
  }
  const json& v = j.at(key);
  if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
    if (const auto x = fitting_number<T>(v)) return *x;
    throw error("reference " + where + key, summarize_json(v), number_range<T>());
  } else if constexpr (is_std_vector<T>::value && std::is_arithmetic_v<typename T::value_type>) {
    using E = typename T::value_type;
    if (!v.is_array()) throw error("reference " + where + key, summarize_json(v), "an array of numbers");
    T out;
    out.reserve(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      const auto x = fitting_number<E>(v[i]);
      if (!x) {
        throw error("reference " + where + key + "[" + std::to_string(i) + "]", summarize_json(v[i]), number_range<E>());
      }
      out.push_back(*x);
    }
    return out;
  } else {
    try {
      return v.get<T>();
    } catch (const json::exception&) {
      throw error("reference " + where + key, summarize_json(v), "a value of the right type");
    }
  }
}

run_manifest manifest_from_json(const json& j) {
  const std::string w = "manifest.";
  run_manifest m;
  m.scenario = required<std::string>(j, "scenario", w);
  m.model = required<std::string>(j, "model", w);
  m.data = required<std::string>(j, "data", w);
  m.optimizer = required<std::string>(j, "optimizer", w);
  m.data_fingerprint = required<std::string>(j, "data_fingerprint", w);
  m.seed = required<std::uint64_t>(j, "seed", w);
  m.data_seed = required<std::uint64_t>(j, "data_seed", w);
  m.steps = required<std::int64_t>(j, "steps", w);
  m.batch_size = required<std::int64_t>(j, "batch_size", w);
  m.probe_rows = required<std::int64_t>(j, "probe_rows", w);
  m.probe_cols = required<std::int64_t>(j, "probe_cols", w);
  m.library_version = required<std::string>(j, "library_version", w);
  m.float_flags = required<std::string>(j, "float_flags", w);
  const json settings = required<json>(j, "settings", w);
  if (!settings.is_array()) throw error("reference manifest.settings", summarize_json(settings), "an array of settings");
  for (std::size_t i = 0; i < settings.size(); ++i) {
    const std::string at = w + "settings[" + std::to_string(i) + "].";
    manifest_setting s;
    s.field = required<std::string>(settings[i], "field", at);
    s.value = required<std::string>(settings[i], "value", at);
    s.scope = scope_from_name(required<std::string>(settings[i], "scope", at), at + "scope");
    for (const manifest_setting& seen : m.settings) {
      if (seen.field == s.field) throw error("reference " + at + "field", "'" + s.field + "' (twice)", "unique fields");
    }
    m.settings.push_back(std::move(s));
  }
  m.policy = required<std::string>(j, "policy", w);
  m.compiler = required<std::string>(j, "compiler", w);
  m.compiler_flags = required<std::string>(j, "compiler_flags", w);
  m.hardware = required<std::string>(j, "hardware", w);
  m.threads = required<std::int64_t>(j, "threads", w);
  return m;
}

/// The regression baseline of an evaluation, or null for a classifier.
json regression_json(const eval_metrics& e) {
  if (!e.regression) return json(nullptr);
  const regression_baseline& b = *e.regression;
  return json{{"loss", b.loss}, {"trivial_loss", b.trivial_loss}, {"slice_trivial_loss", b.slice_trivial_loss}};
}

/// The class frequencies' baseline of an evaluation, or null for a regression.
json class_prior_json(const eval_metrics& e) {
  if (!e.classes) return json(nullptr);
  const class_prior& c = *e.classes;
  return json{{"classes", c.classes},
              {"trivial_loss", c.trivial_loss},
              {"trivial_accuracy", c.trivial_accuracy},
              {"slice_trivial_loss", c.slice_trivial_loss},
              {"slice_trivial_accuracy", c.slice_trivial_accuracy}};
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
              {"final_eval",
               {{"loss", r.final_eval.loss},
                {"accuracy", r.final_eval.accuracy},
                {"slices", slices},
                {"rows",
                 {{"loss", r.final_eval.rows.loss},
                  {"correct", r.final_eval.rows.correct},
                  {"slice", r.final_eval.rows.slice}}},
                {"regression", regression_json(r.final_eval)},
                {"class_prior", class_prior_json(r.final_eval)}}},
              {"probe_rows", r.probe_rows},
              {"probe_cols", r.probe_cols},
              {"probe_logits", r.probe_logits},
              {"weights_hash", hex64(r.weights_hash)},
              {"wall_seconds", r.wall_seconds},
              {"samples_per_second", r.samples_per_second}};
}

/// Per-prediction results line up with the slices: three arrays of one length, correctness 0 or 1, slice
/// indices of existing slices, finite losses.
void check_rows(const eval_metrics& e, const std::string& field) {
  const eval_rows& r = e.rows;
  const std::size_t n = r.loss.size();
  if (r.correct.size() != n || r.slice.size() != n) {
    throw error(field, std::to_string(n) + " losses, " + std::to_string(r.correct.size()) + " correctness flags, " +
                           std::to_string(r.slice.size()) + " slice indices",
                "three arrays of the same length");
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(r.loss[i]) || r.correct[i] > 1 || r.slice[i] < 0 ||
        static_cast<std::size_t>(r.slice[i]) >= e.slices.size()) {
      throw error(field + " [" + std::to_string(i) + "]",
                  "loss " + std::to_string(r.loss[i]) + ", correct " + std::to_string(r.correct[i]) + ", slice " +
                      std::to_string(r.slice[i]),
                  "a finite loss, correct 0 or 1, a slice index below " + std::to_string(e.slices.size()));
    }
  }
}

/// A classifier's class-frequency baseline fits its evaluation: present exactly when there is no regression
/// baseline, at least one class, finite losses >= 0, accuracies in [0, 1] (above 0 on the whole set), one per slice.
void check_class_prior(const eval_metrics& e, const std::string& field) {
  if (e.regression.has_value() == e.classes.has_value()) {
    throw error(field, e.classes ? "present beside a regression baseline" : "missing",
                "the held-out labels' class frequencies for a classifier, null for a regression");
  }
  if (!e.classes) return;
  const class_prior& c = *e.classes;
  if (c.classes < 1) throw error(field + ".classes", std::to_string(c.classes), "at least 1");
  const auto loss_ok = [](double v) { return v >= 0.0 && std::isfinite(v); };
  const auto accuracy_ok = [](double v) { return v >= 0.0 && v <= 1.0; };
  if (!loss_ok(c.trivial_loss)) {
    throw error(field + ".trivial_loss", std::to_string(c.trivial_loss), "a finite loss >= 0");
  }
  if (!accuracy_ok(c.trivial_accuracy) || c.trivial_accuracy == 0.0) {
    throw error(field + ".trivial_accuracy", std::to_string(c.trivial_accuracy), "in (0, 1]");
  }
  for (const auto* v : {&c.slice_trivial_loss, &c.slice_trivial_accuracy}) {
    const char* name = v == &c.slice_trivial_loss ? ".slice_trivial_loss" : ".slice_trivial_accuracy";
    if (v->size() != e.slices.size()) {
      throw error(field + name, std::to_string(v->size()) + " values",
                  "one per slice (" + std::to_string(e.slices.size()) + ")");
    }
    for (std::size_t i = 0; i < v->size(); ++i) {
      const double x = (*v)[i];
      if (v == &c.slice_trivial_loss ? !loss_ok(x) : !accuracy_ok(x)) {
        throw error(field + name + "[" + std::to_string(i) + "]", std::to_string(x),
                    v == &c.slice_trivial_loss ? "a finite loss >= 0" : "in [0, 1]");
      }
    }
  }
}

/// A regression baseline fits its evaluation: a regression loss name, finite non-negative trivial losses, one
/// per slice.
void check_regression(const eval_metrics& e, const std::string& field) {
  if (!e.regression) return;
  const regression_baseline& b = *e.regression;
  if (b.loss != "mse" && b.loss != "l1" && b.loss != "huber") {
    throw error(field + ".loss", "'" + b.loss + "'", "mse, l1 or huber");
  }
  if (!(b.trivial_loss >= 0.0) || !std::isfinite(b.trivial_loss)) {
    throw error(field + ".trivial_loss", std::to_string(b.trivial_loss), "a finite loss >= 0");
  }
  if (b.slice_trivial_loss.size() != e.slices.size()) {
    throw error(field + ".slice_trivial_loss", std::to_string(b.slice_trivial_loss.size()) + " values",
                "one per slice (" + std::to_string(e.slices.size()) + ")");
  }
  for (std::size_t i = 0; i < b.slice_trivial_loss.size(); ++i) {
    const double v = b.slice_trivial_loss[i];
    if (!(v >= 0.0) || !std::isfinite(v)) {
      throw error(field + ".slice_trivial_loss[" + std::to_string(i) + "]", std::to_string(v), "a finite loss >= 0");
    }
  }
}

/// rows x cols == n, decided without forming a product that can overflow (a hostile file could make
/// rows x cols wrap to the size of an empty array).
bool shape_holds(std::int64_t rows, std::int64_t cols, std::size_t n) {
  if (rows < 0 || cols < 0) return false;
  if (rows == 0 || cols == 0) return n == 0;
  const auto r = static_cast<std::uint64_t>(rows);
  const auto c = static_cast<std::uint64_t>(cols);
  return c <= n / r && r * c == n;
}

}  // namespace

build_environment bit_changing_environment() {
  build_environment e;
  e.library_version = SAFEAMP_VERSION_STRING;
  e.float_flags = bit_changing_flags();
  return e;
}

build_environment current_environment() {
  build_environment e = bit_changing_environment();
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

const char* scope_name(manifest_scope s) noexcept {
  switch (s) {
    case manifest_scope::shared: return "shared";
    case manifest_scope::reference_only: return "reference_only";
    case manifest_scope::environment: return "environment";
    case manifest_scope::label: return "label";
  }
  return "shared";
}

std::string manifest_number(double v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);  // shortest text that round-trips
  return ec == std::errc{} ? std::string(buf, end) : std::string("?");
}

std::vector<manifest_difference> compare_manifests(const run_manifest& reference, const run_manifest& now,
                                                   manifest_check check) {
  std::vector<manifest_difference> out;
  for (const field_view& f : fields_of(reference, now)) {
    if (f.scope == manifest_scope::label) continue;
    if (f.scope == manifest_scope::reference_only && check == manifest_check::candidate) continue;
    const bool probe = f.name.rfind("probe_logits.", 0) == 0;
    if (probe && (f.reference_value == "0" || f.candidate_value == "0")) continue;  // not known before a run
    if (f.reference_value != f.candidate_value) {
      const bool refuses = f.scope == manifest_scope::shared || f.scope == manifest_scope::reference_only;
      out.push_back({f.name, f.reference_value, f.candidate_value, f.scope, refuses});
    }
  }
  std::stable_partition(out.begin(), out.end(), [](const manifest_difference& d) { return d.refuses; });
  return out;
}

void require_matching_manifest(const run_manifest& reference, const run_manifest& now, manifest_check check) {
  const bool reuse = check == manifest_check::reuse;
  std::string what;
  std::size_t count = 0;
  for (const manifest_difference& d : compare_manifests(reference, now, check)) {
    if (!d.refuses) continue;
    ++count;
    if (!what.empty()) what += "; ";
    what += d.field + ": reference '" + d.reference_value + "', " + (reuse ? "now" : "candidate") + " '" +
            d.candidate_value + "'";
  }
  if (count == 0) return;
  const std::string fields = "in " + std::to_string(count) + (count == 1 ? " field (" : " fields (") + what + ")";
  if (reuse) {
    throw error("locked reference", "different from this run " + fields,
                "a run with the settings the reference was locked with; to lock a reference for these settings "
                "pass --relock (the old reference is kept beside the new one) or use another --out folder");
  }
  throw error("candidate run", "different from the reference " + fields,
              "a candidate that shares the reference's model, data, seeds, steps, batch, optimizer and build "
              "(only policy, rounding, scaler, faults and master weights may differ)");
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
  const auto bad =
      std::find_if(run.steps.begin(), run.steps.end(), [](const step_record& s) { return !std::isfinite(s.loss); });
  if (bad != run.steps.end()) {
    const auto count =
        std::count_if(run.steps.begin(), run.steps.end(), [](const step_record& s) { return !std::isfinite(s.loss); });
    throw error("reference run loss",
                std::to_string(bad->loss) + " at step " + std::to_string(bad->step) + " (" + std::to_string(count) +
                    " of " + std::to_string(run.steps.size()) + " steps not finite)",
                "a finite loss at every step of the reference run: it diverged or overflowed in its own policy; "
                "check the scale of the data (data.targets, data.inputs or data.input_scale), "
                "training.loss_multiplier and the learning rate");
  }
  if (!std::isfinite(run.final_eval.loss) || !std::isfinite(run.final_eval.accuracy)) {
    throw error("reference held-out metrics", "non-finite", "finite loss and accuracy");
  }
  if (!shape_holds(run.probe_rows, run.probe_cols, run.probe_logits.size())) {
    throw error("reference probe logits",
                std::to_string(run.probe_logits.size()) + " values for " + std::to_string(run.probe_rows) + " x " +
                    std::to_string(run.probe_cols),
                "probe_rows * probe_cols values");
  }
  for (const float z : run.probe_logits) {
    if (!std::isfinite(z)) throw error("reference probe logits", "non-finite", "finite golden logits");
  }
  check_rows(run.final_eval, "reference per-prediction results");
  check_regression(run.final_eval, "reference regression baseline");
  check_class_prior(run.final_eval, "reference class frequencies");
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
  const json j = parse_json_input(text, "reference file", "reference.json");
  locked_reference r;
  r.format_version = required<int>(j, "format_version", "");
  if (r.format_version != reference_format_version) {
    throw error("reference format_version", std::to_string(r.format_version),
                std::to_string(reference_format_version) +
                    " (the file was written by another version of safeamp; lock the reference again with "
                    "--relock, which keeps the old file beside the new one, or use another --out folder)");
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
  const json rows = required<json>(ev, "rows", "final_eval.");
  r.final_eval.rows.loss = required<std::vector<float>>(rows, "loss", "final_eval.rows.");
  r.final_eval.rows.correct = required<std::vector<std::uint8_t>>(rows, "correct", "final_eval.rows.");
  r.final_eval.rows.slice = required<std::vector<std::int32_t>>(rows, "slice", "final_eval.rows.");
  check_rows(r.final_eval, "reference final_eval.rows");
  const json reg = required<json>(ev, "regression", "final_eval.");
  if (!reg.is_null()) {
    if (!reg.is_object()) {
      throw error("reference final_eval.regression", summarize_json(reg), "null (a classifier) or an object");
    }
    r.final_eval.regression = regression_baseline{
        .loss = required<std::string>(reg, "loss", "final_eval.regression."),
        .trivial_loss = required<double>(reg, "trivial_loss", "final_eval.regression."),
        .slice_trivial_loss = required<std::vector<double>>(reg, "slice_trivial_loss", "final_eval.regression.")};
  }
  check_regression(r.final_eval, "reference final_eval.regression");
  const json prior = required<json>(ev, "class_prior", "final_eval.");
  if (!prior.is_null()) {
    if (!prior.is_object()) {
      throw error("reference final_eval.class_prior", summarize_json(prior), "null (a regression) or an object");
    }
    const char* w = "final_eval.class_prior.";
    r.final_eval.classes =
        class_prior{.classes = required<std::int64_t>(prior, "classes", w),
                    .trivial_loss = required<double>(prior, "trivial_loss", w),
                    .trivial_accuracy = required<double>(prior, "trivial_accuracy", w),
                    .slice_trivial_loss = required<std::vector<double>>(prior, "slice_trivial_loss", w),
                    .slice_trivial_accuracy = required<std::vector<double>>(prior, "slice_trivial_accuracy", w)};
  }
  check_class_prior(r.final_eval, "reference final_eval.class_prior");
  r.probe_rows = required<std::int64_t>(j, "probe_rows", "");
  r.probe_cols = required<std::int64_t>(j, "probe_cols", "");
  r.probe_logits = required<std::vector<float>>(j, "probe_logits", "");
  if (!shape_holds(r.probe_rows, r.probe_cols, r.probe_logits.size())) {
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

std::filesystem::path keep_previous_reference(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  // The id and lock time name the file; read leniently (any format version, or none when damaged).
  std::string id;
  std::string locked;
  try {
    const json j = json::parse(read_whole_file(path));
    if (j.is_object() && j.contains("reference_id") && j.at("reference_id").is_string()) {
      id = j.at("reference_id").get<std::string>();
    }
    if (j.is_object() && j.contains("locked_utc") && j.at("locked_utc").is_string()) {
      locked = j.at("locked_utc").get<std::string>();
    }
  } catch (const std::exception&) {
    // a damaged (or oversized) file is kept under the unknown-id name
  }
  const auto safe = [](const std::string& text, const std::string& fallback) {
    std::string out;
    for (const char c : text) {
      if (std::isalnum(static_cast<unsigned char>(c)) != 0) out += c;  // "2024-05-01T12:00:00Z" -> "20240501T120000Z"
    }
    return out.empty() ? fallback : out.substr(0, 40);  // an id is 16 hex digits, a time 16 characters
  };
  const std::string stem = "reference-" + safe(id, "unknown-id") + "-" + safe(locked, "unknown-time");
  for (int n = 1; n < 10000; ++n) {
    std::string name = stem;
    if (n > 1) name.append("-").append(std::to_string(n));
    const fs::path kept = path.parent_path() / name.append(".json");
    std::error_code ec;
    // A hard link (or, where the file system has none, a copy) never replaces an existing file.
    fs::create_hard_link(path, kept, ec);
    if (ec && ec != std::errc::file_exists && !fs::exists(kept)) {
      ec.clear();
      fs::copy_file(path, kept, fs::copy_options::none, ec);
    }
    if (!ec) {
      kill_point("linked reference-*.json");  // one name whatever the lock time in the file name
      return kept;
    }
    if (!fs::exists(kept)) {
      throw error("previous reference " + path.string(), "not kept as " + kept.string() + " (" + ec.message() + ")",
                  "a writable reference folder (the new reference was not written; the old one is unchanged)");
    }
  }
  throw error("previous reference " + path.string(), "not kept (9999 kept references named " + stem + ")",
              "a reference folder with fewer kept references");
}

}  // namespace safeamp::sim
