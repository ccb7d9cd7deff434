// Issue #17: no input crashes memfit. Each parser refuses the inputs the
// fuzzing pass found (and the ones too big to commit under fuzz/regressions)
// with memfit's error type, quickly and without large allocations. The
// committed regressions are also replayed by the fuzz_replay_* entries.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "data/idx.hpp"
#include "data/image.hpp"
#include "data/image_folder.hpp"
#include "io/safetensors.hpp"
#include "memfit/builder.hpp"
#include "memfit/runtime.hpp"
#include "models/model_file.hpp"
#include "model_text.hpp"
#include "run_binary.hpp"
#include "idx_files.hpp"
#include "persist/checkpoint.hpp"

namespace fs = std::filesystem;
using namespace memfit;
using memfit::testing::TempDir;

namespace {

const std::string kRegressions = std::string(MEMFIT_TEST_DATA) + "/../fuzz/regressions/";
const std::string kCorpus = std::string(MEMFIT_TEST_DATA) + "/../fuzz/corpus/";

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The message of the std::runtime_error fn throws; fails the test if it
// throws nothing or anything else.
template <class F>
std::string refusal(F&& fn) {
  try {
    fn();
  } catch (const std::runtime_error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-runtime_error: " << e.what();
    return "";
  }
  ADD_FAILURE() << "accepted";
  return "";
}

std::string build_error(const std::string& text) {
  return refusal([&] {
    Graph g;
    Builder b(g);
    b.training = true;
    ValueId x = g.input("input", {2, 1, 28, 28});
    models::parse_model_text(text, "m.mf")(b, x, 10);
  });
}

// Runs fn in a child process under a time limit; returns the child's exit
// code (fn's return), -1 if it timed out or crashed. *rss: its peak RSS.
template <class F>
int in_child(F&& fn, int seconds, size_t* rss = nullptr) {
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(unsigned(seconds));
    _exit(fn());
  }
  int status = 0;
  struct rusage ru {};
  wait4(pid, &status, 0, &ru);
  if (rss) *rss = size_t(ru.ru_maxrss) * 1024;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST(ModelFileBounds, AttributesAreRangeChecked) {
  EXPECT_TRUE(contains(build_error("conv c out=8 k=3 stride=0\n"), "m.mf:1: conv stride=0 is out of range"));
  EXPECT_TRUE(contains(build_error("relu\nmaxpool k=0\n"), "m.mf:2: maxpool k=0 is out of range"));
  EXPECT_TRUE(contains(build_error("avgpool k=0\n"), "m.mf:1: avgpool k=0 is out of range"));
  EXPECT_TRUE(contains(build_error("maxpool k=2 stride=0\n"), "maxpool stride=0 is out of range"));
  EXPECT_TRUE(contains(build_error("conv c out=8 k=22337203654\n"), "m.mf:1: conv k=22337203654 is out of range"));
  EXPECT_TRUE(contains(build_error("conv c out=8 k=3 pad=-1\n"), "m.mf:1: conv pad=-1 is out of range: expected 0..1024"));
  EXPECT_TRUE(contains(build_error("maxpool k=2 pad=-5\n"), "maxpool pad=-5 is out of range"));
  EXPECT_TRUE(contains(build_error("conv c out=0 k=3\n"), "conv out=0 is out of range"));
  EXPECT_TRUE(contains(build_error("flatten\nlinear fc out=4611686018427387904\n"),
                       "m.mf:2: linear out=4611686018427387904 is out of range: expected 1..1048576"));
  EXPECT_TRUE(contains(build_error("conv c out=99999999999999999999999 k=3\n"), "out= expects an integer"));
  EXPECT_TRUE(contains(build_error("dropout d p=1\n"), "dropout p=1 is out of range"));
  EXPECT_TRUE(contains(build_error("dropout d p=nan\n"), "p= expects a finite number"));
  // Pads that grow the activation without end hit the element-count bound,
  // as a GraphError naming the line, not an overflow.
  std::string grow;
  for (int i = 0; i < 40; ++i) grow += "conv c" + std::to_string(i) + " out=1 k=1 pad=1024\n";
  EXPECT_TRUE(contains(build_error(grow + "conv wide out=1024 k=1\nflatten\nlinear fc out=1048576\n"),
                       "m.mf:43: value 'fc.weight' of shape [1048576, "));
  EXPECT_TRUE(contains(build_error(grow + "conv wide out=1024 k=1\nflatten\nlinear fc out=1048576\n"),
                       "has more than 2^59 elements"));
  // The C++ builder refuses the same values (no division by zero).
  Graph g;
  Builder b(g);
  ValueId x = g.input("input", {2, 1, 28, 28});
  EXPECT_THROW(max_pool2d(b, x, 0), GraphError);
  EXPECT_THROW(conv2d(b, x, 4, 3, {.stride = 0, .name = "c"}), GraphError);
  EXPECT_THROW(conv2d(b, x, 4, 22337203654, {.name = "c"}), GraphError);
}

TEST(ModelFileBounds, DeepNestingIsRefusedFastAndSmall) {
  for (int depth : {65, 40000, 100000}) {
    std::string text;
    for (int i = 0; i < depth; ++i) text += "scope a\n";
    text += "relu\n";
    for (int i = 0; i < depth; ++i) text += "end\n";
    const auto t0 = std::chrono::steady_clock::now();
    const std::string e = refusal([&] { models::parse_model_text(text, "deep.mf"); });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (depth * 12 > (1 << 20))
      EXPECT_TRUE(contains(e, "over the 1048576-byte limit")) << e;
    else
      EXPECT_TRUE(contains(e, "deep.mf:65: scopes nested deeper than 64")) << e;
    EXPECT_LT(s, 1.0) << depth;
  }
  // 64 levels are fine.
  std::string ok;
  for (int i = 0; i < 64; ++i) ok += "scope s" + std::to_string(i) + "\n";
  ok += "conv c out=2 k=1\n";
  for (int i = 0; i < 64; ++i) ok += "end\n";
  EXPECT_EQ(memfit::testing::model_text_error(ok), "");
}

TEST(ModelFileBounds, UnknownLayerIsAFileErrorNotAUsageError) {
  const std::string e = build_error("conv c1 out=8 k=3\nrleu\n");
  EXPECT_EQ(e.rfind("m.mf:2: unknown layer 'rleu' (known: ", 0), 0u) << e;
  EXPECT_TRUE(contains(e, "relu")) << e;
  EXPECT_TRUE(contains(e, "maxpool")) << e;
  TempDir dir("mf");
  const std::string path = (dir.path / "typo.mf").string();
  std::ofstream(path) << "conv c1 out=8 k=3\nrleu\n";
  const auto r = memfit::testing::run_memfit({"plan", "--model", path});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, path + ":2: unknown layer 'rleu'")) << r.err;
  EXPECT_FALSE(contains(r.err, "usage:")) << r.err;
}

