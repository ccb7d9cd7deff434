#include "runtime/mixed.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>
#include <string>

#include "kernels/bf16.hpp"
#include "runtime/device.hpp"
#include "memfit/op_registry.hpp"
#include "kernels/cpu/parallel.hpp"

namespace memfit {
namespace {

bool low(DType t) { return t == DType::bf16 || t == DType::f16; }

constexpr size_t kAlign = 64;
size_t align_up(size_t b) { return (b + kAlign - 1) / kAlign * kAlign; }

// Elements per chunk of a conversion (and the loss-scaled cast's stack buffer).
constexpr int64_t kChunk = 4096;

// Converts n elements in chunks across the thread team.
template <class F>
void chunked(size_t n, F&& f) {
  const int64_t chunks = static_cast<int64_t>((n + kChunk - 1) / kChunk);
  kernels::cpu::parallel_for(chunks, static_cast<int64_t>(n), [&](int64_t c) {
    const size_t b = static_cast<size_t>(c * kChunk);
    f(b, std::min(n, b + kChunk) - b);
  });
}

void widen(DType t, const void* in, float* out, size_t n) {
  chunked(n, [&](size_t b, size_t m) {
    if (t == DType::bf16) kernels::bf16_to_f32(static_cast<const kernels::bf16_t*>(in) + b, out + b, m);
    else kernels::f16_to_f32(static_cast<const kernels::f16_t*>(in) + b, out + b, m);
  });
}

void narrow(DType t, const float* in, void* out, size_t n) {
  chunked(n, [&](size_t b, size_t m) {
    if (t == DType::bf16) kernels::f32_to_bf16(in + b, static_cast<kernels::bf16_t*>(out) + b, m);
    else kernels::f32_to_f16(in + b, static_cast<kernels::f16_t*>(out) + b, m);
  });
}

// f32 -> f32 through the low-precision type (weights).
void round_through(DType t, const float* in, float* out, size_t n) {
  chunked(n, [&](size_t b, size_t m) {
    if (t == DType::bf16)
      for (size_t i = b; i < b + m; ++i) out[i] = kernels::round_bf16(in[i]);
    else
      for (size_t i = b; i < b + m; ++i) out[i] = kernels::round_f16(in[i]);
  });
}

class ConvertingKernel final : public kernels::Kernel {
 public:
  struct Operand {
    bool output;
    size_t index;   // position among the node's inputs or outputs
    DType stored;   // the graph's type (bf16/f16), or f32 for a rounded weight
    DType round;    // the low-precision type
    size_t n;       // elements
    size_t offset;  // of the f32 shadow in scratch
  };

  ConvertingKernel(std::unique_ptr<kernels::Kernel> inner, std::vector<Operand> ops, size_t shadow_bytes,
                   std::string name)
      : inner_(std::move(inner)), ops_(std::move(ops)), shadow_bytes_(shadow_bytes), name_(std::move(name)) {}

  size_t scratch_bytes() const override { return shadow_bytes_ + inner_->scratch_bytes(); }
  size_t heap_bytes() const override { return inner_->heap_bytes(); }
  const char* name() const override { return name_.c_str(); }

  void run(const kernels::StepContext& ctx) override {
    for (const Operand& o : ops_) {
      if (o.output) continue;
      float* s = shadow(o);
      if (o.stored == DType::f32) round_through(o.round, static_cast<const float*>(in_[o.index]), s, o.n);
      else widen(o.stored, in_[o.index], s, o.n);
    }
    inner_->run(ctx);
    for (const Operand& o : ops_)
      if (o.output) narrow(o.stored, shadow(o), out_[o.index], o.n);
  }

 protected:
  void on_bind() override {
    std::vector<void*> in = in_, out = out_;
    for (const Operand& o : ops_) (o.output ? out : in)[o.index] = shadow(o);
    void* inner_scratch = inner_->scratch_bytes() ? static_cast<std::byte*>(scratch_) + shadow_bytes_ : nullptr;
    inner_->bind(std::move(in), std::move(out), inner_scratch);
  }

