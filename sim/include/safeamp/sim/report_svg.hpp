// Inline SVG plots for the self-contained HTML report: line charts (linear or log2 y axis, with point
// markers such as skipped steps) and grouped bar charts. Pure string generation, no scripts, no fonts
// fetched: the report renders offline.
#pragma once

#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace safeamp::sim {

struct svg_series {
  std::string name{};
  std::vector<double> x{};
  std::vector<double> y{};     // non-finite values break the line
  bool dashed = false;
  std::string colour{};  // empty: series_colour(index in the chart)
  bool markers = false;  // a marker every few points, its shape by series index and its positions staggered
                         // between series, so a line drawn exactly over another stays visible
};

struct svg_points {
  std::string name{};        // legend entry, e.g. "skipped step"
  std::vector<double> x{};
  std::vector<double> y{};
};

struct svg_line_chart {
  std::string title{};
  std::string x_label{};
  std::string y_label{};
  bool log2_y = false;       // y on a log2 axis (loss scales); values <= 0 are dropped
  std::vector<svg_series> series{};
  std::vector<svg_points> points{};
  int width = 880;
  int height = 300;
  std::size_t max_points_per_series = 600;  // longer series are thinned evenly
  double y_min = std::numeric_limits<double>::quiet_NaN();  // fixed y range (shared between compared charts);
  double y_max = std::numeric_limits<double>::quiet_NaN();  // NaN: from the data
  double legend_width = 230.0;                              // room right of the plot for the legend
};

/// An <svg> element; an empty chart (no finite data) gets a "no data" note instead of axes.
[[nodiscard]] std::string render_line_chart(const svg_line_chart& chart);

struct svg_bar_chart {
  std::string title{};
  std::string y_label{};
  std::vector<std::string> groups{};            // x categories (e.g. slices)
  std::vector<std::string> bars{};             // one bar per group per entry (e.g. runs)
  std::vector<std::vector<double>> values{};    // values[bar][group]
  std::vector<std::vector<double>> limits{};    // limits[bar][group]: a tolerance mark across that bar (NaN: none)
  std::string limit_label = "gate limit";       // its legend entry
  std::vector<std::string> bar_colours{};       // colour of each bar entry (missing or empty: series_colour(index))
  int width = 880;
  int height = 300;
};
[[nodiscard]] std::string render_bar_chart(const svg_bar_chart& chart);

/// Colour of series i (a fixed palette readable on white, cycled; never skip_colour).
[[nodiscard]] std::string_view series_colour(std::size_t i) noexcept;
/// The colour of the crosses that mark skipped steps (red), which no series uses.
inline constexpr std::string_view skip_colour = "#d62728";

/// Escapes &, <, >, " and ' for HTML/SVG text and attributes.
[[nodiscard]] std::string html_escape(std::string_view s);

}  // namespace safeamp::sim
