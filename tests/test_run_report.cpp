// The run report (report.html) and the files it is drawn from:
//  - from a synthetic run directory: every section is there, one rectangle
//    per planned buffer, one polyline point per logged step, the predicted
//    peak's value, names escaped; a step that repeats replaces what it
//    follows (a resume from an earlier checkpoint);
//  - a directory without a run is refused, naming what is missing;
//  - steps.jsonl stays small: under 5,000 lines for 100k steps;
//  - from a real run: `memfit train` writes plan.json, steps.jsonl and
//    report.html whose plot holds every buffer of plan.json and every
//    step; a resume continues steps.jsonl; `memfit report DIR` writes the
//    same page again; `memfit report` of an empty directory exits 1.
// tests/report_browser.sh checks in headless Chromium that the plots draw.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli_util.hpp"
#include "base/json.hpp"
#include "base/bytes.hpp"
#include "report/run_log.hpp"
#include "report/run_report.hpp"

namespace {

using memfit::train::Json;

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + what.size())) ++n;
  return n;
}

// The markup of the element that starts with `open` up to `close`.
std::string element(const std::string& html, const std::string& open, const std::string& close) {
  const size_t a = html.find(open);
  if (a == std::string::npos) return "";
  const size_t b = html.find(close, a);
  return html.substr(a, b == std::string::npos ? std::string::npos : b - a);
}

// The number of x,y pairs in the points of the polyline of class `cls`.
size_t polyline_points(const std::string& html, const std::string& cls) {
  const std::string pl = element(html, "<polyline class=\"" + cls + "\"", ">");
  const size_t a = pl.find("points=\"");
  if (a == std::string::npos) return 0;
  const std::string pts = pl.substr(a + 8, pl.find('"', a + 8) - a - 8);
  return pts.empty() ? 0 : count(pts, " ") + 1;
}

size_t buffer_rects(const std::string& html) { return count(element(html, "<g class=\"buffers\">", "</g>"), "<rect"); }

// A run directory by hand: 10 nodes, 3 buffers, 7 logged steps (steps 4
// and 5 logged twice: the second time after a resume), 2 evaluations.
std::string synthetic_run() {
  const std::string d = memfit::testing::temp_dir("report-synthetic");
  Json nodes = Json::array();
  for (int k = 0; k < 10; ++k)
    nodes.push_back(Json::array({k < 5 ? "conv2d" : "conv2d_bwd_data", "layer" + std::to_string(k / 2),
                                 k < 5 ? "forward" : "backward"}));
  Json bufs = Json::array();
  bufs.push_back({{"value", "conv1:out<x>"}, {"op", "conv2d"}, {"layer", "layer0"}, {"kind", "saved"},
                  {"offset", 0}, {"bytes", 4 << 20}, {"first", 0}, {"last", 8}});
  bufs.push_back({{"value", "relu:out"}, {"op", "relu"}, {"layer", "layer1"}, {"kind", "transient"},
                  {"offset", 4 << 20}, {"bytes", 2 << 20}, {"first", 2}, {"last", 3}});
  bufs.push_back({{"value", "scratch of conv2d_bwd_data"}, {"op", "conv2d_bwd_data"}, {"layer", "layer3"},
                  {"kind", "scratch"}, {"offset", 4 << 20}, {"bytes", 1 << 20}, {"first", 6}, {"last", 6}});
  Json plan = {{"format", "memfit-plan"},
               {"version", 1},
               {"run", {{"model", "convnet"}, {"task", "classification"}, {"samples", "images"}, {"batch", 64},
                        {"accumulate", 1}, {"steps", 7}, {"started", "2026-01-02T03:04:05Z"}}},
               {"report", {{"total_bytes", 123456789}, {"naive_bytes", 200000000}, {"reuse_factor", 1.5},
                           {"budget_bytes", 150000000}, {"budget_source", "--memory"},
                           {"by_class", {{"baseline", 23456789}, {"parameters", 50000000}, {"activations_arena", 50000000},
                                         {"saved_activations", 4 << 20}}}}},
               {"schedule", {{"arena_bytes", 6 << 20}, {"node_count", 10}, {"peak_index", 2},
                             {"peak_live_bytes", 6 << 20}, {"buffer_count", 3}, {"nodes", nodes}, {"buffers", bufs}}}};
  write(d + "/plan.json", memfit::train::json_line(plan) + "\n");
  std::string steps;
  for (int s : {1, 2, 3, 4, 5, 4, 5, 6, 7})
    steps += memfit::train::json_line({{"step", s}, {"epoch", 1}, {"train_loss", 2.0 - 0.1 * s},
                                       {"samples_per_second", 1000.0 + s}, {"rss_bytes", 100000000 + s * 1000},
                                       {"peak_rss_bytes", 110000000}}) + "\n";
  write(d + "/steps.jsonl", steps + "{\"step\": 8, \"train_l");  // a line cut short by a crash
  write(d + "/metrics.jsonl", memfit::train::json_line({{"epoch", 1}, {"step", 3}, {"train_loss", 1.8}, {"test_loss", 1.7},
                                                        {"test_accuracy", 0.5}, {"peak_rss_bytes", 110000000}}) +
                                  "\n" +
                                  memfit::train::json_line({{"epoch", 1}, {"step", 7}, {"train_loss", 1.4}, {"test_loss", 1.5},
                                                            {"test_accuracy", 0.625}, {"peak_rss_bytes", 110000000}}) +
                                  "\n");
  return d;
}

}  // namespace