 private:
  float* shadow(const Operand& o) const {
    return reinterpret_cast<float*>(static_cast<std::byte*>(scratch_) + o.offset);
  }
  std::unique_ptr<kernels::Kernel> inner_;
  std::vector<Operand> ops_;
  size_t shadow_bytes_;
  std::string name_;
};

// cast: widen, narrow, or both through f32; Reference64 stores every float
// as double, where the cast is a copy (the double oracle of a mixed graph).
class CastKernel final : public kernels::Kernel {
 public:
  CastKernel(DType from, DType to, size_t n, bool wide, bool scaled)
      : from_(from), to_(to), n_(n), wide_(wide), scaled_(scaled) {}
  const char* name() const override { return "cast"; }
  size_t scratch_bytes() const override { return low(from_) && low(to_) ? align_up(n_ * 4) : 0; }
  void run(const kernels::StepContext& ctx) override {
    if (scaled_ && ctx.loss_scale != 1.0) {
      scaled_run(ctx.loss_scale);
      return;
    }
    if (wide_ || from_ == to_) {
      std::memcpy(out_[0], in_[0], n_ * (wide_ ? 8 : dtype_size(from_)));
    } else if (from_ == DType::f32) {
      narrow(to_, static_cast<const float*>(in_[0]), out_[0], n_);
    } else if (to_ == DType::f32) {
      widen(from_, in_[0], static_cast<float*>(out_[0]), n_);
    } else {
      float* t = static_cast<float*>(scratch_);
      widen(from_, in_[0], t, n_);
      narrow(to_, t, out_[0], n_);
    }
  }

 private:
  // x * scale, rounded once (scale is a power of two: exact in f32).
  void scaled_run(double scale) {
    const float s = static_cast<float>(scale);
    if (wide_) {
      const double* x = static_cast<const double*>(in_[0]);
      double* y = static_cast<double*>(out_[0]);
      for (size_t i = 0; i < n_; ++i) y[i] = x[i] * scale;
      return;
    }
    if (from_ != DType::f32) throw std::logic_error("loss-scaled cast from a low-precision type");
    const float* x = static_cast<const float*>(in_[0]);
    chunked(n_, [&](size_t b, size_t m) {
      float t[kChunk];
      for (size_t i = 0; i < m; ++i) t[i] = x[b + i] * s;
      if (to_ == DType::f32) std::memcpy(static_cast<float*>(out_[0]) + b, t, m * 4);
      else if (to_ == DType::bf16) kernels::f32_to_bf16(t, static_cast<kernels::bf16_t*>(out_[0]) + b, m);
      else kernels::f32_to_f16(t, static_cast<kernels::f16_t*>(out_[0]) + b, m);
    });
  }
  DType from_, to_;
  size_t n_;
  bool wide_, scaled_;
};

}  // namespace

std::unique_ptr<kernels::Kernel> make_cast_kernel(const LoweredGraph& lg, NodeId id) {
  const Graph& g = lg.graph();
  const Node& n = lg.node(id);
  return std::make_unique<CastKernel>(g.value(n.inputs[0]).dtype, g.value(n.outputs[0]).dtype,
                                      static_cast<size_t>(numel(g.value(n.inputs[0]).shape)),
                                      lg.device().wide_floats(), n.attrs.i("loss_scale", 0) != 0);
}

DType low_precision_type(const Graph& g, const Node& n) {
  for (const auto* vs : {&n.inputs, &n.outputs})
    for (ValueId v : *vs)
      if (low(g.value(v).dtype)) return g.value(v).dtype;
  return DType::f32;
}

std::unique_ptr<Graph> f32_view(const Graph& g) {
  auto v = std::make_unique<Graph>(g);
  for (size_t i = 0; i < v->num_values(); ++i) {
    Value& val = v->value(static_cast<ValueId>(i));
    if (low(val.dtype)) val.dtype = DType::f32;
  }
  return v;
}

std::unique_ptr<kernels::Kernel> wrap_low_precision(const Graph& g, const Node& n,
                                                    std::unique_ptr<kernels::Kernel> inner) {
  if (!inner) return inner;
  const DType lp = low_precision_type(g, n);
  std::vector<ConvertingKernel::Operand> ops;
  size_t bytes = 0;
  auto add = [&](bool output, size_t i, ValueId v, DType stored) {
    const size_t count = static_cast<size_t>(numel(g.value(v).shape));
    ops.push_back({output, i, stored, lp, count, bytes});
    bytes += align_up(count * 4);
  };
  const auto& rounded = op_def(n.op).traits.low_precision_weights;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const DType t = g.value(n.inputs[i]).dtype;
    if (low(t)) add(false, i, n.inputs[i], t);
    else if (t == DType::f32 && std::find(rounded.begin(), rounded.end(), i) != rounded.end()) add(false, i, n.inputs[i], DType::f32);
  }
  for (size_t i = 0; i < n.outputs.size(); ++i)
    if (low(g.value(n.outputs[i]).dtype)) add(true, i, n.outputs[i], g.value(n.outputs[i]).dtype);
  std::string name = std::string(dtype_name(lp)) + "(" + inner->name() + ")";
  return std::make_unique<ConvertingKernel>(std::move(inner), std::move(ops), bytes, std::move(name));
}

}  // namespace memfit
