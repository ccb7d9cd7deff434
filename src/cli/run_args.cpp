#include "cli/run_args.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <stdexcept>

#include "cli/args.hpp"
#include "cli/environment.hpp"
#include "data/dataset.hpp"
#include "memfit/graph.hpp"
#include "models/model.hpp"
#include "models/onnx/model.hpp"
#include "models/zoo.hpp"
#include "runtime/device.hpp"
#include "base/bytes.hpp"
#include "train/run_data.hpp"

namespace memfit::cli {
namespace {

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

// An on|off flag into *out.
std::function<std::string(const std::string&)> on_off(const std::string& name, bool* out) {
  return [name, out](const std::string& v) {
    if (v != "on" && v != "off") return "--" + name + " expects on or off, got '" + v + "'";
    *out = v == "on";
    return std::string();
  };
}

// A storage type flag: fp32 or bf16 (and fp16 where allowed) into *out;
// *given (if any) records that the user chose it.
std::function<std::string(const std::string&)> dtype_flag(const std::string& name, bool fp16, DType* out, bool* given) {
  return [name, fp16, out, given](const std::string& v) {
    if (v == "fp32") *out = DType::f32;
    else if (v == "bf16") *out = DType::bf16;
    else if (v == "fp16" && fp16) *out = DType::f16;
    else return "--" + name + " expects fp32" + (fp16 ? ", bf16 or fp16" : " or bf16") + ", got '" + v + "'";
    if (given) *given = true;
    return std::string();
  };
}

void add_common(Args& a, train::TrainOptions& o, std::string& memory) {
  std::string models;
  for (auto& m : models::zoo_names()) models += (models.empty() ? "" : "|") + m;
  a.add("model", &o.model, models + "|FILE", "zoo model or model file (default convnet)");
  a.add("data", &o.data, "PATH",
        "IDX directory, CIFAR-10/100 folder (python or binary, or torchvision's root) or image folder (default Fashion-MNIST); for a language model a text file or a directory of "
        "text files (default the English fortunes); for a text classifier .jsonl/.csv or a folder per class");
  a.add("data-in", &o.data_in, "memory|disk|auto",
      "IDX data: keep it in memory, stream it from a disk cache, or auto (default): in memory unless streaming "
      "makes the plan fit or lets the fit pick a faster plan");
  a.add("cache-dir", &o.cache_dir, "DIR",
        "where streamed IDX data is decompressed to, a language model's tokens and the machine's measured speed "
        "are cached (default $MEMFIT_CACHE_DIR, $XDG_CACHE_HOME/memfit or ~/.cache/memfit)");
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
  a.add(
      "device",
      [&o](const std::string& v) {
        const std::string name = v == "cuda:0" ? "cuda" : v;
        const std::vector<std::string> known = device_names();
        if (std::find(known.begin(), known.end(), name) == known.end()) {
          std::string list;
          for (const std::string& n : known) list += (list.empty() ? "" : ", ") + n;
          return "--device takes one of " + list + ", got '" + v + "'";
        }
        o.device = name;
        return std::string();
      },
      "cpu|cuda",
      "where the step runs (default cpu); cuda: the GPU, its arenas in GPU memory planned against the GPU's free "
      "memory or --device-memory (f32 so far; the CNNs and their optimizers); reference and reference64: the scalar "
      "reference kernels (f32, double); reference-offset and cpu-offset: the reference or cpu kernels over arenas "
      "the host may not address (the test devices of the device interface)");
  a.add(
      "device-memory",
      [&o](const std::string& v) {
        auto b = train::parse_bytes(v);
        if (!b || *b == 0) return "--device-memory expects a size like 6GiB, got '" + v + "'";
        o.device_memory = *b;
        return std::string();
      },
      "BYTES", "with --device cuda: the GPU memory budget (default: the GPU's free memory at start, less a margin)");
  a.add("threads", &o.threads, "N", "threads (default: all cores)");
  a.add(
      "bf16-convs",
      [&o](const std::string& v) {
        if (v != "auto" && v != "native" && v != "f32") return "--bf16-convs takes auto, native or f32, not '" + v + "'";
        o.bf16_convs = v;
        return std::string();
      },
      "HOW", "bf16 convolutions and linear layers as oneDNN's bf16 primitives (native) or f32 ones between "
             "conversions (f32); default auto: whichever this CPU runs faster, measured at start");
  a.add(
      "winograd",
      [&o](const std::string& v) {
        if (v != "auto" && v != "off" && v != "2" && v != "4") return "--winograd takes auto, off, 2 or 4, not '" + v + "'";
        o.winograd = v;
        return std::string();
      },
      "HOW", "f32 3x3 stride-1 convolutions (forward and backward-data) by Winograd F(2x2,3x3) or F(4x4,3x3): 2 or 4 "
             "wherever it applies, off: never (oneDNN's direct convolutions); default auto: per shape and direction, "
             "F(2,3) forward and F(4,3) backward-data where their tiles fit the image and there are enough of "
             "them (a rule from measurements on AVX2 and AVX-512)");
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
  a.add("csv-columns", &o.csv_columns, "ROLES",
        "text classifiers: a CSV without a header, its columns' roles in order, each label, text (several are "
        "joined with a space) or -: label,text,text for AG News's train.csv/test.csv");
  a.add("image-size", &o.image_size, "PX", "image folders: resize to PX x PX (default 32)");
  a.add("channels", &o.channels, "1|3", "image folders: channels (default 3)");
  a.add("cifar100-labels", &o.cifar100_labels, "fine|coarse",
        "CIFAR-100: train on its 100 classes (fine, default) or its 20 superclasses (coarse)");
  a.add_flag("json", &o.json, "print one JSON object (for plan: the plan; for train: a summary as the last line)");
}

// Options that change what a step keeps in memory; train and plan take them.
void add_memory_policy(Args& a, train::TrainOptions& o) {
  a.add(
      "freeze", [&o](const std::string& v) {
        o.freeze.push_back(v);
        return std::string();
      },
      "PATTERN", "do not train matching parameters (glob or module prefix, e.g. layer1; '!classifier': all but "
                 "those); repeatable");
  a.add(
      "dropout", [&o](const std::string& v) {
        std::string why = models::dropout_spec_error(v);
        if (why.empty()) o.dropout.push_back(v);
        else why = "--dropout: " + why;
        return why;
      },
      "[after:]LAYER=P|P", "an ONNX file exported for inference (no dropout in it): dropout of probability P on "
                           "the input of LAYER (its parameters' name, e.g. classifier.1; a glob names several), or on "
                           "its output with after:; repeatable. A zoo GPT: P alone replaces its dropout (0: none)");
  a.add_flag("bias-only", &o.bias_only, "train biases only (all weights frozen)");
  a.add("recompute", &o.recompute, "none|auto|cheap|segments",
        "recompute activations in backward instead of keeping them (default auto: GELU and layer-norm outputs, "
        "from inputs backward keeps anyway)");
  a.add("accumulate", &o.accumulate, "K", "gradient accumulation: K micro-batches of batch/K per step");
  a.add_flag("update-in-backward", &o.update_in_backward,
             "update each parameter inside backward as soon as its gradient is complete, so gradients live only "
             "until their update (exact; not with --accumulate, --clip-grad-norm or --precision fp16)");
  a.add("offload", &o.offload, "params,frozen,state|all|none",
        "keep these in a file on disk instead of memory, each read in where the step uses it and written back "
        "after its update (exact: the same arithmetic; checksummed; best with --update-in-backward, which updates "
        "each parameter as soon as its gradient is made)");
  a.add("offload-ahead", &o.offload_ahead, "N",
        "with --offload: move the copies on an I/O thread N places of use ahead of the step, overlapping the disk "
        "with the compute for a larger window of copies in memory; 0 reads and writes each where it is used "
        "(default: the fit's choice, 1 when the plan fits)");
  a.add("offload-dir", &o.offload_dir, "DIR",
        "the directory of --offload's file (default: the run directory, --out); a disk, not a RAM-backed tmpfs");
  a.add(
      "master-weights", dtype_flag("master-weights", false, &o.master_weights, &o.master_weights_set),  // the fit keeps it
      "fp32|bf16",
      "storage of the weight matrices (rank >= 2): fp32 (default) or bf16, updated from fp32 gradients with "
      "stochastic rounding (2 B/param instead of 4; an approximation: biases and norms stay fp32; sgd, adam, "
      "adamw)");
  a.add("accumulated-grads", dtype_flag("accumulated-grads", false, &o.accumulated_grads, &o.accumulated_grads_set),
        "fp32|bf16",
        "with --accumulate: the type gradients are summed in between micro-batches: fp32 (default) or bf16, each "
        "sum rounded stochastically (2 B/param instead of 4; an approximation; sgd, adam, adamw; the fit may choose "
        "it under --allow-approx)");
  a.add(
      "precision", dtype_flag("precision", true, &o.precision, &o.precision_set),
      "fp32|bf16|fp16",
      "activation storage and compute type (weights, gradients and optimizer state stay fp32; fp16 adds dynamic "
      "loss scaling); default fp32, or the fit's choice when over budget");
  a.add(
      "saved-activations", dtype_flag("saved-activations", false, &o.saved_activations, nullptr),
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
      "shard-optimizer", on_off("shard-optimizer", &o.shard_optimizer),
      "on|off",
      "on several ranks: each keeps the optimizer state of 1/N of the parameters and sends the others their "
      "update (ZeRO stage 1; default on); off: every rank keeps all of it");
  a.add(
      "shard-gradients", on_off("shard-gradients", &o.shard_gradients),
      "on|off",
      "on several ranks, with --shard-optimizer on: each gradient goes to its owner during backward and the others "
      "free it there, so each rank keeps only its shard of the gradients (ZeRO stage 2; default off; not with "
      "--accumulate)");
  a.add_flag("allow-approx", &o.allow_approx,
             "the fit may also change the numerics: bf16 or 8bit optimizer state (unless --optimizer-state is given) "
             "bf16 master weights (unless --master-weights is given) and bf16 accumulated gradients (unless "
             "--accumulated-grads is given); without it a refusal names what would fit "
             "with them");
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

// The model's name, and --task against it (a usage error, as a typo in a
// zoo name is).
std::optional<std::string> check_model(const train::TrainOptions& o) {
  try {
    const std::shared_ptr<const models::Model> m = o.resolved_model();
    try {
      train::check_task(o, *m);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
  } catch (const GraphError& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

// argv into a's flags, then --memory (read into `memory` by the parse):
// false when the command stops here, with r saying why (an error, or help).
bool parse_flags(Args& a, const std::vector<std::string>& argv, const std::string& memory, RunArgs& r) {
  r.usage = a.usage();
  if (auto err = a.parse(argv)) {
    r.error = *err;
    return false;
  }
  if (a.help_requested()) {
    r.help = true;
    return false;
  }
  std::string err;
  if (!parse_memory(memory, r.options, err)) {
    r.error = err;
    return false;
  }
  apply_environment(read_environment(), r.options);
  return true;
}

}  // namespace

RunArgs parse_train_args(const std::vector<std::string>& argv) {
  RunArgs r;
  train::TrainOptions& o = r.options;
  std::string memory;
  bool nesterov = false;
  Args a("train", "Train a model. With no options: the ConvNet on Fashion-MNIST for 5 epochs.");
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
  a.add("test-subset", subset_flag("test-subset", &o.test_subset), "N|F", "evaluate on N samples or a fraction of the test split");
  a.add(
      "overlap-reduce", on_off("overlap-reduce", &o.overlap_reduce),
      "on|off",
      "on several ranks: reduce the gradients bucket by bucket while backward runs (default on); off: all after "
      "backward");
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
  if (!parse_flags(a, argv, memory, r)) return r;
  if (seed < 0) {
    r.error = "--seed must be non-negative";
    return r;
  }
  for (const char* f : {"data", "subset", "test-subset", "image-size", "channels", "eval-every", "tokenizer",
                        "block-size", "val-fraction", "max-len", "csv-columns", "cifar100-labels"})
    if (a.given(f)) o.given.push_back(f);
  if ((r.error = invalid(o))) return r;
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
  r.error = check_model(o);
  return r;
}

RunArgs parse_plan_args(const std::vector<std::string>& argv) {
  RunArgs r;
  train::TrainOptions& o = r.options;
  std::string memory;
  Args a("plan", "Print the memory plan of a training run: the predicted peak by class, the largest\n"
                 "buffers, and the total without planning. Nothing is trained.");
  add_common(a, o, memory);
  add_memory_policy(a, o);
  int64_t ranks = 1, rank = 0;
  a.add("ranks", &ranks, "N", "plan one rank of a data-parallel job of N ranks (mpirun -np N): its share of the "
                              "optimizer state when sharded (default 1)");
  a.add("rank", &rank, "R", "with --ranks: the rank to plan (default 0)");
  if (!parse_flags(a, argv, memory, r)) return r;
  if (ranks < 1 || ranks > 65536 || rank < 0 || rank >= ranks) {
    r.error = "--ranks expects 1 to 65536 and --rank 0 to ranks-1, got rank " + std::to_string(rank) + " of " +
              std::to_string(ranks);
    return r;
  }
  o.ranks = static_cast<int>(ranks);
  o.rank = static_cast<int>(rank);
  if ((r.error = invalid(o))) return r;
  if (a.given("data")) o.given.push_back("data");
  r.error = check_model(o);
  o.plan_only = true;
  return r;
}

}  // namespace memfit::cli
