// Parameter struct of the pointwise activations (op "activation", attr
// kind): plain data shared by the scalar reference kernels
// (ops/activation/ref.hpp) and the fast CPU kernels (ops/activation/cpu.hpp).
//
// activation      in: x[n]       out: y[n] = f(x)       (y may be x's buffer)
// activation_bwd  in: x, dy[n]   out: dx[n] = dy f'(x)  (dx may be dy's buffer)
//
//   kind         f(x)                                   f'(x)
//   sigmoid      s(x) = 1 / (1 + e^-x)                  s(x) s(-x)
//   tanh         tanh x                                 4 s(2x) s(-2x)  (= 1 - tanh^2 x)
//   silu         x s(x)                                 s(x) (1 + x s(-x))
//   clip         min(max(x, a), b)                      1 where a < x < b, else 0
//   hardsigmoid  min(max(a x + b, 0), 1)                a where 0 < a x + b < 1, else 0
//   hardswish    x min(max(x / 6 + 1/2, 0), 1)          0 for x < -3, x / 3 + 1/2 for x <= 3, 1 above
//   leaky_relu   x for x > 0, a x otherwise             1 for x > 0, a otherwise
//   elu          x for x > 0, a (e^x - 1) otherwise     1 for x > 0, a e^x otherwise
//   exp          e^x                                    e^x
//   sqrt         sqrt x (NaN below 0)                   1 / (2 sqrt x) for x > 0, 0 otherwise
//
// The derivatives at the kinks are PyTorch's (ReLU6 and hardtanh pass no
// gradient at their bounds, hardswish takes the middle piece at x = 3), so
// a model trains as it does there. sqrt's derivative at 0 is taken as 0, not
// inf: sqrt is the last step of an L2 norm (ONNX's ReduceL2, torch's
// F.normalize), whose gradient PyTorch takes as 0 at a zero vector. The forms s(x) s(-x) and 4 s(2x) s(-2x)
// subtract nothing: they keep their relative accuracy where 1 - s and
// 1 - tanh^2 would cancel.
#pragma once

#include <cstdint>

namespace memfit::kernels {

enum class ActKind : uint8_t { Sigmoid, Tanh, Silu, Clip, HardSigmoid, HardSwish, LeakyRelu, Elu, Exp, Sqrt };

struct ActivationParams {
  int64_t n = 0;
  ActKind kind = ActKind::Sigmoid;
  double a = 0.0, b = 0.0;  // clip: min, max; hardsigmoid: alpha, beta; leaky_relu, elu: alpha
};

}  // namespace memfit::kernels
