#include "report/svg_chart.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace memfit::train {
namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

}  // namespace

std::string html_escape(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    if (c == '&') o += "&amp;";
    else if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

std::string tick_label(double v) {
  char buf[32];
  const double a = std::fabs(v);
  if (a >= 1e6) std::snprintf(buf, sizeof buf, "%gM", v / 1e6);
  else if (a >= 1e4) std::snprintf(buf, sizeof buf, "%gk", v / 1e3);
  else std::snprintf(buf, sizeof buf, "%g", std::fabs(v) < 1e-12 ? 0.0 : v);
  return buf;
}

std::vector<double> nice_ticks(double lo, double hi, int n) {
  if (!(hi > lo) || n < 1) return {lo};
  const double raw = (hi - lo) / n;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / mag;
  const double step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
  std::vector<double> t;
  for (double v = std::ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) t.push_back(v);
  return t;
}

std::pair<double, double> y_range(const std::vector<std::vector<Point>>& series, bool from_zero) {
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& s : series)
    for (const Point& p : s)
      if (std::isfinite(p.second)) lo = std::min(lo, p.second), hi = std::max(hi, p.second);
  if (!std::isfinite(lo)) return {0.0, 1.0};
  if (from_zero) lo = std::min(lo, 0.0);
  if (hi - lo < 1e-12) hi = lo + (std::fabs(lo) > 0 ? std::fabs(lo) * 0.1 : 1.0);
  const double pad = (hi - lo) * 0.05;
  return {from_zero && lo >= 0 ? lo : lo - pad, hi + pad};
}

Chart::Chart(std::string id, Axis x, Axis y, int width, int height)
    : id_(std::move(id)), x_(std::move(x)), y_(std::move(y)), width_(width), height_(height), bottom_(48) {
  if (!(x_.hi > x_.lo)) x_.hi = x_.lo + 1;
  if (!(y_.hi > y_.lo)) y_.hi = y_.lo + 1;
}

double Chart::px(double x) const { return kLeft + (x - x_.lo) / (x_.hi - x_.lo) * (width_ - kLeft - kRight); }
double Chart::py(double y) const { return height_ - bottom_ - (y - y_.lo) / (y_.hi - y_.lo) * (height_ - bottom_ - kTop); }

void Chart::line(const std::string& cls, const std::string& color, const std::vector<Point>& pts,
                 const std::string& title, bool dashed) {
  std::string s = "<polyline class=\"" + cls + "\" fill=\"none\" stroke=\"" + color + "\" stroke-width=\"1.6\"" +
                  (dashed ? " stroke-dasharray=\"6 4\"" : "") + " points=\"";
  for (size_t i = 0; i < pts.size(); ++i) {
    if (i) s += ' ';
    s += num(px(pts[i].first));
    s += ',';
    s += num(py(pts[i].second));
  }
  s += "\"><title>" + html_escape(title) + "</title></polyline>\n";
  body_ += s;
}

void Chart::markers(const std::string& cls, const std::string& color, const std::vector<Point>& pts,
                    const std::vector<std::string>& titles) {
  for (size_t i = 0; i < pts.size(); ++i)
    body_ += "<circle class=\"" + cls + "\" cx=\"" + num(px(pts[i].first)) + "\" cy=\"" + num(py(pts[i].second)) +
             "\" r=\"3.5\" fill=\"" + color + "\"><title>" + html_escape(i < titles.size() ? titles[i] : "") +
             "</title></circle>\n";
}

void Chart::hline(const std::string& cls, double y, const std::string& color, const std::string& label) {
  const std::string yy = num(py(y));
  body_ += "<g class=\"" + cls + "\"><line x1=\"" + num(kLeft) + "\" x2=\"" + num(width_ - kRight) + "\" y1=\"" + yy +
           "\" y2=\"" + yy + "\" stroke=\"" + color + "\" stroke-width=\"1.5\" stroke-dasharray=\"8 4\"/><text x=\"" +
           num(width_ - kRight - 4) + "\" y=\"" + num(py(y) - 5) + "\" text-anchor=\"end\" fill=\"" + color + "\">" +
           html_escape(label) + "</text></g>\n";
}

