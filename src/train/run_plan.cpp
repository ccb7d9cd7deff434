#include <cstdlib>
#include "train/run_plan.hpp"

#include "models/onnx/model.hpp"

#include <malloc.h>
#include <omp.h>

#include <cstdio>
#include <filesystem>
#include <new>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "runtime/device.hpp"
#include "persist/checkpoint.hpp"
#include "fit/fit.hpp"
#include "fit/machine_profile.hpp"
#include "dist/comm.hpp"
#include "base/bytes.hpp"
#include "base/process.hpp"
#include "fit/budget.hpp"

namespace memfit::train {
namespace {

// The directory of --offload's file.
std::string offload_dir(const TrainOptions& o) { return o.offload_dir.empty() ? o.out : o.offload_dir; }

// The training step of these options over the dataset's tensors.
StepSpec step_spec(const TrainOptions& o, const data::Dataset& train) {
  StepSpec spec;
  spec.policy() = policy_of(o);
  spec.data = train.tensors();
  spec.model = o.model;
  spec.freeze = o.freeze;
  spec.model_options = o.resolve_options();
  spec.model_def = o.resolved_model();
  spec.bias_only = o.bias_only;
  spec.classes = train.num_classes();
  spec.optimizer = o.optimizer;
  spec.ranks = o.ranks;
  if (o.ranks > 1 && o.shard_optimizer) {
    spec.optimizer.shard = o.rank;
    spec.optimizer.shards = o.ranks;
  }
  spec.label_smoothing = o.label_smoothing;
  return spec;
}

// The refusal when no policy fits.
std::string nothing_fits_message(const MemoryReport& rep, const Budget& budget, const FitResult& fr,
                                 bool searched_residency) {
  std::ostringstream m;
  m << "predicted peak " << format_bytes(rep.total) << " is over the budget of " << format_bytes(budget.bytes) << " ("
    << budget.source << "), and no micro-batch, accumulation, precision, recomputation or update in backward"
    << (searched_residency ? " (with the dataset in memory or streamed from disk)" : "")
    << " fits either; the smallest plan ("
    << fr.smallest.describe() << ") needs " << format_bytes_up(fr.smallest.total_bytes)
    << ", so the smallest budget that would work is "
    << format_bytes(parse_bytes(smallest_memory_flag(fr.smallest.total_bytes)).value_or(0)) << (rep.device.empty() ? " (--memory " : " (--device-memory ") << smallest_memory_flag(fr.smallest.total_bytes)
    << ": 2% and 4 MiB of slack for the fit, for the baseline's variation between plans and runs, and 1 MiB for "
         "the next process's own baseline)"
    << (budget.margin ? " plus the margin of a detected limit" : "") << ". Largest parts now: " << largest_classes(rep, 3) << ". Nothing was allocated.";
  return m.str();
}

// One attempt's plan, stage by stage, in the order the stages must run:
// the baseline is measured after the executors' kernels exist and before
// any arena does.
class Planner {
 public:
  Planner(const TrainOptions& o, std::ostream& log) : o_(o), log_(log) { p_.options = o; }

  std::variant<RunPlan, Replan> run() {
    // Before the baseline is measured: a first measurement's kernels are
    // handed back with an earlier attempt's (measure()).
    profile_ = o_.context->profile(device_named(o_.device), omp_get_max_threads(), o_.cache_dir);
    // The device's one-time probes (whether bf16 convolutions beat f32 here,
    // timed on generated code) run before the baseline too: the heap and
    // code they leave are the process's, which the report's describe_machine
    // would otherwise add after the measurement (3.8 MiB on AVX-512).
    (void)device_named(o_.device).storage_cost(DType::bf16);
    configure_allocator();
    rss_start_ = current_rss();
    open();
    adopt_device_tuning(device_named(o_.device), o_.cache_dir);
    build();
    save_device_tuning(device_named(o_.device), o_.cache_dir);
    measure();
    if (auto_data_ && p_.data.train_stream) choose_residency();
    print();
    if (o_.plan_only && !o_.auto_fit) return std::move(p_);
    // The host's RAM under a device: no policy of the device's plan changes
    // what it holds (baseline, data pipeline, staging).
    if (p_.report.host_over()) throw BudgetError(host_over_budget_message(p_.report));
    if (p_.report.total <= p_.budget.bytes) return std::move(p_);
    if (!o_.auto_fit) throw BudgetError(over_budget());
    return fit();
  }

