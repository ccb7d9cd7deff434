// The options of a training run, and the one place they are checked.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "memfit/optim.hpp"
#include "memfit/runtime.hpp"
#include "models/model.hpp"
#include "train/run_context.hpp"
#include "compile/step_policy.hpp"

namespace memfit::data {
class Dataset;
struct LabelledTexts;
}

namespace memfit::train {


struct TrainOptions {
  std::string model = "convnet";
  std::string data = "/usr/share/datasets/fashion-mnist";
  // Datasets the caller already holds (the Python package's data=(x, y), a
  // torch Dataset's cache file; data/array_dataset.hpp), used in place of
  // --data's files. `data` then names them: "python:<what>#<fingerprint>",
  // the identity the checkpoint records and --resume compares.
  std::shared_ptr<const data::Dataset> train_dataset, test_dataset;
  // Labelled texts the caller holds (a pandas frame's or a Hugging Face
  // split's text and label columns, a list of strings): tokenized by the
  // model's tokenizer exactly as a JSONL or CSV file of the same examples
  // is, in place of --data's files (test_texts: the held-out split; without
  // it --val-fraction holds some out, as for one file).
  std::shared_ptr<const data::LabelledTexts> train_texts, test_texts;
  int64_t epochs = 5;
  int64_t steps = 0;           // > 0: stop after this many optimizer steps
  int64_t batch = 64;          // effective batch of one optimizer step
  std::string init_from;       // weights to start from (safetensors)
  std::vector<std::string> reinit;  // with init_from: layers that keep their fresh init
  std::vector<std::string> freeze;  // parameter patterns that do not train
  // An imported ONNX file: dropout its inference export left out, put back
  // ("[after:]LAYER=P"); a zoo GPT: its dropout probability ("P";
  // models::ResolveOptions).
  std::vector<std::string> dropout;
  models::ResolveOptions resolve_options() const { return {dropout}; }
  // What the run resolves once and shares (run_context.hpp): a new one for
  // new options, the same one in every copy of them.
  std::shared_ptr<RunContext> context = std::make_shared<RunContext>();
  // The model of `model` and `dropout`, read once through the context.
  std::shared_ptr<const models::Model> resolved_model() const { return context->model(model, resolve_options()); }
  bool bias_only = false;      // train biases only
  std::string recompute = "auto";  // none | auto | cheap | segments
  int64_t accumulate = 1;      // micro-batches per step (micro-batch = batch / accumulate)
  // Each parameter updated inside backward once its gradient is complete
  // (StepSpec::update_in_backward): gradients live only until their update.
  // Exact; not with accumulate > 1, --clip-grad-norm or fp16's loss scaling.
  bool update_in_backward = false;
  // --offload: values kept in a file on disk instead of memory
  // (StepPolicy::offload: params, frozen, state, all; "" none), in
  // offload_dir ("" = the run directory, --out).
  std::string offload;
  std::string offload_dir;
  // --offload-ahead (StepPolicy::offload_ahead); -1: the fit's choice (1
  // where there is no fit).
  int64_t offload_ahead = -1;
  DType precision = DType::f32;  // activations: f32, bf16 or f16 (StepSpec::precision)
  bool precision_set = false;    // given by --precision: the fit keeps it
  double loss_scale = 65536.0;   // fp16: initial dynamic loss scale (a power of two)
  DType saved_activations = DType::f32;  // bf16: compress what backward reads (StepSpec::saved)
  DType master_weights = DType::f32;     // bf16: weight matrices stored in bf16 (StepSpec::master_weights)
  bool master_weights_set = false;       // given by --master-weights: the fit keeps it
  DType accumulated_grads = DType::f32;  // bf16: accumulated gradients kept in bf16 (StepPolicy::accumulated_grads)
  bool accumulated_grads_set = false;    // given by --accumulated-grads: the fit keeps it
  int64_t eval_batch = 0;      // 0: same as batch
  double lr = 0.05;
  OptimizerConfig optimizer{.kind = "sgd", .momentum = 0.9, .weight_decay = 5e-4};
  std::string schedule = "cosine";
  int64_t warmup = 0;
  uint64_t seed = 42;
  std::string subset;          // "" all, "2000" count, "0.1" / "10%" fraction
  std::string test_subset;     // same for the test split
  // Where IDX datasets (train and test) live: "memory" (decoded, resident),
  // "disk" (streamed from a raw cache file, see data/idx_stream.hpp) or
  // "auto": memory when the plan fits with it, else disk when that makes it
  // fit or lets the fit pick a faster plan. Image folders are always read
  // from disk. With auto_fit off, auto means memory.
  std::string data_in = "auto";
  // The IDX (disk), token and machine-profile caches' directory. The command
  // fills it when --cache-dir is not given, from what it read of the
  // environment ($MEMFIT_CACHE_DIR, $XDG_CACHE_HOME/memfit, ~/.cache/memfit:
  // src/cli/environment.hpp); "" (a library caller's) = data::fallback_cache_dir().
  std::string cache_dir;
  // The ranks file --tokenizer gpt2 reads; the command fills it from
  // $MEMFIT_GPT2_RANKS ("" = data::built_in_gpt2_ranks()).
  std::string gpt2_ranks;
  int64_t threads = 0;         // 0: all cores
  // bf16 convolutions and linear layers: "auto" (measured: whichever this
  // CPU runs faster), "native" (oneDNN's bf16 primitives) or "f32" (f32
  // primitives between conversions); ops/conv/cpu.hpp. The command applies
  // it (and threads) to the process before planning.
  std::string bf16_convs = "auto";
  std::string winograd = "auto";  // --winograd: auto, off, 2 or 4 (kernels::cpu::choose_winograd)
  std::optional<size_t> memory;
  // --device-memory: the budget of a device with memory of its own (a GPU);
  // unset: its free memory at start less a margin (fit/budget.hpp).
  std::optional<size_t> device_memory;
  std::string out = "runs/latest";
  std::string resume;          // run directory to continue from
  int64_t eval_every = -1;     // > 0: every N steps (and at the end); 0: never; -1: after every epoch
  int64_t checkpoint_every = 0;  // > 0: also every N steps
  bool json = false;
  int progress = -1;           // -1: bar on a terminal, log lines otherwise; 0 lines; 1 bar
  // Text (a language model's --data FILE.txt|DIR): the tokenizer ("char":
  // the corpus's own alphabet), the window length (0: the model's
  // max_sequence) and the share of documents held out for evaluation.
  std::string tokenizer = "char";
  int64_t block_size = 0;
  double val_fraction = 0.1;
  // Text classification: tokens per example (longer ones are truncated,
  // shorter ones padded with an attention mask); 0: 128, or the model's
  // max_sequence when that is shorter.
  int64_t max_len = 0;
  // A header-less CSV's column roles ("label,text,text" for AG News;
  // data::parse_csv_columns); "": the CSV names its columns in a header.
  std::string csv_columns;
  // --task: "lm" or "classify", checked against the model ("": what the
  // model is).
  std::string task;
  int64_t image_size = 0;      // image folders: resize to this square size (0: 32)
  int64_t channels = 0;        // image folders: 1 or 3 (0: 3)
  std::string cifar100_labels = "fine";  // CIFAR-100: its 100 classes (fine) or 20 superclasses (coarse)
  bool augment = false;        // random crop (pad 4) and horizontal flip
  double label_smoothing = 0.0;
  // Where the step runs: a device's name (runtime/device.hpp's
  // device_named: cpu, cuda, the reference devices, one a program
  // registered).
  std::string device = "cpu";
  PlanOptions plan;
  bool plan_only = false;      // stop after printing the plan (memfit plan)
  int64_t profile = 0;         // > 0: time the last `profile` steps kernel by kernel and print the
                               // table (per op kind, per layer) instead of evaluating and saving
  // When the plan exceeds the budget: search micro-batch x accumulation and
  // recomputation for the fastest plan that fits (false: fail instead).
  bool auto_fit = true;
  // The fit may also change the numerics (compact optimizer state: bf16 or
  // 8bit moments), unless --optimizer-state fixes it. Without it the fit
  // keeps them, and a refusal names what would fit with them.
  bool allow_approx = false;
  bool optimizer_state_set = false;  // given by --optimizer-state: the fit keeps it
  // A test seam (MEMFIT_TEST_OOM_AT_STEP, read by the command only): behave
  // as if memory ran out before this step (-1: never; 0: at allocation). The
  // run re-plans with half the micro-batch and continues from that step.
  int64_t inject_oom_at_step = -1;
  bool fitted = false;         // internal: this attempt runs the policy the fit chose
  // SIGINT/SIGTERM finish the current step, write a checkpoint and return
  // with TrainResult::interrupted set; a second signal exits at once (the
  // process's handlers are replaced while run_training runs).
  bool handle_signals = false;
  // Data parallelism over MPI (src/dist, set from the job; `memfit plan
  // --ranks N` sets them to plan rank 0 of N): each rank trains on its share
  // of every global batch of batch x ranks, the gradients are averaged, and
  // with shard_optimizer each rank keeps and updates the optimizer state of
  // 1/ranks of the parameters (ZeRO stage 1), sending them to the others.
  int ranks = 1;
  int rank = 0;
  // The ranks on this machine (the command asks its launcher): a detected
  // budget (not --memory, which is per rank) is split between them.
  int ranks_here = 1;
  bool shard_optimizer = true;
  // With shard_optimizer: each rank keeps only the gradients of its shard
  // past their reduce during backward (ZeRO stage 2; not with accumulate).
  bool shard_gradients = false;
  // Several ranks: reduce each gradient bucket while backward still runs
  // (off: all of them after backward; the same sums either way).
  bool overlap_reduce = true;
  // Flags the user gave (names without "--"): on --resume, the data options
  // not given are taken from the checkpoint, and given ones must match it;
  // validate() refuses a given --eval-every of -1 (the default's meaning).
  std::vector<std::string> given;
};

// v to 8 significant digits ("null" when not finite), for messages and the
// checkpoint's loss scale.
std::string short_num(double v);

// Checks the options that do not need the data or the model: throws
// std::invalid_argument naming the flag and what it expects, the message the
// command prints as a usage error. run_training checks them once, before the
// first plan; the command checks them first, so a slip is a usage error.
void validate(const TrainOptions& o);

// The micro-batch of one forward and backward pass.
inline int64_t micro_batch(const TrainOptions& o) { return o.batch / o.accumulate; }

// The policy these options ask for: the one place the flags become a
// StepPolicy (gradients are sharded only with several ranks, sharded
// optimizer state and one micro-batch).
StepPolicy policy_of(const TrainOptions& o);
// The same options running `p` (a re-plan: what the fit chose); the
// effective batch stays o.batch.
TrainOptions with_policy(TrainOptions o, const StepPolicy& p);

// Half the micro-batch, twice the accumulation: the effective batch, the
// schedule and the step count stay as they were (update in backward, which
// accumulation excludes, is dropped). nullopt when the micro-batch is odd
// or 1.
std::optional<TrainOptions> halved(const TrainOptions& o);
// "micro-batch 32 x 2 (effective batch 64 unchanged)": the policy of h.
std::string halved_note(const TrainOptions& h);

}  // namespace memfit::train
