// Host-side (no GPU): allocation counters, the leak detector, timing summaries and the roofline checks
// that turn an impossible measured throughput into a timing error.
#include <catch2/catch.hpp>
#include <thread>
#include <vector>

#include "safeamp/cuda/memory_probe.hpp"
#include "safeamp/cuda/timer.hpp"
#include "safeamp/memory.hpp"

using namespace safeamp;
using namespace safeamp::cuda;

TEST_CASE("allocation counters track live, peak and refuse impossible frees", "[cuda][host]") {
  allocation_counters c;
  c.on_allocate(100);
  c.on_allocate(50);
  CHECK(c.live_bytes() == 150);
  CHECK(c.peak_bytes() == 150);
  CHECK(c.on_free(100));
  CHECK(c.live_bytes() == 50);
  CHECK(c.peak_bytes() == 150);
  c.on_allocate(20);
  CHECK(c.peak_bytes() == 150);
  CHECK(c.live_allocations() == 2);
  CHECK_FALSE(c.on_free(1000));  // more than is live
  CHECK(c.live_bytes() == 70);
  CHECK(c.on_free(50));
  CHECK(c.on_free(20));
  CHECK_FALSE(c.on_free(0));  // no live allocation left: a double free
  CHECK(c.allocations() == 3);
  CHECK(c.frees() == 3);
  c.reset_peak();
  CHECK(c.peak_bytes() == 0);
}

TEST_CASE("allocation counters count every allocation of several threads at once", "[cuda][host]") {
  // The process-wide counters take every device_buffer of every thread; unguarded, concurrent increments were
  // lost (a data race): here four threads allocate and free 2 x 50000 times, 64 bytes each.
  allocation_counters c;
  constexpr int threads = 4, rounds = 50000;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&c] {
      for (int i = 0; i < rounds; ++i) {
        c.on_allocate(64);
        c.on_allocate(64);
        (void)c.on_free(64);
        (void)c.on_free(64);
      }
    });
  }
  for (std::thread& t : pool) t.join();
  CHECK(c.allocations() == 2u * threads * rounds);
  CHECK(c.frees() == 2u * threads * rounds);
  CHECK(c.live_bytes() == 0);
  CHECK(c.live_allocations() == 0);
  CHECK(c.peak_bytes() >= 128);
  CHECK(c.peak_bytes() <= 2u * 64u * threads);  // no more than every thread's two buffers live at once
}

TEST_CASE("leak detector: steady state and warm-up are not leaks", "[cuda][host]") {
  leak_detector d({.window_steps = 3, .tolerance_bytes = 0});
  // warm-up allocates for two steps, then the footprint is flat
  const std::vector<std::uint64_t> live = {1000, 3000, 5000, 5000, 5000, 5000, 5000, 5000};
  for (std::size_t i = 0; i < live.size(); ++i) {
    const leak_verdict v = d.observe(static_cast<std::int64_t>(i), live[i]);
    CHECK_FALSE(v.leaking);
    CHECK(v.message.empty());
  }
}

