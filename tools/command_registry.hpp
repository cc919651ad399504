// Subcommands of the safeamp tool register themselves here (one file per subcommand), so adding a
// command never edits another command's file.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace safeamp::tool {

/// Exit codes of the tool: 0 success, 1 a check failed (e.g. a FAIL verdict), 2 bad input, 3 internal error,
/// 4 output could not be written (stdout/stderr: full disk, /dev/full, file-size limit).
inline constexpr int exit_ok = 0;
inline constexpr int exit_check_failed = 1;
inline constexpr int exit_bad_input = 2;
inline constexpr int exit_internal_error = 3;
inline constexpr int exit_output_failed = 4;

struct tool_command {
  std::string name;
  int order = 0;                                    // position in --help
  std::function<void(CLI::App& parent, int& exit_code)> setup;  // adds the subcommand and its callback
};

inline std::vector<tool_command>& registry() {
  static std::vector<tool_command> commands;
  return commands;
}

struct register_command {
  explicit register_command(tool_command c) { registry().push_back(std::move(c)); }
};

}  // namespace safeamp::tool
