// safetensors reader/writer: round trips, every kind of corrupt file rejected
// with a message naming the file and the problem, atomic writes that leave the
// earlier file intact when the disk fills, and interop with a hand-written
// Python (numpy) reader and writer.
#include "io/safetensors.hpp"

#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using memfit::io::DType;
using memfit::io::SafetensorsFile;
using memfit::io::TensorInfo;
using memfit::io::TensorView;
using memfit::io::write_safetensors;

namespace {

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = char(uint8_t(n >> (8 * i)));
  return s;
}

// A raw file: header length, header text, `data_bytes` zero bytes.
std::string raw_file(const std::string& header, size_t data_bytes) {
  return le64(header.size()) + header + std::string(data_bytes, '\0');
}

// float -> bfloat16 by truncation (the test values are exact in bf16).
uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t(u >> 16);
}

// float -> IEEE half for values exact in half (test data only).
uint16_t to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint16_t sign = uint16_t((u >> 16) & 0x8000);
  int exp = int((u >> 23) & 0xFF) - 127 + 15;
  uint32_t man = u & 0x7FFFFF;
  if ((u & 0x7FFFFFFF) == 0) return sign;
  return uint16_t(sign | (exp << 10) | (man >> 13));
}

bool python_numpy_available() {
  return std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0;
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("memfit_st_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Loads `p` expecting failure; the message must start with the path and
  // contain `problem`.
  void expect_rejected(const fs::path& p, const std::string& problem) {
    try {
      SafetensorsFile::load(p.string());
      ADD_FAILURE() << p << " loaded but should be rejected for: " << problem;
    } catch (const std::runtime_error& e) {
      std::string msg = e.what();
      EXPECT_EQ(msg.rfind(p.string() + ": ", 0), 0u) << "message does not start with the path: "
                                                      << msg;
      EXPECT_NE(msg.find(problem), std::string::npos)
          << "message lacks '" << problem << "': " << msg;
    }
  }

  void expect_header_rejected(const std::string& header, size_t data_bytes,
                              const std::string& problem) {
    fs::path p = dir_ / "bad.safetensors";
    write_bytes(p, raw_file(header, data_bytes));
    SCOPED_TRACE("header: " + header);
    expect_rejected(p, problem);
  }

  fs::path dir_;
};

// A small file with two F32 tensors used by the failure tests.
std::vector<float> g_old_a = {1.f, 2.f, 3.f, 4.f, 5.f, 6.f};

void write_old(const fs::path& p) {
  write_safetensors(p.string(), {{"a", DType::F32, {2, 3}, g_old_a.data()}}, {{"v", "old"}});
}

void expect_old_intact(const fs::path& p) {
  SafetensorsFile f = SafetensorsFile::load(p.string());
  ASSERT_EQ(f.names(), std::vector<std::string>{"a"});
  EXPECT_EQ(f.metadata().at("v"), "old");
  EXPECT_EQ(std::memcmp(f.data(f.at("a")), g_old_a.data(), 24), 0);
  EXPECT_FALSE(fs::exists(p.string() + ".tmp")) << "temp file left behind";
}

}  // namespace

TEST(SafetensorsDType, NamesAndSizes) {
  struct {
    DType dt;
    const char* name;
    size_t size;
  } table[] = {{DType::F32, "F32", 4}, {DType::F64, "F64", 8}, {DType::BF16, "BF16", 2},
               {DType::F16, "F16", 2}, {DType::I32, "I32", 4}, {DType::I64, "I64", 8},
               {DType::U8, "U8", 1},   {DType::I8, "I8", 1},   {DType::BOOL, "BOOL", 1}};
  for (const auto& r : table) {
    EXPECT_EQ(memfit::io::dtype_name(r.dt), r.name);
    EXPECT_EQ(memfit::io::dtype_size(r.dt), r.size);
    EXPECT_EQ(memfit::io::parse_dtype(r.name), r.dt);
  }
  EXPECT_FALSE(memfit::io::parse_dtype("F8").has_value());
  EXPECT_FALSE(memfit::io::parse_dtype("f32").has_value());
}

