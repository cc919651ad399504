// What `--help` calls each option's value: FILE, DIR, SIZE, DURATION, N, ... instead of CLI11's TEXT/INT/FLOAT,
// set in one place for every subcommand so that a command file only declares its options.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <string_view>

namespace safeamp::tool {

/// Value names by option (long name without dashes). An option not listed here gets its own name in capitals
/// (`--recompute` takes a RECOMPUTE: one of the words its description lists), as git's `--format=<format>` does.
struct value_name_entry {
  std::string_view option;
  std::string_view value_name;
};
// clang-format off
inline constexpr value_name_entry value_names[] = {
    // paths
    {"scenario", "FILE"}, {"input", "FILE"}, {"verified-by", "FILE"}, {"out", "DIR"},
    // sizes with a unit (24GB, 24GiB, 3.2e9 bytes); bandwidths are sizes per second
    {"memory-budget", "SIZE"}, {"capacity", "SIZE"}, {"context", "SIZE"}, {"workspace", "SIZE"}, {"states", "SIZE"},
    {"per-sample", "SIZE"}, {"measured-peak", "SIZE"}, {"bandwidth", "SIZE"}, {"pcie-bandwidth", "SIZE"},
    {"host-bandwidth", "SIZE"}, {"host-memory", "SIZE"},
    // durations with a unit (90s, 15m, 8h)
    {"time-budget", "DURATION"}, {"window", "DURATION"},
    // counts (7.5B, 32M where the description says so)
    {"seed", "N"}, {"checkpoint-every", "N"}, {"params", "N"}, {"adapter-params", "N"}, {"largest-layer", "N"}, {"frozen-params", "N"},
    {"lora-rank", "N"}, {"zero-stage", "N"}, {"dp", "N"}, {"tp", "N"}, {"seq", "N"}, {"hidden", "N"}, {"heads", "N"},
    {"layers", "N"}, {"vocab", "N"}, {"kv-heads", "N"}, {"ffn-hidden", "N"}, {"global-batch", "N"},
    {"measured-microbatch", "N"}, {"samples", "N"}, {"tokens", "N"}, {"tokens-per-sample", "N"},
    // reals
    {"reserve", "FRACTION"}, {"fragmentation", "FRACTION"}, {"efficiency", "FRACTION"},
    {"peak-fp32", "TFLOPS"}, {"peak-tf32", "TFLOPS"}, {"peak-fp16", "TFLOPS"}, {"peak-fp8", "TFLOPS"},
    {"dollars-per-hour", "PRICE"}, {"price-per-hour", "PRICE"}, {"measured-sps", "SAMPLES/S"},
    {"measured-seconds", "SECONDS"},
    // names
    {"measured-policy", "POLICY"}, {"policies", "POLICY,..."}, {"optimizer-states", "FORMAT"}, {"base-format", "FORMAT"}, {"gemm", "MxNxK"},
    {"measured-recompute", "RECOMPUTE"}, {"sp", "BOOL"},
};
// clang-format on

/// The value name of option `long_name` (without dashes).
[[nodiscard]] inline std::string value_name_for(std::string_view long_name) {
  for (const value_name_entry& e : value_names) {
    if (e.option == long_name) return std::string(e.value_name);
  }
  std::string upper(long_name);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return upper;
}

/// True for the names CLI11 derives from the C++ type; a name a command chose itself is kept.
[[nodiscard]] inline bool is_cli11_type_name(std::string_view name) {
  constexpr std::array<std::string_view, 6> generic{"TEXT", "INT", "UINT", "FLOAT", "NUMBER", "BOOLEAN"};
  return std::find(generic.begin(), generic.end(), name) != generic.end();
}

/// Gives every option of `app` and of its subcommands (recursively) that has a generic type name its value name.
inline void name_option_values(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    if (opt->get_lnames().empty() || !is_cli11_type_name(opt->get_type_name())) continue;
    opt->type_name(value_name_for(opt->get_lnames().front()));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) name_option_values(*sub);
}

}  // namespace safeamp::tool
