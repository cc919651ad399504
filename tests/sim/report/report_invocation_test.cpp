// The INCOMPLETE marker, previous/ and the record of outputs of an output folder, on folders built by hand from
// the real renderers' outputs: a finished folder's outputs move aside, a marked one's partial outputs go, a start
// killed while moving is completed by the next one; a file safeamp sim did not write (a user's summary.json, a file
// edited since, a stray file in previous/) is refused before anything changes; the decisions an unfinished
// invocation appended are withdrawn once.
#include "safeamp/sim/report_invocation.hpp"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "report_fixtures.hpp"
#include "safeamp/error.hpp"
#include "safeamp/sim/parity_fallback.hpp"
#include "safeamp/sim/report_files.hpp"

using namespace safeamp::sim;
namespace fs = std::filesystem;

namespace {

fs::path fresh(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("safeamp_invocation_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir / "telemetry");
  return dir;
}
void put(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}
std::string text_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// What safeamp sim writes, from its own renderers (two invocations' worth: `n` tells them apart).
struct rendered {
  std::string report, summary, telemetry_a, telemetry_ref;
};
rendered outputs_of(int n) {
  sim_summary s = fixtures::make_summary();
  s.scenario = "invocation " + std::to_string(n);
  return {render_html_report(s), render_summary_json(s), telemetry_jsonl(fixtures::make_run("a", 5 + n, 1.0, 0.1 * n)),
          telemetry_jsonl(fixtures::make_run("reference fp32", 40, 1.0, 0.0))};
}

// Every regular file under `dir` with its content, to compare a folder before and after.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (fs::is_symlink(e.symlink_status())) {
      files[fs::relative(e.path(), dir).string()] = "-> " + fs::read_symlink(e.path()).string();
    } else if (e.is_regular_file()) {
      files[fs::relative(e.path(), dir).string()] = text_of(e.path());
    }
  }
  return files;
}

// check_invocation, then begin_invocation, must refuse `out` naming `file`, and leave every file as it was.
void check_refused(const fs::path& out, const std::string& file) {
  const auto before = snapshot(out);
  for (const bool begin : {false, true}) {
    INFO((begin ? "begin_invocation" : "check_invocation"));
    try {
      if (begin) {
        (void)begin_invocation(out, {.scenario = "s", .kept_telemetry = {}});
      } else {
        check_invocation(out);
      }
      FAIL("a folder holding " << file << " was accepted");
    } catch (const safeamp::error& e) {
      const std::string what = e.what();
      INFO(what);
      CHECK(e.field() == "--out");
      CHECK(what.find(file) != std::string::npos);
      CHECK(what.find("an empty folder, or one safeamp sim wrote") != std::string::npos);
    }
    CHECK(snapshot(out) == before);
  }
}

// Runs `write` in a child process whose files may not grow beyond `limit_bytes` (RLIMIT_FSIZE, SIGXFSZ ignored):
// true when it threw safeamp::error there, as a write over the limit does.
template <class Write>
bool fails_under_file_limit(std::size_t limit_bytes, Write write) {
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{.rlim_cur = limit_bytes, .rlim_max = limit_bytes};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    try {
      write();
    } catch (const safeamp::error&) {
      ::_exit(0);
    }
    ::_exit(1);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  return WEXITSTATUS(status) == 0;
}