 private:
  const TrainOptions& o_;
  std::ostream& log_;
  RunPlan p_;
  // --data-in auto with the fit on: the data opens streamed but unprepared
  // (labels and headers only), is planned both ways, then loaded into
  // memory if that fits, or left for the fit to choose. auto with --no-fit
  // keeps it in memory, as before the flag.
  bool auto_data_ = false;
  size_t rss_start_ = 0;
  StepSpec spec_;
  ExecConfig cfg_;
  data::LoaderMemory train_mem_, test_mem_;
  MemoryInputs mi_;
  std::vector<FitData> fit_data_;  // the ways to hold the data the fit may choose from (empty: as opened)
  MachineProfile profile_;

  Executor& ex() { return *p_.train_ex; }

  void open() {
    auto_data_ = o_.data_in == "auto" && o_.auto_fit;
    p_.data = open_data(o_, o_.data_in == "disk" || auto_data_, &log_);
    if (o_.data_in == "disk" && !o_.plan_only) prepare_streams(p_.data, log_);
    p_.classes = p_.data.train->num_classes();
  }

  void plan_loaders() {
    train_mem_ = data::Loader::plan_memory(*p_.data.train, p_.train_loader);
    test_mem_ = p_.data.test ? data::Loader::plan_memory(*p_.data.test, p_.test_loader) : data::LoaderMemory{};
  }

  void build() {
    spec_ = step_spec(o_, *p_.data.train);
    p_.train_g = build_step_graph(spec_);
    StepSpec espec = spec_;
    espec.training = false;
    espec.with_loss = false;
    espec.with_metrics = true;
    espec.accumulation = 1;
    espec.batch = o_.eval_batch > 0 ? o_.eval_batch : spec_.batch;
    p_.eval_g = build_step_graph(espec);

    cfg_.device = &device_named(o_.device);
    cfg_.plan = o_.plan;
    cfg_.defer_allocation = true;
    cfg_.tier_dir = offload_dir(o_);
    p_.train_ex = std::make_unique<Executor>(p_.train_g->g, cfg_);

    data::LoaderOptions& lo = p_.train_loader;
    lo.batch_size = static_cast<size_t>(spec_.batch);
    lo.seed = o_.seed;
    lo.drop_last = true;
    lo.shuffle = true;
    lo.ranks = static_cast<size_t>(o_.ranks);  // each rank its share of every global batch
    lo.rank = static_cast<size_t>(o_.rank);
    if (o_.augment) {
      lo.crop_padding = 4;
      lo.hflip = true;
    }
    data::LoaderOptions& teo = p_.test_loader;
    teo.batch_size = static_cast<size_t>(espec.batch);
    teo.shuffle = false;
    teo.drop_last = false;
    plan_loaders();

    p_.eval_ex = std::make_unique<Executor>(p_.eval_g->g, cfg_);
    // (Not with guard bytes: evaluation would overwrite training's guards.)
    p_.eval_shares = !o_.plan.guard_bytes && p_.eval_ex->plan().arena_bytes[0] <= ex().plan().arena_bytes[0];
  }

