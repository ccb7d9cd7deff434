// The offload tier (memfit/tier.hpp, runtime/tier_store.hpp): the store
// gives back what was written to it, block by block and by byte ranges
// across its sectors, and refuses bytes the disk changed; the tier pass
// leaves every tiered value to tier_load and tier_store nodes, splits the
// update per parameter and keeps each copy only around its readers; and a
// tiered step computes bit for bit what the untiered one does over 20
// steps (a ConvNet with SGD momentum, gpt-tiny with AdamW, with and without
// update in backward), reading and writing exactly the bytes its plan says,
// with its copies made where used or queued ahead on the store's I/O thread
// (which keeps their order, and stops on an error that every wait then
// throws); the predicted I/O time follows the schedule, and the fit's
// step-time model takes its constants from the device (StepCosts).
#include <sys/stat.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <string>
#include <vector>

#include "memfit/op_registry.hpp"
#include "memfit/runtime.hpp"
#include "memfit/tier.hpp"
#include "runtime/device.hpp"
#include "runtime/tier_store.hpp"
#include "spec_steps.hpp"
#include "fit/fit.hpp"
#include "compile/step_graph.hpp"

using namespace memfit;

namespace {

std::string tmp_dir() {
  const char* t = std::getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

train::StepSpec gpt_tiny(bool uib) {
  train::StepSpec s = memfit::testing::gpt_tiny_spec("adamw", uib);
  s.optimizer.weight_decay = 0.1;
  s.optimizer.decay_bias_and_norm = false;
  return s;
}

train::StepSpec convnet(bool uib) {
  train::StepSpec s = memfit::testing::convnet_spec(uib);
  s.optimizer.kind = "sgd";
  s.optimizer.momentum = 0.9;
  s.optimizer.weight_decay = 5e-4;
  return s;
}

// Flips bits of one byte of the store's file on disk (through an aligned
// page: the store may have opened its file for direct I/O).
void flip_on_disk(const TierStore& st, off_t page_at, size_t byte, uint8_t mask) {
  void* page = nullptr;
  ASSERT_EQ(posix_memalign(&page, 4096, 4096), 0);
  ASSERT_EQ(pread(st.fd(), page, 4096, page_at), 4096);
  static_cast<uint8_t*>(page)[byte] ^= mask;
  ASSERT_EQ(pwrite(st.fd(), page, 4096, page_at), 4096);
  std::free(page);
}

ExecConfig tiered_config() {
  ExecConfig c;
  c.tier_dir = tmp_dir();
  c.verify = true;
  return c;
}

}  // namespace

TEST(TierStore, GivesBackBlocksAndRangesAcrossSectors) {
  const size_t S = TierStore::kSector;
  // Sizes around the sector and the I/O buffer, and a block of one byte.
  const std::vector<TierStore::Block> blocks{
      {"a", 1}, {"b", S - 3}, {"c", S + 5}, {"d", 3 * TierStore::kBuffer + 17}, {"e", 4096}};
  TierStore st(tmp_dir(), blocks);
  EXPECT_GE(st.file_bytes(), 5 * S);
  std::map<std::string, std::vector<uint8_t>> want;
  uint32_t seed = 1;
  for (const auto& b : blocks) {
    // A fresh store reads as zeros.
    std::vector<uint8_t> got(b.bytes, 0xEE);
    st.read(b.name, got.data(), got.size());
    for (uint8_t x : got) ASSERT_EQ(x, 0) << b.name;
    want[b.name] = random_bytes(b.bytes, seed++);
    st.write(b.name, want[b.name].data(), b.bytes);
  }
  // Ranges that start and end inside sectors and buffers.
  auto& d = want["d"];
  for (const auto& [at, n] : std::vector<std::pair<size_t, size_t>>{
           {0, 1}, {S - 1, 2}, {S + 100, 3 * S}, {TierStore::kBuffer - 7, TierStore::kBuffer + 70}, {d.size() - 9, 9}}) {
    const std::vector<uint8_t> patch = random_bytes(n, seed++);
    st.write_range("d", at, patch.data(), n);
    std::memcpy(d.data() + at, patch.data(), n);
    std::vector<uint8_t> back(n);
    st.read_range("d", at, back.data(), n);
    EXPECT_EQ(back, patch) << "range " << at << "+" << n;
  }
  for (const auto& b : blocks) {
    std::vector<uint8_t> got(b.bytes);
    st.read(b.name, got.data(), got.size());
    EXPECT_EQ(got, want[b.name]) << b.name;
  }
  st.fill("c", 0x5A);
  std::vector<uint8_t> c(blocks[2].bytes);
  st.read("c", c.data(), c.size());
  for (uint8_t x : c) ASSERT_EQ(x, 0x5A);
  // Its neighbours are untouched.
  std::vector<uint8_t> b2(blocks[1].bytes);
  st.read("b", b2.data(), b2.size());
  EXPECT_EQ(b2, want["b"]);
  // Zeros into a written block are written; into a block of a fresh file,
  // never written, they cost nothing (it reads as zeros).
  uint64_t before = st.bytes_written();
  st.fill("c", 0);
  EXPECT_EQ(st.bytes_written(), before + c.size());
  st.read("c", c.data(), c.size());
  for (uint8_t x : c) ASSERT_EQ(x, 0);
  TierStore fresh(tmp_dir(), {{"z", 3 * S + 5}});
  fresh.fill("z", 0);
  EXPECT_EQ(fresh.bytes_written(), 0u);
  std::vector<uint8_t> z(3 * S + 5, 0xEE);
  fresh.read("z", z.data(), z.size());
  for (uint8_t x : z) ASSERT_EQ(x, 0);
}

TEST(TierStore, RefusesBytesTheDiskChanged) {
  TierStore st(tmp_dir(), {{"w", 200000}});
  const std::vector<uint8_t> w = random_bytes(200000, 7);
  st.write("w", w.data(), w.size());
  // Flip one byte of the second sector on disk.
  flip_on_disk(st, static_cast<off_t>(TierStore::kSector), 100, 0x10);
  std::vector<uint8_t> got(w.size());
  try {
    st.read("w", got.data(), got.size());
    FAIL() << "a changed sector was read without an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("differ from those written"), std::string::npos) << e.what();
  }
  // The first sector alone is still good.
  std::vector<uint8_t> first(1000);
  st.read_range("w", 0, first.data(), first.size());
  EXPECT_EQ(0, std::memcmp(first.data(), w.data(), first.size()));
}

// A kept store: a step writes the copy of a block that is not committed,
// so the file reopened with the state recorded before the step reads the
// values before it, whatever the step wrote; the state synced after the
// step reads the step's. The copies are checked against the record, and a
// block no step writes (frozen) has one copy only.
TEST(TierStore, KeptFileCommitsWholeSteps) {
  const size_t S = TierStore::kSector;
  const size_t na = 3 * S + 11, nf = 5000;
  const std::vector<TierStore::Block> blocks{{"a", na, true}, {"f", nf, false}};
  auto st = std::make_unique<TierStore>(tmp_dir(), blocks, TierStore::Keep{true, {}});
  ASSERT_TRUE(st->kept());
  EXPECT_EQ(st->file_bytes(), 2 * 4 * S + S);
  const std::string path = st->path();
  struct stat sb {};
  ASSERT_EQ(::stat(path.c_str(), &sb), 0) << "a kept file stays on disk";
  const std::vector<uint8_t> a0 = random_bytes(na, 1), f0 = random_bytes(nf, 2), a1 = random_bytes(na, 3),
                             a2 = random_bytes(na, 4);
  st->write_range("a", 0, a0.data(), na);  // initial values, outside a step
  st->write_range("f", 0, f0.data(), nf);
  const TierStore::Committed c0 = st->sync();
  st->commit();
  auto reopened = [&](const TierStore::Committed& c) {
    TierStore r(tmp_dir(), blocks, TierStore::Keep{true, path});
    r.adopt(c);
    std::vector<uint8_t> va(na), vf(nf);
    r.read("a", va.data(), na);
    r.read("f", vf.data(), nf);
    EXPECT_EQ(vf, f0);
    return va;
  };
  st->write_async("a", a1.data(), na);  // step 1
  std::vector<uint8_t> got(na);
  st->read("a", got.data(), na);
  EXPECT_EQ(got, a1) << "a step reads what it wrote";
  EXPECT_EQ(reopened(c0), a0) << "step 1 killed before its record";
  const TierStore::Committed c1 = st->sync();  // step 1 recorded...
  st->commit();
  st->write("a", a2.data(), na);  // ...and step 2 killed before its record
  st->read("a", got.data(), na);
  EXPECT_EQ(got, a2);
  EXPECT_THROW(st->write("f", f0.data(), nf), std::logic_error) << "a step wrote a block with one copy";
  EXPECT_EQ(reopened(c1), a1);
  // Two records back: step 2 wrote over that copy, and adopt says so.
  EXPECT_THROW(reopened(c0), std::runtime_error);
  st.reset();  // the store closed, its file stays
  ASSERT_EQ(::stat(path.c_str(), &sb), 0);
  EXPECT_EQ(reopened(c1), a1);
  // A committed sector changed on disk: adopt says so.
  {
    TierStore r(tmp_dir(), blocks, TierStore::Keep{true, path});
    EXPECT_THROW(r.write("a", a0.data(), na), std::logic_error) << "written before its record was adopted";
    flip_on_disk(r, static_cast<off_t>(c1.slots[0] * 4 * S + S), 7, 0x01);
    try {
      r.adopt(c1);
      FAIL() << "a changed committed sector was adopted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("differs from what its step record says"), std::string::npos) << e.what();
    }
  }
  // Another layout (a block of another size) is refused by the file's size.
  try {
    TierStore r(tmp_dir(), {{"a", na + S, true}, {"f", nf, false}}, TierStore::Keep{true, path});
    FAIL() << "reopened a file of another layout";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("not this run's offload file"), std::string::npos) << e.what();
  }
  ::unlink(path.c_str());
}

