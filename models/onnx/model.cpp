// ONNX import (onnx_model.hpp). The file is parsed once with Debian's ONNX
// protobuf classes (libonnx-dev); the float initializers are moved out of the
// protobuf into shared arrays that become the parameters' initial values
// (InitSpec::Given), and the node list is kept to be replayed onto a Builder
// each time a step graph is built (the budget search builds several).
// The nodes become memfit ops in convert.cpp and ops_*.cpp.
#include "models/onnx/model.hpp"

#include "models/onnx/import.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fnmatch.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>


namespace memfit::models {

using namespace onnx_import;

// ---------------------------------------------------------------- tensors ----

namespace {

// The bytes of a tensor stored as external data (torch's dynamo exporter
// writes the weights to a file beside the model): `location` a file in the
// model's own folder (a relative name that stays inside it, symbolic links
// resolved), `offset` and `length` within it, length exactly the tensor's
// n elements. Anything else is a bad model file naming the tensor.
std::string read_external(const OnnxFile& f, const onnx::TensorProto& t, const std::string& what, int64_t n) {
  std::string location;
  int64_t offset = 0, length = -1;
  auto number = [&](const std::string& key, const std::string& v) {
    if (v.empty() || v.size() > 18 || !std::all_of(v.begin(), v.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
      file_error(f, what + ": external data " + key + " '" + v.substr(0, 40) + "' is not a whole number");
    return std::stoll(v);
  };
  for (const auto& kv : t.external_data()) {
    if (kv.key() == "location") location = kv.value();
    else if (kv.key() == "offset") offset = number("offset", kv.value());
    else if (kv.key() == "length") length = number("length", kv.value());
  }
  const size_t elem = t.data_type() == onnx::TensorProto::FLOAT || t.data_type() == onnx::TensorProto::INT32 ? 4
                      : t.data_type() == onnx::TensorProto::DOUBLE || t.data_type() == onnx::TensorProto::INT64 ? 8
                      : t.data_type() == onnx::TensorProto::BOOL ? 1 : 0;
  if (elem == 0)
    file_error(f, what + " has ONNX data type " + std::to_string(t.data_type()) +
                      ", which memfit does not read (float, double, int64, int32, bool)");
  int64_t want = 0;
  if (__builtin_mul_overflow(n, static_cast<int64_t>(elem), &want)) file_error(f, what + " is too large");
  if (length < 0) length = want;
  if (length != want)
    file_error(f, what + ": external data of " + std::to_string(length) + " bytes for its shape " + shape_str(Shape(t.dims().begin(), t.dims().end())) +
                      " of " + std::to_string(want));
  namespace fs = std::filesystem;
  const fs::path rel(location);
  bool inside = !location.empty() && rel.is_relative();
  for (const auto& part : rel) inside = inside && part != "..";
  if (!inside)
    file_error(f, what + ": external data location '" + location.substr(0, 200) + "' is not a file name inside the "
                         "model's folder");
  std::error_code ec;
  const fs::path folder = fs::weakly_canonical(fs::absolute(f.path).parent_path(), ec);
  const fs::path file = fs::weakly_canonical(folder / rel, ec);
  const auto [end, mismatch] = std::mismatch(folder.begin(), folder.end(), file.begin(), file.end());
  if (ec || end != folder.end())
    file_error(f, what + ": external data location '" + location.substr(0, 200) + "' leads outside the model's folder");
  std::ifstream in(file, std::ios::binary);
  const uintmax_t size = fs::file_size(file, ec);
  if (!in || ec || !fs::is_regular_file(file))
    file_error(f, what + ": cannot read its external data file " + file.string() +
                      " (keep the file torch wrote beside the model)");
  if (static_cast<uintmax_t>(offset) > size || static_cast<uintmax_t>(length) > size - static_cast<uintmax_t>(offset))
    file_error(f, what + ": external data [" + std::to_string(offset) + ", +" + std::to_string(length) + ") is past the end of " +
                      file.string() + " (" + std::to_string(size) + " bytes: truncated?)");
  std::string bytes(static_cast<size_t>(length), '\0');
  in.seekg(offset);
  if (!in.read(bytes.data(), length)) file_error(f, what + ": cannot read its external data from " + file.string());
  return bytes;
}

}  // namespace

Const onnx_import::read_tensor(const OnnxFile& f, const onnx::TensorProto& t, const std::string& what) {
  Const c;
  int64_t n = 1;
  for (int64_t d : t.dims()) {
    if (d < 0) file_error(f, what + " has a negative dimension");
    if (__builtin_mul_overflow(n, d, &n)) file_error(f, what + " has more elements than 64-bit integers count");
    c.dims.push_back(d);
  }
  std::string external;
  if (t.data_location() == onnx::TensorProto::EXTERNAL) external = read_external(f, t, what, n);
  const std::string& raw = t.data_location() == onnx::TensorProto::EXTERNAL ? external : t.raw_data();
  auto check = [&](int64_t have, size_t elem) {
    if (have != n)
      file_error(f, what + " holds " + std::to_string(have) + " values for its shape " + shape_str(c.dims) +
                        " (truncated or corrupt file)");
    (void)elem;
  };
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT: {
      auto v = std::make_shared<std::vector<float>>();
      if (!raw.empty()) {
        check(static_cast<int64_t>(raw.size() / 4), 4);
        if (raw.size() % 4) file_error(f, what + ": its float data is not a whole number of values");
        v->resize(raw.size() / 4);
        std::memcpy(v->data(), raw.data(), raw.size());  // little-endian, as ONNX stores it
      } else {
        check(t.float_data_size(), 4);
        v->assign(t.float_data().begin(), t.float_data().end());
      }
      c.is_float = true;
      c.f = std::move(v);
      return c;
    }
    case onnx::TensorProto::DOUBLE: {  // scalar factors only; weights are float
      auto v = std::make_shared<std::vector<float>>();
      if (!raw.empty()) {
        check(static_cast<int64_t>(raw.size() / 8), 8);
        for (size_t k = 0; k + 8 <= raw.size(); k += 8) {
          double d;
          std::memcpy(&d, raw.data() + k, 8);
          v->push_back(static_cast<float>(d));
        }
      } else {
        check(t.double_data_size(), 8);
        for (double d : t.double_data()) v->push_back(static_cast<float>(d));
      }
      c.is_float = true;
      c.f = std::move(v);
      return c;
    }
    case onnx::TensorProto::INT64:
    case onnx::TensorProto::INT32:
    case onnx::TensorProto::BOOL: {
      const size_t elem = t.data_type() == onnx::TensorProto::INT64 ? 8 : t.data_type() == onnx::TensorProto::INT32 ? 4 : 1;
      if (!raw.empty()) {
        check(static_cast<int64_t>(raw.size() / elem), elem);
        for (size_t k = 0; k + elem <= raw.size(); k += elem) {
          int64_t v = 0;
          if (elem == 8) std::memcpy(&v, raw.data() + k, 8);
          else if (elem == 4) { int32_t w; std::memcpy(&w, raw.data() + k, 4); v = w; }
          else v = raw[k] != 0;
          c.i.push_back(v);
        }
      } else if (t.data_type() == onnx::TensorProto::INT64) {
        check(t.int64_data_size(), 8);
        c.i.assign(t.int64_data().begin(), t.int64_data().end());
      } else {
        check(t.int32_data_size(), 4);
        c.i.assign(t.int32_data().begin(), t.int32_data().end());
      }
      return c;
    }
    default:
      file_error(f, what + " has ONNX data type " + std::to_string(t.data_type()) +
                        ", which memfit does not read (float, double, int64, int32, bool)");
  }
}

namespace {

// protobuf refuses messages over 2 GiB; so does the importer, before reading.
constexpr uintmax_t kMaxFileBytes = uintmax_t(2) << 30;

// The default-domain opsets whose semantics memfit's rules follow
// (convert.cpp and ops_*.cpp): from 9 (batch norm without `spatial`, the current
// Flatten and Gemm), to 22; the opsets between changed the imported ops only
// by input forms the rules read both ways (Split, Slice, Squeeze, Dropout,
// Pad as inputs or attributes; Softmax's axis before and after 13) or by
// types memfit refuses (int4, float8, ...). A newer opset may change an op's
// meaning, so it is refused, not guessed at.
constexpr int64_t kMinOpset = 9, kMaxOpset = 22;

int64_t default_opset(const onnx::ModelProto& m) {
  for (const auto& o : m.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") return o.version();
  return 0;
}

// Checks made once, on the file: one default-domain opset, every node's op
// and attributes known, one data input, one output.
void check_file(OnnxFile& f, const onnx::ModelProto& m) {
  const int64_t opset = default_opset(m);
  if (opset == 0) file_error(f, "imports no default ONNX opset (not a model torch.onnx.export wrote?)");
  if (opset < kMinOpset || opset > kMaxOpset)
    file_error(f, "declares ONNX opset " + std::to_string(opset) + ", outside the opsets memfit imports (" +
                      std::to_string(kMinOpset) + " to " + std::to_string(kMaxOpset) +
                      "; op semantics change between opsets): export it with opset_version=17");
  for (const auto& n : f.graph.node()) {
    if (!n.domain().empty() && n.domain() != "ai.onnx")
      refuse(f, n, "is an op of domain '" + n.domain() + "', which memfit does not import (supported: " +
                       onnx_supported_ops() + ")");
    auto rule = op_rules().find(n.op_type());
    if (rule == op_rules().end())
      refuse(f, n, "memfit cannot train op " + n.op_type() + " (supported: " + onnx_supported_ops() + ")");
    for (const auto& a : n.attribute())
      if (!rule->second.attrs.count(a.name()))
        refuse(f, n, "attribute '" + a.name() + "' of " + n.op_type() + " is not supported");
    if (n.output_size() < 1 || n.output(0).empty()) refuse(f, n, "has no output");
    if (n.input_size() < rule->second.min_inputs)
      refuse(f, n, "has " + std::to_string(n.input_size()) + " inputs; " + n.op_type() + " takes at least " +
                       std::to_string(rule->second.min_inputs));
  }
  std::vector<const onnx::ValueInfoProto*> inputs;
  for (const auto& i : f.graph.input())
    if (!f.initializers.count(i.name())) inputs.push_back(&i);
  // token ids and their attention_mask, as a Hugging Face text model takes them
  auto integer_2d = [](const onnx::ValueInfoProto* i) {
    const auto& t = i->type().tensor_type();
    return (t.elem_type() == onnx::TensorProto::INT64 || t.elem_type() == onnx::TensorProto::INT32) &&
           t.shape().dim_size() == 2;
  };
  if (inputs.size() == 2 && inputs[1]->name() == "attention_mask" && integer_2d(inputs[0]) && integer_2d(inputs[1])) {
    f.mask_input = inputs[1]->name();
    inputs.pop_back();
  }
  if (inputs.size() != 1)
    file_error(f, "has " + std::to_string(inputs.size()) + " data inputs: memfit imports models of one input (an "
                  "image [N, C, H, W] or token ids [N, T]) or token ids with an integer attention_mask [N, T]");
  if (f.graph.output_size() != 1)
    file_error(f, "has " + std::to_string(f.graph.output_size()) + " outputs: memfit imports models of one (the logits); "
                  "a torchvision GoogLeNet or Inception-v3 in training mode adds its auxiliary classifiers' outputs "
                  "(build it with aux_logits=False), a Hugging Face model its cache (export with config.use_cache=False)");
  const auto& type = inputs[0]->type().tensor_type();
  f.input = inputs[0]->name();
  f.output = f.graph.output(0).name();
  for (const auto& d : type.shape().dim()) f.input_dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
  const int32_t et = type.elem_type();
  f.tokens = et == onnx::TensorProto::INT64 || et == onnx::TensorProto::INT32;
  if (f.tokens ? f.input_dims.size() != 2 : (et != onnx::TensorProto::FLOAT || f.input_dims.size() != 4))
    file_error(f, "its input '" + f.input + "' is not an image f32 [N, C, H, W] nor token ids [N, T]");
}

// ------------------------------------------------------ restored dropout ----

struct DropoutSpec {
  std::string pattern;
  double p = 0;
  bool after = false;
};

std::optional<DropoutSpec> parse_dropout_spec(const std::string& spec, std::string* why) {
  DropoutSpec d;
  std::string s = spec;
  if (s.rfind("after:", 0) == 0) {
    d.after = true;
    s = s.substr(6);
  } else if (s.rfind("before:", 0) == 0) {
    s = s.substr(7);
  }
  const size_t eq = s.rfind('=');
  if (eq == std::string::npos || eq == 0) {
    *why = "expected [after:]LAYER=P (e.g. classifier.1=0.2), got '" + spec + "'";
    return std::nullopt;
  }
  d.pattern = s.substr(0, eq);
  const std::string num = s.substr(eq + 1);
  char* end = nullptr;
  d.p = std::strtod(num.c_str(), &end);
  if (num.empty() || end != num.c_str() + num.size() || !(d.p > 0 && d.p < 1)) {
    *why = "the probability in '" + spec + "' must be a number above 0 and below 1";
    return std::nullopt;
  }
  return d;
}

// The layer a parameter belongs to: "classifier.1" for
// "classifier.1.weight" (and bias, a recurrent layer's weight_ih_l0, a
// MultiheadAttention's in_proj_weight); "" for a name of no layer.
std::string layer_of_param(const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos || dot == 0) return "";
  const std::string last = name.substr(dot + 1);
  auto ends = [&](const char* s) {
    const size_t n = std::strlen(s);
    return last.size() >= n && last.compare(last.size() - n, n, s) == 0;
  };
  if (last.rfind("weight", 0) == 0 || last.rfind("bias", 0) == 0 || ends("_weight") || ends("_bias"))
    return name.substr(0, dot);
  return "";
}

// Puts the dropout of `specs` into f's nodes before the patterns are found
// (a restored dropout is an ordinary Dropout node in training mode, its
// ratio and mode constants of the file).
//
// A value is "of layers L" when it is computed from the parameters of L and
// constants only (a weight, its Transpose, a Cast of it); a layer's uses are
// the nodes that read such a value together with a tensor of the graph,
// the data. Dropout goes on the data input of the layer's first use, or on
// the output of its last (nn.Linear on a 3-d input is a MatMul and the
// bias's Add: its output is the Add's).
void restore_dropout(OnnxFile& f, const std::vector<std::string>& specs) {
  if (specs.empty()) return;
  std::map<std::string, std::set<std::string>> of;  // value -> the layers it is computed from
  std::set<std::string> fixed;                     // values known when the file is read
  for (const auto& [name, c] : f.initializers) {
    fixed.insert(name);
    if (const std::string l = layer_of_param(name); !l.empty() && c.is_float) of[name].insert(l);
  }
  struct Use {
    size_t node;
    int data;  // the input that is a tensor of the graph
  };
  std::map<std::string, std::vector<Use>> uses;  // by layer, in node order
  const auto& nodes = f.graph.node();
  for (size_t k = 0; k < static_cast<size_t>(nodes.size()); ++k) {
    const onnx::NodeProto& n = nodes[static_cast<int>(k)];
    int data = -1;
    std::set<std::string> layers;
    for (int j = 0; j < n.input_size(); ++j) {
      const std::string& in = n.input(j);
      if (in.empty()) continue;
      if (!fixed.count(in)) {
        if (data < 0) data = j;
        continue;
      }
      if (auto it = of.find(in); it != of.end()) layers.insert(it->second.begin(), it->second.end());
    }
    if (data < 0 && n.op_type() != "RandomUniformLike") {  // all known: so are its outputs
      for (const auto& o : n.output()) {
        fixed.insert(o);
        if (!layers.empty()) of[o] = layers;
      }
    } else {
      for (const std::string& l : layers) uses[l].push_back({k, data});
    }
  }
  std::map<size_t, std::vector<onnx::NodeProto>> before, after;  // nodes to put before / after node k
  std::set<std::string> placed;
  int serial = 0;
  for (const std::string& text : specs) {
    std::string why;
    const auto spec = parse_dropout_spec(text, &why);
    if (!spec) file_error(f, "--dropout " + why);
    std::vector<std::string> hit;
    for (const auto& [layer, u] : uses)
      if (layer == spec->pattern || ::fnmatch(spec->pattern.c_str(), layer.c_str(), 0) == 0) hit.push_back(layer);
    if (hit.empty()) {
      std::string names;
      size_t shown = 0;
      for (const auto& [layer, u] : uses)
        if (shown++ < 12) names += (names.empty() ? "" : ", ") + layer;
      if (uses.size() > 12) names += ", ... (" + std::to_string(uses.size()) + " in all)";
      file_error(f, "--dropout " + text + ": '" + spec->pattern + "' names no layer of the model (layers by their "
                    "parameters' names: " + names + ")");
    }
    for (const std::string& layer : hit) {
      const Use& u = spec->after ? uses.at(layer).back() : uses.at(layer).front();
      const onnx::NodeProto& n = nodes[static_cast<int>(u.node)];
      if (!spec->after && (n.op_type() == "Gather" || n.op_type() == "GatherElements"))
        file_error(f, "--dropout " + text + ": the input of '" + layer + "' (" + n.op_type() +
                      ") is token ids, where dropout means nothing: drop its output (after:" + layer + "=P)");
      const std::string target = spec->after ? n.output(0) : n.input(u.data);
      if (!placed.insert(target + "\n" + std::to_string(u.node)).second)
        file_error(f, "--dropout " + text + ": '" + layer + "' gets dropout twice (on " + target + ")");
      for (const auto& m : nodes)
        if (m.op_type() == "Dropout" && (spec->after ? m.input(0) : m.output(0)) == target)
          file_error(f, "--dropout " + text + ": the file already has dropout on the " +
                        (spec->after ? "output" : "input") + " of '" + layer + "' (node '" + m.name() + "')");
      const std::string id = "memfit.dropout." + std::to_string(serial++);
      Const ratio;
      ratio.is_float = true;
      ratio.f = std::make_shared<const std::vector<float>>(1, static_cast<float>(spec->p));
      Const mode;
      mode.i = {1};
      f.initializers[id + ".ratio"] = ratio;
      f.initializers[id + ".training_mode"] = mode;
      onnx::NodeProto d;
      d.set_op_type("Dropout");
      d.set_name("/" + layer + (spec->after ? ".dropout_after" : ".dropout") + "/Dropout");
      d.add_input(spec->after ? id + ".in" : target);
      d.add_input(id + ".ratio");
      d.add_input(id + ".training_mode");
      d.add_output(spec->after ? target : id + ".out");
      (spec->after ? after : before)[u.node].push_back(d);
    }
    std::string named;
    for (size_t i = 0; i < hit.size() && i < 4; ++i) named += (i ? ", " : "") + hit[i];
    if (hit.size() > 4) named += ", ... (" + std::to_string(hit.size()) + " layers)";
    f.notes.push_back("dropout p=" + text.substr(text.rfind('=') + 1) + " restored on the " +
                      (spec->after ? "output" : "input") + " of " + named + " (--dropout " + text + ")");
  }
  google::protobuf::RepeatedPtrField<onnx::NodeProto> out;
  for (size_t k = 0; k < static_cast<size_t>(nodes.size()); ++k) {
    onnx::NodeProto n = nodes[static_cast<int>(k)];
    for (const auto& d : before[k])
      for (int j = 0; j < n.input_size(); ++j)
        if (n.input(j) == d.input(0)) *n.mutable_input(j) = d.output(0);
    for (const auto& d : before[k]) *out.Add() = d;
    for (const auto& d : after[k]) *n.mutable_output(0) = d.input(0);
    *out.Add() = n;
    for (const auto& d : after[k]) *out.Add() = d;
  }
  f.graph.mutable_node()->Swap(&out);
}

std::shared_ptr<const OnnxFile> read_file(const std::string& path, const std::vector<std::string>& dropout) {
  auto f = std::make_shared<OnnxFile>();
  f->path = path;
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) throw ModelFileError("cannot read ONNX model " + path + ": not found");
  if (!std::filesystem::is_regular_file(st)) throw ModelFileError(path + ": not a regular file");
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec || size > kMaxFileBytes)
    file_error(*f, "is over 2 GiB, the most one protobuf message holds: export with its weights in the file");
  // Parsed from the stream, and each initializer's bytes dropped once
  // copied: loading holds the weights about twice, not three times.
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ModelFileError("cannot read ONNX model " + path);
  onnx::ModelProto m;
  if (!m.ParseFromIstream(&in))
    file_error(*f, "is not a readable ONNX model (truncated or corrupt protobuf): export it again with torch.onnx.export");
  if (!m.has_graph() || m.graph().node_size() == 0) file_error(*f, "holds no graph (truncated, or not an ONNX model)");
  f->opset = default_opset(m);
  for (auto& t : *m.mutable_graph()->mutable_initializer()) {
    f->initializers[t.name()] = read_tensor(*f, t, "initializer '" + t.name() + "'");
    std::string().swap(*t.mutable_raw_data());
    t.clear_float_data();
  }
  for (const auto& p : m.metadata_props())
    if (p.key() == "memfit.buffers") {
      std::istringstream names(p.value());
      for (std::string name; std::getline(names, name);)
        if (!name.empty()) f->buffers.insert(name);
    }
  f->graph.Swap(m.mutable_graph());
  f->graph.clear_initializer();  // their values live in `initializers` now
  check_file(*f, m);
  restore_dropout(*f, dropout);
  std::map<std::string, double> scalars;  // single-number constants, for the patterns
  for (const auto& [name, c] : f->initializers)
    if (c.size() == 1) scalars[name] = c.is_float ? (*c.f)[0] : static_cast<double>(c.i[0]);
  // Constants of one number (a value tensor without dims, value_float,
  // value_int), and their Cast or CastLike (the dynamo exporter writes
  // CastLike(p, x) for a scalar p used with x).
  for (const auto& n : f->graph.node()) {
    if (n.output_size() != 1) continue;
    if (n.op_type() == "Constant") {
      if (const auto* a = attr(n, "value"); a && a->t().dims_size() == 0) {
        const Const c = read_tensor(*f, a->t(), "node '" + n.name() + "''s value");
        if (c.size() == 1) scalars[n.output(0)] = c.is_float ? (*c.f)[0] : static_cast<double>(c.i[0]);
      } else if (const auto* v = attr(n, "value_float")) {
        scalars[n.output(0)] = v->f();
      } else if (const auto* v = attr(n, "value_int")) {
        scalars[n.output(0)] = static_cast<double>(v->i());
      }
    } else if ((n.op_type() == "Cast" || n.op_type() == "CastLike") && n.input_size() >= 1 && scalars.count(n.input(0))) {
      const auto* to = attr(n, "to");
      const bool to_int = n.op_type() == "Cast" && to && to->i() != onnx::TensorProto::FLOAT &&
                          to->i() != onnx::TensorProto::DOUBLE && to->i() != onnx::TensorProto::FLOAT16 &&
                          to->i() != onnx::TensorProto::BFLOAT16;
      const double v = scalars.at(n.input(0));
      scalars[n.output(0)] = to_int ? std::trunc(v) : v;
    }
  }
  find_patterns(*f, scalars);
  // Batch norms exported for inference: training_mode 0 (its default) from
  // opset 14; before it, the form with one output.
  int inference_bn = 0;
  for (const auto& n : f->graph.node()) {
    if (n.op_type() != "BatchNormalization") continue;
    const auto* tm = attr(n, "training_mode");
    inference_bn += f->opset >= 14 ? !tm || tm->i() == 0 : n.output_size() == 1;
  }
  if (inference_bn > 0)
    f->notes.push_back(std::to_string(inference_bn) + " batch norm" + (inference_bn > 1 ? "s" : "") + " of " + path +
                       " exported for inference (model.eval(), or torch.onnx.export's dynamo exporter) train in "
                       "training mode: batch statistics, their running mean and variance starting from the file's");