TEST_F(SafetensorsTest, RoundTripDtypesShapesMetadata) {
  std::vector<float> f32(2 * 3 * 4);
  for (size_t i = 0; i < f32.size(); ++i) f32[i] = float(i) * 0.5f - 3.25f;
  std::vector<double> f64 = {1e-300, -2.5, 3.141592653589793, 1e300};
  std::vector<uint16_t> bf16 = {to_bf16(1.5f), to_bf16(-2.f), to_bf16(0.f),
                                to_bf16(65536.f), to_bf16(-0.0078125f), to_bf16(3.f)};
  std::vector<uint16_t> f16 = {to_f16(1.f), to_f16(-0.5f), to_f16(2048.f), to_f16(0.f),
                               to_f16(0.25f)};
  std::vector<int32_t> i32 = {INT32_MIN, -1, 0, 1, INT32_MAX, 7, 8, 9};
  std::vector<int64_t> i64 = {INT64_MIN, -1, 0, 1, INT64_MAX, int64_t(1) << 40};
  std::vector<uint8_t> u8 = {0, 1, 2, 127, 128, 254, 255};
  float scalar = 42.f;

  std::vector<TensorView> views = {
      {"layer.0.weight", DType::F32, {2, 3, 4}, f32.data()},
      {"f64", DType::F64, {4}, f64.data()},
      {"bf16", DType::BF16, {3, 2}, bf16.data()},
      {"f16", DType::F16, {5}, f16.data()},
      {"i32", DType::I32, {2, 2, 2}, i32.data()},
      {"u8", DType::U8, {7}, u8.data()},  // leaves the next tensor misaligned: allowed
      {"i64", DType::I64, {2, 3}, i64.data()},
      {"scalar", DType::F32, {}, &scalar},
      {"empty", DType::F32, {0, 3}, nullptr},
      {"name with \"quotes\", \\ and \xc3\xa9", DType::U8, {1}, u8.data()},
  };
  std::map<std::string, std::string> meta = {
      {"format", "pt"}, {"step", "1200"}, {"note", "line1\nline2\t\"q\" \x01 caf\xc3\xa9"}};

  fs::path p = dir_ / "round.safetensors";
  write_safetensors(p.string(), views, meta);
  EXPECT_FALSE(fs::exists(p.string() + ".tmp"));

  // Header length is a multiple of 8, so the data starts 8-byte aligned.
  std::string bytes = read_bytes(p);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(bytes[i])) << (8 * i);
  EXPECT_EQ(n % 8, 0u);

  SafetensorsFile f = SafetensorsFile::load(p.string());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(f.data(f.at("layer.0.weight"))) % 8, 0u);
  EXPECT_EQ(f.metadata(), meta);
  std::vector<std::string> expect_names;
  for (const auto& v : views) expect_names.push_back(v.name);
  EXPECT_EQ(f.names(), expect_names);
  uint64_t total = 0;
  for (const auto& v : views) {
    SCOPED_TRACE(v.name);
    const TensorInfo* t = f.find(v.name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->dtype, v.dtype);
    EXPECT_EQ(t->shape, v.shape);
    int64_t numel = 1;
    for (auto d : v.shape) numel *= d;
    EXPECT_EQ(t->numel(), numel);
    ASSERT_EQ(t->nbytes(), size_t(numel) * memfit::io::dtype_size(v.dtype));
    if (t->nbytes()) {
      EXPECT_EQ(std::memcmp(f.data(*t), v.data, t->nbytes()), 0);
    }
    total += t->nbytes();
  }
  EXPECT_EQ(bytes.size(), 8 + n + total);
  EXPECT_EQ(f.find("missing"), nullptr);
  EXPECT_THROW(f.at("missing"), std::runtime_error);

  // Move keeps the mapping valid.
  SafetensorsFile g = std::move(f);
  EXPECT_EQ(*static_cast<const double*>(g.data(g.at("f64"))), 1e-300);
}

