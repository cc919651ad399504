// safeamp::format_kernels, one of its units (src/format_kernels.cpp says why there are several): the round_span
// kernels of tf32, fp32 and every format without a name (the generic kernels), every rounding mode and CPU path.
#include "safeamp/format/round_span.hpp"

namespace safeamp::detail {

template void round_span_dispatch<true, tf32>(cpu_path, format_spec, const float*, float*, std::size_t, round_options,
                                              philox_key, cast_stats&) noexcept;
template void round_span_dispatch<true, fp32>(cpu_path, format_spec, const float*, float*, std::size_t, round_options,
                                              philox_key, cast_stats&) noexcept;
template void round_span_dispatch<false, format_spec{}>(cpu_path, format_spec, const float*, float*, std::size_t,
                                                        round_options, philox_key, cast_stats&) noexcept;

}  // namespace safeamp::detail
