#include "data/array_dataset.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace memfit::data {
namespace {

// Label i of a 1-axis I32/I64 view.
int64_t label_at(const ArrayView& v, size_t i) {
  const std::byte* p = v.data + static_cast<int64_t>(i) * v.strides[0];
  if (v.type == ElemType::I64) {
    int64_t x;
    std::memcpy(&x, p, 8);
    return x;
  }
  int32_t x;
  std::memcpy(&x, p, 4);
  return x;
}

void check_view(const ArrayView& v, size_t axes, const char* what) {
  if (!v.data && !v.shape.empty() && v.shape[0] > 0) throw DataError(std::string(what) + ": no data");
  if (v.shape.size() != axes || v.strides.size() != axes)
    throw DataError(std::string(what) + ": expected " + std::to_string(axes) + " axes, got " + std::to_string(v.shape.size()));
  for (int64_t s : v.shape)
    if (s < 0) throw DataError(std::string(what) + ": a negative extent");
}

// Checks the labels' type, count and range; names the first bad index.
void check_labels(const ArrayView& labels, size_t n, int classes) {
  check_view(labels, 1, "labels");
  if (labels.type != ElemType::I32 && labels.type != ElemType::I64)
    throw DataError(std::string("labels: expected integers (int32 or int64), got ") + elem_name(labels.type));
  if (static_cast<size_t>(labels.shape[0]) != n)
    throw DataError("x has " + std::to_string(n) + " samples but y has " + std::to_string(labels.shape[0]) +
                    " labels: they must have the same length");
  if (classes < 1) throw DataError("classes must be at least 1, got " + std::to_string(classes));
  for (size_t i = 0; i < n; ++i) {
    const int64_t y = label_at(labels, i);
    if (y < 0 || y >= classes)
      throw DataError("label " + std::to_string(y) + " at index " + std::to_string(i) + " is outside [0, " +
                      std::to_string(classes) + ")" + " (classes = max label + 1 unless classes= is given)");
  }
}

int64_t index_of(ElemType t, const std::byte* p) {
  if (t == ElemType::I64) {
    int64_t x;
    std::memcpy(&x, p, 8);
    return x;
  }
  int32_t x;
  std::memcpy(&x, p, 4);
  return x;
}

// An attention mask's value: uint8 (numpy's bool viewed as bytes), int32 or int64.
int64_t mask_value(ElemType t, const std::byte* p) {
  return t == ElemType::U8 ? static_cast<int64_t>(std::to_integer<uint8_t>(*p)) : index_of(t, p);
}

}  // namespace

size_t elem_size(ElemType t) { return t == ElemType::U8 ? 1 : t == ElemType::I64 ? 8 : 4; }
const char* elem_name(ElemType t) {
  switch (t) {
    case ElemType::U8: return "uint8";
    case ElemType::F32: return "float32";
    case ElemType::I32: return "int32";
    case ElemType::I64: return "int64";
  }
  return "?";
}

size_t ArrayView::bytes() const {
  size_t n = elem_size(type);
  for (int64_t s : shape) n *= static_cast<size_t>(s);
  return n;
}

void channel_luts(const Normalize& n, int channels, std::vector<float>& lut) {
  n.validate();
  lut.assign(static_cast<size_t>(channels) * 256, 0.0f);
  for (int c = 0; c < channels; ++c) {
    // The formula of IdxDataset's and CifarDataset's tables, so that the
    // same pixels and statistics give the same floats.
    const float m = n.mean_at(c), inv = 1.0f / n.std_at(c);
    for (int v = 0; v < 256; ++v) {
      const float y = (float(v) / 255.0f - m) * inv;
      // Finite statistics can still make an infinite table: a subnormal
      // std (1 / 1e-40 is inf in float), or a huge mean over a small std.
      if (!std::isfinite(y)) {
        char msg[200];
        std::snprintf(msg, sizeof(msg), "normalisation of channel %d (mean %g, std %g) takes pixel %d to %g: pass "
                      "statistics of the data's own scale", c, double(m), double(n.std_at(c)), v, double(y));
        throw DataError(msg);
      }
      lut[static_cast<size_t>(c) * 256 + static_cast<size_t>(v)] = y;
    }
  }
}

