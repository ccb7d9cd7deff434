#include "kernels/cpu/dnnl_util.hpp"

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