// Every entry under `dir`, folders and empty files included.
std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::recursive_directory_iterator(dir)) names.push_back(fs::relative(e.path(), dir).string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

TEST_CASE("a finished folder's outputs move into previous/, which they replace; the marker until finished") {
  // A folder of safeamp before the record existed: its outputs are recognised by their content.
  const fs::path out = fresh("finished");
  const rendered one = outputs_of(1);
  const rendered two = outputs_of(2);
  put(out / "report.html", two.report);
  put(out / "summary.json", two.summary);
  put(out / "telemetry" / "reference-fp32.jsonl", two.telemetry_ref);
  put(out / "telemetry" / "a.jsonl", two.telemetry_a);
  put(out / "previous" / "report.html", one.report);
  put(out / "previous" / "telemetry" / "old.jsonl", one.telemetry_a);
  put(out / "known_good.json", "kept");
  put(out / "notes.txt", "a user's notes: no output's name");
  const invocation_cleanup c = begin_invocation(out, {.scenario = "s", .kept_telemetry = {"reference-fp32.jsonl"}});
  CHECK_FALSE(c.was_incomplete);
  CHECK(c.moved.size() == 3);
  CHECK(invocation_incomplete(out));
  CHECK(text_of(out / "INCOMPLETE").find("scenario 's'") != std::string::npos);
  CHECK(text_of(out / "previous" / "report.html") == two.report);
  CHECK(text_of(out / "previous" / "summary.json") == two.summary);
  CHECK(text_of(out / "previous" / "telemetry" / "a.jsonl") == two.telemetry_a);
  CHECK_FALSE(fs::exists(out / "previous" / "telemetry" / "old.jsonl"));  // previous/ holds one invocation
  CHECK_FALSE(fs::exists(out / "report.html"));
  CHECK(text_of(out / "telemetry" / "reference-fp32.jsonl") == two.telemetry_ref);  // the locked reference's stays
  CHECK(text_of(out / "known_good.json") == "kept");
  CHECK(text_of(out / "notes.txt") == "a user's notes: no output's name");
  CHECK_FALSE(fs::exists(out / "previous.new"));
  finish_invocation(out);
  CHECK_FALSE(invocation_incomplete(out));
  // The next start replaces this previous/ (now with its record) by the outputs it finds in the record.
  write_invocation_output(out, "report.html", one.report);
  write_invocation_output(out, "telemetry/b.jsonl", one.telemetry_a);
  const invocation_cleanup c2 = begin_invocation(out, {.scenario = "s", .kept_telemetry = {"reference-fp32.jsonl"}});
  CHECK(c2.moved.size() == 2);
  CHECK(text_of(out / "previous" / "report.html") == one.report);
  CHECK(text_of(out / "previous" / "telemetry" / "b.jsonl") == one.telemetry_a);
  CHECK_FALSE(fs::exists(out / "previous" / "summary.json"));
}

TEST_CASE("under --relock the reference's telemetry stays and goes into previous/ too") {
  const fs::path out = fresh("relock");
  const rendered one = outputs_of(1);
  write_invocation_output(out, "report.html", one.report);
  write_invocation_output(out, "telemetry/reference-fp32.jsonl", one.telemetry_ref);
  const invocation_cleanup c = begin_invocation(
      out, {.scenario = "s", .kept_telemetry = {"reference-fp32.jsonl"}, .kept_also_in_previous = true});
  CHECK(c.moved.size() == 1);
  CHECK(text_of(out / "telemetry" / "reference-fp32.jsonl") == one.telemetry_ref);
  CHECK(text_of(out / "previous" / "telemetry" / "reference-fp32.jsonl") == one.telemetry_ref);
  // The new reference's telemetry replaces the one at the top, not the one in previous/.
  write_invocation_output(out, "telemetry/reference-fp32.jsonl", one.telemetry_a);
  CHECK(text_of(out / "previous" / "telemetry" / "reference-fp32.jsonl") == one.telemetry_ref);
  finish_invocation(out);
  CHECK(begin_invocation(out, {.scenario = "s", .kept_telemetry = {}}).moved.size() == 1);  // both verified
}

TEST_CASE("replacing a recorded output never leaves the record naming content that is gone") {
  // A write of the reference's telemetry over the recorded one (a --relock) that stops after the file was replaced
  // and before the record was updated. The stop is a file-size limit in a child process that the record's write
  // exceeds (it carries a large decisions append) and the telemetry's does not.
  const fs::path out = fresh("replace");
  const rendered one = outputs_of(1);
  const fs::path telemetry = "telemetry/reference-fp32.jsonl";
  write_invocation_output(out, telemetry, one.telemetry_ref);
  (void)begin_invocation(out, {.scenario = "s", .kept_telemetry = {"reference-fp32.jsonl"}});
  const std::size_t limit_bytes = std::size_t{1} << 20;
  record_decisions_append(out, 0, std::string(2 * limit_bytes, 'x'));
  REQUIRE(one.telemetry_a.size() < limit_bytes);
  CHECK(fails_under_file_limit(limit_bytes, [&] {  // the write fails, as arranged
    write_invocation_output(out, telemetry, one.telemetry_a);
  }));
  // The next start takes the folder: the file is the recorded one, or an unfinished invocation's output.
  CHECK_NOTHROW(begin_invocation(out, {.scenario = "s", .kept_telemetry = {}}));
}

TEST_CASE("a marked folder (an invocation that trained and failed) loses its partial outputs, keeps previous/") {
  const fs::path out = fresh("marked");
  const rendered one = outputs_of(1);
  // An invocation that started, wrote one run's telemetry and a second one whose record it did not update, and
  // failed; previous/ from safeamp before the record.
  (void)begin_invocation(out, {.scenario = "s", .kept_telemetry = {}});
  write_invocation_output(out, "telemetry/a.jsonl", one.telemetry_a);
  put(out / "telemetry" / "b.jsonl", one.telemetry_a);
  put(out / "previous" / "report.html", one.report);
  const invocation_cleanup c = begin_invocation(out, {.scenario = "s", .kept_telemetry = {}});
  CHECK(c.was_incomplete);
  CHECK(c.removed.size() == 2);
  CHECK_FALSE(fs::exists(out / "telemetry" / "b.jsonl"));
  CHECK(c.moved.empty());
  CHECK_FALSE(fs::exists(out / "telemetry" / "a.jsonl"));
  CHECK(text_of(out / "previous" / "report.html") == one.report);
  CHECK(invocation_incomplete(out));
  CHECK(incomplete_note(out).find("marked INCOMPLETE") != std::string::npos);
}

TEST_CASE("a start killed while moving the outputs aside is completed by the next start, nothing lost") {
  // Marker written, report.html already in previous.new/, summary.json and a.jsonl not yet moved, previous/ old.
  const fs::path out = fresh("interrupted");
  const rendered one = outputs_of(1);
  const rendered two = outputs_of(2);
  (void)begin_invocation(out, {.scenario = "s", .kept_telemetry = {}});  // the marker of the start that was killed
  put(out / "previous.new" / "report.html", two.report);
  put(out / "summary.json", two.summary);
  put(out / "telemetry" / "a.jsonl", two.telemetry_a);
  put(out / "previous" / "report.html", one.report);
  const invocation_cleanup c = begin_invocation(out, {.scenario = "s", .kept_telemetry = {}});
  CHECK(c.removed.empty());
  CHECK(c.moved.size() == 2);
  CHECK(text_of(out / "previous" / "report.html") == two.report);
  CHECK(text_of(out / "previous" / "summary.json") == two.summary);
  CHECK(text_of(out / "previous" / "telemetry" / "a.jsonl") == two.telemetry_a);
  CHECK_FALSE(fs::exists(out / "previous.new"));
  CHECK_FALSE(fs::exists(out / "summary.json"));
}

TEST_CASE("a start killed after its marker, before moving a finished invocation's outputs, moves them next time") {
  // The state such a kill leaves (tests/sim/report/kill_points.sh makes it with the tool itself): the record written
  // before the marker lists the finished invocation's outputs and says they are a finished invocation's; the marker;
  // nothing moved yet. Until 2026-12-07 the next start removed them as an unfinished invocation's partial outputs.
  const fs::path out = fresh("killed_after_marker");
  const rendered one = outputs_of(1);
  const rendered two = outputs_of(2);
  (void)begin_invocation(out, {.scenario = "s", .kept_telemetry = {}});
  write_invocation_output(out, "report.html", two.report);
  write_invocation_output(out, "summary.json", two.summary);
  write_invocation_output(out, "telemetry/a.jsonl", two.telemetry_a);
  finish_invocation(out);
  put(out / "previous" / "report.html", one.report);
  nlohmann::json record = nlohmann::json::parse(text_of(out / outputs_record_name));
  REQUIRE_FALSE(record.contains("finished_outputs_at_top"));  // written by the start, not by the outputs
  record["finished_outputs_at_top"] = true;
  put(out / outputs_record_name, record.dump());
  put(out / incomplete_marker_name, "safeamp sim started writing into " + out.string() + " (scenario 's')\n");
  REQUIRE(invocation_incomplete(out));
  const invocation_cleanup c = begin_invocation(out, {.scenario = "s", .kept_telemetry = {}});
  CHECK(c.was_incomplete);
  CHECK(c.removed.empty());
  CHECK(c.moved.size() == 3);
  CHECK(text_of(out / "previous" / "report.html") == two.report);
  CHECK(text_of(out / "previous" / "summary.json") == two.summary);
  CHECK(text_of(out / "previous" / "telemetry" / "a.jsonl") == two.telemetry_a);
  CHECK_FALSE(fs::exists(out / "summary.json"));
  CHECK(invocation_incomplete(out));
  // The record at the top no longer says so: the outputs it lists from now on are this invocation's.
  CHECK_FALSE(nlohmann::json::parse(text_of(out / outputs_record_name)).contains("finished_outputs_at_top"));
  // A start into a finished folder records its outputs as a finished invocation's before its marker: the same
  // record (sizes and hashes) with the flag, whether or not the folder had a record (one of safeamp before the
  // record: its outputs recognised by their content).
  for (const bool had_record : {true, false}) {
    INFO("had a record: " << had_record);
    const fs::path f = fresh(had_record ? "flag_with_record" : "flag_without_record");
    if (had_record) {
      write_invocation_output(f, "report.html", two.report);
      write_invocation_output(f, "summary.json", two.summary);
    } else {
      put(f / "report.html", two.report);
      put(f / "summary.json", two.summary);
    }
    // The record's write before the marker, seen in a child whose start fails at the marker (a file-size limit
    // of a few bytes more than the record's, below the marker's).
    REQUIRE(fails_under_file_limit(400, [&] {  // the marker's write fails, as arranged
      (void)begin_invocation(f, {.scenario = std::string(500, 's'), .kept_telemetry = {}});
    }));
    CHECK_FALSE(invocation_incomplete(f));
    const nlohmann::json flagged = nlohmann::json::parse(text_of(f / outputs_record_name));
    CHECK(flagged.value("finished_outputs_at_top", false));
    CHECK(flagged["files"].size() == 2);
  }
  fs::remove_all(out.parent_path());
}

TEST_CASE("a record whose finished_outputs_at_top is not true or false is refused before any change") {
  const fs::path out = fresh("bad_flag");
  write_invocation_output(out, "report.html", outputs_of(1).report);
  nlohmann::json record = nlohmann::json::parse(text_of(out / outputs_record_name));
  record["finished_outputs_at_top"] = "yes";
  put(out / outputs_record_name, record.dump());
  const auto before = snapshot(out);
  CHECK_THROWS_WITH(check_invocation(out), Catch::Contains("finished_outputs_at_top is not true or false"));
  CHECK_THROWS_WITH(begin_invocation(out, {.scenario = "s", .kept_telemetry = {}}),
                    Catch::Contains("finished_outputs_at_top is not true or false"));
  CHECK(snapshot(out) == before);
}

TEST_CASE("a record whose sizes are not whole numbers from 0 is refused before any change") {
  // The outputs_record fuzz target found 1e122 (undefined behaviour in the conversion to an integer); a negative size
  // used to wrap to 2^64 - 1 and a fractional one to lose its fraction, silently.
  for (const char* bad : {"1e122", "-1", "2.5", "18446744073709551616", "\"12\"", "null"}) {
    INFO(bad);
    const fs::path out = fresh("bad_size");
    write_invocation_output(out, "report.html", outputs_of(1).report);
    nlohmann::json record = nlohmann::json::parse(text_of(out / outputs_record_name));
    REQUIRE(record["files"].size() == 1);
    record["files"][0]["bytes"] = nlohmann::json::parse(bad);
    put(out / outputs_record_name, record.dump());
    const auto before = snapshot(out);
    CHECK_THROWS_WITH(check_invocation(out),
                      Catch::Contains("the size of 'report.html' is") && Catch::Contains("not a whole number from 0"));
    CHECK_THROWS_WITH(begin_invocation(out, {.scenario = "s", .kept_telemetry = {}}),
                      Catch::Contains("not a whole number from 0"));
    CHECK(snapshot(out) == before);
  }
  SECTION("the decisions' offset") {
    const fs::path out = fresh("bad_offset");
    write_invocation_output(out, "report.html", outputs_of(1).report);
    nlohmann::json record = nlohmann::json::parse(text_of(out / outputs_record_name));
    record["decisions"] = {{"offset", -3}, {"text", ""}};
    put(out / outputs_record_name, record.dump());
    CHECK_THROWS_WITH(check_invocation(out), Catch::Contains("the decisions' offset is -3, not a whole number from 0"));
  }
  SECTION("the known-good record's replacement") {
    const fs::path out = fresh("bad_known_good");
    write_invocation_output(out, "report.html", outputs_of(1).report);
    nlohmann::json record = nlohmann::json::parse(text_of(out / outputs_record_name));
    record["known_good"] = {{"before", nullptr}, {"bytes", 1e300}, {"fnv1a64", "0123456789abcdef"}};
    put(out / outputs_record_name, record.dump());
    CHECK_THROWS_WITH(check_invocation(out), Catch::Contains("the size of the known-good record's replacement is") &&
                                                 Catch::Contains("not a whole number from 0"));
  }
  fs::remove_all(fresh("bad_size").parent_path());
}

TEST_CASE("a file at an output's name that safeamp sim did not write is refused, and nothing changes") {
  const rendered one = outputs_of(1);
  SECTION("a user's summary.json") {
    const fs::path out = fresh("user_summary");
    put(out / "summary.json", "{\"my\": \"own results\"}\n");
    check_refused(out, "summary.json");
  }
  SECTION("a user's report.html") {
    const fs::path out = fresh("user_report");
    put(out / "report.html", "my notes");
    check_refused(out, "report.html");
  }
  SECTION("a user's telemetry/*.jsonl") {
    const fs::path out = fresh("user_telemetry");
    put(out / "telemetry" / "experiment-42.jsonl", "{\"a\":1}\n");
    check_refused(out, "experiment-42.jsonl");
  }
  SECTION("a user's file in previous/") {
    const fs::path out = fresh("user_previous");
    put(out / "previous" / "keep.txt", "mine");
    put(out / "report.html", one.report);  // a finished invocation's output, to be moved into previous/
    check_refused(out, "keep.txt");
  }
  SECTION("a user's previous/report.html") {
    const fs::path out = fresh("user_previous_report");
    put(out / "previous" / "report.html", "mine");
    check_refused(out, "report.html");
  }
  SECTION("a directory at an output's name") {
    const fs::path out = fresh("directory");
    fs::create_directories(out / "report.html");
    check_refused(out, "report.html");
  }
  SECTION("a link at an output's name, even to safeamp sim's own output") {
    const fs::path out = fresh("link");
    put(out / "elsewhere.html", one.report);
    fs::create_symlink(out / "elsewhere.html", out / "report.html");
    check_refused(out, "report.html");
  }
  SECTION("an INCOMPLETE that is not safeamp sim's marker") {
    const fs::path out = fresh("user_marker");
    put(out / "INCOMPLETE", "my list of unfinished work");
    check_refused(out, "INCOMPLETE");
  }
  SECTION("a recorded output changed since it was written") {
    const fs::path out = fresh("edited");
    write_invocation_output(out, "report.html", one.report);
    put(out / "report.html", one.report + "<p>my annotation</p>");
    check_refused(out, "report.html");
  }
  SECTION("an output the record does not list, in a folder with a record") {
    const fs::path out = fresh("unlisted");
    write_invocation_output(out, "report.html", one.report);
    put(out / "telemetry" / "copied.jsonl", one.telemetry_a);  // safeamp's format, but not written here
    check_refused(out, "copied.jsonl");
  }
  SECTION("a record listing a path outside the outputs") {
    const fs::path out = fresh("bad_record");
    put(out / ".safeamp-outputs",
        R"({"format": "safeamp sim outputs", "version": 1, "files": [{"path": "../victim", "bytes": 1,)"
        R"( "fnv1a64": "0000000000000000"}]})");
    const auto before = snapshot(out);
    CHECK_THROWS_WITH(begin_invocation(out, {.scenario = "s", .kept_telemetry = {}}),
                      Catch::Contains("../victim") && Catch::Contains("no output's name"));
    CHECK(snapshot(out) == before);
  }
}

TEST_CASE("previous/ of safeamp sim with its record is replaced; one holding a stray file is not") {
  const fs::path out = fresh("recorded_previous");
  const rendered one = outputs_of(1);
  const rendered two = outputs_of(2);
  write_invocation_output(out, "report.html", one.report);
  write_invocation_output(out, "summary.json", one.summary);
  (void)begin_invocation(out, {.scenario = "s", .kept_telemetry = {}});
  finish_invocation(out);
  REQUIRE(text_of(out / "previous" / "summary.json") == one.summary);
  write_invocation_output(out, "report.html", two.report);
  put(out / "previous" / "telemetry" / "mine.jsonl", "{\"a\":1}\n");
  check_refused(out, "mine.jsonl");
  fs::remove(out / "previous" / "telemetry" / "mine.jsonl");
  const invocation_cleanup c = begin_invocation(out, {.scenario = "s", .kept_telemetry = {}});
  CHECK(c.moved.size() == 1);
  CHECK(text_of(out / "previous" / "report.html") == two.report);
  CHECK_FALSE(fs::exists(out / "previous" / "summary.json"));
}

TEST_CASE("the decisions an unfinished invocation appended are withdrawn once; a finished one's stay") {
  const fs::path out = fresh("decisions");
  const fs::path file = out / decisions_file_name;
  const std::string earlier = "{\"an\": \"earlier invocation's line\"}\n";
  put(file, earlier);
  fallback_decision d;
  d.candidate = "x";
  d.run_instead = "fp32";
  const auto append = [&] {
    append_decisions(file, {d, d, d}, [&out](std::uintmax_t offset, std::string_view written) {
      record_decisions_append(out, offset, written);
    });
  };
  (void)begin_invocation(out, {.scenario = "s", .kept_telemetry = {}});
  append();  // and then the invocation fails: the marker stays
  REQUIRE(text_of(file).size() > earlier.size());
  const invocation_cleanup resumed = begin_invocation(out, {.scenario = "s", .kept_telemetry = {}});
  CHECK(resumed.withdrawn_decisions == 3);
  CHECK(text_of(file) == earlier);
  append();
  finish_invocation(out);
  const std::string finished = text_of(file);
  CHECK(std::count(finished.begin(), finished.end(), '\n') == 4);
  // The next start, and a start after that one failed, keep the finished invocation's lines.
  (void)begin_invocation(out, {.scenario = "s", .kept_telemetry = {}});
  const invocation_cleanup after_failure = begin_invocation(out, {.scenario = "s", .kept_telemetry = {}});
  CHECK(after_failure.was_incomplete);
  CHECK(after_failure.withdrawn_decisions == 0);
  CHECK(text_of(file) == finished);
  // Lines someone else appended after the unfinished invocation's are not withdrawn.
  append();
  put(file, text_of(file) + "{\"by\": \"hand\"}\n");
  const std::string edited = text_of(file);
  CHECK(begin_invocation(out, {.scenario = "s", .kept_telemetry = {}}).withdrawn_decisions == 0);
  CHECK(text_of(file) == edited);
  fs::remove_all(out.parent_path());
}

TEST_CASE("a known_good.json an unfinished invocation replaced is put back; a finished one's stays") {
  const fs::path out = fresh("known_good");
  const fs::path file = out / known_good_file_name;
  const known_good_record old_record{
      "bf16-mixed dynamic", "bf16-mixed",          "dynamic(65536, 2, 0.5, 2000, 2)", "s",
      "0123456789abcdef",   "2026-12-01T00:00:00Z"};
  known_good_record new_record = old_record;
  new_record.candidate = "fp16-mixed dynamic";
  new_record.policy = "fp16-mixed";
  new_record.recorded_utc = "2026-12-07T06:00:00Z";
  // The old record as a hand-formatted file (not byte for byte what write_known_good writes): put back as it was.
  const std::string old_text =
      "{\"candidate\": \"bf16-mixed dynamic\", \"policy\": \"bf16-mixed\", "
      "\"scaler\": \"dynamic(65536, 2, 0.5, 2000, 2)\", \"scenario\": \"s\", "
      "\"reference_id\": \"0123456789abcdef\", \"recorded_utc\": \"2026-12-01T00:00:00Z\"}\n";
  put(file, old_text);
  REQUIRE(read_known_good(file) == old_record);
  const auto replace = [&](const std::optional<std::string>& before) {
    record_known_good_replacement(out, before, known_good_json_text(new_record));
    write_known_good(file, new_record);
  };
  (void)begin_invocation(out, {.scenario = "s", .kept_telemetry = {}});
  replace(old_text);  // and then the invocation fails before it finishes: the marker stays
  REQUIRE(read_known_good(file) == new_record);
  const invocation_cleanup resumed = begin_invocation(out, {.scenario = "s", .kept_telemetry = {}});
  CHECK(resumed.was_incomplete);
  CHECK(resumed.restored_known_good);
  CHECK(text_of(file) == old_text);
  // Once only: a second failed start finds nothing of that invocation's to put back.
  const invocation_cleanup again = begin_invocation(out, {.scenario = "s", .kept_telemetry = {}});
  CHECK_FALSE(again.restored_known_good);
  CHECK(text_of(file) == old_text);
  // Finished: the next start, and a start after that one failed, keep the finished invocation's record.
  replace(old_text);
  finish_invocation(out);
  (void)begin_invocation(out, {.scenario = "s", .kept_telemetry = {}});
  const invocation_cleanup after_failure = begin_invocation(out, {.scenario = "s", .kept_telemetry = {}});
  CHECK(after_failure.was_incomplete);
  CHECK_FALSE(after_failure.restored_known_good);
  CHECK(read_known_good(file) == new_record);
  finish_invocation(out);

  // No record before: the unfinished invocation's is removed.
  fs::remove(file);
  (void)begin_invocation(out, {.scenario = "s", .kept_telemetry = {}});
  replace(std::nullopt);
  CHECK(begin_invocation(out, {.scenario = "s", .kept_telemetry = {}}).restored_known_good);
  CHECK_FALSE(fs::exists(file));
  // Recorded but never written (the invocation stopped between the two): the file is left as it is.
  put(file, old_text);
  record_known_good_replacement(out, old_text, known_good_json_text(new_record));
  CHECK_FALSE(begin_invocation(out, {.scenario = "s", .kept_telemetry = {}}).restored_known_good);
  CHECK(text_of(file) == old_text);
  // Edited since the unfinished invocation wrote it: not its text, left as it is.
  replace(old_text);
  known_good_record edited = new_record;
  edited.candidate = "fp16-mixed static";
  write_known_good(file, edited);
  CHECK_FALSE(begin_invocation(out, {.scenario = "s", .kept_telemetry = {}}).restored_known_good);
  CHECK(read_known_good(file) == edited);
  fs::remove_all(out.parent_path());
}

TEST_CASE("a record whose known-good text to put back is not a known-good record is refused before any change") {
  const fs::path out = fresh("known_good_bad");
  (void)begin_invocation(out, {.scenario = "s", .kept_telemetry = {}});
  record_known_good_replacement(out, std::string("{\"candidate\": \"x\\u001b[2J\"}"), "{}");
  const auto before = snapshot(out);
  CHECK_THROWS_WITH(check_invocation(out), Catch::Contains("the known-good record kept to put back"));
  CHECK_THROWS_WITH(begin_invocation(out, {.scenario = "s", .kept_telemetry = {}}),
                    Catch::Contains("the known-good record kept to put back"));
  CHECK(snapshot(out) == before);
  fs::remove_all(out.parent_path());
}

TEST_CASE("a reference's telemetry belongs to it when its losses are the reference's loss curve") {
  const fs::path out = fresh("belongs");
  const locked_reference ref =
      lock_reference(fixtures::make_run("reference fp32", 40, 1.0, 0.0), fixtures::make_manifest());
  put(out / "mine.jsonl", telemetry_jsonl(fixtures::make_run("reference fp32", 40, 1.0, 0.0)));
  put(out / "other.jsonl", telemetry_jsonl(fixtures::make_run("reference fp32", 40, 1.0, 0.01)));
  put(out / "short.jsonl", telemetry_jsonl(fixtures::make_run("reference fp32", 39, 1.0, 0.0)));
  CHECK(reference_telemetry_matches(out / "mine.jsonl", ref.loss_curve));
  CHECK_FALSE(reference_telemetry_matches(out / "other.jsonl", ref.loss_curve));
  CHECK_FALSE(reference_telemetry_matches(out / "short.jsonl", ref.loss_curve));
  CHECK_FALSE(reference_telemetry_matches(out / "missing.jsonl", ref.loss_curve));
  fs::create_symlink(out / "mine.jsonl", out / "link.jsonl");
  CHECK_FALSE(reference_telemetry_matches(out / "link.jsonl", ref.loss_curve));
  fs::remove_all(out.parent_path());
}

TEST_CASE("check_invocation accepts what begin_invocation accepts and changes nothing; a missing folder passes") {
  const fs::path root = fresh("check_only");
  fs::remove_all(root);
  check_invocation(root / "absent");  // holds nothing
  CHECK_FALSE(fs::exists(root / "absent"));
  CHECK_FALSE(fs::exists(root));
  const fs::path out = fresh("check_only_finished");
  const rendered one = outputs_of(1);
  write_invocation_output(out, "report.html", one.report);
  write_invocation_output(out, "telemetry/a.jsonl", one.telemetry_a);
  put(out / "notes.txt", "a user's notes");
  const auto before = snapshot(out);
  const auto names = entries(out);
  check_invocation(out);
  CHECK(snapshot(out) == before);
  CHECK(entries(out) == names);
  CHECK_NOTHROW(begin_invocation(out, {.scenario = "s", .kept_telemetry = {}}));
}

TEST_CASE("the lock file goes only with the invocation that created it, from a folder holding nothing else") {
  const fs::path out = fresh("lock_file");
  fs::remove_all(out / "telemetry");
  const fs::path file = out / lock_file_name;
  SECTION("created here, alone: removed, and the lock released") {
    output_folder_lock lock(out);
    REQUIRE(lock.held());
    CHECK(lock.created_file());
    CHECK(lock.remove_if_alone());
    CHECK_FALSE(lock.held());
    CHECK_FALSE(fs::exists(file));
    CHECK(entries(out).empty());
    output_folder_lock next(out);  // the next invocation creates it again
    CHECK(next.held());
    CHECK(next.created_file());
    CHECK(fs::exists(file));
  }
  SECTION("created here, beside another file: stays, and the lock is held on") {
    output_folder_lock lock(out);
    put(out / "notes.txt", "a user's notes");
    CHECK_FALSE(lock.remove_if_alone());
    CHECK(lock.held());
    CHECK(fs::exists(file));
  }
  SECTION("created here, beside an empty folder: stays") {
    output_folder_lock lock(out);
    fs::create_directories(out / "reference");
    CHECK_FALSE(lock.remove_if_alone());
    CHECK(fs::exists(file));
  }
  SECTION("there before: never removed") {
    put(file, "");
    output_folder_lock lock(out);
    REQUIRE(lock.held());
    CHECK_FALSE(lock.created_file());
    CHECK_FALSE(lock.remove_if_alone());
    CHECK(lock.held());
    CHECK(fs::exists(file));
  }
}