  void measure() {
    start_threads();
    // Hand back what an earlier attempt (a fit search, a re-plan) freed, so the
    // baseline measures this plan's process and not the previous one's heap.
    device_named(o_.device).settle(ex().runs_library_gemm() || p_.eval_ex->runs_library_gemm());
    ::malloc_trim(0);
    const size_t rss_kernels = current_rss();

    const Datasets& ds = p_.data;
    const Plan& eval_plan = p_.eval_ex->plan();
    mi_.baseline = rss_kernels > ds.train->resident_bytes() ? rss_kernels - ds.train->resident_bytes() -
                                                                   (ds.test ? ds.test->resident_bytes() : 0)
                                                             : rss_kernels;
    // An imported file's weights, held until the parameters are initialised
    // from them (trainer.cpp), are no part of the baseline; the moment both
    // exist is counted apart (MemoryInputs::import_bytes).
    mi_.import_bytes = o_.context->import_bytes();
    mi_.baseline -= std::min(mi_.baseline, mi_.import_bytes);
    mi_.rss_at_start = rss_start_;
    mi_.data_bytes = data_bytes_of(train_mem_, test_mem_);
    // Evaluation's own arenas (the activations where it does not borrow the
    // training's, and its inputs), in whole pages as they are allocated.
    auto pages = [](size_t b) { return (b + 4095) / 4096 * 4096; };
    mi_.eval_bytes = (p_.eval_shares ? 0 : pages(eval_plan.arena_bytes[0])) +
                     pages(eval_plan.arena_bytes[static_cast<size_t>(Arena::Inputs)]);
    mi_.eval_library_heap = eval_plan.library_heap_bytes;
    describe_data(ds, mi_);
    mi_.ranks = o_.ranks;
    mi_.rank = o_.rank;
    mi_.sharded = o_.ranks > 1 && o_.shard_optimizer;
    mi_.comm_bytes = dist::comm_scratch_bytes(o_.ranks);
    // Where the host cannot address the arenas, the collectives work on a
    // host copy of one piece (dist/data_parallel.hpp).
    if (o_.ranks > 1 && !device_named(o_.device).host_addressable()) mi_.comm_bytes += dist::kPieceBytes;
    if (!o_.offload.empty() && o_.offload != "none") {
      mi_.offload_dir = offload_dir(o_);
      if (ram_backed(std::filesystem::path(mi_.offload_dir).parent_path().string()) || ram_backed(mi_.offload_dir))
        log_ << "memfit: warning: the offload file goes to " << mi_.offload_dir
             << ", a file system kept in memory (tmpfs): it takes the memory it should free; --offload-dir on a disk\n";
    }
    const Device& dev = device_named(o_.device);
    size_t dev_free = 0, dev_total = 0;
    if (dev.memory_info(dev_free, dev_total)) {
      // The arenas in the device's memory: the budget is the device's; a
      // checkpoint reads the state through the host a piece at a time (its
      // checksum's piece and the file writer's buffer, 1 MiB each). The
      // host's RAM keeps a budget of its own (--memory, else its limit).
      mi_.device = dev.name();
      mi_.host_staging = size_t(2) << 20;
      Budget host = detect_budget(o_.memory);
      share_budget(host);
      mi_.host_budget = host.bytes;
      mi_.host_budget_source = host.describe();
      p_.report = make_report(p_.train_g->g, ex().plan(), mi_);
      p_.budget = device_budget(dev, o_.device_memory);
      p_.device_free_at_plan = dev_free;
      return;
    }
    p_.report = make_report(p_.train_g->g, ex().plan(), mi_);
    p_.budget = detect_budget(o_.memory);
    share_budget(p_.budget);
  }

  // Ranks on one machine share its memory: a detected budget (not
  // --memory, which is per rank) is split between them.
  void share_budget(Budget& b) const {
    if (o_.memory || o_.ranks < 2) return;
    const int n = std::min(o_.ranks_here, o_.ranks);
    if (n < 2) return;
    b.bytes /= static_cast<size_t>(n);
    b.source += ", shared by " + std::to_string(n) + " ranks on this machine";
  }

