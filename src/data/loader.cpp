#include "data/loader.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "data/draw.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace memfit::data {
namespace {

constexpr size_t kMaxTensors = Loader::kMaxTensors;

void validate(const Dataset& ds, const LoaderOptions& opt) {
  if (opt.batch_size == 0) throw std::invalid_argument("loader: batch size must be at least 1");
  if (ds.size() == 0) throw std::invalid_argument("loader: the dataset is empty");
  if (ds.size() > std::numeric_limits<uint32_t>::max())
    throw std::invalid_argument("loader: datasets of more than 2^32-1 samples are not supported");
  if (opt.ranks == 0 || opt.rank >= opt.ranks)
    throw std::invalid_argument("loader: rank " + std::to_string(opt.rank) + " of " + std::to_string(opt.ranks));
  if (opt.ranks > 1 && !opt.drop_last)
    throw std::invalid_argument("loader: ranks share full global batches only (drop_last)");
  if (opt.drop_last && ds.size() < opt.batch_size * opt.ranks)
    throw std::invalid_argument("loader: the dataset has " + std::to_string(ds.size()) +
                                " samples, not one full batch of " +
                                std::to_string(opt.batch_size * opt.ranks) +
                                (opt.ranks > 1 ? " (" + std::to_string(opt.batch_size) + " per rank x " +
                                                     std::to_string(opt.ranks) + " ranks)"
                                               : std::string()) +
                                " (lower the batch size or keep the partial batch)");
  const std::vector<TensorSpec> ts = ds.tensors();
  if (ts.empty() || ts.size() > kMaxTensors)
    throw std::invalid_argument("loader: a sample must have 1 to " + std::to_string(kMaxTensors) + " tensors, got " +
                                std::to_string(ts.size()));
  for (const TensorSpec& t : ts) {
    if (t.dtype != DType::f32 && t.dtype != DType::i32)
      throw std::invalid_argument("loader: tensor " + describe(t) + " is neither f32 nor i32");
    for (int64_t d : t.shape)
      if (d <= 0) throw std::invalid_argument("loader: the dataset's tensor " + describe(t) + " has a non-positive size");
  }
  const bool augment = opt.crop_padding != 0 || opt.hflip;
  if (augment && !ds.is_image())
    throw std::invalid_argument("loader: random crops and flips apply to images; this dataset holds " + describe(ts));
  if (ds.is_image()) {
    const SampleShape s = ds.sample_shape();
    if (opt.crop_padding < 0 || opt.crop_padding > std::min(s[1], s[2]))
      throw std::invalid_argument("loader: crop padding " + std::to_string(opt.crop_padding) +
                                  " must be in [0, " + std::to_string(std::min(s[1], s[2])) + "]");
  }
  if (opt.prefetch < 0 || opt.prefetch > 64)
    throw std::invalid_argument("loader: prefetch must be in [0, 64] batches");
  if (opt.decode_threads < 1 || opt.decode_threads > 1024)
    throw std::invalid_argument("loader: decode threads must be in [1, 1024]");
}

size_t bytes_per_sample(const std::vector<TensorSpec>& ts) {
  size_t b = 0;
  for (const TensorSpec& t : ts) b += t.sample_bytes();
  return b;
}

// Rows [from, to) of a batch tensor set to its pad value.
void pad_rows(const TensorSpec& t, std::byte* base, size_t from, size_t to) {
  const size_t per = static_cast<size_t>(numel(t.shape));
  if (t.dtype == DType::f32) {
    float* p = reinterpret_cast<float*>(base);
    std::fill(p + from * per, p + to * per, static_cast<float>(t.pad));
  } else {
    int32_t* p = reinterpret_cast<int32_t*>(base);
    std::fill(p + from * per, p + to * per, static_cast<int32_t>(t.pad));
  }
}

}  // namespace

