#include "train/train_loop.hpp"

#include "dist/comm.hpp"

#include <cstdlib>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <ostream>
#include <stdexcept>
#include <string>

#include "runtime/device.hpp"
#include "base/json.hpp"
#include "runtime/tier_store.hpp"
#include "base/bytes.hpp"
#include "base/process.hpp"

namespace memfit::train {
namespace {

volatile std::sig_atomic_t g_signal = 0;

extern "C" void on_stop_signal(int sig) {
  if (g_signal) ::_exit(128 + sig);
  g_signal = sig;
}

// Optimizer steps per epoch; a last group of fewer than `accumulate`
// micro-batches is dropped, as drop_last drops a partial batch.
int64_t steps_per_epoch(const data::Loader& loader, const TrainOptions& o, const data::Dataset& train) {
  const int64_t per_epoch = static_cast<int64_t>(loader.batches_per_epoch()) / o.accumulate;
  if (per_epoch == 0)
    throw std::invalid_argument("the training set (" + std::to_string(train.size()) + " samples) is smaller than one batch of " +
                                std::to_string(o.batch));
  return per_epoch;
}

std::unique_ptr<data::Loader> test_loader_of(const RunPlan& p) {
  return p.data.test ? std::make_unique<data::Loader>(*p.data.test, p.test_loader) : nullptr;
}

}  // namespace

SignalScope::SignalScope(bool enable) : on_(enable) {
  g_signal = 0;  // a request left by an earlier run in this process is not this run's
  if (!on_) return;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, &old_int_);
  ::sigaction(SIGTERM, &sa, &old_term_);
}

SignalScope::~SignalScope() {
  if (!on_) return;
  ::sigaction(SIGINT, &old_int_, nullptr);
  ::sigaction(SIGTERM, &old_term_, nullptr);
}

int stop_signal() { return g_signal; }

void request_stop(int sig) { g_signal = sig; }

TrainLoop::TrainLoop(RunPlan& p, std::ostream& log)
    : p_(p),
      o_(p.options),
      log_(log),
      ex_(*p.train_ex),
      loader_(*p.data.train, p.train_loader),
      test_loader_(test_loader_of(p)),
      scaler_(o_.precision == DType::f16, o_.loss_scale),
      inputs_(ex_, *p.train_g),
      eval_inputs_(*p.eval_ex, *p.eval_g),
      eval_metrics_(*p.eval_ex, *p.eval_g),
      dp_(*p.train_ex, dist::Comm::world(), p.options.shard_optimizer) {
  dp_.set_overlap(p.options.overlap_reduce);
  if (dp_.active()) ctx_.comm = &dp_;  // the step's grad_reduce nodes (sharded gradients)
  if (dist::Comm::world().size() != o_.ranks)
    throw std::logic_error("the run was planned for " + std::to_string(o_.ranks) + " ranks, the job has " +
                           std::to_string(dist::Comm::world().size()));
  const int64_t per_epoch = steps_per_epoch(loader_, o_, *p.data.train);
  const Graph& g = p.train_g->g;
  // The update also waits for the other ranks' gradients.
  update_node_ = o_.accumulate > 1 || scaler_.enabled() || dp_.active() ? update_begin(g) : g.num_nodes();
  total_steps_ = o_.steps > 0 ? o_.steps : o_.epochs * per_epoch;
  sched_.kind = o_.schedule;
  sched_.base_lr = o_.lr;
  sched_.warmup = o_.warmup;
  sched_.total = total_steps_;
  sched_.step_every = std::max<int64_t>(1, total_steps_ / 3);

  st_.model = o_.model;
  st_.seed = o_.seed;
  st_.extra["batch"] = std::to_string(o_.batch);
  st_.extra["accumulate"] = std::to_string(o_.accumulate);
  st_.extra["optimizer"] = o_.optimizer.kind;
  st_.extra["optimizer_state"] = o_.optimizer.state;
  st_.extra["master_weights"] = o_.master_weights == DType::bf16 ? "bf16" : "fp32";
  st_.extra["dataset_size"] = std::to_string(p.data.train->size());
  // The optimizer state's shards: a sharded checkpoint resumes on as many
  // ranks; a whole one on any number (with --shard-optimizer off).
  st_.extra["optimizer_shards"] = std::to_string(dp_.sharded() ? dp_.ranks() : 1);
  st_.extra["ranks"] = std::to_string(dp_.ranks());
  // The data options, so that --resume can take them when not given.
  st_.extra["data"] = o_.data;
  st_.extra["subset"] = o_.subset;
  st_.extra["test_subset"] = o_.test_subset;
  st_.extra["image_size"] = std::to_string(o_.image_size);
  st_.extra["channels"] = std::to_string(o_.channels);
  st_.extra["cifar100_labels"] = o_.cifar100_labels;
  if (p.data.tokenizer) {
    st_.extra["tokenizer"] = o_.tokenizer;
    st_.extra["block_size"] = std::to_string(o_.block_size);
    st_.extra["val_fraction"] = short_num(o_.val_fraction);
    st_.extra["max_len"] = std::to_string(o_.max_len);
    st_.extra["csv_columns"] = o_.csv_columns;
  }
  if (!o_.resume.empty()) {
    if (dp_.active()) resume_rank();
    else resume();
  }

  if (p.train_g->task == models::Task::LanguageModel) tokens_per_sample_ = p.train_g->inputs.back().spec.shape.at(0);
  // Samples of token ids (a text classifier's) are sequences, not images.
  const bool sequences = !tokens_per_sample_ && !p.train_g->inputs.empty() &&
                         p.train_g->inputs.front().spec.dtype == DType::i32;
  prog_.emplace(log_, o_.progress, total_steps_, p.budget.bytes,
                tokens_per_sample_ ? "tok" : sequences ? "seq" : "img");
  if (lead()) {
    metrics_.open(o_.out + "/metrics.jsonl", std::ios::app);
    steps_.open(o_.out, !o_.resume.empty());
  }
  res_ = planned_result(p);
  res_.sequences = sequences;
  ctx_.seed = o_.seed;
  scaler_.restore(st_.extra);
  record_steps_ = lead() && !dp_.active() && ex_.tier() && ex_.tier()->kept();
  if (record_steps_) {
    const std::string before = step_record_file(o_.out, true);
    if (before != ex_.tier()->path()) stale_offload_ = before;
  }
  if (scaler_.enabled()) grads_ = std::make_unique<GradientCheck>(ex_, update_node_);
}

