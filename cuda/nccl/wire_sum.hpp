// Low-precision gradients on the wire with fp32 accumulation (the NCCL path's bf16/fp16/fp8 sum): how the
// elements are cut into one chunk per rank, the per-element arithmetic the kernel and its CPU reference share,
// and the CPU reference itself. Types are safeamp::cuda::device_dtype (bf16, f16, f8_e4m3, f8_e5m2). Host/device
// neutral (no nccl.h, no CUDA headers): nvcc compiles the kernel (wire_sum.cu) from it, the host tests call the
// same functions.
//
//   1. all-to-all: rank r receives chunk r of every rank's codes (ranks x count codes, in the wire format);
//   2. wire_sum kernel: each element of chunk r summed in fp32 over ranks 0, 1, ..., N-1 in that order, every
//      code decoded exactly to fp32, then rounded once to the wire format (fp8 saturates);
//   3. all-gather of the reduced chunks (in the wire format): every rank holds the same codes.
// The result is bit-identical for any chunking and matches the simulator's "<wire>-wire" reduction
// (safeamp::sim reduce_order::fp32_accumulate) of the same contributions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "safeamp/config.hpp"
#include "safeamp/cuda/dtype.hpp"
#include "safeamp/format/format_spec.hpp"
#include "safeamp/format/round.hpp"

namespace safeamp::cuda {

/// The core format whose codes `t` stores (the inverse of storage_dtype; f32 is fp32).
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr format_spec wire_format(device_dtype t) noexcept {
  switch (t) {
    case device_dtype::bf16:
      return bf16;
    case device_dtype::f16:
      return fp16;
    case device_dtype::f8_e4m3:
      return fp8_e4m3;
    case device_dtype::f8_e5m2:
      return fp8_e5m2;
    case device_dtype::f32:
      break;
  }
  return fp32;
}

/// The rounding of the reduced sum: nearest even; fp8 saturates at its largest finite value (as the
/// simulator's wire formats do), fp16 and bf16 overflow to infinity (so an overflowing sum is seen by the
/// scaler's inf check).
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr round_options wire_rounding(device_dtype t) noexcept {
  return round_options{.mode = rounding::nearest_even,
                       .on_overflow = is_fp8(t) ? overflow::saturate : overflow::to_infinity,
                       .flush_subnormals = false};
}

/// Elements [begin, begin + count) of `elements` are rank `rank`'s chunk of `ranks`: the first elements % ranks
/// chunks hold one element more, so the chunks cover every element once and differ in size by at most one.
struct wire_chunk {
  std::size_t begin = 0;
  std::size_t count = 0;
};
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr wire_chunk wire_chunk_of(std::size_t elements, int ranks,
                                                                     int rank) noexcept {
  const auto n = static_cast<std::size_t>(ranks);
  const auto r = static_cast<std::size_t>(rank);
  const std::size_t base = elements / n;
  const std::size_t extra = elements % n;
  return wire_chunk{.begin = r * base + (r < extra ? r : extra), .count = base + (r < extra ? 1u : 0u)};
}
/// The largest chunk (the receive buffer's row of phase 1).
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr std::size_t wire_chunk_capacity(std::size_t elements, int ranks) noexcept {
  const auto n = static_cast<std::size_t>(ranks);
  return elements / n + (elements % n != 0 ? 1u : 0u);
}
/// Device workspace of the reduction: the all-to-all's receive buffer, ranks x wire_chunk_capacity codes.
[[nodiscard]] constexpr std::size_t wire_workspace_bytes(std::size_t elements, device_dtype t, int ranks) noexcept {
  return static_cast<std::size_t>(ranks) * wire_chunk_capacity(elements, ranks) *
         static_cast<std::size_t>(dtype_bytes(t));
}

/// One step of an element's sum: sum + the exact fp32 value of `code` (one fp32 add, rounded to nearest).
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr float wire_accumulate(device_dtype t, float sum,
                                                                  std::uint32_t code) noexcept {
  return sum + decode(wire_format(t), code);
}
/// The reduced element's code: the fp32 sum rounded once to the wire format.
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr std::uint32_t wire_finish(device_dtype t, float sum) noexcept {
  return encode(wire_format(t), sum, wire_rounding(t));
}

/// CPU reference of the wire_sum kernel over whole contributions: `codes` holds `ranks` rows of
/// codes.size() / ranks codes each (rank r's at row r); returns the reduced code of every element, summed in
/// rank order from +0 in fp32 and rounded once (what every rank holds after the three phases).
[[nodiscard]] std::vector<std::uint32_t> wire_sum_reference(device_dtype t, std::span<const std::uint32_t> codes,
                                                            int ranks);

/// Phase 2 on the device, enqueued on `stream`: for each of the `count` elements e of this rank's chunk,
/// chunk[e] = wire_finish(sum over i = 0..ranks-1 in order of code_i), where code_i is chunk[e] for i == rank
/// (this rank's own contribution, never copied) and received[i * stride + e] otherwise. `chunk` and
/// `received` hold codes of dtype_bytes(t) bytes (t is not f32). Returns the launch's cudaError_t as an int.
int launch_wire_sum(device_dtype t, void* chunk, const void* received, std::size_t count, std::size_t stride, int ranks,
                    int rank, void* stream);

}  // namespace safeamp::cuda