void Chart::vline(const std::string& cls, double x, const std::string& color, const std::string& label) {
  const std::string xx = num(px(x));
  body_ += "<g class=\"" + cls + "\"><line x1=\"" + xx + "\" x2=\"" + xx + "\" y1=\"" + num(kTop) + "\" y2=\"" +
           num(height_ - bottom_) + "\" stroke=\"" + color + "\" stroke-width=\"1.5\" stroke-dasharray=\"4 3\"/><text x=\"" +
           num(px(x) + 4) + "\" y=\"" + num(kTop + 12) + "\" fill=\"" + color + "\">" + html_escape(label) + "</text></g>\n";
}

void Chart::legend(const std::string& name, const std::string& color) { legend_.emplace_back(name, color); }

std::string Chart::svg() const {
  const double x0 = kLeft, x1 = width_ - kRight, y0 = kTop, y1 = height_ - bottom_;
  const int h = height_ + (xlabels_.empty() ? 0 : 90);
  std::string s = "<svg class=\"chart\" id=\"" + id_ + "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                  std::to_string(width_) + "\" height=\"" + std::to_string(h) + "\" viewBox=\"0 0 " +
                  std::to_string(width_) + " " + std::to_string(h) + "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  s += "<defs><clipPath id=\"" + id_ + "-clip\"><rect x=\"" + num(x0) + "\" y=\"" + num(y0) + "\" width=\"" +
       num(x1 - x0) + "\" height=\"" + num(y1 - y0) + "\"/></clipPath></defs>\n";
  // Grid and ticks.
  s += "<g class=\"axes\" stroke=\"#ddd\">\n";
  for (double t : nice_ticks(y_.lo, y_.hi, 6)) {
    const std::string yy = num(py(t));
    s += "<line x1=\"" + num(x0) + "\" x2=\"" + num(x1) + "\" y1=\"" + yy + "\" y2=\"" + yy + "\"/><text x=\"" +
         num(x0 - 6) + "\" y=\"" + num(py(t) + 4) + "\" text-anchor=\"end\" stroke=\"none\" fill=\"#333\">" +
         tick_label(t) + "</text>\n";
  }
  for (double t : nice_ticks(x_.lo, x_.hi, 10)) {
    if (x_.integer && t != std::floor(t)) continue;
    const std::string xx = num(px(t));
    s += "<line x1=\"" + xx + "\" x2=\"" + xx + "\" y1=\"" + num(y0) + "\" y2=\"" + num(y1 + 4) + "\"/><text x=\"" + xx +
         "\" y=\"" + num(y1 + 16) + "\" text-anchor=\"middle\" stroke=\"none\" fill=\"#333\">" + tick_label(t) +
         "</text>\n";
  }
  s += "</g>\n<rect class=\"frame\" x=\"" + num(x0) + "\" y=\"" + num(y0) + "\" width=\"" + num(x1 - x0) +
       "\" height=\"" + num(y1 - y0) + "\" fill=\"none\" stroke=\"#888\"/>\n";
  s += "<text x=\"" + num((x0 + x1) / 2) + "\" y=\"" + num(y1 + 34 + (xlabels_.empty() ? 0 : 86)) + "\" text-anchor=\"middle\" fill=\"#333\">" +
       html_escape(x_.label) + "</text>\n";
  s += "<text transform=\"translate(16," + num((y0 + y1) / 2) + ") rotate(-90)\" text-anchor=\"middle\" fill=\"#333\">" +
       html_escape(y_.label) + "</text>\n";
  for (const auto& [x, label] : xlabels_)
    s += "<text class=\"xlabel\" transform=\"translate(" + num(px(x)) + "," + num(y1 + 44) +
         ") rotate(40)\" fill=\"#555\" font-size=\"10\">" + html_escape(label) + "</text>\n";
  s += "<g class=\"plot\" clip-path=\"url(#" + id_ + "-clip)\">\n" + body_ + "</g>\n";
  double lx = x0 + 8;
  for (const auto& [name, color] : legend_) {
    s += "<rect class=\"key\" x=\"" + num(lx) + "\" y=\"8\" width=\"12\" height=\"10\" fill=\"" + color +
         "\"/><text x=\"" + num(lx + 16) + "\" y=\"17\" fill=\"#333\">" + html_escape(name) + "</text>\n";
    lx += 28 + 6.5 * static_cast<double>(name.size());
  }
  return s + "</svg>\n";
}

}  // namespace memfit::train
