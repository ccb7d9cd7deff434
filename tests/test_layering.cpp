// The tree's layering, checked on the sources: each folder is a layer (and
// a library named like it, CMakeLists.txt), lowest first: base; graph,
// autodiff, optim, plan; kernels; runtime; io, data; models, models/onnx;
// then the pipeline above them: compile (the step compiler), fit (budget,
// policy search, plan report), report (the run's log and report page),
// persist (checkpoints), dist (data parallelism), train (the loop), infer,
// cli. A file may include only files of its own layer or of the layers it
// builds on, so no lower layer reaches into a higher one (kernels know
// nothing of graphs; the runtime nothing of training; the data layer nothing
// of kernels; the fit nothing of the train loop). Every folder of src/ and
// models/ has a layer: a new folder must be placed before this test passes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

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

// The folders and their layers ("src/ops/" is told per file above).
const std::pair<const char*, const char*> kFolders[] = {
    {"src/base/", "base"},       {"src/graph/", "graph"},     {"src/autodiff/", "autodiff"},
    {"src/optim/", "optim"},     {"src/plan/", "plan"},       {"src/kernels/", "kernels"},
    {"src/runtime/", "runtime"}, {"src/io/", "io"},           {"src/data/", "data"},
    {"models/onnx/", "onnx"},    {"models/", "models"},       {"src/compile/", "compile"},
    {"src/fit/", "fit"},         {"src/report/", "report"},   {"src/persist/", "persist"},
    {"src/dist/", "dist"},       {"src/train/", "train"},     {"src/infer/", "infer"},
    {"src/cli/", "cli"}};

// The layer of a path relative to the root ("" for files outside them).
std::string layer_of(const std::string& p) {
  if (p.rfind("src/ops/", 0) == 0) return ops_layer_of(fs::path(p).filename().string());
  if (p == "include/memfit/rng.hpp") return "base";  // the counter-based generator: everyone's
  if (p == "include/memfit/runtime.hpp") return "runtime";
  if (p == "include/memfit/plan.hpp") return "plan";
  if (p == "include/memfit/autodiff.hpp" || p == "include/memfit/recompute.hpp" || p == "include/memfit/accumulate.hpp")
    return "autodiff";
  if (p == "include/memfit/optim.hpp" || p == "include/memfit/tier.hpp") return "optim";
  if (p.rfind("include/memfit/", 0) == 0) return "graph";
  for (const auto& [pre, l] : kFolders)
    if (p.rfind(pre, 0) == 0) return l;
  return "";
}

// What an #include "..." names, as a path relative to the root.
std::string included_path(const std::string& inc) {
  if (inc.rfind("memfit/", 0) == 0) return "include/" + inc;
  if (inc.rfind("models/", 0) == 0) return inc;
  return "src/" + inc;
}

// What each layer builds on (besides itself). Transitive closure is taken
// below, so a layer lists only its direct foundations.
const std::map<std::string, std::set<std::string>> kBuildsOn = {
    {"base", {}},
    {"graph", {"base"}},
    {"autodiff", {"graph"}},
    {"optim", {"graph"}},
    {"plan", {"graph"}},
    {"kernels", {"base"}},
    {"runtime", {"plan", "kernels", "optim"}},
    {"io", {"graph"}},
    {"data", {"graph"}},
    {"models", {"graph"}},
    {"onnx", {"models"}},
    {"compile", {"autodiff", "optim", "onnx"}},
    {"fit", {"compile", "runtime", "data"}},
    {"report", {"fit"}},
    {"persist", {"compile", "runtime", "io"}},
    {"dist", {"compile", "runtime"}},
    {"train", {"report", "persist", "dist"}},
    {"infer", {"fit", "persist"}},
    {"cli", {"train", "infer"}},
};

// layer -> itself and every layer under it.
std::map<std::string, std::set<std::string>> allowed_layers() {
  std::map<std::string, std::set<std::string>> all;
  for (const auto& [layer, direct] : kBuildsOn) {
    std::set<std::string> seen{layer};
    std::vector<std::string> todo(direct.begin(), direct.end());
    while (!todo.empty()) {
      const std::string l = todo.back();
      todo.pop_back();
      if (!seen.insert(l).second) continue;
      for (const auto& d : kBuildsOn.at(l)) todo.push_back(d);
    }
    all[layer] = seen;
  }
  return all;
}
const std::map<std::string, std::set<std::string>> kAllowed = allowed_layers();

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
  EXPECT_TRUE(kAllowed.at(layer_of("src/fit/fit.cpp")).count(layer_of(included_path("runtime/device.hpp"))));
  // The fit plans runs; it never reaches into the loop that runs them, and
  // the zoo does not know the ONNX importer.
  EXPECT_FALSE(kAllowed.at(layer_of("src/fit/fit.cpp")).count(layer_of(included_path("train/run_plan.hpp"))));
  EXPECT_FALSE(kAllowed.at(layer_of("models/model.cpp")).count(layer_of(included_path("models/onnx/model.hpp"))));
  EXPECT_FALSE(kAllowed.at(layer_of("src/dist/comm.cpp")).count(layer_of(included_path("train/trainer.hpp"))));
}

