// Batch normalization kernels (hand-written, f32): NCHW or [N, C] data, or
// nChw16c (Layout::Blocked16, C a multiple of 16) for all of x, y, dy, dx.
// act = BF16: x, y, dy, dx are stored as bf16 (read exactly, the same f32 /
// double arithmetic, each output rounded once); gamma, beta, dgamma, dbeta
// and the statistics stay f32.
#pragma once

#include <memory>

#include "kernels/cpu/layout.hpp"
#include "kernels/kernel.hpp"
#include "ops/batchnorm/params.hpp"

namespace memfit::kernels::cpu {

std::unique_ptr<Kernel> make_batch_norm(const BatchNormParams& p, Layout l = Layout::Plain,
                                        ElemType act = ElemType::F32);
std::unique_ptr<Kernel> make_batch_norm_bwd(const BatchNormParams& p, Layout l = Layout::Plain,
                                            ElemType act = ElemType::F32);

}  // namespace memfit::kernels::cpu
