#include "data/idx_stream.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <utility>

#include "memfit/rng.hpp"

namespace memfit::data {
namespace {

namespace fs = std::filesystem;

constexpr const char* kCacheHint =
    " (pass --cache-dir DIR or set MEMFIT_CACHE_DIR to a writable directory, or use --data-in memory)";

std::string errno_text() { return std::strerror(errno); }

// Reads exactly n bytes at offset; returns how many were read before the end
// of the file. Throws (naming `path`) on an I/O error.
size_t pread_full(int fd, void* dst, size_t n, uint64_t offset, const std::string& path) {
  auto* p = static_cast<unsigned char*>(dst);
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, p + got, n - got, off_t(offset + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(path + ": read error at byte " + std::to_string(offset + got) + ": " +
                               errno_text());
    }
    if (r == 0) break;
    got += size_t(r);
  }
  return got;
}

}  // namespace

std::string idx_cache_path(const std::string& source, const std::string& cache_dir) {
  struct stat st;
  if (::stat(source.c_str(), &st) != 0) throw std::runtime_error(source + ": cannot stat: " + errno_text());
  if (!is_gzip_file(source)) return source;  // a raw IDX file is streamed as it is
  const FileStamp s = stamp_of(source);
  uint64_t h = rng::kFnvOffset;
  h = rng::fnv1a(h, "memfit idx cache v1", 19);
  h = rng::fnv1a(h, s.path.data(), s.path.size() + 1);
  h = rng::fnv1a(h, &s.size, sizeof s.size);
  h = rng::fnv1a(h, &s.mtime_ns, sizeof s.mtime_ns);
  std::string name = fs::path(source).filename().string();
  if (name.size() > 3 && name.compare(name.size() - 3, 3, ".gz") == 0) name.resize(name.size() - 3);
  const std::string dir = cache_dir.empty() ? fallback_cache_dir() : cache_dir;
  return (fs::path(dir) / (name + "-" + hex16(h) + ".idx")).string();
}

StreamedIdxDataset StreamedIdxDataset::open(const std::string& dir, const std::string& split,
                                            const IdxOptions& opt, const StreamOptions& so) {
  const std::string images = find_idx_file(dir, split, "images-idx3");
  const std::string labels = find_idx_file(dir, split, "labels-idx1");
  return open_files(images, labels, opt, so);
}

StreamedIdxDataset StreamedIdxDataset::open_files(const std::string& images_path,
                                                  const std::string& labels_path,
                                                  const IdxOptions& opt, const StreamOptions& so) {
  opt.normalize.validate();
  if (opt.num_classes <= 0 || opt.num_classes > 256)
    throw std::invalid_argument("StreamedIdxDataset: num_classes must be in [1, 256], got " +
                                std::to_string(opt.num_classes));
  const IdxImages header = read_idx_images_header(images_path);
  StreamedIdxDataset d;
  d.labels_ = read_idx_labels(labels_path);
  if (header.count != d.labels_.size())
    throw std::runtime_error(images_path + " holds " + std::to_string(header.count) + " images but " +
                             labels_path + " holds " + std::to_string(d.labels_.size()) +
                             " labels: mismatched files");
  check_idx_labels(d.labels_, opt.num_classes, labels_path);
  d.images_path_ = images_path;
  d.rows_ = header.rows;
  d.cols_ = header.cols;
  d.num_classes_ = opt.num_classes;
  idx_lut(opt.normalize, d.lut_);
  d.raw_source_ = !is_gzip_file(images_path);
  d.cache_path_ = idx_cache_path(images_path, so.cache_dir);
  if (so.prepare) d.prepare();
  return d;
}

StreamedIdxDataset::StreamedIdxDataset(StreamedIdxDataset&& o) noexcept
    : images_path_(std::move(o.images_path_)), cache_path_(std::move(o.cache_path_)),
      raw_source_(o.raw_source_), rows_(o.rows_), cols_(o.cols_), num_classes_(o.num_classes_),
      labels_(std::move(o.labels_)), fd_(std::exchange(o.fd_, -1)) {
  std::memcpy(lut_, o.lut_, sizeof lut_);
}

StreamedIdxDataset::~StreamedIdxDataset() {
  if (fd_ >= 0) ::close(fd_);
}

namespace {

// Why the open IDX file `fd` is not the raw form of `count` images of
// rows x cols ("" when it is).
std::string check_raw_idx(int fd, const std::string& path, uint64_t count, uint32_t rows, uint32_t cols) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return "cannot stat: " + errno_text();
  const uint64_t size = uint64_t(st.st_size);
  if (size < 16) return "it is " + std::to_string(size) + " bytes, shorter than an IDX header";
  unsigned char h[16];
  if (pread_full(fd, h, 16, 0, path) != 16) return "it ends inside its IDX header";
  const uint32_t magic = load_be32(h), n = load_be32(h + 4), r = load_be32(h + 8), c = load_be32(h + 12);
  char m[16];
  std::snprintf(m, sizeof m, "0x%08x", magic);
  if (magic != 0x00000803u) return std::string("bad magic ") + m + " (expected 0x00000803, IDX unsigned-byte images)";
  if (n != count || r != rows || c != cols)
    return "its header declares " + std::to_string(n) + " images of " + std::to_string(r) + "x" +
           std::to_string(c) + ", the source " + std::to_string(count) + " of " + std::to_string(rows) +
           "x" + std::to_string(cols);
  const uint64_t want = 16 + count * rows * cols;
  if (size != want)
    return "it is " + std::to_string(size) + " bytes but its header declares " + std::to_string(want) +
           " (truncated or corrupt)";
  return "";
}

}  // namespace

