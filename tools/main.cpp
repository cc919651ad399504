// The safeamp command: dispatches to the registered subcommands (plan, sim, formats, ...).
// Bad input is reported as "safeamp: error: ..." with exit code 2; nothing here calls exit().
#include <algorithm>
#include <cstdio>
#include <exception>

#include "command_registry.hpp"
#include "safeamp/config.hpp"
#include "safeamp/error.hpp"

int main(int argc, char** argv) {
  using namespace safeamp::tool;
  CLI::App app{"safeamp " SAFEAMP_VERSION_STRING ": trustworthy mixed-precision training", "safeamp"};
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", SAFEAMP_VERSION_STRING);
  int exit_code = exit_ok;
  auto& commands = registry();
  std::sort(commands.begin(), commands.end(), [](const auto& a, const auto& b) { return a.order < b.order; });
  for (auto& c : commands) c.setup(app, exit_code);
  try {
    app.parse(argc, argv);
    if (app.get_subcommands().empty()) {
      std::fputs(app.help().c_str(), stdout);
    }
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return exit_bad_input;
  } catch (const safeamp::error& e) {
    std::fprintf(stderr, "safeamp: error: %s\n", e.what());
    return exit_bad_input;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "safeamp: internal error: %s\n", e.what());
    return 3;
  }
  return exit_code;
}
