// Fast CPU RNN and GRU kernels (f32; ops/rnn/params.hpp). Factories return
// nullptr when oneDNN has no matmul for the shapes.
#pragma once

#include <memory>

#include "kernels/kernel.hpp"
#include "ops/rnn/params.hpp"

namespace memfit::kernels::cpu {

std::unique_ptr<Kernel> make_rnn(const RnnParams& p);
std::unique_ptr<Kernel> make_rnn_bwd(const RnnParams& p);

}  // namespace memfit::kernels::cpu