CacheStatus StreamedIdxDataset::prepare() {
  CacheStatus st;
  st.path = cache_path_;
  if (fd_ >= 0) {
    st.action = raw_source_ ? CacheStatus::Raw : CacheStatus::Reused;
    return st;
  }
  const uint64_t count = labels_.size();
  if (raw_source_) {
    const int fd = ::open(images_path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw std::runtime_error(images_path_ + ": cannot open: " + errno_text());
    const std::string why = check_raw_idx(fd, images_path_, count, rows_, cols_);
    if (!why.empty()) {
      ::close(fd);
      throw std::runtime_error(images_path_ + ": " + why);
    }
    fd_ = fd;
    ::posix_fadvise(fd_, 0, 0, POSIX_FADV_RANDOM);
    st.action = CacheStatus::Raw;
    return st;
  }

  // Reuse a cache that checks out.
  int fd = ::open(cache_path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    st.reason = check_raw_idx(fd, cache_path_, count, rows_, cols_);
    if (st.reason.empty()) {
      fd_ = fd;
      ::posix_fadvise(fd_, 0, 0, POSIX_FADV_RANDOM);
      st.action = CacheStatus::Reused;
      return st;
    }
    ::close(fd);
    st.action = CacheStatus::Rebuilt;
  } else if (errno == ENOENT) {
    st.action = CacheStatus::Built;
  } else {
    st.reason = "cannot open it: " + errno_text();
    st.action = CacheStatus::Rebuilt;
  }

  // Build: decompress into a temp file next to the cache, fsync, rename.
  ensure_cache_dir(fs::path(cache_path_).parent_path().string(), "dataset cache", kCacheHint);
  {
    AtomicFile out(cache_path_, "dataset cache", kCacheHint);
    const IdxImages h = copy_idx_images(images_path_, out.fd(), out.temp_path());
    if (h.count != count || h.rows != rows_ || h.cols != cols_)
      throw std::runtime_error(images_path_ + ": changed while memfit was reading it; run again");
    out.commit();
  }
  fd = ::open(cache_path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(cache_path_ + ": cannot open the dataset cache just written: " + errno_text());
  const std::string why = check_raw_idx(fd, cache_path_, count, rows_, cols_);
  if (!why.empty()) {
    ::close(fd);
    throw std::runtime_error(cache_path_ + ": the dataset cache just written is corrupt: " + why +
                             "; delete it and check the disk");
  }
  fd_ = fd;
  ::posix_fadvise(fd_, 0, 0, POSIX_FADV_RANDOM);
  return st;
}

void StreamedIdxDataset::get(size_t i, float* out_chw, int32_t* label) const {
  if (i >= labels_.size())
    throw std::out_of_range("StreamedIdxDataset: index " + std::to_string(i) + " >= size " +
                            std::to_string(labels_.size()));
  if (fd_ < 0) throw std::logic_error("StreamedIdxDataset::get before prepare(): " + cache_path_);
  const size_t n = size_t(rows_) * cols_;
  const uint64_t offset = 16 + uint64_t(i) * n;
  unsigned char buf[kChunk];
  for (size_t done = 0; done < n;) {
    const size_t want = std::min(kChunk, n - done);
    const size_t got = pread_full(fd_, buf, want, offset + done, cache_path_);
    if (got != want)
      throw std::runtime_error(cache_path_ + ": short read of sample " + std::to_string(i) + " (" +
                               std::to_string(done + got) + " of " + std::to_string(n) + " bytes at offset " +
                               std::to_string(offset) + "): the file was truncated or replaced while in use; "
                               "delete it and run again");
    float* out = out_chw + done;
    for (size_t k = 0; k < want; ++k) out[k] = lut_[buf[k]];
    done += want;
  }
  *label = int32_t(labels_[i]);
}

size_t StreamedIdxDataset::resident_bytes() const {
  return labels_.capacity() + sizeof(lut_) + images_path_.capacity() + cache_path_.capacity();
}

size_t StreamedIdxDataset::transient_bytes() const {
  return std::min(kChunk, size_t(rows_) * cols_);
}

size_t StreamedIdxDataset::in_memory_resident_bytes() const {
  return labels_.size() * size_t(rows_) * cols_ + labels_.size() + sizeof(lut_);
}

}  // namespace memfit::data