// Files larger than the writer's 1 MiB buffer, of lengths that are not a
// multiple of a disk block, from memory and from read callbacks (the
// executor's pieces of an offloaded value): the bytes round-trip and the
// file is exactly as long as its contents (the last block's padding cut).
TEST_F(SafetensorsTest, LargeFilesOfAnyLengthRoundTrip) {
  for (size_t extra : {size_t(0), size_t(1), size_t(4095), size_t(4097), size_t(3) << 20}) {
    SCOPED_TRACE(extra);
    std::vector<uint8_t> a((size_t(1) << 20) + 13 + extra), b((size_t(2) << 20) + 7);
    for (size_t i = 0; i < a.size(); ++i) a[i] = uint8_t(i * 131 + 7);
    for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t(i * 17 + 3);
    TensorView from_reads{"b", DType::U8, {int64_t(b.size())}, nullptr, {}};
    size_t calls = 0;
    from_reads.read = [&](size_t off, void* dst, size_t n) {
      ASSERT_LE(off + n, b.size());
      std::memcpy(dst, b.data() + off, n);
      ++calls;
    };
    fs::path p = dir_ / "large.safetensors";
    write_safetensors(p.string(), {{"a", DType::U8, {int64_t(a.size())}, a.data()}, from_reads}, {{"k", "v"}});
    EXPECT_GT(calls, 1u);
    SafetensorsFile f = SafetensorsFile::load(p.string());
    ASSERT_EQ(f.at("a").nbytes(), a.size());
    ASSERT_EQ(f.at("b").nbytes(), b.size());
    EXPECT_EQ(std::memcmp(f.data(f.at("a")), a.data(), a.size()), 0);
    EXPECT_EQ(std::memcmp(f.data(f.at("b")), b.data(), b.size()), 0);
    std::string bytes = read_bytes(p);
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(bytes[i])) << (8 * i);
    EXPECT_EQ(bytes.size(), 8 + n + a.size() + b.size());
  }
}

TEST_F(SafetensorsTest, EmptyFileAndOverwrite) {
  fs::path p = dir_ / "x.safetensors";
  write_safetensors(p.string(), {});
  SafetensorsFile e = SafetensorsFile::load(p.string());
  EXPECT_TRUE(e.names().empty());
  EXPECT_TRUE(e.metadata().empty());

  write_old(p);
  std::vector<float> b = {9.f};
  write_safetensors(p.string(), {{"b", DType::F32, {1}, b.data()}});
  SafetensorsFile f = SafetensorsFile::load(p.string());
  EXPECT_EQ(f.names(), std::vector<std::string>{"b"});
  EXPECT_FALSE(fs::exists(p.string() + ".tmp"));
}

TEST_F(SafetensorsTest, WriterRejectsBadTensorListAndKeepsOldFile) {
  fs::path p = dir_ / "x.safetensors";
  write_old(p);
  float x = 1.f;
  EXPECT_THROW(write_safetensors(p.string(), {{"a", DType::F32, {1}, &x}, {"a", DType::F32, {1}, &x}}),
               std::invalid_argument);
  EXPECT_THROW(write_safetensors(p.string(), {{"", DType::F32, {1}, &x}}), std::invalid_argument);
  EXPECT_THROW(write_safetensors(p.string(), {{"__metadata__", DType::F32, {1}, &x}}),
               std::invalid_argument);
  EXPECT_THROW(write_safetensors(p.string(), {{"n", DType::F32, {-1}, &x}}), std::invalid_argument);
  EXPECT_THROW(write_safetensors(p.string(), {{"n", DType::F32, {2}, nullptr}}),
               std::invalid_argument);
  expect_old_intact(p);
}

TEST_F(SafetensorsTest, RejectsShortFiles) {
  fs::path p = dir_ / "short.safetensors";
  write_bytes(p, "");
  expect_rejected(p, "shorter than the 8-byte header length");
  write_bytes(p, "abcde");
  expect_rejected(p, "file is 5 bytes, shorter than the 8-byte header length");
  expect_rejected(dir_ / "missing.safetensors", "cannot open: No such file or directory");
  expect_rejected(dir_, "not a regular file");
}

TEST_F(SafetensorsTest, RejectsHeaderLengthPastEnd) {
  fs::path p = dir_ / "h.safetensors";
  std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  std::string file = raw_file(header, 4);
  write_bytes(p, le64(1000) + file.substr(8));
  expect_rejected(p, "header length 1000 is larger than the " + std::to_string(file.size() - 8) +
                         " bytes after it");
  write_bytes(p, le64(~uint64_t(0)) + file.substr(8));
  expect_rejected(p, "is larger than the");
  // Truncated in the middle of the data: offsets now run past the end.
  write_bytes(p, file.substr(0, file.size() - 2));
  expect_rejected(p, "tensor 'a' data_offsets [0, 4] run past the end of the data (2 bytes");
}