  // The whole graph is converted once now, at the file's own input size
  // (batch 1 where its batch axis is dynamic), so that every refusal comes
  // before training.
  Shape dims = f->input_dims;
  if (dims[0] < 1) dims[0] = 1;
  if (std::all_of(dims.begin(), dims.end(), [](int64_t d) { return d >= 1; })) {
    Graph g;
    Builder b(g, true);
    const ValueId x = g.input(f->input, dims, f->tokens ? DType::i32 : DType::f32);
    // With a mask as the data gives one, so that its arithmetic is checked too.
    const ValueId mask = f->mask_input.empty() ? kNone : g.input(f->mask_input, dims, DType::i32);
    f->out_rank = static_cast<int64_t>(g.value(convert(*f, b, x, mask)).shape.size());
  } else {
    f->out_rank = f->graph.output(0).type().tensor_type().shape().dim_size();
  }
  return f;
}

// Whether float initializer c is a weight release_import frees (a number or
// a constant too small to matter stays).
bool weight_like(const Const& c) { return c.is_float && c.f && c.f->size() >= 2; }

}  // namespace

bool is_onnx_path(const std::string& path) {
  return path.size() > 5 && path.compare(path.size() - 5, 5, ".onnx") == 0;
}

std::string onnx_supported_ops() {
  std::string s;
  for (const auto& [op, rule] : op_rules())
    if (op != "Erf" && op != "RandomUniformLike" && op != "Less") s += (s.empty() ? "" : ", ") + op;
  return s + "; Erf inside GELU; RandomUniformLike and Less as stochastic depth";
}