LoaderMemory Loader::plan_memory(const Dataset& ds, const LoaderOptions& opt) {
  validate(ds, opt);
  const std::vector<TensorSpec> ts = ds.tensors();
  const size_t B = opt.batch_size, K = size_t(opt.prefetch), T = size_t(opt.decode_threads);
  const bool augment = opt.crop_padding > 0 || opt.hflip;
  const size_t sf = ds.is_image() ? sample_numel(ds.sample_shape()) : 0;
  const size_t channels = ds.is_image() ? size_t(ds.sample_shape()[0]) : 0;
  LoaderMemory m;
  m.ring = K * B * bytes_per_sample(ts) + K * sizeof(Slot);
  m.order = opt.shuffle ? ds.size() * sizeof(uint32_t) : 0;
  m.scratch = (augment ? T * sf * sizeof(float) : 0) + B * sizeof(std::exception_ptr) + channels * sizeof(float) +
              ts.size() * (sizeof(TensorSpec) + sizeof(size_t) + sizeof(const void*));
  m.dataset_resident = ds.resident_bytes();
  m.dataset_transient = ds.transient_bytes() * T;
  return m;
}

void Loader::epoch_order(uint64_t seed, uint64_t epoch, size_t n, uint32_t* out) {
  for (size_t i = 0; i < n; ++i) out[i] = uint32_t(i);
  const uint64_t key = rng::stream_key(seed, detail::kShuffleStream, epoch);
  for (size_t i = n; i-- > 1;) std::swap(out[i], out[detail::draw_below(key, i, i + 1)]);
}

Loader::Loader(const Dataset& ds, const LoaderOptions& opt) : ds_(ds), opt_(opt) {
  validate(ds, opt);
  const std::vector<TensorSpec> ts = ds.tensors();
  tensors_.assign(ts.begin(), ts.end());  // capacity = size: what plan_memory() counts
  sample_bytes_.reserve(ts.size());
  for (const TensorSpec& t : tensors_) sample_bytes_.push_back(t.sample_bytes());
  image_ = ds.is_image();
  if (image_) {
    shape_ = ds.sample_shape();
    sample_floats_ = sample_numel(shape_);
  }
  const size_t B = opt.batch_size, K = size_t(opt.prefetch), T = size_t(opt.decode_threads);
  const size_t G = B * opt.ranks;  // one global batch
  epoch_len_ = opt.drop_last ? ds.size() / G * G : ds.size();
  augment_ = opt.crop_padding > 0 || opt.hflip;
  if (image_) {
    fill_.resize(size_t(shape_[0]));
    for (int c = 0; c < shape_[0]; ++c) fill_[size_t(c)] = ds.fill_value(c);
  }
  if (opt.shuffle) order_.resize(ds.size());
  if (augment_) scratch_.resize(T * sample_floats_);
  row_errors_.resize(B);
  view_.data.reserve(tensors_.size());
  if (K > 0) {
    const size_t per_slot = B * bytes_per_sample(tensors_);
    ring_.resize(K * per_slot);
    slots_.resize(K);
    for (size_t k = 0; k < K; ++k) {
      std::byte* p = ring_.data() + k * per_slot;
      for (size_t t = 0; t < tensors_.size(); ++t) {
        slots_[k].t[t] = p;
        p += B * sample_bytes_[t];
      }
    }
  }
  memory_.ring = ring_.capacity() + slots_.capacity() * sizeof(Slot);
  memory_.order = order_.capacity() * sizeof(uint32_t);
  memory_.scratch = scratch_.capacity() * sizeof(float) +
                    row_errors_.capacity() * sizeof(std::exception_ptr) +
                    fill_.capacity() * sizeof(float) + tensors_.capacity() * sizeof(TensorSpec) +
                    sample_bytes_.capacity() * sizeof(size_t) + view_.data.capacity() * sizeof(const void*);
  memory_.dataset_resident = ds.resident_bytes();
  memory_.dataset_transient = ds.transient_bytes() * T;
  if (K > 0) start_worker(pos_);
}

Loader::~Loader() { stop_worker(); }

size_t Loader::batches_per_epoch() const {
  const size_t G = opt_.batch_size * opt_.ranks;
  return (epoch_len_ + G - 1) / G;
}

SampleShape Loader::sample_shape() const {
  if (!image_) throw std::logic_error("loader: the dataset holds " + describe(tensors_) + ", not images");
  return shape_;
}

