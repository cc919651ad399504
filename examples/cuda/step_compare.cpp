// Step-record comparison of two runs (see step_compare.hpp).
#include "step_compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "safeamp/error.hpp"

namespace safeamp::gpu_trainer {
namespace {

using json = nlohmann::json;

std::string where(std::string_view source, std::size_t line) {
  return std::string(source) + " line " + std::to_string(line);
}

const json& field(const json& j, const char* key, std::string_view source, std::size_t line) {
  const auto it = j.find(key);
  if (it == j.end())
    throw error(where(source, line) + " field '" + key + "'", "missing", "present in every step record");
  return *it;
}

// A number, or the text the simulator writes for non-finite values.
double number(const json& j, const char* key, std::string_view source, std::size_t line) {
  const json& v = field(j, key, source, line);
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    throw error(where(source, line) + " field '" + key + "'", "'" + s + "'", "a number, \"inf\", \"-inf\" or \"nan\"");
  }
  throw error(where(source, line) + " field '" + key + "'", v.dump(), "a number, \"inf\", \"-inf\" or \"nan\"");
}

bool boolean(const json& j, const char* key, std::string_view source, std::size_t line) {
  const json& v = field(j, key, source, line);
  if (!v.is_boolean()) throw error(where(source, line) + " field '" + key + "'", v.dump(), "true or false");
  return v.get<bool>();
}

std::uint64_t count(const json& j, const char* key, std::string_view source, std::size_t line) {
  const json& v = field(j, key, source, line);
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<std::int64_t>() >= 0)) {
    throw error(where(source, line) + " field '" + key + "'", v.dump(), "a non-negative integer");
  }
  return v.get<std::uint64_t>();
}

std::string list_text(const std::vector<std::int64_t>& steps) {
  if (steps.empty()) return "none";
  std::string s;
  constexpr std::size_t shown = 20;
  for (std::size_t i = 0; i < steps.size() && i < shown; ++i) {
    if (i != 0) s += ',';
    s += std::to_string(steps[i]);
  }
  if (steps.size() > shown) s += ",... (" + std::to_string(steps.size()) + " steps)";
  return s;
}

json finite_or_text(double v) {
  if (std::isfinite(v)) return v;
  return std::isnan(v) ? json("nan") : json(v > 0 ? "inf" : "-inf");
}

}  // namespace

std::vector<sim::step_record> parse_step_records(std::string_view jsonl, std::string_view source) {
  std::vector<sim::step_record> out;
  std::size_t line_no = 0;
  std::size_t pos = 0;
  while (pos < jsonl.size()) {
    std::size_t end = jsonl.find('\n', pos);
    if (end == std::string_view::npos) end = jsonl.size();
    const std::string_view line = jsonl.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    json j;
    try {
      j = json::parse(line);
    } catch (const json::parse_error& e) {
      throw error(where(source, line_no), std::string("not valid JSON (") + e.what() + ")", "one JSON object per line");
    }
    if (!j.is_object()) throw error(where(source, line_no), j.dump(), "a JSON object (one step record)");
    sim::step_record r;
    const json& step = field(j, "step", source, line_no);
    if (!step.is_number_integer()) throw error(where(source, line_no) + " field 'step'", step.dump(), "an integer");
    r.step = step.get<std::int64_t>();
    r.loss = number(j, "loss", source, line_no);
    r.scale = static_cast<float>(number(j, "scale", source, line_no));
    r.found_inf = boolean(j, "found_inf", source, line_no);
    r.skipped = boolean(j, "skipped", source, line_no);
    r.grad_norm_before_clip = number(j, "grad_norm_before_clip", source, line_no);
    r.grad_norm_after_clip = number(j, "grad_norm_after_clip", source, line_no);
    if (const auto it = j.find("layers"); it != j.end()) {
      if (!it->is_array()) throw error(where(source, line_no) + " field 'layers'", it->dump(), "an array");
      for (const json& l : *it) {
        if (!l.is_object() || !l.contains("name") || !l["name"].is_string()) {
          throw error(where(source, line_no) + " field 'layers'", l.dump(), "objects with a string 'name'");
        }
        r.grads.push_back(sim::layer_counts{.name = l["name"].get<std::string>(),
                                            .elements = count(l, "elements", source, line_no),
                                            .overflow = count(l, "overflow", source, line_no),
                                            .underflow = count(l, "underflow", source, line_no),
                                            .subnormal = count(l, "subnormal", source, line_no),
                                            .nan = count(l, "nan", source, line_no)});
      }
    }
    if (const auto it = j.find("step_seconds"); it != j.end() && it->is_number()) r.step_seconds = it->get<double>();
    out.push_back(std::move(r));
  }
  return out;
}

