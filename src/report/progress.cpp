#include "report/progress.hpp"

#include <unistd.h>

#include <cstdio>

#include "base/bytes.hpp"

namespace memfit::train {

namespace {
std::string clock_str(double s) {
  if (!(s >= 0) || s > 1e7) return "--:--";
  char b[32];
  const long t = static_cast<long>(s + 0.5);
  if (t >= 3600) std::snprintf(b, sizeof b, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else std::snprintf(b, sizeof b, "%ld:%02ld", t / 60, t % 60);
  return b;
}
}  // namespace

Progress::Progress(std::ostream& out, int mode, int64_t total, size_t budget, std::string unit)
    : out_(out), total_(total), budget_(budget), unit_(std::move(unit)) {
  bar_ = mode == 1 || (mode < 0 && ::isatty(STDOUT_FILENO));
  start_ = last_ = std::chrono::steady_clock::now();
  line_.reserve(256);
}

void Progress::step(int64_t step, double loss, double ips, size_t rss) {
  auto now = std::chrono::steady_clock::now();
  if (first_step_ < 0) {
    first_step_ = step - 1;
    start_ = now;
  }
  const double since = std::chrono::duration<double>(now - last_).count();
  const bool last = step >= total_;
  // Redraw at most 10 times a second on a terminal; a log line every 10 s or
  // every 5% of the run otherwise.
  if (bar_ ? (since < 0.1 && !last) : (since < 10.0 && step % std::max<int64_t>(1, total_ / 20) != 0 && !last)) return;
  last_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double rate = elapsed > 0 ? static_cast<double>(step - first_step_) / elapsed : 0.0;
  const double eta = rate > 0 ? static_cast<double>(total_ - step) / rate : -1.0;
  char buf[256];
  if (bar_) {
    const int width = 24;
    const int filled = total_ > 0 ? static_cast<int>(width * step / total_) : 0;
    std::string b(static_cast<size_t>(filled), '=');
    if (filled < width) b += '>' + std::string(static_cast<size_t>(width - filled - 1), ' ');
    std::snprintf(buf, sizeof buf, "\r[%s] %lld/%lld loss %.4f %.0f %s/s ETA %s RSS %s / %s ", b.c_str(),
                  static_cast<long long>(step), static_cast<long long>(total_), loss, ips, unit_.c_str(), clock_str(eta).c_str(),
                  format_bytes(rss).c_str(), format_bytes(budget_).c_str());
    out_ << buf << std::flush;
    drawn_ = true;
  } else {
    std::snprintf(buf, sizeof buf, "step %lld/%lld loss %.4f %.0f %s/s ETA %s RSS %s / %s\n",
                  static_cast<long long>(step), static_cast<long long>(total_), loss, ips, unit_.c_str(), clock_str(eta).c_str(),
                  format_bytes(rss).c_str(), format_bytes(budget_).c_str());
    out_ << buf << std::flush;
  }
}

void Progress::message(const std::string& line) {
  if (drawn_) out_ << "\n";
  drawn_ = false;
  out_ << line << "\n" << std::flush;
}

void Progress::finish() {
  if (drawn_) out_ << "\n" << std::flush;
  drawn_ = false;
}

}  // namespace memfit::train