TEST_F(SafetensorsTest, RejectsMalformedJson) {
  const char* cases[][2] = {
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})", "expected '}'"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}xyz)",
       "unexpected text after the closing brace"},
      {R"({"a" {"dtype":"F32"}})", "expected ':'"},
      {R"({"a":{"dtype":"F32","shape":[1,],"data_offsets":[0,4]}})", "unexpected character ']'"},
      {R"({"a":{"dtype":"F\q32"}})", "unknown escape"},
      {R"({"a":{"dtype":"F32)", "unterminated string"},
      {R"({"a":{"dtype":"F32","shape":[01],"data_offsets":[0,4]}})", "expected ']'"},
      {R"({"a":1,"a":2})", "duplicate key 'a'"},
      {R"({"a":{"dtype":"F32","dtype":"F32"}})", "duplicate key 'dtype'"},
      {R"({"a":tru})", "unexpected character 't'"},
      {R"({"\ud800":1})", "high surrogate without a low surrogate"},
      {"{\"a\n\":1}", "control character inside a string"},
      {R"({1:2})", "expected a string key"},
  };
  for (const auto& c : cases) expect_header_rejected(c[0], 4, c[1]);
  // Deep nesting is refused, not a stack overflow.
  std::string deep = "{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  expect_header_rejected(deep, 0, "nesting deeper than");
  expect_header_rejected("[1,2]", 0, "header does not start with '{'");
  expect_header_rejected("", 0, "header does not start with '{'");
}

TEST_F(SafetensorsTest, RejectsBadHeaderStructure) {
  struct {
    std::string header;
    size_t data;
    std::string problem;
  } cases[] = {
      {R"({"a":{"dtype":"F8","shape":[1],"data_offsets":[0,1]}})", 1,
       "tensor 'a' has unknown dtype 'F8'"},
      {R"({"a":{"dtype":32,"shape":[1],"data_offsets":[0,4]}})", 4,
       "tensor 'a' dtype is a number, expected a string"},
      {R"({"a":{"shape":[1],"data_offsets":[0,4]}})", 4, "tensor 'a' lacks 'dtype'"},
      {R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", 4, "tensor 'a' lacks 'shape'"},
      {R"({"a":{"dtype":"F32","shape":[1]}})", 4, "tensor 'a' lacks 'data_offsets'"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", 4,
       "tensor 'a' has unknown field 'x'"},
      {R"({"a":[1]})", 4, "tensor 'a' is an array, expected an object"},
      {R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4,
       "tensor 'a' shape has '-1', expected a non-negative integer"},
      {R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4,
       "tensor 'a' shape has '1.5'"},
      {R"({"a":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})", 4,
       "tensor 'a' shape is not an array"},
      {R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", 4,
       "overflows 64-bit size"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4,
       "tensor 'a' data_offsets is not an array [begin, end]"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,-4]}})", 4,
       "data_offsets are not non-negative integers"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,99999999999999999999]}})", 4,
       "data_offsets are not non-negative integers"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 4,
       "tensor 'a' data_offsets [4, 0] end before they begin"},
      {R"({"__metadata__":{"k":1}})", 0, "__metadata__ value of 'k' is a number, expected a string"},
      {R"({"__metadata__":["k"]})", 0, "__metadata__ is an array, expected an object"},
  };
  for (const auto& c : cases) expect_header_rejected(c.header, c.data, c.problem);
}

TEST_F(SafetensorsTest, RejectsBadOffsets) {
  // The example from the error-message contract, verbatim.
  {
    fs::path p = dir_ / "checkpoint.safetensors";
    write_bytes(p, raw_file(R"({"fc.weight":{"dtype":"F32","shape":[10,10],"data_offsets":[0,100]}})",
                            100));
    try {
      SafetensorsFile::load(p.string());
      ADD_FAILURE() << "loaded";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()),
                p.string() + ": tensor 'fc.weight' data_offsets [0, 100] do not match shape "
                             "[10, 10] x F32 = 400 bytes");
    }
  }
  expect_header_rejected(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 8,
                         "tensor 'a' data_offsets [4, 12] run past the end of the data (8 bytes");
  expect_header_rejected(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
      12, "tensors 'a' [0, 8] and 'b' [4, 12] overlap");
  expect_header_rejected(
      R"({"b":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})",
      8, "overlap");
  expect_header_rejected(
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
      12, "data bytes [4, 8) belong to no tensor");
  expect_header_rejected(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 6,
                         "data section is 6 bytes but tensors cover only 4; trailing bytes");
  expect_header_rejected(R"({"a":{"dtype":"BF16","shape":[3],"data_offsets":[0,4]}})", 4,
                         "do not match shape [3] x BF16 = 6 bytes");

  // Zero-sized tensors may share an offset; an unpadded header is fine.
  fs::path ok = dir_ / "ok.safetensors";
  write_bytes(ok, raw_file(R"({"z":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
                           R"("y":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},)"
                           R"("w":{"dtype":"F64","shape":[2,0],"data_offsets":[3,3]}} )",
                           3));
  EXPECT_NO_THROW(SafetensorsFile::load(ok.string()));
}

