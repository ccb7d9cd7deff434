#include "kernels/cpu/dnnl_util.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

namespace memfit::kernels::cpu {

dnnl::memory::desc plain_f32(const dims& d) {
  dims st(d.size());
  dnnl::memory::dim s = 1;
  for (size_t i = d.size(); i-- > 0;) {
    st[i] = s;
    s *= d[i];
  }
  return strided_f32(d, st);
}

dnnl::memory::desc strided_f32(const dims& d, const dims& strides) {
  return dnnl::memory::desc(d, dnnl::memory::data_type::f32, strides);
}

dnnl::primitive_attr user_scratchpad_attr() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return a;
}

void Call::arg(int id, const dnnl::memory::desc& md, void* ptr) {
  if (md.get_size() == 0) return;
  mems_.emplace_back(md, engine(), ptr);
  args_.push_back({id, mems_.back().get()});
}

void Call::run() const {
  const dnnl_status_t st =
      dnnl_primitive_execute(prim_.get(), stream().get(), static_cast<int>(args_.size()), args_.data());
  if (st != dnnl_success) throw std::runtime_error("oneDNN primitive failed with status " + std::to_string(st));
}

}  // namespace memfit::kernels::cpu

namespace memfit::kernels::cpu {

void RelayoutKernel::setup(dnnl::primitive prim, const dnnl::memory::desc& scratchpad, std::vector<Operand> ops) {
  const_dnnl_primitive_desc_t pd = nullptr;
  const char* impl = nullptr;
  if (dnnl_primitive_get_primitive_desc(prim.get(), &pd) == dnnl_success &&
      dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl)
    gemm_ = std::strstr(impl, "gemm") && !std::strstr(impl, "brg");  // "x64:gemm:jit", not brgemm
  main_.set(std::move(prim));
  scratchpad_ = scratchpad;
  shared_ = scratchpad.get_size();
  slots_.clear();
  for (Operand& op : ops) {
    Slot s;
    s.relayout = op.plain != op.inner;
    if (s.relayout) {
      const auto& src = op.input ? op.plain : op.inner;
      const auto& dst = op.input ? op.inner : op.plain;
      dnnl::reorder::primitive_desc pd(engine(), src, engine(), dst, user_scratchpad_attr());
      s.reorder_scratchpad = pd.scratchpad_desc();
      shared_ = std::max(shared_, s.reorder_scratchpad.get_size());
      s.reorder.set(dnnl::reorder(pd));
    }
    s.op = std::move(op);
    slots_.push_back(std::move(s));
  }
  ScratchLayout layout;
  layout.add(shared_);
  for (Slot& s : slots_)
    if (s.relayout) s.offset = layout.add(s.op.inner.get_size());
  scratch_total_ = layout.total();
}

void RelayoutKernel::on_bind() {
  auto* base = static_cast<std::byte*>(scratch_);
  main_.clear_args();
  for (Slot& s : slots_) {
    void* graph_ptr = s.op.input ? in_[s.op.index] : out_[s.op.index];
    if (!s.relayout) {
      main_.arg(s.op.arg, s.op.plain, graph_ptr);
      continue;
    }
    void* buf = base + s.offset;
    main_.arg(s.op.arg, s.op.inner, buf);
    s.reorder.clear_args();
    s.reorder.arg(DNNL_ARG_FROM, s.op.input ? s.op.plain : s.op.inner, s.op.input ? graph_ptr : buf);
    s.reorder.arg(DNNL_ARG_TO, s.op.input ? s.op.inner : s.op.plain, s.op.input ? buf : graph_ptr);
    s.reorder.arg(DNNL_ARG_SCRATCHPAD, s.reorder_scratchpad, base);
  }
  main_.arg(DNNL_ARG_SCRATCHPAD, scratchpad_, base);
}

void RelayoutKernel::run(const StepContext&) {
  for (const Slot& s : slots_)
    if (s.relayout && s.op.input) s.reorder.run();
  main_.run();
  for (const Slot& s : slots_)
    if (s.relayout && !s.op.input) s.reorder.run();
}

}  // namespace memfit::kernels::cpu

