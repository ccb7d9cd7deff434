#include "train/run_context.hpp"
#include "compile/resolve.hpp"

namespace memfit::train {

std::shared_ptr<const models::Model> RunContext::model(const std::string& name, const models::ResolveOptions& options) {
  std::string key = name;
  for (const auto& d : options.dropout) key += "\n" + d;
  std::lock_guard<std::mutex> lock(mu_);
  if (model_ && key == key_) return model_;
  model_.reset();  // before reading the next: never two files' weights at once
  model_ = std::make_shared<const models::Model>(models::resolve(name, options));
  key_ = std::move(key);
  return model_;
}

size_t RunContext::import_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return model_ && model_->import_bytes ? model_->import_bytes() : 0;
}

MachineProfile RunContext::profile(const Device& dev, int threads, const std::string& cache_dir) {
  const std::string key = std::string(dev.name()) + "\n" + std::to_string(threads) + "\n" + cache_dir;
  std::lock_guard<std::mutex> lock(mu_);
  if (key != profile_key_) {
    profile_ = machine_profile(dev, threads, cache_dir);
    profile_key_ = key;
  }
  return profile_;
}

void RunContext::release_import() {
  std::lock_guard<std::mutex> lock(mu_);
  if (model_ && model_->release_import) model_->release_import();
  model_.reset();
  key_.clear();
}

}  // namespace memfit::train
