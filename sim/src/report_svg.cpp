// Line and bar charts as inline SVG for the HTML report.
#include "safeamp/sim/report_svg.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>

namespace safeamp::sim {
namespace {

constexpr double margin_left = 64.0;
constexpr double margin_right = 230.0;  // legend
constexpr double margin_top = 28.0;
constexpr double margin_bottom = 40.0;
constexpr double label_char_width = 6.5;  // width of a character of the 11 px sans-serif labels, a generous mean

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string tick_label(double v) {
  char buf[32];
  if (v != 0.0 && (std::abs(v) >= 1e5 || std::abs(v) < 1e-3)) {
    std::snprintf(buf, sizeof buf, "%.0e", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.4g", v);
  }
  return buf;
}

constexpr int max_ticks = 24;  // a chart never draws more tick lines than this, whatever its range

/// About `n` round tick values covering [lo, hi], at most max_ticks of them. Each tick is computed from its
/// index (first + i * step), never by accumulation, so a step below the ulp of the values cannot stall the
/// loop; a range that is empty, not finite or too narrow to hold distinct round values gets the end points.
std::vector<double> nice_ticks(double lo, double hi, int n) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) return {};
  if (!(hi > lo)) return {lo};
  const double raw = (hi / n) - (lo / n);  // the span divided first: finite even for -DBL_MAX .. DBL_MAX
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (const double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  }
  const double first = std::ceil(lo / step);
  const double last = std::floor(hi / step + 1e-9);
  if (!(step > 0.0) || !std::isfinite(step) || !std::isfinite(first) || !std::isfinite(last) || last < first ||
      last - first + 1.0 > max_ticks) {
    return {lo, hi};
  }
  std::vector<double> out;
  for (int i = 0; i <= static_cast<int>(last - first); ++i) {
    const double t = (first + i) * step;
    if (!std::isfinite(t) || (!out.empty() && !(t > out.back()))) return {lo, hi};  // step below the ulp of t
    out.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);  // no "-0" label
  }
  return out;
}

/// Widens [lo, hi] to a drawable range: a constant (or ulp-wide) series gets a visible span around its value,
/// and the span itself stays finite (|lo|, |hi| <= DBL_MAX / 4) so that positions never divide by inf or 0.
void drawable_range(double& lo, double& hi) {
  constexpr double limit = std::numeric_limits<double>::max() / 4;
  lo = std::clamp(lo, -limit, limit);
  hi = std::clamp(hi, -limit, limit);
  const double mid = lo / 2 + hi / 2;
  const double min_span = std::max(1e-300, std::abs(mid) * 1e-9);
  if (!(hi - lo >= min_span)) {
    const double half = std::max(0.5, std::abs(mid) * 1e-3);
    lo = std::clamp(mid - half, -limit * 2, limit * 2);
    hi = std::clamp(mid + half, -limit * 2, limit * 2);
  }
}

std::string svg_open(int w, int h, const std::string& title) {
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(w) + "\" height=\"" + std::to_string(h) +
         "\" style=\"width:100%;height:auto;max-width:" + std::to_string(w) + "px\" viewBox=\"0 0 " +
         std::to_string(w) + " " + std::to_string(h) +
         "\" role=\"img\" font-family=\"sans-serif\" font-size=\"11\">\n<title>" + html_escape(title) +
         "</title>\n<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n<text x=\"" + num(margin_left) +
         "\" y=\"16\" font-size=\"13\" font-weight=\"bold\">" + html_escape(title) + "</text>\n";
}

/// A marker of shape k % 4 (circle, square, triangle, diamond) centred at (x, y), outlined in white so that it
/// stands out from the line under it.
std::string marker(std::size_t k, double x, double y, const std::string& colour) {
  const std::string style = " fill=\"" + colour + "\" stroke=\"#ffffff\" stroke-width=\"0.8\"/>\n";
  switch (k % 4) {
    case 0:
      return "<circle cx=\"" + num(x) + "\" cy=\"" + num(y) + "\" r=\"3.5\"" + style;
    case 1:
      return "<rect x=\"" + num(x - 3.2) + "\" y=\"" + num(y - 3.2) + "\" width=\"6.4\" height=\"6.4\"" + style;
    case 2:
      return "<path d=\"M" + num(x) + " " + num(y - 4.2) + " L" + num(x + 4) + " " + num(y + 3) + " L" + num(x - 4) +
             " " + num(y + 3) + " Z\"" + style;
    default:
      return "<path d=\"M" + num(x) + " " + num(y - 4.5) + " L" + num(x + 4.5) + " " + num(y) + " L" + num(x) + " " +
             num(y + 4.5) + " L" + num(x - 4.5) + " " + num(y) + " Z\"" + style;
  }
}

}  // namespace

