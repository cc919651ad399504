// `safeamp plan --verified-by`: the parity verdicts of a `safeamp sim` summary.json, counted only for the model they
// were measured on (the summary records that model's parameter count, not its shape), and the lines that say so.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "plan_inputs.hpp"
#include "plan_model_size.hpp"

namespace safeamp::tool {

/// One candidate of the summary that is not counted: its name, policy, verdict and its model's parameter count.
struct parity_candidate {
  std::string name{};
  precision_policy policy{};
  std::string verdict{};
  std::uint64_t parameters = 0;  // 0: the summary records none
};

/// Policies judged by a `safeamp sim` parity gate on the planned model, read from its summary.json.
struct parity_results {
  std::string source{};
  std::string scenario{};                         // the summary's scenario name, bounded ("" when it has none)
  parameter_range planned{};                      // the model the evidence was compared with
  std::uint64_t counted_parameters = 0;           // the model of the counted candidates (0: none counted)
  std::vector<precision_policy> passed{};         // some counted candidate with this policy passed
  std::vector<precision_policy> failed{};         // every counted candidate with this policy failed (none passed)
  std::vector<std::string> faulted{};             // candidates run with injected faults: ignored, by name
  std::vector<parity_candidate> other_model{};    // run on a model of another parameter count: not counted
  std::vector<parity_candidate> model_unknown{};  // no parameter count recorded: not comparable, not counted
};

/// The parameter count of each candidate's model, from the decision rows safeamp sim writes beside the candidates
/// (decision.candidates[i].parameters: the elements of every parameter gradient of candidate i's first step; 0 when
/// it recorded no step). All 0 when the summary has no decision (one written by hand, or before 2026-12).
inline std::vector<std::uint64_t> parity_model_parameters(const nlohmann::json& j, const std::string& source) {
  const nlohmann::json& candidates = j["candidates"];
  std::vector<std::uint64_t> out(candidates.size(), 0);
  if (!j.contains("decision")) return out;
  const std::string accepted =
      "decision.candidates as safeamp sim writes them: one row per candidate, in order, with its name and its "
      "parameters (a whole number)";
  const nlohmann::json& d = j["decision"];
  if (!d.is_object() || !d.contains("candidates") || !d["candidates"].is_array() ||
      d["candidates"].size() != candidates.size()) {
    throw error("verified-by", "'" + sim::bounded_text(source) + "' (decision " + sim::summarize_json(d) + ")",
                accepted);
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    const nlohmann::json& row = d["candidates"][i];
    const nlohmann::json& c = candidates[i];
    const bool names_agree =
        !row.is_object() || !row.contains("name") || !c.contains("name") || row["name"] == c["name"];
    if (!row.is_object() || !row.contains("parameters") || !row["parameters"].is_number_unsigned() || !names_agree) {
      throw error("verified-by",
                  "'" + sim::bounded_text(source) + "' decision row " + std::to_string(i) + " (" +
                      sim::summarize_json(row) + ")",
                  accepted);
    }
    out[i] = row["parameters"].get<std::uint64_t>();
  }
  return out;
}

inline std::string parity_names_text(const std::vector<parity_candidate>& cs) {
  std::string out;
  for (const parity_candidate& c : cs) out += (out.empty() ? "" : ", ") + c.name + " (" + c.verdict + ")";
  return out;
}

/// Reads a summary.json written by `safeamp sim` through the checked reader (size cap, depth, duplicate keys):
/// {"scenario": name, "decision": {"candidates": [{"name", "parameters", ...}, ...]},
///  "candidates": [{"name", "policy": "<policy string>", "verdict": "PASS" | "FAIL" | "INCONCLUSIVE", ...}, ...]}.
/// Parity evidence counts only for the model it was measured on: a candidate counts when its model's parameter count
/// agrees with `planned` (within 1%, `agrees`); one of another count is listed in `other_model`, one without a
/// recorded count in `model_unknown` (nothing is assumed), and neither verifies nor excludes its policy. The summary
/// records no shape, so two models with one parameter count are not told apart; the plan says so.
/// A policy counts as passed when any of its counted candidates passed (a policy can fail with one scaler and pass
/// with another), as failed when counted candidates with it failed and none passed; INCONCLUSIVE decides nothing. A
/// candidate run with injected faults (a non-empty "faults": the simulator writes their description, "gradient-nan in
/// head.weight at steps 5,6", or an empty string) is a robustness test, not evidence for or against its policy (the
/// simulator's own decision drops it): it neither verifies nor excludes, and is listed in `faulted`.
inline parity_results parse_parity_summary(const nlohmann::json& j, const std::string& source,
                                           const parameter_range& planned) {
  const std::string accepted = "a summary.json written by safeamp sim (candidates with policy and verdict)";
  if (!j.is_object() || !j.contains("candidates") || !j["candidates"].is_array()) {
    throw error("verified-by", "'" + sim::bounded_text(source) + "' (" + sim::summarize_json(j) + ")", accepted);
  }
  parity_results r;
  r.source = source;
  r.planned = planned;
  if (j.contains("scenario") && j["scenario"].is_string())
    r.scenario = sim::bounded_text(j["scenario"].get<std::string>(), 80);
  std::vector<precision_policy> failed;
  std::vector<parity_candidate> candidates;
  std::vector<bool> with_faults;
  std::size_t index = 0;
  for (const nlohmann::json& c : j["candidates"]) {
    // Appended piece by piece: GCC 12 warns a false -Wrestrict on "literal" + a temporary std::string.
    std::string where = "'";
    where += sim::bounded_text(source);
    where += "' candidate ";
    where += std::to_string(index++);
    if (!c.is_object() || !c.contains("policy") || !c["policy"].is_string() || !c.contains("verdict") ||
        !c["verdict"].is_string()) {
      throw error("verified-by", where + " (" + sim::summarize_json(c) + ")", accepted);
    }
    parity_candidate k;
    k.name = c.contains("name") && c["name"].is_string() ? sim::bounded_text(c["name"].get<std::string>(), 60)
                                                         : "candidate " + std::to_string(index - 1);
    try {
      k.policy = parse_policy(c["policy"].get<std::string>());
    } catch (const error& e) {
      throw error("verified-by", where + " (" + e.what() + ")", accepted);
    }
    k.verdict = c["verdict"].get<std::string>();
    if (k.verdict != "PASS" && k.verdict != "FAIL" && k.verdict != "INCONCLUSIVE") {
      throw error("verified-by", where + " (verdict '" + sim::bounded_text(k.verdict, 40) + "')",
                  "PASS, FAIL or INCONCLUSIVE");
    }
    bool faulted = false;
    if (c.contains("faults")) {
      const nlohmann::json& f = c["faults"];
      if (!f.is_null() && !f.is_string() && !f.is_array()) {
        throw error("verified-by", where + " (faults " + sim::summarize_json(f) + ")",
                    "faults as the simulator writes them: a description (empty: none) or a list");
      }
      faulted = !f.empty() && !(f.is_string() && f.get<std::string>().empty());
      if (faulted) r.faulted.push_back(k.name);
    }
    candidates.push_back(k);
    with_faults.push_back(faulted);
  }
  const std::vector<std::uint64_t> parameters = parity_model_parameters(j, source);
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    parity_candidate& k = candidates[i];
    if (with_faults[i]) continue;  // no evidence: not compared either
    k.parameters = parameters[i];
    if (k.parameters == 0) {
      r.model_unknown.push_back(k);
    } else if (!agrees(planned, k.parameters)) {
      r.other_model.push_back(k);
    } else {
      r.counted_parameters = k.parameters;
      if (k.verdict == "PASS") r.passed.push_back(k.policy);
      if (k.verdict == "FAIL") failed.push_back(k.policy);
    }
  }
  for (const precision_policy& p : failed) {
    if (std::find(r.passed.begin(), r.passed.end(), p) == r.passed.end()) r.failed.push_back(p);
  }
  return r;
}

