#include "train/trainer.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <ctime>
#include <ostream>
#include <variant>

#include <malloc.h>

#include "dist/comm.hpp"
#include "models/onnx/model.hpp"
#include "base/json.hpp"
#include "memfit/rng.hpp"
#include "persist/checkpoint.hpp"
#include "train/run_data.hpp"
#include "report/run_log.hpp"
#include "train/run_plan.hpp"
#include "report/run_report.hpp"
#include "train/train_loop.hpp"

namespace fs = std::filesystem;

namespace memfit::train {
namespace {

// The run as plan.json heads it (report/run_log.hpp).
std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Json run_header(const RunPlan& p) {
  const TrainOptions& o = p.options;
  const bool lm = p.train_g->task == models::Task::LanguageModel;
  const StepPolicy pol = policy_of(o);
  Json run = {{"model", o.model},
              {"data", o.data},
              {"task", lm ? "language_model" : "classification"},
              {"samples", lm ? "windows" : p.data.train->is_image() ? "images" : "sequences"},
              {"batch", o.batch},
              {"micro_batch", pol.batch},
              {"accumulate", pol.accumulation},
              {"precision", precision_name(pol.precision)},
              {"saved_activations", precision_name(pol.saved)},
              {"optimizer", o.optimizer.kind},
              {"optimizer_state", pol.optimizer_state},
              {"lr", o.lr},
              {"schedule", o.schedule},
              {"recompute", pol.recompute},
              {"update_in_backward", pol.update_in_backward},
              {"backend", o.device},
              {"threads", o.threads},
              {"ranks", o.ranks},
              {"optimizer_sharded", o.ranks > 1 && o.shard_optimizer},
              {"steps", o.steps},
              {"epochs", o.epochs},
              {"train_samples", p.data.train->size()},
              {"resumed_from", o.resume},
              {"started", utc_now()}};
  if (lm) run["tokens_per_sample"] = p.train_g->inputs.back().spec.shape.at(0);
  return run;
}


void check_run_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw std::runtime_error("cannot create the run directory " + dir + ": " + (ec ? ec.message() : "not a directory"));
  const std::string probe = dir + "/.memfit-write-test";
  FILE* f = std::fopen(probe.c_str(), "w");
  if (!f || std::fputs("ok", f) < 0 || std::fclose(f) != 0)
    throw std::runtime_error("the run directory " + dir + " is not writable");
  std::remove(probe.c_str());
}

// Fresh parameters from the seed, then --init-from's weights over them
// (not on --resume: the checkpoint brings its own).
// An imported model's file weights are then let go: the parameters hold
// them (the plan's baseline does not count them; its peak counts the moment
// both exist).
void initialise_weights(RunPlan& p, std::ostream& log) {
  const TrainOptions& o = p.options;
  // A reopened offload file (--resume from a step record) holds the
  // offloaded values as they were: they are not drawn again.
  p.train_ex->init_params(o.seed, p.train_ex->config().tier_reopen.empty());
  if (!o.init_from.empty() && o.resume.empty()) {
    size_t n = load_weights(o.init_from, *p.train_ex, o.reinit);
    log << "initialised " << n << " tensors from " << o.init_from << "\n";
  }
  if (o.context->import_bytes() == 0) return;
  for (StepGraph* sg : {p.train_g.get(), p.eval_g.get()})
    if (sg)
      for (size_t i = 0; i < sg->g.num_values(); ++i) sg->g.value(static_cast<ValueId>(i)).init.values.reset();
  o.context->release_import();
  ::malloc_trim(0);
}

// Every rank must run the same policy (each plans and fits on its own
// budget): the settings that shape the step, compared across ranks.
void check_same_plan(const RunPlan& p) {
  dist::Comm& c = dist::Comm::world();
  if (!c.distributed()) return;
  const std::string mine = policy_of(p.options).key();
  const uint64_t h = rng::fnv1a(rng::kFnvOffset, mine.data(), mine.size());
  const std::vector<uint64_t> all = c.allgather(h);
  for (uint64_t x : all)
    if (x != h)
      throw std::runtime_error("the ranks chose different plans (this rank: " + mine +
                               "); give each rank the same budget (--memory) or the policy flags themselves "
                               "(--accumulate, --recompute, --precision) so that all run one plan");
}

// One attempt: plan, allocate, train. It ends with the result, or with the
// options to start again with; either way its arenas are freed when it
// returns, before the next attempt plans. `started`: plan.json is written
// (the run has a report to write).
std::variant<TrainResult, Replan> run_once(const TrainOptions& o, std::ostream& log, bool& started) {
  std::variant<RunPlan, Replan> planned = plan_run(o, log);
  if (auto* again = std::get_if<Replan>(&planned)) return std::move(*again);
  RunPlan& plan = std::get<RunPlan>(planned);
  if (o.plan_only) return planned_result(plan);
  check_run_dir(o.out);
  check_same_plan(plan);
  const bool lead = dist::Comm::world().rank() == 0;  // rank 0 writes the run's files
  // The tokenizer goes with the run: resume and generation read the same ids.
  if (plan.data.tokenizer && lead) plan.data.tokenizer->save(o.out + "/tokenizer.json");
  log.flush();
  std::fflush(nullptr);
  if (auto again = allocate_plan(plan, log)) return std::move(*again);
  initialise_weights(plan, log);
  TrainLoop loop(plan, log);
  // The plan as this attempt runs it, for the report, once the run is
  // known to start (a resume that does not match its checkpoint does not).
  if (lead) {
    write_file_atomically(o.out + "/plan.json", plan_file_text(run_header(plan), plan.report, plan.budget, plan.train_g->g, plan.train_ex->plan()));
    started = true;
  }
  return loop.run();
}

// --resume: the data options the user did not give come from the
// checkpoint's metadata (checkpoints before they were recorded have none);
// one given that differs names the flag and the value to pass.
void adopt_resume_options(TrainOptions& o, std::ostream& log) {
  if (o.resume.empty()) return;
  const std::map<std::string, std::string> meta = resume_metadata(o.resume);
  struct Field {
    const char* flag;
    const char* key;
    std::string* s;
    int64_t* i;
    double* d = nullptr;
  };
  const Field fields[] = {{"data", "data", &o.data, nullptr},
                          {"subset", "subset", &o.subset, nullptr},
                          {"test-subset", "test_subset", &o.test_subset, nullptr},
                          {"image-size", "image_size", nullptr, &o.image_size},
                          {"channels", "channels", nullptr, &o.channels},
                          {"tokenizer", "tokenizer", &o.tokenizer, nullptr},
                          {"block-size", "block_size", nullptr, &o.block_size},
                          {"max-len", "max_len", nullptr, &o.max_len},
                          {"csv-columns", "csv_columns", &o.csv_columns, nullptr},
                          {"cifar100-labels", "cifar100_labels", &o.cifar100_labels, nullptr},
                          {"val-fraction", "val_fraction", nullptr, nullptr, &o.val_fraction}};
  std::string taken;
  for (const Field& f : fields) {
    auto it = meta.find(f.key);
    if (it == meta.end()) continue;
    const std::string now = f.s ? *f.s : f.i ? std::to_string(*f.i) : short_num(*f.d);
    if (it->second == now) continue;
    const bool given = std::find(o.given.begin(), o.given.end(), f.flag) != o.given.end();
    // In-process data (memfit.train(data=...)): `data` is its fingerprint.
    if (std::string(f.key) == "data" && (it->second.rfind("python:", 0) == 0 || now.rfind("python:", 0) == 0) &&
        (given || o.train_dataset))
      throw std::runtime_error("cannot resume from " + o.resume + ": it was trained on " + it->second +
                               ", this run's data is " + now +
                               " (different data: another content, shape, dtype, normalisation or transform); "
                               "resume with the data it was trained on");
    if (given)
      throw std::runtime_error("cannot resume from " + o.resume + ": it was trained with --" + f.flag + " " +
                               (it->second.empty() ? "(not given)" : it->second) + ", this run has --" + f.flag + " " +
                               now + "; pass --" + f.flag + " " + it->second + " or leave the flag out");
    if (f.s) {
      *f.s = it->second;
    } else if (f.d) {
      char* end = nullptr;
      const double v = std::strtod(it->second.c_str(), &end);
      if (end == it->second.c_str() || *end) continue;
      *f.d = v;
    } else {
      char* end = nullptr;
      const long long v = std::strtoll(it->second.c_str(), &end, 10);
      if (end == it->second.c_str() || *end) continue;  // unreadable: the checks after loading report it
      *f.i = v;
    }
    if (!it->second.empty()) taken += " --" + std::string(f.flag) + " " + it->second;
  }
  if (!taken.empty()) log << "resuming with the checkpoint's data options:" << taken << "\n";
}

// --init-from a folder of a pretrained model (a Hugging Face model folder:
// model.safetensors, and a BERT's vocab.txt): its weights, and its WordPiece
// vocabulary as the tokenizer unless --tokenizer is given.
void adopt_init_folder(TrainOptions& o, std::ostream& log) {
  if (o.init_from.empty() || !fs::is_directory(o.init_from)) return;
  const fs::path dir = o.init_from;
  if (!fs::exists(dir / "model.safetensors"))
    throw std::runtime_error("--init-from " + o.init_from + ": the folder holds no model.safetensors");
  o.init_from = (dir / "model.safetensors").string();
  const bool given = std::find(o.given.begin(), o.given.end(), "tokenizer") != o.given.end();
  if (!given && o.resume.empty() && fs::exists(dir / "vocab.txt")) {
    o.tokenizer = "wordpiece:" + (dir / "vocab.txt").string();
    log << "memfit: tokenizer " << o.tokenizer << " (the --init-from folder's vocabulary)\n";
  }
}

// report.html from what the run directory holds, after the attempt's arenas
// are freed (the page is not part of the run's memory); a failure is a
// warning, not a failed run.
void write_report(const std::string& dir, std::ostream& log) {
  try {
    log << "report: " << write_run_report(dir) << "\n";
  } catch (const std::exception& e) {
    log << "memfit: warning: no report.html: " << e.what() << "\n";
  }
}

}  // namespace

