// Pre-division (DeepSpeed's gradient_predivide_factor) of a low-precision reduction, on hand-computed values:
// four ranks each sending 30000 in fp16 (max finite 65504) overflow when summed (120000), whichever order;
// divided by 4 before they are sent (7500 each, exact) the sum is 30000, and multiplied back in fp32 it is
// 120000. The price: a contribution below 4x fp16's smallest subnormal underflows once divided.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "../../support/thread_communicator.hpp"
#include "safeamp/sim/data_parallel.hpp"
#include "safeamp/sim/reduction.hpp"

using namespace safeamp;
using namespace safeamp::sim;
using safeamp::testing::thread_world;

namespace {
float reduce_one(const char* spec, const std::vector<float>& per_rank) {
  std::vector<float> out(1);
  reduce_across_ranks(parse_reduce_spec(spec, "spec"), per_rank, static_cast<std::int64_t>(per_rank.size()), out);
  return out[0];
}
}  // namespace

TEST_CASE("pre-division keeps a sum of four large fp16 gradients finite", "[reduction][predivide]") {
  const std::vector<float> big(4, 30000.0f);  // 30000 = 1875 * 16: an fp16 value (ulp 16 in [2^14, 2^15))
  // Without pre-division: fp32 accumulation gives 120000, which rounds to +inf in fp16 (above 65504 + ulp/2);
  // the ring reaches 60000 (fp16: 1875 * 32) after one add and +inf after the next; the tree's second level
  // adds 60000 + 60000.
  for (const char* spec : {"fp16-wire", "fp16-ring", "fp16-tree"}) {
    INFO(spec);
    CHECK(reduce_one(spec, big) == std::numeric_limits<float>::infinity());
  }
  // Divided by 4 (or 8) first: 7500 (= 1875 * 4, ulp 4 in [2^12, 2^13)) or 3750, every partial sum at most
  // 30000, all exact; multiplied back in fp32: exactly 120000.
  for (const char* spec : {"fp16-wire/4", "fp16-ring/4", "fp16-tree/4", "fp16-wire/8", "fp16-ring/8"}) {
    INFO(spec);
    CHECK(reduce_one(spec, big) == 120000.0f);
  }
  // Three ranks in the ring: 60000, then 90000 -> +inf. Divided by 2: 15000 + 15000 = 30000, then + 15000 =
  // 45000, not an fp16 value (ulp 32 in [2^15, 2^16), 45000 = 1406.25 * 32): it rounds to 1406 * 32 = 44992,
  // and times 2 is 89984, finite and one fp16 rounding away from 90000.
  CHECK(reduce_one("fp16-ring", {30000.0f, 30000.0f, 30000.0f}) == std::numeric_limits<float>::infinity());
  CHECK(reduce_one("fp16-ring/2", {30000.0f, 30000.0f, 30000.0f}) == 89984.0f);
}

TEST_CASE("pre-division underflows contributions below factor x the smallest subnormal", "[reduction][predivide]") {
  const float tiny = std::ldexp(1.0f, -24);  // fp16's smallest subnormal
  const std::vector<float> four(4, tiny);
  CHECK(reduce_one("fp16-wire", four) == std::ldexp(1.0f, -22));  // 4 * 2^-24, exact
  // 2^-24 / 4 = 2^-26 is below half the smallest subnormal (2^-25): it is sent as 0.
  CHECK(reduce_one("fp16-wire/4", four) == 0.0f);
  // bf16 has fp32's range: dividing normal values by a power of two and multiplying back changes no bit
  // (rounding is scale-invariant away from the subnormals), which is why FSDP pre-divides only fp16.
  const std::vector<float> mixed = {1.5f, 2.25f, 3.0f, 0.125f, 7.0f, 1000.5f};
  for (const char* order : {"wire", "ring", "tree"}) {
    const std::string spec = std::string("bf16-") + order;
    CHECK(reduce_one(spec.c_str(), mixed) == reduce_one((spec + "/64").c_str(), mixed));
  }
}

TEST_CASE("the pre-division factor: spelled /<power of two>, round-trips, refused otherwise", "[reduction][predivide]") {
  const reduce_spec s = parse_reduce_spec("fp16-wire/8", "data_parallel.reduction");
  CHECK(s == reduce_spec{.order = reduce_order::fp32_accumulate, .wire = fp16, .predivide = 8});
  for (const char* text : {"fp16-wire/8", "bf16-ring/2", "e4m3-tree/1048576", "e5m2-wire", "fp32"}) {
    CHECK(to_string(parse_reduce_spec(text, "r")) == text);
  }
  CHECK(parse_reduce_spec("fp16-ring/1", "r") == parse_reduce_spec("fp16-ring", "r"));
  for (const char* bad : {"fp16-wire/3", "fp16-wire/0", "fp16-wire/", "fp16-wire/+4", "fp16-wire/4.0",
                          "fp16-wire/2097152", "fp32/2", "fp16-wire/99999999"}) {
    INFO(bad);
    CHECK_THROWS_WITH(parse_reduce_spec(bad, "data_parallel.reduction"),
                      Catch::Contains("data_parallel.reduction is '") && Catch::Contains("a power of two"));
  }
  CHECK_THROWS_WITH(validate(data_parallel_config{.micro_batches = 4, .reduction = {.predivide = 2}}, 1, 16),
                    Catch::Contains("data_parallel.reduction is fp32/2"));
  std::vector<float> out(1);
  CHECK_THROWS_WITH(reduce_across_ranks(reduce_spec{.order = reduce_order::ring, .wire = fp16, .predivide = 3},
                                        std::vector<float>{1.0f, 2.0f}, 2, out),
                    Catch::Contains("predivide is 3"));
}

TEST_CASE("a data-parallel step with fp16-wire overflows on two ranks, and not with /2", "[data_parallel][predivide]") {
  // Two ranks, four micro-batches of one gradient element each, every part's gradient 30000: each rank sums
  // its two parts in fp32 (60000, an fp16 value), sends it in fp16, and the fp32 sum 120000 rounds to +inf in
  // fp16. With /2 each rank sends 30000, the sum 60000 is exact, times 2 is 120000, and the mean over the
  // four parts is 30000.
  const auto step = [](const char* reduction) {
    thread_world w(2);
    std::vector<float> got(2);
    w.run([&](thread_world::rank_handle& h) {
      communicator_adapter<thread_world::rank_handle> c(h);
      data_parallel exchange(c, data_parallel_config{.micro_batches = 4,
                                                     .reduction = parse_reduce_spec(reduction, "r")});
      exchange.begin_step(0);
      for (const batch_part& p : exchange.local_parts(8)) {
        std::vector<float> g = {30000.0f};
        const std::span<float> one(g);
        exchange.keep(p, std::span<const std::span<float>>(&one, 1),
                      part_result{.loss = 1.0, .counts = {}, .non_finite_ranks = {}, .wire_overflows = 0});
      }
      std::vector<float> reduced = {0.0f};
      const std::span<float> out(reduced);
      (void)exchange.reduce(std::span<const std::span<float>>(&out, 1));
      got[static_cast<std::size_t>(h.rank())] = reduced[0];
    });
    return got;
  };
  for (const float v : step("fp16-wire")) CHECK(v == std::numeric_limits<float>::infinity());
  for (const float v : step("fp16-wire/2")) CHECK(v == 30000.0f);
  for (const float v : step("fp32")) CHECK(v == 30000.0f);  // the canonical sum is fp32 throughout
}
