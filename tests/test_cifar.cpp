// CIFAR-10 and CIFAR-100 in the archives' layouts (python pickles as
// torchvision keeps them, and the binary records): fake folders written by
// tests/make_fake_cifar.py (Python 2 cPickle's opcodes, written by hand)
// read back pixel for pixel and label for label; the normalised samples,
// the memory accounting and --cifar100-labels; `memfit train` on them; and
// hostile files (truncated, foreign globals, forged lengths, bad labels,
// wrong record sizes) refused with errors naming the file and the offset.
// torchvision's own CIFAR10/CIFAR100 read the same fake folders (skipped
// where torchvision is not installed: make deps-torch).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_util.hpp"
#include "data/cifar.hpp"
#include "data/pickle.hpp"

using namespace memfit;
using namespace memfit::data;
using namespace memfit::testing;
using namespace std::string_literals;
namespace fs = std::filesystem;

namespace {

const std::string kPython = "/usr/bin/python3";

// tests/make_fake_cifar.py's folder of `kind` (10, 100) and `format` (py,
// bin) with n images per batch file, under a fresh root; returns the root.
std::string make_fake(const std::string& tag, int kind, const std::string& format, int n = 3) {
  const std::string root = temp_dir("cifar-" + tag);
  const RunResult r = run_cmd(kPython + " " + MEMFIT_TEST_DATA + "/make_fake_cifar.py --out " + root + " --kind " +
                              std::to_string(kind) + " --format " + format + " --per-batch " + std::to_string(n));
  EXPECT_EQ(r.code, 0) << r.out;
  return root;
}

// The formula make_fake_cifar.py writes (s: 0 train, 1 test).
uint8_t fake_pixel(size_t i, size_t k, int s) { return uint8_t((i * 131 + k * 7 + size_t(s) * 17) % 256); }
int fake_label10(size_t i, int s) { return int((i * 3 + size_t(s)) % 10); }
int fake_fine100(size_t i, int s) { return int((i * 7 + size_t(s)) % 100); }

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Checks every image and label of both splits against the formula.
void expect_fake(const CifarLayout& l, int per_batch, bool coarse = false) {
  for (int s = 0; s < 2; ++s) {
    CifarOptions opt;
    opt.coarse = coarse;
    const CifarDataset d = CifarDataset::open(l, s == 0 ? "train" : "test", opt);
    ASSERT_EQ(d.size(), size_t(s == 0 ? 5 * per_batch : per_batch));
    EXPECT_EQ(d.num_classes(), l.kind == CifarKind::Cifar10 ? 10 : coarse ? 20 : 100);
    for (size_t i = 0; i < d.size(); ++i) {
      for (size_t k = 0; k < kCifarImageBytes; ++k)
        ASSERT_EQ(d.image(i)[k], fake_pixel(i, k, s)) << l.describe() << " split " << s << " image " << i << " byte " << k;
      const int want = l.kind == CifarKind::Cifar10 ? fake_label10(i, s)
                       : coarse                     ? fake_fine100(i, s) % 20
                                                    : fake_fine100(i, s);
      ASSERT_EQ(d.label(i), want) << l.describe() << " split " << s << " image " << i;
    }
  }
}

}  // namespace

TEST(Cifar, PicklesReadBackExactly) {
  const std::string root = make_fake("py10", 10, "py");
  // --data may be torchvision's root or the folder itself.
  for (const std::string& at : {root, root + "/cifar-10-batches-py"}) {
    const std::optional<CifarLayout> l = find_cifar(at);
    ASSERT_TRUE(l) << at;
    EXPECT_EQ(l->kind, CifarKind::Cifar10);
    EXPECT_FALSE(l->binary);
    EXPECT_EQ(l->dir, root + "/cifar-10-batches-py");
  }
  const CifarLayout l = *find_cifar(root);
  expect_fake(l, 3);
  const CifarDataset d = CifarDataset::open(l, "train");
  EXPECT_EQ(d.class_names(), (std::vector<std::string>{"airplane", "automobile", "bird", "cat", "deer", "dog", "frog",
                                                       "horse", "ship", "truck"}));
  // Normalised per channel with the training set's statistics, CHW as stored.
  std::vector<float> x(kCifarImageBytes);
  int32_t label = -1;
  d.get(7, x.data(), &label);
  EXPECT_EQ(label, fake_label10(7, 0));
  const Normalize n = cifar10_normalize();
  for (size_t k = 0; k < kCifarImageBytes; ++k) {
    const int c = int(k / 1024);
    const float want = (float(fake_pixel(7, k, 0)) / 255.0f - n.mean_at(c)) * (1.0f / n.std_at(c));
    ASSERT_EQ(x[k], want) << k;
  }
  for (int c = 0; c < 3; ++c) EXPECT_FLOAT_EQ(d.fill_value(c), -n.mean_at(c) / n.std_at(c));
  EXPECT_THROW(d.get(15, x.data(), &label), std::out_of_range);
  // The pixels stay uint8: 1 byte each, plus labels, three tables and the names.
  EXPECT_GE(d.resident_bytes(), 15 * kCifarImageBytes + 15);
  EXPECT_LE(d.resident_bytes(), 15 * kCifarImageBytes + 15 + 3 * 256 * sizeof(float) + 1024);
  EXPECT_EQ(d.transient_bytes(), 0u);
}

