// data/array_dataset.hpp: arrays read in place through their strides (NCHW,
// NHWC, views) give the same samples, uint8 pixels through the IDX/CIFAR
// formula; bad data is a DataError naming the index; the array cache file's
// reader checks its header against the file before trusting it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <limits>
#include <numeric>

#include "data/array_dataset.hpp"
#include "data/cifar.hpp"

namespace fs = std::filesystem;
using namespace memfit::data;

namespace {

constexpr int N = 6, C = 3, H = 4, W = 5;

ArrayView view(const void* p, ElemType t, std::vector<int64_t> shape, std::vector<int64_t> strides) {
  ArrayView v;
  v.data = static_cast<const std::byte*>(p);
  v.type = t;
  v.shape = std::move(shape);
  v.strides = std::move(strides);
  return v;
}

// NCHW uint8 pixels and int64 labels; pixel (n, c, h, w) = (n*37 + c*11 + h*5 + w*3) % 256.
struct Images {
  std::vector<uint8_t> nchw, nhwc;
  std::vector<int64_t> labels;
  Images() : nchw(N * C * H * W), nhwc(N * C * H * W), labels(N) {
    for (int n = 0; n < N; ++n) {
      labels[size_t(n)] = n % 4;
      for (int c = 0; c < C; ++c)
        for (int h = 0; h < H; ++h)
          for (int w = 0; w < W; ++w) {
            const uint8_t v = uint8_t((n * 37 + c * 11 + h * 5 + w * 3) % 256);
            nchw[size_t(((n * C + c) * H + h) * W + w)] = v;
            nhwc[size_t(((n * H + h) * W + w) * C + c)] = v;
          }
    }
  }
  ArrayView x_nchw() const { return view(nchw.data(), ElemType::U8, {N, C, H, W}, {C * H * W, H * W, W, 1}); }
  // The NHWC array with its strides permuted to N, C, H, W (what the binding passes).
  ArrayView x_nhwc() const { return view(nhwc.data(), ElemType::U8, {N, C, H, W}, {H * W * C, 1, W * C, C}); }
  ArrayView y() const { return view(labels.data(), ElemType::I64, {N}, {8}); }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ArrayImages, NchwNhwcAndTheCifarFormulaAgree) {
  const Images im;
  const Normalize norm = cifar10_normalize();
  ArrayImages a(im.x_nchw(), im.y(), 4, norm, "a"), b(im.x_nhwc(), im.y(), 4, norm, "b");
  ASSERT_EQ(a.size(), size_t(N));
  EXPECT_EQ(a.sample_shape(), (SampleShape{C, H, W}));
  std::vector<float> xa(C * H * W), xb(C * H * W);
  for (size_t i = 0; i < size_t(N); ++i) {
    int32_t ya = -1, yb = -1;
    a.get(i, xa.data(), &ya);
    b.get(i, xb.data(), &yb);
    EXPECT_EQ(ya, int32_t(i % 4));
    EXPECT_EQ(ya, yb);
    for (size_t k = 0; k < xa.size(); ++k) {
      const int c = int(k / (H * W));
      const uint8_t v = im.nchw[i * C * H * W + k];
      // CifarDataset's table: (v/255 - mean) * (1/std), bit for bit.
      const float want = (float(v) / 255.0f - norm.mean_at(c)) * (1.0f / norm.std_at(c));
      ASSERT_EQ(xa[k], want) << i << " " << k;
      ASSERT_EQ(xb[k], want) << i << " " << k;
    }
  }
  EXPECT_EQ(a.fill_value(1), (0.0f - norm.mean_at(1)) * (1.0f / norm.std_at(1)));
  // In place: the caller's bytes are what the dataset reads.
  EXPECT_EQ(a.in_process_bytes(), im.nchw.size() + im.labels.size() * 8);
}

TEST(ArrayImages, FloatImagesAreUsedAsGivenAndNanNamesItsIndex) {
  std::vector<float> x(N * C * H * W);
  std::iota(x.begin(), x.end(), -3.0f);
  const Images im;
  const ArrayView xv = view(x.data(), ElemType::F32, {N, C, H, W}, {C * H * W * 4, H * W * 4, W * 4, 4});
  ArrayImages a(xv, im.y(), 4, {}, "f");
  std::vector<float> out(C * H * W);
  int32_t y = 0;
  a.get(2, out.data(), &y);
  EXPECT_EQ(std::memcmp(out.data(), x.data() + 2 * C * H * W, out.size() * 4), 0);
  x[size_t(4 * C * H * W + 7)] = std::numeric_limits<float>::quiet_NaN();
  const std::string e = error_of([&] { ArrayImages(xv, im.y(), 4, {}, "f"); });
  EXPECT_NE(e.find("image at index 4 holds NaN"), std::string::npos) << e;
}

TEST(ArrayImages, BadLabelsAndLengthsNameTheIndex) {
  Images im;
  im.labels[5] = 4;
  std::string e = error_of([&] { ArrayImages(im.x_nchw(), im.y(), 4, {}, "x"); });
  EXPECT_NE(e.find("label 4 at index 5 is outside [0, 4)"), std::string::npos) << e;
  im.labels[5] = -2;
  e = error_of([&] { ArrayImages(im.x_nchw(), im.y(), 4, {}, "x"); });
  EXPECT_NE(e.find("label -2 at index 5"), std::string::npos) << e;
  ArrayView short_y = im.y();
  short_y.shape = {N - 1};
  e = error_of([&] { ArrayImages(im.x_nchw(), short_y, 4, {}, "x"); });
  EXPECT_NE(e.find("6 samples but y has 5 labels"), std::string::npos) << e;
  EXPECT_THROW(ArrayImages(im.x_nchw(), short_y, 4, {}, "x"), DataError);
}

TEST(ArrayTokens, LengthsAreUpToTheLastIdThatIsNotPadding) {
  std::vector<int32_t> t = {5, 6, 7, 0, 0,  //
                            1, 0, 2, 0, 0,  //
                            3, 3, 3, 3, 3};
  std::vector<int32_t> y = {0, 1, 2};
  ArrayTokens d(view(t.data(), ElemType::I32, {3, 5}, {20, 4}), view(y.data(), ElemType::I32, {3}, {4}), 3, 8, 0, "t");
  ASSERT_EQ(d.tensors().size(), 4u);
  std::vector<int32_t> tok(5), mask(5);
  int32_t len = 0, label = 0;
  void* out[] = {tok.data(), mask.data(), &len, &label};
  d.get_tensors(1, out);
  EXPECT_EQ(len, 3);
  EXPECT_EQ(mask, (std::vector<int32_t>{1, 1, 1, 0, 0}));
  EXPECT_EQ(tok, (std::vector<int32_t>{1, 0, 2, 0, 0}));
  EXPECT_EQ(label, 1);
  t[7] = 9;
  const std::string e = error_of([&] {
    ArrayTokens(view(t.data(), ElemType::I32, {3, 5}, {20, 4}), view(y.data(), ElemType::I32, {3}, {4}), 3, 8, 0, "t");
  });
  EXPECT_NE(e.find("token id 9 at index 1, position 2"), std::string::npos) << e;
}

// A tokenizer's attention mask (uint8, as numpy's bools are viewed) gives
// the lengths, whatever the ids after them; right padding only.
TEST(ArrayTokens, AnAttentionMaskGivesTheLengths) {
  std::vector<int32_t> t = {5, 6, 7, 1, 1,  //
                            1, 4, 2, 1, 1};
  std::vector<int32_t> y = {0, 1};
  std::vector<uint8_t> m = {1, 1, 1, 1, 0,  //
                            1, 1, 0, 0, 0};
  auto tokens = [&] { return view(t.data(), ElemType::I32, {2, 5}, {20, 4}); };
  auto labels = [&] { return view(y.data(), ElemType::I32, {2}, {4}); };
  auto mask = [&] { return view(m.data(), ElemType::U8, {2, 5}, {5, 1}); };
  ArrayTokens d(tokens(), labels(), 2, 8, 0, "t", mask());
  std::vector<int32_t> tok(5), got(5);
  int32_t len = 0, label = 0;
  void* out[] = {tok.data(), got.data(), &len, &label};
  d.get_tensors(0, out);
  EXPECT_EQ(len, 4);  // pad id 0 appears nowhere: the mask alone says where each example ends
  EXPECT_EQ(got, (std::vector<int32_t>{1, 1, 1, 1, 0}));
  d.get_tensors(1, out);
  EXPECT_EQ(len, 2);
  EXPECT_EQ(tok, (std::vector<int32_t>{1, 4, 2, 1, 1}));
  m[6] = 0;
  m[8] = 1;  // example 1: 1 0 0 1 0, a token after padding
  std::string e = error_of([&] { ArrayTokens(tokens(), labels(), 2, 8, 0, "t", mask()); });
  EXPECT_NE(e.find("attention_mask at index 1: a 1 at position 3 after padding"), std::string::npos) << e;
  m[8] = 0;
  m[5] = 0;  // example 1 has no token
  e = error_of([&] { ArrayTokens(tokens(), labels(), 2, 8, 0, "t", mask()); });
  EXPECT_NE(e.find("attention_mask at index 1 has no 1"), std::string::npos) << e;
  m[5] = 1;
  m[2] = 3;
  e = error_of([&] { ArrayTokens(tokens(), labels(), 2, 8, 0, "t", mask()); });
  EXPECT_NE(e.find("attention_mask: 3 at index 0, position 2"), std::string::npos) << e;
  m[2] = 1;
  e = error_of([&] { ArrayTokens(tokens(), labels(), 2, 8, 0, "t", view(m.data(), ElemType::U8, {2, 4}, {5, 1})); });
  EXPECT_NE(e.find("attention_mask: shape [2, 4]"), std::string::npos) << e;
}

namespace {

// An array cache file as the Python package writes it (memfit/_data.py).
std::string write_cache(const fs::path& path, const Images& im, int classes, const Normalize& n) {
  const uint64_t count = N, labels_at = 128, data_at = 192, size = data_at + uint64_t(N * C * H * W);
  std::vector<unsigned char> f(size, 0);
  std::memcpy(f.data(), kArrayFileMagic, 8);
  const uint32_t u32[] = {1, 0, C, H, W, uint32_t(classes)};
  std::memcpy(f.data() + 8, u32, sizeof(u32));
  const uint64_t u64[] = {count, labels_at, data_at, size};
  std::memcpy(f.data() + 32, u64, sizeof(u64));
  for (int k = 0; k < 32; ++k) f[size_t(64 + k)] = uint8_t(k);
  for (int c = 0; c < C; ++c) {
    const float m = n.mean_at(c), s = n.std_at(c);
    std::memcpy(f.data() + 96 + 4 * c, &m, 4);
    std::memcpy(f.data() + 96 + 4 * (C + c), &s, 4);
  }
  for (int i = 0; i < N; ++i) {
    const int32_t l = int32_t(im.labels[size_t(i)]);
    std::memcpy(f.data() + labels_at + 4 * size_t(i), &l, 4);
  }
  std::memcpy(f.data() + data_at, im.nchw.data(), im.nchw.size());
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(f.data()), std::streamsize(f.size()));
  return path.string();
}

}  // namespace