TEST(RunReport, SyntheticRunHasEveryPlot) {
  const std::string html = memfit::train::render_run_report(synthetic_run());
  for (const char* id : {"id=\"run\"", "id=\"loss\"", "id=\"throughput\"", "id=\"memory\"", "id=\"loss-chart\"",
                         "id=\"score-chart\"", "id=\"throughput-chart\"", "id=\"plan-chart\"", "id=\"arena-peak-chart\"",
                         "id=\"rss-chart\"", "id=\"arena-chart\""})
    EXPECT_NE(html.find(id), std::string::npos) << id;
  EXPECT_EQ(buffer_rects(html), 3u);
  EXPECT_EQ(polyline_points(html, "train-loss"), 7u);  // steps 1..7: the repeated 4 and 5 once, the cut line not
  EXPECT_EQ(polyline_points(html, "throughput"), 7u);
  EXPECT_EQ(polyline_points(html, "rss"), 7u);
  EXPECT_EQ(polyline_points(html, "eval-loss"), 2u);
  EXPECT_EQ(count(html, "<circle class=\"eval-point\""), 2u);
  EXPECT_NE(html.find("predicted peak 117.7 MiB"), std::string::npos);  // 123456789 bytes
  EXPECT_NE(html.find("62.50%"), std::string::npos);                    // the last accuracy
  // Tooltips name buffer, op, layer and size; names are escaped.
  EXPECT_NE(html.find("<title>conv1:out&lt;x&gt;: conv2d (layer0), 4.0 MiB at 0 B, saved, nodes 0-8</title>"),
            std::string::npos);
  EXPECT_EQ(html.find("conv1:out<x>"), std::string::npos);
  EXPECT_NE(html.find("peak 6.0 MiB live"), std::string::npos);
  // Self-contained: nothing fetched, no script needed.
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(count(html, "http"), count(html, "xmlns=\"http://www.w3.org/2000/svg\""));  // only SVG's namespace
  EXPECT_EQ(html.find("<link"), std::string::npos);
  EXPECT_EQ(html.find(" src="), std::string::npos);
}

