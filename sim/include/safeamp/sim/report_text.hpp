// Small text helpers shared by the report's renderers (terminal, JSON, HTML, diagnosis, decision): printf-style
// numbers, loss scales as powers of two, and HTML table cells.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

#include "safeamp/sim/report_svg.hpp"

namespace safeamp::sim::report_text {

/// `v` through the printf format `f` (one double conversion, e.g. "%.4g").
[[nodiscard]] inline std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

/// A fraction as a percentage: whole percents from about 10 % up ("42%"), two significant digits below ("2.7%",
/// "0.0019%"), so a small share is not shown as 0 %.
[[nodiscard]] inline std::string percent(double fraction) {
  return fmt(fraction >= 0.0995 ? "%.0f%%" : "%.2g%%", fraction * 100.0);
}

/// A loss scale as "2^k" when it is a power of two, else as %g.
[[nodiscard]] inline std::string scale_text(float s) {
  if (s > 0.0f && std::isfinite(s)) {
    int e = 0;
    if (std::frexp(s, &e) == 0.5f) return "2^" + std::to_string(e - 1);
  }
  return fmt("%g", static_cast<double>(s));
}

/// HTML table cells with escaped text.
[[nodiscard]] inline std::string td(const std::string& s) { return "<td>" + html_escape(s) + "</td>"; }
[[nodiscard]] inline std::string th(const std::string& s) { return "<th>" + html_escape(s) + "</th>"; }

}  // namespace safeamp::sim::report_text
