// Progress line on a terminal; silent when stderr is redirected.
#include "safeamp/sim/progress.hpp"

#include <unistd.h>

#include <algorithm>

namespace safeamp::sim {

std::string render_progress_line(std::int64_t done, std::int64_t total, double elapsed_seconds, std::string_view what,
                                 int bar_width) {
  const std::int64_t t = std::max<std::int64_t>(total, 1);
  const std::int64_t d = std::clamp<std::int64_t>(done, 0, t);
  const int width = std::max(bar_width, 1);
  const auto filled = static_cast<int>(d * width / t);
  std::string line;
  line.reserve(static_cast<std::size_t>(width) + 96 + what.size());
  line.push_back('[');
  line.append(static_cast<std::size_t>(filled), '#');
  line.append(static_cast<std::size_t>(width - filled), '-');
  line.append("] ");
  char buf[64];
  std::snprintf(buf, sizeof buf, "%lld/%lld  %.1f s  ", static_cast<long long>(d), static_cast<long long>(t),
                elapsed_seconds);
  line += buf;
  line += what;
  return line;
}

bool stream_is_terminal(std::FILE* f) noexcept { return f != nullptr && ::isatty(::fileno(f)) == 1; }

progress_bar::progress_bar(std::int64_t total, std::FILE* out, bool is_terminal, progress_options opt)
    : total_(total), out_(out), enabled_(is_terminal && out != nullptr), opt_(opt),
      start_(std::chrono::steady_clock::now()) {
  if (enabled_) ticker_ = std::thread([this] { tick(); });
}

progress_bar::~progress_bar() { finish(); }

void progress_bar::update(std::int64_t done, std::string_view what) {
  const std::lock_guard<std::mutex> lock(mutex_);
  done_ = done;
  what_ = what;
  if (enabled_ && !stop_) draw_locked();
}

void progress_bar::draw_locked() {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (elapsed < opt_.delay_seconds) return;
  const std::string line = render_progress_line(done_, total_, elapsed, what_, opt_.bar_width);
  std::fprintf(out_, "\r\033[K%s", line.c_str());  // carriage return + erase to end of line
  std::fflush(out_);
  drew_ = true;
}

void progress_bar::tick() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, std::chrono::duration<double>(opt_.redraw_seconds));
    if (!stop_) draw_locked();
  }
}

void progress_bar::finish() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (stop_) return;
    stop_ = true;
    if (drew_) {
      std::fprintf(out_, "\r\033[K");
      std::fflush(out_);
    }
  }
  wake_.notify_all();
  if (ticker_.joinable()) ticker_.join();
}

bool progress_bar::drew() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return drew_;
}

}  // namespace safeamp::sim
