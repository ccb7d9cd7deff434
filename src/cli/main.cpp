// The memfit command: `memfit train` (the main job), `memfit plan` (the
// memory plan of a run, without running it), `memfit generate` (text from a
// trained language model), `memfit tokenize` (a text's token ids, for
// users and for checking a tokenizer) and `memfit report` (a run
// directory's report.html, written again).
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
#include "data/dataset.hpp"
#include "data/tokenizer.hpp"
#include "memfit/graph.hpp"
#include "models/model.hpp"
#include "dist/comm.hpp"
#include "models/model_file.hpp"
#include "models/zoo.hpp"
#include "train/generate.hpp"
#include "train/json.hpp"
#include "train/memory.hpp"
#include "train/run_data.hpp"
#include "train/run_report.hpp"
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

// --subset / --test-subset: checked when parsed, so that a bad value is a
// usage error (exit 2) naming the flag.
std::function<std::string(const std::string&)> subset_flag(const std::string& name, std::string* out) {
  return [name, out](const std::string& v) {
    try {
      data::parse_subset(v);
    } catch (const std::invalid_argument& e) {
      return "--" + name + ": " + e.what();
    }
    *out = v;
    return std::string();
  };
}

void add_common(cli::Args& a, train::TrainOptions& o, std::string& memory) {
  std::string models;
  for (auto& m : models::zoo_names()) models += (models.empty() ? "" : "|") + m;
  a.add("model", &o.model, models + "|FILE", "zoo model or model file (default convnet)");
  a.add("data", &o.data, "PATH",
        "IDX directory or image folder (default Fashion-MNIST); for a language model a text file or a directory of "
        "text files (default the English fortunes); for a text classifier .jsonl/.csv or a folder per class");
  a.add("data-in", &o.data_in, "memory|disk|auto",
      "IDX data: keep it in memory, stream it from a disk cache, or auto (default): in memory unless streaming "
      "makes the plan fit or lets the fit pick a faster plan");
  a.add("cache-dir", &o.cache_dir, "DIR",
        "where streamed IDX data is decompressed to and a language model's tokens are cached (default "
        "$MEMFIT_CACHE_DIR, $XDG_CACHE_HOME/memfit or ~/.cache/memfit)");
  a.add("batch", &o.batch, "N", "batch size (default 64)");
  a.add("optimizer", &o.optimizer.kind, "sgd|adam|adamw|adafactor",
        "optimizer (default sgd with momentum 0.9); adafactor: factored second moment, no first moment");
  a.add(
      "optimizer-state",
      [&o](const std::string& v) {
        o.optimizer.state = v;
        o.optimizer_state_set = true;  // the fit keeps it
        return std::string();
      },
      "fp32|bf16|8bit",
      "how adam/adamw moments and sgd momentum are stored: fp32 (default; 8 B/param for adam), bf16 (stochastic "
      "rounding; 4 B/param) or 8bit (blockwise-quantised, one scale per 2048; about 2 B/param)");
  a.add("memory", &memory, "BYTES", "memory budget, e.g. 512MiB, 1GiB (default: container limit or available)");
  a.add("threads", &o.threads, "N", "threads (default: all cores)");
  a.add_flag("no-plan", &o.plan.no_plan, "debug: every value its own buffer (no reuse, no in-place)");
  a.add(
      "guard-bytes", [&o](const std::string& v) {
        char* end = nullptr;
        const long long n = std::strtoll(v.c_str(), &end, 10);
        if (v.empty() || *end || n < 0 || n > (1 << 20)) return "--guard-bytes expects 0..1048576, got '" + v + "'";
        o.plan.guard_bytes = static_cast<size_t>(n);
        return std::string();
      },
      "N", "debug: N guard bytes after every planned buffer, checked after every step");
  a.add("subset", subset_flag("subset", &o.subset), "N|F", "train on N samples or a fraction F (0.1, 10%)");
  a.add("tokenizer", &o.tokenizer, "char|gpt2|wordpiece:VOCAB.txt",
        "text models: the tokenizer of --data's text (default char: its own alphabet; gpt2: GPT-2's BPE; wordpiece: "
        "BERT uncased from a vocab.txt); saved in the run directory");
  a.add("block-size", &o.block_size, "T", "language models: tokens per training window (default: the model's block size)");
  a.add("val-fraction", &o.val_fraction, "F",
        "language models: share of the text's documents held out for evaluation (default 0.1)");
  a.add("task", &o.task, "lm|classify",
        "text models: what to train, checked against --model (default: what the model is; a BERT is a classifier)");
  a.add("max-len", &o.max_len, "T",
        "text classifiers: tokens per example, longer ones truncated (default 128, or the model's limit)");
  a.add("image-size", &o.image_size, "PX", "image folders: resize to PX x PX (default 32)");
  a.add("channels", &o.channels, "1|3", "image folders: channels (default 3)");
  a.add_flag("json", &o.json, "print one JSON object (for plan: the plan; for train: a summary as the last line)");
}