TEST(Layering, EveryFolderHasALayerAndTheLayersFormNoCycle) {
  // Every folder holding sources under src/ and models/ is placed; a folder
  // nobody placed would escape the check above.
  for (const char* top : {"src", "models"})
    for (const auto& e : fs::recursive_directory_iterator(kRoot / top)) {
      if (!e.is_directory()) continue;
      const std::string rel = fs::relative(e.path(), kRoot).string() + "/";
      bool has_source = false;
      for (const auto& f : fs::directory_iterator(e.path()))
        if (f.path().extension() == ".cpp" || f.path().extension() == ".hpp" || f.path().extension() == ".cu")
          has_source = true;
      if (!has_source || rel.rfind("src/ops/", 0) == 0) continue;  // op families: per file
      EXPECT_FALSE(layer_of(rel + "x.cpp").empty()) << rel << " has no layer in tests/test_layering.cpp";
    }
  // No layer builds on one above it: the order is a strict one (a cycle
  // would make two layers each other's foundation).
  for (const auto& [layer, below] : kAllowed)
    for (const auto& l : below)
      if (l != layer) EXPECT_FALSE(kAllowed.at(l).count(layer)) << layer << " and " << l << " build on each other";
  // Each layer but cli is a library of the build, named like its folder.
  std::ifstream cm(kRoot / "CMakeLists.txt");
  std::stringstream text;
  text << cm.rdbuf();
  for (const auto& [layer, below] : kBuildsOn)
    if (layer != "cli")
      EXPECT_NE(text.str().find("add_library(memfit_" + layer + "${suffix}"), std::string::npos)
          << "no library memfit_" << layer << " in CMakeLists.txt";
}

namespace {

// The calls in `source` (its // comments left out) that read or change the
// process environment, or set the process's OpenMP thread count.
std::vector<std::string> environment_uses(const std::string& source) {
  static const std::regex use_re(
      "\\b(getenv|secure_getenv|setenv|unsetenv|putenv|clearenv|omp_set_num_threads)\\s*\\(|\\benviron\\b");
  std::vector<std::string> found;
  std::istringstream in(source);
  for (std::string line; std::getline(in, line);) {
    if (const size_t c = line.find("//"); c != std::string::npos) line.resize(c);
    for (std::sregex_iterator it(line.begin(), line.end(), use_re), end; it != end; ++it)
      found.push_back((*it)[1].matched ? (*it)[1].str() : "environ");
  }
  return found;
}

}  // namespace

TEST(Layering, NothingBelowTheCommandReadsTheEnvironment) {
  // The command (src/cli, and the Python package beside it) reads the
  // environment once (cli/environment.hpp) and passes what it found down as
  // options; the layers below take everything as arguments. The one thread
  // count set below it is run_with_threads's, on a thread of its own.
  EXPECT_EQ(environment_uses("x = std::getenv(\"HOME\");  // getenv( in a comment\n::setenv(a, b, 0);"),
            (std::vector<std::string>{"getenv", "setenv"}));
  EXPECT_EQ(environment_uses("posix_spawn(&p, a, nullptr, nullptr, v, environ);\nomp_set_num_threads(1);"),
            (std::vector<std::string>{"environ", "omp_set_num_threads"}));
  EXPECT_TRUE(environment_uses("int n = omp_get_max_threads();  // not setenv(\n").empty());
  size_t files = 0;
  std::string bad;
  for (const char* top : {"include", "src", "models"})
    for (const auto& e : fs::recursive_directory_iterator(kRoot / top)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".cpp" && ext != ".hpp" && ext != ".cu")) continue;
      const std::string rel = fs::relative(e.path(), kRoot).string();
      if (layer_of(rel) == "cli") continue;
      ++files;
      std::ifstream f(e.path());
      std::stringstream text;
      text << f.rdbuf();
      for (const std::string& use : environment_uses(text.str()))
        if (!(use == "omp_set_num_threads" && rel == "src/base/process.cpp")) bad += "\n  " + rel + ": " + use;
    }
  EXPECT_GT(files, 100u) << "the sources were not found under " << kRoot;
  EXPECT_TRUE(bad.empty()) << "environment reads below the command:" << bad;
}

TEST(Layering, NothingDecidesOnTheBackendShorthand) {
  // Backend is a shorthand for the built-in devices' names (device_for). A
  // device that plugs in has no Backend value, so what differs between
  // devices is asked of the Device (its traits), never of the shorthand:
  // below the command, Backend's values appear where the shorthand is
  // defined and named (runtime.hpp, backend_name) and ExecConfig's
  // shorthand is read where it becomes a device (device_of) only.
  static const std::regex use_re("\\bBackend::|\\.backend\\b|->backend\\b");
  size_t files = 0;
  std::string bad;
  for (const char* top : {"include", "src", "models"})
    for (const auto& e : fs::recursive_directory_iterator(kRoot / top)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".cpp" && ext != ".hpp" && ext != ".cu")) continue;
      const std::string rel = fs::relative(e.path(), kRoot).string();
      if (layer_of(rel) == "cli") continue;
      ++files;
      std::ifstream f(e.path());
      int line_no = 0;
      for (std::string line; std::getline(f, line);) {
        ++line_no;
        if (const size_t c = line.find("//"); c != std::string::npos) line.resize(c);
        std::smatch m;
        if (!std::regex_search(line, m, use_re)) continue;
        const bool value = m.str().rfind("Backend::", 0) == 0;
        const bool allowed = value ? (rel == "include/memfit/runtime.hpp" || rel == "src/runtime/executor.cpp")
                                   : rel == "src/runtime/device.cpp";
        if (!allowed) bad += "\n  " + rel + ":" + std::to_string(line_no) + ": " + m.str();
      }
    }
  EXPECT_GT(files, 100u) << "the sources were not found under " << kRoot;
  EXPECT_TRUE(bad.empty()) << "decisions on the Backend shorthand below the command:" << bad;
}
