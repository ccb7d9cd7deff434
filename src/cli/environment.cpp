#include "cli/environment.hpp"

#include <algorithm>
#include <cstdlib>

#include "data/cache_file.hpp"

namespace memfit::cli {
namespace {

std::string var(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

}  // namespace

Environment read_environment() {
  Environment e;
  e.cache_dir = data::cache_dir_for({var("MEMFIT_CACHE_DIR"), var("XDG_CACHE_HOME"), var("HOME")});
  e.gpt2_ranks = var("MEMFIT_GPT2_RANKS");
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(v)) e.launch.by_mpi = true;
  e.launch.announced_size = std::atoi(var("OMPI_COMM_WORLD_SIZE").c_str());
  e.omp_num_threads = std::max(0, std::atoi(var("OMP_NUM_THREADS").c_str()));  // the first of a list such as "4,2"
  if (const char* s = std::getenv("MEMFIT_TEST_OOM_AT_STEP")) e.inject_oom_at_step = std::strtoll(s, nullptr, 10);
  return e;
}

void apply_environment(const Environment& env, train::TrainOptions& o) {
  if (o.cache_dir.empty()) o.cache_dir = env.cache_dir;
  if (o.gpt2_ranks.empty()) o.gpt2_ranks = env.gpt2_ranks;
}

dist::Comm& start_job(const Environment& env) {
  if (env.launch.by_mpi) ::setenv("OMPI_MCA_coll_libnbc_ireduce_algorithm", "2", 0);
  return dist::Comm::start(env.launch);
}

}  // namespace memfit::cli
