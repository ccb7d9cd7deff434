#include "data/idx.hpp"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <new>
#include <stdexcept>
#include <string>

namespace memfit::data {
namespace {

namespace fs = std::filesystem;

// Largest element payload of one IDX file (64 GiB; ImageNet at 224x224x3 is
// ~190 GB and would not come as IDX).
constexpr uint64_t kMaxIdxBytes = uint64_t(1) << 36;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what);
}

std::string not_found_message(const std::string& path) {
  return "dataset not found at " + path +
         ": install the Debian package dataset-fashion-mnist or pass --data DIR";
}

std::string hex32(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", v);
  return b;
}

// One IDX file opened through zlib (which reads raw files transparently).
class IdxFile {
 public:
  explicit IdxFile(const std::string& path) : path_(path) {
    std::error_code ec;
    const auto st = fs::status(path, ec);
    if (ec || !fs::exists(st)) throw std::runtime_error(not_found_message(path));
    if (!fs::is_regular_file(st)) fail(path, "not a regular file");
    file_size_ = fs::file_size(path, ec);
    if (ec) fail(path, "cannot read size: " + ec.message());
    probe_gzip();
    f_ = gzopen(path.c_str(), "rb");
    if (!f_) fail(path, std::string("cannot open: ") + std::strerror(errno));
    gzbuffer(f_, 1 << 18);
  }
  ~IdxFile() {
    if (f_) gzclose(f_);
  }
  IdxFile(const IdxFile&) = delete;
  IdxFile& operator=(const IdxFile&) = delete;

  bool gzip() const { return gzip_; }

  // Reads up to n bytes; returns how many (short only at end of data).
  size_t read(void* dst, size_t n) {
    size_t got = 0;
    auto* p = static_cast<unsigned char*>(dst);
    while (got < n) {
      const unsigned chunk = unsigned(std::min<size_t>(n - got, 1u << 30));
      const int r = gzread(f_, p + got, chunk);
      if (r < 0) zlib_error();
      if (r == 0) {
        check_clean_eof();
        break;
      }
      got += size_t(r);
    }
    return got;
  }

  uint32_t read_be32(const char* what) {
    unsigned char b[4];
    if (read(b, 4) != 4)
      fail(path_, std::string("truncated IDX header (file ends before the ") + what + ")");
    return load_be32(b);
  }

  // Reads exactly `bytes` of element data into out, then checks that nothing
  // follows. The header is never trusted: a raw file must be exactly its
  // size, a gzip file must be able to hold it (deflate expands at most
  // ~1032:1), and out's pages are touched only as decompressed data really
  // arrives, so a forged header costs nothing resident. out's capacity is
  // exactly `bytes` (one reservation, no regrowth), as the plan counts it.
  void read_payload(std::vector<uint8_t>& out, uint64_t bytes, uint64_t header_bytes,
                    const std::string& declared) {
    check_plausible(bytes, header_bytes, declared);
    out.clear();
    try {
      out.reserve(size_t(bytes));
    } catch (const std::bad_alloc&) {
      fail(path_, "cannot allocate " + std::to_string(bytes) + " bytes for " + declared);
    }
    constexpr size_t kChunk = size_t(1) << 20;
    size_t got = 0;
    while (got < bytes) {
      const size_t want = size_t(std::min<uint64_t>(kChunk, bytes - got));
      out.resize(got + want);
      const size_t r = read(out.data() + got, want);
      got += r;
      if (r < want) {
        out.resize(got);
        truncated(got, bytes, declared);
      }
    }
    check_no_trailing_data(declared);
  }

  // As read_payload, but the `bytes` of element data go to the file
  // descriptor out_fd in chunks instead of into memory.
  void copy_payload(int out_fd, const std::string& out_name, uint64_t bytes, uint64_t header_bytes,
                    const std::string& declared) {
    check_plausible(bytes, header_bytes, declared);
    constexpr size_t kChunk = size_t(1) << 18;
    std::vector<uint8_t> buf(size_t(std::min<uint64_t>(kChunk, bytes)));
    uint64_t got = 0;
    while (got < bytes) {
      const size_t want = size_t(std::min<uint64_t>(buf.size(), bytes - got));
      const size_t r = read(buf.data(), want);
      write_all(out_fd, out_name, buf.data(), r);
      got += r;
      if (r < want) truncated(size_t(got), bytes, declared);
    }
    check_no_trailing_data(declared);
  }

