// The safeamp command: dispatches to the registered subcommands (plan, sim, formats, ...).
// Bad input is reported as "safeamp: error: ..." with exit code 2 (no subcommand: the usage on stderr; a mistyped
// subcommand or option: "did you mean ...?"); output that could not be written (a full disk, `> /dev/full`, a
// file-size limit) with exit code 4; nothing here calls exit().
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "command_registry.hpp"
#include "safeamp/config.hpp"
#include "safeamp/error.hpp"
#include "safeamp/sim/did_you_mean.hpp"
#include "value_names.hpp"

namespace {

/// Every name by which an option of `app` can be given ("--seed", "-h", ...).
std::vector<std::string> option_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* opt : app.get_options()) {
    for (const std::string& n : opt->get_lnames()) names.push_back("--" + n);
    for (const std::string& n : opt->get_snames()) names.push_back("-" + n);
  }
  return names;
}

/// "; did you mean 'x'?" when `typed` is a likely typo of one of `known`, else empty.
std::string suggestion(const std::string& typed, const std::vector<std::string>& known) {
  const std::string guess = safeamp::sim::did_you_mean(typed, known);
  return guess.empty() ? std::string{} : "; did you mean '" + guess + "'?";
}

/// Every option of `app` and its subcommands that takes a value refuses an empty one: `--scenario "$FILE"` with FILE
/// unset must not run the embedded default scenario, nor `--input ''` plan without an input file, `--format ''`
/// list every format or `--memory-budget ''` fall back to the machine's memory, as each did until 2026-12-06 (an
/// empty value read as "not given"). Leaving the option out is how to ask for its default.
void refuse_empty_values(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    if (opt->get_type_size_max() == 0) continue;  // a flag (--json, --help): no value
    opt->check(CLI::Validator(
        [](std::string& value) {
          return value.empty() ? std::string("an empty value; leave the option out for its default") : std::string();
        },
        "", ""));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) refuse_empty_values(*sub);
}

/// The option name in an argument ("--seed=3" -> "--seed").
std::string option_part(const std::string& arg) { return arg.substr(0, arg.find('=')); }

/// Reports the arguments CLI11 could not place (an ExtrasError) as "safeamp: error:" lines naming each unknown
/// subcommand or option with the closest known one. Returns false when there was nothing it could name.
bool report_unknown_arguments(const CLI::App& app) {
  const auto is_option = [](const std::string& arg) { return arg.size() > 1 && arg[0] == '-'; };
  bool reported = false;
  // Top level: a word is a mistyped subcommand, a dash argument an unknown top-level option.
  std::vector<std::string> commands;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    commands.push_back(sub->get_name());
  }
  const std::vector<std::string> top = app.remaining(false);
  const auto word = std::find_if_not(top.begin(), top.end(), is_option);
  if (word != top.end()) {  // the rest of the line belongs to the command that was meant: name only the command
    std::string list;
    for (const std::string& c : commands) list += (list.empty() ? "" : ", ") + c;
    std::fprintf(stderr, "safeamp: error: '%s' is not a safeamp command%s (commands: %s)\n", word->c_str(),
                 suggestion(*word, commands).c_str(), list.c_str());
    return true;
  }
  for (const std::string& arg : top) {
    std::fprintf(stderr, "safeamp: error: safeamp has no option '%s'%s ('safeamp --help' lists the options)\n",
                 option_part(arg).c_str(), suggestion(option_part(arg), option_names(app)).c_str());
    reported = true;
  }
  // In a subcommand: unknown options (a word after one is usually its value, so words are named only alone).
  for (const CLI::App* sub : app.get_subcommands()) {
    const std::vector<std::string> left = sub->remaining(true);
    const bool any_option = std::any_of(left.begin(), left.end(), is_option);
    for (const std::string& arg : left) {
      if (any_option && !is_option(arg)) continue;
      const std::string& name = sub->get_name();
      if (is_option(arg)) {
        std::fprintf(stderr,
                     "safeamp: error: 'safeamp %s' has no option '%s'%s ('safeamp %s --help' lists its options)\n",
                     name.c_str(), option_part(arg).c_str(), suggestion(option_part(arg), option_names(*sub)).c_str(),
                     name.c_str());
      } else {
        std::fprintf(stderr,
                     "safeamp: error: 'safeamp %s' takes no argument '%s' ('safeamp %s --help' lists its options)\n",
                     name.c_str(), arg.c_str(), name.c_str());
      }
      reported = true;
    }
  }
  return reported;
}

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
  name_option_values(app);
  refuse_empty_values(app);
  try {
    app.parse(argc, argv);
    if (app.get_subcommands().empty()) {  // like git and cargo: the usage, on stderr, and a failure
      std::fputs(app.help().c_str(), stderr);
      std::fputs("safeamp: error: no command given; 'safeamp <command> --help' lists a command's options\n", stderr);
      return exit_bad_input;
    }
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ExtrasError& e) {
    if (!report_unknown_arguments(app)) std::fprintf(stderr, "safeamp: error: %s\n", e.what());
    return exit_bad_input;
  } catch (const CLI::ParseError& e) {  // a missing or unconvertible value, ...: CLI11's words, our prefix
    const std::string command =
        app.get_subcommands().empty() ? "safeamp" : "safeamp " + app.get_subcommands().front()->get_name();
    std::fprintf(stderr, "safeamp: error: %s ('%s --help' lists the options)\n", e.what(), command.c_str());
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
