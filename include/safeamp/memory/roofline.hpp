// Roofline model (Williams, Waterman, Patterson, CACM 2009): attainable = min(P_peak, I x B_mem), the
// arithmetic intensity of GEMMs and elementwise passes, the ridge point, a compute/memory-bound verdict,
// and a plausibility check that flags a measured throughput above the bound as an impossible (timing) result.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "safeamp/config.hpp"
#include "safeamp/error.hpp"
#include "safeamp/format/format_names.hpp"
#include "safeamp/format/format_spec.hpp"
#include "safeamp/memory/devices.hpp"
#include "safeamp/quoted_input.hpp"

namespace safeamp {

/// Work and compulsory DRAM traffic of one kernel. Bytes are the minimum any kernel must move (each input read
/// once, each output written once), so the bound computed from them is optimistic by construction.
struct kernel_cost {
  double flops = 0.0;
  double bytes = 0.0;
  /// Arithmetic intensity I = flops / bytes (FLOP per byte).
  [[nodiscard]] SAFEAMP_HOST_DEVICE constexpr double intensity_flops_per_byte() const noexcept {
    return bytes > 0.0 ? flops / bytes : 0.0;
  }
  friend constexpr bool operator==(const kernel_cost&, const kernel_cost&) = default;
};

/// A GEMM C(M x N) = A(M x K) B(K x N) by name: three dimensions and three element sizes, six doubles that a
/// positional list would take in any order.
struct gemm_shape {
  double m = 0.0;
  double n = 0.0;
  double k = 0.0;
  double a_element_bytes = 0.0;
  double b_element_bytes = 0.0;
  double c_element_bytes = 0.0;
  friend constexpr bool operator==(const gemm_shape&, const gemm_shape&) = default;
};

/// 2MNK FLOPs; reads A and B once and writes C once: MK a_bytes + KN b_bytes + MN c_bytes. In fp16 with an fp16
/// output that is 2(MK + KN + MN). (A GEMV is the case N = 1: intensity ~ 2 / element size, always memory-bound on a
/// GPU.) `gemm_cost({.m = 8192, .n = 8192, .k = 8192, .a_element_bytes = 2, .b_element_bytes = 2,
/// .c_element_bytes = 2})`.
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr kernel_cost gemm_cost(const gemm_shape& g) noexcept {
  return {.flops = 2.0 * g.m * g.n * g.k,
          .bytes = g.m * g.k * g.a_element_bytes + g.k * g.n * g.b_element_bytes + g.m * g.n * g.c_element_bytes};
}

/// An elementwise pass by name: `elements` values, `flops_per_element` arithmetic, the bytes read and written per
/// element (e.g. an fp16 add of two tensors: 1 FLOP, read 4 bytes, write 2 bytes -> I = 1/6).
struct elementwise_pass {
  double elements = 0.0;
  double flops_per_element = 0.0;
  double bytes_read_per_element = 0.0;
  double bytes_written_per_element = 0.0;
  friend constexpr bool operator==(const elementwise_pass&, const elementwise_pass&) = default;
};

[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr kernel_cost elementwise_cost(const elementwise_pass& e) noexcept {
  return {.flops = e.elements * e.flops_per_element,
          .bytes = e.elements * (e.bytes_read_per_element + e.bytes_written_per_element)};
}

/// A roof: the compute peak and the memory bandwidth of one device and format, by name (two doubles in a row, a
/// FLOP rate and a byte rate, compiled swapped and moved the ridge by a factor (P / B)^2).
struct roof {
  double peak_flops = 0.0;
  double memory_bytes_per_second = 0.0;
  friend constexpr bool operator==(const roof&, const roof&) = default;
};

/// Ridge point P_peak / B_mem (FLOP per byte): kernels with a higher intensity are compute-bound.
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr double ridge_point_flops_per_byte(const roof& r) noexcept {
  return r.peak_flops / r.memory_bytes_per_second;
}

/// Attainable throughput min(P_peak, I x B_mem) in FLOP/s.
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr double attainable_flops(const roof& r,
                                                                    double intensity_flops_per_byte) noexcept {
  const double memory_roof = intensity_flops_per_byte * r.memory_bytes_per_second;
  return memory_roof < r.peak_flops ? memory_roof : r.peak_flops;
}

enum class bound_kind : std::uint8_t { memory, compute };

[[nodiscard]] constexpr std::string_view to_string(bound_kind b) noexcept {
  return b == bound_kind::memory ? "memory-bound" : "compute-bound";
}

/// Where one kernel sits on a device's roofline.
struct roofline_point {
  double intensity_flops_per_byte = 0.0;
  double ridge_flops_per_byte = 0.0;
  double peak_flops = 0.0;
  double attainable_flops = 0.0;
  double min_seconds = 0.0;  // flops / attainable: no kernel can be faster than this
  bound_kind bound = bound_kind::memory;
  friend constexpr bool operator==(const roofline_point&, const roofline_point&) = default;
};

/// Verdict for a kernel on a roof. Intensity exactly at the ridge counts as compute-bound.
[[nodiscard]] SAFEAMP_HOST_DEVICE constexpr roofline_point roofline(const roof& r, kernel_cost cost) noexcept {
  const double intensity = cost.intensity_flops_per_byte();
  const double ridge = ridge_point_flops_per_byte(r);
  const double attainable = attainable_flops(r, intensity);
  return {.intensity_flops_per_byte = intensity,
          .ridge_flops_per_byte = ridge,
          .peak_flops = r.peak_flops,
          .attainable_flops = attainable,
          .min_seconds = attainable > 0.0 ? cost.flops / attainable : 0.0,
          .bound = intensity >= ridge ? bound_kind::compute : bound_kind::memory};
}

/// Dense peak of the device for matmul inputs in `compute` with FP32 accumulation: fp32 -> CUDA-core FP32,
/// tf32/fp16/bf16 -> tensor cores, any 8-bit format -> FP8 tensor cores. Returns 0 when the device has no
/// such units (e.g. FP8 on Ampere). Throws safeamp::error for a format no device multiplies in.
[[nodiscard]] inline double peak_flops_for(const device_spec& d, format_spec compute) {
  if (compute == fp32) return d.peak_fp32_flops;
  if (compute == tf32) return d.peak_tf32_flops;
  if (compute == fp16) return d.peak_fp16_flops;
  if (compute == bf16) return d.peak_bf16_flops;
  if (total_bits(compute) == 8) return d.peak_fp8_flops;
  throw error("compute format", format_name(compute),
              "fp32, tf32, fp16, bf16, e4m3 or e5m2 (formats with tensor-core rates)");
}

namespace detail {
/// Shortest round-trip text of a rate, for messages (std::to_string prints 1e-300 as 0.000000).
[[nodiscard]] inline std::string rate_text(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}
}  // namespace detail

/// Roofline of a kernel on a device in the given compute format. The device is validated first, as the planner does
/// (validate(device_spec), devices.hpp: capacity > 0, bandwidth and FP32 peak finite and > 0, the other peaks finite
/// and >= 0), so a hand-built spec with a zero, negative, NaN or infinite figure throws safeamp::error naming the
/// field instead of giving an inf, NaN or zero result; so does a format whose peak is 0 (no such math units), and a
/// bandwidth so far from the peak that the ridge point peak / bandwidth is not a finite number > 0.
[[nodiscard]] inline roofline_point roofline(const device_spec& d, format_spec compute, kernel_cost cost) {
  validate(d);
  const double peak = peak_flops_for(d, compute);
  if (!(peak > 0.0)) {
    throw error("compute format", format_name(compute) + " on " + quoted_input(d.name),
                "a format the device has math units for (its peak is 0: unsupported)");
  }
  const double ridge = peak / d.memory_bytes_per_second;
  if (!(ridge > 0.0) || !std::isfinite(ridge)) {
    throw error("device memory_bytes_per_second",
                detail::rate_text(d.memory_bytes_per_second) + " B/s against a " + format_name(compute) + " peak of " +
                    detail::rate_text(peak) + " FLOP/s (ridge point " + detail::rate_text(ridge) + " FLOP/byte)",
                "a bandwidth whose ridge point peak / bandwidth is a finite number > 0");
  }
  return roofline({.peak_flops = peak, .memory_bytes_per_second = d.memory_bytes_per_second}, cost);
}

/// Result of checking a measured run against its roofline bound.
struct plausibility {
  bool plausible = true;
  double measured_flops = 0.0;  // cost.flops / measured seconds
  double bound_flops = 0.0;     // attainable roofline throughput
  double ratio = 0.0;           // measured / bound (> 1 + tolerance: impossible)
  std::string diagnosis{};      // empty when plausible
};

/// Default slack above the bound before a result is called impossible: datasheet peaks are at the rated boost
/// clock, and cards (GeForce especially) often clock a few percent above it.
inline constexpr double default_plausibility_tolerance = 0.10;

/// A measured throughput against its bound, by name (the measurement and the bound are both FLOP/s, and a swap
/// turns an impossible result into a plausible one).
struct throughput_check {
  double measured_flops = 0.0;
  double bound_flops = 0.0;
  double tolerance = default_plausibility_tolerance;
  friend constexpr bool operator==(const throughput_check&, const throughput_check&) = default;
};

/// A measured throughput above the roofline bound cannot be real. The usual cause is timing without
/// synchronizing the device (the clock stopped before the kernel finished); the other is a benchmark whose
/// data stays in L2 between repetitions, so DRAM traffic is lower than the compulsory bytes assumed here.
[[nodiscard]] inline plausibility check_throughput(const throughput_check& check) {
  const double measured_flops = check.measured_flops, bound_flops = check.bound_flops, tolerance = check.tolerance;
  if (!(measured_flops >= 0.0) || !std::isfinite(measured_flops)) {
    throw error("measured throughput (FLOP/s)", std::to_string(measured_flops), "a finite number >= 0");
  }
  if (!(bound_flops > 0.0) || !std::isfinite(bound_flops)) {
    throw error("roofline bound (FLOP/s)", std::to_string(bound_flops), "a finite number > 0");
  }
  if (!(tolerance >= 0.0) || !(tolerance < 1.0)) {
    throw error("plausibility tolerance", std::to_string(tolerance), "0 <= tolerance < 1");
  }
  plausibility p{.plausible = true,
                 .measured_flops = measured_flops,
                 .bound_flops = bound_flops,
                 .ratio = measured_flops / bound_flops,
                 .diagnosis = {}};
  if (p.ratio > 1.0 + tolerance) {
    p.plausible = false;
    p.diagnosis = "impossible result: measured " + std::to_string(measured_flops / 1e12) + " TFLOP/s is " +
                  std::to_string(p.ratio) + "x the roofline bound of " + std::to_string(bound_flops / 1e12) +
                  " TFLOP/s; typical cause: the timer stopped before the device finished (no synchronize or "
                  "event wait), or data stayed in cache between repetitions";
  }
  return p;
}

/// Checks a timed kernel: `seconds` for `cost` on device `d` in format `compute`.
[[nodiscard]] inline plausibility check_measurement(const device_spec& d, format_spec compute, kernel_cost cost,
                                                    double seconds, double tolerance = default_plausibility_tolerance) {
  if (!(seconds > 0.0) || !std::isfinite(seconds)) {
    throw error("measured seconds", std::to_string(seconds),
                "a finite number > 0 (a zero time is itself a timing bug)");
  }
  if (!std::isfinite(cost.flops / seconds)) {  // 1e-300 s: the rate overflows; name the time, not the rate
    throw error("measured seconds", std::to_string(seconds),
                "a time whose rate (FLOPs / seconds) is finite: a finite number > 0 and not vanishingly small");
  }
  const roofline_point r = roofline(d, compute, cost);
  return check_throughput(
      {.measured_flops = cost.flops / seconds, .bound_flops = r.attainable_flops, .tolerance = tolerance});
}

}  // namespace safeamp
