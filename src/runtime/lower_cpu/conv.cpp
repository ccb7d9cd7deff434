#include "kernels/cpu/conv.hpp"
#include "runtime/lower_cpu/cpu_util.hpp"
#include "runtime/lower_cpu/layout.hpp"
#include "runtime/lower/params_of.hpp"
#include "runtime/mixed.hpp"

namespace memfit {

void register_cpu_conv_kernels() {
  using kernels::cpu::Layout;
  using KPtr = std::unique_ptr<kernels::Kernel>;
  // a, b: the layouts of the node's two activation operands.
  // bf16 nodes run as oneDNN bf16 primitives, or as the f32 primitives (same
  // layouts) between conversions when those are faster on this CPU
  // (kernels::cpu::bf16_convs_native).
  using kernels::ElemType;
  auto compute_type = [](ElemType act) {
    return act == ElemType::BF16 && !kernels::cpu::bf16_convs_native() ? ElemType::F32 : act;
  };
  auto checked = [](KPtr k, Layout a, Layout b, const Graph& g, const Node& n) {
    k = blocked_checked(std::move(k), a != Layout::Plain || b != Layout::Plain, g, n);
    if (k && low_precision_type(g, n) != DType::f32 && std::string(k->name()).find(".bf16") == std::string::npos)
      return wrap_low_precision(g, n, std::move(k));
    return k;
  };
  register_cpu_kernel("conv2d", [=](const Graph& g, const Node& n, Backend) -> KPtr {
    const auto act = cpu_act(g, n);
    if (!act) return nullptr;
    const auto L = cpu_layouts(g);
    const Layout x = L[static_cast<size_t>(n.inputs[0])], y = L[static_cast<size_t>(n.outputs[0])];
    return checked(kernels::cpu::make_conv2d(conv_params(n, shape_of(g, n.inputs[0]), shape_of(g, n.inputs[1]),
                                                         shape_of(g, n.outputs[0]), n.inputs.size() == 3),
                                             x, y, compute_type(*act)),
                   x, y, g, n);
  });
  register_cpu_kernel("conv2d_bwd_data", [=](const Graph& g, const Node& n, Backend) -> KPtr {
    const auto act = cpu_act(g, n);
    if (!act) return nullptr;
    const auto L = cpu_layouts(g);
    const Layout dy = L[static_cast<size_t>(n.inputs[0])], dx = L[static_cast<size_t>(n.outputs[0])];
    return checked(kernels::cpu::make_conv2d_bwd_data(
                       conv_params(n, n.attrs.ints("x_shape"), shape_of(g, n.inputs[1]), shape_of(g, n.inputs[0]), false),
                       dy, dx, compute_type(*act)),
                   dy, dx, g, n);
  });
  register_cpu_kernel("conv2d_bwd_weight", [=](const Graph& g, const Node& n, Backend) -> KPtr {
    const auto act = cpu_act(g, n);
    if (!act) return nullptr;
    const auto L = cpu_layouts(g);
    const Layout x = L[static_cast<size_t>(n.inputs[0])], dy = L[static_cast<size_t>(n.inputs[1])];
    return checked(kernels::cpu::make_conv2d_bwd_weight(conv_params(n, shape_of(g, n.inputs[0]), n.attrs.ints("w_shape"),
                                                                    shape_of(g, n.inputs[1]), n.attrs.i("bias", 0) != 0),
                                                        x, dy, compute_type(*act)),
                   x, dy, g, n);
  });
}

}  // namespace memfit