TEST(Cifar, Cifar100PicklesFineAndCoarse) {
  const std::string root = make_fake("py100", 100, "py");
  const std::optional<CifarLayout> l = find_cifar(root);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->kind, CifarKind::Cifar100);
  expect_fake(*l, 3);
  expect_fake(*l, 3, /*coarse=*/true);
  EXPECT_EQ(CifarDataset::open(*l, "test").class_names().at(42), "fine_42");
  CifarOptions coarse;
  coarse.coarse = true;
  EXPECT_EQ(CifarDataset::open(*l, "test", coarse).class_names().at(7), "coarse_07");
}

TEST(Cifar, BinaryRecordsReadBackExactly) {
  for (int kind : {10, 100}) {
    const std::string root = make_fake("bin" + std::to_string(kind), kind, "bin");
    const std::optional<CifarLayout> l = find_cifar(root);
    ASSERT_TRUE(l);
    EXPECT_TRUE(l->binary);
    expect_fake(*l, 3);
    if (kind == 100) expect_fake(*l, 3, true);
    EXPECT_EQ(CifarDataset::open(*l, "train").class_names().size(), size_t(kind));
  }
}

// Both CIFARs under one root: which one is meant is not known.
TEST(Cifar, RootWithBothDatasetsIsAnError) {
  const std::string root = make_fake("both", 10, "py");
  ASSERT_EQ(run_cmd(kPython + " " + MEMFIT_TEST_DATA + "/make_fake_cifar.py --out " + root + " --kind 100").code, 0);
  const std::string e = error_of([&] { find_cifar(root); });
  EXPECT_NE(e.find("holds both CIFAR-10"), std::string::npos) << e;
  // A missing batch file is named.
  fs::remove(root + "/cifar-10-batches-py/data_batch_4");
  const CifarLayout l = *find_cifar(root + "/cifar-10-batches-py");
  const std::string m = error_of([&] { CifarDataset::open(l, "train"); });
  EXPECT_NE(m.find("data_batch_4 is missing"), std::string::npos) << m;
}

TEST(Cifar, TrainsThroughTheCommand) {
  const std::string root = make_fake("cmd", 10, "py", 8);
  for (const std::string& data : {root, root + "/cifar-10-batches-py"}) {
    const RunResult r = run_memfit("train --model convnet --data " + data + " --steps 3 --batch 8 --threads 2 "
                                   "--progress lines --json --out " + root + "/run");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("CIFAR-10 (python pickles) in memory as uint8"), std::string::npos) << r.out;
    EXPECT_TRUE(std::isfinite(json_number(r.out, "final_train_loss"))) << r.out;
    EXPECT_EQ(json_number(r.out, "steps"), 3) << r.out;
  }
  const std::string root100 = make_fake("cmd100", 100, "bin", 4);
  const RunResult c = run_memfit("train --model convnet --data " + root100 + " --cifar100-labels coarse --steps 2 "
                                 "--batch 8 --threads 2 --progress lines --json --out " + root100 + "/run");
  ASSERT_EQ(c.code, 0) << c.out;
  EXPECT_TRUE(std::isfinite(json_number(c.out, "final_train_loss"))) << c.out;
  // Options that do not fit CIFAR are usage errors naming them.
  const RunResult coarse10 = run_memfit("train --data " + root + " --cifar100-labels coarse --steps 1 --out " + root + "/x");
  EXPECT_NE(coarse10.code, 0);
  EXPECT_NE(coarse10.out.find("is CIFAR-10, which has one set of labels"), std::string::npos) << coarse10.out;
  const RunResult size = run_memfit("train --data " + root + " --image-size 64 --steps 1 --out " + root + "/x");
  EXPECT_NE(size.code, 0);
  EXPECT_NE(size.out.find("images are 3 x 32 x 32"), std::string::npos) << size.out;
  const RunResult bad = run_memfit("train --data " + root + " --cifar100-labels medium --steps 1 --out " + root + "/x");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("--cifar100-labels expects fine"), std::string::npos) << bad.out;
}

