// Helpers shared by the oneDNN-backed kernels: plain f32 memory descriptors,
// the user-scratchpad attribute, a layout for a kernel's scratch, and Call,
// one primitive with its argument list bound once so that run() executes it
// through the C API without building maps or vectors.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cpu/engine.hpp"

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
  bool empty() const { return !prim_; }

 private:
  dnnl::primitive prim_;
  std::vector<dnnl::memory> mems_;
  std::vector<dnnl_exec_arg_t> args_;
};

// Thrown by a kernel constructor for a case it does not handle.
struct Unsupported {};

// Constructs kernel K from params, or returns nullptr when oneDNN has no
// implementation for them (the caller falls back to the reference).
template <class K, class Base, class P>
std::unique_ptr<Base> try_make(const P& p) {
  try {
    return std::make_unique<K>(p);
  } catch (const dnnl::error&) {
    return nullptr;
  } catch (const Unsupported&) {
    return nullptr;
  }
}

}  // namespace memfit::kernels::cpu
