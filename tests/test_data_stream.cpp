// memfit StreamedIdxDataset: IDX images read from a disk cache one sample at
// a time must give bit-identical samples and batches to the in-memory
// IdxDataset (gzip and raw sources); the cache is built once (temp name,
// fsync, rename), reused without rewriting, rebuilt when truncated or
// corrupt; an unwritable cache directory and a short read are clear errors
// naming the path. Every file lives in a temp directory made by the test.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "data/dataset.hpp"
#include "data/idx.hpp"
#include "data/idx_stream.hpp"
#include "data/loader.hpp"
#include "error_of.hpp"
#include "idx_files.hpp"

namespace fs = std::filesystem;
using namespace memfit::data;
using memfit::testing::error_of;
using namespace memfit::testing;

namespace {


std::vector<uint8_t> idx_labels(uint32_t n, int classes) {
  std::vector<uint8_t> l;
  for (uint32_t i = 0; i < n; ++i) l.push_back(uint8_t((i * 7 + 3) % uint32_t(classes)));
  return memfit::testing::idx_labels(l);
}
// Every byte value appears, in an order that differs per image.
std::vector<uint8_t> idx_images(uint32_t n, uint32_t rows, uint32_t cols) {
  uint32_t x = 12345;
  return memfit::testing::idx_images(n, rows, cols, [&](uint32_t) {
    x = x * 1103515245u + 12345u;
    return uint8_t(x >> 16);
  });
}

// A source directory with "<split>-images-idx3-ubyte[.gz]" and labels.
struct Source {
  TempDir dir;
  std::string images, labels;
  Source(uint32_t n, uint32_t rows, uint32_t cols, bool gz, const std::string& split = "train") {
    const std::string suffix = gz ? ".gz" : "";
    images = dir / (split + "-images-idx3-ubyte" + suffix);
    labels = dir / (split + "-labels-idx1-ubyte" + suffix);
    if (gz) {
      write_gz(images, idx_images(n, rows, cols));
      write_gz(labels, idx_labels(n, 10));
    } else {
      write_bytes(images, idx_images(n, rows, cols));
      write_bytes(labels, idx_labels(n, 10));
    }
  }
};

StreamOptions in_dir(const std::string& cache_dir, bool prepare = true) {
  StreamOptions so;
  so.cache_dir = cache_dir;
  so.prepare = prepare;
  return so;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Every sample, bit for bit.
void expect_same_samples(const Dataset& a, const Dataset& b) {
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.sample_shape(), b.sample_shape());
  ASSERT_EQ(a.num_classes(), b.num_classes());
  const float fa = a.fill_value(0), fb = b.fill_value(0);
  EXPECT_EQ(std::memcmp(&fa, &fb, sizeof fa), 0);
  const size_t n = sample_numel(a.sample_shape());
  std::vector<float> xa(n), xb(n);
  for (size_t i = 0; i < a.size(); ++i) {
    int32_t ya = -1, yb = -2;
    a.get(i, xa.data(), &ya);
    b.get(i, xb.data(), &yb);
    ASSERT_EQ(ya, yb) << "sample " << i;
    ASSERT_EQ(std::memcmp(xa.data(), xb.data(), n * sizeof(float)), 0) << "sample " << i;
  }
}

// Batches of two epochs through the loader (shuffled, augmented, several
// decoding threads), bit for bit.
void expect_same_batches(const Dataset& a, const Dataset& b, size_t batch) {
  LoaderOptions o;
  o.batch_size = batch;
  o.seed = 7;
  o.crop_padding = 2;
  o.hflip = true;
  o.decode_threads = 2;
  Loader la(a, o), lb(b, o);
  const size_t floats = batch * sample_numel(a.sample_shape());
  std::vector<float> xa(floats), xb(floats);
  std::vector<int32_t> ya(batch), yb(batch);
  size_t batches = 0;
  for (int epoch = 0; epoch < 2; ++epoch)
    for (;;) {
      const size_t na = la.next(xa.data(), ya.data()), nb = lb.next(xb.data(), yb.data());
      ASSERT_EQ(na, nb);
      if (na == 0) break;
      ASSERT_EQ(ya, yb) << "batch " << batches;
      ASSERT_EQ(std::memcmp(xa.data(), xb.data(), floats * sizeof(float)), 0) << "batch " << batches;
      ++batches;
    }
  EXPECT_GT(batches, 2u);
}

size_t count_files(const std::string& dir) {
  size_t n = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) ++n;
  return n;
}

}  // namespace