// A bad file through the command: an error naming it, not a crash.
TEST(Cifar, CommandNamesTheBadFile) {
  const std::string root = make_fake("cmdbad", 10, "py");
  const std::string f = root + "/cifar-10-batches-py/data_batch_3";
  const std::string b = slurp(f);
  write_bytes(f, b.substr(0, b.size() / 2));
  const RunResult r = run_memfit("train --data " + root + " --steps 1 --out " + root + "/run");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find(f + ": byte "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("truncated"), std::string::npos) << r.out;
}

TEST(Cifar, HostilePicklesAreRefusedNamingFileAndOffset) {
  const std::string dir = temp_dir("cifar-hostile");
  struct Case {
    const char* name;
    std::string bytes;
    const char* want;
  };
  const std::string big = std::string("\x80\x02", 2);
  const std::vector<Case> cases = {
      // pickle.dumps(os.system('id')) as Python 2 would have it: refused at
      // the GLOBAL, before any REDUCE.
      {"os_system", big + "cos\nsystem\nq\x01U\x02idq\x02\x85R.", "byte 2: GLOBAL os.system is not one CIFAR's files use"},
      {"builtins_eval", big + "c__builtin__\neval\n(U\x01xtR.", "byte 2: GLOBAL __builtin__.eval"},
      // A known global called with the wrong arguments.
      {"reduce_ndarray", big + "cnumpy\nndarray\n)R.", "byte 18: REDUCE of numpy.ndarray"},
      {"reduce_int", big + "K\x01)R.", "byte 5: REDUCE of an int"},
      {"inst", big + "(ios\nsystem\n.", "byte 3: opcode 0x69 (INST)"},
      {"stack_global", std::string("\x80\x04\x95\x10\0\0\0\0\0\0\0", 11), "pickle protocol 4"},
      {"protocol0", "(dp0\n.", "byte 0: not a protocol-2 pickle"},
      {"empty", "", "not a pickle (0 bytes)"},
      // Forged lengths: checked against the file before anything is read.
      {"huge_binstring", big + "T\xff\xff\xff\x7f" + "abc", "byte 2: a string needs 2147483647 bytes but the file holds only 3"},
      {"huge_binbytes", big + "B\xff\xff\xff\xff" + "abc", "needs 4294967295 bytes"},
      {"huge_memo", big + "Nr\xff\xff\xff\x7f.", "byte 3: memo index 2147483647 is out of range"},
      {"get_unset", big + "h\x05.", "memo GET of index 5, never PUT"},
      {"truncated", big + "}q\x01(U\x04" "da", "truncated"},
      {"no_stop", big + "}", "an opcode needs 1 bytes"},
      {"trailing", big + "}.xyz", "3 bytes after the pickle's STOP"},
      {"appends_no_mark", big + "]K\x01" "e.", "APPENDS without a MARK"},
      {"setitem_on_list", big + "]U\x01" "aK\x01s.", "SETITEM on a list"},
      {"two_on_stop", big + "NN.", "STOP with 2 values"},
      // An array whose shape claims more than its data.
      {"shape_lie", big + "cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85U\x01" "b\x87R(K\x01J\xff\xff\xff\x7f"
                          "M\x00\x0c\x86" "cnumpy\ndtype\nU\x02u1K\x00K\x01\x87R(K\x03U\x01|NNNJ\xff\xff\xff\xffJ\xff\xff\xff"
                          "\xffK\x00tb\x89U\x04" "abcdtb."s,
       "numpy array shape larger than the file"},
      {"float_dtype", big + "cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85U\x01" "b\x87R(K\x01K\x01K\x01"
                            "\x86" "cnumpy\ndtype\nU\x02" "f4K\x00K\x01\x87R(K\x03U\x01<NNNJ\xff\xff\xff\xffJ\xff\xff\xff"
                            "\xffK\x00tb\x89U\x04" "abcdtb."s,
       "numpy array of dtype 'f4'"},
  };
  for (const Case& c : cases) {
    const std::string p = dir + "/" + c.name;
    write_bytes(p, c.bytes);
    const std::string e = error_of([&] { read_cifar_batch(p, CifarKind::Cifar10, false); });
    EXPECT_EQ(e.rfind(p + ":", 0), 0u) << c.name << ": " << e;
    EXPECT_NE(e.find(c.want), std::string::npos) << c.name << ": " << e;
  }
  // Millions of opcodes: stopped at the limit, memory bounded by it.
  const std::string p = dir + "/many_nones";
  write_bytes(p, big + std::string(size_t(3) << 20, 'N') + ".");
  const std::string e = error_of([&] { pickle::read(p); });
  EXPECT_NE(e.find("more than 1048576 opcodes"), std::string::npos) << e;
}

