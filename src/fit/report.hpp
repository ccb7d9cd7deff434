// The memory report printed before step one: every byte of the predicted
// peak by class, against the budget.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "memfit/graph.hpp"
#include "memfit/plan.hpp"
#include "fit/budget.hpp"
#include "compile/step_policy.hpp"

namespace memfit {
class Device;  // runtime/device.hpp
}

namespace memfit::train {

struct MemoryInputs {
  size_t baseline = 0;      // measured: binary, libraries, kernel code, thread stacks
  size_t rss_at_start = 0;  // measured before anything was loaded
  size_t data_bytes = 0;    // dataset in memory + loader buffers
  size_t eval_bytes = 0;    // evaluation's own arenas (0 when it borrows)
  size_t eval_library_heap = 0;  // the evaluation plan's library heap (it runs apart from training steps)
  std::string data_in;      // where the dataset lives: "memory" or "disk" ("" for image folders)
  std::string data_note;    // the "data pipeline" row's note ("" = "dataset in memory + loader buffers")
  std::string data_cache;   // disk: the file samples are read from; text: its token cache
  // Data parallelism: what the MPI library holds for one collective's
  // piece (dist::comm_scratch_bytes), this rank and the job's ranks, and
  // whether the optimizer state is sharded over them.
  size_t comm_bytes = 0;
  int rank = 0, ranks = 1;
  bool sharded = false;
  // An imported model file's weights, held until the parameters are
  // initialised from them and then freed: the peak is at least the
  // baseline, the persistent arena and these (before any activation).
  size_t import_bytes = 0;
  // A device with memory of its own (--device cuda): its name, and what the
  // host holds besides the baseline and data while the arenas live there
  // (a checkpoint's staging copy of the state). The plan's total is then
  // the device's memory, and the host's is reported apart.
  std::string device;
  size_t host_staging = 0;
  // ... and the host RAM's own budget then (--memory, else the container's
  // limit or available memory, less the margin; 0: not checked) and what
  // it is ("cgroup v2 ... minus margin").
  size_t host_budget = 0;
  std::string host_budget_source;
  std::string offload_dir;  // tiered values: the directory of their file
};

struct BufferInfo {
  std::string name, layer;
  size_t bytes = 0;
  std::string kind;  // "saved", "transient", "gradient", "scratch"
};

struct MemoryReport {
  size_t baseline = 0, params = 0, grads = 0, optstate = 0, inputs = 0;
  // A device with memory of its own (MemoryInputs::device): total counts the
  // device's memory (the arenas, evaluation's), host the process's memory
  // (baseline, data pipeline, staging), which is not in the device's budget.
  std::string device;
  size_t host = 0, host_staging = 0;
  size_t host_budget = 0;          // the host RAM's budget under a device (MemoryInputs)
  std::string host_budget_source;
  // True when the host RAM, under a device with memory of its own, holds
  // more than its budget (the device's memory is checked against the plan's).
  bool host_over() const { return !device.empty() && host_budget > 0 && host > host_budget; }
  size_t import_bytes = 0;    // an imported file's weights until the parameters hold them (MemoryInputs)
  size_t arena = 0;           // the transient arena
  size_t saved = 0;           // at the arena's peak: forward values kept for backward
  size_t transient = 0;       // ... other live activations and gradients
  size_t arena_grads = 0;     // ... parameter gradients (update in backward plans them here)
  size_t scratch = 0;         // ... kernel scratch
  size_t fragmentation = 0;   // arena - (saved + transient + arena_grads + scratch)
  // Update in backward: the bytes every parameter gradient would take in
  // the gradients arena, and the most of them live in the activations arena
  // at once (0 when gradients have their own arena).
  bool update_in_backward = false;
  // Sharded gradients (ZeRO stage 2): the gradients arena holds this rank's
  // shard; the others' are in the activations arena until their reduce.
  bool grads_sharded = false;
  size_t grads_unfused = 0, grads_live = 0;
  size_t library_heap = 0;    // the largest heap a kernel's library takes inside one run
  // The parameter, gradient, optimizer-state and input arenas rounded up to
  // whole pages, as the executor allocates them (the activations arena is
  // counted in pages already).
  size_t rounding = 0;
  // The offload tier (StepPolicy::offload): bytes of the tiered values on
  // disk (not memory: not in total), what a step reads and writes there,
  // the copies of them live at the arena's peak, and the store's I/O
  // buffer (memory, in total).
  size_t tier = 0, tier_read = 0, tier_written = 0, tier_copies = 0, tier_buffer = 0;
  // The tier's speed measured in its directory (bytes/s; 0 = not measured)
  // and a step's reads and writes at it (in predicted_step_seconds too).
  double tier_read_bps = 0, tier_write_bps = 0, tier_io_seconds = 0;
  // Of tier_io_seconds, what the step waits for (the rest overlaps its
  // compute on the tier's I/O thread), and how far ahead the copies move
  // (StepPolicy::offload_ahead).
  double tier_exposed_seconds = 0;
  int tier_ahead = 0;
  std::string offload_dir;
  // What the offload directory's file system has available for the file
  // (with a file this run reopens, that file's own size); 0 = not known.
  size_t tier_disk_available = 0;
  size_t data = 0, eval = 0;
  size_t comm = 0;
  int rank = 0, ranks = 1;
  bool sharded = false;
  std::string data_in, data_note, data_cache;  // as in MemoryInputs
  std::optional<StepPolicy> policy;  // the policy this plan runs with (none: a bare graph's plan)
  bool fitted = false;            // chosen by the fit (over budget as asked)
  // The machine the plan is for: its processor, the instruction set oneDNN
  // and memfit's own loops run, and (bf16/fp16 runs) how the convolutions
  // and linear layers compute. Empty when not known.
  std::string cpu_model, onednn, onednn_isa, vector_isa;
  bool bf16_compute = false;
  std::string products;  // e.g. "f32 between conversions (no bf16 compute on this CPU)"
  // The step-time estimate (the fit's cost model) and the measured rate it
  // scales from: "measured" now or "cached" from the machine profile;
  // speed_source "" when the device has no measurement.
  double flops_per_second = 0, step_flops = 0, predicted_step_seconds = 0;
  // A step's time with bf16 activations relative to fp32 on this device
  // (Device::storage_cost): what the fit weighs bf16 by.
  double bf16_step_cost = 1.0;
  std::string speed_source;
  // The optimizer state's policy ("fp32", "bf16", "8bit", "adafactor
  // factored"; "" without an update), the trainable parameter elements it
  // serves, and what the same parameters' moments would take in fp32 as
  // planned (adafactor: Adam's two moments), to show the policy's effect.
  std::string optstate_policy;
  // bf16 master weights: the weights' storage ("fp32" | "bf16") and what the
  // parameters would take in fp32.
  std::string master_weights = "fp32";
  std::string accumulated_grads = "fp32";  // bf16: the accumulated gradients (StepPolicy::accumulated_grads)
  size_t params_fp32 = 0;
  int64_t trainable = 0;
  size_t optstate_fp32 = 0;
  size_t total = 0;
  size_t naive = 0;           // the same run with every buffer its own memory
  std::vector<BufferInfo> largest;  // ten largest transient buffers
  // What is live at the arena's peak, by the op that made it (attention,
  // matmul, xent_rows_bwd, scratch of ...), largest first.
  std::vector<std::pair<std::string, size_t>> peak_by_op;
};

// A buffer of the activations arena as planned: a value's own buffer (views
// and in-place outputs share it) or a node's kernel scratch, with where it
// sits and when it is live (schedule indices, clamped to the step: `first`
// 0 for a value from before the step, `last` the number of nodes for one
// kept after it).
struct ArenaBuffer {
  std::string name;   // the value's name, or "scratch of <op>"
  std::string op;     // the op that writes it ("input": none in the step)
  std::string layer;  // that node's layer ("" for an input)
  std::string kind;   // "saved", "transient", "gradient", "scratch"
  size_t offset = 0, bytes = 0;
  int32_t first = 0, last = 0;
};
// Every non-empty buffer of p's transient arena: the values' in value
// order, then the scratch in node order.
std::vector<ArenaBuffer> arena_buffers(const Graph& g, const Plan& p);

// A memory the plan places bytes in: the host's RAM, a device's own memory,
// the offload tier's disk. Each has its budget and where that comes from;
// a budget of 0 is not checked by the plan (the host's RAM under a GPU
// run, a disk whose free space is not known).
struct MemorySpace {
  std::string name;    // "host RAM", "<device> memory", "disk"
  std::string kind;    // "host", "device", "disk"
  size_t bytes = 0;    // what the plan puts there at its peak
  size_t budget = 0;
  std::string source;  // what the budget is
  std::string holds;   // what the plan puts there
  bool fits() const { return budget == 0 || bytes <= budget; }
};
// The plan's memory spaces: the one the budget is for first (the host's
// RAM, or a device's memory with the host's RAM after it), then the
// offload tier's disk when values are offloaded.
std::vector<MemorySpace> memory_spaces(const MemoryReport& r, const Budget& b);

// Fills the report's machine fields (cpu_model ... products) from the
// device a run at this activation precision computes on (Device::info,
// product_path; bf16 on the CPU measures the convolution path once).
void describe_machine(MemoryReport& r, const Device& dev, DType precision);
MemoryReport make_report(const Graph& g, const Plan& p, const MemoryInputs& in);
// Transient bytes without reuse over the planned arena.
double reuse_factor(const MemoryReport& r);
std::string format_report(const MemoryReport& r, const Budget& b, const std::string& model, int64_t batch,
                          const std::string& optimizer, const std::string& backend);
// "activations 120.3 MiB, params 12.0 MiB, ..." (the k largest classes).
std::string largest_classes(const MemoryReport& r, size_t k);
// Why a plan does not fit, before anything is allocated: the predicted
// peak, the budget and where it came from, the largest classes, and the
// smallest budget that would work (as a --memory value).
std::string over_budget_message(const MemoryReport& r, const Budget& b);
// Why a plan whose device memory fits does not fit the host's RAM
// (MemoryReport::host_over): the host's bytes by part, its budget and
// source, and the smallest --memory that would do.
std::string host_over_budget_message(const MemoryReport& r);
// One JSON object: total_bytes, by_class, naive_bytes, budget, largest
// buffers, and data_in / data_cache when known.
std::string report_json(const MemoryReport& r, const Budget& b);

}  // namespace memfit::train
