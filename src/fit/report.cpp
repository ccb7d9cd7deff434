#include "fit/report.hpp"

#include <algorithm>
#include <map>
#include <cstdio>
#include <sstream>

#include "memfit/op_registry.hpp"
#include "memfit/optim.hpp"
#include "memfit/tier.hpp"
#include "runtime/device.hpp"
#include "base/json.hpp"

namespace memfit::train {

namespace {
bool is_update(const Node& n) {
  return op_def(n.op).traits.updates_parameters;
}

// The optimizer's policy and what its moments would take in fp32, from the
// update nodes (one, or one per parameter).
void describe_optimizer_state(const Graph& g, const Plan& p, MemoryReport& r) {
  for (const Node& n : g.nodes()) {
    if (n.phase != Phase::Update || !is_update(n)) continue;
    const std::string kind = n.attrs.s("kind");
    const std::string state = n.attrs.has("state") ? n.attrs.s("state") : "fp32";
    size_t moments = kind == "sgd" ? (n.attrs.f("momentum") != 0.0 ? 1 : 0) : 2;
    r.optstate_policy = kind == "adafactor" ? "adafactor factored" : moments ? state : "none";
    const size_t k = static_cast<size_t>(n.attrs.i("count"));
    for (size_t t = 0; t < k; ++t) {
      const int64_t elems = numel(g.value(n.inputs[t]).shape);
      r.trainable += elems;
      const size_t a = p.options.alignment;
      r.optstate_fp32 += moments * ((static_cast<size_t>(elems) * 4 + a - 1) / a * a);
    }
  }
}

// Each arena is its own mapping: resident memory comes in whole pages. The
// activations arena is counted in pages (the rounding shows as
// fragmentation); the persistent classes keep their exact bytes (the
// rounding there is under 4 KiB each).
size_t pages(size_t b) { return (b + 4095) / 4096 * 4096; }
size_t align_up(size_t b, size_t a) { return (b + a - 1) / a * a; }
}  // namespace

std::vector<ArenaBuffer> arena_buffers(const Graph& g, const Plan& p) {
  // A buffer is a parameter gradient's when its alias set holds one (an
  // in-place sum of a tied weight's contributions shares its first part's).
  const size_t nn = g.num_nodes();
  std::vector<bool> grad_buffer(g.num_values(), false);
  for (size_t v = 0; v < g.num_values(); ++v)
    if (is_param_grad(g, static_cast<ValueId>(v)) && p.values[v].arena == Arena::Transient)
      grad_buffer[static_cast<size_t>(p.values[v].root)] = true;
  std::vector<ArenaBuffer> bufs;
  for (size_t v = 0; v < g.num_values(); ++v) {
    const Placement& pl = p.values[v];
    if (pl.arena != Arena::Transient || pl.root != static_cast<ValueId>(v) || pl.bytes == 0) continue;
    const Value& val = g.value(static_cast<ValueId>(v));
    bool fwd = val.producer >= 0 && (g.node(val.producer).phase == Phase::Forward);
    bool into_bwd = pl.last >= 0 && pl.last < static_cast<int32_t>(nn) &&
                    g.node(static_cast<NodeId>(pl.last)).phase == Phase::Backward;
    bool is_saved = fwd && into_bwd;
    ArenaBuffer b;
    b.name = val.name;
    b.op = val.producer >= 0 ? g.node(val.producer).op : "input";
    b.layer = val.producer >= 0 ? g.node(val.producer).layer : "";
    const bool tier_copy = val.producer >= 0 && op_def(g.node(val.producer).op).traits.tier_io == OpTraits::TierIo::Load;
    b.kind = grad_buffer[v] ? "gradient" : tier_copy ? "tier copy" : is_saved ? "saved" : "transient";
    b.offset = pl.offset;
    b.bytes = pl.bytes;
    b.first = std::max(pl.first, 0);
    b.last = std::min<int32_t>(pl.last, static_cast<int32_t>(nn));
    bufs.push_back(std::move(b));
  }
  for (size_t k = 0; k < nn; ++k) {
    if (!p.scratch[k].bytes) continue;
    const Node& n = g.node(static_cast<NodeId>(k));
    bufs.push_back({"scratch of " + n.op, n.op, n.layer, "scratch", p.scratch[k].offset, p.scratch[k].bytes,
                    static_cast<int32_t>(k), static_cast<int32_t>(k)});
  }
  return bufs;
}

MemoryReport make_report(const Graph& g, const Plan& p, const MemoryInputs& in) {
  MemoryReport r;
  r.baseline = in.baseline;
  r.params = p.arena_bytes[static_cast<size_t>(Arena::Params)];
  r.grads = p.arena_bytes[static_cast<size_t>(Arena::Grads)];
  r.optstate = p.arena_bytes[static_cast<size_t>(Arena::OptState)];
  r.inputs = p.arena_bytes[static_cast<size_t>(Arena::Inputs)];
  r.arena = pages(p.arena_bytes[static_cast<size_t>(Arena::Transient)]);
  r.data = in.data_bytes;
  r.eval = in.eval_bytes;
  r.data_in = in.data_in;
  r.data_note = in.data_note;
  r.data_cache = in.data_cache;
  describe_optimizer_state(g, p, r);
  size_t half = 0;
  for (ValueId v : g.params())
    if (g.value(v).dtype == DType::bf16) half += g.value(v).bytes();
  if (half) {
    r.master_weights = "bf16";
    r.params_fp32 = r.params + half;
  }
  for (ValueId v : g.params()) {
    const ValueId gr = g.value(v).grad;
    if (gr != kNone && g.value(gr).cls == VClass::ParamGrad && g.value(gr).dtype == DType::bf16) {
      r.accumulated_grads = "bf16";
      break;
    }
  }

  // Live transient bytes at every node, by kind; the report shows the peak.
  const size_t nn = g.num_nodes();
  for (size_t v = 0; v < g.num_values(); ++v)
    if (is_param_grad(g, static_cast<ValueId>(v))) r.grads_unfused += align_up(p.values[v].bytes, p.options.alignment);
  const std::vector<ArenaBuffer> arena = arena_buffers(g, p);
  std::vector<size_t> saved(nn + 1, 0), trans(nn + 1, 0), grad(nn + 1, 0), scr(nn + 1, 0), tcopy(nn + 1, 0);
  std::vector<BufferInfo> bufs;
  for (const ArenaBuffer& b : arena) {
    auto& arr = b.kind == "gradient"    ? grad
                : b.kind == "saved"     ? saved
                : b.kind == "scratch"   ? scr
                : b.kind == "tier copy" ? tcopy
                                        : trans;
    for (int32_t t = b.first; t <= b.last; ++t) arr[static_cast<size_t>(t)] += b.bytes;
    bufs.push_back({b.name, b.layer, b.bytes, b.kind});
  }
  r.grads_sharded = std::any_of(g.nodes().begin(), g.nodes().end(), [](const Node& n) { return op_def(n.op).traits.reduces_across_ranks; });
  r.update_in_backward =
      !r.grads_sharded && std::any_of(arena.begin(), arena.end(), [](const ArenaBuffer& b) { return b.kind == "gradient"; });
  r.grads_live = *std::max_element(grad.begin(), grad.end());
  size_t best = 0, at = 0;
  for (size_t k = 0; k <= nn; ++k)
    if (saved[k] + trans[k] + grad[k] + scr[k] + tcopy[k] > best) {
      best = saved[k] + trans[k] + grad[k] + scr[k] + tcopy[k];
      at = k;
    }
  // The same buffers again, those live at the peak, by producing op.
  std::map<std::string, size_t> by_op;
  for (const ArenaBuffer& b : arena)
    if (b.first <= static_cast<int32_t>(at) && static_cast<int32_t>(at) <= b.last) by_op[b.kind == "scratch" ? b.name : b.op] += b.bytes;
  r.peak_by_op.assign(by_op.begin(), by_op.end());
  std::stable_sort(r.peak_by_op.begin(), r.peak_by_op.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  r.saved = saved[at];
  r.transient = trans[at];
  r.arena_grads = grad[at];
  r.scratch = scr[at];
  r.tier_copies = tcopy[at];
  r.tier = p.arena_bytes[static_cast<size_t>(Arena::Tier)];
  r.tier_read = p.tier_read_bytes;
  r.tier_written = p.tier_written_bytes;
  r.tier_buffer = r.tier ? kTierIoBufferBytes : 0;
  r.offload_dir = in.offload_dir;
  r.fragmentation = r.arena > best ? r.arena - best : 0;  // includes the page rounding
  std::stable_sort(bufs.begin(), bufs.end(), [](const BufferInfo& a, const BufferInfo& b) { return a.bytes > b.bytes; });
  if (bufs.size() > 10) bufs.resize(10);
  r.largest = bufs;
  r.library_heap = std::max(p.library_heap_bytes, in.eval_library_heap);
  r.rounding = pages(r.params) - r.params + pages(r.grads) - r.grads + pages(r.optstate) - r.optstate +
               pages(r.inputs) - r.inputs;
  const size_t persistent = r.params + r.grads + r.optstate + r.inputs + r.rounding + r.tier_buffer;
  r.comm = in.comm_bytes;
  r.rank = in.rank;
  r.ranks = in.ranks;
  r.sharded = in.sharded;
  r.total = r.baseline + persistent + r.arena + r.library_heap + r.data + r.eval + r.comm;
  r.import_bytes = in.import_bytes;
  r.total = std::max(r.total, r.baseline + persistent + in.import_bytes + r.data);
  r.naive = r.baseline + persistent + pages(p.naive_transient_bytes) + r.library_heap + r.data + r.eval + r.comm;
  if (!in.device.empty()) {
    // The arenas (and evaluation's) in the device's memory; the rest on the host.
    r.device = in.device;
    r.host_staging = in.host_staging;
    r.host_budget = in.host_budget;
    r.host_budget_source = in.host_budget_source;
    // (The offload tier's I/O buffer is the host's: the device's copies
    // reach its memory from there.)
    r.host = std::max(r.baseline + r.library_heap + r.data + r.comm + r.host_staging + r.tier_buffer,
                      r.baseline + in.import_bytes + r.data);
    r.total = persistent - r.tier_buffer + r.arena + r.eval;
    r.naive = persistent - r.tier_buffer + pages(p.naive_transient_bytes) + r.eval;
  }
  return r;
}

void describe_machine(MemoryReport& r, const Device& dev, DType precision) {
  const DeviceInfo m = dev.info();
  r.cpu_model = m.model;
  r.onednn = m.library;
  r.onednn_isa = m.library_isa;
  r.vector_isa = m.vector_isa;
  r.bf16_compute = m.bf16_compute;
  r.products = dev.product_path(precision);
  r.bf16_step_cost = dev.storage_cost(DType::bf16);
}

double reuse_factor(const MemoryReport& r) {
  const size_t naive_arena = r.naive - (r.total - r.arena);
  return r.arena ? static_cast<double>(naive_arena) / static_cast<double>(r.arena) : 1.0;
}

namespace {
void row(std::ostringstream& o, const char* name, size_t bytes, const char* note = "") {
  char buf[160];
  std::snprintf(buf, sizeof buf, "  %-22s %12s  ", name, format_bytes(bytes).c_str());
  o << buf << note << "\n";  // the note may be long (a cache path)
}

// The optimizer state row's note: the policy and its effect.
std::string optstate_note(const MemoryReport& r) {
  if (r.optstate_policy.empty() || r.optstate_policy == "none" || r.trainable == 0) return "";
  char buf[200];
  const double per = static_cast<double>(r.optstate) / static_cast<double>(r.trainable);
  if (r.optstate_policy == "fp32")
    std::snprintf(buf, sizeof buf, "fp32, %.2f B/param", per);
  else
    std::snprintf(buf, sizeof buf, "%s, %.2f B/param (fp32%s would be %s)", r.optstate_policy.c_str(), per,
                  r.optstate_policy == "adafactor factored" ? " Adam" : "", format_bytes(r.optstate_fp32).c_str());
  return buf;
}

// The offload row's I/O time: at the speed measured in its directory,
// against the step's compute.
std::string tier_speed_note(const MemoryReport& r) {
  if (r.tier_io_seconds <= 0) return "";
  char buf[200];
  const double compute = r.predicted_step_seconds - r.tier_exposed_seconds;
  std::snprintf(buf, sizeof buf, ", ~%.2f s at %.0f / %.0f MB/s measured there", r.tier_io_seconds,
                r.tier_read_bps / 1e6, r.tier_write_bps / 1e6);
  std::string s = buf;
  if (compute > 0 && r.tier_ahead > 0)
    std::snprintf(buf, sizeof buf, " (compute ~%.2f s; moved %d ahead on an I/O thread, ~%.2f s not hidden)", compute,
                  r.tier_ahead, r.tier_exposed_seconds);
  else if (compute > 0)
    std::snprintf(buf, sizeof buf, " (compute ~%.2f s; not overlapped)", compute);
  else
    buf[0] = 0;
  return s + buf;
}
}  // namespace

std::vector<MemorySpace> memory_spaces(const MemoryReport& r, const Budget& b) {
  std::vector<MemorySpace> s;
  if (!r.device.empty()) {
    s.push_back({r.device + " memory", "device", r.total, b.bytes, b.describe(),
                 "parameters, gradients, state, inputs, activations, evaluation"});
    s.push_back({"host RAM", "host", r.host, r.host_budget,
                 r.host_budget ? r.host_budget_source : "not planned against a budget",
                 "baseline, data pipeline, checkpoint staging"});
  } else {
    s.push_back({"host RAM", "host", r.total, b.bytes, b.describe(), "everything the run holds in memory"});
  }
  if (r.tier)
    s.push_back({"disk", "disk", r.tier, r.tier_disk_available,
                 r.tier_disk_available ? "available in " + r.offload_dir : "the space in " + r.offload_dir + " is not known",
                 "the offload file (a kept file adds a second copy of what a step rewrites where the disk has room)"});
  return s;
}

std::string format_report(const MemoryReport& r, const Budget& b, const std::string& model, int64_t batch,
                          const std::string& optimizer, const std::string& backend) {
  std::ostringstream o;
  o << "memfit plan: " << model << ", batch " << batch << ", " << optimizer << ", " << backend << "\n";
  if (!r.device.empty()) {
    o << "  " << r.device << ": " << r.cpu_model << " (" << r.onednn_isa << "); " << r.onednn << "\n";
  } else if (!r.cpu_model.empty()) {
    o << "  cpu: " << r.cpu_model << "; oneDNN " << r.onednn << " " << r.onednn_isa << " ("
      << (r.bf16_compute ? "bf16 compute" : "no bf16 compute") << "); memfit loops " << r.vector_isa << "\n";
    if (!r.products.empty())
      o << "  " << precision_name(r.policy ? r.policy->precision : DType::f32) << " convolutions and linear layers: "
        << r.products << "\n";
  }
  if (!r.speed_source.empty()) {
    char buf[200];
    std::snprintf(buf, sizeof buf, "  step time: ~%.2f s predicted (%.1f GFLOP at %.1f GFLOP/s, %s for this machine",
                  r.predicted_step_seconds, r.step_flops / 1e9, r.flops_per_second / 1e9, r.speed_source.c_str());
    o << buf;
    if (r.tier_exposed_seconds > 0) {
      std::snprintf(buf, sizeof buf, ", + %.2f s offload I/O not overlapped", r.tier_exposed_seconds);
      o << buf;
    }
    o << ")\n";
  }
  row(o, "baseline", r.baseline, "measured: binary, libraries, kernel code, threads");
  const std::string params_note =
      r.master_weights == "bf16" ? "bf16 master weights (vectors fp32; fp32 would be " + format_bytes(r.params_fp32) + ")" : "";
  row(o, "parameters", r.params, params_note.c_str());
  if (r.update_in_backward)
    row(o, "gradients", r.grads, ("in the activations arena (update in backward): at most " + format_bytes(r.grads_live) +
                                  " live, not " + format_bytes(r.grads_unfused)).c_str());
  else if (r.grads_sharded)
    row(o, "gradients", r.grads, ("rank " + std::to_string(r.rank) + "'s shard of " + std::to_string(r.ranks) +
                                  " (ZeRO-2); the others' in the activations arena until their reduce: at most " +
                                  format_bytes(r.grads_live) + " live, not " + format_bytes(r.grads_unfused - r.grads))
                                     .c_str());
  else if (r.accumulated_grads == "bf16")
    row(o, "gradients", r.grads, ("accumulated in bf16, rounded stochastically (fp32 would be " + format_bytes(2 * r.grads) + ")").c_str());
  else
    row(o, "gradients", r.grads);
  {
    std::string note = optstate_note(r);
    if (r.sharded)
      note = "rank " + std::to_string(r.rank) + "'s shard of " + std::to_string(r.ranks) +
             (r.grads_sharded ? " (ZeRO-2)" : " (ZeRO-1)") +
             (note.empty() ? "" : "; " + note);
    row(o, "optimizer state", r.optstate, note.c_str());
  }
  row(o, "activations arena", r.arena, "one planned arena; at its peak:");
  row(o, "  saved for backward", r.saved);
  row(o, "  transient", r.transient);
  if (r.update_in_backward) row(o, "  gradients", r.arena_grads, "parameter gradients until their update");
  if (r.grads_sharded) row(o, "  gradients", r.arena_grads, "other ranks' gradients until their reduce");
  if (r.tier) row(o, "  tier copies", r.tier_copies, "offloaded values read in for their layer");
  row(o, "  kernel scratch", r.scratch);
  row(o, "  fragmentation", r.fragmentation);
  if (!r.peak_by_op.empty()) {
    o << "    at the peak, by op:";
    for (size_t i = 0; i < r.peak_by_op.size() && i < 6; ++i)
      o << (i ? ", " : " ") << r.peak_by_op[i].first << " " << format_bytes(r.peak_by_op[i].second);
    o << "\n";
  }
  if (r.library_heap) row(o, "library heap", r.library_heap, "oneDNN's gemm packing inside one matmul (no brgemm on this CPU)");
  row(o, "batch inputs", r.inputs);
  if (r.tier) {
    row(o, "offload I/O buffer", r.tier_buffer,
        r.device.empty() ? "what the offload file's reads and writes pass through"
                         : "host memory: what the offload file's reads and writes pass through");
    row(o, "offload tier (disk)", r.tier,
        ("not memory: in " + (r.offload_dir.empty() ? std::string("the offload directory") : r.offload_dir) +
         "; a step reads " + format_bytes(r.tier_read) + " and writes " + format_bytes(r.tier_written) +
         tier_speed_note(r))
            .c_str());
  }
  if (r.ranks > 1)
    row(o, "communication", r.comm,
        ("MPI's buffers for one piece of the gradients' reduction (" + std::to_string(r.ranks) + " ranks)").c_str());
  row(o, "data pipeline", r.data, r.data_note.empty() ? "dataset in memory + loader buffers" : r.data_note.c_str());
  row(o, "evaluation", r.eval, r.eval ? "" : "runs in the activations arena");
  if (r.import_bytes)
    row(o, "imported weights", r.import_bytes,
        "the model file's, freed once the parameters hold them (before the first step: the peak is at least baseline + "
        "parameters, gradients, state + these)");
  o << "  ------------------------------------\n";
  if (!r.device.empty()) {
    // Baseline, data pipeline and staging are host memory: apart from the device's budget.
    if (r.host_staging) row(o, "checkpoint staging", r.host_staging, "pieces of the state read while a checkpoint is written");
    row(o, "host memory", r.host,
        r.host_budget ? "baseline, data pipeline and staging in RAM: the host's own budget"
                      : "baseline, data pipeline and staging in RAM: not in the device's budget");
    row(o, r.device == "cuda" ? "predicted GPU peak" : "predicted device peak", r.total,
        "parameters, gradients, state, inputs, activations, evaluation");
  } else {
    row(o, "predicted peak", r.total);
  }
  char buf[200];
  std::snprintf(buf, sizeof buf, "  %-22s %12s  (%s)\n", "budget", format_bytes(b.bytes).c_str(), b.describe().c_str());
  o << buf;
  std::snprintf(buf, sizeof buf, "  without planning: %s (reuse factor %.2fx on activations)\n",
                format_bytes(r.naive).c_str(), reuse_factor(r));
  o << buf;
  // Where the bytes go, space by space, with each one's budget (shown when
  // the plan spans more than one).
  const std::vector<MemorySpace> spaces = memory_spaces(r, b);
  if (spaces.size() > 1) {
    o << "  memory spaces:\n";
    for (const MemorySpace& m : spaces) {
      std::snprintf(buf, sizeof buf, "    %-20s %12s", m.name.c_str(), format_bytes(m.bytes).c_str());
      o << buf;
      if (m.budget) o << " of " << format_bytes(m.budget) << (m.fits() ? "" : ", DOES NOT FIT,");
      o << " (" << m.source << ")\n";
    }
  }
  return o.str();
}

std::string largest_classes(const MemoryReport& r, size_t k) {
  std::vector<std::pair<size_t, const char*>> c{{r.arena, "activations"}, {r.params, "parameters"},
                                                {r.grads, "gradients"},  {r.optstate, "optimizer state"},
                                                {r.data, "data"},        {r.baseline, "baseline"},
                                                {r.inputs, "inputs"},    {r.eval, "evaluation"}};
  std::stable_sort(c.begin(), c.end(), [](auto& a, auto& b) { return a.first > b.first; });
  std::string s;
  for (size_t i = 0; i < k && i < c.size(); ++i) s += (i ? ", " : "") + std::string(c[i].second) + " " + format_bytes(c[i].first);
  return s;
}

std::string over_budget_message(const MemoryReport& r, const Budget& b) {
  const size_t mib = size_t(1) << 20;
  std::ostringstream m;
  m << "predicted peak " << format_bytes(r.total) << " (" << r.total << " bytes) is over the budget of "
    << format_bytes(b.bytes) << " (" << b.describe() << "); largest parts: " << largest_classes(r, 3)
    << ". Nothing was allocated. The smallest budget that fits this plan is " << format_bytes_up(r.total)
    << "; --memory " << (r.total + mib - 1) / mib + 1 << "MiB leaves room for the baseline's variation between runs";
  if (b.margin) m << " (a limit of at least " << format_bytes_up(r.total + b.margin) << " with the default margin)";
  m << "; or lower --batch, or keep the batch and split it with --accumulate.";
  return m.str();
}

std::string host_over_budget_message(const MemoryReport& r) {
  const size_t mib = size_t(1) << 20;
  std::ostringstream m;
  m << "the host RAM this plan holds beside the " << r.device << "'s memory, " << format_bytes(r.host) << " ("
    << r.host << " bytes: baseline " << format_bytes(r.baseline) << ", data pipeline " << format_bytes(r.data);
  if (r.host_staging) m << ", checkpoint staging " << format_bytes(r.host_staging);
  m << "), is over the host's budget of " << format_bytes(r.host_budget) << " (" << r.host_budget_source
    << "); the device's memory is not what runs out. Nothing was allocated. The smallest host budget that fits is "
    << format_bytes_up(r.host) << " (--memory " << (r.host + mib - 1) / mib + 1 << "MiB)";
  if (r.data_in == "memory") m << "; or stream the dataset from disk (--data-in disk)";
  m << ".";
  return m.str();
}

std::string report_json(const MemoryReport& r, const Budget& b) {
  Json o;
  o["total_bytes"] = r.total;
  if (!r.device.empty()) {
    o["device"] = r.device;
    o["host_bytes"] = r.host;
    o["host_budget_bytes"] = r.host_budget;
  }
  o["naive_bytes"] = r.naive;
  o["reuse_factor"] = reuse_factor(r);
  o["budget_bytes"] = b.bytes;
  o["budget_source"] = b.describe();
  o["budget_limit_bytes"] = b.limit;
  o["budget_margin_bytes"] = b.margin;
  o["budget_others_bytes"] = b.others;
  Json spaces = Json::array();
  for (const MemorySpace& m : memory_spaces(r, b))
    spaces.push_back({{"name", m.name}, {"kind", m.kind}, {"bytes", m.bytes}, {"budget_bytes", m.budget},
                      {"budget_source", m.source}, {"holds", m.holds}, {"fits", m.fits()}});
  o["memory_spaces"] = spaces;
  o["by_class"] = {{"baseline", r.baseline},
                   {"imported_weights", r.import_bytes},
                   {"parameters", r.params},
                   {"gradients", r.grads},
                   {"optimizer_state", r.optstate},
                   {"activations_arena", r.arena},
                   {"saved_activations", r.saved},
                   {"transient_activations", r.transient},
                   {"arena_gradients", r.arena_grads},
                   {"kernel_scratch", r.scratch},
                   {"fragmentation", r.fragmentation},
                   {"library_heap", r.library_heap},
                   {"inputs", r.inputs},
                   {"arena_rounding", r.rounding},
                   {"data_pipeline", r.data},
                   {"evaluation", r.eval},
                   {"communication", r.comm}};
  if (r.ranks > 1) {
    o["rank"] = r.rank;
    o["ranks"] = r.ranks;
    o["optimizer_sharded"] = r.sharded;
  }
  if (r.grads_sharded) o["gradients_sharded"] = true;
  if (r.tier)
    o["offload"] = {{"bytes", r.tier},
                    {"read_per_step", r.tier_read},
                    {"written_per_step", r.tier_written},
                    {"copies_at_peak", r.tier_copies},
                    {"io_buffer", r.tier_buffer},
                    {"dir", r.offload_dir},
                    {"policy", r.policy ? r.policy->offload : std::string()}};
  if (r.tier && r.tier_io_seconds > 0) {
    o["offload"]["read_bytes_per_second"] = r.tier_read_bps;
    o["offload"]["write_bytes_per_second"] = r.tier_write_bps;
    o["offload"]["predicted_io_seconds"] = r.tier_io_seconds;
    o["offload"]["predicted_exposed_io_seconds"] = r.tier_exposed_seconds;
    o["offload"]["ahead"] = r.tier_ahead;
  }
  if (r.update_in_backward || r.grads_sharded) {
    o["gradients_unfused_bytes"] = r.grads_unfused;
    o["gradients_live_bytes"] = r.grads_live;
  }
  if (!r.optstate_policy.empty())
    o["optimizer_state"] = {{"policy", r.optstate_policy},
                            {"bytes", r.optstate},
                            {"trainable_parameters", r.trainable},
                            {"bytes_per_parameter", r.trainable ? static_cast<double>(r.optstate) / static_cast<double>(r.trainable) : 0.0},
                            {"fp32_bytes", r.optstate_fp32}};
  o["master_weights"] = r.master_weights;
  o["accumulated_grads"] = r.accumulated_grads;
  if (r.policy) {
    o["precision"] = precision_name(r.policy->precision);
    o["saved_precision"] = precision_name(r.policy->saved);
    o["micro_batch"] = r.policy->batch;
    o["accumulate"] = r.policy->accumulation;
    o["recompute"] = r.policy->recompute;
    o["update_in_backward"] = r.update_in_backward;
    o["fitted"] = r.fitted;
  }
  if (!r.cpu_model.empty()) {
    Json cpu = {{"model", r.cpu_model},
                {"onednn", r.onednn},
                {"onednn_isa", r.onednn_isa},
                {"bf16_compute", r.bf16_compute},
                {"vector_isa", r.vector_isa},
                {"bf16_step_cost", r.bf16_step_cost}};
    if (!r.products.empty()) cpu["products"] = r.products;
    if (!r.speed_source.empty()) {
      cpu["flops_per_second"] = r.flops_per_second;
      cpu["speed_source"] = r.speed_source;
    }
    o["cpu"] = cpu;
  }
  if (!r.speed_source.empty()) {
    o["step_flops"] = r.step_flops;
    o["predicted_step_seconds"] = r.predicted_step_seconds;
  }
  o["data_in"] = r.data_in.empty() ? "image-folder" : r.data_in;
  if (!r.data_cache.empty()) o["data_cache"] = r.data_cache;
  Json largest = Json::array();
  for (const BufferInfo& buf : r.largest)
    largest.push_back({{"name", buf.name}, {"layer", buf.layer}, {"bytes", buf.bytes}, {"kind", buf.kind}});
  o["largest"] = largest;
  Json by_op = Json::object();
  for (const auto& [op, bytes] : r.peak_by_op) by_op[op] = bytes;
  o["peak_by_op"] = by_op;
  return json_line(o);
}

}  // namespace memfit::train