void TrainLoop::resume() {
  // The optimizer and its state format before any tensor: a checkpoint of
  // another one holds other tensors (or the same names in other types).
  // State is resumed as it was stored, never converted; a checkpoint from
  // before --optimizer-state holds fp32 state.
  // A kept offload file reopened: the step record is the later state.
  const bool from_record = !ex_.config().tier_reopen.empty();
  std::map<std::string, std::string> meta = resume_metadata(o_.resume);
  if (!meta.empty()) {
    const std::string state = meta.count("optimizer_state") ? meta["optimizer_state"] : "fp32";
    if (meta.count("optimizer") && meta["optimizer"] != o_.optimizer.kind)
      throw std::runtime_error("cannot resume from " + o_.resume + ": it was trained with optimizer " +
                               meta["optimizer"] + ", this run has " + o_.optimizer.kind + "; pass --optimizer " +
                               meta["optimizer"]);
    if (state != o_.optimizer.state)
      throw std::runtime_error("cannot resume from " + o_.resume + ": its optimizer state is stored as " + state +
                               ", this run's as " + o_.optimizer.state + "; pass --optimizer-state " + state +
                               " (a run keeps the state format it started with: its moments are resumed as stored)");
    const std::string shards = meta.count("optimizer_shards") ? meta["optimizer_shards"] : "1";
    if (shards != st_.extra["optimizer_shards"])
      throw std::runtime_error(
          "cannot resume from " + o_.resume + ": " +
          (shards == "1" ? std::string("it holds the whole optimizer state (one process, or --shard-optimizer off)")
                         : "its optimizer state is sharded over " + shards + " ranks") +
          ", this run's is " +
          (st_.extra["optimizer_shards"] == "1" ? std::string("whole")
                                                 : "sharded over " + st_.extra["optimizer_shards"] + " ranks") +
          "; " +
          (shards == "1" ? std::string("pass --shard-optimizer off") : "run it with mpirun -np " + shards) +
          " (a sharded checkpoint resumes on as many ranks, a whole one on any number)");
    const std::string weights = meta.count("master_weights") ? meta["master_weights"] : "fp32";
    if (weights != st_.extra["master_weights"])
      throw std::runtime_error("cannot resume from " + o_.resume + ": its weights are stored as " + weights +
                               ", this run's as " + st_.extra["master_weights"] + "; pass --master-weights " + weights);
  }
  TrainState r = from_record ? load_step_record(o_.resume, ex_) : load_checkpoint(o_.resume, ex_);
  // The global batch (each rank's times the ranks) decides the steps: a
  // whole checkpoint resumes on any number of ranks that divides it.
  auto count = [](const std::string& v) { return v.empty() ? int64_t(1) : std::strtoll(v.c_str(), nullptr, 10); };
  const int64_t ck_global = count(r.extra["batch"]) * count(r.extra["ranks"]);
  const int64_t global = o_.batch * dp_.ranks();
  if (ck_global != global) {
    const std::string per =
        ck_global % dp_.ranks() == 0 ? "pass --batch " + std::to_string(ck_global / dp_.ranks())
                                     : "run it on a number of ranks that divides " + std::to_string(ck_global);
    throw std::runtime_error("cannot resume from " + o_.resume + ": it was trained with batch " + r.extra["batch"] +
                             (count(r.extra["ranks"]) > 1 ? " per rank on " + r.extra["ranks"] + " ranks" : "") +
                             ", this run has " + std::to_string(o_.batch) +
                             (dp_.ranks() > 1 ? " per rank on " + std::to_string(dp_.ranks()) + " ranks" : "") + "; " +
                             per);
  }
  for (const char* k : {"optimizer", "dataset_size"})
    if (r.extra[k] != st_.extra[k]) {
      const std::string flag = std::string(k) == "dataset_size" ? "subset" : k;
      throw std::runtime_error("cannot resume from " + o_.resume + ": it was trained with " + k + " " + r.extra[k] +
                               ", this run has " + st_.extra[k] + "; pass --" + flag + " " + r.extra[k] +
                               (flag == "subset" ? " (the number of samples it trained on)" : ""));
    }
  if (r.seed != o_.seed) throw std::runtime_error("cannot resume from " + o_.resume + ": it used --seed " + std::to_string(r.seed));
  st_.step = r.step;
  if (r.extra.count("loss_scale")) {
    st_.extra["loss_scale"] = r.extra["loss_scale"];
    st_.extra["loss_scale_good"] = r.extra["loss_scale_good"];
  }
  st_.epoch = r.epoch;
  st_.sample = r.sample;
  data::Position p{r.epoch, r.sample};
  if (p.sample >= loader_.epoch_size()) p = {p.epoch + 1, 0};
  loader_.seek(p);
  log_ << "resumed from " << o_.resume << (from_record ? "'s step record" : "") << " at step " << st_.step
       << " (epoch " << p.epoch + 1 << ")\n";
}

