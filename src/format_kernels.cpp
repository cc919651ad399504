// safeamp::format_kernels: the bulk rounding kernels (round_span, encode_span, quantize_blocks) instantiated once.
// The core stays header-only. In a unit compiled with SAFEAMP_EXTERN_KERNELS (linking this library's CMake target
// defines it), the headers declare the kernel templates' instantiations extern, so the unit calls the ones compiled
// here instead of instantiating every format, mode and CPU path itself. These are the headers' own templates,
// unchanged (docs/api.md, "Compiling the kernels once").
//
// The instantiations are spread over several units, src/format_kernels*.cpp: this one (round_span's choice among the
// formats), one per named format (format_kernels_fp16.cpp, _bf16, _fp8_e4m3, _fp8_e5m2), one for tf32, fp32 and the
// generic kernels (_other) and one for quantize_blocks (_blocks). As one unit they took about 140 s of g++ -O3 and
// 13 minutes of clang with ASan+UBSan, longer than the rest of the sanitizer build on the other core; as several, a
// build compiles them side by side (docs/performance.md, "Build and CI time").
#include "safeamp/format/round_span.hpp"

namespace safeamp::detail {

template void round_span_formats<0>(cpu_path, format_spec, const float*, float*, std::size_t, round_options, philox_key,
                                    cast_stats&) noexcept;

}  // namespace safeamp::detail
