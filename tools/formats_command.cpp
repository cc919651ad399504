// `safeamp formats`: the limits of every named format (or of one given with --format), and how the
// rounding routine treats the values that break other emulators (double rounding, E4M3's top code, NaN); a table,
// or the same as JSON with --json.
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "command_registry.hpp"
#include "safeamp/format.hpp"

namespace safeamp::tool {
namespace {

const char* specials_name(format_spec f) {
  switch (f.specials) {
    case special_values::ieee:
      return "inf+NaN";
    case special_values::finite_nan:
      return f.is_unsigned ? "NaN,unsig" : "NaN only";
    case special_values::fnuz:
      return "NaN@-0";
    case special_values::finite:
      return "none";
  }
  return "?";
}

void print_limits(const std::vector<format_spec>& formats) {
  std::printf("%-12s %4s %4s %5s %6s %-10s %14s %14s %14s %12s %12s\n", "format", "exp", "man", "bias", "bytes",
              "specials", "max finite", "min normal", "min subnormal", "epsilon", "unit round");
  for (const format_spec& f : formats) {
    std::printf("%-12s %4d %4d %5d %6d %-10s %14.8g %14.8g %14.8g %12.6g %12.6g\n", format_name(f).c_str(),
                f.exponent_bits, f.mantissa_bits, exponent_bias(f), storage_bytes(f), specials_name(f),
                static_cast<double>(max_finite(f)), static_cast<double>(min_normal(f)),
                static_cast<double>(min_subnormal(f)), static_cast<double>(epsilon(f)),
                static_cast<double>(unit_roundoff(f)));
  }
}

struct trap {
  const char* what;
  format_spec f;
  float x;
  round_options opt;
};

std::vector<trap> traps() {
  return {
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
      {"OCP MX FP4 has no inf/NaN: overflow saturates to 6", fp4_e2m1, 1.0e6f, {}},
      {"e4m3fnuz has no -0: -0 becomes +0", fp8_e4m3fnuz, -0.0f, {}},
      {"e4m3fnuz overflow without saturation: NaN (0x80)", fp8_e4m3fnuz, 1.0e6f, {}},
      {"E8M0 scale: 3 is a tie between 2 and 4, goes up", e8m0, 3.0f, {}},
  };
}

void print_traps() {
  std::printf("\nRounding of values that trip emulators (round-to-nearest-even unless noted):\n");
  for (const trap& t : traps()) {
    const std::uint32_t code = encode(t.f, t.x, t.opt);
    std::printf("  %-62s %-8s %.9g -> %.9g (0x%0*X)\n", t.what, format_name(t.f).c_str(), static_cast<double>(t.x),
                static_cast<double>(round_to(t.f, t.x, t.opt)), total_bits(t.f) > 8 ? 4 : 2, code);
  }
}

// Finite floats as JSON numbers; inf and NaN as the strings "inf", "-inf", "nan" (JSON has no such numbers).
nlohmann::json number(float v) {
  if (std::isfinite(v)) return static_cast<double>(v);
  return std::isnan(v) ? "nan" : (v > 0.0f ? "inf" : "-inf");
}

void print_json(const std::vector<format_spec>& formats, bool with_traps) {
  nlohmann::ordered_json limits = nlohmann::ordered_json::array();
  for (const format_spec& f : formats) {
    limits.push_back({{"name", format_name(f)},
                      {"exponent_bits", f.exponent_bits},
                      {"mantissa_bits", f.mantissa_bits},
                      {"bias", exponent_bias(f)},
                      {"bytes", storage_bytes(f)},
                      {"specials", specials_name(f)},
                      {"max_finite", number(max_finite(f))},
                      {"min_normal", number(min_normal(f))},
                      {"min_subnormal", number(min_subnormal(f))},
                      {"epsilon", number(epsilon(f))},
                      {"unit_roundoff", number(unit_roundoff(f))}});
  }
  nlohmann::ordered_json out{{"formats", limits}};
  if (with_traps) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const trap& t : traps()) {
      list.push_back({{"case", t.what},
                      {"format", format_name(t.f)},
                      {"input", number(t.x)},
                      {"output", number(round_to(t.f, t.x, t.opt))},
                      {"code", encode(t.f, t.x, t.opt)}});
    }
    out["rounding_cases"] = list;
  }
  std::printf("%s\n", out.dump(1).c_str());
}

const register_command reg{tool_command{
    "formats", 30, [](CLI::App& app, int& /*exit_code*/) {
      auto* cmd =
          app.add_subcommand("formats", "Limits of the number formats and how rounding treats their edge cases");
      auto name = std::make_shared<std::string>();
      cmd->add_option("--format", *name,
                      "one format (any name docs/numerics.md lists, e.g. e2m1fn, e4m3fnuz, e8m0fnu)");
      auto json = std::make_shared<bool>(false);
      cmd->add_flag("--json", *json, "print the limits (and the rounding cases) as JSON instead of tables");
      cmd->callback([name, json] {
        const bool one = !name->empty();
        const std::vector<format_spec> formats =
            one ? std::vector<format_spec>{parse_format(*name)}
                : std::vector<format_spec>{
                      fp32,         tf32,     fp16,         bf16,         fp8_e4m3,        fp8_e5m2,
                      fp8_e4m3ieee, fp8_e3m4, fp8_e4m3fnuz, fp8_e5m2fnuz, fp8_e4m3b11fnuz, fp6_e2m3,
                      fp6_e3m2,     fp4_e2m1, e8m0};
        if (*json) {
          print_json(formats, !one);
          return;
        }
        print_limits(formats);
        if (!one) print_traps();
      });
    }}};

}  // namespace
}  // namespace safeamp::tool
