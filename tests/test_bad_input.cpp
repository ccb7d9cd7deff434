// Bad input gets a clear message and a non-zero exit, never a crash, and
// loses nothing: missing or corrupt data, bad labels, unreadable images,
// wrong or corrupted checkpoints, unwritable run directories, a full disk
// while checkpointing, bad flags.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "cli_util.hpp"
#include "io/safetensors.hpp"
#include "json_out.hpp"

using namespace memfit::testing;
namespace fs = std::filesystem;

namespace {

const char* kFashion = "/usr/share/datasets/fashion-mnist";

// A small IDX dataset (train and t10k) written raw: n images of 28x28.
void write_idx(const std::string& dir, int n, uint8_t max_label, bool truncate_images = false, bool bad_magic = false) {
  fs::create_directories(dir);
  for (const char* split : {"train", "t10k"}) {
    std::ofstream im(dir + "/" + split + "-images-idx3-ubyte", std::ios::binary);
    const uint32_t magic = bad_magic ? 0x00000804u : 0x00000803u;
    auto be = [&](std::ofstream& f, uint32_t v) {
      unsigned char b[4] = {static_cast<unsigned char>(v >> 24), static_cast<unsigned char>(v >> 16),
                            static_cast<unsigned char>(v >> 8), static_cast<unsigned char>(v)};
      f.write(reinterpret_cast<char*>(b), 4);
    };
    be(im, magic);
    be(im, static_cast<uint32_t>(n));
    be(im, 28);
    be(im, 28);
    std::vector<char> px(static_cast<size_t>(n) * 784 / (truncate_images ? 2 : 1), 7);
    im.write(px.data(), static_cast<std::streamsize>(px.size()));
    std::ofstream lb(dir + "/" + split + "-labels-idx1-ubyte", std::ios::binary);
    be(lb, 0x00000801u);
    be(lb, static_cast<uint32_t>(n));
    for (int i = 0; i < n; ++i) lb.put(static_cast<char>(i % (max_label + 1)));
  }
}

void expect_error(const RunResult& r, const std::vector<std::string>& parts) {
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_LT(r.code, 128) << "killed by a signal:\n" << r.out;
  for (const auto& p : parts) EXPECT_NE(r.out.find(p), std::string::npos) << "expected '" << p << "' in:\n" << r.out;
}

}  // namespace

TEST(BadInput, MissingDataset) {
  expect_error(run_memfit("train --data /nonexistent/fmnist --steps 1"), {"dataset not found at /nonexistent/fmnist"});
  const std::string empty = temp_dir("empty");
  expect_error(run_memfit("train --data " + empty + " --steps 1"), {"no dataset recognised at " + empty});
}

TEST(BadInput, TruncatedIdx) {
  const std::string d = temp_dir("trunc");
  write_idx(d, 100, 9, /*truncate_images=*/true);
  expect_error(run_memfit("train --data " + d + " --steps 1"), {"train-images-idx3-ubyte"});
}

TEST(BadInput, BadMagicIdx) {
  const std::string d = temp_dir("magic");
  write_idx(d, 100, 9, false, /*bad_magic=*/true);
  expect_error(run_memfit("train --data " + d + " --steps 1"), {"train-images-idx3-ubyte", "magic"});
}

TEST(BadInput, CorruptGzip) {
  const std::string d = temp_dir("gz");
  fs::create_directories(d);
  for (const char* f : {"train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"})
    fs::copy_file(std::string(kFashion) + "/" + f, d + "/" + f);
  // The first 64 KiB of the real file, then garbage.
  std::ifstream in(std::string(kFashion) + "/train-images-idx3-ubyte.gz", std::ios::binary);
  std::vector<char> head(65536);
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  std::ofstream out(d + "/train-images-idx3-ubyte.gz", std::ios::binary);
  out.write(head.data(), static_cast<std::streamsize>(head.size()));
  for (int i = 0; i < 4096; ++i) out.put(static_cast<char>(i * 37));
  out.close();
  expect_error(run_memfit("train --data " + d + " --steps 1"), {"train-images-idx3-ubyte.gz"});
}

TEST(BadInput, LabelOutOfRange) {
  const std::string d = temp_dir("label");
  write_idx(d, 100, 12);  // labels 0..12 but 10 classes
  expect_error(run_memfit("train --data " + d + " --steps 1"), {"train-labels-idx1-ubyte", "label 10 at index 10", "out of range"});
}

