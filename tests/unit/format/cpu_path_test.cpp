// The run-time choice of kernel path (safeamp/format/cpu_path.hpp): what CPUID reports is checked against the
// kernel's own view of the CPU (/proc/cpuinfo flags, Linux), the environment override is honoured, and bad
// names are rejected with a message naming the accepted ones.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "safeamp/format.hpp"

namespace {

/// The "flags" of the first processor in /proc/cpuinfo; empty where there is no such file.
std::set<std::string> cpuinfo_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  std::set<std::string> flags;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    for (std::string w; words >> w;) flags.insert(w);
    break;
  }
  return flags;
}

}  // namespace

TEST_CASE("the supported paths are those the CPU's flags name") {
  CHECK(safeamp::cpu_path_supported(safeamp::cpu_path::portable));
  const std::set<std::string> flags = cpuinfo_flags();
#if defined(SAFEAMP_X86_KERNELS)
  if (flags.empty()) {
    WARN("no /proc/cpuinfo here: the CPUID decoding is not cross-checked");
    return;
  }
  const auto has = [&](const char* f) { return flags.count(f) != 0; };
  CHECK(safeamp::cpu_path_supported(safeamp::cpu_path::avx2) == (has("avx2") && has("bmi2") && has("f16c")));
  CHECK(safeamp::cpu_path_supported(safeamp::cpu_path::avx512) ==
        (has("avx2") && has("bmi2") && has("f16c") && has("avx512f") && has("avx512bw") && has("avx512dq") &&
         has("avx512vl")));
#else
  CHECK_FALSE(safeamp::cpu_path_supported(safeamp::cpu_path::avx2));
  CHECK_FALSE(safeamp::cpu_path_supported(safeamp::cpu_path::avx512));
#endif
}

TEST_CASE("the active path is SAFEAMP_CPU_PATH when set, else the best the CPU runs") {
  const char* requested = std::getenv("SAFEAMP_CPU_PATH");
  if (requested != nullptr && *requested != '\0') {
    CHECK(safeamp::cpu_path_name(safeamp::active_cpu_path()) == std::string(requested));
  } else {
    CHECK(safeamp::active_cpu_path() == safeamp::best_cpu_path());
    CHECK(safeamp::cpu_path_supported(safeamp::best_cpu_path()));
    for (const safeamp::cpu_path p : safeamp::all_cpu_paths) {
      if (safeamp::cpu_path_supported(p)) CHECK(p <= safeamp::best_cpu_path());
    }
  }
}

TEST_CASE("unknown path names are rejected with the accepted ones named") {
  for (const char* name : {"portable", "avx2", "avx512"})
    CHECK(safeamp::cpu_path_name(safeamp::parse_cpu_path(name)) == name);
  try {
    (void)safeamp::parse_cpu_path("avx3");
    FAIL("parse_cpu_path accepted avx3");
  } catch (const safeamp::error& e) {
    const std::string what = e.what();
    CHECK(what.find("SAFEAMP_CPU_PATH") != std::string::npos);
    CHECK(what.find("avx3") != std::string::npos);
    CHECK(what.find("portable, avx2 or avx512") != std::string::npos);
  }
}
