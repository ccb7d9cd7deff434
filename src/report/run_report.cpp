#include "report/run_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "base/json.hpp"
#include "base/bytes.hpp"
#include "report/run_log.hpp"
#include "report/svg_chart.hpp"

namespace fs = std::filesystem;

namespace memfit::train {
namespace {

// Larger files than this are not a run's (plan.json of 20,000 buffers is
// a few MB; steps.jsonl of a million steps about 2 MB).
constexpr uintmax_t kMaxFileBytes = uintmax_t(256) << 20;
constexpr double kMiB = 1024.0 * 1024.0;

std::string read_text(const fs::path& p) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(p, ec);
  if (ec) throw std::runtime_error("cannot read " + p.string() + ": " + ec.message());
  if (size > kMaxFileBytes)
    throw std::runtime_error(p.string() + " is " + format_bytes(size) + ", more than a run's file can be (" +
                             format_bytes(kMaxFileBytes) + ")");
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (!in) throw std::runtime_error("cannot read " + p.string());
  return ss.str();
}

// The objects of a JSON-lines file in step order. A line that does not
// parse (cut short by a crash) is skipped; a line whose step is not after
// the previous one's starts the run over from there (a resume from an
// earlier checkpoint, or a fresh run appending to an old file): the lines
// it replaces are dropped.
std::vector<Json> read_jsonl(const fs::path& p) {
  std::vector<Json> rows;
  std::error_code ec;
  if (!fs::exists(p, ec)) return rows;
  std::istringstream in(read_text(p));
  for (std::string line; std::getline(in, line);) {
    Json j = Json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number()) continue;
    const double step = j["step"].get<double>();
    while (!rows.empty() && rows.back()["step"].get<double>() >= step) rows.pop_back();
    rows.push_back(std::move(j));
  }
  return rows;
}

double num(const Json& j, const char* key, double otherwise = NAN) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : otherwise;
}

