// SVG charts stay bounded for any data: constant series, values within an ulp of each other, huge and tiny
// ranges, inf and NaN. Each chart must render quickly into a small <svg> with finite coordinates (before the
// fix, an ulp-wide range made the tick loop add the same value until bad_alloc).
#include "safeamp/sim/report_svg.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

using namespace safeamp::sim;

namespace {

constexpr double dmax = std::numeric_limits<double>::max();
constexpr double inf = std::numeric_limits<double>::infinity();
constexpr std::size_t max_svg_bytes = 64 * 1024;  // a few dozen ticks and one short series

svg_line_chart chart_of(std::vector<double> y, bool log2_y = false) {
  svg_line_chart c;
  c.log2_y = log2_y;
  svg_series s;
  s.name = "s";
  for (std::size_t i = 0; i < y.size(); ++i) s.x.push_back(static_cast<double>(i));
  s.y = std::move(y);
  c.series.push_back(std::move(s));
  return c;
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

void check_bounded(const std::string& svg) {
  CHECK(svg.size() < max_svg_bytes);
  CHECK(count(svg, "nan") == 0);
  CHECK(count(svg, "inf") == 0);
  CHECK(count(svg, "<line") <= 2 * 24 + 8);  // grid lines of both axes (at most 24 each) and the legend
  CHECK(svg.find("</svg>") != std::string::npos);
}

}  // namespace

TEST_CASE("a series whose values lie within an ulp renders with a bounded number of ticks") {
  check_bounded(render_line_chart(chart_of({1.0, std::nextafter(1.0, 2.0)})));
  check_bounded(render_line_chart(chart_of({1e15, std::nextafter(1e15, 2e15), 1e15})));
  check_bounded(render_line_chart(chart_of({-3.0, std::nextafter(-3.0, 0.0)})));
}

TEST_CASE("constant, tiny, huge and non-finite series render bounded charts") {
  const std::vector<std::vector<double>> cases = {
      {2.5, 2.5, 2.5},
      {0.0, 0.0},
      {5e-324, 1e-323},  // subnormals
      {-dmax, dmax},     // the span overflows a double
      {dmax, dmax},
      {-dmax, 0.0, 1.0},
      {1.0, inf, -inf, std::nan(""), 2.0},
      {inf, std::nan("")},  // no finite value: "no data"
      {1e300, -1e300, 1e-300},
  };
  for (const auto& y : cases) {
    INFO("first value " << y.front() << ", " << y.size() << " values");
    check_bounded(render_line_chart(chart_of(y)));
    check_bounded(render_line_chart(chart_of(y, /*log2_y=*/true)));
  }
}

TEST_CASE("x values within an ulp, or spanning the whole double range, are bounded too") {
  svg_line_chart c = chart_of({1.0, 2.0});
  c.series[0].x = {1e300, std::nextafter(1e300, dmax)};
  check_bounded(render_line_chart(c));
  c.series[0].x = {-dmax, dmax};
  check_bounded(render_line_chart(c));
}

TEST_CASE("bar charts with extreme values are bounded") {
  svg_bar_chart c;
  c.groups = {"a", "b"};
  c.bars = {"x"};
  for (const std::vector<double>& row :
       std::vector<std::vector<double>>{{dmax, 1.0}, {5e-324, 0.0}, {inf, std::nan("")}, {-1.0, -dmax}}) {
    c.values = {row};
    check_bounded(render_bar_chart(c));
  }
}

TEST_CASE("ordinary ranges still get round ticks") {
  const std::string svg = render_line_chart(chart_of({0.0, 10.0}));
  CHECK(svg.find(">0</text>") != std::string::npos);
  CHECK(svg.find(">10</text>") != std::string::npos);
  CHECK(count(svg, "<line") >= 6);
}

TEST_CASE("two identical lines with markers: both stay visible, their markers at different steps") {
  // 24 points; with 2 series a marker every 24 / 12 = 2 points, series 0 from point 0 and series 1 from point
  // 2 * 1 / 2 = 1: series 0 marks the even points, series 1 the odd ones.
  svg_line_chart c = chart_of(std::vector<double>(24, 1.0), true);
  c.series.push_back(c.series.front());
  c.series[0].colour = "#aa0000";
  c.series[1].colour = "#00aa00";
  for (svg_series& s : c.series) s.markers = true;
  const std::string svg = render_line_chart(c);
  // 12 markers on each line plus one in its legend entry: circles for series 0, squares for series 1.
  CHECK(count(svg, "<circle") == 13);
  CHECK(count(svg, "fill=\"#aa0000\"") == 13);
  CHECK(count(svg, "fill=\"#00aa00\"") == 13);
  const auto x_of = [&svg](const std::string& tag, std::size_t nth) {
    std::size_t at = 0;
    for (std::size_t i = 0; i <= nth; ++i) at = svg.find(tag, at + 1);
    return std::stod(svg.substr(svg.find("=\"", at) + 2));
  };
  CHECK(x_of("<circle", 0) < x_of("<rect x=\"", 1));  // the first square (the frame is rect 0) comes a step later
}

TEST_CASE("fixed y range (shared scales) and tolerance marks on bars") {
  svg_line_chart c = chart_of({0.1, 0.2});
  c.y_min = 0.0;
  c.y_max = 1.0;
  const std::string fixed = render_line_chart(c);
  CHECK(fixed.find(">1</text>") != std::string::npos);  // the axis reaches the fixed top, not the data's 0.2
  svg_bar_chart b{.title = "t", .y_label = "y", .groups = {"a", "b"}, .bars = {"r", "c"}, .values = {{1, 2}, {1, 2}}};
  b.limits = {{std::nan(""), std::nan("")}, {1.5, 2.5}};
  const std::string bars = render_bar_chart(b);
  CHECK(count(bars, "class=\"limit\"") == 2);  // one mark per candidate bar with a limit
  CHECK(bars.find("gate limit") != std::string::npos);
}

TEST_CASE("bar group labels wider than their group are staggered over two lines") {
  // 880 - 64 - 230 = 586 units of plot, 8 groups of 73.25: "unscale_check" (13 x 6.5 = 84.5) is wider than a group.
  svg_bar_chart b{.title = "t", .y_label = "y"};
  b.groups = {"forward", "casts", "loss", "backward", "unscale_check", "clip", "optimizer", "other"};
  b.bars = {"run"};
  b.values = {std::vector<double>(8, 1.0)};
  // The labels' baselines: 28 + 232 + 14 = 274 for every label, + 12 for every other one when staggered.
  const std::string wide = render_bar_chart(b);
  CHECK(count(wide, "y=\"274.0\" text-anchor=\"middle\">") == 4);
  CHECK(count(wide, "y=\"286.0\" text-anchor=\"middle\">") == 4);
  CHECK(wide.find("y=\"286.0\" text-anchor=\"middle\">casts<") != std::string::npos);
  // Short labels fit: one line.
  b.groups = {"a", "b", "c", "d", "e", "f", "g", "h"};
  const std::string narrow = render_bar_chart(b);
  CHECK(count(narrow, "y=\"274.0\" text-anchor=\"middle\">") == 8);
  CHECK(count(narrow, "y=\"286.0\"") == 0);
}
