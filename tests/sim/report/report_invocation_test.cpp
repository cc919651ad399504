// The INCOMPLETE marker and previous/ of an output folder, on folders built by hand: a finished folder's outputs
// move aside, a marked one's partial outputs go, a start killed while moving is completed by the next one.
#include "safeamp/sim/report_invocation.hpp"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

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
  std::ofstream(p) << text;
}
std::string text_of(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("a finished folder's outputs move into previous/, which they replace; the marker until finished") {
  const fs::path out = fresh("finished");
  put(out / "report.html", "report 2");
  put(out / "summary.json", "summary 2");
  put(out / "telemetry" / "reference-fp32.jsonl", "reference");
  put(out / "telemetry" / "a.jsonl", "a 2");
  put(out / "previous" / "report.html", "report 1");
  put(out / "previous" / "telemetry" / "old.jsonl", "old");
  put(out / "known_good.json", "kept");
  const invocation_cleanup c = begin_invocation(out, {.scenario = "s", .kept_telemetry = {"reference-fp32.jsonl"}});
  CHECK_FALSE(c.was_incomplete);
  CHECK(c.moved.size() == 3);
  CHECK(invocation_incomplete(out));
  CHECK(text_of(out / "INCOMPLETE").find("scenario 's'") != std::string::npos);
  CHECK(text_of(out / "previous" / "report.html") == "report 2");
  CHECK(text_of(out / "previous" / "summary.json") == "summary 2");
  CHECK(text_of(out / "previous" / "telemetry" / "a.jsonl") == "a 2");
  CHECK_FALSE(fs::exists(out / "previous" / "telemetry" / "old.jsonl"));  // previous/ holds one invocation
  CHECK_FALSE(fs::exists(out / "report.html"));
  CHECK(text_of(out / "telemetry" / "reference-fp32.jsonl") == "reference");  // the locked reference's stays
  CHECK(text_of(out / "known_good.json") == "kept");
  CHECK_FALSE(fs::exists(out / "previous.new"));
  finish_invocation(out);
  CHECK_FALSE(invocation_incomplete(out));
}

TEST_CASE("a marked folder (an invocation that trained and failed) loses its partial outputs, keeps previous/") {
  const fs::path out = fresh("marked");
  put(out / "INCOMPLETE", "x");
  put(out / "telemetry" / "a.jsonl", "partial");
  put(out / "previous" / "report.html", "report 1");
  const invocation_cleanup c = begin_invocation(out, {.scenario = "s", .kept_telemetry = {}});
  CHECK(c.was_incomplete);
  CHECK(c.removed.size() == 1);
  CHECK(c.moved.empty());
  CHECK_FALSE(fs::exists(out / "telemetry" / "a.jsonl"));
  CHECK(text_of(out / "previous" / "report.html") == "report 1");
  CHECK(invocation_incomplete(out));
  CHECK(incomplete_note(out).find("marked INCOMPLETE") != std::string::npos);
}

TEST_CASE("a start killed while moving the outputs aside is completed by the next start, nothing lost") {
  // Marker written, report.html already in previous.new/, summary.json and a.jsonl not yet moved, previous/ old.
  const fs::path out = fresh("interrupted");
  put(out / "INCOMPLETE", "x");
  put(out / "previous.new" / "report.html", "report 2");
  put(out / "summary.json", "summary 2");
  put(out / "telemetry" / "a.jsonl", "a 2");
  put(out / "previous" / "report.html", "report 1");
  const invocation_cleanup c = begin_invocation(out, {.scenario = "s", .kept_telemetry = {}});
  CHECK(c.removed.empty());
  CHECK(c.moved.size() == 2);
  CHECK(text_of(out / "previous" / "report.html") == "report 2");
  CHECK(text_of(out / "previous" / "summary.json") == "summary 2");
  CHECK(text_of(out / "previous" / "telemetry" / "a.jsonl") == "a 2");
  CHECK_FALSE(fs::exists(out / "previous.new"));
  CHECK_FALSE(fs::exists(out / "summary.json"));
  fs::remove_all(out.parent_path());
}
