// What to run instead when the parity gate fails: the first configured baseline that did not fail (e.g.
// bf16-mixed, then fp32), else the last known-good policy that an earlier PASS recorded in the output
// folder, else the reference policy. Decisions and known-good records are persisted (atomic writes).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "safeamp/sim/parity.hpp"

namespace safeamp::sim {

/// A candidate that passed the gate, as remembered in <out>/known_good.json.
struct known_good_record {
  std::string candidate;
  std::string policy;
  std::string scaler;  // its loss scaler (empty in records written before 2026-12-06)
  std::string scenario;
  std::string reference_id;
  std::string recorded_utc;

  friend bool operator==(const known_good_record&, const known_good_record&) = default;
};

/// The gate's decision about one candidate.
struct fallback_decision {
  std::string candidate;
  std::string policy;
  verdict outcome = verdict::fail;
  std::string run_instead;           // empty on PASS
  std::string source;                // why that one: "baseline 1 (bf16-mixed, PASS in this run)", ...
  std::vector<std::string> reasons;  // the failed checks
  std::string decided_utc;
};

/// Decision for `result`. Baselines are names of candidates or policies, tried in order: one whose run in
/// `this_run` failed (or that is `result` itself, or `result`'s own policy when no other run of it passed) is
/// passed over; one that passed is chosen (by policy name: a run of that policy other than `result`, named with
/// its scaler); one not run is chosen when it is the reference policy, else chosen and marked as not verified in
/// this run. Runs with injected faults (parity_result::faulted) count as not run. With no usable baseline,
/// `last_good` is named unless it is `result`'s own policy and scaler, or, when `reference_id` is given, it was
/// recorded against another reference (another scenario or model, or the reference a --relock replaced: the
/// source then says it was ignored); with none of those, the reference policy.
[[nodiscard]] fallback_decision decide_fallback(const parity_result& result, const std::vector<std::string>& baselines,
                                                const std::vector<parity_result>& this_run,
                                                const std::optional<known_good_record>& last_good,
                                                std::string_view reference_policy, std::string_view reference_id = {});

/// <out>/known_good.json: the most recent PASS (nullopt when the file does not exist; safeamp::error when
/// it exists but is corrupt: known_good_from_json_text's checks).
[[nodiscard]] std::optional<known_good_record> read_known_good(const std::filesystem::path& file);
void write_known_good(const std::filesystem::path& file, const known_good_record& record);
/// The text write_known_good writes: a JSON object with the record's six strings.
[[nodiscard]] std::string known_good_json_text(const known_good_record& record);
/// Reads a known-good record (`source` names the file in errors) and checks it as safeamp sim writes one, since
/// its candidate and policy reach the terminal, report.html and decisions.jsonl as "run instead": candidate,
/// policy, scenario, reference_id and recorded_utc present, scaler optional (records before 2026-12-06 have none);
/// candidate (at most 128 bytes), scenario (256) and scaler (512) without control characters; the policy one that
/// parse_policy reads (a preset or a policy string); reference_id 16 lowercase hex digits; recorded_utc
/// YYYY-MM-DDTHH:MM:SSZ. Anything else is a safeamp::error naming the file and the field. Until 2026-12-07 any
/// strings were taken, so a hand-edited file could name an unparseable policy or put an ESC on the terminal.
[[nodiscard]] known_good_record known_good_from_json_text(std::string_view text, const std::string& source);

/// One JSON line per decision, appended to <out>/decisions.jsonl.
[[nodiscard]] std::string decision_json_line(const fallback_decision& d);
/// decision_json_line of each decision, in order.
[[nodiscard]] std::string decisions_jsonl(const std::vector<fallback_decision>& decisions);
/// Before any run: <out>/decisions.jsonl is absent or a regular file this user may append to (a directory, a
/// FIFO or a symbolic link is refused, naming the file), whatever its size (check_appendable_file).
void check_decisions_file(const std::filesystem::path& file);
/// Appends the decisions' lines with one write and an fsync (append_file_durably): the file is never read or
/// rewritten, so it may grow past any input cap. `before_write` as append_file_durably's.
void append_decisions(const std::filesystem::path& file, const std::vector<fallback_decision>& decisions,
                      const std::function<void(std::uintmax_t offset, std::string_view written)>& before_write = {});

}  // namespace safeamp::sim
