#include "ops/conv/cpu.hpp"
#include "ops/conv/params_of.hpp"
#include "runtime/lower_cpu/cpu_util.hpp"
#include "runtime/lower_cpu/layout.hpp"

namespace memfit {

void register_conv_cpu_kernels() {
  using kernels::cpu::Layout;
  using KPtr = std::unique_ptr<kernels::Kernel>;
  // a, b: the layouts of the node's two activation operands.
  // made_for: the storage type k was made for (product_type).
  // w16: k reads the node's bf16 weight itself.
  auto checked = [](KPtr k, Layout a, Layout b, kernels::ElemType made_for, const Graph& g, const Node& n,
                    bool w16 = false) {
    return converted(g, n, made_for, blocked_checked(std::move(k), a != Layout::Plain || b != Layout::Plain, g, n), w16);
  };
  // A bf16 weight (bf16 master weights) is converted by the weight reorder
  // the kernel runs anyway, into f32 or bf16 products; only where the node
  // runs between conversions (bf16 activations, f32 products on this CPU)
  // do the conversions widen it too, and the kernel is made for f32 weights.
  auto weights16 = [](const LoweredGraph& lg, const Graph& g, const Node& n, kernels::ElemType act) {
    return bf16_weight(g, n.inputs[1]) && !(act == kernels::ElemType::BF16 && product_type(lg, act) != act);
  };
  // Winograd (memfit's own, f32 only): where both activations are blocked,
  // the weights f32, the products f32; the shape and the measured choice are
  // winograd_tile's.
  auto winograd = [=](const LoweredGraph& lg, const Graph& g, const Node& n, kernels::ElemType act, Layout a, Layout b) {
    return act == kernels::ElemType::F32 && product_type(lg, act) == kernels::ElemType::F32 &&
           !weights16(lg, g, n, act) && a == Layout::Blocked16 && b == Layout::Blocked16;
  };
  // The weight gradient's bf16-input Winograd kernel: x and dy bf16 and
  // blocked, the products f32 on this CPU, dw (and db) f32.
  auto bf16_winograd_wgrad = [](const LoweredGraph& lg, const Graph& g, const Node& n, kernels::ElemType act,
                                Layout a, Layout b) {
    if (act != kernels::ElemType::BF16 || product_type(lg, act) != kernels::ElemType::F32) return false;
    if (a != Layout::Blocked16 || b != Layout::Blocked16) return false;
    for (ValueId v : n.inputs)
      if (g.value(v).dtype != DType::bf16) return false;
    for (ValueId v : n.outputs)
      if (g.value(v).dtype != DType::f32) return false;
    return true;
  };
  // The activations blocked or plain, each on its own (the weights plain).
  register_cpu_layouts("conv2d", {{0}, {0}, false});
  register_cpu_layouts("conv2d_bwd_data", {{0}, {0}, false});
  register_cpu_layouts("conv2d_bwd_weight", {{0, 1}, {}, false});
  register_cpu_kernel("conv2d", [=](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const auto act = cpu_act(g, n, true);
    if (!act) return nullptr;
    const auto L = [&lg](ValueId v) { return cpu_layout(lg, v); };
    const Layout x = L(n.inputs[0]), y = L(n.outputs[0]);
    const auto p = conv_params(n, shape_of(g, n.inputs[0]), shape_of(g, n.inputs[1]), shape_of(g, n.outputs[0]),
                               n.inputs.size() == 3);
    if (const int tile = winograd(lg, g, n, *act, x, y) ? kernels::cpu::winograd_tile(p, false) : 0)
      return kernels::cpu::make_conv2d_winograd(p, tile);
    return checked(kernels::cpu::make_conv2d(p, x, y, product_type(lg, *act), weights16(lg, g, n, *act)),
                   x, y, product_type(lg, *act), g, n, weights16(lg, g, n, *act));
  });
  register_cpu_kernel("conv2d_bwd_data", [=](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const auto act = cpu_act(g, n, true);
    if (!act) return nullptr;
    const auto L = [&lg](ValueId v) { return cpu_layout(lg, v); };
    const Layout dy = L(n.inputs[0]), dx = L(n.outputs[0]);
    const auto p = conv_params(n, n.attrs.ints("x_shape"), shape_of(g, n.inputs[1]), shape_of(g, n.inputs[0]), false);
    if (const int tile = winograd(lg, g, n, *act, dy, dx) ? kernels::cpu::winograd_tile(p, true) : 0)
      return kernels::cpu::make_conv2d_bwd_data_winograd(p, tile);
    return checked(kernels::cpu::make_conv2d_bwd_data(p, dy, dx, product_type(lg, *act), weights16(lg, g, n, *act)),
                   dy, dx, product_type(lg, *act), g, n, weights16(lg, g, n, *act));
  });
  register_cpu_kernel("conv2d_bwd_weight", [=](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const auto act = cpu_act(g, n);
    if (!act) return nullptr;
    const auto L = [&lg](ValueId v) { return cpu_layout(lg, v); };
    const Layout x = L(n.inputs[0]), dy = L(n.inputs[1]);
    const auto p = conv_params(n, shape_of(g, n.inputs[0]), n.attrs.ints("w_shape"), shape_of(g, n.inputs[1]),
                               n.attrs.i("bias", 0) != 0);
    if (winograd(lg, g, n, *act, x, dy) && kernels::cpu::winograd_bwd_weight(p))
      return kernels::cpu::make_conv2d_bwd_weight_winograd(p);
    // bf16 activations on a CPU that computes them in f32 (between
    // conversions, product_type): the Winograd weight gradient reads x and
    // dy as bf16 itself, so neither is widened into a copy first. ResNet-18
    // bf16 b64 on Zen 5 with --bf16-convs f32: the weight gradients 192-203
    // -> 118-144 ms a step. Where oneDNN's bf16 primitives run (native bf16)
    // they keep the node: there it measured no faster (Zen 5: 117-140 ms
    // against 107-141).
    if (bf16_winograd_wgrad(lg, g, n, *act, x, dy) && kernels::cpu::winograd_bwd_weight(p))
      return kernels::cpu::make_conv2d_bwd_weight_winograd(p, true);
    // A first layer's one input channel, where oneDNN's kernel is slow:
    // memfit's own (f32 only).
    if (product_type(lg, *act) == kernels::ElemType::F32 && *act == kernels::ElemType::F32 && x == Layout::Plain &&
        dy == Layout::Plain && kernels::cpu::few_taps_preferred(p))
      return kernels::cpu::make_conv2d_bwd_weight_taps(p);
    return checked(kernels::cpu::make_conv2d_bwd_weight(p, x, dy, product_type(lg, *act)), x, dy,
                   product_type(lg, *act), g, n);
  });
}

}  // namespace memfit