// ---- ArrayImages ----

ArrayImages::ArrayImages(ArrayView images, ArrayView labels, int classes, const Normalize& normalize, std::string note)
    : images_(std::move(images)), labels_(std::move(labels)), classes_(classes), note_(std::move(note)) {
  check_view(images_, 4, "images");
  if (images_.type != ElemType::U8 && images_.type != ElemType::F32)
    throw DataError(std::string("images: expected uint8 or float32 pixels, got ") + elem_name(images_.type));
  n_ = static_cast<size_t>(images_.shape[0]);
  if (n_ == 0) throw DataError("images: no samples (N = 0)");
  for (int k = 0; k < 3; ++k) {
    if (images_.shape[size_t(k) + 1] < 1 || images_.shape[size_t(k) + 1] > (1 << 20))
      throw DataError("images: a sample extent of " + std::to_string(images_.shape[size_t(k) + 1]));
    shape_[size_t(k)] = static_cast<int>(images_.shape[size_t(k) + 1]);
  }
  check_labels(labels_, n_, classes_);
  if (images_.type == ElemType::U8) {
    channel_luts(normalize, shape_[0], lut_);
    return;
  }
  // Float images: every value finite, or the index of the first that is not.
  const int64_t* st = images_.strides.data();
  for (size_t i = 0; i < n_; ++i)
    for (int c = 0; c < shape_[0]; ++c)
      for (int h = 0; h < shape_[1]; ++h) {
        const std::byte* row = images_.data + int64_t(i) * st[0] + c * st[1] + h * st[2];
        for (int w = 0; w < shape_[2]; ++w) {
          float v;
          std::memcpy(&v, row + w * st[3], 4);
          if (!std::isfinite(v))
            throw DataError("image at index " + std::to_string(i) + " holds " + (std::isnan(v) ? "NaN" : "an infinity") +
                            " (channel " + std::to_string(c) + ", row " + std::to_string(h) + ", column " +
                            std::to_string(w) + ")");
        }
      }
}

void ArrayImages::get(size_t i, float* out, int32_t* label) const {
  if (i >= n_) throw std::out_of_range("ArrayImages: index " + std::to_string(i) + " >= size " + std::to_string(n_));
  const int64_t* st = images_.strides.data();
  const int C = shape_[0], H = shape_[1], W = shape_[2];
  const std::byte* base = images_.data + int64_t(i) * st[0];
  for (int c = 0; c < C; ++c) {
    const float* lut = lut_.empty() ? nullptr : lut_.data() + size_t(c) * 256;
    for (int h = 0; h < H; ++h) {
      const std::byte* row = base + c * st[1] + h * st[2];
      float* o = out + (size_t(c) * size_t(H) + size_t(h)) * size_t(W);
      if (lut) {
        for (int w = 0; w < W; ++w) o[w] = lut[static_cast<uint8_t>(row[w * st[3]])];
      } else if (st[3] == 4) {
        std::memcpy(o, row, size_t(W) * 4);
      } else {
        for (int w = 0; w < W; ++w) std::memcpy(o + w, row + w * st[3], 4);
      }
    }
  }
  *label = static_cast<int32_t>(label_at(labels_, i));
}

float ArrayImages::fill_value(int c) const {
  return lut_.empty() ? 0.0f : lut_[size_t(std::clamp(c, 0, shape_[0] - 1)) * 256];
}

// ---- ArrayTokens ----