TEST(RunReport, NoRunIsRefusedNamingWhatIsMissing) {
  const std::string d = memfit::testing::temp_dir("report-empty");
  auto message = [&] {
    try {
      memfit::train::render_run_report(d);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(message().find("no memfit run in " + d + ": it has no plan.json"), std::string::npos) << message();
  write(d + "/metrics.jsonl", "{\"step\": 1}\n");
  EXPECT_NE(message().find("metrics.jsonl alone is not enough"), std::string::npos) << message();
  write(d + "/plan.json", "{\"format\": \"something else\"}");
  EXPECT_NE(message().find("is not a memfit plan file"), std::string::npos) << message();
  write(d + "/plan.json", "{\"format\": \"memfit-plan\", \"version\": 1, \"run\": {}}");
  EXPECT_NE(message().find("has no \"report\" object"), std::string::npos) << message();
}

TEST(RunReport, StepLogStaysSmall) {
  size_t lines = 0;
  for (int64_t s = 1; s <= 100000; ++s) lines += memfit::train::StepLog::due(s, 100000);
  EXPECT_EQ(lines, 2000u + 1800u + 800u);
  EXPECT_TRUE(memfit::train::StepLog::due(12345, 12345));  // the last step, always
  EXPECT_FALSE(memfit::train::StepLog::due(12345, 20000));
}

TEST(RunReport, RealRunWritesItsReport) {
  const std::string d = memfit::testing::temp_dir("report-run");
  const std::string small = " --subset 256 --test-subset 64 --batch 32 --threads 2 --progress lines --eval-every 3";
  auto r = memfit::testing::run_memfit("train --steps 5 --out " + d + small);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("report: " + d + "/report.html"), std::string::npos) << r.out;
  const Json plan = Json::parse(slurp(d + "/plan.json"));
  const Json& sch = plan["schedule"];
  ASSERT_GT(sch["buffers"].size(), 10u);
  EXPECT_EQ(sch["buffers"].size(), sch["buffer_count"].get<size_t>());
  EXPECT_FALSE(sch.contains("truncated"));
  EXPECT_EQ(sch["nodes"].size(), sch["node_count"].get<size_t>());
  for (const Json& b : sch["buffers"]) {
    ASSERT_LE(b["offset"].get<size_t>() + b["bytes"].get<size_t>(), sch["arena_bytes"].get<size_t>()) << b.dump();
    ASSERT_LE(b["first"].get<int64_t>(), b["last"].get<int64_t>()) << b.dump();
  }
  // The plan report's peak is the one `plan --json` prints.
  const size_t total = plan["report"]["total_bytes"].get<size_t>();
  EXPECT_GT(total, 0u);

  std::string html = slurp(d + "/report.html");
  EXPECT_EQ(buffer_rects(html), sch["buffers"].size());
  EXPECT_EQ(polyline_points(html, "train-loss"), 5u);
  EXPECT_EQ(polyline_points(html, "rss"), 5u);
  EXPECT_EQ(polyline_points(html, "eval-loss"), 2u);  // steps 3 and 5 (the end)
  EXPECT_NE(html.find("predicted peak " + memfit::train::format_bytes(total)), std::string::npos);
  EXPECT_NE(html.find("convnet"), std::string::npos);

  // A resume continues steps.jsonl.
  r = memfit::testing::run_memfit("train --steps 8 --resume " + d + small);
  ASSERT_EQ(r.code, 0) << r.out;
  std::istringstream steps(slurp(d + "/steps.jsonl"));
  std::vector<int64_t> logged;
  for (std::string line; std::getline(steps, line);) logged.push_back(Json::parse(line)["step"].get<int64_t>());
  EXPECT_EQ(logged, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  html = slurp(d + "/report.html");
  EXPECT_EQ(polyline_points(html, "train-loss"), 8u);

  // memfit report writes the same page again.
  r = memfit::testing::run_memfit("report " + d + " --out " + d + "/again.html");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(slurp(d + "/again.html"), html);
  const std::string empty = memfit::testing::temp_dir("report-none");
  r = memfit::testing::run_memfit("report " + empty);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("no memfit run in " + empty), std::string::npos) << r.out;
}