// Options that change what a step keeps in memory; train and plan take them.
void add_memory_policy(cli::Args& a, train::TrainOptions& o) {
  a.add(
      "freeze", [&o](const std::string& v) {
        o.freeze.push_back(v);
        return std::string();
      },
      "PATTERN", "do not train matching parameters (glob or module prefix, e.g. layer1); repeatable");
  a.add_flag("bias-only", &o.bias_only, "train biases only (all weights frozen)");
  a.add("recompute", &o.recompute, "none|auto|cheap|segments",
        "recompute activations in backward instead of keeping them (default auto: GELU and layer-norm outputs, "
        "from inputs backward keeps anyway)");
  a.add("accumulate", &o.accumulate, "K", "gradient accumulation: K micro-batches of batch/K per step");
  a.add_flag("update-in-backward", &o.update_in_backward,
             "update each parameter inside backward as soon as its gradient is complete, so gradients live only "
             "until their update (exact; not with --accumulate, --clip-grad-norm or --precision fp16)");
  a.add(
      "master-weights", [&o](const std::string& v) {
        if (v == "fp32") o.master_weights = DType::f32;
        else if (v == "bf16") o.master_weights = DType::bf16;
        else return "--master-weights expects fp32 or bf16, got '" + v + "'";
        o.master_weights_set = true;  // the fit keeps it
        return std::string();
      },
      "fp32|bf16",
      "storage of the weight matrices (rank >= 2): fp32 (default) or bf16, updated from fp32 gradients with "
      "stochastic rounding (2 B/param instead of 4; an approximation: biases and norms stay fp32; sgd, adam, "
      "adamw)");
  a.add(
      "precision", [&o](const std::string& v) {
        if (v == "fp32") o.precision = DType::f32;
        else if (v == "bf16") o.precision = DType::bf16;
        else if (v == "fp16") o.precision = DType::f16;
        else return "--precision expects fp32, bf16 or fp16, got '" + v + "'";
        o.precision_set = true;
        return std::string();
      },
      "fp32|bf16|fp16",
      "activation storage and compute type (weights, gradients and optimizer state stay fp32; fp16 adds dynamic "
      "loss scaling); default fp32, or the fit's choice when over budget");
  a.add(
      "saved-activations", [&o](const std::string& v) {
        if (v == "fp32") o.saved_activations = DType::f32;
        else if (v == "bf16") o.saved_activations = DType::bf16;
        else return "--saved-activations expects fp32 or bf16, got '" + v + "'";
        return std::string();
      },
      "fp32|bf16", "fp32 compute, but keep what backward reads as bf16 in between (lossy; halves saved activations)");
  a.add(
      "loss-scale", [&o](const std::string& v) {
        char* end = nullptr;
        const double x = std::strtod(v.c_str(), &end);
        int e = 0;
        if (end == v.c_str() || *end || !(x >= 1 && x <= 16777216) || std::frexp(x, &e) != 0.5)
          return "--loss-scale expects a power of two between 1 and 16777216, got '" + v + "'";
        o.loss_scale = x;
        return std::string();
      },
      "S", "fp16: initial dynamic loss scale (default 65536; halves on overflow, doubles after 2000 good steps)");
  a.add_flag(
      "no-fit", [&o] { o.auto_fit = false; },
      "over budget: fail instead of searching micro-batch and recomputation for a plan that fits");
  a.add(
      "shard-optimizer", [&o](const std::string& v) {
        if (v == "on") o.shard_optimizer = true;
        else if (v == "off") o.shard_optimizer = false;
        else return "--shard-optimizer expects on or off, got '" + v + "'";
        return std::string();
      },
      "on|off",
      "on several ranks: each keeps the optimizer state of 1/N of the parameters and sends the others their "
      "update (ZeRO stage 1; default on); off: every rank keeps all of it");
  a.add_flag("allow-approx", &o.allow_approx,
             "the fit may also change the numerics: bf16 or 8bit optimizer state (unless --optimizer-state is given) "
             "and bf16 master weights (unless --master-weights is given); without it a refusal names what would fit "
             "with them");
}

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

int usage_error(const cli::Args& a, const std::string& msg) {
  std::cerr << "memfit: " << msg << "\n\n" << a.usage();
  return 2;
}

