// Which vector back-end the bulk kernels (round_span, encode_span, the simulator's casts) run: chosen once per
// process from CPUID, so that a build without -march still gets AVX2 or AVX-512 code, or forced with the
// environment variable SAFEAMP_CPU_PATH=portable|avx2|avx512 (tests and benchmarks). Every path gives the same
// bits. Off x86, under nvcc, or with SAFEAMP_NO_SIMD defined, only the portable path exists.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "safeamp/error.hpp"

#if !defined(SAFEAMP_NO_SIMD) && !defined(__CUDACC__) && (defined(__x86_64__) || defined(__i386__)) && \
    (defined(__GNUC__) || defined(__clang__))
#define SAFEAMP_X86_KERNELS 1  // the AVX2 and AVX-512 back-ends are compiled (with target attributes, no -march)
#include <cpuid.h>

// Opening and closing a region of functions compiled for one back-end's instruction set whatever the build's
// -march (round_avx2.hpp, round_avx512*.hpp, philox_avx*.hpp): callers reach them only through the run-time
// dispatch of this header. The AVX-512 set includes AVX2 and F16C, which every AVX-512 CPU has. No FMA: g++
// would contract a * b + c into one rounding, and the kernels' float arithmetic must round each step.
#define SAFEAMP_DETAIL_STR(x) #x
#if defined(__clang__)
#define SAFEAMP_DETAIL_TARGET_BEGIN(isa) \
  _Pragma(SAFEAMP_DETAIL_STR(clang attribute push(__attribute__((target(isa))), apply_to = function)))
#define SAFEAMP_DETAIL_TARGET_END _Pragma("clang attribute pop")
#else
#define SAFEAMP_DETAIL_TARGET_BEGIN(isa) _Pragma("GCC push_options") _Pragma(SAFEAMP_DETAIL_STR(GCC target(isa)))
#define SAFEAMP_DETAIL_TARGET_END _Pragma("GCC pop_options")
#endif
#define SAFEAMP_DETAIL_AVX2_BEGIN SAFEAMP_DETAIL_TARGET_BEGIN("avx2,f16c,bmi2")
#define SAFEAMP_DETAIL_AVX512_BEGIN SAFEAMP_DETAIL_TARGET_BEGIN("avx512f,avx512bw,avx512dq,avx512vl,f16c,avx2,bmi2")
#include <xmmintrin.h>

#include <cstddef>

namespace safeamp::detail {
/// Floats in a 4 KiB page. Where CPUID does not name AMD, the streaming loops go four pages at a time, a 64-byte
/// line (or, AVX-512 stochastic rounding, a generator call's 128 elements) from each page in turn.
inline constexpr std::size_t page_floats = 1024;
/// How far ahead the four-pages loops (AVX2 and AVX-512) ask for their input: the same line of the next four pages.
/// The hardware prefetcher alone did not keep the loads in flight beside the non-temporal stores. On an Intel Xeon
/// (AVX-512 FP16), 64 Mi of wide-range data rounded to E4M3/E5M2 on the AVX2 path went from 0.77-0.78x memcpy to
/// 0.94-0.96x with it (8 pages ahead the same, 16 worse). AVX-512 stochastic rounding went from 0.38-0.42x the
/// generator's rate to 0.52-0.66x on N(0,1) data (docs/performance.md).
inline constexpr std::size_t four_pages_prefetch_floats = 4 * page_floats;
/// How far ahead every streaming loop in address order (AMD's order; elsewhere forced with SAFEAMP_STREAM_ORDER,
/// and AVX2 stochastic rounding on every vendor) asks for its input: 2 KiB. On Zen 3 the AVX2 deterministic loop
/// went from 0.7-0.8x memcpy without it to 0.95-1.2x. On Zen 4 (AVX-512 path, 64 Mi, 3 rounds) the deterministic
/// modes gave 1.50-1.72x memcpy on wide-range data against 1.16-1.38x at 4096 floats and 1.45-1.66x with none, and
/// stochastic rounding 0.77-0.79x the generator's rate on N(0,1) data against 0.74-0.75x at 4096. With the order
/// forced on an Intel Xeon, 4096 floats was up to 0.09 better than 512 for AVX-512 stochastic rounding and the same
/// within 0.05 for the deterministic modes (docs/performance.md, issue 18).
inline constexpr std::size_t stream_prefetch_floats = 512;

/// fp16 codes (magnitudes) whose class the vector kernels read off the conversion's result: inf (every overflow in
/// nearest even without saturation; its bits are also the exponent field's mask) and the smallest normal (codes below
/// it are subnormal or zero).
inline constexpr short fp16_inf_code = 0x7C00;
inline constexpr short fp16_min_normal_code = 0x0400;

/// The streaming loops' software prefetch: asks for the 64-byte line `ahead` floats past p to come into L1. The
/// address is formed as an integer because near the end of a span it lies past the array: a prefetch may name
/// any address (it never faults), pointer arithmetic may not.
[[gnu::always_inline]] inline void prefetch_ahead(const float* p, std::size_t ahead) noexcept {
  _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<std::uintptr_t>(p) + ahead * sizeof(float)), _MM_HINT_T0);
}
}  // namespace safeamp::detail