TEST(IdxBounds, GzipHeadersAreBoundedByTheData) {
  // Refused (from the size of the file, or by zlib's length check on the
  // forged trailer) without a large allocation.
  for (const char* f : {"gzip_header_340GiB.gz", "gzip_labels_4GiB.gz"}) {
    const std::string path = kRegressions + "idx/" + f;
    size_t rss = 0;
    const int rc = in_child([&] {
      try {
        if (contains(f, "labels")) data::read_idx_labels(path);
        else data::read_idx_images(path);
      } catch (const std::runtime_error& e) {
        const bool why = contains(e.what(), "decompresses to at most") || contains(e.what(), "length check");
        if (!why) std::fprintf(stderr, "%s\n", e.what());
        return why ? 0 : 2;
      }
      return 3;
    }, 30, &rss);
    EXPECT_EQ(rc, 0) << f;
    EXPECT_LT(rss, size_t(200) << 20) << f;
  }
  EXPECT_EQ(fs::file_size(kRegressions + "idx/gzip_header_340GiB.gz"), 31u);
  EXPECT_EQ(fs::file_size(kRegressions + "idx/gzip_labels_4GiB.gz"), 28u);
}

namespace {

// The model of fuzz/fuzz_checkpoint.cpp: linear 4->3, batch norm.
struct TinyModel {
  Graph g;
  std::unique_ptr<Executor> ex;
  TinyModel() {
    Builder b(g);
    ValueId x = g.input("input", {2, 4});
    x = linear(b, x, 3, {.name = "fc"});
    batch_norm(b, x, {.name = "bn"});
    g.model_name = "fuzz";
    ExecConfig cfg;
    cfg.backend = Backend::Cpu;
    ex = std::make_unique<Executor>(g, cfg);
    ex->init_params(1);
  }
  std::vector<unsigned char> state() {
    std::vector<unsigned char> s;
    for (size_t i = 0; i < g.num_values(); ++i) {
      const Value& v = g.value(ValueId(i));
      if (v.cls != VClass::Param && v.cls != VClass::Buffer) continue;
      const auto* p = static_cast<const unsigned char*>(ex->data(ValueId(i)));
      s.insert(s.end(), p, p + v.bytes());
    }
    return s;
  }
};

std::string load_as_checkpoint(TinyModel& m, const std::string& file, train::TrainState* st = nullptr) {
  TempDir dir("ckpt");
  fs::copy_file(file, dir.path / "checkpoint.safetensors");
  try {
    train::TrainState s = train::load_checkpoint(dir.path.string(), *m.ex);
    if (st) *st = s;
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(CheckpointBounds, MetadataIsStrictAndCheckedBeforeAnythingIsCopied) {
  TinyModel m;
  train::TrainState st;
  // Seeds: format 2 as memfit writes it, and format 1 (tensor-only checksum).
  EXPECT_EQ(load_as_checkpoint(m, kCorpus + "checkpoint/checkpoint.safetensors", &st), "");
  EXPECT_EQ(st.step, 12);
  EXPECT_EQ(st.epoch, 1u);
  EXPECT_EQ(st.sample, 34u);
  EXPECT_EQ(st.extra.at("optimizer"), "sgd");
  st = {};
  EXPECT_EQ(load_as_checkpoint(m, kCorpus + "checkpoint/format1.safetensors", &st), "");
  EXPECT_EQ(st.step, 12);

  struct Case {
    const char* file;
    const char* problem;
  } cases[] = {
      {"bad_step", "metadata 'step' is 'abc', expected an integer from 0 to 9223372036854775807"},
      {"step_trailing", "metadata 'step' is '12x'"},
      {"step_plus", "metadata 'step' is '+12'"},
      {"step_overflow", "metadata 'step' is '9223372036854775808'"},
      {"step_huge", "metadata 'step'"},
      {"epoch_minus1", "metadata 'epoch' is '-1', expected an integer from 0 to 18446744073709551615"},
      {"sample_space", "metadata 'sample' is ' 34'"},
      {"seed_empty", "metadata 'seed' is ''"},
      {"metadata_changed", "checksum does not match"},
      {"format_unknown", "unsupported checkpoint format 'memfit-checkpoint-9'"},
      {"no_step", "no 'step' in its metadata"},
      {"format1_bad_step", "metadata 'step' is '-3'"},
  };
  for (const auto& c : cases) {
    m.ex->init_params(7);
    const auto before = m.state();
    const std::string e = load_as_checkpoint(m, kRegressions + "checkpoint/" + c.file + ".safetensors");
    EXPECT_TRUE(contains(e, c.problem)) << c.file << ": " << e;
    EXPECT_TRUE(m.state() == before) << c.file << ": a refused checkpoint changed the weights";
  }
}

namespace {

std::string header_file(const fs::path& p, const std::string& header) {
  std::ofstream f(p, std::ios::binary);
  const uint64_t n = header.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = (unsigned char)(n >> (8 * i));
  f.write(reinterpret_cast<const char*>(len), 8);
  f.write(header.data(), std::streamsize(header.size()));
  return p.string();
}

}  // namespace

TEST(SafetensorsBounds, ManyKeysLoadInNLogN) {
  TempDir dir("st");
  std::string h = "{";
  for (int i = 0; i < 80000; ++i) {
    if (i) h += ',';
    h.append("\"layer.").append(std::to_string(i)).append(".weight\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}");
  }
  h += "}";
  const std::string p = header_file(dir.path / "many.safetensors", h);
  const auto t0 = std::chrono::steady_clock::now();
  auto f = io::SafetensorsFile::load(p);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(f.tensors().size(), 80000u);
  EXPECT_LT(s, 3.0);  // was 46 s with the quadratic duplicate check
  // A duplicate among them is still found.
  const std::string dup = header_file(dir.path / "dup.safetensors",
                                      h.substr(0, h.size() - 1) +
                                          ",\"layer.5.weight\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}");
  EXPECT_TRUE(contains(refusal([&] { io::SafetensorsFile::load(dup); }), "duplicate key 'layer.5.weight'"));
}

TEST(SafetensorsBounds, HugeNumericHeaderIsRefusedInBoundedMemory) {
  TempDir dir("st");
  // 100 MB of header: {"a":[0,0,0,...]} (the file itself is mapped, so its
  // pages count in RSS once; a JSON tree of it peaked at 5.8 GB).
  std::string h = "{\"a\":[";
  h.reserve(size_t(100) << 20);
  while (h.size() < (size_t(100) << 20) - 16) h += "0,";
  h += "0]}";
  const std::string p = header_file(dir.path / "numeric.safetensors", h);
  h.clear();
  h.shrink_to_fit();
  size_t rss = 0;
  const int rc = in_child([&] {
    try {
      io::SafetensorsFile::load(p);
    } catch (const std::runtime_error& e) {
      return contains(e.what(), "tensor 'a' is an array, expected an object") ? 0 : 2;
    }
    return 3;
  }, 60, &rss);
  EXPECT_EQ(rc, 0);
  EXPECT_LT(rss, size_t(400) << 20);
}

TEST(ImageBounds, FifoIsRefusedWithoutBlocking) {
  TempDir dir("fifo");
  fs::create_directories(dir.path / "train" / "a");
  std::ofstream(dir.path / "train" / "a" / "ok.png") << "x";
  ASSERT_EQ(mkfifo((dir.path / "train" / "a" / "b.png").c_str(), 0644), 0);
  data::ImageFolderOptions opt;
  opt.height = opt.width = 8;
  opt.channels = 1;
  const int rc = in_child([&] {
    try {
      data::ImageFolderDataset ds((dir.path / "train").string(), opt);
    } catch (const std::runtime_error& e) {
      if (!contains(e.what(), "b.png is not a regular file")) return 2;
    }
    try {
      data::decode_image((dir.path / "train" / "a" / "b.png").string(), {});
    } catch (const std::runtime_error& e) {
      return contains(e.what(), "not a regular file") ? 0 : 4;
    }
    return 5;
  }, 20);
  EXPECT_EQ(rc, 0) << "-1: blocked on the FIFO (killed by the alarm) or crashed";
}

TEST(ImageBounds, HugeProgressiveJpegIsRefusedFromItsHeader) {
  data::DecodeRequest req;
  req.min_height = req.min_width = 8;
  req.max_pixels = 1u << 20;
  const std::string e = refusal([&] { data::decode_image(kRegressions + "image/progressive_8000x8000.jpg", req); });
  EXPECT_TRUE(contains(e, "progressive JPEG of 8000x8000 needs")) << e;
  EXPECT_TRUE(contains(e, "decoder memory")) << e;
  // The seeds decode.
  for (const char* f : {"baseline.jpg", "progressive.jpg", "gray.jpg", "rgb.png", "gray.png", "rgba.png"})
    EXPECT_GT(data::decode_image(kCorpus + "image/" + f, req).pixels.size(), 0u) << f;
}