inline parity_results read_parity_summary(const std::string& path, const parameter_range& planned) {
  return parse_parity_summary(sim::read_json_input(path, "verified-by"), path, planned);
}

/// Whether the summary holds a result for `p` that was not counted (another model, or one that cannot be compared).
[[nodiscard]] inline bool uncounted_result_for(const parity_results& r, const precision_policy& p) {
  const auto same = [&p](const parity_candidate& c) { return c.policy == p; };
  return std::any_of(r.other_model.begin(), r.other_model.end(), same) ||
         std::any_of(r.model_unknown.begin(), r.model_unknown.end(), same);
}

/// What the plan did with the summary, one line each: the model compared, and the candidates not counted and why.
[[nodiscard]] inline std::vector<std::string> parity_notes(const parity_results& r) {
  std::vector<std::string> lines;
  const std::string source = sim::bounded_text(r.source);
  const std::string scenario = r.scenario.empty() ? "no scenario name" : "scenario '" + r.scenario + "'";
  const std::string planned =
      "this plan's model: " + r.planned.basis + ", " + agreeing_text(r.planned) + " with 1% either side";
  if (r.counted_parameters > 0) {
    lines.push_back("Parity results of " + source + " counted: measured on a model of " +
                    std::to_string(r.counted_parameters) + " parameters (" + scenario + "); " + planned +
                    ". summary.json records a model's parameter count, not its shape: only the count is compared");
  }
  if (!r.other_model.empty()) {
    std::map<std::uint64_t, std::vector<parity_candidate>> by_count;
    for (const parity_candidate& c : r.other_model) by_count[c.parameters].push_back(c);
    std::string models;
    for (const auto& [count, cs] : by_count) {
      models += (models.empty() ? "" : "; ") + std::to_string(count) + " parameters: " + parity_names_text(cs);
    }
    lines.push_back("Parity results of " + source + " NOT COUNTED: " + std::to_string(r.other_model.size()) +
                    " candidate(s) ran on another model, " + scenario + ": " + models + "; " + planned +
                    ". Parity evidence counts only for the model it was measured on: they verify and exclude nothing");
  }
  if (!r.model_unknown.empty()) {
    lines.push_back("Parity results of " + source + " NOT COUNTED: " + std::to_string(r.model_unknown.size()) +
                    " candidate(s) without a recorded model (no decision.candidates[].parameters, as in a summary "
                    "written by hand or before 2026-12; known: " +
                    scenario + "), so it cannot be compared with " + planned + ": " +
                    parity_names_text(r.model_unknown) + ". They verify and exclude nothing");
  }
  if (!r.faulted.empty()) {
    std::string names;
    for (const std::string& n : r.faulted) names += (names.empty() ? "" : ", ") + n;
    lines.push_back("Parity results: " + std::to_string(r.faulted.size()) + " candidate(s) of " + source +
                    " ran with injected faults and are ignored (a robustness test, no evidence for or against their "
                    "policy): " +
                    names);
  }
  return lines;
}

/// The same for --json.
[[nodiscard]] inline nlohmann::json parity_json(const parity_results& r) {
  nlohmann::json other = nlohmann::json::array(), unknown = nlohmann::json::array();
  for (const parity_candidate& c : r.other_model) {
    other.push_back({{"name", c.name}, {"verdict", c.verdict}, {"parameters", c.parameters}});
  }
  for (const parity_candidate& c : r.model_unknown) unknown.push_back({{"name", c.name}, {"verdict", c.verdict}});
  return {{"source", r.source},
          {"scenario", r.scenario},
          {"planned_parameters", {{"low", r.planned.low}, {"high", r.planned.high}}},
          {"agreeing_parameters", {{"low", lowest_agreeing(r.planned)}, {"high", highest_agreeing(r.planned)}}},
          {"counted_parameters", r.counted_parameters},
          {"other_model_ignored", other},
          {"model_unknown_ignored", unknown}};
}

}  // namespace safeamp::tool
