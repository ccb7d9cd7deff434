#include "train/trainer.hpp"

#include <malloc.h>

#include <omp.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>

#include "data/dataset.hpp"
#include "kernels/cpu/engine.hpp"
#include "kernels/cpu/parallel.hpp"
#include "data/idx.hpp"
#include "data/idx_stream.hpp"
#include "data/image_folder.hpp"
#include "data/loader.hpp"
#include "kernels/kernel.hpp"
#include "train/checkpoint.hpp"
#include "train/fit.hpp"
#include "train/json.hpp"
#include "train/memory.hpp"
#include "train/progress.hpp"
#include "train/report.hpp"
#include "train/step_graph.hpp"

namespace fs = std::filesystem;

namespace memfit::train {
namespace {

using Clock = std::chrono::steady_clock;

// The first SIGINT/SIGTERM is recorded and acted on at the next step
// boundary; a second one ends the process at once.
volatile std::sig_atomic_t g_signal = 0;

extern "C" void on_stop_signal(int sig) {
  if (g_signal) ::_exit(128 + sig);
  g_signal = sig;
}

struct SignalScope {
  struct sigaction old_int {}, old_term {};
  bool on = false;
  explicit SignalScope(bool enable) : on(enable) {
    if (!on) return;
    g_signal = 0;
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, &old_int);
    ::sigaction(SIGTERM, &sa, &old_term);
  }
  ~SignalScope() {
    if (!on) return;
    ::sigaction(SIGINT, &old_int, nullptr);
    ::sigaction(SIGTERM, &old_term, nullptr);
  }
};

// True if every element of every buffer is finite (fp16 overflow check).
bool all_finite(const std::vector<std::pair<const float*, size_t>>& bufs) {
  int bad = 0;
  for (const auto& [p, n] : bufs) {
    const int64_t m = static_cast<int64_t>(n);
    const float* q = p;
    bad = kernels::cpu::parallel_sum(m, [&] {
      int part = 0;
#pragma omp for schedule(static) nowait
      for (int64_t i = 0; i < m; ++i) part |= !std::isfinite(q[i]);
      return static_cast<double>(part);
    }) != 0.0;
    if (bad) return false;
  }
  return true;
}

struct Datasets {
  std::unique_ptr<data::Dataset> train_base, test_base;
  std::unique_ptr<data::Subset> train_sub, test_sub;
  const data::Dataset* train = nullptr;
  const data::Dataset* test = nullptr;
  bool idx = false;                                  // IDX files: --data-in applies
  data::StreamedIdxDataset* train_stream = nullptr;  // IDX streamed from disk (else in memory)
  data::StreamedIdxDataset* test_stream = nullptr;
};

bool has_idx(const std::string& dir) {
  for (const char* f : {"train-images-idx3-ubyte.gz", "train-images-idx3-ubyte"})
    if (fs::exists(fs::path(dir) / f)) return true;
  return false;
}

// stream: IDX files open as StreamedIdxDatasets, reading only their labels
// and headers until prepare_streams(); otherwise they are decoded into memory.
Datasets open_data(const TrainOptions& o, bool stream) {
  Datasets d;
  if (!fs::exists(o.data))
    throw std::runtime_error("dataset not found at " + o.data +
                             (o.data == data::kFashionMnistDir ? ": install the Debian package dataset-fashion-mnist (make deps does) or pass --data DIR"
                                                                : ": pass --data with an IDX directory or an image folder"));
  if (has_idx(o.data)) {
    d.idx = true;
    if (stream) {
      data::StreamOptions so;
      so.cache_dir = o.cache_dir;
      so.prepare = false;
      auto tr = std::make_unique<data::StreamedIdxDataset>(data::StreamedIdxDataset::open(o.data, "train", {}, so));
      auto te = std::make_unique<data::StreamedIdxDataset>(data::StreamedIdxDataset::open(o.data, "t10k", {}, so));
      d.train_stream = tr.get();
      d.test_stream = te.get();
      d.train_base = std::move(tr);
      d.test_base = std::move(te);
    } else {
      d.train_base = std::make_unique<data::IdxDataset>(data::IdxDataset::open(o.data, "train"));
      d.test_base = std::make_unique<data::IdxDataset>(data::IdxDataset::open(o.data, "t10k"));
    }
  } else if (fs::is_directory(fs::path(o.data) / "train")) {
    data::ImageFolderOptions io;
    io.channels = o.channels ? static_cast<int>(o.channels) : 3;
    io.height = io.width = o.image_size ? static_cast<int>(o.image_size) : 32;
    d.train_base = std::make_unique<data::ImageFolderDataset>((fs::path(o.data) / "train").string(), io);
    fs::path test = fs::path(o.data) / "test";
    if (!fs::is_directory(test)) test = fs::path(o.data) / "val";
    if (fs::is_directory(test)) d.test_base = std::make_unique<data::ImageFolderDataset>(test.string(), io);
  } else {
    throw std::runtime_error("no dataset recognised at " + o.data +
                             ": expected MNIST-style IDX files (train-images-idx3-ubyte[.gz], ...) or an image folder "
                             "with train/<class>/ (and test/<class>/) subfolders");
  }
  d.train = d.train_base.get();
  d.test = d.test_base.get();
  if (!o.subset.empty()) {
    d.train_sub = std::make_unique<data::Subset>(data::Subset::from_spec(*d.train, data::parse_subset(o.subset), o.seed));
    d.train = d.train_sub.get();
  }
  if (d.test && !o.test_subset.empty()) {
    d.test_sub = std::make_unique<data::Subset>(data::Subset::from_spec(*d.test, data::parse_subset(o.test_subset), o.seed));
    d.test = d.test_sub.get();
  }
  return d;
}

// Builds or checks the disk caches of streamed datasets and opens them.
void prepare_streams(Datasets& d, std::ostream& log) {
  for (data::StreamedIdxDataset* s : {d.train_stream, d.test_stream}) {
    if (!s) continue;
    const data::CacheStatus st = s->prepare();
    if (st.action == data::CacheStatus::Built)
      log << "memfit: decompressed " << s->images_path() << " into the dataset cache " << st.path << "\n";
    else if (st.action == data::CacheStatus::Rebuilt)
      log << "memfit: the dataset cache " << st.path << " was unusable (" << st.reason << "); rebuilt it from "
          << s->images_path() << "\n";
  }
}

// Where the data lives, for the plan's "data pipeline" row and its JSON.
void describe_data(const Datasets& d, MemoryInputs& mi) {
  mi.data_cache.clear();
  if (d.train_stream) {
    mi.data_in = "disk";
    mi.data_cache = d.train_stream->cache_path();
    mi.data_note = mi.data_cache == d.train_stream->images_path()
                       ? "dataset streamed from disk (raw IDX file: " + mi.data_cache + ")"
                       : "dataset streamed from disk (cache: " + mi.data_cache + ")";
  } else if (d.idx) {
    mi.data_in = "memory";
    mi.data_note = "dataset in memory + loader buffers";
  } else {
    mi.data_in.clear();
    mi.data_note = "images decoded from disk + loader buffers";
  }
}

size_t data_bytes_of(const data::LoaderMemory& train, const data::LoaderMemory& test) {
  return train.total() + test.pipeline() + test.dataset_resident + test.dataset_transient;
}

void check_run_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw std::runtime_error("cannot create the run directory " + dir + ": " + (ec ? ec.message() : "not a directory"));
  const std::string probe = dir + "/.memfit-write-test";
  FILE* f = std::fopen(probe.c_str(), "w");
  if (!f || std::fputs("ok", f) < 0 || std::fclose(f) != 0)
    throw std::runtime_error("the run directory " + dir + " is not writable");
  std::remove(probe.c_str());
}

