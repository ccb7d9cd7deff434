#include "models/model_file.hpp"

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
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

// A mistake in the file's text (found while parsing)...
[[noreturn]] void fail(const Program& p, const Line& l, const std::string& msg) {
  throw ModelFileError(p.source + ":" + std::to_string(l.number) + ": " + msg);
}

// ... or while building the graph (shapes): a GraphError naming the line.
[[noreturn]] void fail_build(const Program& p, const Line& l, const std::string& msg) {
  throw GraphError(p.source + ":" + std::to_string(l.number) + ": " + msg);
}

// Limits that keep every count derived from a model file (fan-in, weight and
// activation element counts) far inside int64 and the parse itself small.
constexpr int64_t kMaxChannels = int64_t(1) << 20;  // out= of conv and linear
constexpr int64_t kMaxKernel = 1024;                // k=, also dilation=
constexpr int64_t kMaxStride = 1024;
constexpr int64_t kMaxPad = 1024;
constexpr int kMaxDepth = 64;                       // nested scopes
constexpr size_t kMaxFileBytes = size_t(1) << 20;   // a ResNet-50 file is ~5 KB

int64_t get_int(const Program& p, const Line& l, const std::string& key, int64_t dflt, bool required, int64_t classes = -1) {
  auto it = l.kv.find(key);
  if (it == l.kv.end()) {
    if (required) fail(p, l, l.op + " needs " + key + "=");
    return dflt;
  }
  if (it->second == "classes" && classes >= 0) return classes;
  const std::string& t = it->second;
  int64_t v = 0;
  size_t i = t.size() > 0 && (t[0] == '-' || t[0] == '+') ? 1 : 0;
  bool ok = i < t.size();
  for (; ok && i < t.size(); ++i)
    ok = t[i] >= '0' && t[i] <= '9' && !__builtin_mul_overflow(v, 10, &v) && !__builtin_add_overflow(v, t[i] - '0', &v);
  if (!ok) fail(p, l, key + "= expects an integer from -2^63+1 to 2^63-1, got '" + t + "'");
  return t[0] == '-' ? -v : v;
}

// The integer at `key` (or dflt), refused outside [lo, hi] naming the line.
int64_t get_range(const Program& p, const Line& l, const std::string& key, int64_t dflt, bool required,
                  int64_t lo, int64_t hi, int64_t classes = -1) {
  const int64_t v = get_int(p, l, key, dflt, required, classes);
  if (v < lo || v > hi)
    fail(p, l, l.op + " " + key + "=" + std::to_string(v) + " is out of range: expected " +
                   (hi == INT64_MAX ? ">= " + std::to_string(lo)
                                    : std::to_string(lo) + ".." + std::to_string(hi)));
  return v;
}

double get_double(const Program& p, const Line& l, const std::string& key, double dflt, bool required) {
  auto it = l.kv.find(key);
  if (it == l.kv.end()) {
    if (required) fail(p, l, l.op + " needs " + key + "=");
    return dflt;
  }
  const std::string& t = it->second;
  char* end = nullptr;
  errno = 0;
  const double v = t.empty() || std::isspace(static_cast<unsigned char>(t[0])) ? NAN : std::strtod(t.c_str(), &end);
  if (!std::isfinite(v) || errno == ERANGE || end != t.c_str() + t.size())
    fail(p, l, key + "= expects a finite number, got '" + t + "'");
  return v;
}

double get_double_in(const Program& p, const Line& l, const std::string& key, double dflt, bool required,
                     double lo, double hi, bool hi_open) {
  const double v = get_double(p, l, key, dflt, required);
  if (v < lo || v > hi || (hi_open && v == hi))
    fail(p, l, l.op + " " + key + "=" + l.kv.at(key) + " is out of range: expected " + std::to_string(lo) +
                   " <= " + key + (hi_open ? " < " : " <= ") + std::to_string(hi));
  return v;
}

