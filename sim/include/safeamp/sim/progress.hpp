// Progress of `safeamp sim` on stderr, counted in training steps over all runs, with the rate and the time
// left: on a terminal one line, drawn once the work has taken longer than a delay (~2 s), redrawn by a background
// ticker and erased at the end; elsewhere (a log, CI) optionally a plain line every plain_interval_seconds.
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

/// What one progress line shows. Named fields: the positional (done, total, ...) form compiled with the two counts
/// swapped.
struct progress_snapshot {
  std::int64_t done = 0;         // steps finished
  std::int64_t total = 0;        // steps of the whole invocation
  double elapsed_seconds = 0.0;  // since the first step began
  std::string_view what{};       // the unit in progress ("reference fp32 (run 1/5, step 40/400)")
  int bar_width = 24;            // cells of the bar
};

/// The text of one progress line: "[####------] 2/5 steps  3.2 s  0.62 steps/s  ETA 4.9 s  run b" (the rate is
/// done / elapsed, the ETA (total - done) / rate; "--" until a step is done; no ETA once done == total).
[[nodiscard]] std::string render_progress_line(const progress_snapshot& p);

struct progress_options {
  double delay_seconds = 2.0;     // nothing is drawn before this much time has passed
  double redraw_seconds = 0.25;   // ticker period
  int bar_width = 24;
  bool plain_lines = false;              // when not a terminal: print plain lines instead of nothing
  double plain_interval_seconds = 10.0;  // at most one plain line per this much time (and one at the end)
};

class progress_bar {
 public:
  /// `out` gets the redrawn line only when `is_terminal` (pass stream_is_terminal(out)); otherwise plain lines
  /// when opt.plain_lines, else nothing.
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
  bool enabled_;  // the terminal line
  bool plain_;    // plain lines
  progress_options opt_;
  std::chrono::steady_clock::time_point start_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::int64_t done_ = 0;
  std::string what_;
  bool stop_ = false;
  bool drew_ = false;
  double last_plain_ = -1.0;  // elapsed seconds at the last plain line
  std::thread ticker_;
};

/// isatty() of the stream's descriptor.
[[nodiscard]] bool stream_is_terminal(std::FILE* f) noexcept;

}  // namespace safeamp::sim
