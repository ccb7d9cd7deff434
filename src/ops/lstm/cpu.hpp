// Fast CPU LSTM kernels (f32; ops/lstm/params.hpp). Factories return
// nullptr when oneDNN has no matmul for the shapes.
#pragma once

#include <memory>

#include "kernels/kernel.hpp"
#include "ops/lstm/params.hpp"

namespace memfit::kernels::cpu {

std::unique_ptr<Kernel> make_lstm(const LstmParams& p);
std::unique_ptr<Kernel> make_lstm_bwd(const LstmParams& p);

}  // namespace memfit::kernels::cpu
