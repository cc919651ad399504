// Files of the output folder that are not outputs: the writability probe never opens an existing name (a planted
// link kept its target intact); decisions.jsonl is appended to, never read whole, so its size does not matter, and
// what cannot take an append is refused before any run; a known-good record of another reference is not named.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "report_fixtures.hpp"
#include "safeamp/error.hpp"
#include "safeamp/sim/parity_fallback.hpp"
#include "safeamp/sim/report_files.hpp"

using namespace safeamp::sim;
namespace fs = std::filesystem;

namespace {

fs::path fresh(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("safeamp_output_folder_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}
std::string text_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("the writability probe follows no link and opens no existing file") {
  const fs::path dir = fresh("probe");
  const fs::path out = dir / "out";
  fs::create_directories(out);
  std::ofstream(dir / "victim.txt") << "precious data";
  // Links at the probe names this process could use: the bare pid (the name before 2026-12-06) and numbered ones,
  // to an existing file and to a missing one (opening through it would create it).
  const std::string base = ".safeamp-write-check-" + std::to_string(::getpid());
  std::vector<fs::path> links = {out / base};
  for (int n = 0; n <= 20; ++n) links.push_back(out / (base + "-" + std::to_string(n)));
  for (std::size_t i = 0; i < links.size(); ++i) {
    fs::create_symlink(i % 2 == 0 ? dir / "victim.txt" : dir / "created-through-link", links[i]);
  }
  prepare_output_folder(out);
  CHECK(text_of(dir / "victim.txt") == "precious data");
  CHECK_FALSE(fs::exists(dir / "created-through-link"));
  std::size_t entries = 0;
  for (const auto& e : fs::directory_iterator(out)) {
    INFO(e.path());
    CHECK(fs::is_symlink(e.symlink_status()));  // the links, and no probe left behind
    ++entries;
  }
  CHECK(entries == links.size());
  fs::remove_all(dir);
}

TEST_CASE("decisions.jsonl: anything but a regular file is refused before a run; its size does not matter") {
  const fs::path dir = fresh("decisions");
  SECTION("absent or a regular file: accepted") {
    CHECK_NOTHROW(check_decisions_file(dir / "decisions.jsonl"));
    std::ofstream(dir / "decisions.jsonl") << "{}\n";
    CHECK_NOTHROW(check_decisions_file(dir / "decisions.jsonl"));
  }
  SECTION("a directory") {
    fs::create_directories(dir / "decisions.jsonl");
    CHECK_THROWS_WITH(check_decisions_file(dir / "decisions.jsonl"),
                      Catch::Contains("decisions.jsonl") && Catch::Contains("a directory") &&
                          Catch::Contains("accepted: a regular file"));
  }
  SECTION("a link") {
    std::ofstream(dir / "elsewhere.jsonl") << "{}\n";
    fs::create_symlink(dir / "elsewhere.jsonl", dir / "decisions.jsonl");
    CHECK_THROWS_WITH(check_decisions_file(dir / "decisions.jsonl"), Catch::Contains("a symbolic link"));
    fallback_decision d;
    CHECK_THROWS_AS(append_decisions(dir / "decisions.jsonl", {d}), safeamp::error);
    CHECK(text_of(dir / "elsewhere.jsonl") == "{}\n");
  }
  SECTION("past the input cap, appended to and never read") {
    const fs::path file = dir / "decisions.jsonl";
    const std::uintmax_t big = default_max_input_bytes + 512;
    {
      std::ofstream(file) << "";
    }
    fs::resize_file(file, big - 1);  // sparse: no disk used
    {
      std::ofstream(file, std::ios::app) << "\n";
    }
    fallback_decision d;
    d.candidate = "fp16 no scaling";
    d.run_instead = "fp32";
    append_decisions(file, {d, d});
    REQUIRE(fs::file_size(file) > big);
    std::ifstream in(file, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(big));
    std::string line;
    int lines = 0;
    while (std::getline(in, line)) {
      const nlohmann::json j = nlohmann::json::parse(line);
      CHECK(j.at("candidate") == "fp16 no scaling");
      CHECK(j.at("run_instead") == "fp32");
      ++lines;
    }
    CHECK(lines == 2);
  }
  SECTION("a torn last line stays a line of its own") {
    const fs::path file = dir / "decisions.jsonl";
    std::ofstream(file) << "{\"cut\": ";
    fallback_decision d;
    d.candidate = "x";
    std::uintmax_t seen_offset = 0;
    std::string seen;
    append_decisions(file, {d}, [&](std::uintmax_t offset, std::string_view written) {
      seen_offset = offset;
      seen = written;
    });
    const std::string text = text_of(file);
    CHECK(text.starts_with("{\"cut\": \n{"));
    CHECK(seen_offset == 8);
    CHECK(text.substr(8) == seen);
    CHECK(nlohmann::json::parse(text.substr(9)).at("candidate") == "x");
  }
  fs::remove_all(dir.parent_path());
}

TEST_CASE("a known-good record judged against another reference is not named, and the decision says so") {
  parity_result bad;
  bad.candidate = "fp16 no scaling";
  bad.policy = "fp16-mixed";
  bad.scaler = "none";
  bad.outcome = verdict::fail;
  const known_good_record other{"fp16-mixed dynamic", "fp16-mixed", "dynamic", "mlp-quick", "e216af836a523c4b",
                                "2026-12-01T10:00:00Z"};
  const fallback_decision ignored = decide_fallback(bad, {}, {bad}, other, "fp32", "0a30c632d0cfd3e8");
  CHECK(ignored.run_instead == "fp32");
  CHECK(ignored.source.find("e216af836a523c4b") != std::string::npos);
  CHECK(ignored.source.find("ignored") != std::string::npos);
  // The same record against its own reference is named.
  const fallback_decision named = decide_fallback(bad, {}, {bad}, other, "fp32", "e216af836a523c4b");
  CHECK(named.run_instead == "fp16-mixed");
  CHECK(named.source.find("last known-good") != std::string::npos);
}