TEST(ArrayFileDataset, ReadsWhatTheArraysHoldAndChecksItsHeader) {
  const fs::path dir = fs::temp_directory_path() / ("memfit-array-file-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const Images im;
  const Normalize norm = cifar10_normalize();
  const std::string path = write_cache(dir / "a.mfarr", im, 4, norm);
  auto f = ArrayFileDataset::open(path, "file");
  ArrayImages a(im.x_nchw(), im.y(), 4, norm, "a");
  EXPECT_EQ(f->size(), size_t(N));
  EXPECT_EQ(f->fingerprint().substr(0, 6), "000102");
  std::vector<float> xf(C * H * W), xa(C * H * W);
  for (size_t i = 0; i < size_t(N); ++i) {
    int32_t yf = -1, ya = -2;
    f->get(i, xf.data(), &yf);
    a.get(i, xa.data(), &ya);
    EXPECT_EQ(yf, ya);
    EXPECT_EQ(xf, xa) << i;
  }
  EXPECT_EQ(f->file(), path);
  EXPECT_LT(f->resident_bytes(), 4096u);  // labels and tables: the pixels stay on disk

  // A cut file, a foreign one, a label outside the classes: refused, naming the file.
  fs::resize_file(path, fs::file_size(path) - 1);
  std::string e = error_of([&] { ArrayFileDataset::open(path, ""); });
  EXPECT_NE(e.find("do not match the file's"), std::string::npos) << e;
  std::ofstream(dir / "b.mfarr", std::ios::binary) << std::string(200, 'x');
  e = error_of([&] { ArrayFileDataset::open((dir / "b.mfarr").string(), ""); });
  EXPECT_NE(e.find("bad magic"), std::string::npos) << e;
  Images bad;
  bad.labels[3] = 9;
  write_cache(dir / "c.mfarr", bad, 4, norm);
  e = error_of([&] { ArrayFileDataset::open((dir / "c.mfarr").string(), ""); });
  EXPECT_NE(e.find("label 9 at index 3"), std::string::npos) << e;
  fs::remove_all(dir);
}

// Every header byte set to a few hostile values: the reader refuses the file
// with a std::runtime_error or reads every sample of it; nothing else.
TEST(ArrayFileDataset, HostileHeadersAreRefusedOrReadWhole) {
  const fs::path dir = fs::temp_directory_path() / ("memfit-array-hostile-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const Images im;
  const std::string path = write_cache(dir / "a.mfarr", im, 4, cifar10_normalize());
  std::string good;
  {
    std::ifstream in(path, std::ios::binary);
    good.assign(std::istreambuf_iterator<char>(in), {});
  }
  int refused = 0, read = 0;
  std::vector<float> x(C * H * W);
  for (size_t at = 0; at < 96 + 8 * C; ++at)
    for (const unsigned char v : {0x00, 0x01, 0x7f, 0x80, 0xff}) {
      std::string bytes = good;
      bytes[at] = static_cast<char>(v);
      std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
      std::shared_ptr<ArrayFileDataset> f;
      try {
        f = ArrayFileDataset::open(path, "");
      } catch (const std::runtime_error&) {
        ++refused;
        continue;
      }
      ++read;
      for (size_t i = 0; i < f->size(); ++i) {
        int32_t y = -1;
        f->get(i, x.data(), &y);
        ASSERT_TRUE(y >= 0 && y < f->num_classes()) << at;
      }
    }
  EXPECT_GT(refused, 0);
  EXPECT_GT(read, 0);  // the fingerprint and the statistics' bytes change nothing the reader trusts
  fs::remove_all(dir);
}