TEST(Cifar, BadStructureAndLabelsNameTheEntry) {
  const std::string root = make_fake("badlabels", 10, "py");
  const std::string dir = root + "/cifar-10-batches-py";
  // A label of 10 in a CIFAR-10 batch: the pickled list's entry 1 is
  // BININT1 at a known place; rewrite it.
  std::string b = slurp(dir + "/data_batch_1");
  const size_t at = b.find(std::string("U\x06labelsq", 9));
  ASSERT_NE(at, std::string::npos);
  const size_t list = b.find('(', at);  // MARK, then K v K v ...
  ASSERT_EQ(b[list + 3], 'K');
  b[list + 4] = 10;
  write_bytes(dir + "/data_batch_1", b);
  std::string e = error_of([&] { read_cifar_batch(dir + "/data_batch_1", CifarKind::Cifar10, false); });
  EXPECT_NE(e.find(dir + "/data_batch_1: 'labels' entry 1 is label 10, outside the 10 classes"), std::string::npos) << e;
  // Read as CIFAR-100, a CIFAR-10 batch lacks its keys.
  e = error_of([&] { read_cifar_batch(dir + "/data_batch_2", CifarKind::Cifar100, false); });
  EXPECT_NE(e.find("no 'fine_labels' entry"), std::string::npos) << e;
  // A dict that is not a batch.
  write_bytes(dir + "/data_batch_3", "\x80\x02}q\x01U\x01xK\x01s."s);
  e = error_of([&] { read_cifar_batch(dir + "/data_batch_3", CifarKind::Cifar10, false); });
  EXPECT_NE(e.find("no 'data' entry: not a CIFAR batch"), std::string::npos) << e;
}

TEST(Cifar, BadBinaryRecordsNameTheRecord) {
  const std::string root = make_fake("badbin", 100, "bin");
  const std::string f = root + "/cifar-100-binary/train.bin";
  std::string b = slurp(f);
  ASSERT_EQ(b.size(), 15u * 3074);
  // Record 2's fine label 100.
  b[2 * 3074 + 1] = char(100);
  write_bytes(f, b);
  std::string e = error_of([&] { read_cifar_batch(f, CifarKind::Cifar100, true); });
  EXPECT_NE(e.find(f + ": record 2 (byte 6149): label 100 is outside the 100 classes"), std::string::npos) << e;
  // A cut record.
  write_bytes(f, b.substr(0, 3 * 3074 + 5));
  e = error_of([&] { read_cifar_batch(f, CifarKind::Cifar100, true); });
  EXPECT_NE(e.find(f + ": 9227 bytes is not a whole number of 3074-byte records"), std::string::npos) << e;
  EXPECT_NE(e.find("cut at byte 9222"), std::string::npos) << e;
  // CIFAR-10's 3073-byte records read as CIFAR-100's: the size does not divide.
  const std::string root10 = make_fake("badbin10", 10, "bin");
  e = error_of([&] { read_cifar_batch(root10 + "/cifar-10-batches-bin/test_batch.bin", CifarKind::Cifar100, true); });
  EXPECT_NE(e.find("not a whole number of 3074-byte records"), std::string::npos) << e;
  write_bytes(root10 + "/cifar-10-batches-bin/test_batch.bin", "");
  e = error_of([&] { read_cifar_batch(root10 + "/cifar-10-batches-bin/test_batch.bin", CifarKind::Cifar10, true); });
  EXPECT_NE(e.find("empty file"), std::string::npos) << e;
}

// torchvision reads the fake folders too, and sees what memfit sees.
TEST(Cifar, TorchvisionReadsTheFakeFolders) {
  for (int kind : {10, 100}) {
    const std::string root = make_fake("tv" + std::to_string(kind), kind, "py");
    const RunResult r = run_cmd(kPython + " " + MEMFIT_TEST_DATA + "/cifar_torchvision.py " + root + " " + std::to_string(kind));
    if (r.code == 77) GTEST_SKIP() << r.out;
    EXPECT_EQ(r.code, 0) << r.out;
  }
}
