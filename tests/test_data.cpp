// memfit data layer: IDX reader on real Fashion-MNIST and broken files, image
// folders with generated PNG/JPEG files, resizing, subsets.
#include <gtest/gtest.h>

#include "cli_util.hpp"
#include <png.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <jpeglib.h>

#include "data/dataset.hpp"
#include "data/idx.hpp"
#include "data/image.hpp"
#include "data/image_folder.hpp"
#include "error_of.hpp"
#include "idx_files.hpp"

namespace fs = std::filesystem;
using namespace memfit::data;
using memfit::testing::error_of;
using namespace memfit::testing;

namespace {

const std::string kFm = kFashionMnistDir;


std::vector<uint8_t> gunzip_file(const std::string& p) {
  gzFile g = gzopen(p.c_str(), "rb");
  std::vector<uint8_t> out;
  unsigned char buf[1 << 16];
  int r;
  while ((r = gzread(g, buf, sizeof buf)) > 0) out.insert(out.end(), buf, buf + r);
  gzclose(g);
  return out;
}
std::vector<uint8_t> idx_images(uint32_t n, uint32_t rows, uint32_t cols) {
  return memfit::testing::idx_images(n, rows, cols, [](uint32_t i) { return uint8_t(i * 7); });
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// ---- image writers ---------------------------------------------------------

void write_png(const std::string& path, int w, int h, int channels, const std::vector<uint8_t>& px) {
  png_image img;
  std::memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  img.width = uint32_t(w);
  img.height = uint32_t(h);
  img.format = channels == 1 ? PNG_FORMAT_GRAY : channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_RGBA;
  ASSERT_TRUE(png_image_write_to_file(&img, path.c_str(), 0, px.data(), 0, nullptr)) << img.message;
}

void write_jpeg(const std::string& path, int w, int h, int channels,
                const std::vector<uint8_t>& px, int quality = 95) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  jpeg_stdio_dest(&c, f);
  c.image_width = JDIMENSION(w);
  c.image_height = JDIMENSION(h);
  c.input_components = channels;
  c.in_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, quality, TRUE);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(px.data()) + size_t(c.next_scanline) * w * channels;
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  std::fclose(f);
}

std::vector<uint8_t> solid(int w, int h, std::vector<uint8_t> color) {
  std::vector<uint8_t> px;
  for (int i = 0; i < w * h; ++i) px.insert(px.end(), color.begin(), color.end());
  return px;
}

}  // namespace

// ============================================================================
// IDX: the real Fashion-MNIST files
// ============================================================================

TEST(Idx, FashionMnistTrainAndTest) {
  const IdxDataset train = IdxDataset::open(kFm, "train");
  EXPECT_EQ(train.size(), 60000u);
  EXPECT_EQ(train.num_classes(), 10);
  EXPECT_EQ(train.sample_shape(), (SampleShape{1, 28, 28}));
  EXPECT_EQ(train.label(0), 9);  // ankle boot
  EXPECT_GE(train.resident_bytes(), 60000u * 784u + 60000u);
  EXPECT_LT(train.resident_bytes(), 60000u * 784u + 60000u + 4096u);

  const IdxDataset test = IdxDataset::open(kFm, "t10k");
  EXPECT_EQ(test.size(), 10000u);
  EXPECT_EQ(test.label(0), 9);
  EXPECT_EQ(test.label(1), 2);  // pullover

  // Every class appears; the test set is balanced (1000 each).
  std::vector<int> hist(10, 0);
  for (size_t i = 0; i < test.size(); ++i) hist[test.label(i)]++;
  for (int c = 0; c < 10; ++c) EXPECT_EQ(hist[size_t(c)], 1000) << "class " << c;

  // get() normalises with the Fashion-MNIST defaults.
  std::vector<float> x(784);
  int32_t y = -1;
  train.get(0, x.data(), &y);
  EXPECT_EQ(y, 9);
  const uint8_t* raw = train.image(0);
  bool any_nonzero = false;
  for (int k = 0; k < 784; ++k) {
    EXPECT_NEAR(x[size_t(k)], (raw[k] / 255.0f - 0.2860f) / 0.3530f, 1e-6f);
    any_nonzero |= raw[k] != 0;
  }
  EXPECT_TRUE(any_nonzero);
  EXPECT_NEAR(train.fill_value(0), -0.2860f / 0.3530f, 1e-6f);
  EXPECT_THROW(train.get(60000, x.data(), &y), std::out_of_range);

  // Mean pixel of the training set matches the normalisation constants.
  double sum = 0, sq = 0;
  for (size_t i = 0; i < train.size(); ++i)
    for (int k = 0; k < 784; ++k) {
      const double v = train.image(i)[k] / 255.0;
      sum += v;
      sq += v * v;
    }
  const double n = 60000.0 * 784.0, mean = sum / n;
  EXPECT_NEAR(mean, 0.2860, 5e-4);
  EXPECT_NEAR(std::sqrt(sq / n - mean * mean), 0.3530, 5e-4);
}