// A buffer in memory the host cannot address is reached only through the
// copies given (`via`): its pointers here lie at a non-canonical offset, so
// any memcpy through them would fault. Every byte of the blocks crosses
// the copies once, in pieces no larger than the store's buffer.
namespace {
struct OffsetCopies final : kernels::BufferCopies {
  static constexpr uintptr_t kOffset = uintptr_t{1} << 62;
  static void* host(const void* p) { return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) - kOffset); }
  static void* device(void* p) { return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) + kOffset); }
  void to_buffer(void* dst, const void* h, size_t bytes) const override {
    std::memcpy(host(dst), h, bytes);
    in += bytes;
    largest = std::max(largest, bytes);
  }
  void from_buffer(void* h, const void* src, size_t bytes) const override {
    std::memcpy(h, host(src), bytes);
    out += bytes;
    largest = std::max(largest, bytes);
  }
  mutable size_t in = 0, out = 0, largest = 0;
};
}  // namespace

TEST(TierStore, ReachesBuffersTheHostCannotAddressThroughTheCopiesGiven) {
  const size_t S = TierStore::kSector;
  const std::vector<TierStore::Block> blocks{{"a", 3 * S + 17}, {"b", TierStore::kBuffer + S + 5}, {"c", 1}};
  TierStore st(tmp_dir(), blocks);
  OffsetCopies via;
  size_t total = 0;
  std::vector<std::vector<uint8_t>> want, got;
  for (size_t i = 0; i < blocks.size(); ++i) {
    want.push_back(random_bytes(blocks[i].bytes, 40 + static_cast<uint32_t>(i)));
    got.emplace_back(blocks[i].bytes, 0);
    total += blocks[i].bytes;
  }
  // Synchronous writes and reads of "a"; queued ones of the others.
  st.write("a", OffsetCopies::device(want[0].data()), want[0].size(), &via);
  for (size_t i = 1; i < blocks.size(); ++i)
    st.write_async(blocks[i].name, OffsetCopies::device(want[i].data()), want[i].size(), &via);
  st.read("a", OffsetCopies::device(got[0].data()), got[0].size(), &via);
  for (size_t i = 1; i < blocks.size(); ++i)
    st.read_async(blocks[i].name, OffsetCopies::device(got[i].data()), got[i].size(), &via);
  for (size_t i = 1; i < blocks.size(); ++i) st.wait(OffsetCopies::device(got[i].data()));
  for (size_t i = 0; i < blocks.size(); ++i) EXPECT_EQ(got[i], want[i]) << blocks[i].name;
  EXPECT_EQ(via.out, total);
  EXPECT_EQ(via.in, total);
  EXPECT_LE(via.largest, TierStore::kBuffer);
  // Host access outside a step (checkpoints, initial values) is the host's.
  std::vector<uint8_t> b(want[1].size());
  st.read_range("b", 0, b.data(), b.size());
  EXPECT_EQ(b, want[1]);
}