  // The same plan with the dataset resident: load it when that fits, else
  // let the fit search both.
  void choose_residency() {
    Datasets& ds = p_.data;
    // What IdxDataset would hold in place of the streamed datasets' labels.
    auto in_memory = [](data::LoaderMemory m, const data::StreamedIdxDataset* s) {
      if (s) {
        m.dataset_resident = m.dataset_resident - s->resident_bytes() + s->in_memory_resident_bytes();
        m.dataset_transient = 0;
      }
      return m;
    };
    MemoryInputs mm = mi_;
    mm.data_bytes = data_bytes_of(in_memory(train_mem_, ds.train_stream),
                                  ds.test ? in_memory(test_mem_, ds.test_stream) : test_mem_);
    mm.data_in = "memory";
    mm.data_note = "dataset in memory + loader buffers";
    mm.data_cache.clear();
    MemoryReport rep_mem = make_report(p_.train_g->g, ex().plan(), mm);
    // Under a device with memory of its own the dataset is the host's: it
    // fits when the host's RAM holds it, whatever the device's plan needs.
    const bool on_device = !rep_mem.device.empty();
    if (on_device ? !rep_mem.host_over() : rep_mem.total <= p_.budget.bytes) {
      // It fits with the dataset resident: load it.
      ds.train_sub.reset();
      ds.test_sub.reset();
      ds = Datasets{};
      ds = open_data(o_, false);
      plan_loaders();
      mi_.data_bytes = data_bytes_of(train_mem_, test_mem_);
      describe_data(ds, mi_);
      p_.report = make_report(p_.train_g->g, ex().plan(), mi_);
    } else if (on_device) {
      // The host's RAM cannot hold it: it streams from disk (the device's
      // plan is the same either way, so the fit has nothing to weigh).
      log_ << "memfit: the dataset streams from disk: in memory it would take the host's RAM to "
           << format_bytes(rep_mem.host) << ", over its budget of " << format_bytes(rep_mem.host_budget) << "\n";
      if (!o_.plan_only) prepare_streams(p_.data, log_);
    } else {
      // Over budget in memory: the fit searches both, memory first (it wins
      // ties); the plan shown is the one asked for, in memory.
      const size_t plan_bytes = ex().plan().total_bytes();
      fit_data_ = {{"memory", rep_mem.total - plan_bytes, 0.0},
                   {"disk", p_.report.total - plan_bytes, kStreamSecondsPerSample}};
      p_.report = rep_mem;
    }
  }

  void print() {
    const StepGraph& tg = *p_.train_g;
    MemoryReport& rep = p_.report;
    if (o_.recompute != "none" && (o_.recompute != "auto" || tg.recompute.cloned_nodes > 0)) {
      char buf[200];
      std::snprintf(buf, sizeof buf, "  recompute %s: saved activations %s -> %s, +%.2f GFLOP per micro-batch (%d nodes)\n",
                    o_.recompute.c_str(), format_bytes(tg.recompute.saved_bytes_before).c_str(),
                    format_bytes(tg.recompute.saved_bytes_after).c_str(), tg.recompute.extra_flops / 1e9,
                    tg.recompute.cloned_nodes);
      log_ << buf;
    }
    if (tg.updates_in_backward) {
      char buf[200];
      std::snprintf(buf, sizeof buf, "  update in backward: gradients %s -> %s live at most (%d update nodes)\n",
                    format_bytes(rep.grads_unfused).c_str(), format_bytes(rep.grads_live).c_str(),
                    tg.updates_in_backward);
      log_ << buf;
    }
    rep.policy = spec_.policy();
    rep.fitted = o_.fitted;
    describe_machine(rep, device_named(o_.device), o_.precision);
    describe_speed(rep);
    describe_tier_speed(rep);
    if (tg.compress.cloned_nodes) {
      char buf[200];
      std::snprintf(buf, sizeof buf, "  saved activations stored as bf16: %s -> %s (%d casts)\n",
                    format_bytes(tg.compress.saved_bytes_before).c_str(),
                    format_bytes(tg.compress.saved_bytes_after).c_str(), tg.compress.cloned_nodes);
      log_ << buf;
    }
    const std::string optimizer =
        o_.optimizer.kind + (o_.optimizer.state != "fp32" ? " (" + o_.optimizer.state + " state)" : "");
    log_ << format_report(rep, p_.budget, o_.model, o_.batch, optimizer,
                          o_.device + " " + precision_name(o_.precision));
    // The plan reaches the terminal or the file before anything can kill the
    // process for its memory (a redirected stdout is block-buffered).
    log_.flush();
    std::fflush(nullptr);
  }

