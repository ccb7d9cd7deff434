// Checkpoints. A run directory holds
//   model.safetensors       the weights under PyTorch state_dict names
//                           (torch.load_state_dict(safetensors.torch.load_file(..)))
//   checkpoint.safetensors  everything exact resume needs: weights, buffers,
//                           optimizer state, and in its metadata the step,
//                           the position in the data order, the seed and a
//                           checksum of all tensor bytes and of the metadata
//                           (format memfit-checkpoint-2; files of format 1,
//                           whose checksum covers the tensors only, still load).
// Each file is written atomically (temp file, fsync, rename): a failed write
// (a full disk) leaves the previous checkpoint as it was.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "memfit/runtime.hpp"

namespace memfit::train {

struct TrainState {
  int64_t step = 0;         // optimizer steps done
  uint64_t epoch = 0;       // data position: epoch and samples delivered in it
  uint64_t sample = 0;
  uint64_t seed = 0;
  std::string model;
  std::map<std::string, std::string> extra;  // settings that must match on resume
};

void save_checkpoint(const std::string& dir, Executor& ex, const TrainState& st);
// Loads weights, buffers and optimizer state into ex and returns the state.
// Throws std::runtime_error naming the file when it is missing, corrupted
// (checksum, or metadata that is not a plain non-negative integer where one
// is expected), for another model, or its tensors do not match this graph.
// Everything is checked before anything is copied: on error ex is unchanged.
TrainState load_checkpoint(const std::string& dir, Executor& ex);
// The metadata of dir/checkpoint.safetensors (step, seed, the run's
// settings) without loading any tensor; empty when there is no checkpoint.
// Whatever is wrong with the file is reported later by load_checkpoint.
std::map<std::string, std::string> checkpoint_metadata(const std::string& dir);
// Loads parameters and buffers by name from a weights file (memfit's or
// one saved by PyTorch for the same architecture). Every one must be present
// with the same shape, except those matching a `keep` pattern, which keep
// their fresh initialisation (a new head). Nothing is changed on error.
// Returns the number of tensors loaded.
size_t load_weights(const std::string& path, Executor& ex, const std::vector<std::string>& keep = {});

// Step records. A run whose offload file is kept (TierStore::kept) commits
// every step: dir/offload-step.safetensors records the step as a
// checkpoint's metadata does, the state held in memory, and which copy of
// each offloaded value in the offload file is the step's, with the file's
// sector checksums; the offload file holds the offloaded values. The
// record is written atomically after the step's writes reach the disk, so
// a kill in the middle of a step resumes from the step before it.
inline constexpr const char* kStepRecordName = "offload-step.safetensors";
// Syncs the store, writes the record, commits the store.
void save_step_record(const std::string& dir, Executor& ex, const TrainState& st);
// The offload file named by dir's step record where the record holds a
// later step than dir's checkpoint (or there is none): --resume reopens it
// (ExecConfig::tier_reopen) and loads the record. "" otherwise. any_step:
// the file the record names, whatever its step.
std::string step_record_file(const std::string& dir, bool any_step = false);
// The metadata of the state --resume takes from dir: its step record's
// where that is the later, its checkpoint's otherwise.
std::map<std::string, std::string> resume_metadata(const std::string& dir);
// Loads a step record into ex (whose kept store reopened its file), checked
// as load_checkpoint checks, and the offload file against the record.
TrainState load_step_record(const std::string& dir, Executor& ex);
// Removes dir's step record and the offload file it names (unless that
// is keep_file, the run's own).
void remove_step_record(const std::string& dir, const std::string& keep_file = {});

// Sharded optimizer state (data parallelism): rank r > 0 keeps its shard of
// the state in its own file per step, beside checkpoint.safetensors (rank
// 0's weights, buffers and shard). The ranks write their shards, then rank 0
// its file, which commits the step; the shards of other steps go after
// that. A job that dies in between resumes from the step the main file
// names, whose shards are still there.
std::string shard_checkpoint_path(const std::string& dir, int rank, int64_t step);
// The executor's optimizer state (only) and the state's metadata, atomically.
void save_state_shard(const std::string& path, Executor& ex, const TrainState& st);
// Loads a shard written by save_state_shard, checked as load_checkpoint checks.
TrainState load_state_shard(const std::string& path, Executor& ex);
// Removes rank's shard files of every step but keep_step.
void remove_other_shards(const std::string& dir, int rank, int64_t keep_step);

}  // namespace memfit::train
