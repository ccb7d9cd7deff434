#include "dist/data_parallel.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "memfit/op_registry.hpp"
#include "memfit/optim.hpp"
#include "memfit/rng.hpp"
#include "runtime/device.hpp"
#include "compile/step_graph.hpp"

namespace memfit::train {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kTestsPerNode = 8;

std::byte* base(Executor& ex, Arena a) { return static_cast<std::byte*>(ex.arena(a).ptr); }

}  // namespace

DataParallel::DataParallel(Executor& ex, dist::Comm& comm, bool sharded)
    : ex_(ex), comm_(comm), sharded_(sharded && comm.distributed()) {
  if (!comm_.distributed()) return;
  staged_ = !ex.device().host_addressable();
  overlap_ = !staged_;
  const Graph& g = ex.graph();
  const Plan& plan = ex.plan();
  const std::vector<ValueId> ps = updated_params(g);
  for (const Node& n : g.nodes()) graph_reduces_ = graph_reduces_ || op_def(n.op).traits.reduces_across_ranks;
  if (graph_reduces_ && !sharded_) throw std::logic_error("the step reduces sharded gradients, but the optimizer state is whole");
  for (ValueId p : ps) {
    const ValueId gr = g.value(p).grad;
    const Placement& pl = plan.values[static_cast<size_t>(gr)];
    if (graph_reduces_) continue;  // grad_reduce checks its own (f32)
    if (pl.arena != Arena::Grads || g.value(gr).dtype != DType::f32)
      throw std::logic_error("data parallelism needs every gradient in f32 in the gradient arena; " + g.value(p).name +
                             "'s is not");
  }
  for (size_t v = 0; v < g.num_values(); ++v) {
    const Value& val = g.value(static_cast<ValueId>(v));
    const Placement& pl = plan.values[v];
    if (val.cls == VClass::Buffer && pl.root == static_cast<ValueId>(v))
      buffers_.push_back({pl.offset, pl.bytes, val.dtype == DType::f32 && ex.elem_size(static_cast<ValueId>(v)) == 4});
  }
  if (sharded_) {
    // Rank r's runs: its parameters' gradients, and the parameter arena from
  // its first parameter to the next rank's first (with the buffers made in
  // between: a layer's statistics go with its weights).
  const std::vector<size_t> b = shard_bounds(g, comm_.size());
  const size_t R = static_cast<size_t>(comm_.size());
  grads_.resize(R);
  params_.resize(R);
  for (size_t r = 0; r < R; ++r) {
    Span gs{SIZE_MAX, 0};
    for (size_t i = b[r]; i < b[r + 1] && !graph_reduces_; ++i) {
      const Placement& pl = plan.values[static_cast<size_t>(g.value(ps[i]).grad)];
      gs.begin = std::min(gs.begin, pl.offset);
      gs.end = std::max(gs.end, pl.offset + pl.bytes);
    }
    grads_[r] = gs;
    params_[r].begin = r == 0 ? 0 : plan.values[static_cast<size_t>(ps[b[r]])].offset;
  }
  for (size_t r = 0; r < R; ++r)
    params_[r].end = r + 1 < R ? params_[r + 1].begin : plan.arena_bytes[static_cast<size_t>(Arena::Params)];
  for (size_t r = 1; r < R; ++r)
    if ((!graph_reduces_ && grads_[r].begin < grads_[r - 1].end) || params_[r].begin < params_[r - 1].end)
      throw std::logic_error("the ranks' shards of the parameter and gradient arenas overlap");
  }
  if (!graph_reduces_) make_buckets();
}

