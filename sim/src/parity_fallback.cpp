// Fallback decisions of the parity gate and their persistence in the output folder.
#include "safeamp/sim/parity_fallback.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "safeamp/error.hpp"
#include "safeamp/policy/policy_string.hpp"
#include "safeamp/quoted_input.hpp"
#include "safeamp/sim/json_input.hpp"
#include "safeamp/sim/report_files.hpp"

namespace safeamp::sim {
namespace {
using json = nlohmann::json;
}

fallback_decision decide_fallback(const parity_result& result, const std::vector<std::string>& baselines,
                                  const std::vector<parity_result>& this_run,
                                  const std::optional<known_good_record>& recorded_good,
                                  std::string_view reference_policy, std::string_view reference_id) {
  // A record judged against another reference (another scenario, or the reference before a --relock) vouches for
  // nothing here: until 2026-12-06 one of another model was named as "run instead".
  const bool other_reference = recorded_good && !reference_id.empty() && recorded_good->reference_id != reference_id;
  const std::optional<known_good_record> last_good = other_reference ? std::nullopt : recorded_good;
  fallback_decision d;
  d.candidate = result.candidate;
  d.policy = result.policy;
  d.outcome = result.outcome;
  d.reasons = result.reasons;
  for (const std::string& u : result.undecided) d.reasons.push_back("undecided: " + u);
  d.decided_utc = utc_now_iso8601();
  if (result.outcome == verdict::pass) {
    d.source = "passed the gate";
    return d;
  }
  std::string passed_over;
  const auto pass_over = [&passed_over](const std::string& why) {
    passed_over += (passed_over.empty() ? "" : "; ") + why;
  };
  for (std::size_t i = 0; i < baselines.size(); ++i) {
    const std::string& b = baselines[i];
    const std::string tag = "baseline " + std::to_string(i + 1) + " (" + b;
    if (b == result.candidate) continue;  // never suggest the candidate that just failed
    // Runs of this baseline in this invocation: by candidate label first, else by policy name (other than the
    // candidate that just failed). A run with injected faults is no evidence either way.
    std::vector<const parity_result*> runs;
    bool faulted_only = false;
    for (const parity_result& p : this_run) {
      if (p.candidate != b) continue;
      if (p.faulted) {
        faulted_only = true;
      } else {
        runs.push_back(&p);
      }
    }
    const bool by_policy = runs.empty() && !faulted_only;
    if (by_policy) {
      for (const parity_result& p : this_run) {
        if (p.policy != b || p.candidate == result.candidate) continue;
        if (p.faulted) {
          faulted_only = true;
        } else {
          runs.push_back(&p);
        }
      }
    }
    bool any_fail = false;
    const parity_result* passed = nullptr;
    for (const parity_result* p : runs) {
      if (p->outcome == verdict::pass && passed == nullptr) passed = p;
      any_fail = any_fail || p->outcome == verdict::fail;
    }
    if (!runs.empty() && passed == nullptr) {
      pass_over(b + (any_fail ? " failed" : " was inconclusive") + " in this run");
      continue;
    }
    if (runs.empty() && b == result.policy) {  // the policy that just failed, and no other run of it
      pass_over(b + " failed in this run (as " + result.candidate + ")" +
                (faulted_only ? ", and ran otherwise only with injected faults" : ""));
      continue;
    }
    if (runs.empty() && faulted_only) {
      pass_over(b + " ran only with injected faults in this run");
      continue;
    }
    d.run_instead = b;
    if (passed != nullptr) {
      d.source = tag + ", PASS in this run";
      if (by_policy) {
        d.source += " as " + passed->candidate;
        if (!passed->scaler.empty() && passed->scaler != result.scaler) d.source += ", scaler " + passed->scaler;
      }
      d.source += ")";
    } else if (b == reference_policy) {
      d.source = tag + ", the reference policy)";
    } else {
      d.source = tag + ", not run in this scenario: verify it)";
    }
    if (!passed_over.empty()) d.source += " after " + passed_over;
    return d;
  }
  // The last known-good PASS, unless it is what just failed: the same policy under the same scaler.
  if (other_reference) {
    pass_over("the last known-good record, " + recorded_good->candidate + " (" + recorded_good->policy +
              "), was judged against reference " + recorded_good->reference_id +
              (recorded_good->scenario.empty() ? "" : " of scenario '" + recorded_good->scenario + "'") + ", not " +
              std::string(reference_id) + ": ignored");
  }
  const bool same_as_failed = last_good && last_good->policy == result.policy &&
                              (last_good->scaler.empty() || last_good->scaler == result.scaler);
  if (last_good && !same_as_failed) {
    d.run_instead = last_good->policy;
    d.source = "last known-good: " + last_good->candidate + " (" + last_good->policy +
               (last_good->scaler.empty() ? "" : ", scaler " + last_good->scaler) + ") passed on " +
               last_good->recorded_utc + " against reference " + last_good->reference_id;
  } else {
    if (same_as_failed) {
      pass_over("the last known-good, " + last_good->candidate + ", is this candidate's own policy" +
                (last_good->scaler.empty() ? "" : " and scaler"));
    }
    d.run_instead = std::string(reference_policy);
    d.source = "no usable baseline or known-good record: the reference policy";
  }
  if (!passed_over.empty()) d.source += " (" + passed_over + ")";
  return d;
}

known_good_record known_good_from_json_text(std::string_view text, const std::string& source) {
  const std::string accepted = "a known_good.json written by safeamp sim (delete it to start afresh)";
  const json j = parse_json_input(text, "known-good record", source);
  const auto bad = [&](const std::string& field, const std::string& why) {
    return error("known-good record '" + bounded_text(source, 200) + "' " + field, why, accepted);
  };
  if (!j.is_object()) throw bad("(the file)", summarize_json(j) + ", not a JSON object");
  // A string member: present unless optional (then empty when absent), non-empty, at most max_bytes, no control
  // characters.
  const auto field = [&](const char* key, std::size_t max_bytes, bool optional) -> std::string {
    if (!j.contains(key)) {
      if (optional) return {};
      throw bad(key, "missing");
    }
    const json& v = j.at(key);
    if (!v.is_string()) throw bad(key, summarize_json(v) + ", not a string");
    std::string s = v.get<std::string>();
    if (s.size() > max_bytes) {
      throw bad(key, "'" + bounded_text(s, 40) + "' (" + std::to_string(s.size()) + " bytes, at most " +
                         std::to_string(max_bytes) + ")");
    }
    if (std::any_of(s.begin(), s.end(), is_control_byte))
      throw bad(key, summarize_json(v) + ", which holds control characters");
    if (s.empty() && !optional) throw bad(key, "\"\", empty");
    return s;
  };
  known_good_record r;
  r.candidate = field("candidate", 128, false);
  r.policy = field("policy", 4096, false);
  r.scaler = field("scaler", 512, true);
  r.scenario = field("scenario", 256, false);
  r.reference_id = field("reference_id", 16, false);
  r.recorded_utc = field("recorded_utc", 20, false);
  try {
    (void)parse_policy(r.policy);
  } catch (const error& e) {
    throw bad("policy", quoted_input(r.policy) + " (" + e.what() + "), not a preset or a policy string");
  }
  if (!is_hex64(r.reference_id)) {
    throw bad("reference_id", quoted_input(r.reference_id) + ", not 16 lowercase hex digits");
  }
  if (!is_utc_iso8601(r.recorded_utc))
    throw bad("recorded_utc", quoted_input(r.recorded_utc) + ", not a UTC time YYYY-MM-DDTHH:MM:SSZ");
  return r;
}

std::optional<known_good_record> read_known_good(const std::filesystem::path& file) {
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return std::nullopt;
  return known_good_from_json_text(read_input_file(file, "known-good record"), file.string());
}

std::string known_good_json_text(const known_good_record& r) {
  const json j{{"candidate", r.candidate},
               {"policy", r.policy},
               {"scaler", r.scaler},
               {"scenario", r.scenario},
               {"reference_id", r.reference_id},
               {"recorded_utc", r.recorded_utc}};
  return j.dump(1) + "\n";
}

void write_known_good(const std::filesystem::path& file, const known_good_record& r) {
  write_file_atomically(file, known_good_json_text(r));
}

std::string decision_json_line(const fallback_decision& d) {
  const json j{{"decided_utc", d.decided_utc}, {"candidate", d.candidate},     {"policy", d.policy},
               {"verdict", verdict_name(d.outcome)}, {"run_instead", d.run_instead}, {"source", d.source},
               {"reasons", d.reasons}};
  return j.dump() + "\n";
}

std::string decisions_jsonl(const std::vector<fallback_decision>& decisions) {
  std::string text;
  for (const fallback_decision& d : decisions) text += decision_json_line(d);
  return text;
}

void check_decisions_file(const std::filesystem::path& file) { check_appendable_file(file, "decisions file"); }

void append_decisions(const std::filesystem::path& file, const std::vector<fallback_decision>& decisions,
                      const std::function<void(std::uintmax_t offset, std::string_view written)>& before_write) {
  if (decisions.empty()) return;
  append_file_durably(file, decisions_jsonl(decisions), "decisions file", before_write);
}

}  // namespace safeamp::sim