struct EvalResult {
  double loss = 0.0, accuracy = 0.0;
  size_t count = 0;
};

EvalResult evaluate(Executor& ex, const StepGraph& sg, data::Loader& loader, int64_t classes) {
  EvalResult r;
  loader.seek({0, 0});
  kernels::StepContext ctx;
  double loss_sum = 0.0;
  size_t correct = 0;
  float* x = ex.ptr<float>(sg.x);
  int32_t* y = ex.ptr<int32_t>(sg.labels);
  while (size_t n = g_signal ? 0 : loader.next(x, y)) {
    ex.run(ctx);
    const float* logits = ex.ptr<float>(sg.logits);
    for (size_t i = 0; i < n; ++i) {
      const float* l = logits + i * static_cast<size_t>(classes);
      int best = 0;
      double mx = l[0];
      for (int c = 1; c < classes; ++c)
        if (l[c] > mx) {
          mx = l[c];
          best = c;
        }
      double se = 0.0;
      for (int c = 0; c < classes; ++c) se += std::exp(static_cast<double>(l[c]) - mx);
      loss_sum += std::log(se) + mx - static_cast<double>(l[y[i]]);
      correct += best == y[i];
    }
    r.count += n;
  }
  if (r.count) {
    r.loss = loss_sum / static_cast<double>(r.count);
    r.accuracy = static_cast<double>(correct) / static_cast<double>(r.count);
  }
  return r;
}

// v to 8 significant digits ("null" when not finite), for messages and the
// checkpoint's loss scale.
std::string short_num(double v) {
  if (!std::isfinite(v)) return "null";
  std::ostringstream o;
  o << std::setprecision(8) << v;
  return o.str();
}

}  // namespace