TEST(Idx, RawFilesMatchGzip) {
  TempDir dir;
  for (const char* kind : {"images-idx3", "labels-idx1"}) {
    const std::string name = std::string("t10k-") + kind + "-ubyte";
    write_bytes(dir / name, gunzip_file(kFm + "/" + name + ".gz"));
  }
  EXPECT_EQ(find_idx_file(dir.path.string(), "t10k", "images-idx3"), dir / "t10k-images-idx3-ubyte");
  const IdxDataset raw = IdxDataset::open(dir.path.string(), "t10k");
  const IdxDataset gz = IdxDataset::open(kFm, "t10k");
  ASSERT_EQ(raw.size(), gz.size());
  for (size_t i = 0; i < raw.size(); i += 997) {
    EXPECT_EQ(raw.label(i), gz.label(i));
    EXPECT_EQ(std::memcmp(raw.image(i), gz.image(i), 784), 0);
  }
}

TEST(Idx, MissingFileNamesPathAndPackage) {
  const std::string msg = error_of([] { IdxDataset::open("/nonexistent/fm", "train"); });
  EXPECT_TRUE(contains(msg, "/nonexistent/fm/train-images-idx3-ubyte.gz")) << msg;
  EXPECT_TRUE(contains(msg, "dataset-fashion-mnist")) << msg;
  EXPECT_TRUE(contains(msg, "--data")) << msg;
  const std::string msg2 = error_of([] { read_idx_labels("/nonexistent/x-labels"); });
  EXPECT_TRUE(contains(msg2, "dataset not found at /nonexistent/x-labels")) << msg2;
}

TEST(Idx, TruncatedRawFile) {
  TempDir dir;
  auto bytes = gunzip_file(kFm + "/t10k-images-idx3-ubyte.gz");
  bytes.resize(5000);
  write_bytes(dir / "imgs", bytes);
  const std::string msg = error_of([&] { read_idx_images(dir / "imgs"); });
  EXPECT_TRUE(contains(msg, dir / "imgs")) << msg;
  EXPECT_TRUE(contains(msg, "truncated")) << msg;

  bytes.resize(10);  // ends inside the header
  write_bytes(dir / "hdr", bytes);
  const std::string msg2 = error_of([&] { read_idx_images(dir / "hdr"); });
  EXPECT_TRUE(contains(msg2, "truncated IDX header")) << msg2;
}

TEST(Idx, TruncatedGzipFile) {
  TempDir dir;
  auto gz = read_bytes(kFm + "/t10k-labels-idx1-ubyte.gz");
  gz.resize(gz.size() / 2);
  write_bytes(dir / "labels.gz", gz);
  const std::string msg = error_of([&] { read_idx_labels(dir / "labels.gz"); });
  EXPECT_TRUE(contains(msg, dir / "labels.gz")) << msg;
  EXPECT_TRUE(contains(msg, "truncated")) << msg;

  // A gzip file that decompresses fine but holds fewer images than declared.
  auto raw = idx_images(10, 4, 4);
  raw.resize(raw.size() - 3);
  write_gz(dir / "short.gz", raw);
  const std::string msg2 = error_of([&] { read_idx_images(dir / "short.gz"); });
  EXPECT_TRUE(contains(msg2, "truncated: header declares 10 images of 4x4")) << msg2;
}

TEST(Idx, CorruptGzipData) {
  TempDir dir;
  auto gz = read_bytes(kFm + "/t10k-images-idx3-ubyte.gz");
  for (size_t i = gz.size() / 3; i < gz.size() / 3 + 64; ++i) gz[i] ^= 0x5a;
  write_bytes(dir / "imgs.gz", gz);
  const std::string msg = error_of([&] { read_idx_images(dir / "imgs.gz"); });
  EXPECT_TRUE(contains(msg, dir / "imgs.gz")) << msg;
  EXPECT_TRUE(contains(msg, "gzip")) << msg;
}