std::string str(const Json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

std::string fixed(double v, int digits) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string bytes_text(double b) { return std::isfinite(b) && b >= 0 ? format_bytes(static_cast<size_t>(b)) : "?"; }

struct Run {
  std::string dir;
  Json plan;
  std::vector<Json> steps, evals;
  bool lm = false;
};

std::vector<Point> series(const std::vector<Json>& rows, const char* key, double scale = 1.0) {
  std::vector<Point> pts;
  for (const Json& r : rows) {
    const double v = num(r, key);
    if (std::isfinite(v)) pts.emplace_back(num(r, "step"), v * scale);
  }
  return pts;
}

// The steps the charts span: the first and last logged or evaluated step.
Axis step_axis(const Run& r) {
  double lo = INFINITY, hi = -INFINITY;
  for (const auto* rows : {&r.steps, &r.evals})
    for (const Json& j : *rows) lo = std::min(lo, num(j, "step")), hi = std::max(hi, num(j, "step"));
  if (!std::isfinite(lo)) lo = 0, hi = 1;
  hi = std::max(hi, lo + 1);
  return {std::min(lo, 0.0), hi + 0.02 * hi, "optimizer step", true};  // room for the last step's marker
}

std::string empty_note(const std::string& text) { return "<p class=\"empty\">" + html_escape(text) + "</p>\n"; }

void kv(std::string& s, const std::string& k, const std::string& v) {
  if (!v.empty()) s += "<tr><th>" + html_escape(k) + "</th><td>" + html_escape(v) + "</td></tr>\n";
}

std::string header_section(const Run& r) {
  const Json& run = r.plan["run"];
  const Json& rep = r.plan["report"];
  std::string s = "<section id=\"run\">\n<table class=\"kv\">\n";
  kv(s, "model", str(run, "model"));
  kv(s, "data", str(run, "data") + (run.contains("train_samples") ? " (" + str(run, "train_samples") + " training " +
                                                                      str(run, "samples") + ")"
                                                                : ""));
  kv(s, "task", str(run, "task") == "language_model" ? "language model" : "classification");
  std::string batch = str(run, "batch");
  if (num(run, "accumulate", 1) > 1) batch += " (micro-batch " + str(run, "micro_batch") + " x " + str(run, "accumulate") + ")";
  kv(s, "batch", batch);
  kv(s, "precision", str(run, "precision") + " activations, " + str(run, "saved_activations") + " saved for backward");
  kv(s, "optimizer", str(run, "optimizer") + ", " + str(run, "optimizer_state") + " state, lr " + str(run, "lr") + ", " +
                         str(run, "schedule") + " schedule");
  kv(s, "policies", "recompute " + str(run, "recompute") + (run.value("update_in_backward", false) ? ", update in backward" : "") +
                        (rep.value("fitted", false) ? " (chosen by the fit)" : ""));
  if (rep.contains("cpu")) {
    const Json& cpu = rep["cpu"];
    kv(s, "cpu", str(cpu, "model") + "; oneDNN " + str(cpu, "onednn") + " " + str(cpu, "onednn_isa") + "; memfit loops " +
                     str(cpu, "vector_isa"));
  }
  const double ranks = num(run, "ranks", 1);
  kv(s, "backend", str(run, "backend") + (num(run, "threads", 0) > 0 ? ", " + str(run, "threads") + " threads" : "") +
                       (ranks > 1 ? ", " + fixed(ranks, 0) + " ranks (data parallel, optimizer state " +
                                        (run.value("optimizer_sharded", false) ? "sharded" : "whole") + ")"
                                  : ""));
  kv(s, "started", str(run, "started") + (str(run, "resumed_from").empty() ? "" : " (resumed from " + str(run, "resumed_from") + ")"));
  const double done = r.steps.empty() ? (r.evals.empty() ? 0 : num(r.evals.back(), "step")) : num(r.steps.back(), "step");
  kv(s, "steps", fixed(done, 0) + (num(run, "steps", 0) > 0 ? " of " + str(run, "steps")
                                                              : " (" + str(run, "epochs") +
                                                                    (str(run, "epochs") == "1" ? " epoch" : " epochs") +
                                                                    " asked for)"));
  if (!r.evals.empty()) {
    const Json& e = r.evals.back();
    kv(s, "last evaluation",
       "step " + str(e, "step") + ": " + (r.lm ? "val loss " : "test loss ") + fixed(num(e, "test_loss"), 4) +
           (r.lm ? ", perplexity " + fixed(num(e, "test_perplexity"), 2)
                 : ", accuracy " + fixed(100 * num(e, "test_accuracy"), 2) + "%"));
  }
  kv(s, "predicted peak", bytes_text(num(rep, "total_bytes")) + " (budget " + bytes_text(num(rep, "budget_bytes")) +
                              ", " + str(rep, "budget_source") + ")");
  return s + "</table>\n</section>\n";
}

std::string loss_section(const Run& r) {
  std::string s = "<section id=\"loss\">\n<h2>Loss</h2>\n";
  const std::vector<Point> train = series(r.steps, "train_loss"), eval = series(r.evals, "test_loss");
  const std::string eval_name = r.lm ? "val loss" : "test loss";
  if (train.empty() && eval.empty()) return s + empty_note("No step was recorded (steps.jsonl and metrics.jsonl hold none).") + "</section>\n";
  auto [lo, hi] = y_range({train, eval}, false);
  Chart c("loss-chart", step_axis(r), {lo, hi, "loss"});
  c.line("train-loss", "#4e79a7", train, "training loss, per step");
  c.legend("training loss (per step)", "#4e79a7");
  if (!eval.empty()) {
    c.line("eval-loss", "#e15759", eval, eval_name + ", per evaluation");
    std::vector<std::string> titles;
    for (const Point& p : eval) titles.push_back(eval_name + " " + fixed(p.second, 4) + " at step " + fixed(p.first, 0));
    c.markers("eval-point", "#e15759", eval, titles);
    c.legend(eval_name + " (per evaluation)", "#e15759");
  }
  s += c.svg();
  if (r.evals.empty()) return s + empty_note("No evaluation was recorded (--eval-every 0, or the run stopped before one).") + "</section>\n";
  const std::vector<Point> score = r.lm ? series(r.evals, "test_perplexity") : series(r.evals, "test_accuracy", 100.0);
  const std::string name = r.lm ? "val perplexity" : "test accuracy";
  auto [slo, shi] = y_range({score}, false);
  Chart sc("score-chart", step_axis(r), {slo, shi, r.lm ? "perplexity" : "accuracy (%)"}, 960, 260);
  sc.line("score", "#59a14f", score, name + ", per evaluation");
  std::vector<std::string> titles;
  for (const Point& p : score) titles.push_back(name + " " + fixed(p.second, 2) + (r.lm ? "" : "%") + " at step " + fixed(p.first, 0));
  sc.markers("score-point", "#59a14f", score, titles);
  sc.legend(name, "#59a14f");
  return s + sc.svg() + "</section>\n";
}

std::string throughput_section(const Run& r) {
  std::string s = "<section id=\"throughput\">\n<h2>Throughput</h2>\n";
  const char* key = r.lm ? "tokens_per_second" : "samples_per_second";
  const std::string unit = r.lm ? "tokens/s" : str(r.plan["run"], "samples") + "/s";
  const std::vector<Point> pts = series(r.steps, key);
  if (pts.empty()) return s + empty_note("No step was recorded (steps.jsonl holds none).") + "</section>\n";
  auto [lo, hi] = y_range({pts}, true);
  Chart c("throughput-chart", step_axis(r), {lo, hi, unit}, 960, 260);
  c.line("throughput", "#f28e2b", pts, unit + " over the steps since the line before");
  c.legend(unit, "#f28e2b");
  double mean = 0;
  for (const Point& p : pts) mean += p.second;
  mean /= static_cast<double>(pts.size());
  return s + c.svg() + "<p>Mean over the logged steps: " + fixed(mean, 1) + " " + html_escape(unit) + ".</p>\n</section>\n";
}

// One horizontal bar of parts (name, bytes, color), with a table under it.
std::string stacked_bar(const std::string& id, const std::vector<std::tuple<std::string, double, std::string>>& parts,
                        double total) {
  const double w = 900, x0 = 10;
  std::string s = "<svg class=\"chart bar\" id=\"" + id + "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"960\" height=\"46\" "
                  "viewBox=\"0 0 960 46\" font-family=\"sans-serif\" font-size=\"11\">\n";
  double x = x0;
  for (const auto& [name, bytes, color] : parts) {
    if (!(bytes > 0)) continue;
    const double pw = w * bytes / total;
    s += "<rect class=\"part\" x=\"" + fixed(x, 1) + "\" y=\"4\" width=\"" + fixed(pw, 1) + "\" height=\"26\" fill=\"" +
         color + "\" stroke=\"#fff\"><title>" + html_escape(name + ": " + bytes_text(bytes)) + "</title></rect>\n";
    if (pw > 12 + 6.5 * static_cast<double>(name.size())) s += "<text x=\"" + fixed(x + 4, 1) + "\" y=\"21\" fill=\"#fff\">" + html_escape(name) + "</text>\n";
    x += pw;
  }
  s += "<text x=\"" + fixed(x0, 1) + "\" y=\"43\" fill=\"#333\">0</text><text x=\"" + fixed(x0 + w, 1) +
       "\" y=\"43\" text-anchor=\"end\" fill=\"#333\">" + html_escape(bytes_text(total)) + "</text>\n</svg>\n";
  s += "<table class=\"parts\">\n<tr><th></th><th>class</th><th>bytes</th><th>share</th></tr>\n";
  for (const auto& [name, bytes, color] : parts)
    s += "<tr><td><span class=\"swatch\" style=\"background:" + color + "\"></span></td><td>" + html_escape(name) +
         "</td><td class=\"n\">" + html_escape(bytes_text(bytes)) + "</td><td class=\"n\">" +
         fixed(total > 0 ? 100 * bytes / total : 0, 1) + "%</td></tr>\n";
  return s + "</table>\n";
}

std::string plan_section(const Run& r) {
  const Json& rep = r.plan["report"];
  const Json& c = rep["by_class"];
  std::string s = "<h3>The plan by class</h3>\n<p>Every byte of the predicted peak (" +
                  html_escape(bytes_text(num(rep, "total_bytes"))) + "), as planned before step one; without planning it would be " +
                  html_escape(bytes_text(num(rep, "naive_bytes"))) + " (reuse factor " + fixed(num(rep, "reuse_factor"), 2) +
                  "x on activations).</p>\n";
  s += stacked_bar("plan-chart",
                   {{"baseline", num(c, "baseline", 0), "#9c755f"},
                    {"parameters", num(c, "parameters", 0), "#4e79a7"},
                    {"gradients", num(c, "gradients", 0), "#59a14f"},
                    {"optimizer state", num(c, "optimizer_state", 0), "#edc948"},
                    {"activations arena", num(c, "activations_arena", 0), "#e15759"},
                    {"library heap", num(c, "library_heap", 0), "#b07aa1"},
                    {"batch inputs", num(c, "inputs", 0), "#76b7b2"},
                    {"data pipeline", num(c, "data_pipeline", 0), "#ff9da7"},
                    {"evaluation", num(c, "evaluation", 0), "#bab0ac"}},
                   num(rep, "total_bytes"));
  s += "<h3>The activations arena at its peak</h3>\n";
  s += stacked_bar("arena-peak-chart",
                   {{"saved for backward", num(c, "saved_activations", 0), "#4e79a7"},
                    {"transient", num(c, "transient_activations", 0), "#f28e2b"},
                    {"gradients", num(c, "arena_gradients", 0), "#59a14f"},
                    {"kernel scratch", num(c, "kernel_scratch", 0), "#bab0ac"},
                    {"fragmentation", num(c, "fragmentation", 0), "#e8e8e8"}},
                   num(c, "activations_arena", 0));
  return s;
}

std::string rss_section(const Run& r) {
  const Json& rep = r.plan["report"];
  const double predicted = num(rep, "total_bytes"), budget = num(rep, "budget_bytes");
  std::string s = "<h3>Predicted peak against measured RSS</h3>\n";
  const std::vector<Json>& rows = r.steps.empty() ? r.evals : r.steps;
  const std::vector<Point> rss = series(r.steps, "rss_bytes", 1 / kMiB), peak = series(rows, "peak_rss_bytes", 1 / kMiB);
  if (peak.empty()) return s + empty_note("No RSS was recorded (steps.jsonl and metrics.jsonl hold none).");
  std::vector<Point> lines{{0, predicted / kMiB}};
  const double measured = peak.back().second;
  const bool show_budget = budget / kMiB <= 2 * std::max(measured, predicted / kMiB);
  if (show_budget) lines.emplace_back(0, budget / kMiB);
  // Not from zero: the gap between plan and measurement is the point (the
  // axis and the labels give the scale).
  auto [lo, hi] = y_range({rss, peak, lines}, false);
  Chart c("rss-chart", step_axis(r), {lo, hi, "MiB"});
  c.hline("predicted-peak", predicted / kMiB, "#e15759", "predicted peak " + bytes_text(predicted));
  if (show_budget) c.hline("budget", budget / kMiB, "#999", "budget " + bytes_text(budget));
  if (!rss.empty()) {
    c.line("rss", "#4e79a7", rss, "resident set size (VmRSS) after the step");
    c.legend("RSS (VmRSS)", "#4e79a7");
  }
  c.line("peak-rss", "#59a14f", peak, "peak RSS so far (VmHWM)", true);
  c.legend("peak RSS (VmHWM)", "#59a14f");
  c.legend("predicted peak", "#e15759");
  s += c.svg();
  const double m = measured * kMiB;
  s += "<p>Measured peak RSS " + html_escape(bytes_text(m)) + ": " + fixed(100 * m / predicted, 1) +
       "% of the predicted " + html_escape(bytes_text(predicted)) + (show_budget ? "" : "; budget " + html_escape(bytes_text(budget))) +
       ".</p>\n";
  return s;
}

// A buffer's color: what it holds (saved for backward, gradient, scratch)
// or, for other activations, the phase that wrote it.
std::string buffer_color(const std::string& kind, const std::string& phase) {
  if (kind == "saved") return "#4e79a7";
  if (kind == "gradient") return "#59a14f";
  if (kind == "scratch") return "#9d9d9d";
  return phase == "backward" ? "#f28e2b" : phase == "update" ? "#b07aa1" : "#a0cbe8";
}

std::string arena_section(const Run& r) {
  const Json& sch = r.plan["schedule"];
  const Json& nodes = sch["nodes"];
  const Json& bufs = sch["buffers"];
  const double arena = num(sch, "arena_bytes", 0), n = num(sch, "node_count", 0);
  const size_t peak_at = static_cast<size_t>(num(sch, "peak_index", 0));
  std::string s = "<h3>The activations arena over one step</h3>\n";
  if (!bufs.is_array() || bufs.empty() || !(arena > 0))
    return s + empty_note("The plan has no buffers in its activations arena.");
  auto node_text = [&](size_t k) {
    if (k >= nodes.size() || !nodes[k].is_array() || nodes[k].size() < 3) return std::string("node ") + std::to_string(k);
    return "node " + std::to_string(k) + " " + nodes[k][0].get<std::string>() + " (" + nodes[k][1].get<std::string>() + ")";
  };
  s += "<p>Each rectangle is a planned buffer: from the node that writes it to its last use (x, the schedule of one "
       "step) at its offset in the arena (y). Hover for its value, op and size. The arena is " +
       html_escape(bytes_text(arena)) + "; at most " + html_escape(bytes_text(num(sch, "peak_live_bytes", 0))) +
       " is live at once, at " + html_escape(node_text(peak_at)) + ".";
  if (sch.contains("truncated")) s += " Only " + html_escape(str(sch, "truncated")) + ".";
  s += "</p>\n";
  Chart c("arena-chart", {0, std::max(n, 1.0), "schedule index (node); labels: the layer that starts there", true},
          {0, arena / kMiB, "offset (MiB)"}, 960, 460);
  std::string g = "<g class=\"buffers\">\n";
  for (const Json& b : bufs) {
    const double first = num(b, "first", 0), last = num(b, "last", 0), off = num(b, "offset", 0), bytes = num(b, "bytes", 0);
    const size_t k = static_cast<size_t>(first);
    const std::string phase = k < nodes.size() && nodes[k].is_array() && nodes[k].size() >= 3 ? nodes[k][2].get<std::string>() : "";
    const double x = c.px(first), w = std::max(c.px(last + 1) - x, 0.5);
    const double y = c.py((off + bytes) / kMiB), h = std::max(c.py(off / kMiB) - y, 0.5);
    g += "<rect x=\"" + fixed(x, 1) + "\" y=\"" + fixed(y, 1) + "\" width=\"" + fixed(w, 1) + "\" height=\"" + fixed(h, 1) +
         "\" fill=\"" + buffer_color(str(b, "kind"), phase) + "\"><title>" +
         html_escape(str(b, "value") + ": " + str(b, "op") + (str(b, "layer").empty() ? "" : " (" + str(b, "layer") + ")") +
                     ", " + bytes_text(bytes) + " at " + bytes_text(off) + ", " + str(b, "kind") + ", nodes " +
                     fixed(first, 0) + "-" + fixed(last, 0)) +
         "</title></rect>\n";
  }
  c.add(g + "</g>\n");
  c.vline("peak-marker", static_cast<double>(peak_at) + 0.5, "#e15759", "peak " + bytes_text(num(sch, "peak_live_bytes", 0)) + " live");
  // The layers where they start, at most about 28 labels.
  std::vector<std::pair<double, std::string>> labels;
  const double spacing = std::max(n / 28.0, 1.0);
  std::string prev;
  double last_at = -INFINITY;
  for (size_t k = 0; k < nodes.size(); ++k) {
    if (!nodes[k].is_array() || nodes[k].size() < 3) continue;
    const std::string layer = nodes[k][1].get<std::string>();
    if (layer == prev) continue;
    prev = layer;
    if (static_cast<double>(k) - last_at < spacing) continue;
    last_at = static_cast<double>(k);
    labels.emplace_back(static_cast<double>(k), layer.size() > 22 ? layer.substr(0, 21) + "..." : layer);
  }
  c.x_labels(labels);
  c.legend("saved for backward", buffer_color("saved", ""));
  c.legend("forward transient", buffer_color("transient", "forward"));
  c.legend("backward transient", buffer_color("transient", "backward"));
  c.legend("gradient", buffer_color("gradient", ""));
  c.legend("kernel scratch", buffer_color("scratch", ""));
  return s + c.svg();
}

const char* kStyle =
    "body{font-family:sans-serif;font-size:13px;margin:24px auto;max-width:1000px;color:#222}"
    "h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}h3{font-size:15px}"
    "table{border-collapse:collapse;font-size:13px}th,td{padding:2px 10px 2px 0;text-align:left;vertical-align:top}"
    "table.kv th{color:#555;font-weight:normal}td.n{text-align:right}"
    ".swatch{display:inline-block;width:12px;height:12px}p.empty{color:#777;font-style:italic}"
    "svg.chart{display:block;margin:8px 0}footer{margin-top:32px;color:#777;font-size:12px}";

Run load_run(const std::string& dir) {
  Run r;
  r.dir = dir;
  const fs::path d(dir), plan = d / "plan.json";
  std::error_code ec;
  if (!fs::exists(d, ec)) throw std::runtime_error("no memfit run in " + dir + ": there is no such directory");
  if (!fs::is_directory(d, ec)) throw std::runtime_error("no memfit run in " + dir + ": it is not a directory");
  if (!fs::exists(plan, ec))
    throw std::runtime_error("no memfit run in " + dir + ": it has no plan.json" +
                             (fs::exists(d / "metrics.jsonl", ec) ? " (metrics.jsonl alone is not enough; "
                                                                    "train again with this memfit to get one)"
                                                                  : " (memfit train --out DIR writes one)"));
  r.plan = Json::parse(read_text(plan), nullptr, false);
  if (!r.plan.is_object() || r.plan.value("format", "") != "memfit-plan")
    throw std::runtime_error("no memfit run in " + dir + ": " + plan.string() + " is not a memfit plan file");
  if (r.plan.value("version", 0) != 1)
    throw std::runtime_error(plan.string() + " is plan file version " + r.plan["version"].dump() +
                             "; this memfit reads version 1");
  for (const char* k : {"run", "report", "schedule"})
    if (!r.plan.contains(k) || !r.plan[k].is_object())
      throw std::runtime_error(plan.string() + " has no \"" + k + "\" object: it is not a complete plan file");
  r.lm = str(r.plan["run"], "task") == "language_model";
  r.steps = read_jsonl(d / "steps.jsonl");
  r.evals = read_jsonl(d / "metrics.jsonl");
  return r;
}

}  // namespace

std::string render_run_report(const std::string& dir) {
  const Run r = load_run(dir);
  const std::string model = str(r.plan["run"], "model");
  std::string s = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>memfit run: " +
                  html_escape(model) + "</title>\n<style>" + kStyle + "</style>\n</head>\n<body>\n";
  s += "<h1>memfit run: " + html_escape(model) + "</h1>\n";
  s += header_section(r) + loss_section(r) + throughput_section(r);
  s += "<section id=\"memory\">\n<h2>Memory</h2>\n" + plan_section(r) + rss_section(r) + arena_section(r) + "</section>\n";
  s += "<footer>Written by memfit from " + html_escape(dir) +
       ": plan.json, steps.jsonl, metrics.jsonl (memfit report DIR writes it again).</footer>\n</body>\n</html>\n";
  return s;
}

std::string write_run_report(const std::string& dir, const std::string& out) {
  const std::string path = out.empty() ? (fs::path(dir) / "report.html").string() : out;
  write_file_atomically(path, render_run_report(dir));
  return path;
}

}  // namespace memfit::train