std::string_view series_colour(std::size_t i) noexcept {
  // No red: it marks skipped steps (skip_colour), and the first candidate's scale line was drawn in it.
  static constexpr std::array<std::string_view, 10> palette = {"#222222", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd",
                                                               "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"};
  return palette[i % palette.size()];
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string render_line_chart(const svg_line_chart& c) {
  const auto ty = [&c](double y) { return c.log2_y ? (y > 0.0 ? std::log2(y) : std::nan("")) : y; };
  double x0 = std::numeric_limits<double>::infinity();
  double x1 = -x0;
  double y0 = x0;
  double y1 = -x0;
  const auto extend = [&](double x, double y) {
    const double v = ty(y);
    if (!std::isfinite(x) || !std::isfinite(v)) return;
    x0 = std::min(x0, x);
    x1 = std::max(x1, x);
    y0 = std::min(y0, v);
    y1 = std::max(y1, v);
  };
  for (const svg_series& s : c.series) {
    for (std::size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) extend(s.x[i], s.y[i]);
  }
  for (const svg_points& p : c.points) {
    for (std::size_t i = 0; i < std::min(p.x.size(), p.y.size()); ++i) extend(p.x[i], p.y[i]);
  }
  std::string svg = svg_open(c.width, c.height, c.title);
  if (!std::isfinite(x0)) {
    svg += "<text x=\"" + num(margin_left) + "\" y=\"60\">no data</text>\n</svg>\n";
    return svg;
  }
  if (x1 == x0) x1 = x0 + 1.0;
  drawable_range(x0, x1);
  const bool fixed_y = std::isfinite(ty(c.y_min)) && std::isfinite(ty(c.y_max)) && ty(c.y_max) > ty(c.y_min);
  if (fixed_y) {
    y0 = ty(c.y_min);
    y1 = ty(c.y_max);
  }
  drawable_range(y0, y1);
  const double pad = (y1 - y0) * 0.05;
  y0 -= pad;
  y1 += pad;
  const double pw = c.width - margin_left - c.legend_width;
  const double ph = c.height - margin_top - margin_bottom;
  // Halves: a value near DBL_MAX minus a clamped lower end must not overflow to inf.
  const auto px = [&](double x) { return margin_left + (x / 2 - x0 / 2) / (x1 / 2 - x0 / 2) * pw; };
  const auto py = [&](double v) { return margin_top + (1.0 - (v / 2 - y0 / 2) / (y1 / 2 - y0 / 2)) * ph; };

  // Axes, grid and ticks.
  svg += "<g stroke=\"#dddddd\" stroke-width=\"1\">\n";
  std::string labels;
  std::vector<double> yt;
  if (c.log2_y) {
    // log2 of a finite double lies in [-1075, 1024]: the exponents fit an int and the loop is short.
    const int step = std::max(1, static_cast<int>(std::ceil((y1 - y0) / 6.0)));
    for (int e = static_cast<int>(std::ceil(y0)); e <= static_cast<int>(std::floor(y1)) && yt.size() < max_ticks;
         e += step) {
      yt.push_back(e);
    }
  } else {
    yt = nice_ticks(y0, y1, 5);
  }
  for (const double t : yt) {
    svg += "<line x1=\"" + num(margin_left) + "\" x2=\"" + num(margin_left + pw) + "\" y1=\"" + num(py(t)) +
           "\" y2=\"" + num(py(t)) + "\"/>\n";
    const std::string text = c.log2_y ? "2^" + std::to_string(static_cast<int>(t)) : tick_label(t);
    labels += "<text x=\"" + num(margin_left - 6) + "\" y=\"" + num(py(t) + 4) + "\" text-anchor=\"end\">" +
              html_escape(text) + "</text>\n";
  }
  for (const double t : nice_ticks(x0, x1, 6)) {
    svg += "<line y1=\"" + num(margin_top) + "\" y2=\"" + num(margin_top + ph) + "\" x1=\"" + num(px(t)) +
           "\" x2=\"" + num(px(t)) + "\"/>\n";
    labels += "<text x=\"" + num(px(t)) + "\" y=\"" + num(margin_top + ph + 14) + "\" text-anchor=\"middle\">" +
              tick_label(t) + "</text>\n";
  }
  svg += "</g>\n<rect x=\"" + num(margin_left) + "\" y=\"" + num(margin_top) + "\" width=\"" + num(pw) +
         "\" height=\"" + num(ph) + "\" fill=\"none\" stroke=\"#444444\"/>\n" + labels;
  svg += "<text x=\"" + num(margin_left + pw / 2) + "\" y=\"" + num(c.height - 6.0) + "\" text-anchor=\"middle\">" +
         html_escape(c.x_label) + "</text>\n";
  svg += "<text transform=\"translate(14," + num(margin_top + ph / 2) + ") rotate(-90)\" text-anchor=\"middle\">" +
         html_escape(c.y_label) + "</text>\n";

  // Series: polylines, broken at non-finite values, thinned to max_points_per_series.
  double legend_y = margin_top + 8;
  const double legend_x = margin_left + pw + 12;
  for (std::size_t k = 0; k < c.series.size(); ++k) {
    const svg_series& s = c.series[k];
    const std::string colour = s.colour.empty() ? std::string(series_colour(k)) : s.colour;
    const std::size_t n = std::min(s.x.size(), s.y.size());
    const std::size_t stride = std::max<std::size_t>(1, (n + c.max_points_per_series - 1) / c.max_points_per_series);
    std::string pts;
    const auto flush = [&]() {
      if (!pts.empty()) {
        svg += "<polyline fill=\"none\" stroke=\"" + colour + "\" stroke-width=\"1.6\"" +
               (s.dashed ? " stroke-dasharray=\"5,3\"" : "") + " points=\"" + pts + "\"/>\n";
      }
      pts.clear();
    };
    for (std::size_t i = 0; i < n; i += stride) {
      const double v = ty(s.y[i]);
      if (!std::isfinite(v) || !std::isfinite(s.x[i])) {
        flush();
        continue;
      }
      pts += num(px(s.x[i])) + "," + num(py(v)) + " ";
    }
    flush();
    if (s.markers && n > 0) {
      // About a dozen markers per line; series k starts k/series of the way into the spacing, so markers of lines
      // drawn over each other alternate instead of hiding each other.
      const std::size_t every = std::max<std::size_t>(1, n / 12);
      for (std::size_t i = every * k / std::max<std::size_t>(1, c.series.size()); i < n; i += every) {
        const double v = ty(s.y[i]);
        if (std::isfinite(v) && std::isfinite(s.x[i])) svg += marker(k, px(s.x[i]), py(v), colour);
      }
    }
    svg += "<line x1=\"" + num(legend_x) + "\" x2=\"" + num(legend_x + 18) + "\" y1=\"" + num(legend_y) + "\" y2=\"" +
           num(legend_y) + "\" stroke=\"" + colour + "\" stroke-width=\"2\"" +
           (s.dashed ? " stroke-dasharray=\"5,3\"" : "") + "/>\n" +
           (s.markers ? marker(k, legend_x + 9, legend_y, colour) : std::string()) + "<text x=\"" + num(legend_x + 22) +
           "\" y=\"" + num(legend_y + 4) + "\">" + html_escape(s.name) + "</text>\n";
    legend_y += 15;
  }
  for (const svg_points& p : c.points) {
    for (std::size_t i = 0; i < std::min(p.x.size(), p.y.size()); ++i) {
      const double v = ty(p.y[i]);
      if (!std::isfinite(v)) continue;
      const double cx = px(p.x[i]);
      const double cy = py(v);
      svg += "<path d=\"M" + num(cx - 4) + " " + num(cy - 4) + " L" + num(cx + 4) + " " + num(cy + 4) + " M" +
             num(cx - 4) + " " + num(cy + 4) + " L" + num(cx + 4) + " " + num(cy - 4) + "\" stroke=\"" +
             std::string(skip_colour) + "\" stroke-width=\"2\"/>\n";
    }
    svg += "<path d=\"M" + num(legend_x + 5) + " " + num(legend_y - 4) + " l8 8 m-8 0 l8 -8\" stroke=\"" +
           std::string(skip_colour) +
           "\" "
           "stroke-width=\"2\"/>\n<text x=\"" +
           num(legend_x + 22) + "\" y=\"" + num(legend_y + 4) + "\">" + html_escape(p.name) + "</text>\n";
    legend_y += 15;
  }
  svg += "</svg>\n";
  return svg;
}

std::string render_bar_chart(const svg_bar_chart& c) {
  std::string svg = svg_open(c.width, c.height, c.title);
  double vmax = 0.0;
  for (const auto* table : {&c.values, &c.limits}) {
    for (const auto& row : *table) {
      for (const double v : row) {
        if (std::isfinite(v)) vmax = std::max(vmax, v);
      }
    }
  }
  if (c.groups.empty() || c.bars.empty()) {
    svg += "<text x=\"" + num(margin_left) + "\" y=\"60\">no data</text>\n</svg>\n";
    return svg;
  }
  if (vmax <= 0.0) vmax = 1.0;
  vmax *= 1.05;  // the highest bar (or limit mark) stays below the frame
  const auto colour = [&c](std::size_t b) {
    return b < c.bar_colours.size() && !c.bar_colours[b].empty() ? c.bar_colours[b] : std::string(series_colour(b));
  };
  const double pw = c.width - margin_left - margin_right;
  const double ph = c.height - margin_top - margin_bottom;
  const double group_w = pw / static_cast<double>(c.groups.size());
  const double bar_w = group_w * 0.8 / static_cast<double>(c.bars.size());
  const auto py = [&](double v) { return margin_top + (1.0 - v / vmax) * ph; };
  // Group labels wider than a group (at ~6.5 px per character of the 11 px font) would run into each other:
  // then every other label sits one line lower.
  std::size_t longest = 0;
  for (const std::string& g : c.groups) longest = std::max(longest, g.size());
  const bool stagger = static_cast<double>(longest) * label_char_width > group_w;
  for (const double t : nice_ticks(0.0, vmax, 5)) {
    svg += "<line x1=\"" + num(margin_left) + "\" x2=\"" + num(margin_left + pw) + "\" y1=\"" + num(py(t)) +
           "\" y2=\"" + num(py(t)) + "\" stroke=\"#dddddd\"/>\n<text x=\"" + num(margin_left - 6) + "\" y=\"" +
           num(py(t) + 4) + "\" text-anchor=\"end\">" + tick_label(t) + "</text>\n";
  }
  for (std::size_t g = 0; g < c.groups.size(); ++g) {
    const double gx = margin_left + static_cast<double>(g) * group_w + group_w * 0.1;
    for (std::size_t b = 0; b < c.bars.size(); ++b) {
      const double v = g < c.values[b].size() ? c.values[b][g] : std::nan("");
      if (!std::isfinite(v)) continue;
      const double drawn = std::max(v, 0.0);  // the axis starts at 0: a negative bar is drawn empty (its title says v)
      svg += "<rect x=\"" + num(gx + static_cast<double>(b) * bar_w) + "\" y=\"" + num(py(drawn)) + "\" width=\"" +
             num(bar_w * 0.92) + "\" height=\"" + num(py(0.0) - py(drawn)) + "\" fill=\"" + colour(b) + "\"><title>" +
             html_escape(c.bars[b] + " / " + c.groups[g]) + ": " + tick_label(v) + "</title></rect>\n";
    }
    for (std::size_t b = 0; b < c.bars.size() && b < c.limits.size(); ++b) {
      const double lim = g < c.limits[b].size() ? c.limits[b][g] : std::nan("");
      if (!std::isfinite(lim) || lim < 0.0) continue;
      const double x = gx + static_cast<double>(b) * bar_w;
      svg += "<line class=\"limit\" x1=\"" + num(x - 1.0) + "\" x2=\"" + num(x + bar_w * 0.92 + 1.0) + "\" y1=\"" +
             num(py(lim)) + "\" y2=\"" + num(py(lim)) +
             "\" stroke=\"#000000\" stroke-width=\"2\" "
             "stroke-dasharray=\"3,2\"><title>" +
             html_escape(c.bars[b] + " / " + c.groups[g]) + ": " + html_escape(c.limit_label) + " " + tick_label(lim) +
             "</title></line>\n";
    }
    const double label_y = margin_top + ph + 14 + (stagger && g % 2 == 1 ? 12 : 0);
    svg += "<text x=\"" + num(gx + group_w * 0.4) + "\" y=\"" + num(label_y) + "\" text-anchor=\"middle\">" +
           html_escape(c.groups[g]) + "</text>\n";
  }
  svg += "<rect x=\"" + num(margin_left) + "\" y=\"" + num(margin_top) + "\" width=\"" + num(pw) + "\" height=\"" +
         num(ph) + "\" fill=\"none\" stroke=\"#444444\"/>\n";
  svg += "<text transform=\"translate(14," + num(margin_top + ph / 2) + ") rotate(-90)\" text-anchor=\"middle\">" +
         html_escape(c.y_label) + "</text>\n";
  double legend_y = margin_top + 8;
  const double legend_x = margin_left + pw + 12;
  for (std::size_t b = 0; b < c.bars.size(); ++b) {
    svg += "<rect x=\"" + num(legend_x) + "\" y=\"" + num(legend_y - 6) + "\" width=\"12\" height=\"10\" fill=\"" +
           colour(b) + "\"/>\n<text x=\"" + num(legend_x + 18) + "\" y=\"" + num(legend_y + 3) + "\">" +
           html_escape(c.bars[b]) + "</text>\n";
    legend_y += 15;
  }
  if (!c.limits.empty()) {
    svg += "<line x1=\"" + num(legend_x - 1) + "\" x2=\"" + num(legend_x + 13) + "\" y1=\"" + num(legend_y - 1) +
           "\" y2=\"" + num(legend_y - 1) +
           "\" stroke=\"#000000\" stroke-width=\"2\" stroke-dasharray=\"3,2\"/>\n"
           "<text x=\"" +
           num(legend_x + 18) + "\" y=\"" + num(legend_y + 3) + "\">" + html_escape(c.limit_label) + "</text>\n";
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace safeamp::sim