TEST(TierStore, ClearErrors) {
  try {
    TierStore st("/nonexistent/offload", {{"w", 10}});
    FAIL() << "made a store in a missing directory";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/offload"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--offload-dir"), std::string::npos) << e.what();
  }
  TierStore st(tmp_dir(), {{"w", 10}});
  std::vector<uint8_t> b(11);
  EXPECT_THROW(st.read("w", b.data(), 11), std::logic_error);
  EXPECT_THROW(st.read_range("w", 5, b.data(), 6), std::logic_error);
  EXPECT_THROW(st.read("v", b.data(), 10), std::logic_error);
}

TEST(TierPass, EveryTieredValueMovesOnlyThroughTierNodes) {
  for (bool uib : {false, true}) {
    train::StepSpec s = gpt_tiny(uib);
    const auto plain = train::build_step_graph(s);
    s.offload = "all";
    const auto sg = train::build_step_graph(s);
    const Graph& g = sg->g;
    const std::string what = uib ? "update in backward" : "update after backward";
    // Every parameter and every state tensor is tiered.
    int params = 0, states = 0;
    for (const Value& v : g.values()) {
      if (v.cls == VClass::Param || v.cls == VClass::OptState) {
        EXPECT_TRUE(v.tiered) << v.name;
      }
      params += v.cls == VClass::Param;
      states += v.cls == VClass::OptState;
    }
    EXPECT_EQ(sg->tier.values, params + states) << what;
    int updates = 0, loads = 0, stores = 0;
    for (size_t k = 0; k < g.num_nodes(); ++k) {
      const Node& n = g.node(static_cast<NodeId>(k));
      const OpTraits& tr = op_def(n.op).traits;
      loads += n.op == "tier_load";
      stores += n.op == "tier_store";
      if (!tr.updates_parameters) continue;
      ++updates;
      // One parameter per update; each operand but the gradient is a copy
      // loaded from the tier, and the copies it writes go back right after.
      EXPECT_EQ(n.attrs.i("count"), 1);
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        if (i == 1) continue;
        const Value& in = g.value(n.inputs[i]);
        ASSERT_GE(in.producer, 0) << in.name;
        EXPECT_EQ(g.node(in.producer).op, "tier_load") << in.name;
        bool stored = false;
        for (size_t j = k + 1; j < g.num_nodes() && !stored; ++j) {
          const Node& m = g.node(static_cast<NodeId>(j));
          stored = m.op == "tier_store" && m.inputs[0] == n.inputs[i];
        }
        EXPECT_TRUE(stored) << in.name << " is written by its update and never stored";
      }
    }
    EXPECT_EQ(updates, params) << what;  // gpt-tiny trains every parameter
    EXPECT_EQ(loads, sg->tier.loads);
    EXPECT_EQ(stores, sg->tier.stores);
    EXPECT_EQ(stores, params + states) << what;

    // The plan: nothing tiered in memory; the tier holds it all.
    const Plan p = plan_for(g, tiered_config());
    const Plan q = plan_for(plain->g, ExecConfig{});
    EXPECT_EQ(p.arena_bytes[static_cast<size_t>(Arena::OptState)], 0u) << what;
    EXPECT_EQ(p.arena_bytes[static_cast<size_t>(Arena::Tier)],
              q.arena_bytes[static_cast<size_t>(Arena::Params)] + q.arena_bytes[static_cast<size_t>(Arena::OptState)])
        << what;
    EXPECT_EQ(verify_plan(g, p), "");
    EXPECT_GT(p.tier_read_bytes, 0u);
    EXPECT_GT(p.tier_written_bytes, 0u);
    EXPECT_EQ(q.tier_read_bytes, 0u);
  }
}

