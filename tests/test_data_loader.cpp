// memfit batch loader: seeded shuffles, exact resume, augmentation, the
// prefetch ring's determinism, memory accounting and zero allocations per
// batch (counted through a replaced global operator new).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <numeric>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/dataset.hpp"
#include "data/idx.hpp"
#include "data/loader.hpp"

// ---- allocation counter ------------------------------------------------------
// malloc/free pairs behind new/delete, as the standard replacement allows.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
namespace {
std::atomic<long> g_allocs{0};
}
void* operator new(std::size_t n) {
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, std::align_val_t a) {
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  const size_t al = static_cast<size_t>(a);
  if (void* p = std::aligned_alloc(al, (n + al - 1) / al * al)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

using namespace memfit::data;
using memfit::DType;
using memfit::TensorSpec;

namespace {

// Sample i is a 1 x H x W image whose pixel (y, x) is i + y*0.01 + x*0.0001
// (distinct per position, so crops and flips are visible); label i % 10.
MemoryDataset make_ds(size_t n, int h = 4, int w = 5) {
  std::vector<float> data;
  std::vector<int32_t> labels;
  for (size_t i = 0; i < n; ++i) {
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) data.push_back(float(i) + y * 0.01f + x * 0.0001f);
    labels.push_back(int32_t(i % 10));
  }
  return MemoryDataset(std::move(data), std::move(labels), {1, h, w}, 10);
}

// Throws for one index, like a corrupt file would.
class FailingDataset final : public Dataset {
 public:
  FailingDataset(const Dataset& base, size_t bad) : base_(base), bad_(bad) {}
  size_t size() const override { return base_.size(); }
  int num_classes() const override { return base_.num_classes(); }
  SampleShape sample_shape() const override { return base_.sample_shape(); }
  void get(size_t i, float* x, int32_t* y) const override {
    if (i == bad_) throw std::runtime_error("/data/bad.png: corrupt PNG");
    base_.get(i, x, y);
  }
  size_t resident_bytes() const override { return 0; }

 private:
  const Dataset& base_;
  size_t bad_;
};

struct Batch {
  size_t n;
  std::vector<float> x;
  std::vector<int32_t> y;
  bool operator==(const Batch&) const = default;
};

// Reads `count` results of next() (epoch ends included, as n = 0).
std::vector<Batch> take(Loader& L, size_t count) {
  const size_t B = L.batch_size(), S = sample_numel(L.sample_shape());
  std::vector<Batch> out;
  for (size_t k = 0; k < count; ++k) {
    Batch b{0, std::vector<float>(B * S, -7.0f), std::vector<int32_t>(B, -7)};
    b.n = L.next(b.x.data(), b.y.data());
    out.push_back(std::move(b));
  }
  return out;
}

LoaderOptions opts(size_t batch, int prefetch, uint64_t seed = 1) {
  LoaderOptions o;
  o.batch_size = batch;
  o.prefetch = prefetch;
  o.seed = seed;
  return o;
}

}  // namespace

TEST(Shuffle, IsAPermutationDeterministicPerSeedAndEpoch) {
  const size_t n = 10007;
  std::vector<uint32_t> a(n), b(n), c(n), d(n);
  Loader::epoch_order(5, 0, n, a.data());
  Loader::epoch_order(5, 0, n, b.data());
  Loader::epoch_order(5, 1, n, c.data());
  Loader::epoch_order(6, 0, n, d.data());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, d);
  // Pinned values (checkpoints store (seed, epoch), so the order must never
  // change); the Python formula in data/draw.hpp gives the same.
  std::vector<uint32_t> pinned(12);
  Loader::epoch_order(5, 3, 12, pinned.data());
  EXPECT_EQ(pinned, (std::vector<uint32_t>{1, 0, 4, 11, 10, 7, 6, 2, 8, 3, 9, 5}));
  std::vector<uint32_t> s = a;
  std::sort(s.begin(), s.end());
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(s[i], i);
  // Not the identity, and element 0 lands anywhere: rough uniformity of the
  // first position over many epochs (chi-square-free check of the spread).
  size_t fixed = 0;
  for (size_t i = 0; i < n; ++i) fixed += a[i] == i;
  EXPECT_LT(fixed, 10u);
  std::vector<int> first_bucket(4, 0);
  std::vector<uint32_t> o(16);
  for (uint64_t e = 0; e < 4000; ++e) {
    Loader::epoch_order(9, e, 16, o.data());
    first_bucket[o[0] / 4]++;
  }
  for (int k : first_bucket) EXPECT_NEAR(k, 1000, 120);
}