TEST(Idx, BadMagic) {
  // A labels file opened as images, and plain text.
  const std::string labels = kFm + "/t10k-labels-idx1-ubyte.gz";
  const std::string msg = error_of([&] { read_idx_images(labels); });
  EXPECT_TRUE(contains(msg, labels)) << msg;
  EXPECT_TRUE(contains(msg, "bad magic 0x00000801, expected 0x00000803")) << msg;
  TempDir dir;
  write_bytes(dir / "text", {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd', '\n'});
  const std::string msg2 = error_of([&] { read_idx_labels(dir / "text"); });
  EXPECT_TRUE(contains(msg2, "bad magic")) << msg2;
}

TEST(Idx, SizeMismatchAndTrailingData) {
  TempDir dir;
  // Header declares 2^31 images: rejected from the file size, nothing allocated.
  std::vector<uint8_t> b;
  append_be32(b, 0x803);
  append_be32(b, 0x80000000u);
  append_be32(b, 28);
  append_be32(b, 28);
  b.resize(b.size() + 784, 0);
  write_bytes(dir / "huge", b);
  const std::string msg = error_of([&] { read_idx_images(dir / "huge"); });
  EXPECT_TRUE(contains(msg, "header declares 2147483648 images of 28x28")) << msg;
  // Same through gzip: more than the compressed size can hold (deflate
  // expands at most 1032:1), rejected before reading.
  write_gz(dir / "huge.gz", b);
  const std::string msg2 = error_of([&] { read_idx_images(dir / "huge.gz"); });
  EXPECT_TRUE(contains(msg2, "decompresses to at most")) << msg2;
  // A plausible gzip header (10 images) over one image of data: read
  // incrementally, truncated after the real data.
  std::vector<uint8_t> c(b);
  store_be32(c.data() + 4, 10);
  write_gz(dir / "short.gz", c);
  const std::string msg_short = error_of([&] { read_idx_images(dir / "short.gz"); });
  EXPECT_TRUE(contains(msg_short, "truncated")) << msg_short;

  auto extra = idx_labels({1, 2, 3});
  extra.push_back(4);
  write_gz(dir / "extra.gz", extra);
  const std::string msg3 = error_of([&] { read_idx_labels(dir / "extra.gz"); });
  EXPECT_TRUE(contains(msg3, "more data than its header declares")) << msg3;

  auto img = idx_images(2, 0, 28);
  write_bytes(dir / "zero", img);
  EXPECT_TRUE(contains(error_of([&] { read_idx_images(dir / "zero"); }), "implausible"));
}

TEST(Idx, LabelOutOfRangeAndCountMismatch) {
  TempDir dir;
  write_gz(dir / "x-images-idx3-ubyte.gz", idx_images(5, 3, 3));
  write_gz(dir / "x-labels-idx1-ubyte.gz", idx_labels({0, 1, 9, 12, 3}));
  const std::string msg = error_of([&] { IdxDataset::open(dir.path.string(), "x"); });
  EXPECT_TRUE(contains(msg, "label 12 at index 3")) << msg;
  EXPECT_TRUE(contains(msg, "10 classes")) << msg;
  EXPECT_TRUE(contains(msg, "x-labels-idx1-ubyte.gz")) << msg;
  IdxOptions opt;
  opt.num_classes = 13;
  const IdxDataset ok = IdxDataset::open(dir.path.string(), "x", opt);
  EXPECT_EQ(ok.size(), 5u);
  EXPECT_EQ(ok.sample_shape(), (SampleShape{1, 3, 3}));

  write_gz(dir / "y-images-idx3-ubyte.gz", idx_images(5, 3, 3));
  write_gz(dir / "y-labels-idx1-ubyte.gz", idx_labels({0, 1, 2}));
  const std::string msg2 = error_of([&] { IdxDataset::open(dir.path.string(), "y"); });
  EXPECT_TRUE(contains(msg2, "5 images but")) << msg2;
  EXPECT_TRUE(contains(msg2, "3 labels")) << msg2;
}

// ============================================================================
// Resizing
// ============================================================================

namespace {
// Reference bilinear (align_corners=False) of a 1-D signal f at output o.
double bilinear_ref(const std::vector<double>& f, int dst, int o) {
  const int src = int(f.size());
  double s = (o + 0.5) * double(src) / dst - 0.5;
  s = std::max(0.0, s);
  const int i0 = std::min(int(s), src - 1);
  const int i1 = std::min(i0 + 1, src - 1);
  const double l = i0 == src - 1 ? 0.0 : s - i0;
  return f[size_t(i0)] * (1 - l) + f[size_t(i1)] * l;
}
const Normalize kIdentity{{0.0f}, {1.0f}};
}  // namespace

TEST(Resize, BilinearOnGradientMatchesReference) {
  // 8 wide x 6 high gray gradient v = 20x + 7y + 3; resize to 5 x 12.
  const int sw = 8, sh = 6, dw = 12, dh = 5;
  std::vector<uint8_t> src(size_t(sw * sh));
  for (int y = 0; y < sh; ++y)
    for (int x = 0; x < sw; ++x) src[size_t(y * sw + x)] = uint8_t(20 * x + 7 * y + 3);
  std::vector<float> out(size_t(dw * dh));
  resize_to_chw(src.data(), sh, sw, 1, dh, dw, 1, kIdentity, out.data());
  std::vector<double> fx(sw), fy(sh);
  for (int x = 0; x < sw; ++x) fx[size_t(x)] = 20.0 * x;
  for (int y = 0; y < sh; ++y) fy[size_t(y)] = 7.0 * y;
  for (int y = 0; y < dh; ++y)
    for (int x = 0; x < dw; ++x) {
      // Separable and linear: the result is the sum of the 1-D resamplings.
      const double want = (bilinear_ref(fx, dw, x) + bilinear_ref(fy, dh, y) + 3.0) / 255.0;
      EXPECT_NEAR(out[size_t(y * dw + x)], want, 1e-5) << "at " << y << "," << x;
    }
  // Hand-checked corners: output x=0 clamps to source 0; x=11 maps to 7.1667 -> clamped 7.
  EXPECT_NEAR(out[0] * 255.0, 3.0 + 0.0 + 7.0 * 0.1, 1e-3);  // y: (0.5*1.2-0.5)=0.1
}

TEST(Resize, HalvingIsPairAverageAndIdentityIsExact) {
  std::vector<uint8_t> src = {0, 10, 20, 30, 40, 50, 60, 70};  // 1 x 8
  std::vector<float> out(4);
  resize_to_chw(src.data(), 1, 8, 1, 1, 4, 1, kIdentity, out.data());
  for (int o = 0; o < 4; ++o) EXPECT_NEAR(out[size_t(o)] * 255.0f, 20.0f * o + 5.0f, 1e-3f);
  std::vector<float> same(8);
  resize_to_chw(src.data(), 1, 8, 1, 1, 8, 1, kIdentity, same.data());
  for (int o = 0; o < 8; ++o) EXPECT_FLOAT_EQ(same[size_t(o)] * 255.0f, float(src[size_t(o)]));
}

TEST(Resize, AreaAveragingBeyondTwoX) {
  // 12 -> 3 (4x): each output is the mean of 4 source pixels, not 2.
  std::vector<uint8_t> src = {0, 0, 0, 100, 200, 200, 200, 200, 10, 20, 30, 40};
  std::vector<float> out(3);
  resize_to_chw(src.data(), 1, 12, 1, 1, 3, 1, kIdentity, out.data());
  EXPECT_NEAR(out[0] * 255.0f, 25.0f, 1e-3f);
  EXPECT_NEAR(out[1] * 255.0f, 200.0f, 1e-3f);
  EXPECT_NEAR(out[2] * 255.0f, 25.0f, 1e-3f);
  // Non-integer factor 10 -> 4 (2.5x): spans [0,2.5), [2.5,5), ...
  std::vector<uint8_t> s2 = {0, 50, 100, 150, 200, 250, 0, 0, 0, 0};
  std::vector<float> o2(4);
  resize_to_chw(s2.data(), 1, 10, 1, 1, 4, 1, kIdentity, o2.data());
  EXPECT_NEAR(o2[0] * 255.0f, (0 + 50 + 0.5 * 100) / 2.5, 1e-3f);
  EXPECT_NEAR(o2[1] * 255.0f, (0.5 * 100 + 150 + 200) / 2.5, 1e-3f);
  EXPECT_NEAR(o2[2] * 255.0f, 250 / 2.5, 1e-3f);
}

TEST(Resize, ChannelConversionAndNormalisation) {
  std::vector<uint8_t> rgb = {200, 100, 50};
  float g;
  resize_to_chw(rgb.data(), 1, 1, 3, 1, 1, 1, kIdentity, &g);
  EXPECT_NEAR(g * 255.0f, 0.299f * 200 + 0.587f * 100 + 0.114f * 50, 1e-3f);
  std::vector<uint8_t> gray = {51};
  float c3[3];
  const Normalize n{{0.1f, 0.2f, 0.3f}, {0.5f, 0.25f, 2.0f}};
  resize_to_chw(gray.data(), 1, 1, 1, 1, 1, 3, n, c3);
  EXPECT_NEAR(c3[0], (0.2f - 0.1f) / 0.5f, 1e-6f);
  EXPECT_NEAR(c3[1], (0.2f - 0.2f) / 0.25f, 1e-6f);
  EXPECT_NEAR(c3[2], (0.2f - 0.3f) / 2.0f, 1e-6f);
}

// ============================================================================
// Image folders
// ============================================================================

namespace {
// root/cat: 3 PNGs of different sizes; root/dog: 2 JPEGs; plus noise files.
void make_folder(const TempDir& dir) {
  fs::create_directories(dir.path / "cat");
  fs::create_directories(dir.path / "dog");
  fs::create_directories(dir.path / ".hidden_class");
  write_png(dir / "cat/b_red.png", 10, 6, 3, solid(10, 6, {250, 10, 10}));
  write_png(dir / "cat/a_gray.png", 4, 4, 1, solid(4, 4, {128}));
  std::vector<uint8_t> grad(size_t(16 * 8));
  for (int y = 0; y < 8; ++y)
    for (int x = 0; x < 16; ++x) grad[size_t(y * 16 + x)] = uint8_t(15 * x + 5);
  write_png(dir / "cat/c_gradient.PNG", 16, 8, 1, grad);
  write_jpeg(dir / "dog/x_blue.jpg", 64, 48, 3, solid(64, 48, {20, 40, 220}));
  write_jpeg(dir / "dog/y_gray.jpeg", 7, 5, 1, solid(7, 5, {90}));
  write_bytes(dir / "cat/notes.txt", {'x'});
  write_bytes(dir / "cat/.DS_Store.png", {'x'});
}
}  // namespace

TEST(ImageFolder, ScansSortedClassesAndFiles) {
  TempDir dir;
  make_folder(dir);
  ImageFolderOptions opt;
  opt.channels = 3;
  opt.height = 8;
  opt.width = 8;
  const ImageFolderDataset ds(dir.path.string(), opt);
  EXPECT_EQ(ds.size(), 5u);
  EXPECT_EQ(ds.num_classes(), 2);
  EXPECT_EQ(ds.class_names(), (std::vector<std::string>{"cat", "dog"}));
  EXPECT_EQ(ds.sample_shape(), (SampleShape{3, 8, 8}));
  const std::vector<std::string> want = {"cat/a_gray.png", "cat/b_red.png", "cat/c_gradient.PNG",
                                         "dog/x_blue.jpg", "dog/y_gray.jpeg"};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(ds.path(i), dir / want[i]);
    EXPECT_EQ(ds.label(i), i < 3 ? 0 : 1);
  }
  EXPECT_GT(ds.resident_bytes(), 0u);
  // Planned from the headers: the largest image is the 64x48 JPEG.
  EXPECT_GE(ds.transient_bytes(), size_t(64 * 48 * 3));
  EXPECT_LT(ds.transient_bytes(), size_t(4) << 20) << "not the worst case of the pixel limit";
}

TEST(ImageFolder, UnreadableHeaderPlansTheWorstCase) {
  TempDir dir;
  make_folder(dir);
  write_bytes(dir / "dog/z_broken.jpg", {0xFF, 0xD8, 0xFF});  // a JPEG cut off before its frame header
  ImageFolderOptions opt;
  opt.height = opt.width = 8;
  const ImageFolderDataset ds(dir.path.string(), opt);
  EXPECT_GE(ds.transient_bytes(), size_t(opt.max_pixels) * 3);
}

TEST(ImageFolder, TrainingPeakMatchesThePlanOfAGeneratedFolder) {
  // 2 classes x 48 images of 40x40 at --image-size 32: the data pipeline is
  // planned from what the decoder holds, and the measured peak stays within
  // 3% of the plan.
  TempDir dir;
  for (int k = 0; k < 2; ++k)
    for (int i = 0; i < 48; ++i) {
      const fs::path cls = dir.path / "train" / (k ? "dog" : "cat");
      fs::create_directories(cls);
      std::vector<uint8_t> px(size_t(40 * 40 * 3));
      for (size_t j = 0; j < px.size(); ++j) px[j] = uint8_t((j * 7 + size_t(i) * 13 + size_t(k) * 101) % 251);
      char name[32];
      std::snprintf(name, sizeof name, "%02d.png", i);
      write_png((cls / name).string(), 40, 40, 3, px);
    }
  const std::string out = memfit::testing::temp_dir("imgfolder-run");
  auto plan = memfit::testing::run_memfit("plan --json --batch 16 --data " + dir.path.string());
  ASSERT_EQ(plan.code, 0) << plan.out;
  const double data = memfit::testing::json_number(plan.out, "by_class/data_pipeline");
  EXPECT_LT(data, 8.0 * (1 << 20)) << plan.out;
  auto r = memfit::testing::run_memfit("train --json --batch 16 --steps 4 --threads 2 --data " + dir.path.string() +
                                       " --out " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  const double planned = memfit::testing::json_field(r.out, "planned_peak_bytes");
  const double peak = memfit::testing::json_field(r.out, "peak_rss_bytes");
  EXPECT_LE(peak, planned * 1.03) << r.out;
  EXPECT_EQ(r.out.find("warning: the measured peak"), std::string::npos) << r.out;
  std::printf("image folder: data pipeline %.2f MiB, planned %.1f MiB, peak %.1f MiB\n", data / (1 << 20),
              planned / (1 << 20), peak / (1 << 20));
}

TEST(ImageFolder, DecodesResizesAndConvertsChannels) {
  TempDir dir;
  make_folder(dir);
  ImageFolderOptions opt;
  opt.channels = 3;
  opt.height = 8;
  opt.width = 8;
  const ImageFolderDataset rgb(dir.path.string(), opt);
  std::vector<float> x(3 * 64);
  int32_t y = -1;
  auto expect_solid = [&](size_t i, float r, float g, float b, float tol, int32_t label) {
    rgb.get(i, x.data(), &y);
    EXPECT_EQ(y, label);
    for (int k = 0; k < 64; ++k) {
      EXPECT_NEAR(x[size_t(k)] * 255.0f, r, tol) << rgb.path(i);
      EXPECT_NEAR(x[size_t(64 + k)] * 255.0f, g, tol) << rgb.path(i);
      EXPECT_NEAR(x[size_t(128 + k)] * 255.0f, b, tol) << rgb.path(i);
    }
  };
  expect_solid(0, 128, 128, 128, 1e-3f, 0);  // gray PNG upscaled, replicated
  expect_solid(1, 250, 10, 10, 1e-3f, 0);    // RGB PNG 10x6 -> 8x8
  expect_solid(3, 20, 40, 220, 4.0f, 1);     // JPEG 64x48 (DCT-shrunk to 16x12) -> 8x8
  expect_solid(4, 90, 90, 90, 2.0f, 1);      // gray JPEG

  // Grayscale output: luma of the red PNG and of the blue JPEG.
  opt.channels = 1;
  const ImageFolderDataset gray(dir.path.string(), opt);
  std::vector<float> g(64);
  gray.get(1, g.data(), &y);
  for (float v : g) EXPECT_NEAR(v * 255.0f, 0.299f * 250 + 0.587f * 10 + 0.114f * 10, 1e-2f);
  gray.get(3, g.data(), &y);
  for (float v : g) EXPECT_NEAR(v * 255.0f, 0.299f * 20 + 0.587f * 40 + 0.114f * 220, 4.0f);
}

TEST(ImageFolder, BilinearGradientThroughPng) {
  // c_gradient.PNG is 16x8 with v = 15x + 5; load it at 4 x 6 (2.67x
  // shrink in x: area averaging; 2x in y: bilinear of a constant).
  TempDir dir;
  make_folder(dir);
  ImageFolderOptions opt;
  opt.channels = 1;
  opt.height = 4;
  opt.width = 6;
  const ImageFolderDataset ds(dir.path.string(), opt);
  std::vector<float> x(24);
  int32_t y;
  ds.get(2, x.data(), &y);
  const double scale = 16.0 / 6.0;
  for (int oy = 0; oy < 4; ++oy)
    for (int ox = 0; ox < 6; ++ox) {
      // Area average: each source pixel weighted by its overlap with the span.
      const double a = ox * scale, b = (ox + 1) * scale;
      double want = 0;
      for (int i = 0; i < 16; ++i)
        want += std::max(0.0, std::min(b, i + 1.0) - std::max(a, double(i))) * (15.0 * i + 5.0);
      want /= scale;
      EXPECT_NEAR(x[size_t(oy * 6 + ox)] * 255.0, want, 1e-3) << ox;
    }
  // Upscaling to 16 x 32 is plain bilinear: value at (o+0.5)/2-0.5, clamped.
  opt.height = 16;
  opt.width = 32;
  const ImageFolderDataset up(dir.path.string(), opt);
  std::vector<float> u(16 * 32);
  up.get(2, u.data(), &y);
  for (int ox = 0; ox < 32; ++ox) {
    const double s = std::clamp((ox + 0.5) / 2.0 - 0.5, 0.0, 15.0);
    EXPECT_NEAR(u[size_t(5 * 32 + ox)] * 255.0, 15.0 * s + 5.0, 1e-3) << ox;
  }
}

TEST(ImageFolder, AlphaCompositedOnBlack) {
  TempDir dir;
  fs::create_directories(dir.path / "a");
  write_png(dir / "a/rgba.png", 2, 2, 4, solid(2, 2, {255, 0, 0, 0}));  // fully transparent red
  ImageFolderOptions opt;
  opt.height = 2;
  opt.width = 2;
  const ImageFolderDataset ds(dir.path.string(), opt);
  std::vector<float> x(12);
  int32_t y;
  ds.get(0, x.data(), &y);
  for (float v : x) EXPECT_NEAR(v, 0.0f, 1e-6f);
}

TEST(ImageFolder, CorruptAndTruncatedFilesNameTheFile) {
  TempDir dir;
  make_folder(dir);
  // Garbage with a PNG name, a truncated PNG, a truncated JPEG, an empty file.
  write_bytes(dir / "cat/d_garbage.png", {1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  auto png = read_bytes(dir / "cat/b_red.png");
  png.resize(png.size() / 2);
  write_bytes(dir / "cat/e_cut.png", png);
  auto jpg = read_bytes(dir / "dog/x_blue.jpg");
  jpg.resize(jpg.size() / 2);
  write_bytes(dir / "dog/z_cut.jpg", jpg);
  write_bytes(dir / "dog/zz_empty.jpg", {});
  ImageFolderOptions opt;
  opt.height = 8;
  opt.width = 8;
  const ImageFolderDataset ds(dir.path.string(), opt);  // lazy: scanning succeeds
  ASSERT_EQ(ds.size(), 9u);
  std::vector<float> x(3 * 64);
  int32_t y;
  for (size_t i = 0; i < ds.size(); ++i) {
    const std::string& p = ds.path(i);
    const bool bad = contains(p, "garbage") || contains(p, "_cut") || contains(p, "empty");
    const std::string msg = error_of([&] { ds.get(i, x.data(), &y); });
    if (!bad) {
      EXPECT_EQ(msg, "") << p;
      continue;
    }
    EXPECT_TRUE(contains(msg, p)) << msg;
    EXPECT_NE(msg, "") << p;
  }
}

TEST(ImageFolder, PixelLimitGuardsMemory) {
  TempDir dir;
  fs::create_directories(dir.path / "a");
  write_png(dir / "a/big.png", 100, 100, 1, solid(100, 100, {1}));
  ImageFolderOptions opt;
  opt.height = 8;
  opt.width = 8;
  opt.max_pixels = 5000;
  const ImageFolderDataset ds(dir.path.string(), opt);
  std::vector<float> x(3 * 64);
  int32_t y;
  const std::string msg = error_of([&] { ds.get(0, x.data(), &y); });
  EXPECT_TRUE(contains(msg, "big.png")) << msg;
  EXPECT_TRUE(contains(msg, "max_pixels")) << msg;
}

TEST(ImageFolder, BadLayoutsAreClearErrors) {
  TempDir dir;
  ImageFolderOptions opt;
  opt.height = 8;
  opt.width = 8;
  const std::string missing = dir / "nope";
  EXPECT_TRUE(contains(error_of([&] { ImageFolderDataset(missing, opt); }),
                       "image folder not found at " + missing));
  EXPECT_TRUE(contains(error_of([&] { ImageFolderDataset(dir.path.string(), opt); }),
                       "no class folders under"));
  fs::create_directories(dir.path / "a");
  fs::create_directories(dir.path / "b");
  write_png(dir / "a/1.png", 2, 2, 1, solid(2, 2, {1}));
  write_bytes(dir / "b/readme.txt", {'x'});
  const std::string msg = error_of([&] { ImageFolderDataset(dir.path.string(), opt); });
  EXPECT_TRUE(contains(msg, "class folder " + (dir / "b") + " has no")) << msg;
  opt.height = 0;
  EXPECT_THROW(ImageFolderDataset(dir.path.string(), opt), std::invalid_argument);
}

// ============================================================================
// Subsets
// ============================================================================

TEST(Subset, ParseSpec) {
  SubsetSpec s = parse_subset("0.1");
  EXPECT_EQ(s.kind, SubsetSpec::Fraction);
  EXPECT_DOUBLE_EQ(s.fraction, 0.1);
  EXPECT_TRUE(s.random);
  EXPECT_EQ(s.resolve(60000), 6000u);
  s = parse_subset("2000");
  EXPECT_EQ(s.kind, SubsetSpec::Count);
  EXPECT_EQ(s.resolve(60000), 2000u);
  EXPECT_THROW(s.resolve(1000), std::invalid_argument);
  s = parse_subset("25%");
  EXPECT_EQ(s.resolve(10000), 2500u);
  s = parse_subset("first:500");
  EXPECT_FALSE(s.random);
  EXPECT_EQ(s.resolve(10000), 500u);
  EXPECT_EQ(parse_subset("1e-9").resolve(100), 1u);  // never empty
  for (const char* bad : {"", "abc", "0", "1.5", "-3", "0.0", "12x", "first:", "200%"})
    EXPECT_THROW(parse_subset(bad), std::invalid_argument) << bad;
}

TEST(Subset, FirstAndRandomAreDeterministic) {
  const size_t N = 60000;
  std::vector<int32_t> labels(N);
  for (size_t i = 0; i < N; ++i) labels[i] = int32_t(i % 10);
  const MemoryDataset base(std::vector<float>(N, 0.0f), labels, {1, 1, 1}, 10);

  const Subset first = Subset::first(base, 100);
  EXPECT_EQ(first.size(), 100u);
  EXPECT_EQ(first.indices().back(), 99u);

  const Subset a = Subset::random(base, 2000, 42), b = Subset::random(base, 2000, 42);
  const Subset c = Subset::random(base, 2000, 43);
  EXPECT_EQ(a.size(), 2000u);
  EXPECT_EQ(a.indices(), b.indices());
  EXPECT_NE(a.indices(), c.indices());
  // Sorted, unique, in range, spread over the whole dataset.
  for (size_t i = 1; i < a.size(); ++i) EXPECT_LT(a.indices()[i - 1], a.indices()[i]);
  double mean = 0;
  for (size_t i : a.indices()) mean += double(i);
  mean /= double(a.size());
  EXPECT_NEAR(mean, N / 2.0, N * 0.03);
  EXPECT_LT(a.indices().front(), 500u);
  EXPECT_GT(a.indices().back(), N - 500);

  const Subset f = Subset::from_spec(base, parse_subset("0.1"), 7);
  EXPECT_EQ(f.size(), 6000u);
  const Subset all = Subset::random(base, N, 1);
  EXPECT_EQ(all.size(), N);
  EXPECT_THROW(Subset::random(base, N + 1, 1), std::invalid_argument);

  // The view forwards get() to the base index.
  std::vector<float> v(1);
  int32_t y;
  a.get(5, v.data(), &y);
  EXPECT_EQ(y, int32_t(a.indices()[5] % 10));
  EXPECT_GE(a.resident_bytes(), base.resident_bytes() + 2000 * sizeof(size_t));
}

TEST(Subset, OfFashionMnist) {
  const IdxDataset train = IdxDataset::open(kFm, "train");
  const Subset s = Subset::from_spec(train, parse_subset("2000"), 1);
  EXPECT_EQ(s.size(), 2000u);
  EXPECT_EQ(s.num_classes(), 10);
  std::vector<int> hist(10, 0);
  std::vector<float> x(784);
  int32_t y;
  for (size_t i = 0; i < s.size(); ++i) {
    s.get(i, x.data(), &y);
    hist[size_t(y)]++;
  }
  for (int c = 0; c < 10; ++c) EXPECT_GT(hist[size_t(c)], 130) << c;  // ~200 each
}