void DataParallel::make_buckets() {
  const Graph& g = ex_.graph();
  const Plan& plan = ex_.plan();
  const size_t end = update_begin(g);
  // The gradients, by offset in their arena, each with the last node before
  // the update that writes or reads its bytes.
  struct Grad {
    size_t begin, end, ready;
  };
  std::vector<Grad> gs;
  for (ValueId p : updated_params(g)) {
    const Placement& pl = plan.values[static_cast<size_t>(g.value(p).grad)];
    gs.push_back({pl.offset, pl.offset + pl.bytes, 0});
  }
  std::sort(gs.begin(), gs.end(), [](const Grad& a, const Grad& b) { return a.begin < b.begin; });
  for (size_t k = 0; k < end; ++k) {
    const Node& n = g.node(static_cast<NodeId>(k));
    auto touch = [&](ValueId v) {
      const Placement& pl = plan.values[static_cast<size_t>(v)];
      if (pl.arena != Arena::Grads || pl.bytes == 0) return;
      for (Grad& gr : gs)
        if (gr.begin < pl.offset + pl.bytes && pl.offset < gr.end) gr.ready = k;
    };
    for (ValueId v : n.inputs) touch(v);
    for (ValueId v : n.outputs) touch(v);
  }
  // Buckets: consecutive whole gradients up to one piece (a larger one in
  // pieces of its own), never across a shard's edge.
  auto owner = [&](size_t offset) {
    if (!sharded_) return -1;
    for (size_t r = 0; r < grads_.size(); ++r)
      if (offset >= grads_[r].begin && offset < grads_[r].end) return static_cast<int>(r);
    throw std::logic_error("a gradient outside every rank's shard");
  };
  for (size_t i = 0; i < gs.size();) {
    const int root = owner(gs[i].begin);
    if (gs[i].end - gs[i].begin > dist::kPieceBytes) {
      for (size_t b = gs[i].begin; b < gs[i].end; b += dist::kPieceBytes)
        buckets_.push_back({b, std::min(gs[i].end, b + dist::kPieceBytes), root, gs[i].ready});
      ++i;
      continue;
    }
    Bucket bk{gs[i].begin, gs[i].end, root, gs[i].ready};
    for (++i; i < gs.size() && owner(gs[i].begin) == root && gs[i].end - bk.begin <= dist::kPieceBytes; ++i) {
      bk.end = gs[i].end;
      bk.ready = std::max(bk.ready, gs[i].ready);
    }
    buckets_.push_back(bk);
  }
  // Start order: as backward readies them (ties: by offset). The same on
  // every rank (the same plan), as MPI needs.
  std::stable_sort(buckets_.begin(), buckets_.end(), [](const Bucket& a, const Bucket& b) { return a.ready < b.ready; });
}

template <class F>
void DataParallel::on_host(Arena a, size_t begin, size_t end, bool write_back, F&& f) {
  if (!staged_) {
    f(base(ex_, a) + begin, end - begin);
    return;
  }
  if (stage_.empty()) stage_.resize(dist::kPieceBytes);
  for (size_t at = begin; at < end; at += dist::kPieceBytes) {
    const size_t n = std::min(dist::kPieceBytes, end - at);
    ex_.read_arena(a, at, stage_.data(), n);
    f(stage_.data(), n);
    if (write_back) ex_.write_arena(a, at, stage_.data(), n);
  }
}

void DataParallel::reduce_sum(float* p, size_t n, int root) {
  const auto t0 = Clock::now();
  comm_.reduce_sum(p, n, root);
  seconds_ += std::chrono::duration<double>(Clock::now() - t0).count();
}

void DataParallel::start(const Bucket& b) {
  float* p = reinterpret_cast<float*>(base(ex_, Arena::Grads) + b.begin);
  const size_t n = (b.end - b.begin) / sizeof(float);
  if (b.root < 0) comm_.start_allreduce_sum(p, n);
  else comm_.start_reduce_sum(p, n, b.root);
}

void DataParallel::run_backward(size_t end, const kernels::StepContext& ctx) {
  next_ = 0;
  overlapped_ = 0;
  if (!active() || !overlap_ || buckets_.empty()) {
    ex_.run_nodes(0, end, ctx);
    return;
  }
  size_t k = 0;
  while (k < end) {
    const auto t0 = Clock::now();
    bool idle = comm_.progress();
    // A reduction advances one round of its schedule per test while the
    // messages of that round have arrived: several tests between two nodes.
    for (int i = 1; i < kTestsPerNode && !idle; ++i) idle = comm_.progress();
    seconds_ += std::chrono::duration<double>(Clock::now() - t0).count();
    if (!idle) {
      // A bucket in flight: one node at a time, letting it advance between.
      ex_.run_nodes(k, k + 1, ctx);
      ++k;
      continue;
    }
    if (next_ < buckets_.size() && buckets_[next_].ready < k) {
      const auto t1 = Clock::now();
      start(buckets_[next_++]);
      seconds_ += std::chrono::duration<double>(Clock::now() - t1).count();
      ++overlapped_;
      continue;
    }
    // Nothing in flight: run up to the next bucket's ready node.
    const size_t to = next_ < buckets_.size() ? std::min(end, buckets_[next_].ready + 1) : end;
    ex_.run_nodes(k, to, ctx);
    k = to;
  }
}