  // The step-time estimate of this plan, by the fit's cost model.
  void describe_speed(MemoryReport& rep) const {
    if (profile_.source == "none") return;
    const Graph& g = p_.train_g->g;
    const double flops = graph_flops(g);
    rep.flops_per_second = profile_.flops_per_second;
    rep.speed_source = profile_.source;
    rep.step_flops = flops * static_cast<double>(o_.accumulate);
    rep.predicted_step_seconds =
        storage_time_factor(device_named(o_.device), o_.precision, o_.saved_activations) *
        predict_step_seconds(device_named(o_.device).step_costs(), profile_.flops_per_second, flops,
                             spec_.batch * rows_per_sample(spec_), o_.accumulate, g.num_nodes());
  }

  // An offloaded plan: the tier's speed measured in its directory, and the
  // step's I/O time at it: what the step waits for (tier_io_time) is added
  // to the predicted step time. Nothing when it cannot be measured.
  void describe_tier_speed(MemoryReport& rep) const {
    if (!rep.tier || o_.offload.empty() || o_.offload == "none") return;
    const std::string dir = offload_dir(o_);
    std::error_code ec;
    const bool existed = std::filesystem::exists(dir, ec);
    try {
      std::filesystem::create_directories(dir, ec);
      // The disk's room for the file: what its file system has available,
      // and a file this run reopens (--resume from a step record) holds its
      // own place already.
      const std::filesystem::space_info sp = std::filesystem::space(dir, ec);
      if (!ec) {
        rep.tier_disk_available = static_cast<size_t>(sp.available);
        try {
          const std::string reopen = o_.resume.empty() ? std::string() : step_record_file(o_.resume);
          const auto held = reopen.empty() ? 0 : std::filesystem::file_size(reopen, ec);
          if (!ec) rep.tier_disk_available += static_cast<size_t>(held);
        } catch (const std::exception&) {
          // (a record that cannot be read is --resume's error to name)
        }
        ec.clear();
      }
      const TierSpeed s = measure_tier_speed(dir);
      rep.tier_read_bps = s.read_bytes_per_second;
      rep.tier_write_bps = s.write_bytes_per_second;
      const double k = static_cast<double>(o_.accumulate);
      const TierTime t = tier_io_time(p_.train_g->g, p_.train_ex->plan(), rep.predicted_step_seconds / k, s);
      rep.tier_io_seconds = k * t.io;
      rep.tier_exposed_seconds = k * t.exposed;
      rep.tier_ahead = spec_.offload_ahead;
      if (rep.predicted_step_seconds > 0) rep.predicted_step_seconds += rep.tier_exposed_seconds;
    } catch (const std::exception&) {
      // (the store's own error, when the run makes it, names the cause)
    }
    if (!existed) std::filesystem::remove(dir, ec);
  }

  // Over budget with the fit off.
  std::string over_budget() const {
    std::string m = over_budget_message(p_.report, p_.budget);
    if (p_.report.data_in == "memory")
      m += " Or stream the dataset from disk (--data-in disk): " +
           format_bytes(train_mem_.dataset_resident + test_mem_.dataset_resident) + " of it is in memory now.";
    return m;
  }

  // Nothing fits with the run's numerics: what would, if the user allowed a
  // change of them (compact optimizer state; Adafactor instead of Adam),
  // and by how much; "" when nothing would.
  std::string approximations_hint(const StepSpec& base, size_t target, const ExecConfig& fcfg,
                                  const std::vector<FitPrecision>& precisions, const std::vector<FitState>& approx) {
    std::ostringstream m;
    auto under = [&](const FitCandidate& c) { return format_bytes(target - c.total_bytes) + " under the fit's target"; };
    if (!approx.empty()) {
      const FitResult a = search_fit(base, o_.batch, fit_data_, target, fcfg, profile_.flops_per_second, precisions, approx);
      if (!a.fitting.empty()) {
        const FitCandidate& c = a.fitting[0];
        std::string flags;
        if (c.policy.optimizer_state != base.effective_state()) flags += " --optimizer-state " + c.policy.optimizer_state;
        if (c.policy.master_weights != base.master_weights) flags += " --master-weights bf16";
        if (c.policy.accumulated_grads != base.accumulated_grads) flags += " --accumulated-grads bf16";
        m << " It would fit with compact optimizer state, bf16 master weights or bf16 accumulated gradients, which "
             "change the numerics: "
             "--allow-approx lets the fit choose "
          << c.describe() << " (" << under(c) << "; or pass" << flags << " yourself).";
      } else {
        m << " Compact optimizer state, bf16 master weights and bf16 accumulated gradients do not make it fit "
             "either (smallest with them: "
          << format_bytes_up(a.smallest.total_bytes) << ", " << a.smallest.describe() << ").";
      }
    }
    // Adafactor takes f32 weights and gradients: not where the user fixed bf16 ones.
    if ((base.optimizer.kind == "adam" || base.optimizer.kind == "adamw") && base.master_weights == DType::f32 &&
        base.accumulated_grads == DType::f32) {
      StepSpec f = base;
      f.optimizer.kind = "adafactor";
      f.optimizer.state = f.optimizer_state = "fp32";
      const FitResult a = search_fit(f, o_.batch, fit_data_, target, fcfg, profile_.flops_per_second, precisions);
      if (!a.fitting.empty())
        m << " --optimizer adafactor (factored second moments, no first moment; a different optimizer) would fit: "
          << a.fitting[0].describe() << " (" << under(a.fitting[0]) << ").";
    }
    return m.str();
  }