// The smallest --memory value (in tenths of a MiB, as the refusal prints it)
// under which the fit accepts a plan of `need` bytes: the fit keeps 2% of
// the budget as slack, and 1 MiB is left for the measured baseline's
// variation between runs (tens of KiB).
std::string smallest_memory_flag(size_t need) {
  const size_t want = need + (size_t(1) << 20);
  for (long tenths = static_cast<long>(static_cast<double>(want) / 104857.6);; ++tenths) {
    char v[32];
    std::snprintf(v, sizeof v, "%.1fMiB", static_cast<double>(tenths) / 10);
    const size_t b = parse_bytes(v).value_or(0);
    if (b - b / 50 >= want) return v;
  }
}

// Thrown inside one attempt to start again with other options: the stack
// unwinds first, so every arena of the attempt is freed before the next plan
// takes memory.
struct Replan {
  TrainOptions options;
};

// Half the micro-batch, twice the accumulation: the effective batch, the
// schedule and the step count stay as they were.
std::optional<TrainOptions> halved(const TrainOptions& o) {
  const int64_t micro = o.batch / o.accumulate;
  if (micro < 2 || micro % 2) return std::nullopt;
  TrainOptions r = o;
  r.accumulate *= 2;
  return r;
}

TrainResult run_once(const TrainOptions& o, std::ostream& log) {
  if (o.threads > 0) omp_set_num_threads(static_cast<int>(o.threads));
  if (o.batch <= 0) throw std::invalid_argument("--batch must be positive");
  if (o.accumulate <= 0 || o.batch % o.accumulate)
    throw std::invalid_argument("--accumulate must divide --batch (" + std::to_string(o.batch) + ")");
  const int64_t micro = o.batch / o.accumulate;
  if (!Schedule::valid_kind(o.schedule))
    throw std::invalid_argument("unknown schedule '" + o.schedule + "' (expected constant, step or cosine)");
  optimizer_state_floats(o.optimizer);  // validates the optimizer kind
  configure_allocator();
  const size_t rss_start = current_rss();

  // --data-in: memory or disk as asked. auto (with the fit on) opens IDX
  // data streamed but unprepared (labels and headers only), plans it both
  // ways below, then loads it into memory if that fits, or lets the fit
  // choose. auto with --no-fit keeps it in memory, as before the flag.
  if (o.data_in != "auto" && o.data_in != "memory" && o.data_in != "disk")
    throw std::invalid_argument("--data-in expects memory, disk or auto, got '" + o.data_in + "'");
  const bool auto_data = o.data_in == "auto" && o.auto_fit;
  Datasets ds = open_data(o, o.data_in == "disk" || auto_data);
  if (o.data_in == "disk" && !o.plan_only) prepare_streams(ds, log);
  const data::SampleShape shape = ds.train->sample_shape();
  const int64_t classes = ds.train->num_classes();

  StepSpec spec;
  spec.model = o.model;
  spec.batch = micro;
  spec.accumulation = o.accumulate;
  spec.freeze = o.freeze;
  spec.bias_only = o.bias_only;
  spec.recompute = o.recompute;
  spec.precision = o.precision;
  spec.saved = o.saved_activations;
  spec.channels = shape[0];
  spec.height = shape[1];
  spec.width = shape[2];
  spec.classes = classes;
  spec.optimizer = o.optimizer;
  spec.label_smoothing = o.label_smoothing;
  auto train_g = build_step_graph(spec);
  StepSpec espec = spec;
  espec.training = false;
  espec.with_loss = false;
  espec.accumulation = 1;
  espec.batch = o.eval_batch > 0 ? o.eval_batch : micro;
  auto eval_g = build_step_graph(espec);

  ExecConfig cfg;
  cfg.backend = o.backend;
  cfg.plan = o.plan;
  cfg.defer_allocation = true;
  Executor ex(train_g->g, cfg);

  data::LoaderOptions lo;
  lo.batch_size = static_cast<size_t>(micro);
  lo.seed = o.seed;
  lo.drop_last = true;
  lo.shuffle = true;
  if (o.augment) {
    lo.crop_padding = 4;
    lo.hflip = true;
  }
  data::LoaderOptions teo;
  teo.batch_size = static_cast<size_t>(espec.batch);
  teo.shuffle = false;
  teo.drop_last = false;
  data::LoaderMemory train_mem = data::Loader::plan_memory(*ds.train, lo);
  data::LoaderMemory test_mem = ds.test ? data::Loader::plan_memory(*ds.test, teo) : data::LoaderMemory{};

  // Evaluation runs inside the training executor's transient arena when it
  // fits there, and always reads the training parameters in place.
  Executor eval_ex(eval_g->g, cfg);
  const size_t eval_transient = eval_ex.plan().arena_bytes[0];
  // (Not with guard bytes: evaluation would overwrite training's guards.)
  const bool eval_shares = !o.plan.guard_bytes && eval_transient <= ex.plan().arena_bytes[0];
  start_threads();
  // Hand back what an earlier attempt (a fit search, a re-plan) freed, so the
  // baseline measures this plan's process and not the previous one's heap.
  kernels::cpu::warm_gemm_code();
  kernels::cpu::drop_primitive_cache();
  ::malloc_trim(0);
  const size_t rss_kernels = current_rss();

  MemoryInputs mi;
  mi.baseline = rss_kernels > ds.train->resident_bytes() ? rss_kernels - ds.train->resident_bytes() -
                                                                 (ds.test ? ds.test->resident_bytes() : 0)
                                                           : rss_kernels;
  mi.rss_at_start = rss_start;
  mi.data_bytes = data_bytes_of(train_mem, test_mem);
  mi.eval_bytes = (eval_shares ? 0 : eval_transient) + eval_ex.plan().arena_bytes[static_cast<size_t>(Arena::Inputs)];
  mi.eval_library_heap = eval_ex.plan().library_heap_bytes;
  describe_data(ds, mi);
  MemoryReport rep = make_report(train_g->g, ex.plan(), mi);
  Budget budget = detect_budget(o.memory);

  // The ways to hold the data that the fit may choose from (empty: as opened).
  std::vector<FitData> fit_data;
  if (auto_data && ds.train_stream) {
    // The same plan with the dataset resident: what IdxDataset would hold
    // in place of the streamed datasets' labels.
    auto in_memory = [](data::LoaderMemory m, const data::StreamedIdxDataset* s) {
      if (s) {
        m.dataset_resident = m.dataset_resident - s->resident_bytes() + s->in_memory_resident_bytes();
        m.dataset_transient = 0;
      }
      return m;
    };
    MemoryInputs mm = mi;
    mm.data_bytes = data_bytes_of(in_memory(train_mem, ds.train_stream),
                                  ds.test ? in_memory(test_mem, ds.test_stream) : test_mem);
    mm.data_in = "memory";
    mm.data_note = "dataset in memory + loader buffers";
    mm.data_cache.clear();
    MemoryReport rep_mem = make_report(train_g->g, ex.plan(), mm);
    if (rep_mem.total <= budget.bytes) {
      // It fits with the dataset resident: load it.
      ds.train_sub.reset();
      ds.test_sub.reset();
      ds = Datasets{};
      ds = open_data(o, false);
      train_mem = data::Loader::plan_memory(*ds.train, lo);
      test_mem = ds.test ? data::Loader::plan_memory(*ds.test, teo) : data::LoaderMemory{};
      mi.data_bytes = data_bytes_of(train_mem, test_mem);
      describe_data(ds, mi);
      rep = make_report(train_g->g, ex.plan(), mi);
    } else {
      // Over budget in memory: the fit searches both, memory first (it wins
      // ties); the plan shown is the one asked for, in memory.
      const size_t plan_bytes = ex.plan().total_bytes();
      fit_data = {{"memory", rep_mem.total - plan_bytes, 0.0},
                  {"disk", rep.total - plan_bytes, kStreamSecondsPerSample}};
      rep = rep_mem;
    }
  }

  if (o.recompute != "none") {
    char buf[200];
    std::snprintf(buf, sizeof buf, "  recompute %s: saved activations %s -> %s, +%.2f GFLOP per micro-batch (%d nodes)\n",
                  o.recompute.c_str(), format_bytes(train_g->recompute.saved_bytes_before).c_str(),
                  format_bytes(train_g->recompute.saved_bytes_after).c_str(), train_g->recompute.extra_flops / 1e9,
                  train_g->recompute.cloned_nodes);
    log << buf;
  }
  rep.precision = precision_name(o.precision);
  rep.saved_activations = precision_name(o.saved_activations);
  rep.micro_batch = micro;
  rep.accumulate = o.accumulate;
  rep.recompute = o.recompute;
  rep.fitted = o.fitted;
  describe_machine(rep, o.precision);
  if (train_g->compress.cloned_nodes) {
    char buf[200];
    std::snprintf(buf, sizeof buf, "  saved activations stored as bf16: %s -> %s (%d casts)\n",
                  format_bytes(train_g->compress.saved_bytes_before).c_str(),
                  format_bytes(train_g->compress.saved_bytes_after).c_str(), train_g->compress.cloned_nodes);
    log << buf;
  }
  log << format_report(rep, budget, o.model, o.batch, o.optimizer.kind,
                       std::string(backend_name(o.backend)) + " " + precision_name(o.precision));
  // The plan reaches the terminal or the file before anything can kill the
  // process for its memory (a redirected stdout is block-buffered).
  log.flush();
  std::fflush(nullptr);
  if (o.plan_only && (rep.total <= budget.bytes || !o.auto_fit)) {
    TrainResult r;
    r.report = rep;
    r.budget = budget;
    r.planned_peak_bytes = rep.total;
    r.budget_bytes = budget.bytes;
    return r;
  }
  if (rep.total > budget.bytes) {
    if (!o.auto_fit) {
      std::string m = over_budget_message(rep, budget);
      if (rep.data_in == "memory")
        m += " Or stream the dataset from disk (--data-in disk): " +
             format_bytes(train_mem.dataset_resident + test_mem.dataset_resident) + " of it is in memory now.";
      throw BudgetError(m);
    }
    // What does not depend on the plan: baseline, data pipeline, evaluation.
    const size_t fixed = rep.total - ex.plan().total_bytes();
    StepSpec base = spec;
    base.batch = o.batch;
    ExecConfig fcfg = cfg;
    if (fit_data.empty()) fit_data = {{"", fixed, 0.0}};
    const std::vector<FitPrecision> precisions =
        o.precision_set || o.saved_activations != DType::f32 ? std::vector<FitPrecision>{} : default_fit_precisions();
    FitResult fr = search_fit(base, o.batch, fit_data, budget.bytes - budget.bytes / 50, fcfg, precisions);
    if (fr.fitting.empty()) {
      std::ostringstream m;
      m << "predicted peak " << format_bytes(rep.total) << " is over the budget of " << format_bytes(budget.bytes) << " ("
        << budget.source << "), and no micro-batch, accumulation, precision or recomputation"
        << (fit_data.size() > 1 ? " (with the dataset in memory or streamed from disk)" : "")
        << " fits either; the smallest plan ("
        << fr.smallest.describe() << ") needs " << format_bytes_up(fr.smallest.total_bytes)
        << ", so the smallest budget that would work is "
        << format_bytes(parse_bytes(smallest_memory_flag(fr.smallest.total_bytes)).value_or(0)) << " (--memory " << smallest_memory_flag(fr.smallest.total_bytes)
        << ": 2% slack for the fit and 1 MiB for the baseline's variation between runs)"
        << (budget.margin ? " plus the margin of a detected limit" : "") << ". Largest parts now: " << largest_classes(rep, 3) << ". Nothing was allocated.";
      throw BudgetError(m.str());
    }
    log << "memfit: the plan needs " << format_bytes(rep.total) << ", over the budget of " << format_bytes(budget.bytes)
        << "; fitting it (effective batch " << o.batch << " unchanged):\n  chosen:    " << fr.fitting[0].describe() << "\n";
    if (fr.fitting.size() > 1) log << "  runner-up: " << fr.fitting[1].describe() << "\n";
    TrainOptions next = o;
    next.accumulate = fr.fitting[0].accumulate;
    next.recompute = fr.fitting[0].recompute;
    next.precision = fr.fitting[0].precision;
    next.saved_activations = fr.fitting[0].saved;
    if (!fr.fitting[0].data_in.empty()) next.data_in = fr.fitting[0].data_in;
    next.auto_fit = false;
    next.fitted = true;
    throw Replan{next};
  }

  check_run_dir(o.out);
  log.flush();
  std::fflush(nullptr);
  try {
    if (o.inject_oom_at_step == 0) throw std::bad_alloc();
    ex.allocate();
    eval_ex.borrow(Arena::Params, ex.arena(Arena::Params));
    if (eval_shares) eval_ex.borrow(Arena::Transient, ex.arena(Arena::Transient));
    eval_ex.allocate();
  } catch (const std::bad_alloc&) {
    auto h = halved(o);
    if (!h) throw std::runtime_error("out of memory allocating the plan (" + format_bytes(rep.total) +
                                     ") and the micro-batch cannot be halved further");
    h->inject_oom_at_step = -1;
    log << "memfit: out of memory allocating the plan; re-planning with micro-batch " << h->batch / h->accumulate
        << " x " << h->accumulate << " (effective batch " << o.batch << " unchanged)\n";
    throw Replan{*h};
  }
  // The evaluation graph has the same parameters in the same order, so the
  // same offsets; check rather than trust.
  for (ValueId p : eval_g->g.params()) {
    ValueId q = train_g->g.find(eval_g->g.value(p).name);
    if (q == kNone || ex.data(q) != eval_ex.data(p))
      throw std::logic_error("evaluation graph parameter layout differs from training: " + eval_g->g.value(p).name);
  }
  ex.init_params(o.seed);
  if (!o.init_from.empty() && o.resume.empty()) {
    size_t n = load_weights(o.init_from, ex, o.reinit);
    log << "initialised " << n << " tensors from " << o.init_from << "\n";
  }

  data::Loader loader(*ds.train, lo);
  std::unique_ptr<data::Loader> test_loader;
  if (ds.test) test_loader = std::make_unique<data::Loader>(*ds.test, teo);

  // Optimizer steps per epoch; a last group of fewer than `accumulate`
  // micro-batches is dropped, as drop_last drops a partial batch.
  const int64_t per_epoch = static_cast<int64_t>(loader.batches_per_epoch()) / o.accumulate;
  if (per_epoch == 0)
    throw std::invalid_argument("the training set (" + std::to_string(ds.train->size()) + " samples) is smaller than one batch of " +
                                std::to_string(o.batch));
  // The update runs separately when it must wait for the group (accumulation)
  // or for the overflow check (fp16 loss scaling).
  const bool scaling = o.precision == DType::f16;
  const size_t update_node = o.accumulate > 1 || scaling ? update_begin(train_g->g) : train_g->g.num_nodes();
  const int64_t total_steps = o.steps > 0 ? o.steps : o.epochs * per_epoch;
  Schedule sched;
  sched.kind = o.schedule;
  sched.base_lr = o.lr;
  sched.warmup = o.warmup;
  sched.total = total_steps;
  sched.step_every = std::max<int64_t>(1, total_steps / 3);

  TrainState st;
  st.model = o.model;
  st.seed = o.seed;
  st.extra["batch"] = std::to_string(o.batch);
  st.extra["accumulate"] = std::to_string(o.accumulate);
  st.extra["optimizer"] = o.optimizer.kind;
  st.extra["dataset_size"] = std::to_string(ds.train->size());
  // The data options, so that --resume can take them when not given.
  st.extra["data"] = o.data;
  st.extra["subset"] = o.subset;
  st.extra["test_subset"] = o.test_subset;
  st.extra["image_size"] = std::to_string(o.image_size);
  st.extra["channels"] = std::to_string(o.channels);
  if (!o.resume.empty()) {
    TrainState r = load_checkpoint(o.resume, ex);
    for (const char* k : {"batch", "optimizer", "dataset_size"})
      if (r.extra[k] != st.extra[k]) {
        const std::string flag = std::string(k) == "dataset_size" ? "subset" : k;
        throw std::runtime_error("cannot resume from " + o.resume + ": it was trained with " + k + " " + r.extra[k] +
                                 ", this run has " + st.extra[k] + "; pass --" + flag + " " + r.extra[k] +
                                 (flag == "subset" ? " (the number of samples it trained on)" : ""));
      }
    if (r.seed != o.seed) throw std::runtime_error("cannot resume from " + o.resume + ": it used --seed " + std::to_string(r.seed));
    st.step = r.step;
    if (r.extra.count("loss_scale")) {
      st.extra["loss_scale"] = r.extra["loss_scale"];
      st.extra["loss_scale_good"] = r.extra["loss_scale_good"];
    }
    st.epoch = r.epoch;
    st.sample = r.sample;
    data::Position p{r.epoch, r.sample};
    if (p.sample >= loader.epoch_size()) p = {p.epoch + 1, 0};
    loader.seek(p);
    log << "resumed from " << o.resume << " at step " << st.step << " (epoch " << p.epoch + 1 << ")\n";
  }

  Progress prog(log, o.progress, total_steps, static_cast<size_t>(o.batch), budget.bytes);
  std::ofstream metrics(o.out + "/metrics.jsonl", std::ios::app);
  TrainResult res;
  res.planned_peak_bytes = rep.total;
  res.budget_bytes = budget.bytes;
  res.report = rep;
  res.budget = budget;

  kernels::StepContext ctx;
  ctx.seed = o.seed;
  float* x = ex.ptr<float>(train_g->x);
  int32_t* y = ex.ptr<int32_t>(train_g->labels);
  const float* loss_p = ex.ptr<float>(train_g->loss);
  double loss_sum = 0.0, last_loss = 0.0;
  int64_t loss_n = 0, images = 0;
  double train_seconds = 0.0;
  const auto t_start = Clock::now();

  auto do_eval = [&](uint64_t epoch) {
    if (!test_loader) return;
    EvalResult e = evaluate(eval_ex, *eval_g, *test_loader, classes);
    if (g_signal) return;  // cut short: nothing to record
    res.evaluated = true;
    res.test_loss = e.loss;
    res.test_accuracy = e.accuracy;
    const double ips = train_seconds > 0 ? static_cast<double>(images) / train_seconds : 0.0;
    const double tl = loss_n ? loss_sum / static_cast<double>(loss_n) : last_loss;
    prog.message("eval step " + std::to_string(st.step) + ": test_loss " + short_num(e.loss) + " test_accuracy " +
                 short_num(e.accuracy) + " (" + std::to_string(e.count) + " images)");
    const Json line = {{"epoch", epoch},
                       {"step", st.step},
                       {"train_loss", tl},
                       {"test_loss", e.loss},
                       {"test_accuracy", e.accuracy},
                       {"images_per_second", ips},
                       {"peak_rss_bytes", peak_rss()},
                       {"planned_peak_bytes", rep.total}};
    metrics << json_line(line) << "\n";
    metrics.flush();
    loss_sum = 0.0;
    loss_n = 0;
  };
  // fp16: dynamic loss scaling. The gradient of the loss enters fp16
  // multiplied by `scale`; the update divides it out. A step whose
  // gradients overflowed (inf/NaN) is skipped and the scale halved; after
  // kGrowth good steps in a row it doubles. The state is checkpointed.
  constexpr int64_t kGrowth = 2000;
  double scale = scaling ? o.loss_scale : 1.0;
  int64_t good_steps = 0, skipped_steps = 0;
  if (scaling && st.extra.count("loss_scale")) {
    scale = std::stod(st.extra["loss_scale"]);
    good_steps = std::stoll(st.extra["loss_scale_good"]);
  }
  auto do_checkpoint = [&]() {
    data::Position p = loader.position();
    st.epoch = p.epoch;
    st.sample = p.sample;
    if (scaling) {
      st.extra["loss_scale"] = short_num(scale);
      st.extra["loss_scale_good"] = std::to_string(good_steps);
    }
    save_checkpoint(o.out, ex, st);
  };

  std::vector<std::pair<const float*, size_t>> grads;  // what the update reads
  if (scaling)
    for (size_t k = update_node; k < train_g->g.num_nodes(); ++k)
      for (ValueId v : train_g->g.node(static_cast<NodeId>(k)).inputs) {
        const Value& val = train_g->g.value(v);
        if (val.dtype == DType::f32 && val.cls != VClass::Param && val.cls != VClass::OptState)
          grads.emplace_back(ex.ptr<float>(v), static_cast<size_t>(numel(val.shape)));
      }

  int64_t group = 0;        // micro-batches done in this optimizer step
  double group_loss = 0.0;
  while (st.step < total_steps) {
    if (g_signal && group == 0) {
      res.interrupted = g_signal;
      break;
    }
    const auto t0 = Clock::now();
    size_t n = loader.next(x, y);
    if (n == 0) {  // end of an epoch; an unfinished accumulation group is dropped
      group = 0;
      group_loss = 0.0;
      // The loader has moved to the next epoch: its index is the number of
      // epochs finished, the 1-based number of the one that just ended.
      const uint64_t finished = loader.position().epoch;
      if (o.eval_every < 0) do_eval(finished);
      do_checkpoint();
      continue;
    }
    if (group == 0 && st.step == o.inject_oom_at_step && st.step > 0) {
      // As if memory ran out here: keep the last completed step, re-plan
      // with half the micro-batch, continue from it.
      auto h = halved(o);
      if (!h) throw std::runtime_error("out of memory at step " + std::to_string(st.step) +
                                       " and the micro-batch cannot be halved further");
      loader.seek(data::Position{loader.position().epoch, loader.position().sample - n});
      do_checkpoint();
      h->inject_oom_at_step = -1;
      h->resume = o.out;
      h->init_from.clear();
      prog.finish();
      log << "memfit: out of memory at step " << st.step << "; saved the state after step " << st.step
          << ", re-planning with micro-batch " << h->batch / h->accumulate << " x " << h->accumulate
          << " (effective batch " << o.batch << " unchanged) and continuing\n";
      throw Replan{*h};
    }
    ctx.step = st.step;
    ctx.lr = sched.lr(st.step);
    ctx.micro = group;
    ctx.grad_scale = 1.0 / scale;  // for an update that runs within this call (accumulate 1, no scaling)
    ctx.loss_scale = scale;
    if (o.profile > 0 && group == 0 && st.step == total_steps - o.profile) ex.set_profiling(true);
    ex.run_nodes(0, update_node, ctx);
    group_loss += *loss_p;
    images += static_cast<int64_t>(n);
    if (++group < o.accumulate) {
      train_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
      continue;
    }
    ctx.grad_scale = 1.0 / (static_cast<double>(o.accumulate) * scale);
    bool skip = false;
    if (scaling) {
      skip = !all_finite(grads);
      if (skip) {
        ++skipped_steps;
        good_steps = 0;
        prog.message("fp16: gradients overflowed at step " + std::to_string(st.step) + " with loss scale " +
                     short_num(scale) + "; step skipped, loss scale -> " + short_num(std::max(1.0, scale / 2)));
        scale = std::max(1.0, scale / 2);
      } else if (++good_steps == kGrowth) {
        good_steps = 0;
        scale = std::min(scale * 2, 16777216.0);
      }
    }
    if (!skip) ex.run_nodes(update_node, train_g->g.num_nodes(), ctx);
    if (o.plan.guard_bytes && !ex.guards_intact())
      throw std::logic_error("guard bytes after " + ex.broken_guard() + " overwritten in step " +
                             std::to_string(st.step) + ": a kernel wrote outside its planned buffer");
    last_loss = group_loss / static_cast<double>(o.accumulate);
    group = 0;
    group_loss = 0.0;
    if (!std::isfinite(last_loss))
      throw std::runtime_error("training diverged at step " + std::to_string(st.step) + " (loss " + short_num(last_loss) +
                               "); lower --lr or use --clip-grad-norm");
    loss_sum += last_loss;
    ++loss_n;
    ++st.step;
    train_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    prog.step(st.step, last_loss, train_seconds > 0 ? static_cast<double>(images) / train_seconds : 0.0, current_rss());
    if (o.eval_every > 0 && st.step % o.eval_every == 0) do_eval(loader.position().epoch + 1);
    if (o.checkpoint_every > 0 && st.step % o.checkpoint_every == 0) do_checkpoint();
  }
  if (res.interrupted) {  // a signal: save the last finished step, nothing else
    do_checkpoint();
    prog.finish();
  } else if (o.profile > 0) {  // --profile: the table instead of the final evaluation and checkpoint
    prog.finish();
    log << profile_report(ex, ex.node_seconds(), std::min(o.profile, st.step));
  } else {
    // The last step may end mid-epoch (--steps): evaluate and save once more.
    // --eval-every 0: no evaluation at all.
    if (o.eval_every != 0 && (!res.evaluated || loss_n > 0)) do_eval(loader.position().epoch + 1);
    do_checkpoint();
    prog.finish();
  }

  res.steps = st.step;
  res.skipped_steps = skipped_steps;
  res.loss_scale = scale;
  res.final_train_loss = last_loss;
  res.seconds = std::chrono::duration<double>(Clock::now() - t_start).count();
  res.images_per_second = train_seconds > 0 ? static_cast<double>(images) / train_seconds : 0.0;
  res.peak_rss_bytes = peak_rss();
  // The plan is a promise: say so when the process went past it.
  if (res.peak_rss_bytes > rep.total + rep.total / 33) {
    const size_t over = res.peak_rss_bytes - rep.total;
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "memfit: warning: the measured peak RSS %s is %s (%.1f%%) over the plan's %s%s; please report it "
                  "with the plan above\n",
                  format_bytes(res.peak_rss_bytes).c_str(), format_bytes(over).c_str(),
                  100.0 * static_cast<double>(over) / static_cast<double>(rep.total), format_bytes(rep.total).c_str(),
                  res.peak_rss_bytes > budget.bytes ? (", and over the budget of " + format_bytes(budget.bytes)).c_str() : "");
    log << buf;
  }
  return res;
}

