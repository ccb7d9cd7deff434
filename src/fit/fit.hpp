// Automatic fit: when a run's plan exceeds the budget, search micro-batch
// (with gradient accumulation keeping the effective batch), recomputation,
// activation storage and, without accumulation, update in backward (exact,
// where no global-norm clipping or fp16 loss scaling needs every gradient
// first) for the fastest predicted plan that fits; with --allow-approx also
// compact optimizer state (bf16, 8bit) and bf16 master weights, which change
// the numerics.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memfit/runtime.hpp"
#include "runtime/device.hpp"
#include "runtime/tier_store.hpp"
#include "compile/step_graph.hpp"

namespace memfit::train {

// One policy the search tried, with what the plan and the cost model say of it.
struct FitCandidate {
  StepPolicy policy;             // data_in "" unless residency was searched
  size_t total_bytes = 0;        // predicted peak of the whole process
  double step_flops = 0;         // per optimizer step, recomputation included
  double predicted_seconds = 0;  // cost model, per optimizer step (offload I/O included)
  double io_seconds = 0;         // of which reading and writing the offload tier
  size_t disk_bytes = 0;         // the offload file (a memory space of its own, not in total_bytes)
  std::string describe() const;  // the policy's, its peak and step time
};

struct FitResult {
  std::vector<FitCandidate> fitting;  // fastest first
  FitCandidate smallest;              // the least memory of all candidates tried
  // Of the candidates that fit in memory but whose offload file does not
  // fit on the disk, the one with the smallest file (disk_bytes 0: none).
  FitCandidate over_disk;
};

// Predicted time of one optimizer step on a device of costs `c`
// (Device::step_costs): FLOPs at the device's sustained rate
// (`flops_per_second`, the machine profile's; 0 = unknown, then the
// device's fallback), at an efficiency that falls for micro-batches of few
// rows (`rows`: the rows of its products, images or tokens: rows_per_sample
// times the micro-batch), plus a fixed cost per node run. A model for
// ranking plans, not a promise.
double predict_step_seconds(const StepCosts& c, double flops_per_second, double flops_per_micro, int64_t rows,
                            int64_t accumulate, size_t nodes);

// FLOPs of one run of graph g (the ops' flops functions; recomputation included).
double graph_flops(const Graph& g);

// A step's time with activations stored as `precision` and saved
// activations as `saved`, relative to fp32 (the cost model's factor).
double storage_time_factor(const Device& dev, DType precision, DType saved);

// The rows one sample gives the products: its tokens for a sequence of token
// ids (each is a row of every linear layer), else 1 (an image).
int64_t rows_per_sample(const StepSpec& spec);

// One way to hold the dataset, a dimension of the search: what it adds to
// every plan, and what it costs per training sample.
struct FitData {
  std::string data_in;            // "memory" | "disk"; "" when there is no choice
  size_t fixed_bytes = 0;         // baseline + data pipeline + evaluation with it
  double seconds_per_sample = 0;  // extra time per sample (reading it from disk)
};

// Predicted extra cost of streaming one IDX sample from the disk cache
// instead of memory: a pread from the page cache, measured ~0.2 us over the
// in-memory get() for a 28x28 sample (cold pages cost more), rounded up to
// 1 us. It only breaks ties: streaming wins when it lets a faster plan fit,
// never for the same plan.
inline constexpr double kStreamSecondsPerSample = 1e-6;

// One activation storage choice, a dimension of the search, with its step
// time relative to fp32 (the cost model's factor).
struct FitPrecision {
  DType precision = DType::f32;
  DType saved = DType::f32;
  double time_factor = 1.0;
};

// The choices the search tries when the user did not fix the precision:
// fp32; bf16 (faster than fp32 where this CPU's bf16 convolutions are, else
// ~5% slower: conversions around f32 convolutions, measured on ResNet-18);
// fp32 with bf16 saved activations (~8% for the casts, ResNet-18). fp16 is never chosen
// on its own: this CPU has no faster fp16 arithmetic and it needs loss
// scaling. Ties go to the earlier entry. The bf16 factor is the device's
// (Device::storage_cost).
std::vector<FitPrecision> default_fit_precisions(const Device& dev);

// One optimizer-state and weight storage, a dimension of the search that
// changes the numerics (compact optimizer state, bf16 master weights): only
// with --allow-approx. Its cost is per trainable parameter and step: the
// update decodes and encodes each block (build/bench/optim_bench on GPT-2's
// 124M parameters, one thread: fp32 AdamW ~0.1 s, bf16 ~0.15 s, 8bit ~0.2 s,
// so +0.4 and +0.8 ns); bf16 weights are widened and rounded again in the
// update and widened where a layer reads them in f32 (+0.5 ns, about a
// bf16 state's). bf16 accumulated gradients cost their widening and
// rounding per micro-batch (kBf16AccumulateSeconds per parameter) and are
// tried only with accumulation, in one process, without fp16.
struct FitState {
  std::string state;  // OptimizerConfig::state
  DType weights = DType::f32;  // StepSpec::master_weights
  double seconds_per_param = 0;
  DType grads = DType::f32;  // StepSpec::accumulated_grads
};
constexpr double kBf16AccumulateSeconds = 0.3e-9;

// The storages the search may try with --allow-approx for `cfg`: state
// fp32, bf16 and 8bit for optimizers that keep moments (adam, adamw, sgd
// with momentum) when the state is fp32 now and free (not given), times
// weights fp32 and bf16 when the weights are free and the optimizer takes
// bf16 weights (not adafactor), times accumulated gradients fp32 and bf16
// when they are free (not adafactor); empty when there is no choice.
std::vector<FitState> approx_fit_states(const OptimizerConfig& cfg, bool state_free = true, bool weights_free = true,
                                        bool grads_free = true);

// base: the run's step spec (its batch is the effective batch).
// data: the ways to hold the data, in order of preference (first wins a tie).
// Every plan is tried with every entry; the candidate's policy.data_in
// names the one used when there is more than one.
// precisions: the storage choices to try; empty = base's own.
// states: the optimizer-state storages to try; empty = base's own.
// flops_per_second: the machine profile's rate (predict_step_seconds).
// offloads: StepPolicy::offload sets to try (the tier, a file on disk);
// empty = base's own. Each candidate's time then adds the I/O its plan's
// copies do not hide behind its compute at `tier` speed (tier_io_time);
// an unmeasured tier adds nothing. The offload file is the disk's space:
// a candidate whose file is over tier.available_bytes (where known) does
// not fit, whatever its memory.
// aheads: StepPolicy::offload_ahead values to try with an offload, in order
// of preference (first wins a tie); empty = base's own.
FitResult search_fit(const StepSpec& base, int64_t batch, const std::vector<FitData>& data, size_t budget,
                     const ExecConfig& cfg, double flops_per_second, const std::vector<FitPrecision>& precisions = {},
                     const std::vector<FitState>& states = {}, const std::vector<std::string>& offloads = {},
                     const TierSpeed& tier = {}, const std::vector<int>& aheads = {});

// The offload tier's time in one run of a tiered step graph (one
// micro-batch): `io` seconds of copies at the tier's speed, of which
// `exposed` the step waits for. Simulated along the schedule with two
// clocks: the step's (each node its share of `compute_seconds` by its
// flops, plus the per-node cost) and the I/O thread's (queued copies in
// order); a synchronous copy stops the step for its whole time, a queued
// one only where a tier_wait finds it unfinished.
struct TierTime {
  double io = 0, exposed = 0;
};
TierTime tier_io_time(const Graph& g, const Plan& plan, double compute_seconds, const TierSpeed& tier);
// The offload sets the fit tries when nothing fits in memory, in order of
// the bytes they move: optimizer state, then frozen weights too, then
// everything (trainable parameters).
const std::vector<std::string>& fit_offloads();
// The StepPolicy::offload_ahead values the fit tries: the copies moved one
// place of use ahead (overlapped), then where they are used.
inline std::vector<int> fit_aheads() { return {1, 0}; }

}  // namespace memfit::train
