// The run-time choice of kernel path (safeamp/format/cpu_path.hpp): what CPUID reports is checked against the
// kernel's own view of the CPU (/proc/cpuinfo flags, Linux), the environment override is honoured, and bad
// names are rejected with a message naming the accepted ones.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

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

TEST_CASE("the streaming order is SAFEAMP_STREAM_ORDER when set, else the vendor's; bad names are rejected") {
  for (const auto o : {safeamp::stream_order::address, safeamp::stream_order::four_pages})
    CHECK(safeamp::parse_stream_order(safeamp::stream_order_name(o)) == o);
  CHECK(safeamp::stream_order_name(safeamp::stream_order::address) == "address");
  CHECK(safeamp::stream_order_name(safeamp::stream_order::four_pages) == "four_pages");
  for (const char* bad : {"", "Address", "four-pages", "pages"}) {
    try {
      (void)safeamp::parse_stream_order(bad);
      FAIL("parse_stream_order accepted '" << bad << "'");
    } catch (const safeamp::error& e) {
      const std::string what = e.what();
      CHECK(what.find("SAFEAMP_STREAM_ORDER") != std::string::npos);
      CHECK(what.find("address or four_pages") != std::string::npos);
    }
  }
  const char* requested = std::getenv("SAFEAMP_STREAM_ORDER");
  if (requested != nullptr && *requested != '\0') {
    CHECK(safeamp::stream_order_name(safeamp::active_stream_order()) == std::string(requested));
  } else {
    CHECK(safeamp::active_stream_order() == safeamp::vendor_stream_order());
#if defined(SAFEAMP_X86_KERNELS)
    // The vendor string of /proc/cpuinfo against CPUID's.
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("vendor_id", 0) != 0) continue;
      const bool amd = line.find("AuthenticAMD") != std::string::npos;
      CHECK(safeamp::vendor_stream_order() ==
            (amd ? safeamp::stream_order::address : safeamp::stream_order::four_pages));
      break;
    }
#endif
  }
}

TEST_CASE("a bad SAFEAMP_STREAM_ORDER is reported by the kernels' throwing entry points") {
  const char* requested = std::getenv("SAFEAMP_STREAM_ORDER");
  const bool bad = requested != nullptr && *requested != '\0' && std::string(requested) != "address" &&
                   std::string(requested) != "four_pages";
  if (!bad) {
    CHECK_NOTHROW((void)safeamp::active_cpu_path());
    return;
  }
  // The CTest instance format_cpu_path_stream_order_rejected sets SAFEAMP_STREAM_ORDER=sideways.
  const auto check_error = [&](const safeamp::error& e) {
    const std::string what = e.what();
    CHECK(what.find("SAFEAMP_STREAM_ORDER") != std::string::npos);
    CHECK(what.find(requested) != std::string::npos);
    CHECK(what.find("address or four_pages") != std::string::npos);
  };
  try {
    (void)safeamp::active_cpu_path();
    FAIL("active_cpu_path() accepted SAFEAMP_STREAM_ORDER=" << requested);
  } catch (const safeamp::error& e) {
    check_error(e);
  }
  std::vector<float> in(64, 1.5f), out(64, 0.0f);
  try {
    (void)safeamp::round_span(safeamp::fp16, in, out);
    FAIL("round_span accepted SAFEAMP_STREAM_ORDER=" << requested);
  } catch (const safeamp::error& e) {
    check_error(e);
  }
  CHECK(out[0] == 0.0f);  // nothing written
}

// The vector kernels' block-by-block choice of the all-normal test (round_kernel.hpp's path_choice): on data where
// most vectors take the exact path, the stretches of blocks without the test run 7, 15, 31, then 63 blocks, each
// after a test block that confirms the choice; a test block that finds too few such vectors sets it back to 7.
TEST_CASE("the kernels' path choice skips the test for longer stretches while the test keeps confirming it") {
  safeamp::detail::path_choice choice;
  std::size_t special = 0;  // running count of vectors that took the exact path
  constexpr std::size_t vectors = 64;
  std::vector<bool> skipped;  // per block: whether it ran without the test
  const auto blocks = [&](std::size_t n, std::size_t special_per_block) {
    for (std::size_t b = 0; b < n; ++b) {
      choice.start_count(special);
      skipped.push_back(choice.always);
      // Only a test block counts the vectors that take the exact path (the kernels count them at the test).
      if (!choice.always) special += special_per_block;
      choice.finish_count(special, vectors);
    }
  };
  // The lengths of the runs of blocks that skipped the test.
  const auto runs = [&] {
    std::vector<std::size_t> r;
    std::size_t n = 0;
    for (const bool s : skipped) {
      if (s) ++n;
      if (!s && n != 0) r.push_back(n), n = 0;
    }
    if (n != 0) r.push_back(n);
    return r;
  };
  blocks(1 + 7 + 1 + 15 + 1 + 31 + 1 + 63 + 1 + 63 + 1, vectors);  // wide-range data throughout
  CHECK(runs() == std::vector<std::size_t>{7, 15, 31, 63, 63});
  CHECK_FALSE(skipped.back());
  CHECK(choice.always);  // the last test block confirmed the choice again
  blocks(63, vectors);   // its stretch
  CHECK_FALSE(choice.always);
  blocks(1, vectors / 8);  // a test block where exactly 1 vector in 8 took the exact path: not more, test stays on
  CHECK_FALSE(choice.always);
  skipped.clear();
  blocks(1 + 7 + 1 + 15 + 1, vectors);  // wide-range data again: the stretches start over from 7
  CHECK(runs() == std::vector<std::size_t>{7, 15});
}

