// memfit StreamedIdxDataset: an IDX images+labels pair read from disk one
// sample at a time, so the pixels are never resident.
//
// The images file is decompressed once into a raw IDX cache file (a raw
// source is read as it is, no cache). The cache lives in a cache directory
// (--cache-dir, else $MEMFIT_CACHE_DIR, else $XDG_CACHE_HOME/memfit, else
// ~/.cache/memfit) under a name derived from the source's absolute path,
// size and modification time, so an edited or replaced source gets a new
// cache. It is written to a temporary name, fsync'ed and renamed into place,
// so a crash never leaves a half-written cache under the final name; on
// reuse its size and IDX header are checked (against the source's gzip
// trailer too) and a wrong file is rebuilt.
//
// get(i) reads sample i with one pread(2) into a small stack buffer and maps
// it through the same 256-entry table as IdxDataset: the two give
// bit-identical samples. pread copies out of the page cache without mapping
// the file, so the process's RSS does not grow with the file (the page cache
// is the kernel's, reclaimable, and not part of RSS); the descriptor is
// advised POSIX_FADV_RANDOM so a cold cache reads only the pages samples
// touch. Labels (one byte per sample) stay in memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "data/cache_file.hpp"  // fallback_cache_dir
#include "data/dataset.hpp"
#include "data/idx.hpp"

namespace memfit::data {

// Where the raw cache of the IDX images file `source` goes in `cache_dir`
// ("" = fallback_cache_dir()): "<dir>/<name>-<16 hex digits>.idx", the digits
// a hash of the source's absolute path, size and mtime. A raw (uncompressed)
// source is its own cache: its path is returned. Throws std::runtime_error
// naming the source when it cannot be stat'ed.
std::string idx_cache_path(const std::string& source, const std::string& cache_dir = "");

struct StreamOptions {
  std::string cache_dir;  // "" = fallback_cache_dir()
  // true: build or check the cache and open it in open(); false: only the
  // labels and the images' header are read (enough to plan memory), and
  // prepare() must run before get().
  bool prepare = true;
};

// What prepare() did.
struct CacheStatus {
  enum Action : uint8_t { Raw, Reused, Built, Rebuilt } action = Raw;
  std::string path;    // the file get() reads
  std::string reason;  // Rebuilt: what was wrong with the old cache file
};

class StreamedIdxDataset final : public Dataset {
 public:
  // "<dir>/<split>-images-idx3-ubyte[.gz]" and the matching labels, as
  // IdxDataset::open.
  static StreamedIdxDataset open(const std::string& dir, const std::string& split,
                                 const IdxOptions& opt = {}, const StreamOptions& so = {});
  static StreamedIdxDataset open_files(const std::string& images_path,
                                       const std::string& labels_path,
                                       const IdxOptions& opt = {}, const StreamOptions& so = {});

  StreamedIdxDataset(StreamedIdxDataset&& o) noexcept;
  StreamedIdxDataset& operator=(StreamedIdxDataset&&) = delete;
  StreamedIdxDataset(const StreamedIdxDataset&) = delete;
  ~StreamedIdxDataset() override;

  // Builds the cache when it is missing or wrong (rebuilding a wrong one) and
  // opens it. Idempotent. Throws std::runtime_error naming the path for an
  // unwritable cache directory, a full disk, a source that fails the IDX
  // checks, or a cache that is still wrong after a rebuild.
  CacheStatus prepare();
  bool prepared() const { return fd_ >= 0; }

  size_t size() const override { return labels_.size(); }
  int num_classes() const override { return num_classes_; }
  SampleShape sample_shape() const override { return {1, int(rows_), int(cols_)}; }
  // One pread of the sample's rows*cols bytes (in chunks of kChunk for large
  // images), mapped through the table. Throws std::runtime_error naming the
  // cache file on a short read or an I/O error, std::logic_error before
  // prepare(). Thread-safe; never allocates on success.
  void get(size_t i, float* out_chw, int32_t* label) const override;
  float fill_value(int) const override { return lut_[0]; }
  // Labels, the table and the paths: what this object holds for its life.
  size_t resident_bytes() const override;
  // The stack read buffer of one get(): min(rows*cols, kChunk) bytes.
  size_t transient_bytes() const override;

  // What IdxDataset would hold resident for the same files (pixels, labels,
  // table): the planner's figure for keeping the dataset in memory.
  size_t in_memory_resident_bytes() const;

  const std::string& images_path() const { return images_path_; }
  const std::string& cache_path() const { return cache_path_; }
  uint8_t label(size_t i) const { return labels_[i]; }

  static constexpr size_t kChunk = size_t(1) << 14;

 private:
  StreamedIdxDataset() = default;

  std::string images_path_, cache_path_;
  bool raw_source_ = false;
  uint32_t rows_ = 0, cols_ = 0;
  int num_classes_ = 10;
  std::vector<uint8_t> labels_;
  float lut_[256] = {};
  int fd_ = -1;
};

}  // namespace memfit::data