void DataParallel::reduce_gradients() {
  if (!active() || graph_reduces_) return;
  if (next_ > 0) {  // run_backward() started the first buckets
    for (; next_ < buckets_.size(); ++next_) {
      comm_.wait();
      start(buckets_[next_]);
    }
    comm_.wait();
    next_ = 0;
    return;
  }
  auto floats = [](std::byte* p) { return reinterpret_cast<float*>(p); };
  if (!sharded_) {
    on_host(Arena::Grads, 0, ex_.plan().arena_bytes[static_cast<size_t>(Arena::Grads)], true,
            [&](std::byte* p, size_t n) { comm_.allreduce_sum(floats(p), n / sizeof(float)); });
    return;
  }
  for (size_t r = 0; r < grads_.size(); ++r)
    on_host(Arena::Grads, grads_[r].begin, grads_[r].end, true, [&](std::byte* p, size_t n) {
      comm_.reduce_sum(floats(p), n / sizeof(float), static_cast<int>(r));
    });
}

void DataParallel::share_parameters() {
  if (!active()) return;
  const float inv = 1.0f / static_cast<float>(comm_.size());
  for (const Buffer& b : buffers_) {
    if (!b.f32) continue;
    on_host(Arena::Params, b.offset, b.offset + b.bytes, true, [&](std::byte* p, size_t bytes) {
      float* x = reinterpret_cast<float*>(p);
      const size_t n = bytes / sizeof(float);
      comm_.allreduce_sum(x, n);
      for (size_t i = 0; i < n; ++i) x[i] *= inv;
    });
  }
  auto broadcast = [&](Arena a, size_t begin, size_t end, int root) {
    on_host(a, begin, end, true, [&](std::byte* p, size_t n) { comm_.broadcast(p, n, root); });
  };
  if (!sharded_) {
    for (const Buffer& b : buffers_) broadcast(Arena::Params, b.offset, b.offset + b.bytes, 0);
    return;
  }
  for (size_t r = 0; r < params_.size(); ++r) broadcast(Arena::Params, params_[r].begin, params_[r].end, static_cast<int>(r));
}

double DataParallel::mean(double v) {
  if (!active()) return v;
  comm_.allreduce_sum(&v, 1);
  return v / static_cast<double>(comm_.size());
}

int DataParallel::any_stop(int signal) {
  if (!active()) return signal;
  return static_cast<int>(comm_.allreduce_max(signal));
}

void DataParallel::broadcast_state() {
  if (!active()) return;
  auto broadcast = [&](Arena a) {
    on_host(a, 0, ex_.plan().arena_bytes[static_cast<size_t>(a)], true,
            [&](std::byte* p, size_t n) { comm_.broadcast(p, n, 0); });
  };
  broadcast(Arena::Params);
  if (!sharded_) broadcast(Arena::OptState);
}

void DataParallel::check_identical(const std::string& when) {
  if (!active()) return;
  const size_t n = ex_.plan().arena_bytes[static_cast<size_t>(Arena::Params)];
  uint64_t h = rng::kFnvOffset;
  on_host(Arena::Params, 0, n, false, [&](std::byte* p, size_t m) { h = rng::fnv1a(h, p, m); });
  const std::vector<uint64_t> all = comm_.allgather(h);
  std::string differ;
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  if (!differ.empty())
    throw std::runtime_error("the ranks' parameters differ at the " + when + " (rank " + differ +
                             " against rank 0's): the ranks no longer train one model; stopping");
}

size_t DataParallel::bytes_per_step() const {
  if (!active()) return 0;
  const size_t grads = ex_.plan().arena_bytes[static_cast<size_t>(Arena::Grads)];
  const size_t params = ex_.plan().arena_bytes[static_cast<size_t>(Arena::Params)];
  const double R = static_cast<double>(comm_.size());
  // What bandwidth-optimal collectives send per rank: an all-reduce of the
  // gradients 2 (R-1)/R of them; a reduce-scatter of the gradients and an
  // all-gather of the parameters (R-1)/R of each.
  const double f = (R - 1.0) / R;
  return static_cast<size_t>(sharded_ ? f * static_cast<double>(grads + params) : 2.0 * f * static_cast<double>(grads));
}

}  // namespace memfit::train
