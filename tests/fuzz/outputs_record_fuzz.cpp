// libFuzzer: an output folder's record of what safeamp sim wrote there (.safeamp-outputs), as check_invocation reads
// it (begin_invocation's survey, changing nothing) from a scratch folder that also holds a summary.json: it returns
// or throws safeamp::error with a bounded message, never anything else.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "safeamp/error.hpp"
#include "safeamp/sim/report_invocation.hpp"

namespace {
namespace fs = std::filesystem;

// One scratch folder, made afresh by each process and reused by the next (libFuzzer ends without running exit
// handlers, so a folder per process would be left behind by every run): one fuzzing process at a time.
const fs::path& scratch() {
  static const fs::path dir = [] {
    const fs::path d = fs::temp_directory_path() / "safeamp-fuzz-outputs-record";
    fs::remove_all(d);
    fs::create_directories(d);
    std::ofstream(d / "summary.json", std::ios::binary) << "{\"scenario\": \"s\"}\n";
    return d;
  }();
  return dir;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fs::path& dir = scratch();
  {
    std::ofstream f(dir / std::string(safeamp::sim::outputs_record_name), std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    safeamp::sim::check_invocation(dir);
  } catch (const safeamp::error& e) {
    if (std::string_view(e.what()).size() > 8192) __builtin_trap();
  }
  return 0;
}