TEST_F(SafetensorsTest, FailedWriteIntoMissingDirectory) {
  fs::path p = dir_ / "no_such_dir" / "x.safetensors";
  float x = 1.f;
  try {
    write_safetensors(p.string(), {{"a", DType::F32, {1}, &x}});
    ADD_FAILURE() << "write into a missing directory succeeded";
  } catch (const std::runtime_error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::strerror(ENOENT)), std::string::npos) << msg;
  }
  EXPECT_FALSE(fs::exists(p.parent_path()));
}

// A write that fails half-way (file size limit: EFBIG) removes the temp file
// and leaves the earlier checkpoint as it was. Runs in a child process so the
// resource limit does not leak into other tests.
TEST_F(SafetensorsTest, FailedWriteMidFileKeepsOldFile) {
  fs::path p = dir_ / "ckpt.safetensors";
  write_old(p);
  std::vector<float> big(1 << 16, 1.f);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = {8192, 8192};
    if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) ::_exit(3);
    try {
      write_safetensors(p.string(), {{"a", DType::F32, {int64_t(big.size())}, big.data()}});
      ::_exit(1);  // should have failed
    } catch (const std::runtime_error& e) {
      std::string msg = e.what();
      bool ok = msg.find(p.string()) != std::string::npos &&
                msg.find(std::strerror(EFBIG)) != std::string::npos;
      ::_exit(ok ? 0 : 2);
    } catch (...) {
      ::_exit(4);
    }
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: write succeeded, 2: bad message, 3: setrlimit, 4: other";
  expect_old_intact(p);
}

// The real thing: a full disk (ENOSPC) on a 64 KiB tmpfs mounted in a private
// mount namespace of a child process. Skipped where mounting is not allowed.
TEST_F(SafetensorsTest, DiskFullKeepsOldFile) {
  fs::path mnt = dir_ / "tmpfs";
  fs::create_directories(mnt);
  fs::path p = mnt / "ckpt.safetensors";
  std::vector<float> big(12000, 2.f);  // 48 KB: fits once, not twice, in 64 KiB
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (::unshare(CLONE_NEWNS) != 0) ::_exit(77);
    if (::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) ::_exit(77);
    if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=64k") != 0) ::_exit(77);
    int code = 0;
    try {
      write_safetensors(p.string(), {{"a", DType::F32, {int64_t(big.size())}, big.data()}},
                        {{"v", "old"}});
      std::vector<float> big2(big.size(), 3.f);
      try {
        write_safetensors(p.string(), {{"a", DType::F32, {int64_t(big2.size())}, big2.data()}});
        code = 1;
      } catch (const std::runtime_error& e) {
        std::string msg = e.what();
        if (msg.find(std::strerror(ENOSPC)) == std::string::npos) code = 2;
      }
      SafetensorsFile f = SafetensorsFile::load(p.string());
      if (f.metadata().at("v") != "old" ||
          std::memcmp(f.data(f.at("a")), big.data(), big.size() * 4) != 0)
        code = 5;
      if (fs::exists(p.string() + ".tmp")) code = 6;
    } catch (...) {
      code = 4;
    }
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "cannot mount a tmpfs here";
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "1: write succeeded, 2: message lacks ENOSPC, 4: exception, 5: old file changed, "
         "6: temp file left";
}

