// The memfit command: `memfit train` (the main job), `memfit plan` (the
// memory plan of a run, without running it), `memfit generate` (text from a
// trained language model), `memfit tokenize` (a text's token ids, for
// users and for checking a tokenizer) and `memfit report` (a run
// directory's report.html, written again).
#include <omp.h>

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "cli/environment.hpp"
#include "cli/run_args.hpp"
#include "data/tokenizer.hpp"
#include "memfit/graph.hpp"
#include "dist/comm.hpp"
#include "models/model.hpp"
#include "models/model_file.hpp"
#include "ops/conv/cpu.hpp"
#include "infer/generate.hpp"
#include "base/json.hpp"
#include "base/bytes.hpp"
#include "base/process.hpp"
#include "report/run_report.hpp"
#include "train/trainer.hpp"

using namespace memfit;

namespace {

const char* kTopUsage =
    "usage: memfit <command> [options]\n"
    "\n"
    "memfit trains deep networks (CNNs, Transformers, LSTMs) inside the memory\n"
    "the machine has: it plans every buffer of a training step before step one,\n"
    "prints the predicted peak, and runs the step in one arena.\n"
    "\n"
    "commands:\n"
    "  train     train a model (default: the ConvNet on Fashion-MNIST)\n"
    "  plan      print the memory plan of a training run without running it\n"
    "  generate  sample text from a trained language model's run directory\n"
    "  tokenize  print the token ids of a text file (or the text of ids)\n"
    "  report    write a run directory's report.html again\n"
    "\n"
    "`memfit <command> --help` lists a command's options.\n";

// A failed rank ends the whole job: the others would wait for it in their
// next collective. One process just returns the code.
int fail_job(int code) {
  dist::Comm& c = dist::Comm::world();
  if (!c.distributed()) return code;
  std::cerr.flush();
  c.abort(code);
}

// Where the ranks other than 0 send their progress: nowhere.
struct NullStream : std::ostream {
  struct Buf : std::streambuf {
    int overflow(int c) override { return c; }
  } buf;
  NullStream() : std::ostream(&buf) {}
};

int usage_error(const std::string& usage, const std::string& msg) {
  std::cerr << "memfit: " << msg << "\n\n" << usage;
  return 2;
}

int usage_error(const cli::Args& a, const std::string& msg) { return usage_error(a.usage(), msg); }

using train::short_num;

// --threads N: the process's OpenMP threads (the engine's parallel regions
// and oneDNN's take omp_get_max_threads()); 0 leaves OpenMP's default.
void use_threads(int64_t n) {
  if (n > 0) omp_set_num_threads(static_cast<int>(n));
}

// What a run's options set for the whole process, before it plans.
void use_machine_options(const train::TrainOptions& o) {
  use_threads(o.threads);
  kernels::cpu::choose_bf16_convs(o.bf16_convs);  // (checked by the parser)
  kernels::cpu::choose_winograd(o.winograd);
}

int cmd_train(const std::vector<std::string>& argv) {
  cli::RunArgs ra = cli::parse_train_args(argv);
  if (ra.error) return usage_error(ra.usage, *ra.error);
  if (ra.help) {
    std::cout << ra.usage;
    return 0;
  }
  train::TrainOptions& o = ra.options;
  o.handle_signals = true;
  // Under mpirun: this process is one rank of the job. Rank 0 speaks for
  // the job (plan, progress, metrics, the result); the others print only
  // their errors.
  const dist::Comm& comm = dist::Comm::world();  // started by main
  o.ranks = comm.size();
  o.rank = comm.rank();
  o.ranks_here = comm.local_size();
  use_machine_options(o);
  if (const auto at = cli::read_environment().inject_oom_at_step) o.inject_oom_at_step = *at;
  try {
    train::validate(o);  // what several ranks refuse
  } catch (const std::invalid_argument& e) {
    return usage_error(ra.usage, e.what());
  }
  NullStream quiet;
  // --json: stdout carries only the JSON object; every human line goes to stderr.
  std::ostream& log = comm.rank() > 0 ? static_cast<std::ostream&>(quiet) : o.json ? std::cerr : std::cout;
  train::TrainResult r = train::run_training(o, log);
  if (comm.rank() > 0) return r.interrupted ? 128 + r.interrupted : 0;
  if (r.interrupted) {
    // The same command, continued from the run directory.
    std::string again = "memfit train --resume " + o.out;
    for (size_t i = 0; i < argv.size(); ++i) {
      const std::string& s = argv[i];
      if (s == "--out" || s == "--resume") {
        ++i;
        continue;
      }
      if (s.rfind("--out=", 0) == 0 || s.rfind("--resume=", 0) == 0) continue;
      again += " " + s;
    }
    log.flush();
    std::cerr << "memfit: interrupted at step " << r.steps << "; checkpoint written to " << o.out
              << "; resume with: " << again << std::endl;
    if (o.json) {
      // A tool driving memfit reads the same facts from stdout.
      const train::Json j = {{"steps", r.steps},
                             {"interrupted", true},
                             {"signal", r.interrupted},
                             {"checkpoint", o.out + "/checkpoint.safetensors"},
                             {"resume", again},
                             {"seconds", r.seconds},
                             {"peak_rss_bytes", r.peak_rss_bytes},
                             {"planned_peak_bytes", r.planned_peak_bytes},
                             {"budget_bytes", r.budget_bytes}};
      std::cout << train::json_line(j) << std::endl;
    }
    return 128 + r.interrupted;
  }
  const bool lm = r.tokens_per_second > 0;
  log << "done: " << r.steps << " steps in " << short_num(r.seconds) << " s, "
      << (lm ? short_num(r.tokens_per_second) + " tokens/s"
             : short_num(r.images_per_second) + (r.sequences ? " sequences/s" : " images/s"));
  if (r.warm_images_per_second > 0)
    log << " (after the first step, " << short_num(r.first_step_seconds) << " s: "
        << short_num(lm ? r.warm_tokens_per_second : r.warm_images_per_second) << ")";
  log << ", final train loss " << short_num(r.final_train_loss);
  if (r.evaluated)
    log << (lm ? ", val loss " + short_num(r.test_loss) + " (perplexity " + short_num(std::exp(r.test_loss)) + ")"
               : ", test accuracy " + short_num(r.test_accuracy));
  if (o.precision == DType::f16)
    log << ", fp16 loss scale " << short_num(r.loss_scale) << " (" << r.skipped_steps << " steps skipped)";
  if (!r.report.device.empty())
    log << ", peak RSS " << train::format_bytes(r.peak_rss_bytes) << " (planned host " << train::format_bytes(r.report.host)
        << "), " << r.report.device << " memory " << train::format_bytes(r.device_used_bytes) << " (planned "
        << train::format_bytes(r.device_planned_bytes) << ")\n";
  else
    log << ", peak RSS " << train::format_bytes(r.peak_rss_bytes) << " (planned "
        << train::format_bytes(r.planned_peak_bytes) << ")\n";
  if (!r.rank_peak_rss_bytes.empty()) {
    log << "ranks: " << r.rank_peak_rss_bytes.size() << ", optimizer state " << (o.shard_optimizer ? "sharded" : "whole")
        << "; peak RSS by rank:";
    for (size_t i = 0; i < r.rank_peak_rss_bytes.size(); ++i)
      log << (i ? "," : "") << " " << train::format_bytes(r.rank_peak_rss_bytes[i]) << " (planned "
          << train::format_bytes(r.rank_planned_peak_bytes[i]) << ")";
    log << "; rank 0 spent " << short_num(r.comm_seconds) << " s of " << short_num(r.seconds)
        << " s exchanging gradients and parameters (" << train::format_bytes(r.comm_bytes_per_step)
        << " sent per rank and step; " << r.comm_buckets_overlapped << " of " << r.comm_buckets
        << " gradient buckets started during backward)\n";
  }
  if (o.json) std::cout << train::result_json(r, o) << "\n";
  return 0;
}

int cmd_plan(const std::vector<std::string>& argv) {
  cli::RunArgs ra = cli::parse_plan_args(argv);
  if (ra.error) return usage_error(ra.usage, *ra.error);
  if (ra.help) {
    std::cout << ra.usage;
    return 0;
  }
  train::TrainOptions& o = ra.options;
  use_machine_options(o);
  train::TrainResult r = train::run_training(o, o.json ? std::cerr : std::cout);
  if (o.json) {
    std::cout << train::report_json(r.report, r.budget) << "\n";
  } else {
    std::cout << "largest buffers:\n";
    for (auto& b : r.report.largest) {
      char buf[256];
      std::snprintf(buf, sizeof buf, "  %12s  %-9s %s (%s)\n", train::format_bytes(b.bytes).c_str(), b.kind.c_str(),
                    b.layer.c_str(), b.name.c_str());
      std::cout << buf;
    }
  }
  return r.report.total > r.budget.bytes ? 1 : 0;
}

int cmd_generate(const std::vector<std::string>& argv) {
  train::GenerateOptions o;
  int64_t seed = static_cast<int64_t>(o.seed);
  bool json = false;
  cli::Args a("generate", "Sample text from a trained language model: its own small plan (one sequence, forward\n"
                          "only) is printed to stderr, the prompt and the sampled text to stdout as they come.");
  a.add("run", &o.run, "DIR", "the run directory of memfit train (weights, tokenizer)");
  a.add("prompt", &o.prompt, "TEXT", "text to continue (default: a new line)");
  a.add("tokens", &o.tokens, "N", "tokens to sample (default 200)");
  a.add("temperature", &o.temperature, "T", "divide the logits by T (default 1; lower is more conservative)");
  a.add("top-k", &o.top_k, "K", "sample among the K most likely tokens only (default 0: all)");
  a.add("seed", &seed, "N", "sampling seed (default 42)");
  a.add("threads", &o.threads, "N", "threads (default: all cores)");
  a.add_flag("json", &json, "print one JSON object with the text instead of streaming it");
  if (auto err = a.parse(argv)) return usage_error(a, *err);
  if (a.help_requested()) {
    std::cout << a.usage();
    return 0;
  }
  if (o.run.empty()) return usage_error(a, "--run DIR is required");
  use_threads(o.threads);
  if (seed < 0) return usage_error(a, "--seed must be non-negative");
  o.seed = static_cast<uint64_t>(seed);
  if (!json) std::cout << o.prompt << std::flush;
  const train::GenerateResult r = train::generate(o, std::cerr, [json](const std::string& t) {
    if (!json) std::cout << t << std::flush;
  });
  if (json) {
    const train::Json j = {{"prompt", o.prompt}, {"text", r.text}, {"tokens", r.tokens}, {"seconds", r.seconds},
                           {"tokens_per_second", r.seconds > 0 ? static_cast<double>(r.tokens) / r.seconds : 0.0},
                           {"planned_peak_bytes", r.report.total}, {"peak_rss_bytes", train::peak_rss()}};
    std::cout << train::json_line(j) << "\n";
  } else {
    std::cout << "\n";
    std::cerr << "memfit: " << r.tokens << " tokens in " << short_num(r.seconds) << " s, peak RSS "
              << train::format_bytes(train::peak_rss()) << " (planned " << train::format_bytes(r.report.total) << ")\n";
  }
  return 0;
}

// The whole of a file, or of stdin for "-".
std::string read_input(const std::string& file) {
  std::ostringstream ss;
  if (file == "-") {
    ss << std::cin.rdbuf();
    return ss.str();
  }
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) throw std::runtime_error("no file at " + file);
  if (std::filesystem::is_directory(file, ec)) throw std::runtime_error(file + " is a directory, not a file");
  std::ifstream in(file, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + file);
  ss << in.rdbuf();
  if (in.bad()) throw std::runtime_error("cannot read " + file);
  return ss.str();
}

