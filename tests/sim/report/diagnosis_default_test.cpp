// The diagnoses of the default scenario's runs, checked against that run's own telemetry (the output folder of
// sim_tool_default_scenario) and the scenario file: what the data shows is recomputed here from the JSON Lines,
// independently of the report code, and the summary's diagnosis must say the same.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using json = nlohmann::json;

namespace {

std::string out_dir() {
  const char* d = std::getenv("SAFEAMP_DEFAULT_OUT");
  return d ? d : "";
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

std::vector<json> read_lines(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::vector<json> out;
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

const json& candidate(const json& summary, const std::string& name) {
  for (const json& c : summary["candidates"]) {
    if (c["name"] == name) return c;
  }
  FAIL("no candidate " << name);
  return summary;
}

}  // namespace

TEST_CASE("fp16 without scaling is diagnosed as gradient underflow with loss scaling off") {
  const json summary = read_json(out_dir() + "/summary.json");
  const json& c = candidate(summary, "fp16 no scaling");
  REQUIRE(c["verdict"] == "FAIL");
  // The loss gradient's underflow over the run, from the telemetry.
  double elements = 0.0, underflow = 0.0;
  std::int64_t began = -1;
  for (const json& step : read_lines(out_dir() + "/" + c["telemetry"].get<std::string>())) {
    for (const json& l : step["layers"]) {
      if (l["name"] != "loss.dlogits") continue;
      elements += l["elements"].get<double>();
      underflow += l["underflow"].get<double>();
      if (began < 0 && l["underflow"].get<double>() >= 0.01 * l["elements"].get<double>()) began = step["step"];
    }
  }
  REQUIRE(elements > 0.0);
  const double fraction = underflow / elements;
  INFO("loss-gradient underflow " << fraction << " from step " << began);
  REQUIRE(fraction >= 0.01);  // the data itself shows significant underflow
  const json& d = c["diagnosis"];
  CHECK(d["cause"] == "gradient underflow");
  CHECK(d["likely_field"] == "scaler.kind");
  CHECK(d["loss_gradient_underflow"].get<double>() == Approx(fraction));
  CHECK(d["underflow_began"].get<std::int64_t>() <= began);
  CHECK(d["skipped"] == 0);
  std::string first_failed;
  for (const json& k : c["checks"]) {
    if (k["status"] == "FAIL" && first_failed.empty()) first_failed = k["name"];
  }
  CHECK(d["first_check"] == first_failed);
  CHECK(d["text"].get<std::string>().find("loss scaling is off") != std::string::npos);
}

TEST_CASE("the injected-overflow run is diagnosed as skips from the injected overflows") {
  const json summary = read_json(out_dir() + "/summary.json");
  const json scenario = read_json(SAFEAMP_SCENARIOS_DIR "/default.json");
  const json* spec = nullptr;
  for (const json& s : scenario["candidates"]) {
    if (s["name"] == "fp16-mixed injected overflows") spec = &s;
  }
  REQUIRE(spec != nullptr);
  std::set<std::int64_t> fault_steps;
  for (const json& f : (*spec)["faults"]) {
    for (const json& at : f["steps"]) fault_steps.insert(at.get<std::int64_t>());
  }
  const json& c = candidate(summary, "fp16-mixed injected overflows");
  std::int64_t skipped = 0, at_faults = 0;
  for (const json& step : read_lines(out_dir() + "/" + c["telemetry"].get<std::string>())) {
    if (!step["skipped"].get<bool>()) continue;
    ++skipped;
    if (fault_steps.count(step["step"].get<std::int64_t>()) != 0) ++at_faults;
  }
  REQUIRE(skipped > 0);
  REQUIRE(at_faults == skipped);  // the data: every skip is at an injected fault
  const json& d = c["diagnosis"];
  CHECK(d["cause"] == "overflow skips");
  CHECK(d["likely_field"] == "faults");
  CHECK(d["skipped"] == skipped);
  CHECK(d["skipped_at_faults"] == at_faults);

  // The dynamic run without faults and bf16 neither underflow nor skip: no cause stands out.
  for (const char* name : {"fp16-mixed dynamic", "bf16-mixed"}) {
    const json& k = candidate(summary, name);
    INFO(name << ": " << k["diagnosis"]["text"]);
    if (k["verdict"] == "PASS" && k["skipped_steps"].empty()) CHECK(k["diagnosis"]["cause"] == "none");
  }
}