ArrayTokens::ArrayTokens(ArrayView tokens, ArrayView labels, int classes, int64_t vocab, int32_t pad_id, std::string note,
                         std::optional<ArrayView> mask)
    : tokens_(std::move(tokens)), labels_(std::move(labels)), mask_(std::move(mask)), vocab_(vocab), classes_(classes),
      pad_(pad_id), note_(std::move(note)) {
  check_view(tokens_, 2, "tokens");
  if (tokens_.type != ElemType::I32 && tokens_.type != ElemType::I64)
    throw DataError(std::string("token ids: expected int32 or int64, got ") + elem_name(tokens_.type));
  n_ = static_cast<size_t>(tokens_.shape[0]);
  t_ = tokens_.shape[1];
  if (n_ == 0 || t_ == 0) throw DataError("token ids: an empty array (N or T is 0)");
  if (vocab_ < 1 || vocab_ > INT32_MAX) throw DataError("vocab must be in [1, 2^31), got " + std::to_string(vocab_));
  if (pad_ < 0 || pad_ >= vocab_) throw DataError("pad_id " + std::to_string(pad_) + " is outside the vocabulary");
  check_labels(labels_, n_, classes_);
  for (size_t i = 0; i < n_; ++i)
    for (int64_t t = 0; t < t_; ++t) {
      const int64_t id = index_of(tokens_.type, tokens_.data + int64_t(i) * tokens_.strides[0] + t * tokens_.strides[1]);
      if (id < 0 || id >= vocab_)
        throw DataError("token id " + std::to_string(id) + " at index " + std::to_string(i) + ", position " +
                        std::to_string(t) + " is outside [0, " + std::to_string(vocab_) + ")");
    }
  if (!mask_) return;
  check_view(*mask_, 2, "attention_mask");
  if (mask_->type == ElemType::F32)
    throw DataError("attention_mask: expected integers (uint8, bool, int32 or int64), got float32");
  if (mask_->shape[0] != tokens_.shape[0] || mask_->shape[1] != t_)
    throw DataError("attention_mask: shape [" + std::to_string(mask_->shape[0]) + ", " + std::to_string(mask_->shape[1]) +
                    "], the token ids' is [" + std::to_string(n_) + ", " + std::to_string(t_) + "]");
  for (size_t i = 0; i < n_; ++i) {
    const std::byte* row = mask_->data + int64_t(i) * mask_->strides[0];
    bool padding = false;
    for (int64_t t = 0; t < t_; ++t) {
      const std::byte* p = row + t * mask_->strides[1];
      const int64_t m = mask_value(mask_->type, p);
      if (m != 0 && m != 1)
        throw DataError("attention_mask: " + std::to_string(m) + " at index " + std::to_string(i) + ", position " +
                        std::to_string(t) + "; expected 0 or 1");
      if (m == 1 && padding)
        throw DataError("attention_mask at index " + std::to_string(i) + ": a 1 at position " + std::to_string(t) +
                        " after padding; memfit reads right-padded examples (the tokens first, then the padding: "
                        "tokenizer padding_side='right')");
      if (m == 0) padding = true;
    }
    const std::byte* first = row;
    const int64_t m0 = mask_value(mask_->type, first);
    if (m0 == 0) throw DataError("attention_mask at index " + std::to_string(i) + " has no 1: an empty example");
  }
}

int64_t ArrayTokens::length(size_t i) const {
  if (mask_) {
    const std::byte* row = mask_->data + int64_t(i) * mask_->strides[0];
    int64_t len = 0;
    for (int64_t t = 0; t < t_; ++t) {
      const std::byte* p = row + t * mask_->strides[1];
      const int64_t m = mask_value(mask_->type, p);
      if (m == 0) break;
      len = t + 1;
    }
    return len;
  }
  const std::byte* row = tokens_.data + int64_t(i) * tokens_.strides[0];
  int64_t len = 0;
  for (int64_t t = 0; t < t_; ++t)
    if (index_of(tokens_.type, row + t * tokens_.strides[1]) != pad_) len = t + 1;  // up to the last id not padding
  return len;
}

