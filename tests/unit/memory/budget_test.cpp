// The memory budget: the 24 GB case (54), an exact fit (46), overheads, headroom, accumulation
// rounding, bad input.
#include "safeamp/memory/budget.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>

using namespace safeamp;

namespace {
constexpr std::uint64_t gb = 1'000'000'000ULL;
constexpr memory_budget case_24gb{.device_bytes = 24 * gb,
                                  .reserve_fraction = 0.1,
                                  .fixed_bytes = 3'200'000'000ULL,
                                  .activation_bytes_per_sample = 340'000'000ULL};
}  // namespace

TEST_CASE("24 GB, 10% reserve, 3.2 GB states, 0.34 GB per sample: largest microbatch 54") {
  // 24 x 0.9 = 21.6 GB; 21.6 - 3.2 = 18.4 GB; 18.4 / 0.34 = 54.1 -> 54.
  CHECK(max_microbatch(case_24gb) == 54);
  const budget_breakdown d = breakdown(case_24gb);
  CHECK(d.reserve_bytes == 2'400'000'000ULL);
  CHECK(d.available_for_activations_bytes == 18'400'000'000ULL);
  CHECK(headroom_bytes(case_24gb, 54) == 18'400'000'000LL - 54LL * 340'000'000LL);  // 40 MB
  CHECK(headroom_bytes(case_24gb, 55) < 0);
  // The same figures read as GiB would give a different answer: units matter.
  memory_budget gib = case_24gb;
  gib.device_bytes = 24ULL << 30;
  CHECK(max_microbatch(gib) == 58);  // (25.77 x 0.9 - 3.2) / 0.34 = 58.8
}

TEST_CASE("an exact fit is a fit: available bytes a multiple of the per-sample bytes") {
  // 24 x 0.9 = 21.6 GB; - 3.2 = 18.4 GB; 18.4 / 0.4 = 46 exactly, with 0 bytes of headroom.
  memory_budget b = case_24gb;
  b.activation_bytes_per_sample = 400'000'000ULL;
  REQUIRE(breakdown(b).available_for_activations_bytes == 46ULL * 400'000'000ULL);
  CHECK(max_microbatch(b) == 46);
  CHECK(headroom_bytes(b, 46) == 0);
  CHECK(headroom_bytes(b, 47) == -400'000'000LL);
  // The smallest exact fit: room for exactly one sample.
  b.activation_bytes_per_sample = 18'400'000'000ULL;
  CHECK(max_microbatch(b) == 1);
  CHECK(headroom_bytes(b, 1) == 0);
}

TEST_CASE("runtime overheads come out of the pool in a stated order") {
  memory_budget b = case_24gb;
  b.context_bytes = 500'000'000ULL;    // 0.5 GB context, before the reserve
  b.workspace_bytes = 100'000'000ULL;  // 0.1 GB workspace
  b.fragmentation_fraction = 0.05;     // 5% of the pool after the reserve
  // pool 23.5; reserve 2.35 -> 21.15; fragmentation 1.0575 -> 20.0925; - 0.1 - 3.2 = 16.7925 -> 49 samples.
  const budget_breakdown d = breakdown(b);
  CHECK(d.reserve_bytes == 2'350'000'000ULL);
  CHECK(d.fragmentation_bytes == 1'057'500'000ULL);
  CHECK(d.available_for_activations_bytes == 16'792'500'000ULL);
  CHECK(max_microbatch(b) == 49);
}

TEST_CASE("when the fixed part alone does not fit, the microbatch is 0 and the shortfall is reported") {
  memory_budget b = case_24gb;
  b.fixed_bytes = 22 * gb;  // over the 21.6 GB pool by 0.4 GB
  CHECK(max_microbatch(b) == 0);
  CHECK(breakdown(b).fixed_shortfall_bytes == 400'000'000ULL);
  CHECK(headroom_bytes(b, 1) == -740'000'000LL);  // 0.4 GB + one sample
}

// Issue 14: the counts are named; a positional call, where 512 and 13 would compile swapped, does not.
template <typename... A>
constexpr bool accumulation_callable = requires(A... a) {
  accumulation_for(a...);
};
static_assert(!accumulation_callable<std::int64_t, std::int64_t>);
static_assert(!accumulation_callable<std::int64_t, std::int64_t, std::int64_t, accumulation_rounding>);
static_assert(accumulation_callable<accumulation_request>);

TEST_CASE("accumulation steps: ceil rule and exact-divisor rule") {
  // Target 512 with at most 54 per microbatch: ceil(512/54) = 10 steps, evened out to ceil(512/10) = 52 -> 520.
  CHECK(accumulation_for({.target_global_batch = 512,
                          .max_microbatch = 54,
                          .data_parallel = 1,
                          .rule = accumulation_rounding::ceil}) ==
        accumulation_plan{.microbatch = 52, .steps = 10, .global_batch = 520});
  // Exact divisor: the largest divisor of 512 not above 54 is 32 -> 16 steps, exactly 512.
  CHECK(accumulation_for({.target_global_batch = 512,
                          .max_microbatch = 54,
                          .data_parallel = 1,
                          .rule = accumulation_rounding::exact_divisor}) ==
        accumulation_plan{.microbatch = 32, .steps = 16, .global_batch = 512});
  // Over 4 data-parallel devices: 128 per device, 54 max -> 3 steps of 43 = 516 in all.
  CHECK(accumulation_for({.target_global_batch = 512,
                          .max_microbatch = 54,
                          .data_parallel = 4,
                          .rule = accumulation_rounding::ceil}) ==
        accumulation_plan{.microbatch = 43, .steps = 3, .global_batch = 516});
  // A target smaller than the largest microbatch: one step.
  CHECK(accumulation_for({.target_global_batch = 16, .max_microbatch = 54}) ==
        accumulation_plan{.microbatch = 16, .steps = 1, .global_batch = 16});
  // A prime target under exact_divisor falls back to microbatch 1.
  CHECK(accumulation_for({.target_global_batch = 509,
                          .max_microbatch = 54,
                          .data_parallel = 1,
                          .rule = accumulation_rounding::exact_divisor})
            .microbatch == 1);
  CHECK_THROWS_AS(accumulation_for({.target_global_batch = 0, .max_microbatch = 54}), error);
  CHECK(to_string(accumulation_rounding::exact_or_ceil) == "exact-or-ceil");
  CHECK_THROWS_AS(accumulation_for({.target_global_batch = 512, .max_microbatch = 0}), error);
  CHECK_THROWS_AS(accumulation_for({.target_global_batch = 510,
                                    .max_microbatch = 54,
                                    .data_parallel = 4,
                                    .rule = accumulation_rounding::exact_divisor}),
                  error);
}

TEST_CASE("the default rule keeps an exact global batch when a divisor keeps half the microbatch") {
  // The case: 512 with at most 13 per microbatch. ceil: 40 steps of 13 = 520; the divisors of 512 up to 13
  // are 1, 2, 4, 8, and 8 >= 13 / 2, so 8 x 64 steps = 512 exactly.
  CHECK(accumulation_for({.target_global_batch = 512, .max_microbatch = 13}) ==
        accumulation_plan{.microbatch = 8, .steps = 64, .global_batch = 512});
  CHECK(accumulation_for(
            {.target_global_batch = 512, .max_microbatch = 13, .data_parallel = 1, .rule = accumulation_rounding::ceil})
            .global_batch == 520);
  // 512 with at most 54: 32 >= 27 -> 32 x 16.
  CHECK(accumulation_for({.target_global_batch = 512, .max_microbatch = 54}) ==
        accumulation_plan{.microbatch = 32, .steps = 16, .global_batch = 512});
  // A prime target: the only divisor <= 54 is 1 < 27, so ceil: 10 steps of ceil(509 / 10) = 51 -> 510.
  CHECK(accumulation_for({.target_global_batch = 509, .max_microbatch = 54}) ==
        accumulation_plan{.microbatch = 51, .steps = 10, .global_batch = 510});
  // 96 with at most 50: 48 divides 96 -> 48 x 2 (the largest divisor, not merely one above half).
  CHECK(accumulation_for({.target_global_batch = 96, .max_microbatch = 50}) ==
        accumulation_plan{.microbatch = 48, .steps = 2, .global_batch = 96});
  // 510 is not a multiple of 4 devices: ceil, ceil(510 / 4) = 128 per device, 3 steps of 43 = 516.
  CHECK(accumulation_for({.target_global_batch = 510, .max_microbatch = 54, .data_parallel = 4}) ==
        accumulation_plan{.microbatch = 43, .steps = 3, .global_batch = 516});
  // Over 4 devices, 512: 128 per device, largest divisor <= 54 is 32 -> 32 x 4 steps x 4 devices.
  CHECK(accumulation_for({.target_global_batch = 512, .max_microbatch = 54, .data_parallel = 4}) ==
        accumulation_plan{.microbatch = 32, .steps = 4, .global_batch = 512});
}

TEST_CASE("the exact divisor is found from divisor pairs, fast at the largest accepted batch") {
  // Counting down from the microbatch cap took up to G tries: 2^39 here (hours). Divisor pairs up to
  // sqrt(2^40) = 2^20 find 2^39 at once; 2 x 2^39 >= 2^40 - 1, so the default rule keeps it.
  const std::int64_t two40 = std::int64_t{1} << 40;
  CHECK(accumulation_for({.target_global_batch = two40, .max_microbatch = two40 - 1}) ==
        accumulation_plan{.microbatch = two40 / 2, .steps = 2, .global_batch = two40});
  // The reviewer's case: G = 2p with p = 4294967291, the largest prime below 2^32, and a cap of p - 1. The
  // divisors are 1, 2, p, 2p: exact_divisor gives 2 x p steps; the default rule finds 2 < (p - 1) / 2 and takes
  // ceil: ceil(2p / (p - 1)) = 3 steps of ceil(2p / 3) = 2863311528 (8589934584 in all, 2 over).
  const std::int64_t p = 4294967291;
  CHECK(accumulation_for({.target_global_batch = 2 * p,
                          .max_microbatch = p - 1,
                          .data_parallel = 1,
                          .rule = accumulation_rounding::exact_divisor}) ==
        accumulation_plan{.microbatch = 2, .steps = p, .global_batch = 2 * p});
  CHECK(accumulation_for({.target_global_batch = 2 * p, .max_microbatch = p - 1}) ==
        accumulation_plan{.microbatch = 2863311528, .steps = 3, .global_batch = 8589934584});
  // A square of a prime, q = 1048573 (the largest prime below 2^20): the divisor at exactly sqrt(G).
  const std::int64_t q = 1048573;
  CHECK(accumulation_for({.target_global_batch = q * q,
                          .max_microbatch = q * q - 1,
                          .data_parallel = 1,
                          .rule = accumulation_rounding::exact_divisor}) ==
        accumulation_plan{.microbatch = q, .steps = q, .global_batch = q * q});
  // Against counting down (the old search, as an independent oracle) for every small batch and cap, with
  // and without data parallelism.
  for (std::int64_t dp : {1, 3}) {
    for (std::int64_t per_device = 1; per_device <= 240; ++per_device) {
      for (std::int64_t cap = 1; cap <= per_device + 2; ++cap) {
        std::int64_t oracle = std::min(cap, per_device);
        while (per_device % oracle != 0) --oracle;
        const accumulation_plan plan = accumulation_for({.target_global_batch = per_device * dp,
                                                         .max_microbatch = cap,
                                                         .data_parallel = dp,
                                                         .rule = accumulation_rounding::exact_divisor});
        INFO("per_device " << per_device << " cap " << cap << " dp " << dp);
        REQUIRE(plan.microbatch == oracle);
        REQUIRE(plan.steps * plan.microbatch == per_device);
      }
    }
  }
}

TEST_CASE("bad budgets are rejected with the field named") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  memory_budget b = case_24gb;
  b.device_bytes = 0;
  CHECK_THROWS_WITH(max_microbatch(b), Catch::Contains("capacity"));
  b = case_24gb;
  b.reserve_fraction = 1.0;
  CHECK_THROWS_WITH(max_microbatch(b), Catch::Contains("reserve") && Catch::Contains("0 <= reserve < 1"));
  b.reserve_fraction = -0.1;
  CHECK_THROWS_AS(max_microbatch(b), error);
  b.reserve_fraction = nan;
  CHECK_THROWS_AS(max_microbatch(b), error);
  b = case_24gb;
  b.context_bytes = 25 * gb;  // more overhead than capacity
  CHECK_THROWS_WITH(max_microbatch(b), Catch::Contains("context"));
  b = case_24gb;
  b.context_bytes = 12 * gb;
  b.workspace_bytes = 12 * gb;
  CHECK_THROWS_WITH(max_microbatch(b), Catch::Contains("overhead"));
  b = case_24gb;
  b.activation_bytes_per_sample = 0;  // would divide by zero
  CHECK_THROWS_AS(max_microbatch(b), error);
  b = case_24gb;
  b.fragmentation_fraction = nan;
  CHECK_THROWS_AS(max_microbatch(b), error);
  CHECK_THROWS_AS(headroom_bytes(case_24gb, -1), error);
}
