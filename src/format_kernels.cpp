// safeamp::format_kernels: the bulk rounding kernels (round_span, encode_span, quantize_blocks) instantiated once.
// The core stays header-only. In a unit compiled with SAFEAMP_EXTERN_KERNELS (linking this library's CMake target
// defines it), the headers declare the two kernel dispatch templates' instantiations extern, so the unit calls the
// ones below instead of instantiating every format, mode and CPU path itself. These are the headers' own templates,
// unchanged (docs/api.md, "Compiling the kernels once").
#include "safeamp/format/block_quantize.hpp"
#include "safeamp/format/round_span.hpp"

namespace safeamp::detail {

template void round_span_formats<0>(cpu_path, format_spec, const float*, float*, std::size_t, round_options,
                                    philox_key, cast_stats&) noexcept;
template void quantize_blocks_formats<0>(const block_format&, float, const float*, float*, std::size_t, std::size_t,
                                         const block_options&, float*, cast_stats&);

}  // namespace safeamp::detail
