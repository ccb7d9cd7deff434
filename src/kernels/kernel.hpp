// The kernel interface. Kernels know nothing of graphs: they are made from a
// plain parameter struct (ops/<family>/params.hpp), report the scratch bytes they
// need, are bound once to planned pointers, and then run any number of times
// without allocating.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace memfit::kernels {

// Per-step values a kernel may read. Filled by the trainer before each step.
// The collectives of a data-parallel job, for the kernels that exchange
// data with the other ranks (grad_reduce); absent for one process.
struct Collectives {
  virtual ~Collectives() = default;
  // The sum of every rank's p[0, n) into root's p (in place there; p is
  // only read elsewhere). Every rank calls it in the same order.
  virtual void reduce_sum(float* p, size_t n, int root) = 0;
};

// The offload tier: a memory space outside the arenas (a file on disk) that
// holds tiered values between their uses (memfit/tier.hpp). tier_load and
// tier_store copy a whole value between it and a planned buffer; `block`
// is the value's name. Reads check what they read (a checksum per sector).
//
// The async forms queue the copy on the tier's I/O thread, in order, and
// return at once: the buffer is the tier's until wait(buffer) (a queued
// read fills it, a queued write reads it), which returns when every copy
// queued on that buffer is done, or throws the error one of them met. A
// read queued after a write of the same block sees what it wrote.
//
// The buffer is memory the tier kernel was bound to. On a device whose
// memory the host cannot address (a GPU's), `via` is how the tier reaches
// it: the device's own copies, a piece at a time through the tier's host
// buffer (so the tier is a memory space with a copy engine, the same for
// every device). Null: the buffer is host memory, copied by memcpy.
struct BufferCopies {
  virtual ~BufferCopies() = default;
  virtual void to_buffer(void* dst, const void* host, size_t bytes) const = 0;
  virtual void from_buffer(void* host, const void* src, size_t bytes) const = 0;
};

struct TierIO {
  virtual ~TierIO() = default;
  virtual void read(const std::string& block, void* dst, size_t bytes, const BufferCopies* via = nullptr) = 0;
  virtual void write(const std::string& block, const void* src, size_t bytes, const BufferCopies* via = nullptr) = 0;
  virtual void read_async(const std::string& block, void* dst, size_t bytes, const BufferCopies* via = nullptr) = 0;
  virtual void write_async(const std::string& block, const void* src, size_t bytes,
                           const BufferCopies* via = nullptr) = 0;
  virtual void wait(const void* buffer) = 0;
};

struct StepContext {
  int64_t step = 0;        // optimizer step counter (dropout masks, Adam bias correction)
  int64_t micro = 0;       // micro-batch index within an accumulation group
  // This micro-batch's first row in the step's samples, in the order the
  // loader deals them (micro-batch m of rank r of R, micro-batches of b
  // rows: (m R + r) b). Random masks are keyed by it, so a sample draws the
  // same mask however the step is split into micro-batches and ranks.
  int64_t row0 = 0;
  double lr = 0.0;         // learning rate for this step
  double grad_scale = 1.0; // multiplier applied to gradients by the update (accumulation, loss scaling)
  double loss_scale = 1.0; // fp16: gradients entering low precision are multiplied by this (a power of two)
  uint64_t seed = 0;       // run seed
  Collectives* comm = nullptr;  // several ranks: their collectives (else null)
  TierIO* tier = nullptr;       // tiered values: their store (the executor sets it)
  // The device's queue the kernel's work goes on, in order (a CUDA stream:
  // Device::queue; the executor sets it); null on the host devices, whose
  // kernels finish their work inside run().
  void* queue = nullptr;
};

// Element type a kernel computes in. F64 exists for the double-precision
// reference used by gradient checks.
enum class ElemType : uint8_t { F32, F64, BF16 };

class Kernel {
 public:
  virtual ~Kernel() = default;
  // Bytes of scratch memory run() needs; placed by the planner.
  virtual size_t scratch_bytes() const { return 0; }
  // Upper bound on the bytes a library allocates on its own heap inside one
  // run() and frees before it returns (oneDNN's gemm packing buffers on CPUs
  // without its brgemm kernels). Not placed: the plan counts the largest.
  virtual size_t heap_bytes() const { return 0; }
  // Whether run() calls the library's gemm, whose code the library generates
  // at its first call (oneDNN's x64:gemm:jit convolutions): the plan has it
  // generated before the baseline is measured (Device::settle).
  virtual bool runs_library_gemm() const { return false; }
  // Whether run() reaches its buffers only through its device's copies
  // (BufferCopies), never through the pointers themselves: it takes the
  // device's own pointers, which a device that hands its other kernels
  // translated ones (the test devices) must leave as they are.
  virtual bool copies_through_device() const { return false; }
  // Called once after planning. Pointers stay valid for the kernel's life.
  void bind(std::vector<void*> in, std::vector<void*> out, void* scratch) {
    in_ = std::move(in);
    out_ = std::move(out);
    scratch_ = scratch;
    on_bind();
  }
  virtual void run(const StepContext& ctx) = 0;
  virtual const char* name() const = 0;

 protected:
  virtual void on_bind() {}
  template <class T> T* in(size_t i) const { return static_cast<T*>(in_[i]); }
  template <class T> T* out(size_t i) const { return static_cast<T*>(out_[i]); }
  std::vector<void*> in_, out_;
  void* scratch_ = nullptr;
};

}  // namespace memfit::kernels
