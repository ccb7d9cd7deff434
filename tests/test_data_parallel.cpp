// Data-parallel training over MPI on one machine (loopback, 2 ranks of one
// thread each): the ranks together take the steps one process takes on
// their joint batch, sharding the optimizer state changes nothing but each
// rank's memory, a dead rank ends the job and the checkpoint it left
// resumes exactly, and one rank is a plain run.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_util.hpp"
#include "io/safetensors.hpp"
#include "json_out.hpp"
#include "read_tensor.hpp"
#include "same_tensors.hpp"

extern char** environ;

namespace fs = std::filesystem;
using memfit::testing::Json;
using memfit::testing::last_json;

namespace {

#ifdef MEMFIT_MPIRUN
constexpr const char* kMpirun = MEMFIT_MPIRUN;
#else
constexpr const char* kMpirun = "";
#endif

#define REQUIRE_MPI()                                                                                \
  do {                                                                                               \
    if (!*kMpirun) GTEST_SKIP() << "memfit was built without MPI (libopenmpi-dev: make deps)";       \
  } while (0)

std::string slurp(const std::string& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// A job started in the background: mpirun (np > 0) or memfit alone (np 0).
struct Job {
  pid_t pid = -1;
  std::string out, err;  // files
};

Job start(int np, const std::vector<std::string>& args, const std::string& tag) {
  static int counter = 0;
  Job j;
  const std::string base = memfit::testing::temp_dir("dp-log") + "/" + tag + std::to_string(counter++);
  j.out = base + ".out";
  j.err = base + ".err";
  std::vector<std::string> all;
  if (np > 0) {
    // One thread per rank; shared memory between the ranks without the
    // cross-process copy mechanism containers often forbid.
    all = {kMpirun, "--oversubscribe", "-np", std::to_string(np), "--mca", "btl_vader_single_copy_mechanism", "none",
           "-x", "OMP_NUM_THREADS=1"};
    if (::geteuid() == 0) all.push_back("--allow-run-as-root");
  }
  all.push_back(MEMFIT_BINARY);
  all.insert(all.end(), args.begin(), args.end());
  all.insert(all.end(), {"--threads", "1"});
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, j.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, j.err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (posix_spawn(&j.pid, argv[0], &fa, nullptr, argv.data(), environ) != 0) j.pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  return j;
}

struct Result {
  int code = -1;
  std::string out, err;
};

Result finish(const Job& j) {
  Result r;
  int st = 0;
  if (j.pid > 0 && ::waitpid(j.pid, &st, 0) == j.pid) r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.out = slurp(j.out);
  r.err = slurp(j.err);
  return r;
}

Result run(int np, const std::vector<std::string>& args, const std::string& tag = "job") {
  return finish(start(np, args, tag));
}

// A small CNN without batch norm (its statistics would be per rank), and a
// wide MLP whose Adam state (80 MB) dwarfs the rest.
const char* kCnn = "conv conv1 out=8 k=3 pad=1\nrelu\nmaxpool k=2\nflatten\nlinear fc1 out=64\nrelu\nlinear fc2 out=classes\n";
const char* kWide =
    "flatten\nlinear fc1 out=2048\nrelu\nlinear fc2 out=2048\nrelu\nlinear fc3 out=2048\nrelu\nlinear fc4 out=classes\n";

// Eight layers of about 4 MiB each: what a rank sheds with sharded
// gradients is the others' layers less the one alive at a time.
const char* kDeep =
    "flatten\nlinear fc1 out=1024\nrelu\nlinear fc2 out=1024\nrelu\nlinear fc3 out=1024\nrelu\nlinear fc4 out=1024\n"
    "relu\nlinear fc5 out=1024\nrelu\nlinear fc6 out=1024\nrelu\nlinear fc7 out=1024\nrelu\nlinear fc8 out=classes\n";

std::string model_file(const char* text, const std::string& name) {
  const std::string p = memfit::testing::temp_dir("dp-model") + "/" + name + ".mf";
  std::ofstream(p) << text;
  return p;
}

std::vector<std::string> train_args(const std::string& model, int batch, int steps, const std::string& out) {
  return {"train", "--model", model, "--batch", std::to_string(batch), "--steps", std::to_string(steps),
          "--subset", "4000", "--test-subset", "256", "--optimizer", "adamw", "--progress", "lines", "--json",
          "--out", out};
}

// train_loss of every line of a run's steps.jsonl, by step.
std::map<int64_t, double> step_losses(const std::string& dir) {
  std::map<int64_t, double> m;
  std::istringstream in(slurp(dir + "/steps.jsonl"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const Json j = Json::parse(line);
    m[j.at("step").get<int64_t>()] = j.at("train_loss").get<double>();
  }
  return m;
}

double max_weight_difference(const std::string& a, const std::string& b) {
  auto fa = memfit::io::SafetensorsFile::load(a);
  auto fb = memfit::io::SafetensorsFile::load(b);
  double d = 0;
  for (const auto& name : fa.names()) {
    if (fa.at(name).dtype != memfit::io::DType::F32) continue;
    const auto x = memfit::testing::read_tensor<float>(fa, name), y = memfit::testing::read_tensor<float>(fb, name);
    EXPECT_EQ(x.size(), y.size()) << name;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) d = std::max(d, static_cast<double>(std::fabs(x[i] - y[i])));
  }
  return d;
}

// Each rank's planned peak drop from job `more` to job `less` (their
// --json results), after checking that the measured peak dropped by the
// same within 3% of `less`'s plan (test_plan_accuracy's bound).
std::vector<double> planned_drops(const Json& more, const Json& less) {
  std::vector<double> drops;
  for (size_t r = 0; r < less.at("rank_planned_peak_bytes").size(); ++r) {
    const double plan = less.at("rank_planned_peak_bytes")[r].get<double>();
    const double planned = more.at("rank_planned_peak_bytes")[r].get<double>() - plan;
    const double measured = more.at("rank_peak_rss_bytes")[r].get<double>() - less.at("rank_peak_rss_bytes")[r].get<double>();
    std::printf("rank %zu: planned peak drops %.1f MiB, measured %.1f MiB\n", r, planned / 1048576, measured / 1048576);
    EXPECT_NEAR(measured, planned, 0.03 * plan) << "rank " << r;
    drops.push_back(planned);
  }
  return drops;
}

}  // namespace

// 2 ranks x batch 32 take the steps 1 process takes with batch 64: the
// same samples (each rank half of every global batch), the mean of their
// gradients. Only the order of the sums differs (two means of 32 rows
// averaged against one mean of 64), a relative 1e-7 per step: over 20
// AdamW steps the losses agree to 1e-5 relative and the weights to 1e-5
// absolute (measured: 3.3e-7), far below what one step changes (lr 1e-3).
// The run itself checks that both ranks' parameters are identical (a hash
// at the end of training) and fails otherwise.
TEST(DataParallel, TwoRanksTakeTheStepsOfOneProcessOnTheirJointBatch) {
  REQUIRE_MPI();
  const std::string model = model_file(kCnn, "cnn");
  const std::string one = memfit::testing::temp_dir("dp-one"), two = memfit::testing::temp_dir("dp-two");
  const Result a = run(0, train_args(model, 64, 20, one));
  ASSERT_EQ(a.code, 0) << a.err;
  const Result b = run(2, train_args(model, 32, 20, two));
  ASSERT_EQ(b.code, 0) << b.out << b.err;
  const auto la = step_losses(one), lb = step_losses(two);
  ASSERT_EQ(la.size(), 20u);
  ASSERT_EQ(lb.size(), 20u);
  for (const auto& [step, loss] : la) EXPECT_NEAR(lb.at(step), loss, 1e-5 * std::fabs(loss)) << "step " << step;
  EXPECT_LE(max_weight_difference(one + "/model.safetensors", two + "/model.safetensors"), 1e-5);
  // Both ranks run on this machine (MPI says so): the detected budget is split.
  EXPECT_NE(b.err.find("shared by 2 ranks on this machine"), std::string::npos) << b.err;
  const Json j = last_json(b.out);
  EXPECT_EQ(j.at("ranks").get<int>(), 2);
  EXPECT_EQ(j.at("rank_peak_rss_bytes").size(), 2u);
  // The job's throughput counts both ranks' samples.
  EXPECT_GT(j.at("images_per_second").get<double>(), 0.0);
}

// Dropout masks are keyed by the sample's place in the step (its row in
// the global batch), not by the rank: the default ConvNet, dropout 0.4
// before its last layer, on 2 ranks x 32 draws the masks 1 process x 64
// draws, so it takes the same steps to the summation-order tolerance of the
// test above. (Keyed by the rank, the two runs' losses parted by 1.6% in 10
// steps.) And a whole checkpoint resumed on 2 ranks continues as one
// process resuming it does. The weights agree to 1e-4, a tenth of the
// largest change one AdamW step makes (lr 1e-3): Adam's normalised update
// turns summation-order differences in the near-zero gradients of the
// ConvNet's 3.3M weights into a few percent of lr (2.3e-5 measured), where
// one differing mask moves them by lr.
TEST(DataParallel, DropoutMasksFollowTheSampleOnAnyNumberOfRanks) {
  REQUIRE_MPI();
  namespace t = memfit::testing;
  auto args = [](int batch, int steps, const std::string& out) {
    std::vector<std::string> a = train_args("convnet", batch, steps, out);
    a.insert(a.end(), {"--eval-every", "0"});
    return a;
  };
  auto expect_same_run = [](const std::string& a, const std::string& b, int64_t from, int64_t to) {
    const auto la = step_losses(a), lb = step_losses(b);
    for (int64_t step = from; step <= to; ++step) {
      ASSERT_TRUE(la.count(step) && lb.count(step)) << "step " << step;
      EXPECT_NEAR(lb.at(step), la.at(step), 1e-5 * std::fabs(la.at(step))) << "step " << step;
    }
    const double w = max_weight_difference(a + "/model.safetensors", b + "/model.safetensors");
    std::printf("step %lld: loss %.6f (1 process x 64) and %.6f (2 ranks x 32); largest weight difference %.2e\n",
                static_cast<long long>(to), la.at(to), lb.at(to), w);
    EXPECT_LE(w, 1e-4);
  };
  const std::string one = t::temp_dir("dp-drop-one"), two = t::temp_dir("dp-drop-two");
  const Result a = run(0, args(64, 12, one));
  ASSERT_EQ(a.code, 0) << a.err;
  const Result b = run(2, args(32, 12, two));
  ASSERT_EQ(b.code, 0) << b.out << b.err;
  expect_same_run(one, two, 1, 12);

  // 6 steps in one process, then the rest of 12 from its checkpoint: in one
  // process, and on 2 ranks.
  const std::string half = t::temp_dir("dp-drop-half"), rest1 = t::temp_dir("dp-drop-rest1"),
                    rest2 = t::temp_dir("dp-drop-rest2");
  const Result h = run(0, args(64, 6, half));
  ASSERT_EQ(h.code, 0) << h.err;
  std::vector<std::string> r1 = args(64, 12, rest1), r2 = args(32, 12, rest2);
  r1.insert(r1.end(), {"--resume", half});
  r2.insert(r2.end(), {"--resume", half, "--shard-optimizer", "off"});
  const Result c = run(0, r1, "rest1");
  ASSERT_EQ(c.code, 0) << c.err;
  const Result d = run(2, r2, "rest2");
  ASSERT_EQ(d.code, 0) << d.out << d.err;
  expect_same_run(rest1, rest2, 7, 12);
}

// Sharding the optimizer state (ZeRO-1, the default) against every rank
// keeping all of it: the same sums reach the same updates, so the weights
// are identical to the bit. Each rank's plan holds its shard of the state
// (the shards add up to the whole), and each rank's measured peak drops by
// what its plan says, within 3% of the plan (test_plan_accuracy's bound).
TEST(DataParallel, ShardedOptimizerStateIsTheSameTrajectoryInLessMemoryPerRank) {
  REQUIRE_MPI();
  const std::string model = model_file(kWide, "wide");
  const std::string sharded = memfit::testing::temp_dir("dp-sharded"), whole = memfit::testing::temp_dir("dp-whole");
  const Result s = run(2, train_args(model, 32, 8, sharded));
  ASSERT_EQ(s.code, 0) << s.out << s.err;
  std::vector<std::string> off = train_args(model, 32, 8, whole);
  off.insert(off.end(), {"--shard-optimizer", "off"});
  const Result w = run(2, off);
  ASSERT_EQ(w.code, 0) << w.out << w.err;
  memfit::testing::expect_same_tensors(sharded + "/model.safetensors", whole + "/model.safetensors");

  // The plans without MPI: memfit plan --ranks 2 --rank R.
  auto state = [&](int ranks, int rank) {
    const Result p = run(0, {"plan", "--model", model, "--batch", "32", "--optimizer", "adamw", "--subset", "4000",
                             "--json", "--ranks", std::to_string(ranks), "--rank", std::to_string(rank)});
    EXPECT_EQ(p.code, 0) << p.err;
    return last_json(p.out).at("by_class").at("optimizer_state").get<double>();
  };
  const double all = state(1, 0), r0 = state(2, 0), r1 = state(2, 1);
  EXPECT_EQ(r0 + r1, all) << "the shards add up to the whole state";
  EXPECT_GT(r0, 0.25 * all);
  EXPECT_GT(r1, 0.25 * all);

  const Json js = last_json(s.out), jw = last_json(w.out);
  const std::vector<double> drops = planned_drops(jw, js);
  for (int r = 0; r < 2; ++r) {
    std::printf("rank %d: state %.1f of %.1f MiB\n", r, (r ? r1 : r0) / 1048576, all / 1048576);
    EXPECT_NEAR(drops[static_cast<size_t>(r)], all - (r ? r1 : r0), 1.0 * (1 << 20)) << "rank " << r;
  }
}

// The gradients' reduction while backward runs (the default): each bucket
// of whole gradients starts once the last backward node touching it ran.
// With two ranks every element's sum is one addition however the
// gradients are cut, so the weights equal those of reducing everything
// after backward to the bit, sharded (reduce to the owner) and whole
// (all-reduce). The wide MLP's last
// layers' gradients are ready long before fc1's: some buckets start during
// backward; with --overlap-reduce off none does.
TEST(DataParallel, GradientsReducedDuringBackwardGiveTheSameWeights) {
  REQUIRE_MPI();
  const std::string model = model_file(kWide, "wide");
  const std::string on = memfit::testing::temp_dir("dp-overlap"), off = memfit::testing::temp_dir("dp-after"),
                    whole = memfit::testing::temp_dir("dp-after-whole");
  const Result a = run(2, train_args(model, 32, 6, on));
  ASSERT_EQ(a.code, 0) << a.out << a.err;
  std::vector<std::string> b_args = train_args(model, 32, 6, off);
  b_args.insert(b_args.end(), {"--overlap-reduce", "off"});
  const Result b = run(2, b_args);
  ASSERT_EQ(b.code, 0) << b.out << b.err;
  std::vector<std::string> c_args = train_args(model, 32, 6, whole);
  c_args.insert(c_args.end(), {"--overlap-reduce", "off", "--shard-optimizer", "off"});
  const Result c = run(2, c_args);
  ASSERT_EQ(c.code, 0) << c.out << c.err;
  memfit::testing::expect_same_tensors(on + "/model.safetensors", off + "/model.safetensors");
  memfit::testing::expect_same_tensors(on + "/model.safetensors", whole + "/model.safetensors");
  const Json ja = last_json(a.out), jb = last_json(b.out);
  // fc1's 6.4 MB gradient alone is two pieces of 4 MiB: several buckets.
  EXPECT_GE(ja.at("comm_buckets").get<int>(), 3);
  EXPECT_GE(ja.at("comm_buckets_overlapped").get<int>(), 1);
  EXPECT_LT(ja.at("comm_buckets_overlapped").get<int>(), ja.at("comm_buckets").get<int>())
      << "fc1's weight gradient is made by backward's last node";
  EXPECT_EQ(jb.at("comm_buckets_overlapped").get<int>(), 0);
}

// Sharded gradients (ZeRO-2, --shard-gradients on): each gradient is
// reduced to its owner by a grad_reduce node right after backward makes
// it, and the other ranks free it there. The sums are the same additions,
// so the weights equal ZeRO-1's to the bit. The plans without MPI hold
// each rank's shard of the gradients (the shards add up to the whole), and
// each rank's measured peak drops by what its plan says, within 3% of the
// plan.
TEST(DataParallel, ShardedGradientsAreTheSameTrajectoryInLessMemoryPerRank) {
  REQUIRE_MPI();
  const std::string model = model_file(kDeep, "deep");
  const std::string z1 = memfit::testing::temp_dir("dp-zero1"), z2 = memfit::testing::temp_dir("dp-zero2");
  const Result a = run(2, train_args(model, 32, 8, z1));
  ASSERT_EQ(a.code, 0) << a.out << a.err;
  std::vector<std::string> b_args = train_args(model, 32, 8, z2);
  b_args.insert(b_args.end(), {"--shard-gradients", "on"});
  const Result b = run(2, b_args);
  ASSERT_EQ(b.code, 0) << b.out << b.err;
  memfit::testing::expect_same_tensors(z1 + "/model.safetensors", z2 + "/model.safetensors");

  auto plan = [&](int ranks, int rank, bool grads) {
    std::vector<std::string> args{"plan", "--model", model, "--batch", "32", "--optimizer", "adamw", "--subset", "4000",
                                  "--json", "--ranks", std::to_string(ranks), "--rank", std::to_string(rank)};
    if (grads) args.insert(args.end(), {"--shard-gradients", "on"});
    const Result p = run(0, args);
    EXPECT_EQ(p.code, 0) << p.err;
    return last_json(p.out);
  };
  const double whole = plan(1, 0, false).at("by_class").at("gradients").get<double>();
  const Json p0 = plan(2, 0, true), p1 = plan(2, 1, true);
  EXPECT_TRUE(p0.value("gradients_sharded", false));
  const double g0 = p0.at("by_class").at("gradients").get<double>(), g1 = p1.at("by_class").at("gradients").get<double>();
  EXPECT_NEAR(g0 + g1, whole, 4096.0) << "the shards add up to the whole gradients (alignment aside)";
  EXPECT_GT(g0, 0.25 * whole);
  EXPECT_GT(g1, 0.25 * whole);

  // Over budget, the fit shards the gradients when that is what fits
  // (exact, like update in backward on one process). The
  // same layers at 2048 wide (16 MiB each), planned only: a budget halfway
  // between rank 0's ZeRO-1 and ZeRO-2 plans.
  const std::string wide8 = model_file(
      "flatten\nlinear fc1 out=2048\nrelu\nlinear fc2 out=2048\nrelu\nlinear fc3 out=2048\nrelu\nlinear fc4 out=2048\n"
      "relu\nlinear fc5 out=2048\nrelu\nlinear fc6 out=2048\nrelu\nlinear fc7 out=2048\nrelu\nlinear fc8 out=classes\n",
      "deep-wide");
  auto total = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> args{"plan", "--model", wide8, "--batch", "32", "--optimizer", "adamw", "--subset", "4000",
                                  "--ranks", "2", "--rank", "0"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run(0, args);
  };
  const Result r1 = total({"--json"}), r2 = total({"--json", "--shard-gradients", "on"});
  ASSERT_EQ(r1.code, 0) << r1.err;
  ASSERT_EQ(r2.code, 0) << r2.err;
  const double zero1 = last_json(r1.out).at("total_bytes").get<double>(),
               zero2 = last_json(r2.out).at("total_bytes").get<double>();
  ASSERT_GT(zero1 - zero2, 24.0 * (1 << 20)) << "the others' three 16 MiB gradients, less the one alive at a time";
  // (Precision and the dataset's residency pinned: bf16 or streaming it
  // from disk would fit too.)
  const Result fit = total({"--memory", std::to_string(static_cast<long long>((zero1 + zero2) / 2)), "--precision",
                            "fp32", "--data-in", "memory"});
  EXPECT_EQ(fit.code, 0) << fit.out << fit.err;
  const size_t chosen = fit.out.find("chosen:");
  ASSERT_NE(chosen, std::string::npos) << fit.out;
  EXPECT_NE(fit.out.substr(chosen, fit.out.find('\n', chosen) - chosen).find("sharded gradients"), std::string::npos)
      << fit.out;

  const Json ja = last_json(a.out), jb = last_json(b.out);
  const std::vector<double> drops = planned_drops(ja, jb);
  for (int r = 0; r < 2; ++r) {
    std::printf("rank %d: gradients %.1f of %.1f MiB\n", r, (r ? g1 : g0) / 1048576, whole / 1048576);
    EXPECT_GT(drops[static_cast<size_t>(r)], 0.5 * (whole - (r ? g1 : g0)))
        << "rank " << r << " keeps most of the others' gradients";
  }
}

// A rank killed mid-run (SIGKILL: no chance to clean up) ends the job
// within seconds, with MPI's message naming the rank; the checkpoint the
// job committed before is intact, and resuming from it reproduces the
// uninterrupted run to the bit.
TEST(DataParallel, DeadRankEndsTheJobAndTheCheckpointResumesExactly) {
  REQUIRE_MPI();
  const std::string model = model_file(kWide, "wide");
  const std::string full = memfit::testing::temp_dir("dp-full"), cut = memfit::testing::temp_dir("dp-cut");
  auto args = [&](const std::string& out) {
    std::vector<std::string> a = train_args(model, 32, 40, out);
    a.insert(a.end(), {"--checkpoint-every", "5", "--eval-every", "0"});
    return a;
  };
  const Result f = run(2, args(full));
  ASSERT_EQ(f.code, 0) << f.err;

  const Job j = start(2, args(cut), "cut");
  ASSERT_GT(j.pid, 0);
  // Wait until a checkpoint is committed and the run has gone on past it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  auto last_step = [&] {
    const auto m = step_losses(cut);
    return m.empty() ? int64_t(0) : m.rbegin()->first;
  };
  while (!(fs::exists(cut + "/checkpoint.safetensors") && last_step() >= 12) &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_LT(last_step(), 40) << "the run ended before it could be cut";
  // Rank 1: a child of mpirun whose environment says so.
  pid_t victim = -1;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream st(e.path() / "stat");
    std::string pid, comm, state;
    long ppid = 0;
    st >> pid >> comm >> state >> ppid;
    if (ppid != j.pid) continue;
    const std::string env = slurp((e.path() / "environ").string());
    if (env.find(std::string("OMPI_COMM_WORLD_RANK=1") + '\0') != std::string::npos) victim = std::stoi(pid);
  }
  ASSERT_GT(victim, 0) << "rank 1 not found among mpirun's children";
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  const Result c = finish(j);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("the job ended %.2f s after rank 1 was killed (exit code %d)\n", seconds, c.code);
  EXPECT_LT(seconds, 10.0);
  EXPECT_NE(c.code, 0);
  EXPECT_NE((c.out + c.err).find("rank 1"), std::string::npos) << c.out << c.err;