// Rank 0 resumes as one process does (every check, its file); the ranks
// then agree on the position, take rank 0's parameters (and whole
// optimizer state), and each sharded rank loads its own shard of the step.
void TrainLoop::resume_rank() {
  if (lead()) resume();
  dist::Comm& c = dist::Comm::world();
  int64_t pos[3] = {st_.step, static_cast<int64_t>(st_.epoch), static_cast<int64_t>(st_.sample)};
  c.broadcast(pos, sizeof pos, 0);
  dp_.broadcast_state();
  if (!lead()) {
    st_.step = pos[0];
    st_.epoch = static_cast<uint64_t>(pos[1]);
    st_.sample = static_cast<uint64_t>(pos[2]);
    if (dp_.sharded()) {
      const std::string path = shard_checkpoint_path(o_.resume, dp_.rank(), st_.step);
      TrainState s = load_state_shard(path, ex_);
      if (s.step != st_.step) throw std::runtime_error(path + " holds step " + std::to_string(s.step));
    }
    data::Position p{st_.epoch, st_.sample};
    if (p.sample >= loader_.epoch_size()) p = {p.epoch + 1, 0};
    loader_.seek(p);
  }
}

std::variant<TrainResult, Replan> TrainLoop::run() {
  const auto t_start = Clock::now();
  while (st_.step < total_steps_) {
    // Every rank stops at the same step (a signal reaches them at different times).
    const int stop = group_ == 0 ? dp_.any_stop(stop_signal()) : 0;
    if (stop) {
      res_.interrupted = stop;
      break;
    }
    const auto t0 = Clock::now();
    const size_t n = inputs_.next(loader_);
    if (n == 0) {  // end of an epoch; an unfinished accumulation group is dropped
      group_ = 0;
      group_loss_ = 0.0;
      // The loader has moved to the next epoch: its index is the number of
      // epochs finished, the 1-based number of the one that just ended.
      const uint64_t finished = loader_.position().epoch;
      dp_.check_identical("end of epoch " + std::to_string(finished));
      if (o_.eval_every < 0) eval_and_record(finished);
      checkpoint();
      continue;
    }
    if (group_ == 0 && st_.step == o_.inject_oom_at_step && st_.step > 0) return injected_oom(n);
    run_micro_batch(n, t0);
  }
  finish(t_start);
  return std::move(res_);
}

