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

void validate(const Dataset& ds, const LoaderOptions& opt) {
  if (opt.batch_size == 0) throw std::invalid_argument("loader: batch size must be at least 1");
  if (ds.size() == 0) throw std::invalid_argument("loader: the dataset is empty");
  if (ds.size() > std::numeric_limits<uint32_t>::max())
    throw std::invalid_argument("loader: datasets of more than 2^32-1 samples are not supported");
  if (opt.drop_last && ds.size() < opt.batch_size)
    throw std::invalid_argument("loader: the dataset has " + std::to_string(ds.size()) +
                                " samples, not one full batch of " +
                                std::to_string(opt.batch_size) +
                                " (lower the batch size or keep the partial batch)");
  const SampleShape s = ds.sample_shape();
  if (s[0] <= 0 || s[1] <= 0 || s[2] <= 0)
    throw std::invalid_argument("loader: the dataset's sample shape is not positive");
  if (opt.crop_padding < 0 || opt.crop_padding > std::min(s[1], s[2]))
    throw std::invalid_argument("loader: crop padding " + std::to_string(opt.crop_padding) +
                                " must be in [0, " + std::to_string(std::min(s[1], s[2])) + "]");
  if (opt.prefetch < 0 || opt.prefetch > 64)
    throw std::invalid_argument("loader: prefetch must be in [0, 64] batches");
  if (opt.decode_threads < 1 || opt.decode_threads > 1024)
    throw std::invalid_argument("loader: decode threads must be in [1, 1024]");
}

}  // namespace

LoaderMemory Loader::plan_memory(const Dataset& ds, const LoaderOptions& opt) {
  validate(ds, opt);
  const size_t sf = sample_numel(ds.sample_shape());
  const size_t B = opt.batch_size, K = size_t(opt.prefetch), T = size_t(opt.decode_threads);
  const bool augment = opt.crop_padding > 0 || opt.hflip;
  LoaderMemory m;
  m.ring = K * B * (sf * sizeof(float) + sizeof(int32_t)) + K * sizeof(Slot);
  m.order = opt.shuffle ? ds.size() * sizeof(uint32_t) : 0;
  m.scratch = (augment ? T * sf * sizeof(float) : 0) + B * sizeof(std::exception_ptr) +
              size_t(ds.sample_shape()[0]) * sizeof(float);
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
  shape_ = ds.sample_shape();
  sample_floats_ = sample_numel(shape_);
  const size_t B = opt.batch_size, K = size_t(opt.prefetch), T = size_t(opt.decode_threads);
  epoch_len_ = opt.drop_last ? ds.size() / B * B : ds.size();
  augment_ = opt.crop_padding > 0 || opt.hflip;
  fill_.resize(size_t(shape_[0]));
  for (int c = 0; c < shape_[0]; ++c) fill_[size_t(c)] = ds.fill_value(c);
  if (opt.shuffle) order_.resize(ds.size());
  if (augment_) scratch_.resize(T * sample_floats_);
  row_errors_.resize(B);
  if (K > 0) {
    ring_x_.resize(K * B * sample_floats_);
    ring_y_.resize(K * B);
    slots_.resize(K);
    for (size_t k = 0; k < K; ++k) {
      slots_[k].x = ring_x_.data() + k * B * sample_floats_;
      slots_[k].y = ring_y_.data() + k * B;
    }
  }
  memory_.ring = ring_x_.capacity() * sizeof(float) + ring_y_.capacity() * sizeof(int32_t) +
                 slots_.capacity() * sizeof(Slot);
  memory_.order = order_.capacity() * sizeof(uint32_t);
  memory_.scratch = scratch_.capacity() * sizeof(float) +
                    row_errors_.capacity() * sizeof(std::exception_ptr) +
                    fill_.capacity() * sizeof(float);
  memory_.dataset_resident = ds.resident_bytes();
  memory_.dataset_transient = ds.transient_bytes() * T;
  if (K > 0) start_worker(pos_);
}

Loader::~Loader() { stop_worker(); }

size_t Loader::batches_per_epoch() const {
  return (epoch_len_ + opt_.batch_size - 1) / opt_.batch_size;
}

void Loader::load_sample(uint32_t idx, uint64_t epoch, float* dst, int32_t* label,
                         float* scratch) {
  if (!augment_) {
    ds_.get(idx, dst, label);
    return;
  }
  ds_.get(idx, scratch, label);
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

size_t Loader::produce(Position& p, float* x, int32_t* y) {
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
  const size_t n = std::min<size_t>(B, epoch_len_ - size_t(p.sample));
  const size_t first = size_t(p.sample);
  const uint64_t epoch = p.epoch;
  auto index_of = [&](size_t k) {
    return opt_.shuffle ? order_[first + k] : uint32_t(first + k);
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
        load_sample(index_of(size_t(k)), epoch, x + size_t(k) * sample_floats_, y + k,
                    augment_ ? scratch_.data() + t * sample_floats_ : nullptr);
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
    for (size_t k = 0; k < n; ++k)
      load_sample(index_of(k), epoch, x + k * sample_floats_, y + k, scratch_.data());
  }
  if (n < B) {
    std::fill(x + n * sample_floats_, x + B * sample_floats_, 0.0f);
    std::fill(y + n, y + B, int32_t(-1));
  }
  p.sample += n;
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
      s.n = produce(p, s.x, s.y);
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

size_t Loader::next(float* x, int32_t* y) {
  if (slots_.empty()) {
    Position p = pos_;
    const size_t n = produce(p, x, y);
    pos_ = p;
    return n;
  }
  std::unique_lock<std::mutex> lk(mu_);
  not_empty_.wait(lk, [&] { return filled_ > 0; });
  Slot& s = slots_[head_];
  lk.unlock();
  if (s.error) std::rethrow_exception(s.error);  // slot stays: later calls rethrow too
  const size_t n = s.n;
  if (n > 0) {
    const size_t B = opt_.batch_size;
    std::memcpy(x, s.x, B * sample_floats_ * sizeof(float));
    std::memcpy(y, s.y, B * sizeof(int32_t));
  }
  pos_ = s.after;
  lk.lock();
  head_ = (head_ + 1) % slots_.size();
  --filled_;
  lk.unlock();
  not_full_.notify_one();
  return n;
}

void Loader::seek(Position p) {
  if (p.sample > epoch_len_)
    throw std::invalid_argument("loader: cannot seek to sample " + std::to_string(p.sample) +
                                " of an epoch of " + std::to_string(epoch_len_) + " samples");
  stop_worker();
  pos_ = p;
  if (!slots_.empty()) start_worker(p);
}

}  // namespace memfit::data
