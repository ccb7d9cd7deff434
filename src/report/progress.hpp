// Progress display: a bar redrawn in place on a terminal (step/total, loss,
// images/s (tokens/s for a language model), ETA, RSS against the budget), plain log lines otherwise.
#pragma once

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>

namespace memfit::train {

class Progress {
 public:
  // mode: -1 auto (bar if stderr/stdout is a terminal), 0 lines, 1 bar.
  // unit: what the rate counts, "img" or "tok".
  Progress(std::ostream& out, int mode, int64_t total_steps, size_t budget, std::string unit = "img");
  void step(int64_t step, double loss, double per_second, size_t rss);
  void message(const std::string& line);  // a line that stays (evaluation results)
  void finish();

 private:
  std::ostream& out_;
  bool bar_;
  int64_t total_;
  size_t budget_;
  std::chrono::steady_clock::time_point start_, last_;
  int64_t first_step_ = -1;
  bool drawn_ = false;
  std::string line_;
  std::string unit_;
};

}  // namespace memfit::train