namespace safeamp::detail::avx512 {
/// Every lane of a 16-lane AVX-512 mask (the type of __mmask16), for the masked (maskz) forms the kernels call where
/// the plain form would leave GCC's undefined vector in a -Wmaybe-uninitialized warning. Typed, never the literal
/// 0xFFFF: without optimisation GCC's intrinsics that take an immediate are macros, which hand the int 0xFFFF
/// straight to a builtin's short parameter, an overflow warning under -Wconversion or -Wpedantic.
inline constexpr unsigned short all_lanes = 0xFFFF;
}  // namespace safeamp::detail::avx512
#endif

namespace safeamp {

enum class cpu_path : std::uint8_t {
  portable,  // plain C++ loops (whatever the build's own flags let the compiler vectorise)
  avx2,      // AVX2 + BMI2 + F16C (Haswell and later, every AMD Zen)
  avx512,    // AVX-512 F/BW/DQ/VL (Skylake-SP and later, AMD Zen 4 and later)
};
inline constexpr cpu_path all_cpu_paths[] = {cpu_path::portable, cpu_path::avx2, cpu_path::avx512};

[[nodiscard]] constexpr std::string_view cpu_path_name(cpu_path p) noexcept {
  switch (p) {
    case cpu_path::portable:
      return "portable";
    case cpu_path::avx2:
      return "avx2";
    case cpu_path::avx512:
      return "avx512";
  }
  return "portable";
}

namespace detail {

/// What this CPU and operating system run: bit 0 portable (always), bit 1 avx2, bit 2 avx512.
inline unsigned detect_cpu_paths() noexcept {
  unsigned paths = 1u << static_cast<unsigned>(cpu_path::portable);
#if defined(SAFEAMP_X86_KERNELS)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return paths;
  const bool osxsave = (ecx >> 27) & 1u, avx = (ecx >> 28) & 1u, f16c = (ecx >> 29) & 1u;
  if (!osxsave || !avx) return paths;
  // XCR0: the OS saves SSE and AVX state (bits 1, 2) and, for AVX-512, the opmask and ZMM state (bits 5-7).
  std::uint32_t xcr0_low = 0, xcr0_high = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  if ((xcr0_low & 0x6u) != 0x6u) return paths;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return paths;
  const bool avx2 = ((ebx >> 5) & 1u) && ((ebx >> 8) & 1u);  // AVX2 and BMI2 (the kernels use shlx/shrx)
  const bool avx512 =
      ((ebx >> 16) & 1u) && ((ebx >> 17) & 1u) && ((ebx >> 30) & 1u) && ((ebx >> 31) & 1u);  // F DQ BW VL
  if (avx2 && f16c) paths |= 1u << static_cast<unsigned>(cpu_path::avx2);
  if (avx2 && f16c && avx512 && (xcr0_low & 0xE0u) == 0xE0u) paths |= 1u << static_cast<unsigned>(cpu_path::avx512);
#endif
  return paths;
}

inline unsigned cpu_paths_here() noexcept {
  static const unsigned paths = detect_cpu_paths();
  return paths;
}

/// Whether CPUID names the vendor AMD ("AuthenticAMD"): the streaming loops of the AVX2 and AVX-512 kernels take
/// the store order measured fastest there (stream_order below).
inline bool cpu_vendor_is_amd() noexcept {
#if defined(SAFEAMP_X86_KERNELS)
  static const bool amd = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return false;
    return ebx == 0x68747541u && edx == 0x69746e65u && ecx == 0x444d4163u;  // "Auth" "enti" "cAMD"
  }();
  return amd;
#else
  return false;
#endif
}

}  // namespace detail

/// True when this CPU (and this build) can run path p.
[[nodiscard]] inline bool cpu_path_supported(cpu_path p) noexcept {
  return (detail::cpu_paths_here() >> static_cast<unsigned>(p)) & 1u;
}