void TrainLoop::run_micro_batch(size_t n, Clock::time_point t0) {
  ctx_.step = st_.step;
  ctx_.lr = sched_.lr(st_.step);
  ctx_.micro = group_;
  ctx_.row0 = (group_ * dp_.ranks() + dp_.rank()) * micro_batch(o_);
  ctx_.grad_scale = 1.0 / scaler_.scale();  // for an update that runs within this call (accumulate 1, no scaling)
  ctx_.loss_scale = scaler_.scale();
  if (o_.profile > 0 && group_ == 0 && st_.step == total_steps_ - o_.profile) ex_.set_profiling(true);
  if (group_ + 1 == o_.accumulate) {
    // The group's last micro-batch: several ranks reduce the gradients while backward runs.
    dp_.run_backward(update_node_, ctx_);
  } else {
    ex_.run_nodes(0, update_node_, ctx_);
  }
  group_loss_ += ex_.fetch_scalar(p_.train_g->loss);
  images_ += static_cast<int64_t>(n) * dp_.ranks();  // the job's samples
  if (++group_ < o_.accumulate) {
    train_seconds_ += std::chrono::duration<double>(Clock::now() - t0).count();
    return;
  }
  end_group(t0);
}

void TrainLoop::end_group(Clock::time_point t0) {
  // Several ranks: the update reads the sum of their gradients; the mean is the step's.
  ctx_.grad_scale = 1.0 / (static_cast<double>(o_.accumulate) * scaler_.scale() * dp_.ranks());
  const auto c0 = Clock::now();
  dp_.reduce_gradients();
  comm_seconds_ += std::chrono::duration<double>(Clock::now() - c0).count();
  bool skip = false;
  if (scaler_.enabled())
    if (auto skipped = scaler_.record(grads_->all_finite(), st_.step)) {
      skip = true;
      prog_->message(*skipped);
    }
  if (!skip) ex_.run_nodes(update_node_, p_.train_g->g.num_nodes(), ctx_);
  const auto c1 = Clock::now();
  dp_.share_parameters();
  comm_seconds_ += std::chrono::duration<double>(Clock::now() - c1).count();
  if (o_.plan.guard_bytes && !ex_.guards_intact())
    throw std::logic_error("guard bytes after " + ex_.broken_guard() + " overwritten in step " +
                           std::to_string(st_.step) + ": a kernel wrote outside its planned buffer");
  last_loss_ = dp_.mean(group_loss_ / static_cast<double>(o_.accumulate));
  group_ = 0;
  group_loss_ = 0.0;
  if (!std::isfinite(last_loss_))
    throw std::runtime_error("training diverged at step " + std::to_string(st_.step) + " (loss " + short_num(last_loss_) +
                             "); lower --lr or use --clip-grad-norm");
  loss_sum_ += last_loss_;
  ++loss_n_;
  ++st_.step;
  if (record_steps_) record_step();
  train_seconds_ += std::chrono::duration<double>(Clock::now() - t0).count();
  if (first_seconds_ < 0) {
    first_seconds_ = train_seconds_;
    first_images_ = images_;
  }
  prog_->step(st_.step, last_loss_, images_per_second() * static_cast<double>(std::max<int64_t>(1, tokens_per_sample_)),
              current_rss());
  if (lead() && StepLog::due(st_.step, total_steps_))
    steps_.record(st_.step, loader_.position().epoch + 1, last_loss_, images_, train_seconds_, tokens_per_sample_);
  if (o_.eval_every > 0 && st_.step % o_.eval_every == 0) eval_and_record(loader_.position().epoch + 1);
  if (o_.checkpoint_every > 0 && st_.step % o_.checkpoint_every == 0) checkpoint();
}