std::optional<double> bare_dropout(const std::string& spec) {
  char* end = nullptr;
  const double p = std::strtod(spec.c_str(), &end);
  if (spec.empty() || end != spec.c_str() + spec.size() || !(p >= 0 && p < 1)) return std::nullopt;
  return p;
}

std::string dropout_spec_error(const std::string& spec) {
  if (bare_dropout(spec)) return "";
  std::string why;
  return parse_dropout_spec(spec, &why) ? "" : why;
}

Model load_onnx_model(const std::string& path, const std::vector<std::string>& dropout) {
  std::shared_ptr<const OnnxFile> f = read_file(path, dropout);
  const int64_t out_rank = f->out_rank;
  Model m;
  m.name = path;
  m.notes = f->notes;
  const bool lm = f->tokens && out_rank == 3;
  if (f->tokens) {
    m.inputs = {{"tokens", DType::i32, 1, "[T]"}};
    if (!f->mask_input.empty()) m.inputs.push_back({"attention_mask", DType::i32, 1, "[T]", /*optional=*/true});
    m.target = lm ? InputDecl{"targets", DType::i32, 1, "[T]"} : InputDecl{"labels", DType::i32, 0, "[]"};
    m.task = lm ? Task::LanguageModel : Task::Classification;
    if (f->input_dims[1] > 0) m.max_sequence = f->input_dims[1];
  } else {
    m.inputs = {{"image", DType::f32, 3, "[C,H,W]"}};
    m.target = {"labels", DType::i32, 0, "[]"};
    m.task = Task::Classification;
  }
  // The weights are held by the file, shared by every copy of the model and
  // every graph built from it; the lock keeps a release from racing a
  // count.
  auto mu = std::make_shared<std::mutex>();
  m.import_bytes = [f, mu]() {
    std::lock_guard<std::mutex> lock(*mu);
    size_t bytes = 0;
    if (!f->released)
      for (const auto& [name, c] : f->initializers)
        if (weight_like(c)) bytes += c.f->size() * sizeof(float);
    return bytes;
  };
  m.release_import = [f, mu]() {
    std::lock_guard<std::mutex> lock(*mu);
    f->released = true;
    for (const auto& [name, c] : f->initializers)
      if (weight_like(c)) c.f.reset();
  };
  m.build = [f, lm](Builder& b, const Inputs& in, int64_t classes) {
    const ValueId x = in.at(f->tokens ? "tokens" : "image");
    const Shape xs = b.g.value(x).shape;
    for (size_t k = 1; k < xs.size(); ++k)
      if (f->input_dims[k] > 0 && f->input_dims[k] != xs[k])
        throw GraphError(f->path + " takes " + f->input + " " + shape_str(f->input_dims) + " (-1: any), but the data holds " +
                         shape_str(xs) + ": resize the data, or export the model for this size");
    const auto mask = in.values.find("attention_mask");
    const ValueId y = convert(*f, b, x, mask == in.values.end() ? kNone : mask->second);
    const Shape ys = b.g.value(y).shape;
    const size_t want = lm ? 3 : 2;
    if (ys.size() != want || ys[0] != xs[0])
      throw GraphError(f->path + ": its output '" + f->output + "' is " + shape_str(ys) + ", not the logits " +
                       (lm ? "[N, T, vocab]" : "[N, classes]"));
    if (ys.back() != classes)
      throw GraphError(f->path + " predicts " + std::to_string(ys.back()) + (lm ? " tokens" : " classes") +
                       " but the data has " + std::to_string(classes) + ": export the model with a head of " +
                       std::to_string(classes));
    return y;
  };
  return m;
}

}  // namespace memfit::models
