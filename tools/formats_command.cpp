// `safeamp formats`: the limits of every named format (or of one given with --format), and how the
// rounding routine treats the values that break other emulators (double rounding, E4M3's top code, NaN).
#include <cstdio>
#include <string>
#include <vector>

#include "command_registry.hpp"
#include "safeamp/format.hpp"

namespace safeamp::tool {
namespace {

void print_limits(const std::vector<format_spec>& formats) {
  std::printf("%-8s %4s %4s %6s %14s %14s %14s %12s %12s %-9s\n", "format", "exp", "man", "bytes", "max finite",
              "min normal", "min subnormal", "epsilon", "unit round", "inf");
  for (const format_spec& f : formats) {
    std::printf("%-8s %4d %4d %6d %14.8g %14.8g %14.8g %12.6g %12.6g %-9s\n", format_name(f).c_str(), f.exponent_bits,
                f.mantissa_bits, storage_bytes(f), static_cast<double>(max_finite(f)),
                static_cast<double>(min_normal(f)), static_cast<double>(min_subnormal(f)),
                static_cast<double>(epsilon(f)), static_cast<double>(unit_roundoff(f)),
                has_infinity(f) ? "yes" : "no (NaN)");
  }
}

void print_traps() {
  struct trap { const char* what; format_spec f; float x; round_options opt; };
  const trap traps[] = {
      {"fp16 overflow threshold (max + half ulp ties to even -> inf)", fp16, 65520.0f, {}},
      {"just below the fp16 threshold stays finite", fp16, 65519.99f, {}},
      {"E5M2 directly, not via fp16 (no double rounding)", fp8_e5m2, 61439.996f, {}},
      {"E4M3 tie at 464 rounds to even (448)", fp8_e4m3, 464.0f, {}},
      {"E4M3 above 464 overflows to NaN (no inf in E4M3)", fp8_e4m3, 464.00003f, {}},
      {"E4M3 saturating: overflow -> 448", fp8_e4m3, 1.0e6f, {.on_overflow = overflow::saturate}},
      {"fp16 toward zero: overflow gives max finite", fp16, 1.0e6f, {.mode = rounding::toward_zero}},
      {"half the fp16 min subnormal ties to 0", fp16, 2.98023224e-8f, {}},
      {"just above it rounds to the min subnormal", fp16, 2.9802326e-8f, {}},
      {"fp16 subnormal flushed when asked", fp16, 1.0e-6f, {.flush_subnormals = true}},
      {"-0 keeps its sign", bf16, -0.0f, {}},
      {"NaN with payload only in low bits stays NaN", fp16, safeamp::bit_cast<float>(0x7F800001u), {}},
  };
  std::printf("\nRounding of values that trip emulators (round-to-nearest-even unless noted):\n");
  for (const trap& t : traps) {
    const std::uint32_t code = encode(t.f, t.x, t.opt);
    std::printf("  %-62s %-5s %.9g -> %.9g (0x%0*X)\n", t.what, format_name(t.f).c_str(), static_cast<double>(t.x),
                static_cast<double>(round_to(t.f, t.x, t.opt)), total_bits(t.f) > 8 ? 4 : 2, code);
  }
}

const register_command reg{tool_command{
    "formats", 30, [](CLI::App& app, int& /*exit_code*/) {
      auto* cmd = app.add_subcommand("formats", "Limits of the number formats and how rounding treats their edge cases");
      auto name = std::make_shared<std::string>();
      cmd->add_option("--format", *name, "one format (fp32, tf32, fp16, bf16, e4m3, e5m2, e<E>m<M>[fn])");
      cmd->callback([name] {
        if (!name->empty()) {
          print_limits({parse_format(*name)});
          return;
        }
        print_limits({fp32, tf32, fp16, bf16, fp8_e4m3, fp8_e5m2});
        print_traps();
      });
    }}};

}  // namespace
}  // namespace safeamp::tool