TEST(DataStream, GzipSourceGivesBitIdenticalSamplesAndBatches) {
  Source src(97, 9, 7, /*gz=*/true);
  TempDir cache;
  const IdxDataset mem = IdxDataset::open(src.dir.path.string(), "train");
  StreamedIdxDataset disk = StreamedIdxDataset::open(src.dir.path.string(), "train", {}, in_dir(cache.path.string()));
  ASSERT_TRUE(disk.prepared());
  EXPECT_EQ(fs::path(disk.cache_path()).parent_path(), cache.path);
  EXPECT_EQ(disk.cache_path().substr(disk.cache_path().size() - 4), ".idx");
  EXPECT_EQ(fs::file_size(disk.cache_path()), 16u + 97u * 9u * 7u);
  expect_same_samples(mem, disk);
  expect_same_batches(mem, disk, 16);
  // Through a subset too (the trainer's --subset).
  const Subset sm = Subset::random(mem, 40, 3), sd = Subset::random(disk, 40, 3);
  expect_same_batches(sm, sd, 8);
  // Only the cache file is left in the directory: no temp files.
  EXPECT_EQ(count_files(cache.path.string()), 1u);
}

TEST(DataStream, RawSourceIsStreamedInPlace) {
  Source src(64, 5, 11, /*gz=*/false);
  TempDir cache;
  const IdxDataset mem = IdxDataset::open(src.dir.path.string(), "train");
  StreamedIdxDataset disk = StreamedIdxDataset::open(src.dir.path.string(), "train", {}, in_dir(cache.path.string()));
  EXPECT_EQ(disk.cache_path(), src.images);
  EXPECT_EQ(count_files(cache.path.string()), 0u) << "a raw source needs no cache";
  expect_same_samples(mem, disk);
  expect_same_batches(mem, disk, 10);
  EXPECT_EQ(disk.prepare().action, CacheStatus::Raw);
}

TEST(DataStream, OtherNormalisationAndClassesMatchToo) {
  Source src(30, 4, 4, true);
  TempDir cache;
  IdxOptions opt;
  opt.normalize = {{0.5f}, {0.25f}};
  opt.num_classes = 12;
  const IdxDataset mem = IdxDataset::open(src.dir.path.string(), "train", opt);
  StreamedIdxDataset disk = StreamedIdxDataset::open(src.dir.path.string(), "train", opt, in_dir(cache.path.string()));
  expect_same_samples(mem, disk);
}

TEST(DataStream, FashionMnistTestSplitMatchesInMemory) {
  if (!fs::exists(std::string(kFashionMnistDir) + "/t10k-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  TempDir cache;
  const IdxDataset mem = IdxDataset::open(kFashionMnistDir, "t10k");
  StreamedIdxDataset disk = StreamedIdxDataset::open(kFashionMnistDir, "t10k", {}, in_dir(cache.path.string()));
  expect_same_samples(mem, disk);
  expect_same_batches(Subset::first(mem, 1000), Subset::first(disk, 1000), 64);
  // Memory accounting: labels, table and paths only; one sample of buffer.
  EXPECT_LT(disk.resident_bytes(), 10000u + 1024u + 4096u);
  EXPECT_GE(disk.resident_bytes(), 10000u + 1024u);
  EXPECT_EQ(disk.transient_bytes(), 784u);
  EXPECT_EQ(disk.in_memory_resident_bytes(), mem.resident_bytes());
}

TEST(DataStream, ConcurrentGetsAgree) {
  Source src(200, 28, 28, true);
  TempDir cache;
  const IdxDataset mem = IdxDataset::open(src.dir.path.string(), "train");
  StreamedIdxDataset disk = StreamedIdxDataset::open(src.dir.path.string(), "train", {}, in_dir(cache.path.string()));
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::vector<float> a(784), b(784);
      for (int rep = 0; rep < 5; ++rep)
        for (size_t i = size_t(t); i < 200; i += 3) {
          int32_t ya, yb;
          mem.get(i, a.data(), &ya);
          disk.get(i, b.data(), &yb);
          bad[size_t(t)] += ya != yb || std::memcmp(a.data(), b.data(), sizeof(float) * 784) != 0;
        }
    });
  for (auto& th : threads) th.join();
  for (int b : bad) EXPECT_EQ(b, 0);
}

