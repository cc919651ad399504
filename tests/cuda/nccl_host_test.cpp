// The NCCL path's host-side rules (no GPU needed): which gradient reductions are refused and why; the chunks of
// the fp32-accumulating wire reduction; its CPU reference (the wire_sum kernel's arithmetic) against hand-worked
// codes and, where the simulator is built, against the simulator's "<wire>-wire" reduction of the same
// contributions; the linked NCCL library is the one whose header was compiled against.
#include <nccl.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "nccl_communicator.hpp"
#include "safeamp/error.hpp"
#include "wire_sum.hpp"

#if SAFEAMP_NCCL_TEST_HAVE_SIM
#include "safeamp/sim/reduction.hpp"
#endif

using namespace safeamp::cuda;

TEST_CASE("NCCL gradient reductions: fp32 by default, low precision summed in fp32, no ncclAvg on it", "[nccl]") {
  CHECK_NOTHROW(check_gradient_reduction(device_dtype::f32, reduce_op::sum));
  CHECK_NOTHROW(check_gradient_reduction(device_dtype::f32, reduce_op::avg));  // 1/N rounded to fp32: 2^-24 at most
  for (const device_dtype t : {device_dtype::bf16, device_dtype::f16, device_dtype::f8_e4m3, device_dtype::f8_e5m2}) {
    CHECK_NOTHROW(check_gradient_reduction(t, reduce_op::sum));  // the fp32-accumulating wire reduction
    CHECK_THROWS_AS(check_gradient_reduction(t, reduce_op::avg), safeamp::error);
  }
  CHECK_THROWS_WITH(check_gradient_reduction(device_dtype::bf16, reduce_op::avg),
                    Catch::Contains("NCCL reduction op is ncclAvg on bf16") &&
                        Catch::Contains("sum (fp32 accumulation") && Catch::Contains("f32 with sum or avg"));
  CHECK_THROWS_WITH(check_gradient_reduction(device_dtype::f8_e4m3, reduce_op::avg),
                    Catch::Contains("ncclAvg on f8_e4m3"));
}

TEST_CASE("wire chunks cover every element once, in rank order, sizes within one", "[nccl]") {
  for (std::size_t elements = 0; elements <= 40; ++elements) {
    for (int ranks = 1; ranks <= 9; ++ranks) {
      std::size_t next = 0, largest = 0, smallest = elements;
      for (int r = 0; r < ranks; ++r) {
        const wire_chunk c = wire_chunk_of(elements, ranks, r);
        CHECK(c.begin == next);
        next = c.begin + c.count;
        largest = std::max(largest, c.count);
        smallest = std::min(smallest, c.count);
      }
      CHECK(next == elements);
      CHECK(largest - smallest <= 1);
      CHECK(wire_chunk_capacity(elements, ranks) == largest);
    }
  }
  // No overflow of elements * rank near the top of size_t (a naive elements * r / N would wrap).
  const std::size_t huge = std::size_t{1} << 62;
  const wire_chunk last = wire_chunk_of(huge + 3, 7, 6);
  CHECK(last.begin + last.count == huge + 3);
  // The receive buffer: N rows of the largest chunk (10 bf16 over 4 ranks: 4 x 3 x 2 bytes).
  CHECK(wire_workspace_bytes(10, device_dtype::bf16, 4) == 24);
  CHECK(wire_workspace_bytes(10, device_dtype::f8_e5m2, 4) == 12);
}

namespace {
// Codes of one element from each rank, as wire_sum_reference takes them (rank-major, one element per row).
std::uint32_t reduce_one(device_dtype t, const std::vector<std::uint32_t>& by_rank) {
  return wire_sum_reference(t, by_rank, static_cast<int>(by_rank.size())).at(0);
}
}  // namespace

