// The tree's layering, checked on the sources: graph -> plan -> device and
// runtime -> kernels, with data/io, models, train and cli around them. A file
// may include only files of its own layer or of the layers it builds on, so
// no lower layer reaches into a higher one (kernels know nothing of graphs;
// the runtime nothing of training; the data layer nothing of kernels).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace fs = std::filesystem;

namespace {

const fs::path kRoot = fs::path(MEMFIT_TEST_DATA).parent_path();

// The layer of a file of an op family's folder (src/ops/<family>/), told by
// its name (CMakeLists.txt compiles each into that layer's library); "" for a
// name that fits none.
std::string ops_layer_of(const std::string& file) {
  auto starts = [&](const char* pre) { return file.rfind(pre, 0) == 0; };
  if (starts("op.") || starts("op_")) return "graph";
  if (starts("params_of") || starts("lower")) return "runtime";
  if (starts("ref") || starts("params") || starts("cpu") || starts("cuda")) return "kernels";
  return "";
}

// The layer of a path relative to the root ("" for files outside them).
std::string layer_of(const std::string& p) {
  if (p.rfind("src/ops/", 0) == 0) return ops_layer_of(fs::path(p).filename().string());
  if (p == "include/memfit/rng.hpp") return "base";  // the counter-based generator: everyone's
  if (p == "include/memfit/runtime.hpp") return "runtime";
  if (p == "include/memfit/plan.hpp") return "plan";
  if (p.rfind("include/memfit/", 0) == 0) return "graph";
  static const std::pair<const char*, const char*> dirs[] = {
      {"src/graph/", "graph"},     {"src/autodiff/", "graph"}, {"src/optim/", "graph"}, {"src/plan/", "plan"},
      {"src/kernels/", "kernels"}, {"src/runtime/", "runtime"}, {"src/io/", "io"},       {"src/data/", "io"},
      {"models/", "models"},       {"src/train/", "train"},    {"src/dist/", "train"},   {"src/cli/", "cli"}};
  for (const auto& [pre, l] : dirs)
    if (p.rfind(pre, 0) == 0) return l;
  return "";
}

// What an #include "..." names, as a path relative to the root.
std::string included_path(const std::string& inc) {
  if (inc.rfind("memfit/", 0) == 0) return "include/" + inc;
  if (inc.rfind("models/", 0) == 0) return inc;
  return "src/" + inc;
}

const std::map<std::string, std::set<std::string>> kAllowed = {
    {"graph", {"base", "graph"}},
    {"plan", {"base", "graph", "plan"}},
    {"kernels", {"base", "kernels"}},
    {"runtime", {"base", "graph", "plan", "kernels", "runtime"}},
    {"io", {"base", "graph", "io"}},
    {"models", {"base", "graph", "models"}},
    {"train", {"base", "graph", "plan", "kernels", "runtime", "io", "models", "train"}},
    {"cli", {"base", "graph", "plan", "kernels", "runtime", "io", "models", "train", "cli"}},
};

}  // namespace

TEST(Layering, NoIncludeFromALowerLayerToAHigherOne) {
  const std::regex inc_re("#include \"([^\"]+)\"");
  size_t files = 0;
  std::string bad;
  for (const char* top : {"include", "src", "models"})
    for (const auto& e : fs::recursive_directory_iterator(kRoot / top)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".cpp" && ext != ".hpp" && ext != ".cu")) continue;
      const std::string rel = fs::relative(e.path(), kRoot).string();
      const std::string from = layer_of(rel);
      if (from.empty()) continue;
      ++files;
      std::ifstream f(e.path());
      std::stringstream text;
      text << f.rdbuf();
      const std::string s = text.str();
      for (std::sregex_iterator it(s.begin(), s.end(), inc_re), end; it != end; ++it) {
        const std::string to = layer_of(included_path((*it)[1]));
        if (!to.empty() && !kAllowed.at(from).count(to))
          bad += "\n  " + rel + " (" + from + ") includes " + (*it)[1].str() + " (" + to + ")";
      }
    }
  EXPECT_GT(files, 100u) << "the sources were not found under " << kRoot;
  EXPECT_TRUE(bad.empty()) << "includes against the layering:" << bad;
}

TEST(Layering, EveryOpFamilyFolderIsListedOnceAndItsFilesHaveALayer) {
  // families.def lists every folder of src/ops but common/, once; each file
  // of a family folder is named for its layer (op, ref, params, cpu, lower,
  // params_of), so the build and this check put it in the right one.
  std::ifstream f(kRoot / "src/ops/families.def");
  ASSERT_TRUE(f) << "src/ops/families.def not found";
  const std::regex fam_re("MEMFIT_OP_FAMILY(_REF_CPU)?\\(([a-z_0-9]+)\\)");
  std::map<std::string, int> listed;
  std::set<std::string> ref_serves_cpu;
  std::smatch m;
  for (std::string line; std::getline(f, line);)
    if (std::regex_match(line, m, fam_re)) {
      ++listed[m[2]];
      if (m[1].matched) ref_serves_cpu.insert(m[2]);
    }
  EXPECT_GT(listed.size(), 10u);
  for (const auto& [name, times] : listed) EXPECT_EQ(times, 1) << name << " is listed " << times << " times";
  std::set<std::string> folders;
  for (const auto& e : fs::directory_iterator(kRoot / "src/ops")) {
    if (!e.is_directory()) continue;
    const std::string name = e.path().filename().string();
    for (const auto& file : fs::directory_iterator(e.path()))
      EXPECT_FALSE(ops_layer_of(file.path().filename().string()).empty())
          << "src/ops/" << name << "/" << file.path().filename().string() << " is named for no layer";
    if (name == "common") continue;
    folders.insert(name);
    EXPECT_TRUE(listed.count(name)) << "src/ops/" << name << " is not listed in src/ops/families.def";
    for (const char* piece : {"op.cpp", "ref.hpp", "lower.cpp"})
      EXPECT_TRUE(fs::exists(e.path() / piece)) << "src/ops/" << name << " has no " << piece;
    const bool cpu = fs::exists(e.path() / "lower_cpu.cpp");
    EXPECT_EQ(cpu, !ref_serves_cpu.count(name))
        << "src/ops/" << name << (cpu ? " has CPU kernels but is listed as MEMFIT_OP_FAMILY_REF_CPU"
                                       : " has no lower_cpu.cpp: list it as MEMFIT_OP_FAMILY_REF_CPU");
  }
  for (const auto& [name, times] : listed)
    EXPECT_TRUE(folders.count(name)) << name << " is listed but src/ops/" << name << " does not exist";
}

TEST(Layering, TheCheckSeesAViolation) {
  // The classifier itself: a kernel including the runtime, or the data layer
  // including training, is against the rule.
  EXPECT_FALSE(kAllowed.at(layer_of("src/ops/conv/cpu.cpp")).count(layer_of(included_path("runtime/device.hpp"))));
  EXPECT_FALSE(kAllowed.at(layer_of("src/data/loader.cpp")).count(layer_of(included_path("train/step_io.hpp"))));
  EXPECT_TRUE(kAllowed.at(layer_of("src/train/fit.cpp")).count(layer_of(included_path("runtime/device.hpp"))));
}