// path_choice::eighths: kernels that defer the exact path of a tested block (round_deferred, separate outputs with
// ordinary stores) start a stretch without the test only above 3 vectors in 8 that took it; the others above 1 in 8.
TEST_CASE("the path choice's share of exact-path vectors that starts a stretch: 1 in 8, or 3 in 8 where deferred") {
  using safeamp::detail::path_choice;
  constexpr std::size_t vectors = 64;
  const auto after_test_block = [](unsigned eighths, std::size_t special_in_block) {
    path_choice c;
    c.eighths = eighths;
    c.start_count(100);
    c.finish_count(100 + special_in_block, vectors);
    return c.always;
  };
  CHECK_FALSE(after_test_block(1, 8));
  CHECK(after_test_block(1, 9));
  CHECK(path_choice::deferred_eighths == 3u);
  CHECK_FALSE(after_test_block(path_choice::deferred_eighths, 24));
  CHECK(after_test_block(path_choice::deferred_eighths, 25));
  CHECK(path_choice{}.eighths == 1u);  // the default: kernels that branch vector by vector
}

// path_choice::probe: the test block that opens a chunk, or follows a stretch without the test, may run without the
// test and count apart (the AVX2 kernels do); a test block after a test block is no probe. skip_blocks ends several
// of a stretch's blocks at once (the AVX2 kernels run a stretch in one call) and leaves the choices as they are
// block by block.
TEST_CASE("the path choice names its probe blocks, and a stretch skipped at once chooses as block by block") {
  using safeamp::detail::path_choice;
  constexpr std::size_t vectors = 64;
  path_choice c;
  std::size_t special = 0;
  const auto test_block = [&](std::size_t special_in_block) {
    c.start_count(special);
    special += special_in_block;
    c.finish_count(special, vectors);
  };
  CHECK(c.probe);  // a chunk's first block
  CHECK_FALSE(c.always);
  test_block(vectors);  // wide-range data: a stretch of 7 follows
  CHECK(c.always);
  CHECK(c.left == 7);
  CHECK_FALSE(c.probe);
  c.skip_blocks(3);
  CHECK(c.always);
  CHECK(c.left == 4);
  CHECK_FALSE(c.probe);
  c.skip_blocks(4);  // the stretch's end
  CHECK_FALSE(c.always);
  CHECK(c.probe);
  test_block(1);  // Gaussian data: the test stays on
  CHECK_FALSE(c.always);
  CHECK_FALSE(c.probe);  // the next test block follows a test block
  test_block(vectors);
  CHECK(c.always);
  CHECK(c.left == 7);  // a test that kept the test on set the stretch back to 7

  // A mixed sequence, once block by block and once with each stretch skipped in one call: the same choices.
  const std::size_t per_block[] = {vectors, vectors, 0, vectors, vectors, vectors, 9, 8, vectors, 64, 60, 0, 0, 33};
  std::vector<std::string> one_by_one, at_once;
  for (const bool whole : {false, true}) {
    path_choice p;
    std::size_t count = 0;
    auto& log = whole ? at_once : one_by_one;
    for (std::size_t k = 0, round = 0; round < 40; ++round) {
      if (p.always) {
        const unsigned stretch = p.left;
        log.push_back("skip " + std::to_string(stretch));
        if (whole) {
          p.skip_blocks(stretch);
        } else {
          for (unsigned b = 0; b < stretch; ++b) {
            p.start_count(count);
            p.finish_count(count, vectors);
          }
        }
        continue;
      }
      log.push_back(p.probe ? "probe" : "test");
      p.start_count(count);
      count += per_block[k++ % std::size(per_block)];
      p.finish_count(count, vectors);
    }
  }
  CHECK(one_by_one == at_once);
  CHECK(std::count(at_once.begin(), at_once.end(), "probe") > 3);
  CHECK(std::count(at_once.begin(), at_once.end(), "skip 63") > 0);
}