// As if memory ran out before this step: keep the last completed step,
// re-plan with half the micro-batch, continue from it.
Replan TrainLoop::injected_oom(size_t n) {
  auto h = halved(o_);
  if (!h) throw std::runtime_error("out of memory at step " + std::to_string(st_.step) +
                                   " and the micro-batch cannot be halved further");
  loader_.seek(data::Position{loader_.position().epoch, loader_.position().sample - n});
  checkpoint();
  h->inject_oom_at_step = -1;
  h->resume = o_.out;
  h->init_from.clear();
  prog_->finish();
  log_ << "memfit: out of memory at step " << st_.step << "; saved the state after step " << st_.step
       << ", re-planning with " << halved_note(*h) << " and continuing\n";
  return Replan{*h};
}

TrainLoop::EvalResult TrainLoop::evaluate() {
  data::Loader& loader = *test_loader_;
  loader.seek({0, 0});
  kernels::StepContext ctx;
  eval_metrics_.reset();
  while (!stop_signal() && eval_inputs_.next(loader)) {
    p_.eval_ex->run(ctx);
    eval_metrics_.add();
  }
  EvalResult r;
  r.count = static_cast<size_t>(eval_metrics_.count());
  r.loss = eval_metrics_.loss();
  r.accuracy = eval_metrics_.accuracy();
  return r;
}

void TrainLoop::eval_and_record(uint64_t epoch) {
  if (!test_loader_ || !lead()) return;  // rank 0 evaluates for the job (the parameters are the same)
  EvalResult e = evaluate();
  if (stop_signal()) return;  // cut short: nothing to record
  res_.evaluated = true;
  res_.test_loss = e.loss;
  res_.test_accuracy = e.accuracy;
  const double tl = loss_n_ ? loss_sum_ / static_cast<double>(loss_n_) : last_loss_;
  // A classifier reports accuracy; a language model the perplexity of its
  // per-token loss (its rows are tokens).
  const bool lm = p_.eval_g->task == models::Task::LanguageModel;
  const std::string score = lm ? " test_perplexity " + short_num(std::exp(e.loss))
                               : " test_accuracy " + short_num(e.accuracy);
  prog_->message("eval step " + std::to_string(st_.step) + (lm ? ": val_loss " : ": test_loss ") + short_num(e.loss) + score + " (" +
                 std::to_string(e.count) + (lm ? " tokens)" : p_.data.train->is_image() ? " images)" : " examples)"));
  Json line = {{"epoch", epoch}, {"step", st_.step}, {"train_loss", tl}, {"test_loss", e.loss}};
  if (lm)
    line["test_perplexity"] = std::exp(e.loss);
  else
    line["test_accuracy"] = e.accuracy;
  line["images_per_second"] = images_per_second();  // samples: images, sequences or windows
  if (lm) line["tokens_per_second"] = images_per_second() * static_cast<double>(tokens_per_sample_);
  line["peak_rss_bytes"] = peak_rss();
  line["planned_peak_bytes"] = p_.report.total;
  if (!p_.report.device.empty()) line["planned_host_bytes"] = p_.report.host;
  metrics_ << json_line(line) << "\n";
  metrics_.flush();
  loss_sum_ = 0.0;
  loss_n_ = 0;
}

void TrainLoop::checkpoint() {
  data::Position p = loader_.position();
  st_.epoch = p.epoch;
  st_.sample = p.sample;
  scaler_.save(st_.extra);
  if (!dp_.active()) {
    save_checkpoint(o_.out, ex_, st_);
    return;
  }
  // The shards first, then rank 0's file, which commits the step; a shard
  // of an older step goes only once the step after it is committed.
  dist::Comm& c = dist::Comm::world();
  if (dp_.sharded() && !lead()) save_state_shard(shard_checkpoint_path(o_.out, dp_.rank(), st_.step), ex_, st_);
  c.barrier();
  if (lead()) save_checkpoint(o_.out, ex_, st_);
  c.barrier();
  if (dp_.sharded() && !lead()) remove_other_shards(o_.out, dp_.rank(), st_.step);
}