namespace {

// Tiered steps (b) against untiered ones (a): the same losses and state,
// bit for bit, and the store moved exactly what the plan says, every step.
void expect_same_steps_moving_planned_bytes(const memfit::testing::Trained& a, const memfit::testing::Trained& b,
                                            int steps, const std::string& what) {
  ASSERT_EQ(a.losses.size(), b.losses.size()) << what;
  for (size_t s = 0; s < a.losses.size(); ++s) {
    ASSERT_TRUE(std::isfinite(b.losses[s])) << what << " step " << s;
    EXPECT_EQ(std::memcmp(&a.losses[s], &b.losses[s], 4), 0)
        << what << " step " << s << ": " << a.losses[s] << " vs " << b.losses[s];
  }
  ASSERT_EQ(a.bytes.size(), b.bytes.size()) << what;
  for (const auto& [name, w] : a.bytes) EXPECT_EQ(w, b.bytes.at(name)) << what << ": '" << name << "' differs";
  EXPECT_GT(b.plan.tier_read_bytes, 0u) << what;
  EXPECT_EQ(b.tier_read, uint64_t(steps) * b.plan.tier_read_bytes) << what;
  EXPECT_EQ(b.tier_written, uint64_t(steps) * b.plan.tier_written_bytes) << what;
}

}  // namespace

