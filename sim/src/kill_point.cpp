// The crash-consistency test hook (kill_point.hpp).
#include "safeamp/sim/kill_point.hpp"

#include <signal.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

namespace safeamp::sim {

namespace {

struct kill_settings {
  bool trace = false;
  std::string name{};            // empty: no point ends the process
  std::uint64_t occurrence = 0;  // the time of `name` that does
};

[[noreturn]] void refuse(const std::string& value) noexcept {
  std::fprintf(stderr,
               "safeamp: error: %s is '%s'; accepted: NAME or NAME#N (N a whole number from 1), NAME a kill point "
               "as %s=1 prints them\n",
               kill_at_variable, value.c_str(), kill_trace_variable);
  std::_Exit(2);
}

kill_settings read_settings() noexcept {
  kill_settings s;
  const char* trace = std::getenv(kill_trace_variable);
  s.trace = trace != nullptr && std::string(trace) == "1";
  const char* at = std::getenv(kill_at_variable);
  if (at == nullptr || *at == '\0') return s;
  const std::string value(at);
  const std::size_t hash = value.rfind('#');
  s.name = value.substr(0, hash);
  s.occurrence = 1;
  if (hash != std::string::npos) {
    const std::string count = value.substr(hash + 1);
    if (count.empty() || count.size() > 9 || count.find_first_not_of("0123456789") != std::string::npos) refuse(value);
    s.occurrence = std::stoull(count);
  }
  if (s.name.empty() || s.occurrence == 0) refuse(value);
  return s;
}

const kill_settings& settings() noexcept {
  static const kill_settings s = read_settings();
  return s;
}

}  // namespace

bool kill_points_active() noexcept {
  const kill_settings& s = settings();
  return s.trace || !s.name.empty();
}

void kill_point(std::string_view name) noexcept {
  const kill_settings& s = settings();
  if (!s.trace && s.name.empty()) return;
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
  if (n == s.occurrence && name == s.name) {
    ::raise(SIGKILL);
    std::_Exit(137);  // not reached: SIGKILL cannot be caught
  }
}

}  // namespace safeamp::sim