// --resume: the data options the user did not give come from the
// checkpoint's metadata (checkpoints before they were recorded have none);
// one given that differs names the flag and the value to pass.
void adopt_resume_options(TrainOptions& o, std::ostream& log) {
  if (o.resume.empty()) return;
  const std::map<std::string, std::string> meta = checkpoint_metadata(o.resume);
  struct Field {
    const char* flag;
    const char* key;
    std::string* s;
    int64_t* i;
  };
  const Field fields[] = {{"data", "data", &o.data, nullptr},
                          {"subset", "subset", &o.subset, nullptr},
                          {"test-subset", "test_subset", &o.test_subset, nullptr},
                          {"image-size", "image_size", nullptr, &o.image_size},
                          {"channels", "channels", nullptr, &o.channels}};
  std::string taken;
  for (const Field& f : fields) {
    auto it = meta.find(f.key);
    if (it == meta.end()) continue;
    const std::string now = f.s ? *f.s : std::to_string(*f.i);
    if (it->second == now) continue;
    const bool given = std::find(o.given.begin(), o.given.end(), f.flag) != o.given.end();
    if (given)
      throw std::runtime_error("cannot resume from " + o.resume + ": it was trained with --" + f.flag + " " +
                               (it->second.empty() ? "(not given)" : it->second) + ", this run has --" + f.flag + " " +
                               now + "; pass --" + f.flag + " " + it->second + " or leave the flag out");
    if (f.s) {
      *f.s = it->second;
    } else {
      char* end = nullptr;
      const long long v = std::strtoll(it->second.c_str(), &end, 10);
      if (end == it->second.c_str() || *end) continue;  // unreadable: the checks after loading report it
      *f.i = v;
    }
    if (!it->second.empty()) taken += " --" + std::string(f.flag) + " " + it->second;
  }
  if (!taken.empty()) log << "resuming with the checkpoint's data options:" << taken << "\n";
}

TrainResult run_training(const TrainOptions& opt, std::ostream& log) {
  TrainOptions o = opt;
  SignalScope signals(o.handle_signals);
  adopt_resume_options(o, log);
  for (int attempt = 0;; ++attempt) {
    try {
      return run_once(o, log);
    } catch (Replan& r) {
      if (attempt >= 16) throw std::runtime_error("could not settle on a plan");
      o = r.options;
    }
  }
}

}  // namespace memfit::train
