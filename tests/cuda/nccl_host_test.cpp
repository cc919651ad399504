// The NCCL path's host-side rules (no GPU needed): which gradient reductions are refused and why, and the
// linked NCCL library is the one whose header was compiled against.
#include <nccl.h>

#include <catch2/catch.hpp>

#include "nccl_communicator.hpp"
#include "safeamp/error.hpp"

using namespace safeamp::cuda;

TEST_CASE("NCCL gradient reductions: fp32 by default, no ncclAvg on low precision, no fp8 all-reduce", "[nccl]") {
  CHECK_NOTHROW(check_gradient_reduction(wire_type::fp32, reduce_op::sum));
  CHECK_NOTHROW(check_gradient_reduction(wire_type::fp32, reduce_op::avg));  // 1/N rounded to fp32: 2^-24 at most
  CHECK_NOTHROW(check_gradient_reduction(wire_type::bf16, reduce_op::sum));
  CHECK_THROWS_WITH(check_gradient_reduction(wire_type::bf16, reduce_op::avg),
                    Catch::Contains("NCCL reduction op is ncclAvg on bf16") && Catch::Contains("ncclSum then"));
  CHECK_THROWS_WITH(check_gradient_reduction(wire_type::fp16, reduce_op::avg), Catch::Contains("ncclAvg on fp16"));
  CHECK_THROWS_WITH(check_gradient_reduction(wire_type::fp8_e4m3, reduce_op::sum),
                    Catch::Contains("NCCL gradient type is e4m3") && Catch::Contains("fp32 accumulation"));
  CHECK_THROWS_AS(check_gradient_reduction(wire_type::fp8_e5m2, reduce_op::avg), safeamp::error);
}

TEST_CASE("the linked NCCL is the one of the header", "[nccl]") {
  // ncclGetVersion reads the library; NCCL_VERSION_CODE is the header's (the toolkit here: 2.28.9 = 22809).
  CHECK(nccl_version() == NCCL_VERSION_CODE);
}
