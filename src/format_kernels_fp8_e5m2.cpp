// safeamp::format_kernels, one of its units (src/format_kernels.cpp says why there are several): the round_span
// kernels of fp8 E5M2, every rounding mode and CPU path.
#include "safeamp/format/round_span.hpp"

namespace safeamp::detail {

template round_span_dispatch_type round_span_dispatch<true, fp8_e5m2>;

}  // namespace safeamp::detail
