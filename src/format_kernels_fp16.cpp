// safeamp::format_kernels, one of its units (src/format_kernels.cpp says why there are several): the round_span
// kernels of fp16, every rounding mode and CPU path.
#include "safeamp/format/round_span.hpp"

namespace safeamp::detail {

template void round_span_dispatch<true, fp16>(cpu_path, format_spec, const float*, float*, std::size_t, round_options,
                                              philox_key, cast_stats&) noexcept;

}  // namespace safeamp::detail
