#include "train/options.hpp"
#include "compile/step_graph.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>
#include <stdexcept>

#include "data/text_classes.hpp"
#include "memfit/recompute.hpp"
#include "memfit/schedule.hpp"
#include "runtime/device.hpp"

namespace memfit::train {
namespace {

bool given(const TrainOptions& o, const char* flag) {
  return std::find(o.given.begin(), o.given.end(), flag) != o.given.end();
}

void fail(const std::string& message) { throw std::invalid_argument(message); }

void validate_optimizer(const OptimizerConfig& c) {
  if (c.kind != "sgd" && c.kind != "adam" && c.kind != "adamw" && c.kind != "adafactor")
    fail("--optimizer expects sgd, adam, adamw or adafactor, got '" + c.kind + "'");
  if (c.state != "fp32" && c.state != "bf16" && c.state != "8bit")
    fail("--optimizer-state expects fp32, bf16 or 8bit, got '" + c.state + "'");
  try {
    check_optimizer(c);
  } catch (const std::invalid_argument& e) {
    fail(std::string("--optimizer-state: ") + e.what());
  }
}

}  // namespace

std::string short_num(double v) {
  if (!std::isfinite(v)) return "null";
  std::ostringstream s;
  s << std::setprecision(8) << v;
  return s.str();
}

void validate(const TrainOptions& o) {
  if (!Schedule::valid_kind(o.schedule)) fail("--schedule expects constant, step or cosine, got '" + o.schedule + "'");
  if (o.batch <= 0) fail("--batch must be positive, got " + std::to_string(o.batch));
  if (o.epochs <= 0) fail("--epochs must be positive, got " + std::to_string(o.epochs));
  if (o.steps < 0) fail("--steps must not be negative, got " + std::to_string(o.steps));
  if (!(o.lr > 0)) fail("--lr must be positive, got " + short_num(o.lr));
  // -1 (after every epoch) is the default's meaning, not a value to give.
  if (o.eval_every < -1 || (o.eval_every == -1 && given(o, "eval-every")))
    fail("--eval-every expects a number of steps, or 0 for no evaluation");
  if (o.accumulate <= 0 || o.batch % o.accumulate) fail("--accumulate must be positive and divide --batch");
  if (o.profile < 0) fail("--profile must be positive");
  if (o.update_in_backward) {
    // Each parameter is updated as soon as its gradient is made: nothing
    // may need all of a step's gradients first.
    if (o.accumulate > 1)
      fail("--update-in-backward updates each parameter as soon as its gradient is made, so it cannot wait for "
           "--accumulate's micro-batches: drop one of the two");
    if (o.optimizer.clip_grad_norm > 0)
      fail("--update-in-backward cannot clip by the global gradient norm (--clip-grad-norm needs every gradient "
           "before the first update): drop one of the two");
    if (o.precision == DType::f16)
      fail("--update-in-backward cannot skip a step whose fp16 gradients overflowed (the loss scaling of --precision "
           "fp16 decides after the whole backward): drop one of the two, or use --precision bf16");
  }
  if (!o.offload.empty() && o.offload != "none") {
    try {
      (void)offload_options(o.offload);
    } catch (const std::invalid_argument& e) {
      fail(e.what());
    }
    if (o.offload_ahead < -1 || o.offload_ahead > 64) fail("--offload-ahead is the number of places of use the copies move ahead: 0 to 64");
    if (o.ranks > 1) fail("--offload runs in one process (the ranks exchange parameters in memory): drop it on several ranks");
  }
  if (o.ranks < 1 || o.rank < 0 || o.rank >= o.ranks)
    fail("--ranks must be positive (and --rank below it), got rank " + std::to_string(o.rank) + " of " +
         std::to_string(o.ranks));
  if (o.ranks > 1) {
    // Every rank takes the same steps on the same plan: nothing may decide
    // on one rank's gradients alone, or re-plan one rank alone.
    if (o.update_in_backward)
      fail("--update-in-backward updates each parameter before the gradients of the other ranks are added: it "
           "cannot run on several ranks");
    if (o.precision == DType::f16)
      fail("--precision fp16's loss scaling skips steps on one rank's overflow: use --precision bf16 on several "
           "ranks");
    if (o.inject_oom_at_step >= 0) fail("MEMFIT_TEST_OOM_AT_STEP re-plans one process: not on several ranks");
    if (o.shard_gradients && !o.shard_optimizer)
      fail("--shard-gradients sends each gradient to the rank that owns its optimizer state: it needs "
           "--shard-optimizer on");
    if (o.shard_gradients && o.accumulate > 1)
      fail("--shard-gradients sends each gradient to its owner during backward, so it cannot wait for "
           "--accumulate's micro-batches: drop one of the two");
    if (o.shard_optimizer && o.optimizer.clip_grad_norm > 0)
      fail("--clip-grad-norm needs the global norm of every gradient, and with sharded optimizer state each rank "
           "updates only its own parameters: pass --shard-optimizer off to clip");
  }
  validate_optimizer(o.optimizer);
  if (o.master_weights == DType::bf16 && o.optimizer.kind == "adafactor")
    fail("--master-weights bf16 takes sgd, adam or adamw; adafactor updates fp32 weights (its relative step reads "
         "the weights' scale): drop one of the two");
  if (o.master_weights == DType::bf16 && o.device == "reference64")
    fail("--master-weights bf16 has no double-precision reference: use the cpu or the f32 reference backend");
  if (o.accumulated_grads == DType::bf16) {
    if (o.optimizer.kind == "adafactor")
      fail("--accumulated-grads bf16 takes sgd, adam or adamw; adafactor reads fp32 gradients: drop one of the two");
    if (o.device == "reference64")
      fail("--accumulated-grads bf16 has no double-precision reference: use the cpu or the f32 reference backend");
    if (o.device == "cuda")
      fail("--accumulated-grads bf16 has no CUDA kernels yet: use --accumulated-grads fp32 with --device cuda");
    if (o.precision == DType::f16)
      fail("--accumulated-grads bf16 cannot be checked for fp16's overflow (the loss scaling reads fp32 gradients): "
           "use --precision bf16, or drop one of the two");
    if (o.ranks > 1)
      fail("--accumulated-grads bf16 runs in one process (the ranks add fp32 gradients): drop it on several ranks");
  }
  if (o.device_memory && o.device != "cuda") {
    size_t free = 0, total = 0;
    bool own = false;
    try {
      own = device_named(o.device).memory_info(free, total);
    } catch (const std::exception&) {
      // (an unknown device is refused by its own check)
    }
    if (!own)
      fail("--device-memory is the budget of a device with memory of its own (a GPU): pass --device cuda with it "
           "(--memory is the host's budget)");
  }
  if (o.device == "cuda" && o.ranks > 1)
    fail("--device cuda runs one process on one GPU so far; data parallelism over GPUs is not built yet");
  if (!valid_recompute_policy(o.recompute))
    fail("--recompute expects none, auto, cheap or segments, got '" + o.recompute + "'");
  if (o.data_in != "auto" && o.data_in != "memory" && o.data_in != "disk")
    fail("--data-in expects memory, disk or auto, got '" + o.data_in + "'");
  if (o.tokenizer != "char" && o.tokenizer != "gpt2" && o.tokenizer.rfind("gpt2:", 0) != 0 &&
      o.tokenizer.rfind("wordpiece:", 0) != 0)
    fail("--tokenizer expects char, gpt2, gpt2:PATH or wordpiece:VOCAB.txt, got '" + o.tokenizer + "'");
  if (!o.task.empty() && o.task != "lm" && o.task != "classify")
    fail("--task expects lm or classify, got '" + o.task + "'");
  if (o.max_len < 0) fail("--max-len must be positive, got " + std::to_string(o.max_len));
  if (o.cifar100_labels != "fine" && o.cifar100_labels != "coarse")
    fail("--cifar100-labels expects fine (the 100 classes) or coarse (the 20 superclasses), got '" +
         o.cifar100_labels + "'");
  data::parse_csv_columns(o.csv_columns);  // throws std::invalid_argument naming the flag
  if (o.block_size < 0) fail("--block-size must be positive, got " + std::to_string(o.block_size));
  if (!(o.val_fraction >= 0 && o.val_fraction < 1))
    fail("--val-fraction expects a fraction in [0, 1), got " + short_num(o.val_fraction));
}

std::optional<TrainOptions> halved(const TrainOptions& o) {
  const int64_t micro = micro_batch(o);
  if (micro < 2 || micro % 2) return std::nullopt;
  TrainOptions r = o;
  r.accumulate *= 2;
  r.update_in_backward = false;
  return r;
}

std::string halved_note(const TrainOptions& h) {
  return "micro-batch " + std::to_string(micro_batch(h)) + " x " + std::to_string(h.accumulate) + " (effective batch " +
         std::to_string(h.batch) + " unchanged)";
}

StepPolicy policy_of(const TrainOptions& o) {
  StepPolicy p;
  p.batch = micro_batch(o);
  p.accumulation = o.accumulate;
  p.recompute = o.recompute;
  p.update_in_backward = o.update_in_backward;
  p.shard_gradients = o.ranks > 1 && o.shard_optimizer && o.shard_gradients && o.accumulate == 1;
  p.precision = o.precision;
  p.saved = o.saved_activations;
  p.optimizer_state = o.optimizer.state;
  p.master_weights = o.master_weights;
  p.accumulated_grads = o.accumulated_grads;
  p.data_in = o.data_in == "auto" ? "" : o.data_in;
  p.offload = o.offload == "none" ? "" : o.offload;
  p.offload_ahead = o.offload_ahead < 0 ? 1 : static_cast<int>(o.offload_ahead);
  return p;
}

TrainOptions with_policy(TrainOptions o, const StepPolicy& p) {
  o.accumulate = p.accumulation;
  o.recompute = p.recompute;
  o.update_in_backward = p.update_in_backward;
  o.shard_gradients = p.shard_gradients;
  o.precision = p.precision;
  o.saved_activations = p.saved;
  if (!p.optimizer_state.empty()) o.optimizer.state = p.optimizer_state;
  o.master_weights = p.master_weights;
  o.accumulated_grads = p.accumulated_grads;
  if (!p.data_in.empty()) o.data_in = p.data_in;
  o.offload = p.offload;
  if (!p.offload.empty()) o.offload_ahead = p.offload_ahead;
  return o;
}

}  // namespace memfit::train
