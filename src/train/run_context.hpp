// What one run resolves once and every part of it shares. The command and
// the Python package make it with the run's options (TrainOptions::context;
// every copy of the options carries the same one), and the run's parts read
// it there instead of from process-wide state: today the model read from
// --model (a zoo name, a model file, an ONNX file with its weights), so that
// the command's checks, the data's, and every step graph the fit tries
// share one read of the file and one copy of its initial weights; and the
// machine's measured speed (machine_profile.hpp), read or measured once for
// every plan the run makes (a re-plan, the fit's).
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

#include "models/model.hpp"
#include "fit/machine_profile.hpp"

namespace memfit::train {

class RunContext {
 public:
  // The model `name` read with `options`: read on the first call and shared
  // after. A call for another name or other options reads that one and
  // keeps it instead (a process that plans several runs).
  std::shared_ptr<const models::Model> model(const std::string& name, const models::ResolveOptions& options);
  // The bytes the kept model holds in an imported file's initial weights
  // (0 for a model that holds none, or none kept).
  size_t import_bytes() const;
  // Lets those weights go once the parameters hold them (the caller drops
  // the copies its graphs' InitSpecs hold first). The context forgets the
  // model: a later call reads the file again (a re-plan builds new graphs).
  void release_import();

  // The machine profile of `dev` with `threads` threads (machine_profile()):
  // read or measured on the first call, kept for later ones with the same
  // device, threads and cache directory.
  MachineProfile profile(const Device& dev, int threads, const std::string& cache_dir);

 private:
  std::string profile_key_;
  MachineProfile profile_;
  mutable std::mutex mu_;
  std::string key_;
  std::shared_ptr<const models::Model> model_;
};

}  // namespace memfit::train