/// The fastest path this CPU runs.
[[nodiscard]] inline cpu_path best_cpu_path() noexcept {
  return cpu_path_supported(cpu_path::avx512) ? cpu_path::avx512
         : cpu_path_supported(cpu_path::avx2) ? cpu_path::avx2
                                              : cpu_path::portable;
}

/// "portable", "avx2" or "avx512"; anything else throws safeamp::error naming the accepted values.
[[nodiscard]] inline cpu_path parse_cpu_path(std::string_view name) {
  for (const cpu_path p : all_cpu_paths) {
    if (name == cpu_path_name(p)) return p;
  }
  throw error("SAFEAMP_CPU_PATH", std::string(name), "portable, avx2 or avx512");
}

namespace detail {
inline cpu_path cpu_path_from_environment() {
  const char* requested = std::getenv("SAFEAMP_CPU_PATH");
  if (requested == nullptr || *requested == '\0') return best_cpu_path();
  const cpu_path p = parse_cpu_path(requested);
  if (!cpu_path_supported(p)) {
    std::string here;
    for (const cpu_path q : all_cpu_paths) {
      if (cpu_path_supported(q)) here += (here.empty() ? "" : ", ") + std::string(cpu_path_name(q));
    }
    throw error("SAFEAMP_CPU_PATH", std::string(requested), "a path this CPU and build run: " + here);
  }
  return p;
}
}  // namespace detail

/// The order in which the rounding kernels' streaming loops (spans of 16 MiB or more into a separate buffer)
/// write: address order, or four 4 KiB pages at a time, a line from each in turn. Each was measured the faster
/// on one vendor's CPUs (docs/performance.md, issue 18: address order on AMD Zen 4 and Zen 3, four pages on a
/// Sapphire Rapids Xeon); the bits never depend on it.
enum class stream_order : std::uint8_t { address, four_pages };

/// "address" or "four_pages".
[[nodiscard]] constexpr std::string_view stream_order_name(stream_order o) noexcept {
  return o == stream_order::address ? "address" : "four_pages";
}

/// "address" or "four_pages"; anything else throws safeamp::error naming the accepted values.
[[nodiscard]] inline stream_order parse_stream_order(std::string_view name) {
  if (name == "address") return stream_order::address;
  if (name == "four_pages") return stream_order::four_pages;
  throw error("SAFEAMP_STREAM_ORDER", std::string(name), "address or four_pages");
}

/// The order this CPU's vendor gets: address where CPUID names AMD, else four_pages.
[[nodiscard]] inline stream_order vendor_stream_order() noexcept {
  return detail::cpu_vendor_is_amd() ? stream_order::address : stream_order::four_pages;
}

/// SAFEAMP_STREAM_ORDER=address|four_pages when set (tests run both on every machine, benchmarks compare them),
/// else vendor_stream_order(). Read once per process; throws safeamp::error for another value.
[[nodiscard]] inline stream_order active_stream_order() {
  static const stream_order order = [] {
    const char* requested = std::getenv("SAFEAMP_STREAM_ORDER");
    if (requested == nullptr || *requested == '\0') return vendor_stream_order();
    return parse_stream_order(requested);
  }();
  return order;
}

/// The path every bulk kernel takes: SAFEAMP_CPU_PATH when set, else best_cpu_path(); read once per process.
/// Throws safeamp::error when the variable names an unknown path or one this CPU cannot run, or when
/// SAFEAMP_STREAM_ORDER is set to something other than its two orders (so the throwing entry points report both).
[[nodiscard]] inline cpu_path active_cpu_path() {
  static const cpu_path p = [] {
    (void)active_stream_order();
    return detail::cpu_path_from_environment();
  }();
  return p;
}

namespace detail {
/// The path the bulk kernels take inside noexcept code. The throwing entry points (round_span, encode_span,
/// quantize_blocks) call active_cpu_path() first, which reports a bad SAFEAMP_CPU_PATH; noexcept ones that
/// run before any of them (unscale_and_check) take the portable loops in that case, which give the same bits.
[[nodiscard]] inline cpu_path kernel_path() noexcept {
  try {
    return active_cpu_path();
  } catch (...) {
    return cpu_path::portable;
  }
}
/// Whether the streaming loops write in address order (active_stream_order), inside noexcept code: a bad
/// SAFEAMP_STREAM_ORDER has been reported by active_cpu_path() before any kernel runs; the vendor's order if not.
[[nodiscard]] inline bool stream_in_address_order() noexcept {
  try {
    return active_stream_order() == stream_order::address;
  } catch (...) {
    return vendor_stream_order() == stream_order::address;
  }
}
}  // namespace detail

}  // namespace safeamp