TEST(TierPass, TieredStepsAreBitIdenticalAndMoveThePlannedBytes) {
  constexpr int kSteps = 20;
  for (const auto& [base, offload, ahead] : std::vector<std::tuple<train::StepSpec, std::string, int>>{
           {convnet(false), "all", 0}, {convnet(false), "all", 1}, {convnet(true), "params,state", 2},
           {gpt_tiny(false), "state", 1}, {gpt_tiny(true), "all", 0}, {gpt_tiny(true), "all", 1},
           {gpt_tiny(false), "params", 3}}) {
    train::StepSpec tiered = base;
    tiered.offload = offload;
    tiered.offload_ahead = ahead;
    const std::string what = base.model + (base.update_in_backward ? " update in backward" : "") + " offload " +
                             offload + " ahead " + std::to_string(ahead);
    const memfit::testing::Trained a = memfit::testing::train_steps(base, kSteps);
    const memfit::testing::Trained b = memfit::testing::train_steps(tiered, kSteps, tiered_config());
    expect_same_steps_moving_planned_bytes(a, b, kSteps, what);
    EXPECT_EQ(a.plan.arena_bytes[static_cast<size_t>(Arena::Tier)], 0u);
  }
}

// The tier is the same on every device: on one whose memory the host
// cannot address (the test devices' arenas fault on any host access), the
// tier kernels reach their buffers through the device's copies, a piece at
// a time through the store's host buffer, as a GPU's would. The steps give
// the bits of the CPU's untiered steps (the test devices run the CPU's
// kernels) and move the planned bytes; on "cpu-own-memory" the tiered
// values leave the device's memory.
TEST(TierPass, TheTierReachesDeviceMemoryThroughTheDevicesCopies) {
  constexpr int kSteps = 8;
  for (const char* device : {"cpu-offset", "cpu-own-memory"})
    for (const auto& [base, offload, ahead] : std::vector<std::tuple<train::StepSpec, std::string, int>>{
             {convnet(true), "all", 1}, {gpt_tiny(false), "all", 0}, {gpt_tiny(false), "state", 2}}) {
      train::StepSpec tiered = base;
      tiered.offload = offload;
      tiered.offload_ahead = ahead;
      const std::string what = std::string(device) + ": " + base.model + " offload " + offload + " ahead " +
                               std::to_string(ahead);
      ExecConfig on_device = tiered_config();
      on_device.device = &device_named(device);
      ASSERT_FALSE(on_device.device->host_addressable()) << what;
      const memfit::testing::Trained a = memfit::testing::train_steps(base, kSteps);
      const memfit::testing::Trained b = memfit::testing::train_steps(tiered, kSteps, on_device);
      expect_same_steps_moving_planned_bytes(a, b, kSteps, what);
      EXPECT_LT(b.plan.total_bytes(), a.plan.total_bytes()) << what << ": the device holds less";
    }
}