  // Resume on 2 ranks from what the dead job left: the same end, bit for bit.
  std::vector<std::string> again = args(cut);
  again.insert(again.end(), {"--resume", cut});
  const Result r = run(2, again, "resume");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("resumed from"), std::string::npos) << r.err;  // --json: the log is on stderr
  memfit::testing::expect_same_tensors(full + "/model.safetensors", cut + "/model.safetensors");
  // A sharded checkpoint resumes on as many ranks only.
  const Result one = run(0, again, "one");
  EXPECT_EQ(one.code, 1);
  EXPECT_NE(one.err.find("mpirun -np 2"), std::string::npos) << one.err;
}

// On the test device whose arenas the host may not address
// (runtime/device.hpp's offset_device), nothing of data parallelism reads
// them through a pointer: the collectives work on host copies of a piece at
// a time (dist/data_parallel.hpp). Two ranks on it end with the weights
// two ranks on the reference device (whose kernels it runs) end with, to
// the bit: sharded optimizer state (ZeRO-1, its reductions after backward
// there, during backward here: with two ranks every sum is one addition),
// whole state, and sharded gradients (ZeRO-2, grad_reduce nodes). Each run
// also compares the ranks' parameters through the device at its end.
TEST(DataParallel, OffsetDeviceGivesTheReferenceDevicesWeights) {
  REQUIRE_MPI();
  const std::string model = model_file(kCnn, "cnn");
  const std::vector<std::vector<std::string>> variants = {
      {}, {"--shard-optimizer", "off"}, {"--shard-gradients", "on"}};
  for (size_t i = 0; i < variants.size(); ++i) {
    std::string dirs[2];
    for (int offset = 0; offset < 2; ++offset) {
      dirs[offset] = memfit::testing::temp_dir("dp-offset" + std::to_string(i) + std::to_string(offset));
      std::vector<std::string> args = train_args(model, 32, 6, dirs[offset]);
      args.insert(args.end(), {"--device", offset ? "reference-offset" : "reference"});
      args.insert(args.end(), variants[i].begin(), variants[i].end());
      const Result r = run(2, args);
      ASSERT_EQ(r.code, 0) << "variant " << i << (offset ? " offset" : " reference") << "\n" << r.out << r.err;
    }
    memfit::testing::expect_same_tensors(dirs[0] + "/model.safetensors", dirs[1] + "/model.safetensors");
  }
}