void TrainLoop::record_step() {
  const data::Position p = loader_.position();
  st_.epoch = p.epoch;
  st_.sample = p.sample;
  scaler_.save(st_.extra);
  save_step_record(o_.out, ex_, st_);
  if (!stale_offload_.empty()) {
    ::unlink(stale_offload_.c_str());
    stale_offload_.clear();
  }
}

void TrainLoop::drop_offload_file() {
  if (!lead() || dp_.active()) return;
  remove_step_record(o_.out);  // (a record an earlier attempt left, too)
  if (record_steps_) ::unlink(ex_.tier()->path().c_str());  // (if no record named it)
}

double TrainLoop::images_per_second() const {
  return train_seconds_ > 0 ? static_cast<double>(images_) / train_seconds_ : 0.0;
}

void TrainLoop::finish(Clock::time_point t_start) {
  if (res_.interrupted) {  // a signal: save the last finished step, nothing else
    checkpoint();
    drop_offload_file();  // the checkpoint holds the same step
    prog_->finish();
  } else if (o_.profile > 0) {  // --profile: the table instead of the final evaluation and checkpoint
    prog_->finish();
    log_ << profile_report(ex_, ex_.node_seconds(), std::min(o_.profile, st_.step));
  } else {
    // The last step may end mid-epoch (--steps): evaluate and save once more.
    // --eval-every 0: no evaluation at all.
    if (o_.eval_every != 0 && (!res_.evaluated || loss_n_ > 0)) eval_and_record(loader_.position().epoch + 1);
    checkpoint();
    drop_offload_file();
    prog_->finish();
  }

  dp_.check_identical("end of training");
  res_.steps = st_.step;
  res_.skipped_steps = scaler_.skipped_steps();
  res_.loss_scale = scaler_.scale();
  res_.final_train_loss = last_loss_;
  res_.seconds = std::chrono::duration<double>(Clock::now() - t_start).count();
  res_.images_per_second = images_per_second();
  res_.tokens_per_second = images_per_second() * static_cast<double>(tokens_per_sample_);
  if (first_seconds_ >= 0) {
    res_.first_step_seconds = first_seconds_;
    const double warm = train_seconds_ - first_seconds_;
    if (images_ > first_images_ && warm > 0) {
      res_.warm_images_per_second = static_cast<double>(images_ - first_images_) / warm;
      res_.warm_tokens_per_second = res_.warm_images_per_second * static_cast<double>(tokens_per_sample_);
    }
  }
  res_.peak_rss_bytes = peak_rss();
  if (dp_.active()) {
    dist::Comm& c = dist::Comm::world();
    for (uint64_t v : c.allgather(res_.peak_rss_bytes)) res_.rank_peak_rss_bytes.push_back(static_cast<size_t>(v));
    for (uint64_t v : c.allgather(p_.report.total)) res_.rank_planned_peak_bytes.push_back(static_cast<size_t>(v));
    res_.comm_bytes_per_step = dp_.bytes_per_step();
    res_.comm_seconds = comm_seconds_ + dp_.seconds_in_backward();
    res_.comm_buckets = dp_.buckets();
    res_.comm_buckets_overlapped = dp_.buckets_overlapped();
  }
  // A device with memory of its own: what it holds now beyond the free
  // memory the plan was made with (the arenas, and kernel code its first
  // launches loaded) against the plan's device total.
  if (!p_.report.device.empty()) {
    size_t free = 0, total = 0;
    if (ex_.device().memory_info(free, total) && p_.device_free_at_plan >= free) {
      res_.device_planned_bytes = p_.report.total;
      res_.device_used_bytes = p_.device_free_at_plan - free;
    }
  }
  // The plan is a promise: say so when the process went past it (on a
  // device, the host's part of it).
  const size_t planned = p_.report.device.empty() ? p_.report.total : p_.report.host, peak = res_.peak_rss_bytes;
  if (peak > planned + planned / 33) {
    const size_t over = peak - planned;
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "memfit: warning: the measured peak RSS %s is %s (%.1f%%) over the plan's %s%s; please report it "
                  "with the plan above\n",
                  format_bytes(peak).c_str(), format_bytes(over).c_str(),
                  100.0 * static_cast<double>(over) / static_cast<double>(planned), format_bytes(planned).c_str(),
                  peak > p_.budget.bytes ? (", and over the budget of " + format_bytes(p_.budget.bytes)).c_str() : "");
    log_ << buf;
  }
}

}  // namespace memfit::train
