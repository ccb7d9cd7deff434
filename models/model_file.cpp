#include "models/model_file.hpp"

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <vector>

#include "models/zoo.hpp"

namespace memfit::models {
namespace {

struct Line {
  int number = 0;
  std::string op;
  std::vector<std::string> words;           // positional words after the op
  std::map<std::string, std::string> kv;    // key=value options
};

struct Program {
  std::string source;
  std::vector<Line> lines;
};

[[noreturn]] void fail(const Program& p, const Line& l, const std::string& msg) {
  throw GraphError(p.source + ":" + std::to_string(l.number) + ": " + msg);
}

int64_t get_int(const Program& p, const Line& l, const std::string& key, int64_t dflt, bool required, int64_t classes = -1) {
  auto it = l.kv.find(key);
  if (it == l.kv.end()) {
    if (required) fail(p, l, l.op + " needs " + key + "=");
    return dflt;
  }
  if (it->second == "classes" && classes >= 0) return classes;
  try {
    size_t pos = 0;
    long long v = std::stoll(it->second, &pos);
    if (pos != it->second.size()) throw std::invalid_argument("x");
    return v;
  } catch (const std::exception&) {
    fail(p, l, key + "= expects an integer, got '" + it->second + "'");
  }
}

double get_double(const Program& p, const Line& l, const std::string& key, double dflt, bool required) {
  auto it = l.kv.find(key);
  if (it == l.kv.end()) {
    if (required) fail(p, l, l.op + " needs " + key + "=");
    return dflt;
  }
  try {
    size_t pos = 0;
    double v = std::stod(it->second, &pos);
    if (pos != it->second.size()) throw std::invalid_argument("x");
    return v;
  } catch (const std::exception&) {
    fail(p, l, key + "= expects a number, got '" + it->second + "'");
  }
}

// Which keys each op accepts and how many positional words it takes.
struct Syntax {
  size_t words;
  std::set<std::string> keys;
};
const std::map<std::string, Syntax>& syntax() {
  static const std::map<std::string, Syntax> s{
      {"conv", {1, {"out", "k", "stride", "pad", "dilation", "groups", "bias"}}},
      {"linear", {1, {"out", "bias"}}},
      {"batchnorm", {1, {"eps", "momentum"}}},
      {"dropout", {1, {"p"}}},
      {"relu", {0, {}}},
      {"flatten", {0, {}}},
      {"gap", {0, {}}},
      {"maxpool", {0, {"k", "stride", "pad"}}},
      {"avgpool", {0, {"k", "stride", "pad", "count_include_pad"}}},
      {"save", {1, {}}},
      {"load", {1, {}}},
      {"add", {1, {}}},
      {"scope", {1, {}}},
      {"end", {0, {}}},
  };
  return s;
}

ValueId run(const Program& p, Builder& b, ValueId x, int64_t classes) {
  std::map<std::string, ValueId> labels;
  std::vector<std::unique_ptr<Builder::Scope>> scopes;
  for (const Line& l : p.lines) {
    auto label = [&](const std::string& name) {
      auto it = labels.find(name);
      if (it == labels.end()) fail(p, l, "no value is labelled '" + name + "' (use save first)");
      return it->second;
    };
    try {
      if (l.op == "conv") {
        ConvOpts o;
        o.name = l.words[0];
        o.stride = get_int(p, l, "stride", 1, false);
        o.pad = get_int(p, l, "pad", 0, false);
        o.dilation = get_int(p, l, "dilation", 1, false);
        o.groups = get_int(p, l, "groups", 1, false);
        o.bias = get_int(p, l, "bias", 1, false) != 0;
        x = conv2d(b, x, get_int(p, l, "out", 0, true, classes), get_int(p, l, "k", 0, true), o);
      } else if (l.op == "linear") {
        x = linear(b, x, get_int(p, l, "out", 0, true, classes),
                   {.bias = get_int(p, l, "bias", 1, false) != 0, .name = l.words[0]});
      } else if (l.op == "batchnorm") {
        x = batch_norm(b, x, {.eps = get_double(p, l, "eps", 1e-5, false),
                              .momentum = get_double(p, l, "momentum", 0.1, false), .name = l.words[0]});
      } else if (l.op == "dropout") {
        x = dropout(b, x, get_double(p, l, "p", 0, true), l.words[0]);
      } else if (l.op == "relu") {
        x = relu(b, x);
      } else if (l.op == "flatten") {
        x = flatten(b, x);
      } else if (l.op == "gap") {
        x = global_avg_pool(b, x);
      } else if (l.op == "maxpool" || l.op == "avgpool") {
        PoolOpts o;
        o.stride = get_int(p, l, "stride", 0, false);
        o.pad = get_int(p, l, "pad", 0, false);
        o.count_include_pad = get_int(p, l, "count_include_pad", 1, false) != 0;
        const int64_t k = get_int(p, l, "k", 0, true);
        x = l.op == "maxpool" ? max_pool2d(b, x, k, o) : avg_pool2d(b, x, k, o);
      } else if (l.op == "save") {
        labels[l.words[0]] = x;
      } else if (l.op == "load") {
        x = label(l.words[0]);
      } else if (l.op == "add") {
        x = add(b, x, label(l.words[0]));
      } else if (l.op == "scope") {
        scopes.push_back(std::make_unique<Builder::Scope>(b, l.words[0]));
      } else if (l.op == "end") {
        if (scopes.empty()) fail(p, l, "'end' without 'scope'");
        scopes.pop_back();
      }
    } catch (const GraphError& e) {
      std::string m = e.what();
      if (m.rfind(p.source + ":", 0) == 0) throw;
      fail(p, l, m);
    }
  }
  if (!scopes.empty()) throw GraphError(p.source + ": a 'scope' is not closed with 'end'");
  return x;
}

}  // namespace

ModelBuilder parse_model_text(const std::string& text, const std::string& source) {
  auto prog = std::make_shared<Program>();
  prog->source = source;
  std::istringstream in(text);
  std::string raw;
  int number = 0, depth = 0;
  while (std::getline(in, raw)) {
    ++number;
    if (auto h = raw.find('#'); h != std::string::npos) raw.resize(h);
    std::istringstream ls(raw);
    Line l;
    l.number = number;
    if (!(ls >> l.op)) continue;
    auto it = syntax().find(l.op);
    if (it == syntax().end()) fail(*prog, l, "unknown layer '" + l.op + "'");
    std::string w;
    while (ls >> w) {
      if (auto eq = w.find('='); eq != std::string::npos) {
        std::string k = w.substr(0, eq);
        if (!it->second.keys.count(k)) fail(*prog, l, l.op + " has no option '" + k + "'");
        if (l.kv.count(k)) fail(*prog, l, "option '" + k + "' given twice");
        l.kv[k] = w.substr(eq + 1);
      } else {
        l.words.push_back(w);
      }
    }
    if (l.words.size() != it->second.words)
      fail(*prog, l, l.op + " takes " + std::to_string(it->second.words) + " name" + (it->second.words == 1 ? "" : "s") +
                         ", got " + std::to_string(l.words.size()));
    if (l.op == "scope") ++depth;
    if (l.op == "end" && --depth < 0) fail(*prog, l, "'end' without 'scope'");
    prog->lines.push_back(std::move(l));
  }
  if (prog->lines.empty()) throw GraphError(source + ": no layers");
  if (depth != 0) throw GraphError(source + ": a 'scope' is not closed with 'end'");
  return [prog](Builder& b, ValueId x, int64_t classes) { return run(*prog, b, x, classes); };
}

ModelBuilder load_model_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw GraphError("cannot read model file " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_model_text(ss.str(), path);
}

ModelBuilder resolve_model(const std::string& name) {
  if (ModelFn fn = find_model(name)) return fn;
  if (std::filesystem::is_regular_file(name)) return load_model_file(name);
  std::string names;
  for (auto& m : model_names()) names += (names.empty() ? "" : ", ") + m;
  throw GraphError("unknown model '" + name + "': not a zoo model (" + names + ") nor a model file");
}

}  // namespace memfit::models