// The options' own checks (train::validate) as a usage error's message.
std::optional<std::string> invalid(const train::TrainOptions& o) {
  try {
    train::validate(o);
  } catch (const std::invalid_argument& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

bool parse_memory(const std::string& s, train::TrainOptions& o, std::string& err) {
  if (s.empty()) return true;
  auto b = train::parse_bytes(s);
  if (!b || *b == 0) {
    err = "--memory expects a size like 512MiB, 1GiB or a number of bytes, got '" + s + "'";
    return false;
  }
  o.memory = *b;
  return true;
}

using train::short_num;

int cmd_train(const std::vector<std::string>& argv) {
  train::TrainOptions o;
  std::string memory;
  bool nesterov = false;
  cli::Args a("train", "Train a model. With no options: the ConvNet on Fashion-MNIST for 5 epochs.");
  add_common(a, o, memory);
  add_memory_policy(a, o);
  a.add("init-from", &o.init_from, "FILE|DIR",
        "start from these weights (safetensors; PyTorch names), or a pretrained model's folder (its "
        "model.safetensors, and a BERT's vocab.txt as the tokenizer)");
  a.add(
      "reinit", [&o](const std::string& v) {
        o.reinit.push_back(v);
        return std::string();
      },
      "PATTERN", "with --init-from: keep fresh weights for matching layers (a new head); repeatable");
  a.add("epochs", &o.epochs, "N", "epochs (default 5)");
  a.add("steps", &o.steps, "N", "stop after N optimizer steps (overrides --epochs)");
  a.add("profile", &o.profile, "N",
        "after 2 warm-up steps, time N steps kernel by kernel, print the time per op kind and per layer, and stop");
  a.add("lr", &o.lr, "LR",
        "learning rate (default 0.05; 1e-3 for adam and adamw; adafactor without it: its relative step size)");
  a.add("momentum", &o.optimizer.momentum, "M", "SGD momentum (default 0.9)");
  a.add_flag("nesterov", &nesterov, "Nesterov momentum");
  a.add("weight-decay", &o.optimizer.weight_decay, "WD",
        "weight decay (default 5e-4 for sgd, 1e-2 for adamw, 0 for adam and adafactor; decoupled for adamw and "
        "adafactor)");
  a.add("schedule", &o.schedule, "constant|step|cosine", "learning-rate schedule (default cosine)");
  a.add("warmup", &o.warmup, "STEPS", "linear warm-up steps (default 0)");
  a.add("clip-grad-norm", &o.optimizer.clip_grad_norm, "N", "clip gradients to this global L2 norm");
  a.add("label-smoothing", &o.label_smoothing, "S", "label smoothing (default 0)");
  int64_t seed = static_cast<int64_t>(o.seed);
  a.add("seed", &seed, "N", "seed for init, shuffling, dropout (default 42)");
  a.add("out", &o.out, "DIR", "run directory: checkpoints, metrics.jsonl (default runs/latest, or the --resume DIR)");
  a.add("resume", &o.resume, "DIR", "continue the run saved in DIR exactly");
  a.add("eval-every", &o.eval_every, "STEPS", "evaluate every N steps and at the end; 0: never (default: every epoch)");
  a.add("checkpoint-every", &o.checkpoint_every, "STEPS", "checkpoint every N steps too (default: every epoch)");
  a.add("inject-oom-at-step", &o.inject_oom_at_step, "STEP",
        "testing: act as if memory ran out before STEP (0: at allocation)");
  a.add("test-subset", subset_flag("test-subset", &o.test_subset), "N|F", "evaluate on N samples or a fraction of the test split");
  a.add_flag("augment", &o.augment, "random crop (pad 4) and horizontal flip");
  a.add(
      "progress", [&o](const std::string& v) {
        if (v == "auto") o.progress = -1;
        else if (v == "bar") o.progress = 1;
        else if (v == "lines") o.progress = 0;
        else return "--progress expects auto, bar or lines, got '" + v + "'";
        return std::string();
      },
      "auto|bar|lines", "progress display (default: bar on a terminal)");
  if (auto err = a.parse(argv)) return usage_error(a, *err);
  if (a.help_requested()) {
    std::cout << a.usage();
    return 0;
  }
  std::string err;
  if (!parse_memory(memory, o, err)) return usage_error(a, err);
  if (seed < 0) return usage_error(a, "--seed must be non-negative");
  for (const char* f : {"data", "subset", "test-subset", "image-size", "channels", "eval-every", "tokenizer",
                        "block-size", "val-fraction", "max-len"})
    if (a.given(f)) o.given.push_back(f);
  if (auto why = invalid(o)) return usage_error(a, *why);
  if (o.profile > 0) o.steps = o.profile + 2;
  if (!o.resume.empty() && !a.given("out")) o.out = o.resume;
  o.optimizer.nesterov = nesterov;
  o.seed = static_cast<uint64_t>(seed);
  if (o.optimizer.kind != "sgd" && !a.given("lr")) o.lr = 1e-3;
  if (o.optimizer.kind == "adamw" && !a.given("weight-decay")) o.optimizer.weight_decay = 1e-2;
  if ((o.optimizer.kind == "adam" || o.optimizer.kind == "adafactor") && !a.given("weight-decay"))
    o.optimizer.weight_decay = 0.0;
  // Adafactor's step size is relative (from the step count and each
  // parameter's scale) unless --lr gives it.
  o.optimizer.relative_step = !a.given("lr");
  try {
    const models::Model m = models::resolve(o.model);
    try {
      train::check_task(o, m);
    } catch (const std::invalid_argument& e) {
      return usage_error(a, e.what());
    }
  } catch (const GraphError& e) {
    return usage_error(a, e.what());
  }
  o.handle_signals = true;
  // Under mpirun: this process is one rank of the job. Rank 0 speaks for
  // the job (plan, progress, metrics, the result); the others print only
  // their errors.
  const dist::Comm& comm = dist::Comm::world();
  o.ranks = comm.size();
  o.rank = comm.rank();
  if (auto why = invalid(o)) return usage_error(a, *why);
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
             : short_num(r.images_per_second) + (r.sequences ? " sequences/s" : " images/s"))
      << ", final train loss " << short_num(r.final_train_loss);
  if (r.evaluated)
    log << (lm ? ", val loss " + short_num(r.test_loss) + " (perplexity " + short_num(std::exp(r.test_loss)) + ")"
               : ", test accuracy " + short_num(r.test_accuracy));
  if (o.precision == DType::f16)
    log << ", fp16 loss scale " << short_num(r.loss_scale) << " (" << r.skipped_steps << " steps skipped)";
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
        << " sent per rank and step)\n";
  }
  if (o.json) {
    train::Json j = {{"steps", r.steps}, {"final_train_loss", r.final_train_loss}};
    if (r.evaluated) {
      j["test_loss"] = r.test_loss;
      j["test_accuracy"] = r.test_accuracy;
    }
    j["images_per_second"] = r.images_per_second;
    if (lm) j["tokens_per_second"] = r.tokens_per_second;
    j["seconds"] = r.seconds;
    j["peak_rss_bytes"] = r.peak_rss_bytes;
    j["planned_peak_bytes"] = r.planned_peak_bytes;
    j["budget_bytes"] = r.budget_bytes;
    if (!r.rank_peak_rss_bytes.empty()) {
      j["ranks"] = r.rank_peak_rss_bytes.size();
      j["optimizer_sharded"] = o.shard_optimizer;
      j["rank_peak_rss_bytes"] = r.rank_peak_rss_bytes;
      j["rank_planned_peak_bytes"] = r.rank_planned_peak_bytes;
      j["comm_seconds"] = r.comm_seconds;
      j["comm_bytes_per_step"] = r.comm_bytes_per_step;
    }
    if (o.precision == DType::f16) {
      j["loss_scale"] = r.loss_scale;
      j["skipped_steps"] = r.skipped_steps;
    }
    std::cout << train::json_line(j) << "\n";
  }
  return 0;
}