// mpirun -np 1 is a plain run: the same losses and weights, no shard files.
TEST(DataParallel, OneRankIsAPlainRun) {
  REQUIRE_MPI();
  const std::string model = model_file(kCnn, "cnn");
  const std::string plain = memfit::testing::temp_dir("dp-plain"), mpi = memfit::testing::temp_dir("dp-np1");
  const Result a = run(0, train_args(model, 32, 10, plain));
  ASSERT_EQ(a.code, 0) << a.err;
  const Result b = run(1, train_args(model, 32, 10, mpi));
  ASSERT_EQ(b.code, 0) << b.err;
  memfit::testing::expect_same_tensors(plain + "/model.safetensors", mpi + "/model.safetensors");
  EXPECT_EQ(last_json(a.out).at("final_train_loss"), last_json(b.out).at("final_train_loss"));
  for (const auto& e : fs::directory_iterator(mpi))
    EXPECT_EQ(e.path().filename().string().find("checkpoint.rank"), std::string::npos) << e.path();
}

// What cannot run on several ranks is refused before training, naming why.
TEST(DataParallel, RefusesWhatOneRankWouldDecideAlone) {
  REQUIRE_MPI();
  const std::string model = model_file(kCnn, "cnn");
  const std::string out = memfit::testing::temp_dir("dp-refuse");
  std::vector<std::string> uib = train_args(model, 32, 2, out);
  uib.push_back("--update-in-backward");
  const Result a = run(2, uib);
  EXPECT_EQ(a.code, 2);
  EXPECT_NE(a.err.find("--update-in-backward"), std::string::npos) << a.err;
  std::vector<std::string> clip = train_args(model, 32, 2, out);
  clip.insert(clip.end(), {"--clip-grad-norm", "1"});
  const Result b = run(2, clip);
  EXPECT_EQ(b.code, 2);
  EXPECT_NE(b.err.find("--shard-optimizer off"), std::string::npos) << b.err;
  clip.insert(clip.end(), {"--shard-optimizer", "off"});
  const Result c = run(2, clip);
  EXPECT_EQ(c.code, 0) << c.err;
  // Sharded gradients go to their owner during backward: not with
  // accumulation, and only to the owner of sharded state.
  const std::vector<std::string> plan{"plan", "--model", model, "--batch", "32", "--ranks", "2", "--shard-gradients", "on"};
  std::vector<std::string> acc = plan;
  acc.insert(acc.end(), {"--accumulate", "2"});
  const Result d = run(0, acc);
  EXPECT_EQ(d.code, 2);
  EXPECT_NE(d.err.find("--accumulate"), std::string::npos) << d.err;
  std::vector<std::string> whole = plan;
  whole.insert(whole.end(), {"--shard-optimizer", "off"});
  const Result e = run(0, whole);
  EXPECT_EQ(e.code, 2);
  EXPECT_NE(e.err.find("--shard-optimizer on"), std::string::npos) << e.err;
}
