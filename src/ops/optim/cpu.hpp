// Optimizer updates (hand-written; parameters and gradients f32 or bf16, state f32,
// bf16 or 8-bit: params.hpp's StateLayout): the formulas of params.hpp in
// the reference's order of operations, vectorised and threaded.
#pragma once

#include <memory>
#include <string>

#include "kernels/kernel.hpp"
#include "ops/optim/params.hpp"

namespace memfit::kernels::cpu {

std::unique_ptr<Kernel> make_sgd_update(const SgdParams& p);
std::unique_ptr<Kernel> make_adam_update(const AdamParams& p);
std::unique_ptr<Kernel> make_adafactor_update(const AdafactorParams& p);
// grad_accumulate into a bf16 accumulator of n elements (the rounding
// stream of parameter `param`).
std::unique_ptr<Kernel> make_grad_accumulate_bf16(int64_t n, const std::string& param);
// grad_accumulate into an f32 accumulator of n elements: the reference's bytes.
std::unique_ptr<Kernel> make_grad_accumulate_f32(int64_t n);
// grad_accumulate_matmul and grad_accumulate_rows into a bf16 accumulator
// (cpu_accumulate.cpp): the product a panel of about panel_bytes of f32
// rows at a time; the rows sorted by id in n keys of scratch. nullptr where
// oneDNN has no such product.
constexpr size_t kAccumulatePanelBytes = size_t(4) << 20;
std::unique_ptr<Kernel> make_grad_accumulate_matmul(const AccumulateMatmulParams& p,
                                                    size_t panel_bytes = kAccumulatePanelBytes);
std::unique_ptr<Kernel> make_grad_accumulate_rows(const AccumulateRowsParams& p);

}  // namespace memfit::kernels::cpu
