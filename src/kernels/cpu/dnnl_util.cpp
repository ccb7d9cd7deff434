#include "kernels/cpu/dnnl_util.hpp"

#include <algorithm>
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