TEST(Loader, EpochCoversEverySampleOnceAndPadsTheLastBatch) {
  const MemoryDataset ds = make_ds(23);
  Loader L(ds, opts(5, 0));
  EXPECT_EQ(L.epoch_size(), 23u);
  EXPECT_EQ(L.batches_per_epoch(), 5u);
  const auto e0 = take(L, 6);
  std::multiset<int> seen;
  for (size_t k = 0; k < 5; ++k) {
    EXPECT_EQ(e0[k].n, k < 4 ? 5u : 3u);
    for (size_t r = 0; r < e0[k].n; ++r) {
      const int i = int(e0[k].x[r * 20]);
      seen.insert(i);
      EXPECT_EQ(e0[k].y[r], i % 10);
    }
  }
  EXPECT_EQ(seen.size(), 23u);
  EXPECT_EQ(std::set<int>(seen.begin(), seen.end()).size(), 23u);
  // Partial batch: unused rows are zero with label -1.
  for (size_t r = 3; r < 5; ++r) {
    EXPECT_EQ(e0[4].y[r], -1);
    for (size_t k = 0; k < 20; ++k) EXPECT_EQ(e0[4].x[r * 20 + k], 0.0f);
  }
  EXPECT_EQ(e0[5].n, 0u);  // end of epoch 0
  EXPECT_EQ(L.position(), (Position{1, 0}));
  // Epoch 1 has another order; the loader's order is epoch_order's.
  const auto e1 = take(L, 1);
  std::vector<uint32_t> order(23);
  Loader::epoch_order(1, 1, 23, order.data());
  for (size_t r = 0; r < 5; ++r) EXPECT_EQ(int(e1[0].x[r * 20]), int(order[r]));
  Loader::epoch_order(1, 0, 23, order.data());
  for (size_t r = 0; r < 5; ++r) EXPECT_EQ(int(e0[0].x[r * 20]), int(order[r]));
  EXPECT_NE(e0[0].x, e1[0].x);
}

TEST(Loader, DropLastAndNoShuffle) {
  const MemoryDataset ds = make_ds(23);
  LoaderOptions o = opts(5, 0);
  o.drop_last = true;
  o.shuffle = false;
  Loader L(ds, o);
  EXPECT_EQ(L.epoch_size(), 20u);
  EXPECT_EQ(L.batches_per_epoch(), 4u);
  const auto b = take(L, 5);
  for (size_t k = 0; k < 4; ++k) {
    EXPECT_EQ(b[k].n, 5u);
    for (size_t r = 0; r < 5; ++r) EXPECT_EQ(int(b[k].x[r * 20]), int(k * 5 + r));
  }
  EXPECT_EQ(b[4].n, 0u);
  o.batch_size = 24;
  EXPECT_THROW(Loader(ds, o), std::invalid_argument);
  o.batch_size = 0;
  EXPECT_THROW(Loader(ds, o), std::invalid_argument);
}

