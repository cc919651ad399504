// The safeamp command: dispatches to the registered subcommands (plan, sim, formats, ...).
// Bad input is reported as "safeamp: error: ..." with exit code 2; output that could not be written (a full
// disk, `> /dev/full`, a file-size limit) with exit code 4; nothing here calls exit().
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>

#include "command_registry.hpp"
#include "safeamp/config.hpp"
#include "safeamp/error.hpp"

namespace {

/// The command proper; main() adds the check that everything it printed was written.
int run(int argc, char** argv) {
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
    return exit_internal_error;
  }
  return exit_code;
}

/// `code`, or exit_output_failed when stdout or stderr lost output (the message goes to stderr when it can).
int finish_output(int code) {
  using safeamp::tool::exit_output_failed;
  errno = 0;
  const bool out_failed = std::fflush(stdout) != 0 || std::ferror(stdout) != 0;
  const int out_errno = errno;
  if (out_failed) {
    std::fprintf(stderr, "safeamp: error: writing standard output failed (%s); the output is incomplete\n",
                 out_errno != 0 ? std::strerror(out_errno) : "write error");
  }
  const bool err_failed = std::fflush(stderr) != 0 || std::ferror(stderr) != 0;
  return out_failed || err_failed ? exit_output_failed : code;
}

}  // namespace

int main(int argc, char** argv) {
  // Past a file-size limit (ulimit -f), a write must fail with EFBIG and be reported, not kill the process
  // silently with SIGXFSZ.
#ifdef SIGXFSZ
  std::signal(SIGXFSZ, SIG_IGN);
#endif
  return finish_output(run(argc, argv));
}