  // The fit's search again with the offload sets (fit_offloads), where the
  // user left --offload open, in one process (on any device: the tier
  // reaches device memory through the device's copies);
  // `note` says what was measured or why it was not tried.
  FitResult fit_offloaded(const StepSpec& base, size_t target, const ExecConfig& fcfg,
                          const std::vector<FitPrecision>& precisions, const std::vector<FitState>& states,
                          std::string& note) {
    if (!o_.offload.empty() || o_.ranks > 1 || base.optimizer.clip_grad_norm > 0)
      return {};
    const std::string dir = offload_dir(o_);
    TierSpeed speed;
    std::error_code ec;
    const bool existed = std::filesystem::exists(dir, ec);
    try {
      std::filesystem::create_directories(dir, ec);
      if (ram_backed(dir)) throw std::runtime_error(dir + " is on a file system kept in memory (tmpfs); --offload-dir on a disk");
      speed = measure_tier_speed(dir);
      const std::filesystem::space_info sp = std::filesystem::space(dir, ec);
      if (!ec) speed.available_bytes = static_cast<size_t>(sp.available);
      if (!existed) std::filesystem::remove(dir, ec);  // (the run makes it again; a plan leaves nothing)
    } catch (const std::exception& e) {
      if (!existed) std::filesystem::remove(dir, ec);
      note = " Offloading to disk was not tried: " + std::string(e.what()) + ".";
      return {};
    }
    char buf[200];
    std::snprintf(buf, sizeof buf, "nothing fits in memory; offloading to %s (measured there: read %.0f MB/s, write %.0f MB/s)",
                  dir.c_str(), speed.read_bytes_per_second / 1e6, speed.write_bytes_per_second / 1e6);
    FitResult r = search_fit(base, o_.batch, fit_data_, target, fcfg, profile_.flops_per_second, precisions, states,
                             fit_offloads(), speed, o_.offload_ahead < 0 ? fit_aheads() : std::vector<int>{});
    note = r.fitting.empty() ? " Offloading optimizer state and weights to disk (--offload) does not make it fit "
                               "either (smallest with it: " + r.smallest.describe() + ")."
                             : std::string(buf);
    if (r.fitting.empty() && r.over_disk.disk_bytes)
      note = " Offloading to disk would fit in memory (" + r.over_disk.policy.describe() + ") but its offload file needs " +
             format_bytes_up(r.over_disk.disk_bytes) + " in " + dir + ", which has " +
             format_bytes(speed.available_bytes) + " available: free space there, or --offload-dir on a disk with room.";
    return r;
  }