TEST(DataStream, LargeImagesReadInChunks) {
  // 200x150 = 30000 bytes per image: more than one read chunk.
  Source src(5, 200, 150, true);
  TempDir cache;
  const IdxDataset mem = IdxDataset::open(src.dir.path.string(), "train");
  StreamedIdxDataset disk = StreamedIdxDataset::open(src.dir.path.string(), "train", {}, in_dir(cache.path.string()));
  EXPECT_EQ(disk.transient_bytes(), StreamedIdxDataset::kChunk);
  expect_same_samples(mem, disk);
}

TEST(DataStream, CacheIsReusedWithoutRewriting) {
  Source src(50, 6, 6, true);
  TempDir cache;
  std::string path;
  {
    StreamedIdxDataset d = StreamedIdxDataset::open(src.dir.path.string(), "train", {}, in_dir(cache.path.string(), false));
    EXPECT_FALSE(d.prepared());
    EXPECT_FALSE(fs::exists(d.cache_path())) << "opening without prepare writes nothing";
    const CacheStatus st = d.prepare();
    EXPECT_EQ(st.action, CacheStatus::Built);
    path = st.path;
  }
  // Backdate the cache file; a reuse must leave it untouched.
  const auto old_time = fs::last_write_time(path) - std::chrono::hours(24);
  fs::last_write_time(path, old_time);
  struct stat before;
  ASSERT_EQ(::stat(path.c_str(), &before), 0);
  StreamedIdxDataset again = StreamedIdxDataset::open(src.dir.path.string(), "train", {}, in_dir(cache.path.string(), false));
  EXPECT_EQ(again.cache_path(), path);
  EXPECT_EQ(again.prepare().action, CacheStatus::Reused);
  struct stat after;
  ASSERT_EQ(::stat(path.c_str(), &after), 0);
  EXPECT_EQ(fs::last_write_time(path), old_time);
  EXPECT_EQ(before.st_ino, after.st_ino);
  EXPECT_EQ(count_files(cache.path.string()), 1u);
  expect_same_samples(IdxDataset::open(src.dir.path.string(), "train"), again);
}

TEST(DataStream, ChangedSourceGetsANewCache) {
  Source src(20, 3, 3, true);
  TempDir cache;
  const std::string first = idx_cache_path(src.images, cache.path.string());
  EXPECT_EQ(first, idx_cache_path(src.images, cache.path.string()));
  // A rewritten source (newer mtime) is another cache file; so is one of
  // another size.
  write_gz(src.images, idx_images(20, 3, 3));
  fs::last_write_time(src.images, fs::last_write_time(src.images) + std::chrono::seconds(5));
  const std::string second = idx_cache_path(src.images, cache.path.string());
  EXPECT_NE(first, second);
  const auto t = fs::last_write_time(src.images);
  write_gz(src.images, idx_images(21, 3, 3));
  fs::last_write_time(src.images, t);
  EXPECT_NE(second, idx_cache_path(src.images, cache.path.string()));
}

