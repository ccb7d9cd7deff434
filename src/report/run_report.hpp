// report.html of a run directory: one self-contained page (inline SVG, no
// scripts, nothing fetched) drawn from the files the run wrote: plan.json
// and steps.jsonl (run_log.hpp) and metrics.jsonl. It shows the run's
// header, the loss and evaluation curves, the throughput, and the memory
// story: the plan by class, the predicted peak against the measured RSS
// over the run, and the activations arena over one step's schedule.
#pragma once

#include <string>

namespace memfit::train {

// The page for the run in `dir`. Throws std::runtime_error ("no memfit run
// in DIR: ...") when dir holds no plan.json, or it is not one.
std::string render_run_report(const std::string& dir);
// Renders it and writes it atomically to `out` (default DIR/report.html);
// returns the path written.
std::string write_run_report(const std::string& dir, const std::string& out = "");

}  // namespace memfit::train
