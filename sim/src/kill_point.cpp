// The crash-consistency test hook (kill_point.hpp).
#include "safeamp/sim/kill_point.hpp"

#include <signal.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "safeamp/error.hpp"

namespace safeamp::sim {

namespace {

// One point a variable names: "NAME" or "NAME#N".
struct point_setting {
  std::string name{};            // empty: none
  std::uint64_t occurrence = 0;  // the time of `name` meant
  std::string value{};           // as set
};

struct kill_settings {
  bool trace = false;
  point_setting kill{};
  point_setting fail{};
  point_setting pause{};

  // Any variable set: the points count and act; none set, a point returns at once.
  [[nodiscard]] bool active() const noexcept {
    return trace || !kill.name.empty() || !fail.name.empty() || !pause.name.empty();
  }
};

[[noreturn]] void refuse(const char* variable, const std::string& value) noexcept {
  std::fprintf(stderr,
               "safeamp: error: %s is '%s'; accepted: NAME or NAME#N (N a whole number from 1), NAME a kill point "
               "as %s=1 prints them\n",
               variable, value.c_str(), kill_trace_variable);
  std::_Exit(2);
}

point_setting read_point(const char* variable) noexcept {
  point_setting p;
  const char* at = std::getenv(variable);
  if (at == nullptr || *at == '\0') return p;
  p.value = at;
  const std::size_t hash = p.value.rfind('#');
  p.name = p.value.substr(0, hash);
  p.occurrence = 1;
  if (hash != std::string::npos) {
    const std::string count = p.value.substr(hash + 1);
    if (count.empty() || count.size() > 9 || count.find_first_not_of("0123456789") != std::string::npos) {
      refuse(variable, p.value);
    }
    p.occurrence = std::stoull(count);
  }
  if (p.name.empty() || p.occurrence == 0) refuse(variable, p.value);
  return p;
}

kill_settings read_settings() noexcept {
  kill_settings s;
  const char* trace = std::getenv(kill_trace_variable);
  s.trace = trace != nullptr && std::string(trace) == "1";
  s.kill = read_point(kill_at_variable);
  s.fail = read_point(fail_at_variable);
  s.pause = read_point(pause_at_variable);
  return s;
}

const kill_settings& settings() noexcept {
  static const kill_settings s = read_settings();
  return s;
}

}  // namespace

bool kill_points_active() noexcept { return settings().active(); }

void kill_point(std::string_view name) {
  const kill_settings& s = settings();
  if (!s.active()) return;
  static std::mutex mutex;
  static std::map<std::string, std::uint64_t, std::less<>> reached;
  std::uint64_t n = 0;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    auto it = reached.find(name);
    if (it == reached.end()) it = reached.emplace(std::string(name), 0).first;
    n = ++it->second;
  }
  if (s.trace) {
    std::fprintf(stderr, "safeamp: kill point %.*s#%llu\n", static_cast<int>(name.size()), name.data(),
                 static_cast<unsigned long long>(n));
  }
  if (n == s.pause.occurrence && name == s.pause.name) ::raise(SIGSTOP);  // until SIGCONT, then on as set
  if (n == s.kill.occurrence && name == s.kill.name) {
    ::raise(SIGKILL);
    std::_Exit(137);  // not reached: SIGKILL cannot be caught
  }
  if (n == s.fail.occurrence && name == s.fail.name) {
    throw error(std::string(fail_at_variable) + " is '" + s.fail.value +
                "': the test hook failed this invocation right after that change, as a failed next change (a full "
                "disk, an I/O error) would");
  }
}

}  // namespace safeamp::sim
