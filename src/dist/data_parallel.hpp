// The collective half of a data-parallel step (several ranks, src/dist):
// between backward and the update the ranks' gradients are summed, after
// the update the parameters are made the same everywhere again.
//
// Batch normalisation normalises each rank's share by its own statistics
// (as PyTorch's DistributedDataParallel does without SyncBatchNorm); the
// running statistics are averaged over the ranks after every step, so they
// estimate the whole data's and are the same on every rank.
//
// Unsharded (--shard-optimizer off): every gradient is all-reduced, every
// rank runs the whole update, and the buffers come from rank 0 (after the
// average: an all-reduce need not give every rank the same bits).
// Sharded (ZeRO stage 1, the default): rank r owns a contiguous run of the
// parameters (shard_bounds) and holds only their optimizer state. Each
// owner receives the sum of its parameters' gradients (a reduce to it),
// updates them, and broadcasts them with the buffers between them. Both
// leave every rank with the same bytes: what a rank did not compute
// itself it received.
//
// Everything works in place on the executor's arenas in pieces
// (dist::kPieceBytes), so the only memory beyond the plan is what the MPI
// library holds for one piece (counted by the plan as comm_scratch_bytes).
// On a device whose memory the host cannot address (Device::
// host_addressable false) nothing here touches the arenas through a
// pointer: each collective works on a host copy of one piece at a time,
// read and written back through the executor (read_arena, write_arena),
// which costs one more piece of host memory, and the reductions wait for
// backward's end (no overlap). grad_reduce nodes (sharded gradients) call
// reduce_sum() from their kernel with the pointers the device's kernels
// hold.
//
// Overlap: the gradients are cut into buckets of at most one piece (whole
// gradients where they fit, a shard's gradients never with another's), each
// ready after the last backward node that writes or reads its bytes. With
// run_backward() the step's last micro-batch starts each bucket's reduction
// as soon as it is ready and backward is still running; one bucket is in
// flight at a time, advanced between the nodes, so the scratch stays one
// piece's. Backward makes the last layers' gradients first, so most of the
// exchange happens while the first layers' backward computes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dist/comm.hpp"
#include "kernels/kernel.hpp"
#include "memfit/runtime.hpp"

namespace memfit::train {

class DataParallel : public kernels::Collectives {
 public:
  // One rank (comm.size() == 1): every call is a no-op.
  DataParallel(Executor& ex, dist::Comm& comm, bool sharded);

  bool active() const { return comm_.distributed(); }
  bool sharded() const { return sharded_; }
  // The step's graph reduces the gradients itself (grad_reduce nodes:
  // sharded gradients, ZeRO stage 2); reduce_gradients() has nothing to do.
  // For grad_reduce (StepContext::comm).
  void reduce_sum(float* p, size_t n, int root) override;
  // Seconds spent in collectives inside the step's nodes (grad_reduce, and
  // starting and advancing the buckets during backward), since the start.
  double seconds_in_backward() const { return seconds_; }
  int rank() const { return comm_.rank(); }
  int ranks() const { return comm_.size(); }

  // Nodes [0, end) of the step (forward and backward; end: the update's
  // first node), reducing each gradient bucket while backward runs (the
  // step's last micro-batch). reduce_gradients() then finishes the rest.
  // One rank, or overlap off: just the nodes.
  void run_backward(size_t end, const kernels::StepContext& ctx);
  // After backward: the sum over ranks of each gradient, on every rank
  // (unsharded) or on its parameter's owner (sharded). The update divides
  // by the number of ranks (its grad_scale). After run_backward(), only the
  // buckets still to go (and the one in flight).
  void reduce_gradients();
  // Reduce while backward runs (default on).
  void set_overlap(bool on) { overlap_ = on && !staged_; }
  // Of the last step: the buckets whose reduction started before backward
  // ended, of all buckets.
  size_t buckets_overlapped() const { return overlapped_; }
  size_t buckets() const { return buckets_.size(); }
  // After the update: the buffers' mean over the ranks, then the owners'
  // parameters (sharded) or rank 0's buffers (unsharded) to every rank.
  void share_parameters();
  // The mean of every rank's v (a step's loss).
  double mean(double v);
  // The largest of the ranks' pending stop signals (0: none): every rank
  // stops at the same step.
  int any_stop(int signal);
  // Rank 0's parameters, buffers and (unsharded) optimizer state to every
  // rank, after rank 0 loaded a checkpoint.
  void broadcast_state();
  // Throws std::runtime_error if the ranks' parameters and buffers differ
  // (a hash of the parameter arena, compared across ranks); `when` names
  // the point ("end of epoch 2").
  void check_identical(const std::string& when);

  // Bytes this rank's gradient reduction and parameter broadcast move per
  // step (sent and received), for the plan and the bench.
  size_t bytes_per_step() const;

 private:
  struct Span {
    size_t begin = 0, end = 0;  // bytes in an arena
  };
  Executor& ex_;
  dist::Comm& comm_;
  bool sharded_ = false;
  bool graph_reduces_ = false;
  double seconds_ = 0.0;
  std::vector<Span> grads_, params_;  // per rank (sharded): its owned run
  struct Bucket {
    size_t begin, end;  // bytes in the gradient arena, at most one piece
    int root;           // sharded: the owner; -1: all-reduce
    size_t ready;       // the node after which nothing in backward touches it
  };
  std::vector<Bucket> buckets_;  // in start order: by ready node
  size_t next_ = 0;              // buckets_[next_...] not started this step
  size_t overlapped_ = 0;
  bool overlap_ = true;
  // The arenas are not host memory: collectives go through stage_.
  bool staged_ = false;
  std::vector<std::byte> stage_;
  // f(p, n) on bytes [begin, end) of arena a: in place on a host device;
  // else on a host copy, a piece at a time, written back if write_back.
  template <class F>
  void on_host(Arena a, size_t begin, size_t end, bool write_back, F&& f);
  void make_buckets();
  void start(const Bucket& b);
  struct Buffer {
    size_t offset, bytes;
    bool f32;  // averaged over the ranks (else only sent)
  };
  std::vector<Buffer> buffers_;
};

}  // namespace memfit::train