  // Over budget with the fit on: the fastest policy that fits, to plan again
  // with (the fit then off), or BudgetError when none does.
  Replan fit() {
    const MemoryReport& rep = p_.report;
    const Budget& budget = p_.budget;
    // What does not depend on the plan: baseline, data pipeline, evaluation.
    const size_t fixed = rep.total - ex().plan().total_bytes();
    StepSpec base = spec_;
    base.batch = o_.batch;
    ExecConfig fcfg = cfg_;
    fcfg.kernel_sizes = std::make_shared<KernelSizes>();  // the candidates share their kernels' sizes
    if (fit_data_.empty()) fit_data_ = {{"", fixed, 0.0}};
    std::vector<FitPrecision> precisions =
        o_.precision_set || o_.saved_activations != DType::f32 ? std::vector<FitPrecision>{} : default_fit_precisions(device_named(o_.device));
    const size_t target = fit_target(budget.bytes);
    // Compact state and bf16 weights only where the device's kernels store them.
    const bool compact = device_named(o_.device).stores(DType::bf16);
    std::vector<FitState> approx = approx_fit_states(
        o_.optimizer, !o_.optimizer_state_set && compact,
        !o_.master_weights_set && !device_named(o_.device).wide_floats() && compact,
        !o_.accumulated_grads_set && !device_named(o_.device).wide_floats() && compact && o_.ranks == 1);
    // What the user fixed stays as given (the list holds one value of it).
    for (FitState& st : approx) {
      if (o_.master_weights_set) st.weights = o_.master_weights;
      if (o_.accumulated_grads_set) st.grads = o_.accumulated_grads;
    }
    const std::vector<FitState> states = o_.allow_approx ? approx : std::vector<FitState>{};
    // With --offload given and --offload-ahead not: the overlapped copies
    // first, and the step waiting for each where the larger window does
    // not fit.
    const std::vector<int> aheads = o_.offload_ahead < 0 ? fit_aheads() : std::vector<int>{};
    FitResult fr = search_fit(base, o_.batch, fit_data_, target, fcfg, profile_.flops_per_second, precisions, states,
                              {}, {}, aheads);
    // Nothing fits in memory: the same search with optimizer state, frozen
    // and then all weights in the offload tier (exact: the same numbers,
    // moved through a file), its I/O timed at the speed measured in the
    // offload directory.
    std::string tier_note;
    if (fr.fitting.empty()) {
      FitResult t = fit_offloaded(base, target, fcfg, precisions, states, tier_note);
      if (!t.fitting.empty()) fr = std::move(t);
      else if (t.smallest.total_bytes > 0 && t.smallest.total_bytes < fr.smallest.total_bytes) fr.smallest = t.smallest;  // (0: not tried)
    }
    if (fr.fitting.empty())
      throw BudgetError(nothing_fits_message(rep, budget, fr, fit_data_.size() > 1) + tier_note +
                        (o_.allow_approx ? "" : approximations_hint(base, target, fcfg, precisions, approx)));
    log_ << "memfit: the plan needs " << format_bytes(rep.total) << ", over the budget of " << format_bytes(budget.bytes)
         << "; fitting it (effective batch " << o_.batch << " unchanged):\n";
    if (!fr.fitting[0].policy.offload.empty()) log_ << "  " << tier_note << "\n";
    log_ << "  chosen:    " << fr.fitting[0].describe() << "\n";
    if (fr.fitting.size() > 1) log_ << "  runner-up: " << fr.fitting[1].describe() << "\n";
    TrainOptions next = with_policy(o_, fr.fitting[0].policy);
    next.auto_fit = false;
    next.fitted = true;
    return Replan{next};
  }
};

}  // namespace

std::variant<RunPlan, Replan> plan_run(const TrainOptions& o, std::ostream& log) { return Planner(o, log).run(); }

namespace {

// An offloaded training run keeps its offload file, committed every step
// (TierStore::Keep, persist/checkpoint.hpp's step records), where one process
// trains and the state it holds in memory is small beside it (a step
// record writes that state every step). --resume from a directory whose
// step record is newer than its checkpoint reopens the record's file.
void keep_offload_file(RunPlan& p, std::ostream& log) {
  constexpr size_t kRecordedMemory = size_t(64) << 20;
  const TrainOptions& o = p.options;
  Executor& ex = *p.train_ex;
  const std::string reopen = o.resume.empty() ? std::string() : step_record_file(o.resume);
  const Plan& plan = ex.plan();
  const size_t in_memory = plan.arena_bytes[static_cast<size_t>(Arena::Params)] +
                           plan.arena_bytes[static_cast<size_t>(Arena::OptState)];
  const bool offloaded = plan.arena_bytes[static_cast<size_t>(Arena::Tier)] > 0;
  if (!reopen.empty() && (!offloaded || o.ranks > 1))
    throw std::runtime_error("the latest state in " + o.resume + " is its " + kStepRecordName +
                             " (offloaded values in " + reopen + "): resume it as it ran (the same --offload, one "
                             "process), or remove that file to resume from its checkpoint");
  if (!offloaded || o.ranks > 1) return;
  if (in_memory > kRecordedMemory && reopen.empty()) {
    log << "memfit: " << format_bytes(in_memory) << " of state stays in memory: a killed run resumes from its last "
        << "checkpoint (--checkpoint-every), not from the step it was in\n";
    return;
  }
  ex.keep_tier(reopen);
}

}  // namespace

std::optional<Replan> allocate_plan(RunPlan& p, std::ostream& log) {
  const TrainOptions& o = p.options;
  Executor& ex = *p.train_ex;
  Executor& eval_ex = *p.eval_ex;
  try {
    if (o.inject_oom_at_step == 0) throw std::bad_alloc();
    if (!o.offload.empty() && o.offload != "none") {
      std::error_code ec;
      std::filesystem::create_directories(offload_dir(o), ec);  // (a failure is the store's error to name)
    }
    keep_offload_file(p, log);
    ex.allocate();
    if (ex.tier() && ex.tier()->kept())
      log << "memfit: offload file kept in " << offload_dir(o)
          << " (values a step rewrites have two copies: every step commits whole, and a run killed in a step resumes "
             "from the step before it)\n";
    else if (ex.tier() && ex.config().tier_keep)
      log << "memfit: the offload disk holds one copy of the offloaded values only: a killed run resumes from its "
             "last checkpoint\n";
    eval_ex.borrow(Arena::Params, ex.arena(Arena::Params));
    eval_ex.share_tier(ex.tier());
    if (p.eval_shares) eval_ex.borrow(Arena::Transient, ex.arena(Arena::Transient));
    eval_ex.allocate();
  } catch (const std::bad_alloc&) {
    if (o.ranks > 1)  // one rank alone cannot change the plan every rank runs
      throw std::runtime_error("out of memory allocating the plan (" + format_bytes(p.report.total) +
                               ") on this rank: give every rank a smaller plan (--memory, --batch or --accumulate)");
    auto h = halved(o);
    if (!h) throw std::runtime_error("out of memory allocating the plan (" + format_bytes(p.report.total) +
                                     ") and the micro-batch cannot be halved further");
    h->inject_oom_at_step = -1;
    log << "memfit: out of memory allocating the plan; re-planning with " << halved_note(*h) << "\n";
    return Replan{*h};
  }
  // The evaluation graph has the same parameters in the same order, so the
  // same offsets; check rather than trust.
  const Graph& tg = p.train_g->g;
  const Graph& eg = p.eval_g->g;
  for (ValueId v : eg.params()) {
    ValueId q = tg.find(eg.value(v).name);
    if (q == kNone || ex.data(q) != eval_ex.data(v))
      throw std::logic_error("evaluation graph parameter layout differs from training: " + eg.value(v).name);
  }
  return std::nullopt;
}

TrainResult planned_result(const RunPlan& p) {
  TrainResult r;
  r.report = p.report;
  r.budget = p.budget;
  r.planned_peak_bytes = p.report.total;
  r.budget_bytes = p.budget.bytes;
  return r;
}

size_t fit_target(size_t budget) {
  const size_t slack = budget / 50 + (size_t(4) << 20);
  return budget > slack ? budget - slack : 0;
}

std::string smallest_memory_flag(size_t need) {
  for (long tenths = static_cast<long>(static_cast<double>(need) / 104857.6);; ++tenths) {
    char v[32];
    std::snprintf(v, sizeof v, "%.1fMiB", static_cast<double>(tenths) / 10);
    const size_t b = parse_bytes(v).value_or(0);
    if (fit_target(b) >= need + kReplanBytes) return v;
  }
}

}  // namespace memfit::train
