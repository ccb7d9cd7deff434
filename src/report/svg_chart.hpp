// Inline SVG charts for the run report: a plot area with axes, ticks and
// labels, into which lines, markers, reference lines and rectangles are
// drawn in data coordinates. The SVG is plain markup: it renders without
// scripts or anything fetched.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace memfit::train {

using Point = std::pair<double, double>;

// Text for HTML and SVG: & < > " escaped.
std::string html_escape(const std::string& s);
// A number as a tick label: few digits, no trailing zeros ("0.25", "1.5k").
std::string tick_label(double v);
// About n round tick values (1, 2 or 5 times a power of ten) covering [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int n);

struct Axis {
  double lo = 0.0, hi = 1.0;
  std::string label;  // with its unit: "step", "MiB"
  bool integer = false;  // counts (steps, nodes): no fractional ticks
};

class Chart {
 public:
  // The SVG has the id `id` and the class "chart"; width and height in px.
  Chart(std::string id, Axis x, Axis y, int width = 960, int height = 340);

  double px(double x) const;
  double py(double y) const;
  // A polyline of class `cls` (one point per element of pts, in order).
  void line(const std::string& cls, const std::string& color, const std::vector<Point>& pts, const std::string& title,
            bool dashed = false);
  void markers(const std::string& cls, const std::string& color, const std::vector<Point>& pts,
               const std::vector<std::string>& titles);
  void hline(const std::string& cls, double y, const std::string& color, const std::string& label);
  void vline(const std::string& cls, double x, const std::string& color, const std::string& label);
  // Raw SVG inside the plot area (drawn after the grid, before the legend).
  void add(const std::string& svg) { body_ += svg; }
  void legend(const std::string& name, const std::string& color);
  // Labels under the x axis at these data positions (rotated), instead of
  // only the numeric ticks.
  void x_labels(const std::vector<std::pair<double, std::string>>& labels) { xlabels_ = labels; }
  std::string svg() const;

  static constexpr double kLeft = 78, kRight = 24, kTop = 28;

 private:
  std::string id_;
  Axis x_, y_;
  int width_, height_;
  double bottom_;  // margin under the plot area
  std::string body_;
  std::vector<std::pair<std::string, std::string>> legend_;
  std::vector<std::pair<double, std::string>> xlabels_;
};

// The lowest and highest y of some series (0, 1 when there are none),
// widened a little so that lines do not run along the frame.
std::pair<double, double> y_range(const std::vector<std::vector<Point>>& series, bool from_zero);

}  // namespace memfit::train