// Data parallelism: rank r of R reads rows [r B, (r+1) B) of every global
// batch of R B samples: the ranks' shares, side by side, are the batches
// one loader of batch R B delivers, over epochs, from any position.
TEST(Loader, RanksShareEveryGlobalBatchDisjointly) {
  const MemoryDataset ds = make_ds(47);
  LoaderOptions whole = opts(12, 0, 5);
  whole.drop_last = true;
  Loader one(ds, whole);
  const auto ref = take(one, 2 * 4);  // 2 epochs of 3 batches of 12 (11 dropped) + ends
  std::vector<std::vector<Batch>> shares;
  for (size_t r = 0; r < 3; ++r) {
    LoaderOptions o = opts(4, 0, 5);
    o.drop_last = true;
    o.ranks = 3;
    o.rank = r;
    Loader L(ds, o);
    EXPECT_EQ(L.epoch_size(), 36u);
    EXPECT_EQ(L.batches_per_epoch(), 3u);
    shares.push_back(take(L, 2 * 4));
    EXPECT_EQ(L.position(), one.position());
  }
  for (size_t k = 0; k < ref.size(); ++k) {
    ASSERT_EQ(ref[k].n, k % 4 == 3 ? 0u : 12u);
    for (size_t r = 0; r < 3; ++r) {
      ASSERT_EQ(shares[r][k].n, ref[k].n / 3) << "batch " << k << " rank " << r;
      for (size_t i = 0; i < shares[r][k].n; ++i) {
        EXPECT_EQ(shares[r][k].y[i], ref[k].y[r * 4 + i]);
        EXPECT_EQ(shares[r][k].x[i * 20], ref[k].x[(r * 4 + i) * 20]);
      }
    }
  }
  // Without drop_last a rank's share could be empty: refused.
  LoaderOptions bad = opts(4, 0, 5);
  bad.ranks = 3;
  bad.rank = 1;
  EXPECT_THROW(Loader(ds, bad), std::invalid_argument);
  bad.drop_last = true;
  bad.rank = 3;
  EXPECT_THROW(Loader(ds, bad), std::invalid_argument);
}

TEST(Loader, PrefetchGivesTheSameBatchesAsSynchronous) {
  const MemoryDataset ds = make_ds(101, 6, 7);
  for (bool aug : {false, true}) {
    LoaderOptions o = opts(8, 0, 77);
    o.crop_padding = aug ? 2 : 0;
    o.hflip = aug;
    Loader sync(ds, o);
    const auto ref = take(sync, 3 * 14);  // 3 epochs of 13 batches + ends
    for (int prefetch : {1, 2, 5}) {
      for (int threads : {1, 3}) {
        o.prefetch = prefetch;
        o.decode_threads = threads;
        Loader async(ds, o);
        EXPECT_EQ(take(async, 3 * 14), ref) << "prefetch " << prefetch << " threads " << threads;
        EXPECT_EQ(async.position(), (Position{3, 0}));
      }
    }
  }
}

TEST(Loader, ResumeFromAPositionGivesTheSameBatches) {
  const MemoryDataset ds = make_ds(50);
  for (int prefetch : {0, 2}) {
    LoaderOptions o = opts(6, prefetch, 3);
    o.hflip = true;
    o.crop_padding = 1;
    Loader a(ds, o);
    take(a, 11);  // past the end of epoch 0 (9 batches + end) into epoch 1
    const Position p = a.position();
    EXPECT_EQ(p, (Position{1, 6}));
    const auto rest = take(a, 25);

    Loader b(ds, o);  // a fresh run resumed at p
    b.seek(p);
    EXPECT_EQ(b.position(), p);
    EXPECT_EQ(take(b, 25), rest) << "prefetch " << prefetch;

    // Seeking back and forth on one loader works too.
    a.seek({0, 0});
    Loader c(ds, o);
    EXPECT_EQ(take(a, 12), take(c, 12));
    a.seek(p);
    EXPECT_EQ(take(a, 25), rest);
    // End-of-epoch positions are valid resume points.
    a.seek({2, a.epoch_size()});
    EXPECT_EQ(take(a, 1)[0].n, 0u);
    EXPECT_EQ(a.position(), (Position{3, 0}));
    EXPECT_THROW(a.seek({0, 51}), std::invalid_argument);
  }
}

