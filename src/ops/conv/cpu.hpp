// oneDNN convolution kernels. Weights are plain [K, C/G, R, S] f32; the
// activations x/dx and y/dy are stored in the given layouts (Blocked16 needs
// C, respectively K, a multiple of 16) and element type `act`:
//   F32:  everything f32.
//   BF16: x, y, dy, dx are bf16; w is rounded to bf16 (RNE) on its way into
//         oneDNN's layout; the bias stays f32 (not rounded); dw and db are
//         f32. Products of bf16 values are exact in f32, sums run in f32, and
//         each bf16 output element is rounded once.
// bf16_weights (forward and backward data; bf16 master weights): w is
// plain bf16, converted by the same reorder into the primitive's layout
// and type (exactly, into f32 or bf16).
// Each factory returns nullptr when oneDNN has no implementation for the
// shape (or the element type, e.g. bf16 on a CPU without AVX-512).
#pragma once

#include <memory>
#include <string>

#include "kernels/cpu/layout.hpp"
#include "kernels/kernel.hpp"
#include "ops/conv/params.hpp"

namespace memfit::kernels::cpu {

std::unique_ptr<Kernel> make_conv2d(const ConvParams& p, Layout x = Layout::Plain, Layout y = Layout::Plain,
                                    ElemType act = ElemType::F32, bool bf16_weights = false);
std::unique_ptr<Kernel> make_conv2d_bwd_data(const ConvParams& p, Layout dy = Layout::Plain, Layout dx = Layout::Plain,
                                             ElemType act = ElemType::F32, bool bf16_weights = false);
std::unique_ptr<Kernel> make_conv2d_bwd_weight(const ConvParams& p, Layout x = Layout::Plain,
                                               Layout dy = Layout::Plain, ElemType act = ElemType::F32);

// The f32 weight gradient of a stride-1 convolution with few input taps (C x
// R x S at most kConvMaxTaps, groups 1, K a multiple of 4; x and dy plain),
// memfit's own (ops/conv/cpu_taps.cpp); nullptr for another shape.
// few_taps_preferred: where the lowering takes it instead of oneDNN's: at
// most 3 input channels (a grey or RGB first layer) where oneDNN runs
// without AVX-512 (measured there 1.3-4.5x faster; with AVX-512 as fast as
// oneDNN's, which is kept).
inline constexpr int64_t kConvMaxTaps = 32;
bool conv2d_bwd_weight_taps_takes(const ConvParams& p);
std::unique_ptr<Kernel> make_conv2d_bwd_weight_taps(const ConvParams& p);
bool few_taps_preferred(const ConvParams& p);

// Winograd F(m x m, 3 x 3) convolutions, m = tile 2 or 4, memfit's own
// (ops/conv/cpu_winograd.cpp): the forward (in x, w (, b), out y) and
// backward-data (in dy, w, out dx) of a 3x3 stride-1 convolution without
// dilation or groups, padding at most 2, f32, activations blocked (nChw16c),
// C and K multiples of 16 (32 where memfit's loops are built for AVX-512);
// nullptr for another shape or tile. Per m x m outputs and channel pair
// (m + 2)^2 products instead of 9 m^2 (2.25x fewer with m = 2, 4x with m =
// 4), fused per block of tiles in the core's cache; scratch: the
// transformed filters ((m + 2)^2 x 4 C K bytes, or where that exceeds
// filter_bytes (0: 8 MiB) those of a group of output channels at a time)
// and a block's transforms per thread. The groups change no bits.
bool conv2d_winograd_takes(const ConvParams& p);
std::unique_ptr<Kernel> make_conv2d_winograd(const ConvParams& p, int tile, size_t filter_bytes = 0);
std::unique_ptr<Kernel> make_conv2d_bwd_data_winograd(const ConvParams& p, int tile, size_t filter_bytes = 0);
// The weight gradient of the same shapes (in x, dy; out dw (, db), dw
// plain [K][C][3][3]) by the transpose of F(2 x 2, 3 x 3): per 2 x 2 tile
// of dy and channel pair 16 products instead of 36, summed over the tiles
// in the transformed domain; scratch: per thread a block's transforms and
// one chunk's sums (~0.8 MiB), and where the channels make fewer chunks
// than threads the chunks' partial sums. bf16_inputs: x and dy are bf16
// (dw and db stay f32), widened exactly as the transforms read them, so the
// result is the f32 kernel's on their f32 copies.
std::unique_ptr<Kernel> make_conv2d_bwd_weight_winograd(const ConvParams& p, bool bf16_inputs = false);
// The Winograd tile the lowering takes for this shape and direction
// (bwd_data: backward-data, else forward), or 0 for oneDNN's direct kernel:
// a rule from measurements on both ISAs (ops/conv/cpu.cpp), the same in
// every process. Both need at least 64 channels in and out; backward-data
// takes F(4,3) where its tiles overhang the image by at most 1.35 and there
// are at least 64 of them, else F(2,3) as the forward does: where its tiles
// overhang by at most 1.15 and there are at least 128. The forward takes
// F(2,3) at most: its errors decide which ReLU units are on, and F(4,3)'s
// (some 10-20 times F(2,3)'s) switched 5 units of ResNet-18's golden step
// against float64 where F(2,3) and oneDNN's direct kernel switched 1,
// taking its gradients past the goldens' bounds (tests/golden_check.hpp);
// backward-data's errors scale the gradients smoothly (the relus' masks
// are the forward's). choose_winograd overrides it: "auto" (the default:
// the rule), "off" (never), "2" or "4" (that tile wherever it takes the
// shape, in both directions); false (and no change) for another word.
int winograd_tile(const ConvParams& p, bool bwd_data);
// Whether the lowering takes the Winograd weight gradient for this shape:
// choose_winograd's "off" never, "2" or "4" wherever it takes the shape,
// "auto" by a rule from measurements (ops/conv/cpu.cpp).
bool winograd_bwd_weight(const ConvParams& p);
bool choose_winograd(const std::string& how);

// Whether bf16 convolutions should run as oneDNN's bf16 primitives (true) or
// as the f32 primitives between conversions (false; the lowering converts,
// runtime/mixed.hpp). Both keep the same semantics: f32 products of the
// exact bf16 inputs and bf16-rounded weights, summed in f32, rounded once.
// Which is faster depends on the CPU: with AMX or full-rate vdpbf16ps (AMD
// Zen 4) bf16 wins ~2x; on Intel cores with AVX512-BF16 but no AMX the bf16
// primitives measured 1.6-1.9x slower than f32. So it is measured, once per
// process on one thread: one ResNet-style 3x3 convolution (fwd and bwd-weights)
// in both types, ~30 ms; bf16 must be faster by 20%. Linear layers follow
// the same choice. choose_bf16_convs overrides it (memfit train
// --bf16-convs; tests cover both paths on any machine with it).
// Where oneDNN has no bf16 compute (onednn_bf16_compute) the answer is false
// whatever was chosen.
bool bf16_convs_native();
// "auto" (measured, the default), "native" or "f32"; false (and no change)
// for another word. The command sets it from its options before planning.
bool choose_bf16_convs(const std::string& how);
// That choice in words, with its reason: "native bf16 (measured faster
// here)", "f32 between conversions (no bf16 compute on this CPU)", ...
const char* bf16_product_path();
// FLOP/s of an f32 convolution at micro-batch 16 (forward + weight gradient,
// 64 channels, 14x14, 3x3) with the OpenMP threads the process has now,
// measured on each call (~0.25 s; 0 if the primitives cannot be made). The
// fit's step-time estimate scales from it, so it must not follow the
// machine's load: the all-threads timing is the fastest of runs spread over
// 60 ms, and the rate is at least kConvThreadScaling x threads x the
// one-thread rate, timed in that thread's CPU time, because the threads of
// one parallel region rarely run together on a loaded machine (on 2 cores
// beside 2 busy processes the 2-thread timing came out 8x slow while the
// one-thread timing held). Callers keep the
// result (fit/machine_profile.hpp caches it per machine).
inline constexpr double kConvThreadScaling = 0.8;
double conv_flops_per_second();

}  // namespace memfit::kernels::cpu
