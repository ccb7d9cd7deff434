#include "fit/machine_profile.hpp"

#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "data/cache_file.hpp"
#include "memfit/rng.hpp"

namespace memfit::train {
namespace {

constexpr int kProfileVersion = 1;

std::string profile_key(const Device& dev, int threads) {
  const DeviceInfo m = dev.info();
  std::ostringstream k;
  k << "v" << kProfileVersion << "|" << dev.name() << "|" << m.model << "|" << m.library << "|" << m.library_isa << "|"
    << m.vector_isa << "|threads " << threads;
  return k.str();
}

double read_profile(const std::string& path, const std::string& key) {
  std::ifstream f(path);
  if (!f) return 0;
  const nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  if (!j.is_object() || !j.contains("key") || !j["key"].is_string() || j["key"].get<std::string>() != key) return 0;
  if (!j.contains("flops_per_second") || !j["flops_per_second"].is_number()) return 0;
  const double r = j["flops_per_second"].get<double>();
  return std::isfinite(r) && r > 0 ? r : 0;
}

// The file of dev's tuning ("" without a cache directory), and its key.
std::string tuning_path(const Device& dev, const std::string& cache_dir, std::string& key) {
  key = profile_key(dev, 0) + "|tuning";
  try {
    const std::string top = data::ensure_cache_dir(cache_dir, "machine profile", "");
    const std::string dir = data::ensure_cache_dir(top + "/machine", "machine profile", "");
    return dir + "/" + data::hex16(rng::name_hash(key)) + ".tuning";
  } catch (const std::exception&) {
    return "";
  }
}

}  // namespace

void adopt_device_tuning(const Device& dev, const std::string& cache_dir) {
  if (dev.host_addressable()) return;  // the host devices measure nothing
  std::string key;
  const std::string path = tuning_path(dev, cache_dir, key);
  std::ifstream f(path);
  std::string first;
  if (path.empty() || !f || !std::getline(f, first) || first != key) return;
  std::stringstream rest;
  rest << f.rdbuf();
  dev.adopt_tuning(rest.str());
}

void save_device_tuning(const Device& dev, const std::string& cache_dir) {
  if (dev.host_addressable()) return;
  const std::string t = dev.tuning();
  if (t.empty()) return;
  std::string key;
  const std::string path = tuning_path(dev, cache_dir, key);
  if (path.empty()) return;
  try {
    const std::string text = key + "\n" + t;
    data::AtomicFile f(path, "machine profile");
    f.write(text.data(), text.size());
    f.commit();
  } catch (const std::exception&) {
  }
}

MachineProfile machine_profile(const Device& dev, int threads, const std::string& cache_dir) {
  MachineProfile p;
  const std::string key = profile_key(dev, threads);
  std::string dir;
  try {
    const std::string top = data::ensure_cache_dir(cache_dir, "machine profile", "");
    dir = data::ensure_cache_dir(top + "/machine", "machine profile", "");
  } catch (const std::exception&) {
    dir.clear();  // no cache: measure every time
  }
  const std::string path = dir.empty() ? "" : dir + "/" + data::hex16(rng::name_hash(key)) + ".json";
  if (!path.empty())
    if (const double r = read_profile(path, key); r > 0) return {r, "cached", path};
  p.flops_per_second = dev.measure_product_flops_per_second();
  if (!(p.flops_per_second > 0)) return {0, "none", ""};
  p.source = "measured";
  if (path.empty()) return p;
  try {
    const nlohmann::json j = {{"key", key}, {"flops_per_second", p.flops_per_second}};
    const std::string text = j.dump() + "\n";
    data::AtomicFile f(path, "machine profile");
    f.write(text.data(), text.size());
    f.commit();
    p.path = path;
  } catch (const std::exception&) {
    // A read-only or full cache directory: the measurement still serves this run.
  }
  return p;
}

}  // namespace memfit::train
