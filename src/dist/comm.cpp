#include "dist/comm.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

#ifdef MEMFIT_HAVE_MPI
#include <mpi.h>
#endif

namespace memfit::dist {
namespace {

#ifdef MEMFIT_HAVE_MPI
void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    throw std::runtime_error(std::string("MPI ") + what + " failed: " + std::string(msg, static_cast<size_t>(len)));
  }
}

// Pieces of at most kPieceBytes of T.
template <class T, class F> void in_pieces(T* p, size_t n, F&& f) {
  const size_t step = kPieceBytes / sizeof(T);
  for (size_t i = 0; i < n; i += step) f(p + i, static_cast<int>(std::min(step, n - i)));
}
// The reduction in flight (Comm allows one; Comm::world() is the only Comm).
MPI_Request g_request = MPI_REQUEST_NULL;
#endif

}  // namespace

namespace {
// The Launch the job was made with: start()'s, or a single process's when
// world() came first.
Launch g_launch;
bool g_made = false;
}  // namespace

Comm& Comm::start(const Launch& how) {
  if (g_made && (how.by_mpi != g_launch.by_mpi || how.announced_size != g_launch.announced_size))
    throw std::logic_error("the job was made before Comm::start, as a single process");
  g_launch = how;
  return world();
}

Comm& Comm::world() {
  static Comm c(g_launch);
  g_made = true;
  return c;
}

bool Comm::built_with_mpi() {
#ifdef MEMFIT_HAVE_MPI
  return true;
#else
  return false;
#endif
}

Comm::Comm(const Launch& how) {
  char h[256] = {};
  ::gethostname(h, sizeof h - 1);
  host_ = h;
  if (!how.by_mpi) return;
#ifdef MEMFIT_HAVE_MPI
  int provided = 0;
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "init");
  mpi_ = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  MPI_Comm node;  // the ranks that share this one's memory
  check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node), "split by machine");
  MPI_Comm_size(node, &local_size_);
  MPI_Comm_free(&node);
#else
  // mpirun started a build without MPI: every process would train alone and
  // write the same files. Refuse instead.
  if (how.announced_size > 1)
    throw std::runtime_error("this memfit was built without MPI (libopenmpi-dev was missing at build time): "
                             "install it (make deps-run) and rebuild to train on several ranks");
#endif
}

std::string Comm::describe() const {
  return "rank " + std::to_string(rank_) + " of " + std::to_string(size_) + " on " + host_;
}

void Comm::allreduce_sum(float* p, size_t n) {
  if (size_ == 1) return;
#ifdef MEMFIT_HAVE_MPI
  in_pieces(p, n, [](float* q, int k) {
    check(MPI_Allreduce(MPI_IN_PLACE, q, k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "all-reduce");
  });
#else
  (void)p, (void)n;
#endif
}

void Comm::allreduce_sum(double* p, size_t n) {
  if (size_ == 1) return;
#ifdef MEMFIT_HAVE_MPI
  in_pieces(p, n, [](double* q, int k) {
    check(MPI_Allreduce(MPI_IN_PLACE, q, k, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), "all-reduce");
  });
#else
  (void)p, (void)n;
#endif
}

int64_t Comm::allreduce_max(int64_t v) {
  if (size_ == 1) return v;
#ifdef MEMFIT_HAVE_MPI
  long long x = v, out = 0;
  check(MPI_Allreduce(&x, &out, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD), "all-reduce");
  return out;
#else
  return v;
#endif
}

void Comm::reduce_sum(float* p, size_t n, int root) {
  if (size_ == 1) return;
#ifdef MEMFIT_HAVE_MPI
  const bool me = rank_ == root;
  in_pieces(p, n, [&](float* q, int k) {
    check(MPI_Reduce(me ? MPI_IN_PLACE : q, me ? q : nullptr, k, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD), "reduce");
  });
#else
  (void)p, (void)n, (void)root;
#endif
}

void Comm::start_allreduce_sum(float* p, size_t n) {
  if (size_ == 1 || n == 0) return;
  if (in_flight_ || n * sizeof(float) > kPieceBytes) throw std::logic_error("Comm: one piece in flight at a time");
#ifdef MEMFIT_HAVE_MPI
  check(MPI_Iallreduce(MPI_IN_PLACE, p, static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &g_request),
        "all-reduce");
  in_flight_ = true;
#else
  (void)p;
#endif
}

void Comm::start_reduce_sum(float* p, size_t n, int root) {
  if (size_ == 1 || n == 0) return;
  if (in_flight_ || n * sizeof(float) > kPieceBytes) throw std::logic_error("Comm: one piece in flight at a time");
#ifdef MEMFIT_HAVE_MPI
  const bool me = rank_ == root;
  check(MPI_Ireduce(me ? MPI_IN_PLACE : p, me ? p : nullptr, static_cast<int>(n), MPI_FLOAT, MPI_SUM, root,
                    MPI_COMM_WORLD, &g_request),
        "reduce");
  in_flight_ = true;
#else
  (void)p, (void)root;
#endif
}

bool Comm::progress() {
  if (!in_flight_) return true;
#ifdef MEMFIT_HAVE_MPI
  int done = 0;
  check(MPI_Test(&g_request, &done, MPI_STATUS_IGNORE), "test");
  if (done) in_flight_ = false;
#endif
  return !in_flight_;
}

void Comm::wait() {
  if (!in_flight_) return;
#ifdef MEMFIT_HAVE_MPI
  check(MPI_Wait(&g_request, MPI_STATUS_IGNORE), "wait");
#endif
  in_flight_ = false;
}

void Comm::broadcast(void* p, size_t bytes, int root) {
  if (size_ == 1) return;
#ifdef MEMFIT_HAVE_MPI
  in_pieces(static_cast<unsigned char*>(p), bytes,
            [&](unsigned char* q, int k) { check(MPI_Bcast(q, k, MPI_BYTE, root, MPI_COMM_WORLD), "broadcast"); });
#else
  (void)p, (void)bytes, (void)root;
#endif
}

std::vector<uint64_t> Comm::allgather(uint64_t v) {
  std::vector<uint64_t> out(static_cast<size_t>(size_), v);
#ifdef MEMFIT_HAVE_MPI
  if (size_ > 1)
    check(MPI_Allgather(&v, 1, MPI_UINT64_T, out.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD), "all-gather");
#endif
  return out;
}

void Comm::barrier() {
#ifdef MEMFIT_HAVE_MPI
  if (size_ > 1) check(MPI_Barrier(MPI_COMM_WORLD), "barrier");
#endif
}

void Comm::abort(int code) {
#ifdef MEMFIT_HAVE_MPI
  if (mpi_) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  std::_Exit(code);
}

void Comm::finalize() {
#ifdef MEMFIT_HAVE_MPI
  if (mpi_) {
    int done = 0;
    MPI_Finalized(&done);
    if (!done) MPI_Finalize();
  }
#endif
}

}  // namespace memfit::dist
