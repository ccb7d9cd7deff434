// Fast CPU LSTM kernels (f32; kernels/params_lstm.hpp). Factories return
// nullptr when oneDNN has no matmul for the shapes.
#pragma once

#include <memory>

#include "kernels/kernel.hpp"
#include "kernels/params_lstm.hpp"

namespace memfit::kernels::cpu {

std::unique_ptr<Kernel> make_lstm(const LstmParams& p);
std::unique_ptr<Kernel> make_lstm_bwd(const LstmParams& p);

}  // namespace memfit::kernels::cpu
