// memfit batch loader: turns a Dataset into float NCHW + int32 label batches
// written into buffers the caller owns (the engine's planned input buffers).
//
// Determinism: the sample order of epoch e is a pure function of
// (seed, e, dataset size): Fisher-Yates over 0..N-1 where step i swaps with
// j = draw_below(stream_key(seed, name_hash("data.shuffle"), e), i, i + 1),
// i = N-1 down to 1 (data/draw.hpp).
// Augmentations of dataset sample i in epoch e, with
// k = stream_key(seed, name_hash("data.augment"), e) and P the crop padding:
// dx = draw_below(k, 3i, 2P+1), dy = draw_below(k, 3i+1, 2P+1),
// flip = draw_below(k, 3i+2, 2) == 1. So a run resumes exactly from a
// Position, whatever the threading or prefetch depth. One thread calls
// next()/seek(); the loader runs its own prefetch thread.
//
// Memory: every buffer is allocated in the constructor (or on seek, which
// only restarts the thread); next() never allocates. plan_memory() gives the
// same figures before construction so the planner can count them.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "data/dataset.hpp"

namespace memfit::data {

struct LoaderOptions {
  size_t batch_size = 0;   // N of the batch buffers; required
  bool shuffle = true;     // false: dataset order every epoch
  uint64_t seed = 0;
  // true: every batch is full and the last partial one of an epoch is
  // skipped; false: the last batch has fewer rows (see next()).
  bool drop_last = false;
  int crop_padding = 0;    // > 0: pad by this many fill pixels, crop back to H x W at random
  bool hflip = false;      // random horizontal flip with probability 1/2
  // Batches decoded ahead by a background thread into a ring of this many
  // slots; 0 decodes synchronously inside next(), straight into the caller's
  // buffers.
  int prefetch = 2;
  int decode_threads = 1;  // threads decoding one batch (OpenMP); image folders gain
};

// Where a loader is: `sample` samples of epoch `epoch` have been delivered.
// After the last batch of an epoch it is {e, epoch_size()}; the next call to
// next() then returns 0 and moves to {e + 1, 0}.
struct Position {
  uint64_t epoch = 0;
  uint64_t sample = 0;
  bool operator==(const Position&) const = default;
};

// Bytes of the data pipeline, by owner.
struct LoaderMemory {
  size_t ring = 0;               // prefetched batches
  size_t order = 0;              // the epoch's permutation
  size_t scratch = 0;            // augmentation and error slots
  size_t dataset_resident = 0;   // the dataset's own memory
  size_t dataset_transient = 0;  // decode buffers of the dataset, per decoding thread
  size_t pipeline() const { return ring + order + scratch; }
  size_t total() const { return pipeline() + dataset_resident + dataset_transient; }
};

class Loader {
 public:
  // Does not own the dataset, which must outlive the loader. Throws
  // std::invalid_argument for bad options (batch size 0, no full batch with
  // drop_last, padding too large) and for an empty dataset.
  Loader(const Dataset& ds, const LoaderOptions& opt);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // What a loader with these options would hold, without building it.
  static LoaderMemory plan_memory(const Dataset& ds, const LoaderOptions& opt);

  // Writes the next batch into x (batch_size*C*H*W floats) and y (batch_size
  // labels) and returns its number of rows n. Rows n..batch_size-1 of a
  // partial last batch get x = 0 and y = -1. Returns 0, touching nothing, at
  // the end of an epoch; the call after that starts the next epoch. Errors
  // from the dataset (a corrupt file) are rethrown at the batch they belong
  // to, and again on every later call until seek(). Never allocates.
  size_t next(float* x, int32_t* y);

  Position position() const { return pos_; }
  // Continue from p as if the batches before it had been read: the same
  // batches follow as in the original run. p.sample <= epoch_size().
  void seek(Position p);

  size_t epoch_size() const { return epoch_len_; }  // samples delivered per epoch
  size_t batches_per_epoch() const;
  size_t batch_size() const { return opt_.batch_size; }
  SampleShape sample_shape() const { return shape_; }
  const LoaderOptions& options() const { return opt_; }

  // Bytes the loader allocated itself (ring + order + scratch).
  size_t pipeline_bytes() const { return memory_.pipeline(); }
  // Everything the data pipeline holds, the dataset included.
  size_t total_bytes() const { return memory_.total(); }
  const LoaderMemory& memory() const { return memory_; }

  // The order of epoch `epoch` for a dataset of n samples (out holds n).
  static void epoch_order(uint64_t seed, uint64_t epoch, size_t n, uint32_t* out);

 private:
  struct Slot {
    float* x = nullptr;
    int32_t* y = nullptr;
    size_t n = 0;
    Position after;
    std::exception_ptr error;
  };

  size_t produce(Position& p, float* x, int32_t* y);
  void load_sample(uint32_t idx, uint64_t epoch, float* dst, int32_t* label, float* scratch);
  void worker_loop(Position start);
  void start_worker(Position start);
  void stop_worker();

  const Dataset& ds_;
  LoaderOptions opt_;
  SampleShape shape_;
  size_t sample_floats_ = 0;
  size_t epoch_len_ = 0;
  bool augment_ = false;
  std::vector<float> fill_;  // per channel

  // Producer state (the worker thread's while it runs).
  std::vector<uint32_t> order_;
  uint64_t order_epoch_ = 0;
  bool order_valid_ = false;
  std::vector<float> scratch_;  // decode_threads samples, for augmentation
  std::vector<std::exception_ptr> row_errors_;

  // Consumer state.
  Position pos_;

  // Prefetch ring.
  std::vector<float> ring_x_;
  std::vector<int32_t> ring_y_;
  std::vector<Slot> slots_;
  std::mutex mu_;
  std::condition_variable not_full_, not_empty_;
  size_t head_ = 0, filled_ = 0;
  bool stop_ = false;
  std::thread worker_;

  LoaderMemory memory_;
};

}  // namespace memfit::data