TEST(Loader, CropAndFlipAreShiftsMirrorsAndSeeded) {
  const int H = 4, W = 5, P = 2;
  const MemoryDataset ds = make_ds(40, H, W);
  LoaderOptions o = opts(40, 0, 11);
  o.shuffle = false;
  o.crop_padding = P;
  o.hflip = true;
  Loader L(ds, o);
  const auto e = take(L, 4);  // epochs 0 and 1
  int flips = 0, shifted = 0;
  for (size_t r = 0; r < 40; ++r) {
    const float* img = e[0].x.data() + r * H * W;
    // Find a (dx, dy, flip) that explains the output exactly.
    bool found = false;
    for (int f = 0; f < 2 && !found; ++f)
      for (int dy = -P; dy <= P && !found; ++dy)
        for (int dx = -P; dx <= P && !found; ++dx) {
          bool ok = true;
          for (int y = 0; y < H && ok; ++y)
            for (int x = 0; x < W && ok; ++x) {
              const int sy = y + dy, sx = (f ? W - 1 - x : x) + dx;
              const float want = (sy >= 0 && sy < H && sx >= 0 && sx < W)
                                     ? float(r) + sy * 0.01f + sx * 0.0001f
                                     : 0.0f;  // MemoryDataset's fill
              ok = img[y * W + x] == want;
            }
          if (ok) {
            found = true;
            flips += f;
            shifted += (dx != 0 || dy != 0);
          }
        }
    EXPECT_TRUE(found) << "sample " << r;
  }
  EXPECT_GT(flips, 8);
  EXPECT_LT(flips, 32);
  EXPECT_GT(shifted, 25);
  EXPECT_NE(e[0].x, e[2].x);  // epoch 1 draws again
  Loader again(ds, o);
  EXPECT_EQ(take(again, 4), e);  // and the draws are a function of the seed
}

TEST(Loader, CropPadsWithTheNormalisedBlack) {
  // Fashion-MNIST padding must equal a black pixel after normalisation.
  const IdxDataset test = IdxDataset::open(kFashionMnistDir, "t10k");
  const Subset s = Subset::first(test, 64);
  LoaderOptions o = opts(64, 0);
  o.crop_padding = 4;
  Loader L(s, o);
  std::vector<float> x(64 * 784);
  std::vector<int32_t> y(64);
  ASSERT_EQ(L.next(x.data(), y.data()), 64u);
  const float black = (0.0f - 0.2860f) / 0.3530f;
  float lo = 1e9f;
  for (float v : x) lo = std::min(lo, v);
  EXPECT_NEAR(lo, black, 1e-6f);
}

TEST(Loader, ErrorsSurfaceAtTheirBatchInEveryMode) {
  const MemoryDataset base = make_ds(30);
  const FailingDataset ds(base, 17);
  for (int prefetch : {0, 2}) {
    for (int threads : {1, 4}) {
      LoaderOptions o = opts(4, prefetch);
      o.shuffle = false;
      o.decode_threads = threads;
      Loader L(ds, o);
      take(L, 4);  // samples 0..15
      std::vector<float> x(4 * 20);
      std::vector<int32_t> y(4);
      for (int again = 0; again < 2; ++again) {
        try {
          L.next(x.data(), y.data());
          ADD_FAILURE() << "no error, prefetch " << prefetch;
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "/data/bad.png: corrupt PNG");
        }
        EXPECT_EQ(L.position(), (Position{0, 16}));
      }
      L.seek({0, 20});  // skip the bad batch
      EXPECT_EQ(L.next(x.data(), y.data()), 4u);
      EXPECT_EQ(int(x[0]), 20);
    }
  }
}