void Loader::load_sample(uint32_t idx, uint64_t epoch, std::byte* const* rows, float* scratch) {
  if (!augment_) {
    void* out[kMaxTensors];
    for (size_t t = 0; t < tensors_.size(); ++t) out[t] = rows[t];
    ds_.get_tensors_at(idx, epoch, out);
    return;
  }
  float* dst = reinterpret_cast<float*>(rows[0]);
  // The sample of this epoch (a dataset whose samples vary with the epoch,
  // such as a torch Dataset's items read per epoch, overrides get_tensors_at;
  // the others answer with get()).
  void* sample[2] = {scratch, rows[1]};
  ds_.get_tensors_at(idx, epoch, sample);
  const int C = shape_[0], H = shape_[1], W = shape_[2], P = opt_.crop_padding;
  const uint64_t key = rng::stream_key(opt_.seed, detail::kAugmentStream, epoch);
  const uint64_t span = uint64_t(2 * P + 1);
  const int dx = P > 0 ? int(detail::draw_below(key, 3 * uint64_t(idx), span)) : P;
  const int dy = P > 0 ? int(detail::draw_below(key, 3 * uint64_t(idx) + 1, span)) : P;
  const bool flip = opt_.hflip && detail::draw_below(key, 3 * uint64_t(idx) + 2, 2) == 1;
  // Output (y, x) shows padded pixel (y + dy, x' + dx) of the crop, where x' is
  // x mirrored when flipped: source pixel (y + dy - P, x' + dx - P).
  for (int c = 0; c < C; ++c) {
    const float fill = fill_[size_t(c)];
    const float* src = scratch + size_t(c) * H * W;
    float* out = dst + size_t(c) * H * W;
    for (int y = 0; y < H; ++y) {
      const int sy = y + dy - P;
      float* orow = out + size_t(y) * W;
      if (sy < 0 || sy >= H) {
        std::fill(orow, orow + W, fill);
        continue;
      }
      const float* srow = src + size_t(sy) * W;
      for (int x = 0; x < W; ++x) {
        const int sx = (flip ? W - 1 - x : x) + dx - P;
        orow[x] = (sx >= 0 && sx < W) ? srow[sx] : fill;
      }
    }
  }
}

size_t Loader::produce(Position& p, std::byte* const* out) {
  if (p.sample >= epoch_len_) {
    p = Position{p.epoch + 1, 0};
    return 0;
  }
  if (opt_.shuffle && (!order_valid_ || order_epoch_ != p.epoch)) {
    epoch_order(opt_.seed, p.epoch, order_.size(), order_.data());
    order_epoch_ = p.epoch;
    order_valid_ = true;
  }
  const size_t B = opt_.batch_size;
  // This rank's share of the global batch that starts at p.sample (all of
  // it with one rank; drop_last makes every share full with more).
  const size_t global = std::min<size_t>(B * opt_.ranks, epoch_len_ - size_t(p.sample));
  const size_t first = size_t(p.sample) + opt_.rank * B;
  const size_t n = std::min<size_t>(B, global);
  const uint64_t epoch = p.epoch;
  const size_t nt = tensors_.size();
  auto index_of = [&](size_t k) {
    return opt_.shuffle ? order_[first + k] : uint32_t(first + k);
  };
  // Row k of every tensor.
  auto load_row = [&](size_t k, float* scratch) {
    std::byte* rows[kMaxTensors];
    for (size_t t = 0; t < nt; ++t) rows[t] = out[t] + k * sample_bytes_[t];
    load_sample(index_of(k), epoch, rows, scratch);
  };
  if (opt_.decode_threads > 1 && n > 1) {
    bool failed = false;
#ifdef _OPENMP
#pragma omp parallel for num_threads(opt_.decode_threads) schedule(dynamic, 1)
#endif
    for (long k = 0; k < long(n); ++k) {
#ifdef _OPENMP
      const size_t t = size_t(omp_get_thread_num());
#else
      const size_t t = 0;
#endif
      try {
        load_row(size_t(k), augment_ ? scratch_.data() + t * sample_floats_ : nullptr);
      } catch (...) {
        row_errors_[size_t(k)] = std::current_exception();
      }
    }
    // Report the first failing row, as the sequential path would.
    std::exception_ptr first_error;
    for (size_t k = 0; k < n; ++k)
      if (row_errors_[k]) {
        if (!first_error) first_error = row_errors_[k];
        row_errors_[k] = nullptr;
        failed = true;
      }
    if (failed) std::rethrow_exception(first_error);
  } else {
    for (size_t k = 0; k < n; ++k) load_row(k, scratch_.data());
  }
  if (n < B)
    for (size_t t = 0; t < nt; ++t) pad_rows(tensors_[t], out[t], n, B);
  p.sample += global;
  return n;
}