 private:
  // Refuses a header whose element bytes the file cannot hold.
  void check_plausible(uint64_t bytes, uint64_t header_bytes, const std::string& declared) const {
    const uint64_t total = bytes + header_bytes;  // bytes < 2^64 - 2^32: no overflow
    if (!gzip_ && total != file_size_)
      fail(path_, "file is " + std::to_string(file_size_) + " bytes but its header declares " +
                      declared + " (" + std::to_string(total) + " bytes): truncated or corrupt");
    // deflate's best ratio is 1032:1; allow the gzip framing on top.
    constexpr uint64_t kMaxRatio = 1032;
    if (gzip_ && total > file_size_ * kMaxRatio + 4096)
      fail(path_, "header declares " + declared + " (" + std::to_string(total) +
                      " bytes) but a gzip file of " + std::to_string(file_size_) +
                      " bytes decompresses to at most " + std::to_string(file_size_ * kMaxRatio + 4096) +
                      ": corrupt header");
    if (bytes > kMaxIdxBytes)
      fail(path_, "header declares " + declared + " (" + std::to_string(bytes) + " bytes), over memfit's " +
                      std::to_string(kMaxIdxBytes) + "-byte limit for one IDX file: corrupt header?");
  }

  void probe_gzip() {
    FILE* f = std::fopen(path_.c_str(), "rb");
    if (!f) fail(path_, std::string("cannot open: ") + std::strerror(errno));
    unsigned char m[2] = {0, 0};
    gzip_ = std::fread(m, 1, 2, f) == 2 && m[0] == 0x1f && m[1] == 0x8b;
    std::fclose(f);
  }

  void check_no_trailing_data(const std::string& declared) {
    unsigned char extra;
    if (read(&extra, 1) != 0)
      fail(path_, "file holds more data than its header declares (" + declared +
                      "): corrupt header or wrong file");
  }

  [[noreturn]] void zlib_error() {
    check_clean_eof();
    fail(path_, "corrupt gzip data");
  }

  void check_clean_eof() {
    int code = 0;
    const char* msg = gzerror(f_, &code);
    if (code == Z_BUF_ERROR) fail(path_, "truncated gzip data (compressed stream ends early)");
    if (code != Z_OK) {
      // zlib prefixes its message with the path; keep only the reason.
      std::string why = msg ? msg : "unknown zlib error";
      if (why.rfind(path_ + ": ", 0) == 0) why = why.substr(path_.size() + 2);
      fail(path_, "corrupt gzip data: " + why);
    }
  }

  [[noreturn]] void truncated(size_t got, uint64_t want, const std::string& declared) {
    fail(path_, "truncated: header declares " + declared + " (" + std::to_string(want) +
                    " bytes of data) but the file holds only " + std::to_string(got));
  }

  std::string path_;
  gzFile f_ = nullptr;
  uint64_t file_size_ = 0;
  bool gzip_ = false;
};

void check_magic(const std::string& path, uint32_t magic, uint32_t want, const char* what) {
  if (magic == want) return;
  std::string hint;
  if ((magic >> 16) == 0 && ((magic >> 8) & 0xff) != 0x08)
    hint = " (IDX element type " + hex32((magic >> 8) & 0xff) + " is not unsigned byte)";
  else if ((magic >> 16) == 0 && ((magic >> 8) & 0xff) == 0x08)
    hint = " (an IDX file with " + std::to_string(magic & 0xff) + " dimensions)";
  fail(path, "bad magic " + hex32(magic) + ", expected " + hex32(want) + " for " + what + hint +
                 ": not an IDX file of that kind, or corrupt");
}

IdxImages read_images_header(IdxFile& f, const std::string& path) {
  const uint32_t magic = f.read_be32("magic number");
  check_magic(path, magic, 0x00000803u, "IDX unsigned-byte images");
  IdxImages img;
  img.count = f.read_be32("image count");
  img.rows = f.read_be32("row count");
  img.cols = f.read_be32("column count");
  if (img.count == 0) fail(path, "header declares 0 images");
  if (img.rows == 0 || img.cols == 0 || img.rows > 65536 || img.cols > 65536)
    fail(path, "implausible image size " + std::to_string(img.rows) + "x" +
                   std::to_string(img.cols) + " in header: corrupt file");
  return img;
}

std::string images_declared(const IdxImages& img) {
  return std::to_string(img.count) + " images of " + std::to_string(img.rows) + "x" +
         std::to_string(img.cols);
}

}  // namespace

void write_all(int fd, const std::string& name, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(name + ": cannot write: " + std::strerror(errno));
    }
    p += w;
    n -= size_t(w);
  }
}

IdxImages read_idx_images(const std::string& path) {
  IdxFile f(path);
  IdxImages img = read_images_header(f, path);
  const uint64_t bytes = uint64_t(img.count) * img.rows * img.cols;  // < 2^64: 32+16+16 bits
  f.read_payload(img.pixels, bytes, 16, images_declared(img));
  return img;
}

IdxImages read_idx_images_header(const std::string& path) {
  IdxFile f(path);
  return read_images_header(f, path);
}

