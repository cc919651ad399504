// safeamp::format_kernels, one of its units (src/format_kernels.cpp says why there are several): the quantize_blocks
// kernels of every element format, both rounding modes and every CPU path.
#include "safeamp/format/block_quantize.hpp"

namespace safeamp::detail {

template void quantize_blocks_formats<0>(const block_format&, float, const float*, float*, std::size_t, std::size_t,
                                         const block_options&, float*, cast_stats&);

}  // namespace safeamp::detail