std::vector<TensorSpec> ArrayTokens::tensors() const {
  return {{"tokens", DType::i32, {t_}, 0.0, vocab_},
          {"attention_mask", DType::i32, {t_}, 0.0, 2},
          {"lengths", DType::i32, {}, 0.0, t_ + 1},
          {"labels", DType::i32, {}, -1.0, classes_}};
}

void ArrayTokens::get_tensors(size_t i, void* const* out) const {
  if (i >= n_) throw std::out_of_range("ArrayTokens: index " + std::to_string(i) + " >= size " + std::to_string(n_));
  auto* tok = static_cast<int32_t*>(out[0]);
  auto* mask = static_cast<int32_t*>(out[1]);
  const std::byte* row = tokens_.data + int64_t(i) * tokens_.strides[0];
  for (int64_t t = 0; t < t_; ++t) tok[t] = static_cast<int32_t>(index_of(tokens_.type, row + t * tokens_.strides[1]));
  const int64_t len = length(i);
  for (int64_t t = 0; t < t_; ++t) mask[t] = t < len ? 1 : 0;
  *static_cast<int32_t*>(out[2]) = static_cast<int32_t>(len);
  *static_cast<int32_t*>(out[3]) = static_cast<int32_t>(label_at(labels_, i));
}

// ---- ArrayFileDataset ----

namespace {

template <class T>
T field(const unsigned char* h, size_t at) {
  T v;
  std::memcpy(&v, h + at, sizeof(T));
  return v;
}

void pread_all(int fd, void* dst, size_t n, uint64_t off, const std::string& path) {
  auto* p = static_cast<unsigned char*>(dst);
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, p + got, n - got, off_t(off + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw std::runtime_error(path + ": byte " + std::to_string(off + got) + ": cannot read: " + std::strerror(errno));
    if (r == 0) throw std::runtime_error(path + ": byte " + std::to_string(off + got) + ": the file ends early (it shrank?)");
    got += size_t(r);
  }
}

}  // namespace

