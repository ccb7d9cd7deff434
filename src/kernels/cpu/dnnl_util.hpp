// Helpers shared by the oneDNN-backed kernels: plain f32 memory descriptors,
// the user-scratchpad attribute, a layout for a kernel's scratch, Call (one
// primitive with its argument list bound once, so that run() executes it
// through the C API without building maps or vectors on our side), and
// RelayoutKernel (a primitive whose operands live in oneDNN's own layouts in
// scratch, reordered from and to the graph's plain buffers).
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cpu/engine.hpp"
#include "kernels/kernel.hpp"

namespace memfit::kernels::cpu {

using dims = dnnl::memory::dims;

// Dense row-major f32 tensor of the given dimensions.
dnnl::memory::desc plain_f32(const dims& d);
// Row-major f32 with explicit element strides (transposed views).
dnnl::memory::desc strided_f32(const dims& d, const dims& strides);

// Attribute every memfit primitive is created with: its scratchpad is passed
// in at execution (planned), never allocated by oneDNN.
dnnl::primitive_attr user_scratchpad_attr();

inline size_t scratchpad_bytes(const dnnl::primitive_desc_base& pd) { return pd.scratchpad_desc().get_size(); }

// What a matmul's implementation allocates on the heap inside one execute:
// 0 for oneDNN's brgemm matmuls (all their buffers come from the user
// scratchpad); for its "gemm:jit" fallback (every CPU without AVX-512) an
// upper bound on the packing buffers of its f32 gemm driver, for a
// [batch] x [M,K] x [K,N] product on omp_get_max_threads() threads.
size_t matmul_heap_bytes(const dnnl::matmul::primitive_desc& pd, int64_t M, int64_t N, int64_t K, int64_t batch = 1);

// Packs several buffers into one scratch region, each aligned.
class ScratchLayout {
 public:
  static constexpr size_t kAlign = 64;
  // Reserves `bytes` and returns their offset (0 for an empty request).
  size_t add(size_t bytes) {
    if (bytes == 0) return 0;
    size_t off = (total_ + kAlign - 1) / kAlign * kAlign;
    total_ = off + bytes;
    return off;
  }
  size_t total() const { return total_; }

 private:
  size_t total_ = 0;
};

// One primitive and its arguments. set() once (constructor); clear_args() and
// arg() for each argument in on_bind(), then run() any number of times.
class Call {
 public:
  void set(dnnl::primitive p) {
    prim_ = std::move(p);
    clear_args();
  }
  void clear_args() {
    mems_.clear();
    args_.clear();
  }
  // Adds an argument backed by `ptr`. A zero-size descriptor (an empty
  // scratchpad) adds nothing. The memory objects are handles, so the C array
  // of raw handles stays valid as the vectors grow.
  void arg(int id, const dnnl::memory::desc& md, void* ptr);
  void run() const;

 private:
  dnnl::primitive prim_;
  std::vector<dnnl::memory> mems_;
  std::vector<dnnl_exec_arg_t> args_;
};

// One f32 matmul c[M,N] = a[M,K] b[K,N] whose operands are described by
// strides (a transposed view is a stride), built once with make() and
// bound to fixed buffers with bind(); the recurrent layers' products.
struct StridedMatmul {
  dnnl::memory::desc a, b, c;
  dnnl::matmul::primitive_desc pd;
  Call call;
  size_t heap = 0;  // matmul_heap_bytes of the product
  void make(dims ad, dims as, dims bd, dims bs, int64_t M, int64_t N, int64_t K) {
    a = strided_f32(ad, as);
    b = strided_f32(bd, bs);
    c = plain_f32({M, N});
    dnnl::matmul::desc desc(a, b, c);
    pd = {desc, user_scratchpad_attr(), engine()};
    call.set(dnnl::matmul(pd));
    heap = matmul_heap_bytes(pd, M, N, K);
  }
  size_t scratchpad() const { return scratchpad_bytes(pd); }
  void bind(const void* pa, const void* pb, void* pc, void* scratch) {
    call.clear_args();
    call.arg(DNNL_ARG_SRC, a, const_cast<void*>(pa));
    call.arg(DNNL_ARG_WEIGHTS, b, const_cast<void*>(pb));
    call.arg(DNNL_ARG_DST, c, pc);
    call.arg(DNNL_ARG_SCRATCHPAD, pd.scratchpad_desc(), scratch);
  }
};

// Thrown by a kernel constructor for a case it does not handle.
struct Unsupported {};

// Constructs kernel K from params, or returns nullptr when oneDNN has no
// implementation for them (the caller falls back to the reference).
template <class K, class Base, class... A>
std::unique_ptr<Base> try_make(const A&... a) {
  try {
    return std::make_unique<K>(a...);
  } catch (const dnnl::error&) {
    return nullptr;
  } catch (const Unsupported&) {
    return nullptr;
  }
}

// A kernel around one primitive whose operands may live in a layout of the
// primitive's choosing (format_tag::any, e.g. channel-blocked for
// convolution) while the graph's buffers stay plain. An operand whose layout
// differs gets a buffer in the kernel's scratch and a reorder: graph -> buffer
// before the primitive for inputs, buffer -> graph after it for outputs.
// Scratch: [shared scratchpad of the primitive and the reorders (they run one
// after another)][operand buffers].
class RelayoutKernel : public Kernel {
 public:
  size_t scratch_bytes() const override { return scratch_total_; }
  bool runs_library_gemm() const override { return gemm_; }
  void run(const StepContext&) override;

 protected:
  struct Operand {
    int arg;         // DNNL_ARG_*
    bool input;      // in_[index] (else out_[index])
    size_t index;
    dnnl::memory::desc plain, inner;  // the graph's layout, the primitive's
  };
  // Call once from the derived constructor, after making the primitive.
  void setup(dnnl::primitive prim, const dnnl::memory::desc& scratchpad, std::vector<Operand> ops);

 private:
  void on_bind() override;
  struct Slot {
    Operand op;
    bool relayout = false;
    size_t offset = 0;  // of the operand buffer in scratch
    dnnl::memory::desc reorder_scratchpad;
    Call reorder;
  };
  Call main_;
  dnnl::memory::desc scratchpad_;
  std::vector<Slot> slots_;
  size_t shared_ = 0, scratch_total_ = 0;
  bool gemm_ = false;  // the primitive's implementation is oneDNN's gemm-based one
};

}  // namespace memfit::kernels::cpu