int cmd_plan(const std::vector<std::string>& argv) {
  train::TrainOptions o;
  std::string memory;
  cli::Args a("plan", "Print the memory plan of a training run: the predicted peak by class, the largest\n"
                      "buffers, and the total without planning. Nothing is trained.");
  add_common(a, o, memory);
  add_memory_policy(a, o);
  int64_t ranks = 1, rank = 0;
  a.add("ranks", &ranks, "N", "plan one rank of a data-parallel job of N ranks (mpirun -np N): its share of the "
                              "optimizer state when sharded (default 1)");
  a.add("rank", &rank, "R", "with --ranks: the rank to plan (default 0)");
  if (auto err = a.parse(argv)) return usage_error(a, *err);
  if (a.help_requested()) {
    std::cout << a.usage();
    return 0;
  }
  std::string err;
  if (!parse_memory(memory, o, err)) return usage_error(a, err);
  if (ranks < 1 || ranks > 65536 || rank < 0 || rank >= ranks)
    return usage_error(a, "--ranks expects 1 to 65536 and --rank 0 to ranks-1, got rank " + std::to_string(rank) +
                              " of " + std::to_string(ranks));
  o.ranks = static_cast<int>(ranks);
  o.rank = static_cast<int>(rank);
  if (auto why = invalid(o)) return usage_error(a, *why);
  if (a.given("data")) o.given.push_back("data");
  try {
    const models::Model m = models::resolve(o.model);
    try {
      train::check_task(o, m);
    } catch (const std::invalid_argument& e) {
      return usage_error(a, e.what());
    }
  } catch (const GraphError& e) {
    return usage_error(a, e.what());
  }
  o.plan_only = true;
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
      tok = data::make_tokenizer(spec, {text}, source);
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
      const dist::Comm& c = dist::Comm::world();  // MPI_Init under mpirun, before any thread starts
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
