// Progress line on a terminal; plain lines (or nothing) when stderr is redirected.
#include "safeamp/sim/progress.hpp"

#include <unistd.h>

#include <algorithm>

namespace safeamp::sim {
namespace {

// "4.9 s", "3 min 05 s", "2 h 07 min".
std::string duration_text(double seconds) {
  char buf[48];
  const auto whole = static_cast<long long>(seconds);
  if (!(seconds < 60.0)) {
    if (whole >= 3600) {
      std::snprintf(buf, sizeof buf, "%lld h %02lld min", whole / 3600, whole % 3600 / 60);
    } else {
      std::snprintf(buf, sizeof buf, "%lld min %02lld s", whole / 60, whole % 60);
    }
  } else {
    std::snprintf(buf, sizeof buf, "%.1f s", seconds);
  }
  return buf;
}

}  // namespace

std::string render_progress_line(const progress_snapshot& p) {
  const std::int64_t t = std::max<std::int64_t>(p.total, 1);
  const std::int64_t d = std::clamp<std::int64_t>(p.done, 0, t);
  const int width = std::max(p.bar_width, 1);
  const double elapsed_seconds = p.elapsed_seconds;
  const std::string_view what = p.what;
  const auto filled = static_cast<int>(d * width / t);
  std::string line;
  line.reserve(static_cast<std::size_t>(width) + 96 + what.size());
  line.push_back('[');
  line.append(static_cast<std::size_t>(filled), '#');
  line.append(static_cast<std::size_t>(width - filled), '-');
  line.append("] ");
  char buf[160];
  std::snprintf(buf, sizeof buf, "%lld/%lld steps  %s  ", static_cast<long long>(d), static_cast<long long>(t),
                duration_text(elapsed_seconds).c_str());
  line += buf;
  if (d > 0 && elapsed_seconds > 0.0) {
    const double rate = static_cast<double>(d) / elapsed_seconds;
    std::snprintf(buf, sizeof buf, "%.3g steps/s  ", rate);
    line += buf;
    if (d < t) line += "ETA " + duration_text(static_cast<double>(t - d) / rate) + "  ";
  } else {
    line += "-- steps/s  ETA --  ";
  }
  line += what;
  return line;
}

bool stream_is_terminal(std::FILE* f) noexcept { return f != nullptr && ::isatty(::fileno(f)) == 1; }

progress_bar::progress_bar(std::int64_t total, std::FILE* out, bool is_terminal, progress_options opt)
    : total_(total),
      out_(out),
      enabled_(is_terminal && out != nullptr),
      plain_(!is_terminal && out != nullptr && opt.plain_lines),
      opt_(opt),
      start_(std::chrono::steady_clock::now()) {
  if (enabled_) ticker_ = std::thread([this] { tick(); });
}

progress_bar::~progress_bar() { finish(); }

void progress_bar::update(std::int64_t done, std::string_view what) {
  const std::lock_guard<std::mutex> lock(mutex_);
  done_ = done;
  what_ = what;
  if (enabled_ && !stop_) draw_locked();
  if (plain_ && !stop_) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const bool last = done >= total_;
    if (elapsed >= opt_.delay_seconds &&
        (last || last_plain_ < 0.0 || elapsed - last_plain_ >= opt_.plain_interval_seconds)) {
      const std::string line = render_progress_line(
          {.done = done_, .total = total_, .elapsed_seconds = elapsed, .what = what_, .bar_width = opt_.bar_width});
      std::fprintf(out_, "safeamp sim: %s\n", line.c_str());
      std::fflush(out_);
      last_plain_ = elapsed;
      drew_ = true;
    }
  }
}

void progress_bar::draw_locked() {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (elapsed < opt_.delay_seconds) return;
  const std::string line = render_progress_line(
      {.done = done_, .total = total_, .elapsed_seconds = elapsed, .what = what_, .bar_width = opt_.bar_width});
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
    if (drew_ && enabled_) {
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