comparison compare_steps(std::span<const sim::step_record> a, std::span<const sim::step_record> b,
                         const comparison_options& options) {
  if (!(options.max_relative_loss_gap >= 0.0) || !std::isfinite(options.max_relative_loss_gap)) {
    throw error("max relative loss gap", std::to_string(options.max_relative_loss_gap), "a finite number >= 0");
  }
  comparison c;
  c.steps_a = static_cast<std::int64_t>(a.size());
  c.steps_b = static_cast<std::int64_t>(b.size());
  std::map<std::int64_t, const sim::step_record*> by_step;
  for (const sim::step_record& r : b) by_step[r.step] = &r;
  for (const sim::step_record& r : a) {
    if (r.found_inf) c.overflow_steps_a.push_back(r.step);
  }
  for (const sim::step_record& r : b) {
    if (r.found_inf) c.overflow_steps_b.push_back(r.step);
  }
  double sum_gap = 0.0;
  std::int64_t finite_steps = 0;
  std::set<std::int64_t> seen;
  for (const sim::step_record& ra : a) {
    const auto it = by_step.find(ra.step);
    if (it == by_step.end() || !seen.insert(ra.step).second) continue;
    const sim::step_record& rb = *it->second;
    ++c.common_steps;
    if (ra.found_inf && !rb.found_inf) c.overflow_only_in_a.push_back(ra.step);
    if (rb.found_inf && !ra.found_inf) c.overflow_only_in_b.push_back(ra.step);
    c.final_loss_a = ra.loss;
    c.final_loss_b = rb.loss;
    if (!std::isfinite(ra.loss) || !std::isfinite(rb.loss)) {
      c.non_finite_loss_steps.push_back(ra.step);
      continue;
    }
    const double gap = std::fabs(ra.loss - rb.loss);
    const double denom = std::max(std::fabs(ra.loss), std::fabs(rb.loss));
    const double rel = denom > 0.0 ? gap / denom : 0.0;
    sum_gap += gap;
    ++finite_steps;
    c.max_abs_loss_gap = std::max(c.max_abs_loss_gap, gap);
    if (c.max_gap_step < 0 || rel > c.max_relative_loss_gap) {
      c.max_relative_loss_gap = rel;
      c.max_gap_step = ra.step;
    }
    if (rel > options.max_relative_loss_gap) c.steps_over_tolerance.push_back(ra.step);
  }
  c.mean_abs_loss_gap = finite_steps > 0 ? sum_gap / static_cast<double>(finite_steps) : 0.0;
  c.overflow_steps_agree = c.overflow_only_in_a.empty() && c.overflow_only_in_b.empty();
  c.loss_within_tolerance = c.steps_over_tolerance.empty();
  c.agree = c.common_steps > 0 && c.overflow_steps_agree && c.loss_within_tolerance;
  return c;
}

std::string comparison_text(const comparison& c, std::string_view name_a, std::string_view name_b,
                            const comparison_options& options) {
  const std::string a(name_a), b(name_b);
  std::string s;
  char buf[256];
  s += "steps: " + a + " " + std::to_string(c.steps_a) + ", " + b + " " + std::to_string(c.steps_b) + ", common " +
       std::to_string(c.common_steps) + "\n";
  s += "overflow steps in " + a + ": " + list_text(c.overflow_steps_a) + "\n";
  s += "overflow steps in " + b + ": " + list_text(c.overflow_steps_b) + "\n";
  s += "only in " + a + ": " + list_text(c.overflow_only_in_a) + "; only in " + b + ": " +
       list_text(c.overflow_only_in_b) + "\n";
  std::snprintf(buf, sizeof buf,
                "loss gap: max %.3g (relative %.3g at step %lld), mean %.3g; final loss %.6g vs %.6g\n",
                c.max_abs_loss_gap, c.max_relative_loss_gap, static_cast<long long>(c.max_gap_step),
                c.mean_abs_loss_gap, c.final_loss_a, c.final_loss_b);
  s += buf;
  if (!c.non_finite_loss_steps.empty()) s += "non-finite loss at steps: " + list_text(c.non_finite_loss_steps) + "\n";
  std::snprintf(buf, sizeof buf, "verdict: %s (overflow steps %s; relative loss gap above %.3g at %zu steps%s%s)\n",
                c.agree ? "AGREE" : "DIFFER", c.overflow_steps_agree ? "agree" : "differ",
                options.max_relative_loss_gap, c.steps_over_tolerance.size(),
                c.steps_over_tolerance.empty() ? "" : ": ", list_text(c.steps_over_tolerance).c_str());
  s += buf;
  if (c.common_steps == 0) s += "no step number is in both runs: nothing to compare\n";
  return s;
}

std::string comparison_json(const comparison& c, std::string_view name_a, std::string_view name_b,
                            const comparison_options& options) {
  nlohmann::ordered_json j;
  j["a"] = std::string(name_a);
  j["b"] = std::string(name_b);
  j["steps_a"] = c.steps_a;
  j["steps_b"] = c.steps_b;
  j["common_steps"] = c.common_steps;
  j["overflow_steps_a"] = c.overflow_steps_a;
  j["overflow_steps_b"] = c.overflow_steps_b;
  j["overflow_only_in_a"] = c.overflow_only_in_a;
  j["overflow_only_in_b"] = c.overflow_only_in_b;
  j["non_finite_loss_steps"] = c.non_finite_loss_steps;
  j["max_abs_loss_gap"] = finite_or_text(c.max_abs_loss_gap);
  j["max_relative_loss_gap"] = finite_or_text(c.max_relative_loss_gap);
  j["max_gap_step"] = c.max_gap_step;
  j["mean_abs_loss_gap"] = finite_or_text(c.mean_abs_loss_gap);
  j["final_loss_a"] = finite_or_text(c.final_loss_a);
  j["final_loss_b"] = finite_or_text(c.final_loss_b);
  j["max_relative_loss_gap_allowed"] = options.max_relative_loss_gap;
  j["steps_over_tolerance"] = c.steps_over_tolerance;
  j["overflow_steps_agree"] = c.overflow_steps_agree;
  j["loss_within_tolerance"] = c.loss_within_tolerance;
  j["agree"] = c.agree;
  return j.dump();
}

}  // namespace safeamp::gpu_trainer