TEST(BadInput, UnreadableImage) {
  const std::string d = temp_dir("imgs");
  for (const char* cls : {"cats", "dogs"}) fs::create_directories(d + "/train/" + cls);
  for (int i = 0; i < 4; ++i)
    for (const char* cls : {"cats", "dogs"}) {
      std::ofstream f(d + "/train/" + cls + "/img" + std::to_string(i) + ".png", std::ios::binary);
      f << "this is not a png file at all";
    }
  expect_error(run_memfit("train --data " + d + " --steps 1 --batch 4 --image-size 16"), {".png"});
}

TEST(BadInput, WrongAndCorruptedCheckpoint) {
  const std::string d = temp_dir("ckpt");
  RunResult ok = run_memfit("train --subset 256 --test-subset 64 --steps 2 --batch 32 --out " + d);
  ASSERT_EQ(ok.code, 0) << ok.out;
  // A checkpoint of another model.
  expect_error(run_memfit("train --model resnet18 --subset 256 --steps 3 --batch 32 --resume " + d + " --out " + temp_dir("o1")),
               {"checkpoint of model 'convnet'", "resnet18"});
  // Flip one byte in the middle of the tensor data: the checksum catches it.
  {
    std::fstream f(d + "/checkpoint.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(0, std::ios::end);
    const auto size = static_cast<long>(f.tellg());
    f.seekg(size / 2);
    char c;
    f.get(c);
    f.seekp(size / 2);
    f.put(static_cast<char>(c ^ 0x5a));
  }
  expect_error(run_memfit("train --subset 256 --steps 3 --batch 32 --resume " + d + " --out " + temp_dir("o2")),
               {"checkpoint.safetensors", "corrupted"});
  // A truncated file.
  fs::resize_file(d + "/checkpoint.safetensors", 100);
  expect_error(run_memfit("train --subset 256 --steps 3 --batch 32 --resume " + d + " --out " + temp_dir("o3")),
               {"checkpoint.safetensors"});
  // No checkpoint at all.
  expect_error(run_memfit("train --subset 256 --steps 3 --resume " + temp_dir("none") + " --out " + temp_dir("o4")),
               {"no checkpoint to resume from"});
}

TEST(BadInput, UnwritableRunDirectory) {
  const std::string d = temp_dir("unwritable");
  std::ofstream(d + "/file") << "x";
  expect_error(run_memfit("train --subset 256 --steps 1 --out " + d + "/file/run"), {"run directory", d + "/file/run"});
}

// memfit with `args` in a private mount namespace where `mnt` is a fresh
// tmpfs of `size`; `after` runs there too once memfit has ended (to copy out
// or list what the test reads), and the exit status is memfit's.
RunResult memfit_on_tmpfs(const std::string& mnt, const std::string& size, const std::string& args,
                          const std::string& after) {
  return run_cmd("unshare -m sh -c 'mount -t tmpfs -o size=" + size + " tmpfs " + mnt + " && " +
                 std::string(MEMFIT_BINARY) + " " + args + "; rc=$?; " + after + "; exit $rc'");
}

// A ConvNet run of 16 steps with a checkpoint every 8 (and `extra` flags),
// its run directory a tmpfs of `size` that holds the step-8 checkpoint but
// not the step-16 one's temp file beside it: the run stops with an error
// naming `parts`, and the step-8 checkpoint is intact and resumes. An
// offloaded run leaves its offload file and step record (the state after
// its last step, persist/checkpoint.hpp), nothing else.
void expect_full_disk_keeps_step_8(const std::string& name, const std::string& size, const std::string& extra,
                                   const std::vector<std::string>& parts, bool offloaded = false) {
  const std::string mnt = temp_dir(name), keep = temp_dir(name + "-keep");
  RunResult r = memfit_on_tmpfs(
      mnt, size, "train --subset 256 --test-subset 64 --batch 32 --steps 16 --checkpoint-every 8" + extra + " --out " + mnt,
      "cp " + mnt + "/checkpoint.safetensors " + keep + "/; ls " + mnt);
  expect_error(r, parts);
  EXPECT_EQ(r.out.find("memfit-offload-") != std::string::npos, offloaded) << r.out;
  EXPECT_EQ(r.out.find("offload-step.safetensors") != std::string::npos, offloaded) << r.out;
  // (`ls` prints one name a line; the error names the temp file it wrote.)
  EXPECT_EQ(r.out.find(".tmp\n"), std::string::npos) << "a temp file outlived the run:\n" << r.out;
  auto f = memfit::io::SafetensorsFile::load(keep + "/checkpoint.safetensors");
  EXPECT_EQ(f.metadata().at("step"), "8");
  RunResult res = run_memfit("train --subset 256 --test-subset 64 --batch 32 --steps 9" + extra + " --resume " + keep +
                             " --out " + temp_dir(name + "-out"));
  EXPECT_EQ(res.code, 0) << res.out;
  EXPECT_NE(res.out.find("at step 8"), std::string::npos) << res.out;
}

TEST(BadInput, FullDiskKeepsPreviousCheckpoint) {
  // 48 MiB: the ConvNet's first checkpoint (~26 MB) and model (~13 MB) fit,
  // the second checkpoint's temp file does not.
  if (run_cmd("unshare -m true").code != 0) GTEST_SKIP() << "no mount namespaces here";
  expect_full_disk_keeps_step_8("fulldisk", "48m", "", {"No space left on device"});
}

TEST(BadInput, FullDiskWithOffloadKeepsPreviousCheckpoint) {
  // The offload file (25 MiB of values, kept with two copies: 50 MiB,
  // reserved when the run starts) shares a 100 MiB tmpfs with the run
  // directory.
  if (run_cmd("unshare -m true").code != 0) GTEST_SKIP() << "no mount namespaces here";
  expect_full_disk_keeps_step_8("fulldisk-offload", "100m", " --offload all",
                                {"No space left on device", "was not changed"}, true);

  // An offload directory too small for the file: refused before the first
  // step, saying how much it needed and what to do.
  const std::string small = temp_dir("fulldisk-offload-small");
  RunResult r = memfit_on_tmpfs(small, "16m",
                                "train --subset 256 --batch 32 --steps 2 --offload all --offload-dir " + small +
                                    " --out " + temp_dir("fulldisk-offload-small-out"),
                                "ls " + small);
  expect_error(r, {"cannot reserve 25 MiB for the offload file", small, "No space left on device", "--offload-dir"});
  EXPECT_EQ(r.out.find("step 1/"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("memfit-offload-"), std::string::npos) << r.out;

  // The plan shows it first: its disk space (the tmpfs's 16 MiB, less what
  // its measurement of the disk's speed leaves, nothing) holds less than
  // the file, in the report and in its JSON.
  RunResult p = memfit_on_tmpfs(small, "16m", "plan --subset 256 --batch 32 --offload all --json --offload-dir " + small,
                                "true");
  EXPECT_NE(p.out.find("memory spaces:"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("DOES NOT FIT, (available in " + small + ")"), std::string::npos) << p.out;
  const memfit::testing::Json spaces = memfit::testing::json_at(p.out, "memory_spaces");
  ASSERT_EQ(spaces.size(), 2u) << p.out;
  EXPECT_EQ(spaces[0]["kind"], "host");
  EXPECT_EQ(spaces[1]["kind"], "disk");
  EXPECT_EQ(spaces[1]["bytes"], memfit::testing::json_at(p.out, "offload/bytes")) << p.out;
  EXPECT_GT(spaces[1]["budget_bytes"].get<double>(), 0.0);
  EXPECT_LE(spaces[1]["budget_bytes"].get<double>(), 16.0 * (1 << 20));
  EXPECT_EQ(spaces[1]["fits"], false) << p.out;
}

TEST(BadInput, BadFlagsExitTwo) {
  for (const char* args : {"train --bogus", "train --batch abc", "train --batch", "train --memory 12parsecs",
                           "train --optimizer rmsprop", "train --schedule wavy", "plan --frobnicate", "nonsense"}) {
    RunResult r = run_memfit(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_NE(r.out.find("usage: memfit"), std::string::npos) << args << "\n" << r.out;
  }
  // An unknown device names the devices there are.
  RunResult d = run_memfit("train --device tpu");
  EXPECT_EQ(d.code, 2) << d.out;
  EXPECT_NE(d.out.find("--device takes one of"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("cpu, cpu-offset, cpu-own-memory, cuda"), std::string::npos) << d.out;
  RunResult m = run_memfit("train --model nosuchmodel");
  EXPECT_EQ(m.code, 2) << m.out;
  EXPECT_NE(m.out.find("unknown model 'nosuchmodel'"), std::string::npos) << m.out;
  EXPECT_EQ(run_memfit("--help").code, 0);
  EXPECT_EQ(run_memfit("train --help").code, 0);
  EXPECT_EQ(run_memfit("plan --help").code, 0);
}