TEST_CASE("wire_sum_reference: hand-worked codes, fp32 accumulation in rank order and one rounding", "[nccl]") {
  // bf16 1.0 = 0x3F80, 2^-9 = 0x3B00. fp32: 1 + 4 * 2^-9 = 1 + 2^-7 exactly, one bf16 ulp up: 0x3F81. A bf16
  // sum rounds after each add and loses every 2^-9 (a quarter ulp of 1): 0x3F80.
  CHECK(reduce_one(device_dtype::bf16, {0x3F80, 0x3B00, 0x3B00, 0x3B00, 0x3B00}) == 0x3F81);
  // 300 ranks of 1.0: 300 = 1.171875 * 2^8 (exponent 135 = 0x87, mantissa 22): 0x4396. A bf16 ring stops at
  // 256 = 0x4380.
  CHECK(reduce_one(device_dtype::bf16, std::vector<std::uint32_t>(300, 0x3F80)) == 0x4396);
  // The order is rank 0, 1, 2, ...: [1, 2^-8, then four 2^-25] sums to 1 + 2^-8 in fp32 (each 2^-25 is a quarter
  // fp32 ulp of 1 and is lost), an exact tie in bf16 that rounds to even: 1.0. Summed the other way round
  // (4 * 2^-25 = 2^-23 first) it would be 1 + 2^-8 + 2^-23, above the tie: 0x3F81.
  CHECK(reduce_one(device_dtype::bf16, {0x3F80, 0x3B80, 0x3300, 0x3300, 0x3300, 0x3300}) == 0x3F80);
  // fp16 60000 = 0x7B53 (1.8310546875 * 2^15); twice is 120000, past fp16's 65504: +inf (0x7C00), which the
  // scaler's inf check then sees.
  CHECK(reduce_one(device_dtype::f16, {0x7B53, 0x7B53}) == 0x7C00);
  // e4m3 448 = 0x7E (1.75 * 2^8, its largest finite); 896 saturates to 448. e5m2 57344 = 0x7B likewise.
  CHECK(reduce_one(device_dtype::f8_e4m3, {0x7E, 0x7E}) == 0x7E);
  CHECK(reduce_one(device_dtype::f8_e5m2, {0x7B, 0x7B}) == 0x7B);
  // e4m3 1.0 = 0x38, 0.5 = 0x30, -0.25 = 0xA8: 1.25 = 0x3A.
  CHECK(reduce_one(device_dtype::f8_e4m3, {0x38, 0x30, 0xA8}) == 0x3A);
  // The sum starts from +0: a lone -0 (0x8000) gives +0, as the simulator's fp32 accumulation does.
  CHECK(reduce_one(device_dtype::bf16, {0x8000}) == 0x0000);
  // A NaN on one rank stays a NaN (bf16 NaN: exponent all ones, mantissa not zero).
  const std::uint32_t nan = reduce_one(device_dtype::bf16, {0x3F80, 0x7FC0, 0x3F80});
  CHECK((nan & 0x7F80u) == 0x7F80u);
  CHECK((nan & 0x007Fu) != 0u);
  // Several elements: each summed on its own (2 ranks x 3 elements, rank-major).
  const std::vector<std::uint32_t> two = {0x3F80, 0x4000, 0xBF80, 0x3F80, 0x4000, 0x3F80};
  CHECK(wire_sum_reference(device_dtype::bf16, two, 2) == std::vector<std::uint32_t>{0x4000, 0x4080, 0x0000});
  CHECK_THROWS_WITH(wire_sum_reference(device_dtype::bf16, two, 4), Catch::Contains("6 codes over 4 ranks"));
  CHECK_THROWS_AS(wire_sum_reference(device_dtype::f32, two, 2), safeamp::error);
}

#if SAFEAMP_NCCL_TEST_HAVE_SIM
TEST_CASE("wire_sum_reference gives the simulator's <wire>-wire reduction bit for bit", "[nccl]") {
  // Independent code: the simulator sums decoded floats (sim::reduce_across_ranks, fp32_accumulate). Random
  // codes over the whole finite range of each format, so the fp32 sums round, overflow and saturate.
  std::mt19937 g(1729);
  const struct {
    device_dtype t;
    safeamp::format_spec f;
    std::uint32_t codes;
  } formats[] = {{device_dtype::bf16, safeamp::bf16, 1u << 16},
                 {device_dtype::f16, safeamp::fp16, 1u << 16},
                 {device_dtype::f8_e4m3, safeamp::fp8_e4m3, 1u << 8},
                 {device_dtype::f8_e5m2, safeamp::fp8_e5m2, 1u << 8}};
  for (const auto& w : formats) {
    for (const int ranks : {1, 2, 3, 7, 16}) {
      constexpr std::size_t elements = 2000;
      std::vector<std::uint32_t> codes(static_cast<std::size_t>(ranks) * elements);
      std::vector<float> values(codes.size());
      for (std::size_t i = 0; i < codes.size(); ++i) {
        float v = 0.0f;
        std::uint32_t c = 0;
        do {  // finite values only (a NaN has no single bit pattern to compare)
          c = static_cast<std::uint32_t>(g() % w.codes);
          v = safeamp::decode(w.f, c);
        } while (!std::isfinite(v));
        codes[i] = c;
        values[i] = v;
      }
      const std::vector<std::uint32_t> mine = wire_sum_reference(w.t, codes, ranks);
      std::vector<float> sim(elements);
      safeamp::sim::reduce_across_ranks(
          safeamp::sim::reduce_spec{.order = safeamp::sim::reduce_order::fp32_accumulate, .wire = w.f}, values, ranks,
          sim);
      std::size_t differ = 0;
      for (std::size_t e = 0; e < elements; ++e) {
        const float got = safeamp::decode(w.f, mine[e]);
        const bool same = std::isnan(got)
                              ? std::isnan(sim[e])
                              : safeamp::bit_cast<std::uint32_t>(got) == safeamp::bit_cast<std::uint32_t>(sim[e]);
        if (!same && differ++ < 3) {
          std::printf("%s N=%d element %zu: code 0x%X (%a), simulator %a\n", std::string(dtype_name(w.t)).c_str(),
                      ranks, e, mine[e], static_cast<double>(got), static_cast<double>(sim[e]));
        }
      }
      CHECK(differ == 0);
    }
  }
}
#endif

TEST_CASE("the linked NCCL is the one of the header", "[nccl]") {
  // ncclGetVersion reads the library; NCCL_VERSION_CODE is the header's (the toolkit here: 2.28.9 = 22809).
  CHECK(nccl_version() == NCCL_VERSION_CODE);
}