IdxImages copy_idx_images(const std::string& path, int out_fd, const std::string& out_name) {
  IdxFile f(path);
  IdxImages img = read_images_header(f, path);
  unsigned char h[16];
  store_be32(h, 0x00000803u);
  store_be32(h + 4, img.count);
  store_be32(h + 8, img.rows);
  store_be32(h + 12, img.cols);
  write_all(out_fd, out_name, h, sizeof h);
  const uint64_t bytes = uint64_t(img.count) * img.rows * img.cols;
  f.copy_payload(out_fd, out_name, bytes, 16, images_declared(img));
  return img;
}

bool is_gzip_file(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  unsigned char m[2] = {0, 0};
  const bool gz = std::fread(m, 1, 2, f) == 2 && m[0] == 0x1f && m[1] == 0x8b;
  std::fclose(f);
  return gz;
}

void idx_lut(const Normalize& n, float lut[256]) {
  const float m = n.mean_at(0), inv = 1.0f / n.std_at(0);
  for (int v = 0; v < 256; ++v) lut[v] = (float(v) / 255.0f - m) * inv;
}

void check_idx_labels(const std::vector<uint8_t>& labels, int num_classes,
                      const std::string& source) {
  for (size_t i = 0; i < labels.size(); ++i)
    if (labels[i] >= num_classes)
      throw std::runtime_error(source + ": label " + std::to_string(labels[i]) + " at index " +
                               std::to_string(i) + " is out of range for " +
                               std::to_string(num_classes) + " classes (corrupt file, or "
                               "wrong number of classes)");
}

std::vector<uint8_t> read_idx_labels(const std::string& path) {
  IdxFile f(path);
  const uint32_t magic = f.read_be32("magic number");
  check_magic(path, magic, 0x00000801u, "IDX unsigned-byte labels");
  const uint32_t count = f.read_be32("label count");
  if (count == 0) fail(path, "header declares 0 labels");
  std::vector<uint8_t> labels;
  f.read_payload(labels, count, 8, std::to_string(count) + " labels");
  return labels;
}

std::string find_idx_file(const std::string& dir, const std::string& split,
                          const std::string& kind) {
  const std::string base = (fs::path(dir) / (split + "-" + kind + "-ubyte")).string();
  std::error_code ec;
  if (fs::exists(base + ".gz", ec)) return base + ".gz";
  if (fs::exists(base, ec)) return base;
  throw std::runtime_error(not_found_message(base + ".gz"));
}

IdxDataset IdxDataset::open(const std::string& dir, const std::string& split,
                            const IdxOptions& opt) {
  const std::string images = find_idx_file(dir, split, "images-idx3");
  const std::string labels = find_idx_file(dir, split, "labels-idx1");
  return open_files(images, labels, opt);
}

IdxDataset IdxDataset::open_files(const std::string& images_path, const std::string& labels_path,
                                  const IdxOptions& opt) {
  opt.normalize.validate();  // before reading 47 MB
  IdxImages images = read_idx_images(images_path);
  std::vector<uint8_t> labels = read_idx_labels(labels_path);
  if (images.count != labels.size())
    throw std::runtime_error(images_path + " holds " + std::to_string(images.count) +
                             " images but " + labels_path + " holds " +
                             std::to_string(labels.size()) + " labels: mismatched files");
  return IdxDataset(std::move(images), std::move(labels), opt, labels_path);
}

IdxDataset::IdxDataset(IdxImages images, std::vector<uint8_t> labels, const IdxOptions& opt,
                       const std::string& source)
    : rows_(images.rows), cols_(images.cols), num_classes_(opt.num_classes),
      pixels_(std::move(images.pixels)), labels_(std::move(labels)) {
  opt.normalize.validate();
  if (num_classes_ <= 0 || num_classes_ > 256)
    throw std::invalid_argument("IdxDataset: num_classes must be in [1, 256], got " +
                                std::to_string(num_classes_));
  if (pixels_.size() != labels_.size() * size_t(rows_) * cols_)
    throw std::runtime_error(source + ": " + std::to_string(labels_.size()) +
                             " labels do not match " + std::to_string(images.count) +
                             " images");
  check_idx_labels(labels_, num_classes_, source);
  idx_lut(opt.normalize, lut_);
  fill_ = lut_[0];
}

void IdxDataset::get(size_t i, float* out_chw, int32_t* label) const {
  if (i >= labels_.size())
    throw std::out_of_range("IdxDataset: index " + std::to_string(i) + " >= size " +
                            std::to_string(labels_.size()));
  const size_t n = size_t(rows_) * cols_;
  const uint8_t* src = pixels_.data() + i * n;
  for (size_t k = 0; k < n; ++k) out_chw[k] = lut_[src[k]];
  *label = int32_t(labels_[i]);
}

float IdxDataset::fill_value(int) const { return fill_; }

size_t IdxDataset::resident_bytes() const {
  return pixels_.capacity() + labels_.capacity() + sizeof(lut_);
}

}  // namespace memfit::data