namespace memfit::kernels::cpu {

// oneDNN 2.6's f32 gemm on AVX2 (src/cpu/x64/gemm), for C[m,n] = A[m,k]
// B[k,n] in its column-major terms: a row-major matmul [M,K] x [K,N] is
// m = N, n = M. It takes one of two paths, and the bound follows its rules:
//  - no-copy kernels for small or skinny products (its nocopy_checker_avx2):
//    a 256 x 24-float workspace per thread and, where it splits k across
//    threads (calc_nthr_nocopy_avx), partial sums of (threads_k - 1) blocks
//    of MB x NB floats;
//  - the copy-based driver otherwise: per thread one buffer of m_padd x
//    k_padd (A) plus k_padd x n_padd (B) floats and a few pages, m_padd over
//    the thread's rows (at most 10008: bm 10000, unroll 24), k_padd <= 256,
//    n_padd <= 384; when A is shared (m >= 1000, n >= 4000) one A buffer of
//    min(threads, 10) row blocks.
// Checked against the measured heap by tests/test_no_alloc.cpp
// (NoAlloc.MatmulHeapBound) on every ISA the suite runs.
size_t matmul_heap_bytes(const dnnl::matmul::primitive_desc& pd, int64_t M, int64_t N, int64_t K, int64_t batch) {
  const std::string impl = pd.impl_info_str();
  if (impl.rfind("gemm", 0) != 0) return 0;
  // A batched product runs one single-threaded gemm per thread: the
  // per-thread buffers below, none of the splits.
  const int64_t T = batch > 1 ? 1 : std::max(1, omp_get_max_threads());
  const int64_t nthreads = std::max(1, omp_get_max_threads());
  const int64_t m = N, n = M, k = K;
  constexpr int64_t kPage = 4096;
  auto rnd_up = [](int64_t x, int64_t a) { return (x + a - 1) / a * a; };
  auto div_up = [](int64_t x, int64_t a) { return (x + a - 1) / a; };

  // No-copy path (either transposition: the union of both branches).
  bool nocopy = false;
  if (1.0 / double(m) + 1.0 / double(n) >= 0.0038) nocopy = true;
  else if (m <= 378 && n <= 378 && k >= T * 378) nocopy = false;
  else if (m >= T * 378 && k >= T * 378) nocopy = false;
  else nocopy = (m <= 128 && n <= 128) || n <= T * 16 || k <= T * 2 || m <= 64;
  int64_t nocopy_bytes = nthreads * (4 * (256 * 24 + 64) + kPage) + kPage;
  if (T > 1) {
    int64_t nm = div_up(m, 64), nn = div_up(n, 48), nk = 1, nthr = T;
    for (int64_t other = 1; nm * nn * other < nthr && k / (other + 1) > 384;) {
      ++other;
      if (double((nthr / other) * other) > 0.9 * double(nthr)) nk = other;
    }
    nthr /= nk;
    if (nm == 1) nn = nthr;
    if (nn == 1) nm = nthr;
    while (nm * nn > nthr) (nm > nn ? nm : nn)--;
    while (nm * nn < nthr) (nm < nn ? nm : nn)++;
    const int64_t MB = rnd_up(div_up(m, nm), 16), NB = div_up(n, nn), KB = rnd_up(div_up(k, nk), 4);
    if (KB * nk > k) nk = div_up(k, KB);
    // nm, nn may shrink further in oneDNN; keeping them is the larger bound.
    if (nk > 1) nocopy_bytes += 4 * nm * nn * (nk - 1) * MB * NB + kPage;
  }
  if (nocopy) return static_cast<size_t>(nocopy_bytes);

  // Copy-based path.
  const int64_t k_padd = k <= 256 ? std::max<int64_t>(128, k) : k < 384 ? (k + 1) / 2 : 192;
  auto m_padd_of = [&](int64_t rows) { return rnd_up(std::min<int64_t>(std::max<int64_t>(rows, 24), 10000), 24); };
  const int64_t n_padd = rnd_up(std::min<int64_t>(std::max<int64_t>(n, 4), 384), 4);
  const int64_t pages = 6 * kPage + 128;
  if (T > 1 && m >= 1000 && n >= 4000) {  // A shared by all threads
    const int64_t a = std::min(m_padd_of(m) * std::min<int64_t>(T, 10), rnd_up(m, 24));
    return static_cast<size_t>(4 * a * k_padd + T * (4 * k_padd * n_padd + pages));
  }
  // Rows per thread: the driver's 2-D split when it takes one (AVX2: n not
  // small or m small), else at most all of m (its 1-D split would give m / T).
  int64_t nm = 1;
  const bool two_d = !(n <= 384 && m >= T * 384) && (n > T * 384 || n <= T * 192) && m >= 768;
  if (T > 1 && two_d) {
    int64_t nn = T;
    while (nn % 2 == 0 && (n / T > 384 || n / nn <= 192) && m / nm >= 768 && nm < 4) {
      nm *= 2;
      nn /= 2;
    }
  }
  return static_cast<size_t>(T * (4 * (m_padd_of(div_up(m, nm)) * k_padd + k_padd * n_padd) + pages) + T * 128);
}

}  // namespace memfit::kernels::cpu