TEST(DataStream, TruncatedOrCorruptCacheIsRebuilt) {
  Source src(40, 8, 8, true);
  TempDir cache;
  const IdxDataset mem = IdxDataset::open(src.dir.path.string(), "train");
  std::string path;
  {
    StreamedIdxDataset d = StreamedIdxDataset::open(src.dir.path.string(), "train", {}, in_dir(cache.path.string()));
    path = d.cache_path();
  }
  const auto good = read_bytes(path);

  // Truncated (a copy cut short by hand, a full disk before this code).
  fs::resize_file(path, good.size() / 2);
  {
    StreamedIdxDataset d = StreamedIdxDataset::open(src.dir.path.string(), "train", {}, in_dir(cache.path.string(), false));
    const CacheStatus st = d.prepare();
    EXPECT_EQ(st.action, CacheStatus::Rebuilt);
    EXPECT_TRUE(contains(st.reason, "truncated")) << st.reason;
    expect_same_samples(mem, d);
  }
  EXPECT_EQ(read_bytes(path), good);

  // Shorter than a header.
  write_bytes(path, {1, 2, 3});
  {
    StreamedIdxDataset d = StreamedIdxDataset::open(src.dir.path.string(), "train", {}, in_dir(cache.path.string(), false));
    const CacheStatus st = d.prepare();
    EXPECT_EQ(st.action, CacheStatus::Rebuilt);
    EXPECT_TRUE(contains(st.reason, "shorter than an IDX header")) << st.reason;
  }
  EXPECT_EQ(read_bytes(path), good);

  // Corrupt header: wrong magic; then dimensions that disagree with the source.
  auto bad = good;
  bad[2] = 0x09;
  write_bytes(path, bad);
  {
    StreamedIdxDataset d = StreamedIdxDataset::open(src.dir.path.string(), "train", {}, in_dir(cache.path.string(), false));
    const CacheStatus st = d.prepare();
    EXPECT_EQ(st.action, CacheStatus::Rebuilt);
    EXPECT_TRUE(contains(st.reason, "bad magic")) << st.reason;
  }
  bad = good;
  bad[7] = 20;   // 40 images of 8x8 -> 20 of 16x8: the same size, the
  bad[11] = 16;  // wrong header
  write_bytes(path, bad);
  {
    StreamedIdxDataset d = StreamedIdxDataset::open(src.dir.path.string(), "train", {}, in_dir(cache.path.string(), false));
    const CacheStatus st = d.prepare();
    EXPECT_EQ(st.action, CacheStatus::Rebuilt);
    EXPECT_TRUE(contains(st.reason, "header declares 20 images of 16x8")) << st.reason;
    expect_same_samples(mem, d);
  }
  EXPECT_EQ(read_bytes(path), good);
  EXPECT_EQ(count_files(cache.path.string()), 1u);
}

TEST(DataStream, StaleTempFilesOfACrashedBuildAreRemoved) {
  Source src(10, 4, 4, true);
  TempDir cache;
  const std::string path = idx_cache_path(src.images, cache.path.string());
  const std::string stale = path + ".tmp.99999.0";
  write_bytes(stale, {1, 2, 3});
  fs::last_write_time(stale, fs::last_write_time(stale) - std::chrono::hours(1));
  const std::string fresh = path + ".tmp.99999.1";  // maybe another process's build in progress
  write_bytes(fresh, {1, 2, 3});
  StreamedIdxDataset d = StreamedIdxDataset::open(src.dir.path.string(), "train", {}, in_dir(cache.path.string()));
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(fresh));
  EXPECT_TRUE(fs::exists(path));
}

TEST(DataStream, UnwritableCacheDirIsAClearError) {
  Source src(10, 4, 4, true);
  TempDir tmp;
  // A cache "directory" below a regular file cannot be created, even by root.
  write_bytes(tmp / "file", {0});
  const std::string dir = tmp / "file/cache";
  const std::string msg = error_of([&] {
    StreamedIdxDataset::open(src.dir.path.string(), "train", {}, in_dir(dir));
  });
  EXPECT_TRUE(contains(msg, "cannot create the dataset cache directory " + dir)) << msg;
  EXPECT_TRUE(contains(msg, "--cache-dir")) << msg;
  EXPECT_TRUE(contains(msg, "--data-in memory")) << msg;

  // A directory without write permission (only meaningful when not root).
  if (geteuid() != 0) {
    const std::string ro = tmp / "ro";
    fs::create_directory(ro);
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
    const std::string msg2 = error_of([&] {
      StreamedIdxDataset::open(src.dir.path.string(), "train", {}, in_dir(ro));
    });
    EXPECT_TRUE(contains(msg2, "cannot write the dataset cache in " + ro)) << msg2;
    EXPECT_TRUE(contains(msg2, "Permission denied")) << msg2;
  }
}

