// Casting kernels that run the core rounding routine unchanged on the device: the same round_to and the
// same Philox stochastic bits (philox_key: element i uses logical index key.offset + i) as round_span on
// the CPU, so a GPU cast is bit-identical to the simulator's. Launchers are asynchronous.
#pragma once

#include <cstdint>

#include "safeamp/format.hpp"

namespace safeamp::cuda {

/// Rounds n floats on the device with the core rounding routine (stochastic bits from `key`, identical
/// to round_span on the CPU). Returns the cudaError_t of the launch as an int (0 = success).
int launch_round(format_spec f, round_options opt, philox_key key, const float* in, float* out, std::uint64_t n,
                 void* stream);

/// launch_round that does nothing when the device flag *skip_if is nonzero (read on the device when the
/// kernel runs): the write-back cast of a step the scaler skips (skip_if = the scaler's found_inf flag).
/// A null skip_if is refused (cudaErrorInvalidValue): an unpredicated cast is launch_round.
int launch_round_unless(const std::int32_t* skip_if, format_spec f, round_options opt, philox_key key, const float* in,
                        float* out, std::uint64_t n, void* stream);

/// Like launch_round, and adds the cast counters (overflow, underflow, subnormal, nan, infinity; the
/// core's definitions) into the device array `counters` of 5 uint64 (zero it first). `elements` is the
/// caller's n. Returns the launch's cudaError_t as an int.
int launch_round_counted(format_spec f, round_options opt, philox_key key, const float* in, float* out, std::uint64_t n,
                         unsigned long long* counters, void* stream);

/// Encodes n floats into format codes (formats of at most 16 bits), as encode_span does on the CPU.
int launch_encode16(format_spec f, round_options opt, philox_key key, const float* in, std::uint16_t* out,
                    std::uint64_t n, void* stream);

/// launch_encode16 that does nothing when the device flag *skip_if is nonzero: the write-back of fp32 master
/// weights into a 16-bit model's parameters on a step the scaler may skip. A null skip_if is refused
/// (cudaErrorInvalidValue).
int launch_encode16_unless(const std::int32_t* skip_if, format_spec f, round_options opt, philox_key key,
                           const float* in, std::uint16_t* out, std::uint64_t n, void* stream);

/// Device counter array layout for launch_round_counted.
enum class cast_counter : int { overflow = 0, underflow, subnormal, nan, infinity, count };

}  // namespace safeamp::cuda