TEST_CASE("leak detector flags live bytes growing step over step", "[cuda][host]") {
  leak_detector d({.window_steps = 4, .tolerance_bytes = 64});
  CHECK_FALSE(d.observe(0, 10'000).leaking);
  CHECK_FALSE(d.observe(1, 10'032).leaking);  // within tolerance: not growth
  // a retained activation of 4 KiB per step
  CHECK_FALSE(d.observe(2, 14'128).leaking);
  CHECK_FALSE(d.observe(3, 18'224).leaking);
  CHECK_FALSE(d.observe(4, 22'320).leaking);
  const leak_verdict v = d.observe(5, 26'416);
  CHECK(v.leaking);
  CHECK(v.growing_steps == 4);
  CHECK(v.growth_bytes == 26'416 - 10'032);
  CHECK(v.message.find("grew in each of the last 4 steps") != std::string::npos);
  CHECK_FALSE(d.observe(6, 26'416).leaking);  // growth stopped: the run of growth resets
}

TEST_CASE("timing summaries", "[cuda][host]") {
  const timing_result odd = summarize({3e-3, 1e-3, 2e-3});
  CHECK(odd.median_seconds == 2e-3);
  CHECK(odd.min_seconds == 1e-3);
  CHECK(odd.max_seconds == 3e-3);
  CHECK(odd.seconds == std::vector<double>{3e-3, 1e-3, 2e-3});  // kept in run order
  const timing_result even = summarize({4.0, 1.0, 3.0, 2.0});
  CHECK(even.median_seconds == 2.5);
  CHECK_THROWS_AS(summarize({}), safeamp::error);
  CHECK_THROWS_AS(summarize({1e-3, 0.0}), safeamp::error);  // a zero interval is a timing bug
}

TEST_CASE("a GEMM faster than the tensor-core peak is a timing error", "[cuda][host]") {
  const device_spec& h100 = find_device("H100 SXM");
  const double n = 8192;
  const kernel_cost cost =
      gemm_cost({.m = n, .n = n, .k = n, .a_element_bytes = 2, .b_element_bytes = 2, .c_element_bytes = 2});
  const double peak = h100.peak_fp16_flops;
  REQUIRE(peak > 0.0);

  // 70 % of peak: plausible, and the fraction is what we timed
  const timing_result ok = summarize({cost.flops / (0.70 * peak), cost.flops / (0.65 * peak)});
  const timing_check c = check_timing(h100, fp16, cost, ok);
  CHECK(c.verdict.plausible);
  CHECK(c.fraction_of_peak == Approx(0.70).epsilon(1e-12));
  CHECK(c.seconds == ok.min_seconds);
  CHECK_NOTHROW(require_plausible(c, "fp16 gemm"));

  // 1.5x peak (e.g. the clock stopped before the kernel ended): impossible
  const timing_result fast = summarize({cost.flops / (1.5 * peak)});
  const timing_check bad = check_timing(h100, fp16, cost, fast);
  CHECK_FALSE(bad.verdict.plausible);
  CHECK(bad.verdict.ratio == Approx(1.5).epsilon(1e-12));
  CHECK_THROWS_AS(require_plausible(bad, "fp16 gemm"), timing_error);
  // the fastest repeat is the one checked: one impossible repeat among slow ones is still caught
  CHECK_FALSE(check_timing(h100, fp16, cost, summarize({1.0, 1.0, cost.flops / (1.5 * peak)})).verdict.plausible);
}

TEST_CASE("an elementwise pass faster than DRAM bandwidth is a timing error", "[cuda][host]") {
  const device_spec& d = find_device("RTX 4090");
  const double elements = 256.0 * 1024 * 1024;
  const kernel_cost cost =
      elementwise_cost({.elements = elements,
                        .flops_per_element = 1,
                        .bytes_read_per_element = 4,
                        .bytes_written_per_element = 4});  // unscale in place: read 4, write 4 bytes
  const double bw = d.memory_bytes_per_second;
  const timing_check ok = check_timing(d, fp32, cost, summarize({cost.bytes / (0.8 * bw)}));
  CHECK(ok.verdict.plausible);
  CHECK(ok.fraction_of_bandwidth == Approx(0.8).epsilon(1e-12));
  const timing_check bad = check_timing(d, fp32, cost, summarize({cost.bytes / (2.0 * bw)}));
  CHECK_FALSE(bad.verdict.plausible);
  CHECK(bad.fraction_of_bandwidth == Approx(2.0).epsilon(1e-12));
}

TEST_CASE("fp8 throughput on a device without fp8 is refused", "[cuda][host]") {
  const device_spec& a100 = find_device("A100 40GB SXM");
  const kernel_cost cost =
      gemm_cost({.m = 1024, .n = 1024, .k = 1024, .a_element_bytes = 1, .b_element_bytes = 1, .c_element_bytes = 2});
  CHECK_THROWS_AS(check_timing(a100, fp8_e4m3, cost, summarize({1e-3})), safeamp::error);
}