std::shared_ptr<ArrayFileDataset> ArrayFileDataset::open(const std::string& path, std::string note) {
  std::shared_ptr<ArrayFileDataset> d(new ArrayFileDataset());
  d->path_ = path;
  d->note_ = std::move(note);
  d->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (d->fd_ < 0) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(d->fd_, &st) != 0 || !S_ISREG(st.st_mode)) throw std::runtime_error(path + ": not a regular file");
  const uint64_t file_size = uint64_t(st.st_size);
  unsigned char h[96];
  if (file_size < sizeof(h)) throw std::runtime_error(path + ": " + std::to_string(file_size) + " bytes, shorter than the header");
  pread_all(d->fd_, h, sizeof(h), 0, path);
  if (std::memcmp(h, kArrayFileMagic, 8) != 0) throw std::runtime_error(path + ": not a memfit array cache (bad magic)");
  if (field<uint32_t>(h, 8) != kArrayFileVersion)
    throw std::runtime_error(path + ": array cache version " + std::to_string(field<uint32_t>(h, 8)) + ", expected " +
                             std::to_string(kArrayFileVersion));
  const uint32_t type = field<uint32_t>(h, 12);
  if (type > 1) throw std::runtime_error(path + ": unknown element type " + std::to_string(type));
  d->type_ = type == 0 ? ElemType::U8 : ElemType::F32;
  for (int k = 0; k < 3; ++k) {
    const uint32_t e = field<uint32_t>(h, 16 + 4 * size_t(k));
    if (e < 1 || e > (1u << 16)) throw std::runtime_error(path + ": a sample extent of " + std::to_string(e));
    d->shape_[size_t(k)] = static_cast<int>(e);
  }
  const uint32_t classes = field<uint32_t>(h, 28);
  const uint64_t count = field<uint64_t>(h, 32), labels_at = field<uint64_t>(h, 40);
  d->data_offset_ = field<uint64_t>(h, 48);
  const uint64_t size = field<uint64_t>(h, 56);
  const uint64_t C = uint64_t(d->shape_[0]);
  const uint64_t sample = sample_numel(d->shape_) * elem_size(d->type_);
  if (classes < 1 || classes > (1u << 24)) throw std::runtime_error(path + ": " + std::to_string(classes) + " classes");
  if (count < 1 || count > (uint64_t(1) << 40) || size != file_size || labels_at < 96 + 8 * C ||
      labels_at > file_size || count * 4 > file_size - labels_at || d->data_offset_ < labels_at + count * 4 ||
      d->data_offset_ > file_size || (file_size - d->data_offset_) / sample != count ||
      (file_size - d->data_offset_) % sample != 0)
    throw std::runtime_error(path + ": the header's sizes do not match the file's " + std::to_string(file_size) +
                             " bytes (a cut or foreign file)");
  static const char hex[] = "0123456789abcdef";
  for (size_t k = 64; k < 96; ++k) {
    d->fingerprint_ += hex[h[k] >> 4];
    d->fingerprint_ += hex[h[k] & 15];
  }
  std::vector<float> stats(2 * C);
  pread_all(d->fd_, stats.data(), stats.size() * 4, 96, path);
  d->classes_ = static_cast<int>(classes);
  d->labels_.resize(count);
  pread_all(d->fd_, d->labels_.data(), count * 4, labels_at, path);
  for (size_t i = 0; i < count; ++i)
    if (d->labels_[i] < 0 || d->labels_[i] >= d->classes_)
      throw std::runtime_error(path + ": label " + std::to_string(d->labels_[i]) + " at index " + std::to_string(i) +
                      " is outside [0, " + std::to_string(classes) + ")");
  if (d->type_ == ElemType::U8) {
    for (float v : stats)
      if (!std::isfinite(v)) throw std::runtime_error(path + ": its normalisation holds a value that is not finite");
    Normalize n;
    n.mean.assign(stats.begin(), stats.begin() + int64_t(C));
    n.stddev.assign(stats.begin() + int64_t(C), stats.end());
    try {
      channel_luts(n, d->shape_[0], d->lut_);
    } catch (const std::exception& e) {
      throw std::runtime_error(path + ": its normalisation: " + e.what());
    }
  }
  ::posix_fadvise(d->fd_, 0, 0, POSIX_FADV_RANDOM);
  return d;
}

ArrayFileDataset::~ArrayFileDataset() {
  if (fd_ >= 0) ::close(fd_);
}

void ArrayFileDataset::get(size_t i, float* out, int32_t* label) const {
  if (i >= labels_.size())
    throw std::out_of_range("ArrayFileDataset: index " + std::to_string(i) + " >= size " + std::to_string(labels_.size()));
  const size_t numel = sample_numel(shape_);
  const uint64_t at = data_offset_ + uint64_t(i) * numel * elem_size(type_);
  if (type_ == ElemType::F32) {
    pread_all(fd_, out, numel * 4, at, path_);
  } else {
    unsigned char buf[kChunk];
    const size_t plane = size_t(shape_[1]) * size_t(shape_[2]);
    for (size_t done = 0; done < numel;) {
      const size_t n = std::min(kChunk, numel - done);
      pread_all(fd_, buf, n, at + done, path_);
      for (size_t k = 0; k < n; ++k) out[done + k] = lut_[((done + k) / plane) * 256 + buf[k]];
      done += n;
    }
  }
  *label = labels_[i];
}

float ArrayFileDataset::fill_value(int c) const {
  return lut_.empty() ? 0.0f : lut_[size_t(std::clamp(c, 0, shape_[0] - 1)) * 256];
}

size_t ArrayFileDataset::resident_bytes() const {
  return labels_.capacity() * 4 + lut_.capacity() * 4 + path_.capacity() + note_.capacity();
}

size_t ArrayFileDataset::transient_bytes() const {
  return type_ == ElemType::U8 ? std::min(kChunk, sample_numel(shape_)) : 0;
}

}  // namespace memfit::data