TEST(DataStream, CorruptSourceNamesItAndLeavesNoFiles) {
  TempDir src, cache;
  auto img = idx_images(30, 5, 5);
  img.resize(img.size() - 40);  // fewer pixels than declared
  write_gz(src / "train-images-idx3-ubyte.gz", img);
  write_gz(src / "train-labels-idx1-ubyte.gz", idx_labels(30, 10));
  const std::string msg = error_of([&] {
    StreamedIdxDataset::open(src.path.string(), "train", {}, in_dir(cache.path.string()));
  });
  EXPECT_TRUE(contains(msg, src / "train-images-idx3-ubyte.gz")) << msg;
  EXPECT_TRUE(contains(msg, "truncated")) << msg;
  EXPECT_EQ(count_files(cache.path.string()), 0u) << "the temp file is removed";

  // Mismatched counts and a label out of range, as IdxDataset reports them.
  write_gz(src / "train-images-idx3-ubyte.gz", idx_images(30, 5, 5));
  write_gz(src / "train-labels-idx1-ubyte.gz", idx_labels(29, 10));
  EXPECT_TRUE(contains(error_of([&] { StreamedIdxDataset::open(src.path.string(), "train", {}, in_dir(cache.path.string())); }),
                       "mismatched files"));
  write_gz(src / "train-labels-idx1-ubyte.gz", idx_labels(30, 10));
  IdxOptions five;
  five.num_classes = 5;
  EXPECT_TRUE(contains(error_of([&] { StreamedIdxDataset::open(src.path.string(), "train", five, in_dir(cache.path.string())); }),
                       "out of range for 5 classes"));
}

TEST(DataStream, ShortReadNamesTheCacheFile) {
  Source src(20, 10, 10, true);
  TempDir cache;
  StreamedIdxDataset d = StreamedIdxDataset::open(src.dir.path.string(), "train", {}, in_dir(cache.path.string()));
  // Truncated while in use (the open descriptor sees the new size).
  fs::resize_file(d.cache_path(), 16 + 10 * 100 + 50);
  std::vector<float> x(100);
  int32_t y;
  d.get(9, x.data(), &y);  // still whole
  const std::string msg = error_of([&] { d.get(10, x.data(), &y); });
  EXPECT_TRUE(contains(msg, d.cache_path())) << msg;
  EXPECT_TRUE(contains(msg, "short read of sample 10")) << msg;
  EXPECT_TRUE(contains(error_of([&] { d.get(20, x.data(), &y); }), "index 20 >= size 20"));
}

TEST(DataStream, GetBeforePrepareIsALogicError) {
  Source src(5, 2, 2, true);
  TempDir cache;
  StreamedIdxDataset d = StreamedIdxDataset::open(src.dir.path.string(), "train", {}, in_dir(cache.path.string(), false));
  std::vector<float> x(4);
  int32_t y;
  EXPECT_THROW(d.get(0, x.data(), &y), std::logic_error);
  // Planning needs no cache: size, shape and bytes are known.
  EXPECT_EQ(d.size(), 5u);
  EXPECT_EQ(d.sample_shape(), (SampleShape{1, 2, 2}));
  EXPECT_EQ(d.in_memory_resident_bytes(), 5u * 4u + 5u + 256u * sizeof(float));
}

TEST(DataStream, TheCacheDirectoryFollowsWhatTheCommandRead) {
  // What the command read from MEMFIT_CACHE_DIR, XDG_CACHE_HOME and HOME,
  // in that order; a relative XDG_CACHE_HOME is ignored, as its
  // specification says.
  EXPECT_EQ(cache_dir_for({"/some/where", "/xdg/cache", "/home/someone"}), "/some/where");
  EXPECT_EQ(cache_dir_for({"", "/xdg/cache", "/home/someone"}), "/xdg/cache/memfit");
  EXPECT_EQ(cache_dir_for({"", "relative/ignored", "/home/someone"}), "/home/someone/.cache/memfit");
  // No HOME: the password database's home of this user, which every
  // account has here; a library caller that names no directory gets the
  // per-user one under /tmp, never a home.
  const std::string from_passwd = cache_dir_for({});
  EXPECT_NE(from_passwd.find("/.cache/memfit"), std::string::npos) << from_passwd;
  EXPECT_EQ(fallback_cache_dir(), "/tmp/memfit-cache-" + std::to_string(getuid()));
}