// ---- prefetch ring ----------------------------------------------------------

void Loader::worker_loop(Position p) {
  const size_t K = slots_.size();
  size_t tail = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      not_full_.wait(lk, [&] { return stop_ || filled_ < K; });
      if (stop_) return;
    }
    Slot& s = slots_[tail];
    s.error = nullptr;
    try {
      s.n = produce(p, s.t);
    } catch (...) {
      s.error = std::current_exception();
      s.n = 0;
    }
    s.after = p;
    const bool failed = s.error != nullptr;
    {
      std::lock_guard<std::mutex> lk(mu_);
      ++filled_;
    }
    not_empty_.notify_one();
    if (failed) return;  // the consumer rethrows; seek() restarts
    tail = (tail + 1) % K;
  }
}

void Loader::start_worker(Position start) {
  head_ = 0;
  filled_ = 0;
  stop_ = false;
  for (auto& s : slots_) s.error = nullptr;
  worker_ = std::thread([this, start] { worker_loop(start); });
}

void Loader::stop_worker() {
  if (!worker_.joinable()) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  not_full_.notify_all();
  worker_.join();
}

void Loader::release_held() {
  if (!held_) return;
  held_ = false;
  std::unique_lock<std::mutex> lk(mu_);
  head_ = (head_ + 1) % slots_.size();
  --filled_;
  lk.unlock();
  not_full_.notify_one();
}

const Loader::Batch& Loader::next_batch() {
  if (slots_.empty()) throw std::logic_error("loader: next_batch() needs a prefetch ring (prefetch >= 1)");
  release_held();
  std::unique_lock<std::mutex> lk(mu_);
  not_empty_.wait(lk, [&] { return filled_ > 0; });
  Slot& s = slots_[head_];
  lk.unlock();
  if (s.error) std::rethrow_exception(s.error);  // slot stays: later calls rethrow too
  held_ = true;
  pos_ = s.after;
  view_.n = s.n;
  view_.data.clear();
  if (s.n > 0)
    for (size_t t = 0; t < tensors_.size(); ++t) view_.data.push_back(s.t[t]);
  return view_;
}

size_t Loader::next(void* const* out) {
  if (slots_.empty()) {
    std::byte* o[kMaxTensors];
    for (size_t t = 0; t < tensors_.size(); ++t) o[t] = static_cast<std::byte*>(out[t]);
    Position p = pos_;
    const size_t n = produce(p, o);
    pos_ = p;
    return n;
  }
  const Batch& b = next_batch();
  for (size_t t = 0; t < b.data.size(); ++t) std::memcpy(out[t], b.data[t], opt_.batch_size * sample_bytes_[t]);
  release_held();
  return b.n;
}

size_t Loader::next(float* x, int32_t* y) {
  if (!image_) throw std::logic_error("loader: next(x, y) is for image datasets; this one holds " + describe(tensors_));
  void* out[2] = {x, y};
  return next(out);
}

void Loader::seek(Position p) {
  if (p.sample > epoch_len_)
    throw std::invalid_argument("loader: cannot seek to sample " + std::to_string(p.sample) +
                                " of an epoch of " + std::to_string(epoch_len_) + " samples");
  stop_worker();
  held_ = false;
  pos_ = p;
  if (!slots_.empty()) start_worker(p);
}

}  // namespace memfit::data