bool is_tokenizer_spec(const std::string& s) {
  return s == "char" || s == "gpt2" || s == "wordpiece" || s.rfind("gpt2:", 0) == 0 || s.rfind("wordpiece:", 0) == 0;
}

int cmd_tokenize(const std::vector<std::string>& argv) {
  std::string spec = "char", file, save;
  bool decode = false, count = false;
  cli::Args a("tokenize",
              "Print the token ids of FILE, space-separated on one line: the whole file is one text, as training\n"
              "tokenizes a document (a newline is text like any other). With --decode, FILE holds ids (separated\n"
              "by whitespace) and the text is printed.");
  a.add_positional("FILE", &file, "a UTF-8 text file (ids with --decode); - reads stdin");
  a.add("tokenizer", &spec, "SPEC|FILE",
        "char (FILE's own alphabet; default), gpt2 (GPT-2's BPE; ranks from $MEMFIT_GPT2_RANKS or "
        "deps/gpt2/gpt2.tiktoken), gpt2:PATH (.tiktoken file or folder with vocab.json + merges.txt), "
        "wordpiece:VOCAB.txt (BERT uncased), or a saved tokenizer (a run's tokenizer.json)");
  a.add_flag("decode", &decode, "FILE holds ids: print their text");
  a.add_flag("count", &count, "print the number of tokens and the speed instead of the ids");
  a.add("save", &save, "PATH", "write the tokenizer to PATH (self-contained JSON, as a run directory keeps it)");
  if (auto err = a.parse(argv)) return usage_error(a, *err);
  if (a.help_requested()) {
    std::cout << a.usage();
    return 0;
  }
  const std::string text = read_input(file);
  const std::string source = file == "-" ? "stdin" : file;
  std::unique_ptr<data::Tokenizer> tok;
  try {
    if (is_tokenizer_spec(spec)) {
      if (spec == "char" && decode)
        return usage_error(a, "--decode with the char tokenizer needs the alphabet the ids index: --tokenizer "
                              "RUN/tokenizer.json (a saved tokenizer)");
      const std::string ranks = cli::read_environment().gpt2_ranks;
      tok = data::make_tokenizer(spec, {text}, source, ranks.empty() ? data::built_in_gpt2_ranks() : ranks);
    } else if (std::filesystem::is_regular_file(spec)) {
      tok = data::load_tokenizer(spec);
    } else {
      return usage_error(a, "--tokenizer: '" + spec +
                                "' is neither a tokenizer (char, gpt2, gpt2:PATH, wordpiece:VOCAB.txt) nor a saved "
                                "tokenizer file");
    }
  } catch (const std::invalid_argument& e) {
    return usage_error(a, std::string("--tokenizer: ") + e.what());
  }
  if (!save.empty()) tok->save(save);
  if (decode) {
    std::vector<int32_t> ids;
    std::istringstream in(text);
    std::string w;
    while (in >> w) {
      int32_t id = 0;
      const auto [end, ec] = std::from_chars(w.data(), w.data() + w.size(), id);
      if (ec != std::errc() || end != w.data() + w.size())
        throw std::runtime_error(source + ": '" + w + "' is not a token id (token " + std::to_string(ids.size() + 1) + ")");
      ids.push_back(id);
    }
    std::string out;
    try {
      out = tok->decode(ids);
    } catch (const std::out_of_range& e) {
      throw std::runtime_error(source + ": " + e.what());
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = tok->encode(text, source);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (count) {
    std::printf("%zu tokens, %zu bytes, %.3f s (%.1f MB/s), %s tokenizer, vocabulary %zu\n", ids.size(), text.size(),
                s, s > 0 ? double(text.size()) / s / 1e6 : 0.0, tok->kind().c_str(), tok->vocab_size());
    return 0;
  }
  std::string out;
  out.reserve(ids.size() * 6 + 1);
  char buf[16];
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ' ';
    const auto r = std::to_chars(buf, buf + sizeof buf, ids[i]);
    out.append(buf, r.ptr);
  }
  out += '\n';
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

int cmd_report(const std::vector<std::string>& argv) {
  std::string dir, out;
  cli::Args a("report", "Write the report of a training run again from its run directory's files (plan.json,\n"
                        "steps.jsonl, metrics.jsonl): one self-contained HTML page with the loss, evaluation and\n"
                        "throughput curves, the plan by class, the predicted peak against the measured RSS, and\n"
                        "the activations arena over one step. memfit train writes it at the end of every run.");
  a.add_positional("DIR", &dir, "the run directory (memfit train --out DIR)");
  a.add("out", &out, "FILE", "write the page here (default DIR/report.html)");
  if (auto err = a.parse(argv)) return usage_error(a, *err);
  if (a.help_requested()) {
    std::cout << a.usage();
    return 0;
  }
  std::cout << train::write_run_report(dir, out) << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    (args.empty() ? std::cerr : std::cout) << kTopUsage;
    return args.empty() ? 2 : 0;
  }
  const std::string cmd = args[0];
  args.erase(args.begin());
  // A rank's error names the rank: several processes share the terminal.
  std::string who = "memfit";
  struct Finalize {
    ~Finalize() { dist::Comm::world().finalize(); }
  };
  std::optional<Finalize> finalize;
  try {
    if (cmd == "train") {
      const dist::Comm& c = cli::start_job(cli::read_environment());  // MPI_Init under mpirun, before any thread starts
      if (c.distributed()) who = "memfit (" + c.describe() + ")";
      finalize.emplace();
    }
    if (cmd == "train") return cmd_train(args);
    if (cmd == "plan") return cmd_plan(args);
    if (cmd == "generate") return cmd_generate(args);
    if (cmd == "tokenize") return cmd_tokenize(args);
    if (cmd == "report") return cmd_report(args);
  } catch (const train::BudgetError& e) {
    std::cerr << who << ": over budget: " << e.what() << "\n";
    return fail_job(3);
  } catch (const models::ModelFileError& e) {
    std::cerr << who << ": bad model file: " << e.what() << "\n";
    return fail_job(1);
  } catch (const GraphError& e) {
    std::cerr << who << ": bad model: " << e.what() << "\n";
    return fail_job(1);
  } catch (const std::exception& e) {
    std::cerr << who << ": " << e.what() << "\n";
    return fail_job(1);
  }
  std::cerr << "memfit: unknown command '" << cmd << "'\n\n" << kTopUsage;
  return 2;
}
