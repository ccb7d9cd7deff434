// Pooling kernels: oneDNN max/avg pooling (f32, NCHW), memfit's own f32 max
// pooling over 2x2 windows at stride 2, and hand-written global average
// pooling. The max-pool index output holds oneDNN's workspace (or, for the
// own 2x2 pair, the reference kernel's index), so it is only meaningful to
// the Cpu max-pool backward: both factories make the same decision for the
// same params (both oneDNN, both the own pair, or both nullptr).
// Global average pooling reads (its backward writes) x in the given layout;
// y/dy [N, C] are plain.
// act = BF16: x, y, dy, dx are bf16 (sums in f32, each output rounded once;
// the max-pool workspace is unchanged in meaning and size).
#pragma once

#include <memory>

#include "kernels/cpu/layout.hpp"
#include "kernels/kernel.hpp"
#include "ops/pool/params.hpp"

namespace memfit::kernels::cpu {

std::unique_ptr<Kernel> make_max_pool2d(const PoolParams& p, ElemType act = ElemType::F32);
std::unique_ptr<Kernel> make_max_pool2d_bwd(const PoolParams& p, ElemType act = ElemType::F32);
std::unique_ptr<Kernel> make_avg_pool2d(const PoolParams& p, ElemType act = ElemType::F32);
std::unique_ptr<Kernel> make_avg_pool2d_bwd(const PoolParams& p, ElemType act = ElemType::F32);
std::unique_ptr<Kernel> make_global_avg_pool(const GlobalPoolParams& p, Layout x = Layout::Plain,
                                             ElemType act = ElemType::F32);
std::unique_ptr<Kernel> make_global_avg_pool_bwd(const GlobalPoolParams& p, Layout dx = Layout::Plain,
                                                 ElemType act = ElemType::F32);

}  // namespace memfit::kernels::cpu
