// The processes of one data-parallel job. Started by an MPI launcher (the
// command tells, from its environment: Launch) this is MPI_COMM_WORLD;
// otherwise, or in a build without MPI, a single process whose collectives
// are no-ops. Every
// collective is called by every rank in the same order, from the main
// thread only. MPI's default error handler stays: when a rank dies, the
// runtime ends the job (the others do not wait for it).
//
// The collectives work in place on the caller's memory, in pieces of at
// most kPieceBytes, so whatever the MPI library allocates for one call is
// bounded by that and counted in the plan (comm_scratch_bytes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace memfit::dist {

// Bytes one collective call moves at most.
constexpr size_t kPieceBytes = size_t(4) << 20;

// What the MPI library may hold for one in-place collective of a piece, on
// top of the caller's buffers: a reduction's temporary copy and a receive
// buffer of the piece.
constexpr size_t comm_scratch_bytes(int ranks) { return ranks > 1 ? 2 * kPieceBytes : 0; }

// How this process was started, as the command read it from its
// environment (src/cli/environment.cpp): by an MPI launcher or not, and the
// job's size the launcher announced (0 when it announced none).
struct Launch {
  bool by_mpi = false;
  int announced_size = 0;
};

class Comm {
 public:
  // The job this process belongs to, made by the command's call of start()
  // (MPI_Init when `how` says an MPI launcher started it), before any other
  // thread starts. Throws std::logic_error when the job was already made
  // with another Launch, and std::runtime_error when several ranks were
  // launched on a build without MPI.
  static Comm& start(const Launch& how);
  // The job made by start(); a single process when nothing started one (a
  // library caller, a test).
  static Comm& world();
  // True when this build links MPI.
  static bool built_with_mpi();

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The ranks on this machine (sharing its memory), this one included.
  int local_size() const { return local_size_; }
  bool distributed() const { return size_ > 1; }
  // "rank 1 of 2 on host" for messages.
  std::string describe() const;

  // Element-wise sums, in place, the result on every rank.
  void allreduce_sum(float* p, size_t n);
  void allreduce_sum(double* p, size_t n);
  // The largest of every rank's value.
  int64_t allreduce_max(int64_t v);
  // Sum into root's p (in place there; p unchanged elsewhere).
  void reduce_sum(float* p, size_t n, int root);
  // root's bytes to every rank.
  void broadcast(void* p, size_t bytes, int root);

  // Nonblocking: one reduction of at most kPieceBytes in flight at a time
  // (so MPI's scratch stays what comm_scratch_bytes counts). start_*
  // returns at once; p must not be touched until progress() returned true
  // or wait() returned. Every rank starts the same reductions in the same
  // order (when does not matter).
  void start_allreduce_sum(float* p, size_t n);
  void start_reduce_sum(float* p, size_t n, int root);
  // Lets the reduction in flight advance (MPI progresses a nonblocking
  // collective only inside MPI calls); true when none is in flight.
  bool progress();
  // Until the reduction in flight, if any, is done.
  void wait();
  // Every rank's value, by rank.
  std::vector<uint64_t> allgather(uint64_t v);
  void barrier();
  // Ends every rank of the job (a fatal error on this one).
  [[noreturn]] void abort(int code);

  // MPI_Finalize at a clean exit; a no-op for a single process.
  void finalize();

 private:
  explicit Comm(const Launch& how);
  int rank_ = 0, size_ = 1, local_size_ = 1;
  bool mpi_ = false;
  bool in_flight_ = false;
  std::string host_;
};

}  // namespace memfit::dist
