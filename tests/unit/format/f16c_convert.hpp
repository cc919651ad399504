// The CPU's F16C conversion, float -> fp16 code (round to nearest even) -> float, behind a run-time check.
#pragma once

#include <cstddef>
#include <cstdint>

namespace f16c {
/// True when this CPU has F16C (and AVX); call before round_trip.
bool cpu_has_f16c();
/// codes[i] = vcvtps2ph(in[i]) with round-to-nearest-even; out[i] = vcvtph2ps(codes[i]).
void round_trip(const float* in, std::uint16_t* codes, float* out, std::size_t n);
}  // namespace f16c