namespace {

// Logits of an evaluation graph sharing the training executor's memory (its
// parameters, transient arena and tier store, as the command runs them),
// after `steps` training steps.
std::vector<float> eval_after_training(const train::StepSpec& spec, int steps, const ExecConfig& cfg) {
  const auto sg = train::build_step_graph(spec);
  train::StepSpec es = spec;
  es.training = false;
  es.with_loss = false;
  es.with_metrics = true;
  const auto eg = train::build_step_graph(es);
  ExecConfig c = cfg;
  c.defer_allocation = true;
  Executor ex(sg->g, c), ev(eg->g, c);
  ex.allocate();
  ev.borrow(Arena::Params, ex.arena(Arena::Params));
  ev.borrow(Arena::Transient, ex.arena(Arena::Transient));
  ev.share_tier(ex.tier());
  ev.allocate();
  ex.init_params(5);
  kernels::StepContext ctx;
  ctx.lr = 0.02;
  auto feed = [](Executor& e, const train::StepGraph& g, int salt) {
    for (const train::StepInput& in : g.inputs) {
      const size_t n = static_cast<size_t>(numel(g.g.value(in.value).shape));
      if (in.spec.dtype == DType::i32) {
        std::vector<int32_t> v(n);
        for (size_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>(((i + 13 * salt) * 2654435761u) % 10);
        e.feed(in.value, v.data(), n * 4);
      } else {
        std::vector<float> v(n);
        for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(((i + 7 * salt) * 2654435761u) % 997) / 997.0f - 0.5f;
        e.write_f32(in.value, v.data());
      }
    }
  };
  std::vector<float> out;
  for (int step = 0; step < steps; ++step) {
    feed(ex, *sg, step);
    ctx.step = step;
    ex.run(ctx);
    feed(ev, *eg, 100 + step);
    ev.run(kernels::StepContext{});
    out.push_back(static_cast<float>(ev.fetch_scalar(eg->metrics.loss_sum)));
  }
  return out;
}

}  // namespace

TEST(TierPass, EvaluationReadsTheTieredParametersAndChangesNothing) {
  train::StepSpec s = convnet(true);
  const std::vector<float> plain = eval_after_training(s, 6, ExecConfig{});
  s.offload = "all";
  const std::vector<float> tiered = eval_after_training(s, 6, tiered_config());
  ASSERT_EQ(plain.size(), tiered.size());
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(plain[i], tiered[i]) << "evaluation after step " << i;
}

// Queued copies: done in the order queued (a read after a write of the same
// block sees it), each wait returns once its buffer's copies are done, and
// the synchronous calls see every queued write.
TEST(TierStore, QueuedCopiesKeepTheirOrder) {
  const size_t n = 3 * TierStore::kBuffer + 1234;
  TierStore st(tmp_dir(), {{"a", n}, {"b", 5000}});
  const std::vector<uint8_t> a1 = random_bytes(n, 1), a2 = random_bytes(n, 2), b1 = random_bytes(5000, 3);
  std::vector<uint8_t> got1(n), got2(n), gotb(5000);
  st.write_async("a", a1.data(), n);
  st.read_async("a", got1.data(), n);   // after the first write
  st.write_async("a", a2.data(), n);
  st.read_async("a", got2.data(), n);   // after the second
  st.write_async("b", b1.data(), 5000);
  st.wait(got1.data());
  EXPECT_EQ(got1, a1);
  st.wait(got2.data());
  EXPECT_EQ(got2, a2);
  st.read("b", gotb.data(), gotb.size());  // synchronous: waits for the queue first
  EXPECT_EQ(gotb, b1);
  st.wait(a1.data());  // nothing queued on it any more: returns at once
  EXPECT_EQ(st.bytes_written(), uint64_t(2 * n + 5000));
  EXPECT_EQ(st.bytes_read(), uint64_t(2 * n + 5000));
  // More copies than the queue holds at once: enqueue waits for room.
  std::vector<std::vector<uint8_t>> outs(700, std::vector<uint8_t>(5000));
  for (auto& o : outs) st.read_async("b", o.data(), o.size());
  st.drain();
  for (const auto& o : outs) ASSERT_EQ(o, b1);
}

// An error on the I/O thread (a sector the disk changed) is thrown by the
// wait of its buffer and every wait after it; copies queued after it are
// dropped; cancel() returns with nothing running.
TEST(TierStore, QueuedErrorsStopTheQueue) {
  TierStore st(tmp_dir(), {{"w", 200000}, {"v", 1000}});
  const std::vector<uint8_t> w = random_bytes(200000, 7), v = random_bytes(1000, 8);
  st.write("w", w.data(), w.size());
  st.write("v", v.data(), v.size());
  flip_on_disk(st, static_cast<off_t>(TierStore::kSector), 7, 0x01);
  std::vector<uint8_t> got(w.size()), gotv(1000, 0xEE);
  st.read_async("w", got.data(), got.size());
  st.read_async("v", gotv.data(), gotv.size());
  for (const void* buf : {static_cast<const void*>(got.data()), static_cast<const void*>(gotv.data())}) {
    try {
      st.wait(buf);
      FAIL() << "a wait after a failed copy returned";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("differ from those written"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(st.drain(), std::runtime_error);
  EXPECT_THROW(st.read_async("v", gotv.data(), gotv.size()), std::runtime_error);
  st.cancel();
}

// The asynchronous tier pass: every load is queued, waited for before its
// copy's first other reader and never read in between; every store is
// waited for after it; the plan keeps each copy from its queuing to its
// last wait, so its window of copies is at least the synchronous one.
TEST(TierPass, QueuedCopiesAreWaitedForBeforeTheirUse) {
  for (int accumulation : {1, 2}) {
  for (bool uib : {false, true}) {
  for (int ahead : {1, 2}) {
    if (uib && accumulation > 1) continue;
    train::StepSpec s = gpt_tiny(uib);
    s.accumulation = accumulation;
    s.offload = "all";
    s.offload_ahead = 0;
    const auto sync = train::build_step_graph(s);
    s.offload_ahead = ahead;
    const auto sg = train::build_step_graph(s);
    const Graph& g = sg->g;
    const std::string what = std::string(uib ? "update in backward" : "update after backward") + " ahead " +
                             std::to_string(ahead) + " accumulation " + std::to_string(accumulation);
    EXPECT_EQ(sg->tier.loads, sync->tier.loads) << what;
    // With accumulation the closing update runs once per step, the rest once
    // per micro-batch: a read queued before the update is waited for before
    // it too (its copy may serve the update as well: it is loaded again each
    // micro-batch, and the update changes it once, on the last).
    size_t ub = g.num_nodes();  // (update in backward: updates inside backward, no closing update)
    if (!uib) {
      ASSERT_NO_THROW(ub = train::update_begin(g)) << what;
    }
    for (size_t k = 0; k < ub; ++k) {
      const Node& n = g.node(static_cast<NodeId>(k));
      if (n.op != "tier_load") continue;
      size_t waited = g.num_nodes();
      for (size_t j = k + 1; j < g.num_nodes() && waited == g.num_nodes(); ++j)
        if (g.node(static_cast<NodeId>(j)).op == "tier_wait" && g.node(static_cast<NodeId>(j)).inputs[0] == n.outputs[0])
          waited = j;
      EXPECT_LT(waited, ub) << what << ": " << g.value(n.outputs[0]).name << " queued before the update, waited for in it";
    }
    std::map<ValueId, size_t> queued;  // copy -> where its load / store was queued
    std::set<ValueId> ready;           // loaded copies waited for
    int waits = 0;
    bool early = false;  // some load queued before the node before its first reader
    for (size_t k = 0; k < g.num_nodes(); ++k) {
      const Node& n = g.node(static_cast<NodeId>(k));
      if (n.op == "tier_load") {
        EXPECT_EQ(n.attrs.i("async", 0), 1) << what;
        queued[n.outputs[0]] = k;
      } else if (n.op == "tier_store") {
        EXPECT_EQ(n.attrs.i("async", 0), 1) << what;
        EXPECT_TRUE(ready.count(n.inputs[0])) << what << ": " << g.value(n.inputs[0]).name << " stored before it was loaded";
        queued[n.inputs[0]] = k;
        ready.erase(n.inputs[0]);
      } else if (n.op == "tier_wait") {
        ++waits;
        ASSERT_TRUE(queued.count(n.inputs[0])) << what << ": a wait with nothing queued";
        if (g.node(static_cast<NodeId>(queued[n.inputs[0]])).op == "tier_load") {
          ready.insert(n.inputs[0]);
          early = early || queued[n.inputs[0]] + 2 < k;
        }
        queued.erase(n.inputs[0]);
      } else {
        for (ValueId in : n.inputs) {
          const Value& v = g.value(in);
          if (v.producer >= 0 && g.node(v.producer).op == "tier_load") {
            EXPECT_TRUE(ready.count(in)) << what << ": " << v.name << " read by " << n.op << " before its wait";
          }
        }
      }
    }
    EXPECT_TRUE(queued.empty()) << what << ": copies queued and never waited for";
    EXPECT_EQ(waits, sg->tier.loads + sg->tier.stores) << what;
    EXPECT_TRUE(early) << what << ": no load was queued ahead of its use";
    const Plan p = plan_for(g, tiered_config()), q = plan_for(sync->g, tiered_config());
    EXPECT_EQ(verify_plan(g, p), "");
    EXPECT_EQ(p.tier_read_bytes, q.tier_read_bytes) << what;
    EXPECT_EQ(p.tier_written_bytes, q.tier_written_bytes) << what;
    EXPECT_GE(p.arena_bytes[static_cast<size_t>(Arena::Transient)], p.peak_live_bytes) << what;
    EXPECT_GE(p.peak_live_bytes, q.peak_live_bytes) << what;
  }
  }
  }
}

// The predicted I/O time: copies made where used stop the step for all of
// their time; queued ones overlap its compute, so with compute long beside
// the I/O little is left (the first reads: nothing computes before them),
// and with no compute all of it is.
TEST(TierPass, PredictedIoFollowsTheSchedule) {
  train::StepSpec s = gpt_tiny(true);
  s.offload = "all";
  s.offload_ahead = 0;
  const auto sync = train::build_step_graph(s);
  s.offload_ahead = 1;
  const auto async = train::build_step_graph(s);
  const Plan ps = plan_for(sync->g, tiered_config()), pa = plan_for(async->g, tiered_config());
  const TierSpeed speed{1e8, 5e7};
  const double io = static_cast<double>(ps.tier_read_bytes) / 1e8 + static_cast<double>(ps.tier_written_bytes) / 5e7;
  for (double compute : {0.0, 0.01, 100 * io}) {
    const train::TierTime ts = train::tier_io_time(sync->g, ps, compute, speed);
    const train::TierTime ta = train::tier_io_time(async->g, pa, compute, speed);
    EXPECT_NEAR(ts.io, io, 1e-9 * io);
    EXPECT_NEAR(ta.io, io, 1e-9 * io);
    EXPECT_NEAR(ts.exposed, io, 1e-9 * io) << compute;
    EXPECT_LE(ta.exposed, io * (1 + 1e-9)) << compute;
    if (compute == 0) {
      EXPECT_NEAR(ta.exposed, io, 1e-9 * io);
    }
  }
  EXPECT_LT(train::tier_io_time(async->g, pa, 100 * io, speed).exposed, 0.5 * io);
  EXPECT_EQ(train::tier_io_time(async->g, pa, 1.0, TierSpeed{}).exposed, 0.0);  // unmeasured
}

// The fit's step-time model takes its constants from the device
// (Device::step_costs): the fallback rate where nothing was measured, the
// cost of a node run, and how a micro-batch of few rows slows the products.
TEST(StepCosts, TheDevicesConstantsDrivePredictedStepTime) {
  const StepCosts cpu = device_for(Backend::Cpu).step_costs();
  const double flops = 1e9;
  // Measured: 1 GFLOP at 100 GFLOP/s with m / (m + half) efficiency, plus the nodes.
  const double want = flops / (100e9 * 60.0 / (60.0 + cpu.half_rate_rows)) + 50 * cpu.seconds_per_node;
  EXPECT_DOUBLE_EQ(train::predict_step_seconds(cpu, 100e9, flops, 60, 1, 50), want);
  EXPECT_DOUBLE_EQ(train::predict_step_seconds(cpu, 100e9, flops, 60, 3, 50), 3 * want) << "per micro-batch";
  // Unmeasured: the device's fallback rate.
  EXPECT_DOUBLE_EQ(train::predict_step_seconds(cpu, 0, flops, 60, 1, 0),
                   flops / (cpu.fallback_flops_per_second * 60.0 / (60.0 + cpu.half_rate_rows)));
  // Another device's constants change the prediction accordingly.
  StepCosts other;
  other.seconds_per_node = 0.5;
  other.half_rate_rows = 0;
  other.fallback_flops_per_second = 1e9;
  EXPECT_DOUBLE_EQ(train::predict_step_seconds(other, 0, flops, 60, 1, 2), 1.0 + 1.0);
}

// The offload file is a memory space of its own, the disk: the fit counts a
// candidate whose file is over the space the disk has available as not
// fitting, whatever its memory, and keeps the smallest such file to name in
// its refusal.
TEST(TierPass, FitCountsTheDisksSpace) {
  const train::StepSpec base = gpt_tiny(false);
  const std::vector<train::FitData> data{{"", 0, 0.0}};
  auto fit = [&](size_t available) {
    return train::search_fit(base, base.batch, data, size_t(1) << 40, tiered_config(), 1e11, {}, {}, {"all"},
                             TierSpeed{1e9, 1e9, available}, {});
  };
  const train::FitResult roomy = fit(0);  // not known: not checked
  ASSERT_FALSE(roomy.fitting.empty());
  size_t least = SIZE_MAX;
  for (const train::FitCandidate& c : roomy.fitting) {
    EXPECT_GT(c.disk_bytes, 0u) << c.describe();
    least = std::min(least, c.disk_bytes);
  }
  EXPECT_EQ(roomy.over_disk.disk_bytes, 0u);
  EXPECT_EQ(fit(least).fitting.size(), static_cast<size_t>(std::count_if(
      roomy.fitting.begin(), roomy.fitting.end(), [&](const train::FitCandidate& c) { return c.disk_bytes <= least; })));
  const train::FitResult cramped = fit(least - 1);
  EXPECT_TRUE(cramped.fitting.empty());
  EXPECT_EQ(cramped.over_disk.disk_bytes, least);
}
