// memfit batch loader: turns a Dataset into batches of its named tensors
// (dataset.hpp: an image [N, C, H, W] f32 and labels [N] i32, or tokens and
// targets), delivered as views of its prefetch ring (next_batch(), which
// the trainer feeds to the executor) or copied into buffers the caller owns.
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
  // Augmentations, for image datasets only (Dataset::is_image()):
  int crop_padding = 0;    // > 0: pad by this many fill pixels, crop back to H x W at random
  bool hflip = false;      // random horizontal flip with probability 1/2
  // Batches decoded ahead by a background thread into a ring of this many
  // slots; 0 decodes synchronously inside next(), straight into the caller's
  // buffers.
  int prefetch = 2;
  int decode_threads = 1;  // threads decoding one batch (OpenMP); image folders gain
  // Data parallelism: the epoch's order is read in global batches of
  // batch_size * ranks samples, of which this loader delivers rows
  // [rank * batch_size, (rank + 1) * batch_size): the ranks' shares are
  // disjoint and together are the batch one loader of batch_size * ranks
  // would deliver. Positions count the global batches' samples, the same on
  // every rank. Needs drop_last with ranks > 1 (every rank gets a full share).
  size_t ranks = 1;
  size_t rank = 0;
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

  // Tensors per sample, at most.
  static constexpr size_t kMaxTensors = 16;

  // One batch: its rows and, per tensor of the dataset (tensors()), its
  // batch_size * sample_bytes() bytes.
  struct Batch {
    size_t n = 0;
    std::vector<const void*> data;
  };

  // The next batch as a view of the ring slot it was decoded into, valid
  // until the next call of next_batch(), next() or seek(); returns its
  // number of rows n. Rows n..batch_size-1 of a partial last batch hold
  // each tensor's pad value (inputs 0, labels -1). Returns 0 with an empty
  // view at the end of an epoch; the call after that starts the next epoch.
  // Errors from the dataset (a corrupt file) are rethrown at the batch they
  // belong to, and again on every later call until seek(). Never allocates.
  // Needs prefetch >= 1 (std::logic_error otherwise).
  const Batch& next_batch();
  // The same batch copied into caller buffers, out[k] for tensors()[k]
  // (with prefetch 0, decoded straight into them).
  size_t next(void* const* out);
  // Image datasets: x (batch_size*C*H*W floats) and y (batch_size labels).
  size_t next(float* x, int32_t* y);

  Position position() const { return pos_; }
  // Continue from p as if the batches before it had been read: the same
  // batches follow as in the original run. p.sample <= epoch_size().
  void seek(Position p);

  size_t epoch_size() const { return epoch_len_; }  // samples delivered per epoch
  size_t batches_per_epoch() const;
  size_t batch_size() const { return opt_.batch_size; }
  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  // Image datasets: C, H, W (std::logic_error otherwise).
  SampleShape sample_shape() const;
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
    std::byte* t[kMaxTensors] = {};  // per tensor, batch_size rows
    size_t n = 0;
    Position after;
    std::exception_ptr error;
  };

  size_t produce(Position& p, std::byte* const* out);
  void load_sample(uint32_t idx, uint64_t epoch, std::byte* const* rows, float* scratch);
  void worker_loop(Position start);
  void start_worker(Position start);
  void stop_worker();
  void release_held();

  const Dataset& ds_;
  LoaderOptions opt_;
  std::vector<TensorSpec> tensors_;
  std::vector<size_t> sample_bytes_;  // per tensor
  bool image_ = false;
  SampleShape shape_{};  // image datasets
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
  std::vector<std::byte> ring_;
  std::vector<Slot> slots_;
  bool held_ = false;  // next_batch() lent the head slot out
  Batch view_;
  std::mutex mu_;
  std::condition_variable not_full_, not_empty_;
  size_t head_ = 0, filled_ = 0;
  bool stop_ = false;
  std::thread worker_;

  LoaderMemory memory_;
};

}  // namespace memfit::data
