// The one Catch2 main shared by all of safeamp's test executables (Catch2 itself: catch_session.cpp).
#include <cstdio>
#include <cstdlib>

#include "catch_session.hpp"
#include "safeamp/format/cpu_path.hpp"

int main(int argc, char* argv[]) {
  // Per-path instances of the format tests set SAFEAMP_CPU_PATH (tests/unit/format/CMakeLists.txt). A path this
  // CPU cannot run is a skip (77) that says so; an unknown path name is an error.
  if (const char* requested = std::getenv("SAFEAMP_CPU_PATH"); requested != nullptr && *requested != '\0') {
    try {
      const safeamp::cpu_path path = safeamp::parse_cpu_path(requested);
      if (!safeamp::cpu_path_supported(path)) {
        std::printf("SKIPPED: SAFEAMP_CPU_PATH=%s, but this CPU cannot run the %s kernels\n", requested, requested);
        return 77;
      }
    } catch (const safeamp::error& e) {
      std::printf("%s\n", e.what());
      return 2;
    }
  }
  return safeamp_test::run_catch(argc, argv);
}