// Every attribute of a parsed line in range, checked at parse time (before
// any graph is built); `classes` stands for a value >= 1 not yet known.
void check_line(const Program& p, const Line& l) {
  constexpr int64_t kAny = 1;  // a valid stand-in for out=classes
  if (l.op == "conv") {
    get_range(p, l, "out", 0, true, 1, kMaxChannels, kAny);
    get_range(p, l, "k", 0, true, 1, kMaxKernel);
    get_range(p, l, "stride", 1, false, 1, kMaxStride);
    get_range(p, l, "pad", 0, false, 0, kMaxPad);
    get_range(p, l, "dilation", 1, false, 1, kMaxKernel);
    get_range(p, l, "groups", 1, false, 1, kMaxChannels);
    get_range(p, l, "bias", 1, false, 0, 1);
  } else if (l.op == "linear") {
    get_range(p, l, "out", 0, true, 1, kMaxChannels, kAny);
    get_range(p, l, "bias", 1, false, 0, 1);
  } else if (l.op == "batchnorm") {
    if (l.kv.count("eps") && get_double(p, l, "eps", 0, true) <= 0) fail(p, l, "batchnorm eps= must be > 0");
    get_double_in(p, l, "momentum", 0.1, false, 0.0, 1.0, false);
  } else if (l.op == "dropout") {
    get_double_in(p, l, "p", 0, true, 0.0, 1.0, true);
  } else if (l.op == "maxpool" || l.op == "avgpool") {
    get_range(p, l, "k", 0, true, 1, kMaxKernel);
    get_range(p, l, "stride", 1, false, 1, kMaxStride);
    get_range(p, l, "pad", 0, false, 0, kMaxPad);
    get_range(p, l, "count_include_pad", 1, false, 0, 1);
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
      if (it == labels.end()) fail_build(p, l, "no value is labelled '" + name + "' (use save first)");
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
        o.stride = get_int(p, l, "stride", 0, false);  // 0: the window (checked >= 1 when given)
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
        if (scopes.empty()) fail_build(p, l, "'end' without 'scope'");
        scopes.pop_back();
      }
    } catch (const GraphError& e) {
      std::string m = e.what();
      if (m.rfind(p.source + ":", 0) == 0) throw;
      fail_build(p, l, m);
    }
  }
  if (!scopes.empty()) throw GraphError(p.source + ": a 'scope' is not closed with 'end'");
  return x;
}

std::string known_layers() {
  std::string s;
  for (const auto& [name, syn] : syntax()) s += (s.empty() ? "" : ", ") + name;
  return s;
}

}  // namespace

ModelBuilder parse_model_text(const std::string& text, const std::string& source) {
  if (text.size() > kMaxFileBytes)
    throw ModelFileError(source + ": model file is " + std::to_string(text.size()) + " bytes, over the " +
                         std::to_string(kMaxFileBytes) + "-byte limit: not a model file?");
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
    if (it == syntax().end()) fail(*prog, l, "unknown layer '" + l.op + "' (known: " + known_layers() + ")");
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
    check_line(*prog, l);
    if (l.op == "scope" && ++depth > kMaxDepth)
      fail(*prog, l, "scopes nested deeper than " + std::to_string(kMaxDepth));
    if (l.op == "end" && --depth < 0) fail(*prog, l, "'end' without 'scope'");
    prog->lines.push_back(std::move(l));
  }
  if (prog->lines.empty()) throw ModelFileError(source + ": no layers");
  if (depth != 0) throw ModelFileError(source + ": a 'scope' is not closed with 'end'");
  return [prog](Builder& b, ValueId x, int64_t classes) { return run(*prog, b, x, classes); };
}

ModelBuilder load_model_file(const std::string& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) throw ModelFileError("cannot read model file " + path + ": not found");
  if (!std::filesystem::is_regular_file(st)) throw ModelFileError(path + ": not a regular file");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw ModelFileError("cannot read model file " + path);
  // Read at most one byte past the limit: a huge file is refused unread.
  std::string text(kMaxFileBytes + 1, '\0');
  f.read(text.data(), std::streamsize(text.size()));
  text.resize(size_t(f.gcount()));
  return parse_model_text(text, path);
}

ModelBuilder resolve_model(const std::string& name) {
  if (ModelFn fn = find_model(name)) return fn;
  if (std::filesystem::is_regular_file(name)) return load_model_file(name);
  std::string names;
  for (auto& m : model_names()) names += (names.empty() ? "" : ", ") + m;
  throw GraphError("unknown model '" + name + "': not a zoo model (" + names + ") nor a model file");
}

}  // namespace memfit::models
