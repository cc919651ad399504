// A progress line on stderr for `safeamp sim`: drawn only when the stream is a terminal and the work has
// taken longer than a delay (~2 s), redrawn by a background ticker, and erased at the end; silent otherwise.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace safeamp::sim {

/// The text of one progress line: "[#####-----]  2/5  12.3 s  fp16-mixed dynamic".
[[nodiscard]] std::string render_progress_line(std::int64_t done, std::int64_t total, double elapsed_seconds,
                                               std::string_view what, int bar_width);

struct progress_options {
  double delay_seconds = 2.0;     // nothing is drawn before this much time has passed
  double redraw_seconds = 0.25;   // ticker period
  int bar_width = 24;
};

class progress_bar {
 public:
  /// `out` is drawn on only when `is_terminal`; pass stream_is_terminal(out) for the real decision.
  progress_bar(std::int64_t total, std::FILE* out, bool is_terminal, progress_options opt = {});
  ~progress_bar();
  progress_bar(const progress_bar&) = delete;
  progress_bar& operator=(const progress_bar&) = delete;

  /// `done` units finished; `what` is the unit in progress.
  void update(std::int64_t done, std::string_view what);
  /// Stops the ticker and erases the line (idempotent).
  void finish();
  /// Whether anything was ever written to the stream.
  [[nodiscard]] bool drew() const;

 private:
  void draw_locked();
  void tick();

  std::int64_t total_;
  std::FILE* out_;
  bool enabled_;
  progress_options opt_;
  std::chrono::steady_clock::time_point start_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::int64_t done_ = 0;
  std::string what_;
  bool stop_ = false;
  bool drew_ = false;
  std::thread ticker_;
};

/// isatty() of the stream's descriptor.
[[nodiscard]] bool stream_is_terminal(std::FILE* f) noexcept;

}  // namespace safeamp::sim