TrainResult run_training(const TrainOptions& opt, std::ostream& log) {
  TrainOptions o = opt;
  SignalScope signals(o.handle_signals);
  default_text_data(o);
  adopt_init_folder(o, log);
  adopt_resume_options(o, log);
  validate(o);
  bool started = false;
  for (int attempt = 0;; ++attempt) {
    std::variant<TrainResult, Replan> r;
    try {
      r = run_once(o, log, started);
    } catch (...) {
      if (started) write_report(o.out, log);  // what the run recorded before it failed
      throw;
    }
    if (auto* done = std::get_if<TrainResult>(&r)) {
      if (started) write_report(o.out, log);
      return std::move(*done);
    }
    if (attempt >= 16) throw std::runtime_error("could not settle on a plan");
    o = std::get<Replan>(r).options;
  }
}

}  // namespace memfit::train

namespace memfit::train {

std::string result_json(const TrainResult& r, const TrainOptions& o) {
  Json j = {{"steps", r.steps}, {"final_train_loss", r.final_train_loss}, {"evaluated", r.evaluated}};
  if (r.evaluated) {
    j["test_loss"] = r.test_loss;
    j["test_accuracy"] = r.test_accuracy;
  }
  j["images_per_second"] = r.images_per_second;
  if (r.tokens_per_second > 0) j["tokens_per_second"] = r.tokens_per_second;
  if (r.first_step_seconds > 0) j["first_step_seconds"] = r.first_step_seconds;
  if (r.warm_images_per_second > 0) j["warm_images_per_second"] = r.warm_images_per_second;
  if (r.warm_tokens_per_second > 0) j["warm_tokens_per_second"] = r.warm_tokens_per_second;
  j["seconds"] = r.seconds;
  j["peak_rss_bytes"] = r.peak_rss_bytes;
  j["planned_peak_bytes"] = r.planned_peak_bytes;
  j["budget_bytes"] = r.budget_bytes;
  if (!r.report.device.empty()) {
    j["device"] = r.report.device;
    j["planned_host_bytes"] = r.report.host;
    j["device_planned_bytes"] = r.device_planned_bytes;
    j["device_used_bytes"] = r.device_used_bytes;
  }
  if (!r.rank_peak_rss_bytes.empty()) {
    j["ranks"] = r.rank_peak_rss_bytes.size();
    j["optimizer_sharded"] = o.shard_optimizer;
    j["rank_peak_rss_bytes"] = r.rank_peak_rss_bytes;
    j["rank_planned_peak_bytes"] = r.rank_planned_peak_bytes;
    j["comm_seconds"] = r.comm_seconds;
    j["comm_bytes_per_step"] = r.comm_bytes_per_step;
    j["comm_buckets"] = r.comm_buckets;
    j["comm_buckets_overlapped"] = r.comm_buckets_overlapped;
  }
  if (o.precision == DType::f16) {
    j["loss_scale"] = r.loss_scale;
    j["skipped_steps"] = r.skipped_steps;
  }
  j["interrupted"] = r.interrupted != 0;
  j["out"] = o.out;
  return json_line(j);
}

}  // namespace memfit::train
