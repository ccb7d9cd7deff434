// What memfit reads from its process environment. The command (main.cpp)
// and the Python package read it once, here, and pass it down as options
// and arguments: nothing below the command reads the environment
// (tests/test_layering.cpp checks the sources for it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "dist/comm.hpp"
#include "train/options.hpp"

namespace memfit::cli {

struct Environment {
  // The caches' directory when --cache-dir is not given: $MEMFIT_CACHE_DIR,
  // else $XDG_CACHE_HOME/memfit, else ~/.cache/memfit (data::cache_dir_for).
  std::string cache_dir;
  // $MEMFIT_GPT2_RANKS: the ranks file --tokenizer gpt2 reads ("" = the
  // build's, data::built_in_gpt2_ranks()).
  std::string gpt2_ranks;
  // Started by an MPI launcher: Open MPI's mpirun sets OMPI_COMM_WORLD_SIZE
  // (PMIx and PMI launchers PMIX_RANK, PMI_RANK). Without them memfit never
  // initialises MPI, so a plain run starts no MPI runtime at all.
  dist::Launch launch;
  // $OMP_NUM_THREADS's first number (0 when unset): the Python package's
  // default thread count, as OpenMP's is the command's.
  int omp_num_threads = 0;
  // $MEMFIT_TEST_OOM_AT_STEP: a test seam, not an option (the tests of the
  // recovery from running out of memory ask for it through the environment).
  std::optional<int64_t> inject_oom_at_step;
};

// The process environment, read now.
Environment read_environment();

// The options a run takes from the environment, where its flags left them
// unset: the cache directory and the GPT-2 ranks file.
void apply_environment(const Environment& env, train::TrainOptions& o);

// Makes the job (dist::Comm::start) as the environment says it was
// launched. Under an MPI launcher it first sets what memfit asks of Open
// MPI (a value the user set stays): the nonblocking reduce's binomial tree
// (each rank's part in one round) rather than the segmented chain it picks
// for large pieces, whose rounds did not advance between backward's nodes
// (measured: 1 of gpt-char's 14 gradient buckets started during backward
// with the chain, 12 with the tree).
dist::Comm& start_job(const Environment& env);

}  // namespace memfit::cli