TEST(Loader, MemoryIsPlannedAndReported) {
  const MemoryDataset ds = make_ds(1000, 8, 8);
  LoaderOptions o = opts(32, 3);
  o.crop_padding = 2;
  o.decode_threads = 2;
  const LoaderMemory plan = Loader::plan_memory(ds, o);
  Loader L(ds, o);
  const LoaderMemory& m = L.memory();
  EXPECT_EQ(m.ring, plan.ring);
  EXPECT_EQ(m.order, plan.order);
  EXPECT_EQ(m.scratch, plan.scratch);
  EXPECT_EQ(m.total(), plan.total());
  EXPECT_GE(m.ring, 3u * 32u * (64u * 4u + 4u));
  EXPECT_EQ(m.order, 1000u * 4u);
  EXPECT_GE(m.scratch, 2u * 64u * 4u);
  EXPECT_EQ(m.dataset_resident, ds.resident_bytes());
  EXPECT_EQ(L.pipeline_bytes(), m.ring + m.order + m.scratch);
  EXPECT_EQ(L.total_bytes(), L.pipeline_bytes() + ds.resident_bytes());
  o.prefetch = 0;
  EXPECT_EQ(Loader::plan_memory(ds, o).ring, 0u);
}

TEST(Loader, NoHeapAllocationPerBatch) {
  const IdxDataset train = IdxDataset::open(kFashionMnistDir, "t10k");
  for (int prefetch : {0, 2}) {
    for (bool aug : {false, true}) {
      LoaderOptions o = opts(64, prefetch, 5);
      o.crop_padding = aug ? 4 : 0;
      o.hflip = aug;
      const long at_start = g_allocs.load();
      Loader L(train, o);
      EXPECT_GT(g_allocs.load(), at_start);  // the counter sees the constructor's buffers
      std::vector<float> x(64 * 784);
      std::vector<int32_t> y(64);
      L.next(x.data(), y.data());  // warm up
      const long before = g_allocs.load();
      size_t batches = 0, samples = 0;
      // 400 batches: crosses two epoch boundaries (157 batches per epoch).
      for (int k = 0; k < 400; ++k) {
        const size_t n = L.next(x.data(), y.data());
        batches += n > 0;
        samples += n;
      }
      const long allocs = g_allocs.load() - before;
      EXPECT_EQ(allocs, 0) << "prefetch " << prefetch << " augment " << aug;
      EXPECT_GT(batches, 390u);
      EXPECT_GT(samples, 20000u);
    }
  }
}

TEST(Loader, FashionMnistEpochIsBalanced) {
  const IdxDataset test = IdxDataset::open(kFashionMnistDir, "t10k");
  Loader L(test, opts(128, 2, 2024));
  std::vector<float> x(128 * 784);
  std::vector<int32_t> y(128);
  std::vector<int> hist(10, 0);
  size_t n, total = 0, batches = 0;
  while ((n = L.next(x.data(), y.data())) > 0) {
    for (size_t r = 0; r < n; ++r) hist[size_t(y[r])]++;
    total += n;
    ++batches;
  }
  EXPECT_EQ(total, 10000u);
  EXPECT_EQ(batches, 79u);
  for (int c : hist) EXPECT_EQ(c, 1000);
}

// ---- named tensors -------------------------------------------------------------

namespace {

// A text-like dataset of two i32 tensors per sample, tokens [T] and targets
// [T] (targets pad with -1): sample i holds tokens 100 i + j, targets i.
class SequenceDataset final : public Dataset {
 public:
  SequenceDataset(size_t n, int64_t t) : n_(n), t_(t) {}
  size_t size() const override { return n_; }
  int num_classes() const override { return 1000; }
  std::vector<TensorSpec> tensors() const override {
    return {{"tokens", DType::i32, {t_}, 0.0}, {"targets", DType::i32, {t_}, -1.0}};
  }
  void get_tensors(size_t i, void* const* out) const override {
    if (i >= n_) throw std::out_of_range("SequenceDataset: index");
    auto* tok = static_cast<int32_t*>(out[0]);
    auto* tgt = static_cast<int32_t*>(out[1]);
    for (int64_t j = 0; j < t_; ++j) {
      tok[j] = static_cast<int32_t>(100 * i + static_cast<size_t>(j));
      tgt[j] = static_cast<int32_t>(i);
    }
  }
  size_t resident_bytes() const override { return 0; }

 private:
  size_t n_;
  int64_t t_;
};

}  // namespace