// A hand-written numpy reader must see exactly what memfit wrote, and memfit
// must read a file a Python writer produced (unpadded header, so unaligned
// data).
TEST_F(SafetensorsTest, PythonInterop) {
  if (!python_numpy_available()) GTEST_SKIP() << "/usr/bin/python3 with numpy not available";
  const int n = 24;
  std::vector<float> f32(n);
  std::vector<double> f64(n);
  std::vector<uint16_t> bf16(n), f16(n);
  std::vector<int64_t> i64(n);
  std::vector<int32_t> i32(n);
  std::vector<uint8_t> u8(n);
  for (int i = 0; i < n; ++i) {
    float v = float(i - 3) * 0.375f;  // exact in every float type used
    f32[i] = v;
    f64[i] = double(v) + 1e-12 * i;
    bf16[i] = to_bf16(v);
    f16[i] = to_f16(v);
    i64[i] = int64_t(i) * 3000000007ll - 5;
    i32[i] = -i * 1000;
    u8[i] = uint8_t(i * 10);
  }
  fs::path cpp_file = dir_ / "from_cpp.safetensors";
  fs::path py_file = dir_ / "from_py.safetensors";
  write_safetensors(cpp_file.string(),
                    {{"f32", DType::F32, {2, 3, 4}, f32.data()},
                     {"f64", DType::F64, {24}, f64.data()},
                     {"bf16", DType::BF16, {4, 6}, bf16.data()},
                     {"f16", DType::F16, {6, 4}, f16.data()},
                     {"i64", DType::I64, {24}, i64.data()},
                     {"i32", DType::I32, {24}, i32.data()},
                     {"u8", DType::U8, {24}, u8.data()}},
                    {{"who", "memfit"}});

  const char* script = R"PY(
import json, struct, sys
import numpy as np
src, dst = sys.argv[1], sys.argv[2]
raw = open(src, "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
hdr = json.loads(raw[8:8 + n])
data = raw[8 + n:]
assert hdr.pop("__metadata__") == {"who": "memfit"}
np_dt = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "I64": "<i8", "I32": "<i4", "U8": "u1", "BF16": "<u2"}
t = {}
for name, e in hdr.items():
    b, end = e["data_offsets"]
    a = np.frombuffer(data[b:end], dtype=np_dt[e["dtype"]]).reshape(e["shape"])
    if e["dtype"] == "BF16":
        a = (a.astype(np.uint32) << 16).view(np.float32)
    t[name] = a
i = np.arange(24)
v = ((i - 3).astype(np.float32) * np.float32(0.375))
assert t["f32"].shape == (2, 3, 4) and np.array_equal(t["f32"].ravel(), v)
assert np.array_equal(t["f64"], v.astype(np.float64) + 1e-12 * i)
assert t["bf16"].shape == (4, 6) and np.array_equal(t["bf16"].ravel(), v)
assert t["f16"].shape == (6, 4) and np.array_equal(t["f16"].ravel().astype(np.float32), v)
assert np.array_equal(t["i64"], i.astype(np.int64) * 3000000007 - 5)
assert np.array_equal(t["i32"], -i * 1000)
assert np.array_equal(t["u8"], (i * 10).astype(np.uint8))
# Now write one back, with an unpadded header (data unaligned).
w = (np.arange(6, dtype=np.float32) * np.float32(-1.25)).reshape(2, 3)
k = np.array([2**40 + 3, -7], dtype=np.int64)
h = {"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
     "k": {"dtype": "I64", "shape": [2], "data_offsets": [24, 40]},
     "__metadata__": {"who": "numpy"}}
hb = json.dumps(h, separators=(",", ":")).encode()
assert len(hb) % 8 != 0
with open(dst, "wb") as f:
    f.write(struct.pack("<Q", len(hb)) + hb + w.tobytes() + k.tobytes())
print("ok")
)PY";
  fs::path script_path = dir_ / "interop.py";
  write_bytes(script_path, script);
  fs::path out_path = dir_ / "interop.out";
  std::string cmd = "/usr/bin/python3 " + script_path.string() + " " + cpp_file.string() + " " +
                    py_file.string() + " >" + out_path.string() + " 2>&1";
  int rc = std::system(cmd.c_str());
  std::string out = read_bytes(out_path);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "ok\n");

  SafetensorsFile f = SafetensorsFile::load(py_file.string());
  EXPECT_EQ(f.metadata().at("who"), "numpy");
  const TensorInfo& w = f.at("w");
  EXPECT_EQ(w.dtype, DType::F32);
  EXPECT_EQ(w.shape, (std::vector<int64_t>{2, 3}));
  float wv[6];
  std::memcpy(wv, f.data(w), sizeof wv);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(wv[i], float(i) * -1.25f);
  int64_t kv[2];
  std::memcpy(kv, f.data(f.at("k")), sizeof kv);
  EXPECT_EQ(kv[0], (int64_t(1) << 40) + 3);
  EXPECT_EQ(kv[1], -7);
}