TEST(LoaderTensors, BatchesOfNamedTensorsWithPaddedLastBatch) {
  SequenceDataset ds(7, 3);
  EXPECT_FALSE(ds.is_image());
  EXPECT_THROW(ds.sample_shape(), std::logic_error);
  LoaderOptions o = opts(4, 2);
  o.shuffle = false;
  Loader L(ds, o);
  ASSERT_EQ(L.tensors().size(), 2u);
  EXPECT_EQ(L.tensors()[0].name, "tokens");
  EXPECT_THROW(L.sample_shape(), std::logic_error);
  std::vector<int32_t> x(12), y(12);
  EXPECT_THROW(L.next(reinterpret_cast<float*>(x.data()), y.data()), std::logic_error);  // not an image

  const Loader::Batch& b1 = L.next_batch();
  ASSERT_EQ(b1.n, 4u);
  ASSERT_EQ(b1.data.size(), 2u);
  const auto* tok = static_cast<const int32_t*>(b1.data[0]);
  const auto* tgt = static_cast<const int32_t*>(b1.data[1]);
  for (size_t r = 0; r < 4; ++r)
    for (size_t j = 0; j < 3; ++j) {
      EXPECT_EQ(tok[r * 3 + j], static_cast<int32_t>(100 * r + j));
      EXPECT_EQ(tgt[r * 3 + j], static_cast<int32_t>(r));
    }
  // The partial batch: rows 3 of 4 real; the fourth pads tokens 0, targets -1.
  void* out[2] = {x.data(), y.data()};
  ASSERT_EQ(L.next(out), 3u);
  EXPECT_EQ(x[6], 600);
  EXPECT_EQ(y[8], 6);
  for (size_t j = 9; j < 12; ++j) {
    EXPECT_EQ(x[j], 0);
    EXPECT_EQ(y[j], -1);
  }
  const Loader::Batch& end = L.next_batch();
  EXPECT_EQ(end.n, 0u);
  EXPECT_TRUE(end.data.empty());
  EXPECT_EQ(L.next_batch().n, 4u);  // the next epoch
}

TEST(LoaderTensors, ViewsAndCopiesGiveTheSameBatches) {
  const MemoryDataset ds = make_ds(50, 4, 4);
  LoaderOptions o = opts(8, 2, 5);
  o.crop_padding = 1;
  o.hflip = true;
  Loader a(ds, o), b(ds, o);
  const std::vector<Batch> copies = take(a, 10);
  for (const Batch& c : copies) {
    const Loader::Batch& v = b.next_batch();
    ASSERT_EQ(v.n, c.n);
    if (!v.n) continue;
    EXPECT_EQ(std::memcmp(v.data[0], c.x.data(), c.x.size() * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(v.data[1], c.y.data(), c.y.size() * sizeof(int32_t)), 0);
  }
  Loader sync(ds, opts(8, 0));
  EXPECT_THROW(sync.next_batch(), std::logic_error);
}

TEST(LoaderTensors, AugmentationNeedsImages) {
  SequenceDataset ds(8, 2);
  LoaderOptions o = opts(4, 1);
  o.hflip = true;
  try {
    Loader L(ds, o);
    FAIL() << "a flip of token sequences was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("tokens i32 [2]"), std::string::npos) << e.what();
  }
}

TEST(LoaderTensors, PlannedMemoryIsWhatTheLoaderHolds) {
  SequenceDataset ds(40, 5);
  for (int prefetch : {0, 1, 3}) {
    const LoaderOptions o = opts(6, prefetch);
    Loader L(ds, o);
    const LoaderMemory want = Loader::plan_memory(ds, o);
    EXPECT_EQ(L.memory().ring, want.ring) << prefetch;
    EXPECT_EQ(L.memory().scratch, want.scratch) << prefetch;
    EXPECT_EQ(L.memory().order, want.order) << prefetch;
    EXPECT_GE(L.memory().ring, size_t(prefetch) * 6 * 5 * 2 * sizeof(int32_t));
  }
}
