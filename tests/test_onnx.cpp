// PyTorch models through ONNX (models/onnx/model.cpp).
//
// The oracle is the golden fixture: tests/golden/export_onnx.py exports
// make_golden.py's own ConvNet and ResNet-18, with the initial weights the
// fixtures were computed from, and memfit trained through the ONNX files
// must pass the same golden check as its zoo models (golden_check.hpp:
// bitwise initial weights, step-0 logits, loss and gradients, 20-step
// losses, with the same tolerances). The weights a run saves carry the
// PyTorch state_dict names and load back with load_state_dict. Files memfit
// cannot train (an unknown op, an unsupported attribute, a truncated file)
// are refused before training with a message naming the node and the fix;
// those models are built here with the protobuf classes.
#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <tuple>

#include "cli_util.hpp"
#include "golden_check.hpp"
#include "models/model.hpp"
#include "models/onnx/model.hpp"
#include "gpt_golden_check.hpp"
#include "persist/checkpoint.hpp"
#include "train/run_context.hpp"
#include "compile/resolve.hpp"

using namespace memfit;
using memfit::testing::run_cmd;
using memfit::testing::run_memfit;
namespace fs = std::filesystem;

namespace {

const std::string kPython = "/usr/bin/python3";

// The exported models, written once per test program; "" with the reason
// in `why` when torch is missing (the tests then skip) or the export fails.
struct Exported {
  std::string dir, why;
  bool skip = false;
};
const Exported& exported() {
  static const Exported e = [] {
    Exported r;
    if (run_cmd(kPython + " -c 'import torch, numpy'").code != 0) {
      r.skip = true;
      r.why = kPython + " cannot import torch and numpy (Debian python3-torch python3-numpy: make deps); the ONNX "
                        "files are exported from PyTorch at test time";
      return r;
    }
    const std::string d = memfit::testing::temp_dir("onnx");
    const auto res = run_cmd(kPython + " " + MEMFIT_TEST_DATA + "/golden/export_onnx.py --out " + d);
    if (res.code != 0) r.why = "tests/golden/export_onnx.py failed:\n" + res.out;
    else r.dir = d;
    return r;
  }();
  return e;
}

#define NEED_EXPORT()                                  \
  do {                                                 \
    if (exported().skip) GTEST_SKIP() << exported().why; \
    ASSERT_FALSE(exported().dir.empty()) << exported().why; \
  } while (0)

std::string model_error(const std::string& path) {
  try {
    models::resolve(path);
  } catch (const models::ModelFileError& e) {
    return e.what();
  }
  return "(no ModelFileError)";
}

// A one-convolution model, image [N, 1, 4, 4] -> conv (2 channels, 3x3,
// pad 1) -> Flatten -> `extra` nodes, written with the protobuf classes.
// `conv` may change the convolution's node.
std::string write_tiny(const std::string& name, const std::function<void(onnx::GraphProto&)>& extra,
                       const std::function<void(onnx::NodeProto&)>& conv = {}, int64_t opset = 14) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(opset);
  onnx::GraphProto& g = *m.mutable_graph();
  g.set_name("tiny");
  onnx::ValueInfoProto& in = *g.add_input();
  in.set_name("image");
  auto* tt = in.mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  tt->mutable_shape()->add_dim()->set_dim_param("N");
  for (int d : {1, 4, 4}) tt->mutable_shape()->add_dim()->set_dim_value(d);
  onnx::TensorProto& w = *g.add_initializer();
  w.set_name("conv.weight");
  w.set_data_type(onnx::TensorProto::FLOAT);
  for (int d : {2, 1, 3, 3}) w.add_dims(d);
  for (int i = 0; i < 18; ++i) w.add_float_data(0.1f * static_cast<float>(i));
  onnx::NodeProto& c = *g.add_node();
  c.set_op_type("Conv");
  c.set_name("/conv/Conv");
  c.add_input("image");
  c.add_input("conv.weight");
  c.add_output("c");
  onnx::AttributeProto& pads = *c.add_attribute();
  pads.set_name("pads");
  pads.set_type(onnx::AttributeProto::INTS);
  for (int p : {1, 1, 1, 1}) pads.add_ints(p);
  if (conv) conv(c);
  onnx::NodeProto& fl = *g.add_node();
  fl.set_op_type("Flatten");
  fl.set_name("/Flatten");
  fl.add_input("c");
  fl.add_output("flat");
  extra(g);
  g.add_output()->set_name(g.node(g.node_size() - 1).output(0));
  const std::string path = memfit::testing::temp_dir("onnx-tiny") + "/" + name + ".onnx";
  std::ofstream f(path, std::ios::binary);
  EXPECT_TRUE(m.SerializeToOstream(&f));
  return path;
}

onnx::NodeProto& add_node(onnx::GraphProto& g, const std::string& op, const std::string& name, const std::string& in,
                          const std::string& out) {
  onnx::NodeProto& n = *g.add_node();
  n.set_op_type(op);
  n.set_name(name);
  n.add_input(in);
  n.add_output(out);
  return n;
}

// An INT64 initializer [v.size()] named `name`.
void int_initializer(onnx::GraphProto& g, const std::string& name, const std::vector<int64_t>& v) {
  onnx::TensorProto& t = *g.add_initializer();
  t.set_name(name);
  t.set_data_type(onnx::TensorProto::INT64);
  t.add_dims(static_cast<int64_t>(v.size()));
  for (int64_t x : v) t.add_int64_data(x);
}

// A FLOAT initializer [v.size()], or a scalar (no dims).
void float_initializer(onnx::GraphProto& g, const std::string& name, const std::vector<float>& v, bool scalar = false) {
  onnx::TensorProto& t = *g.add_initializer();
  t.set_name(name);
  t.set_data_type(onnx::TensorProto::FLOAT);
  if (!scalar) t.add_dims(static_cast<int64_t>(v.size()));
  for (float x : v) t.add_float_data(x);
}

// write_tiny's model at `path` built into g on an image [3, 1, 4, 4] for
// `classes` outputs (training: dropout and batch norm as in training);
// returns the output.
ValueId build_tiny(Graph& g, const std::string& path, int64_t classes, bool training = false) {
  Builder b(g, training);
  models::Inputs in;
  in.values["image"] = g.input("image", {3, 1, 4, 4});
  return models::resolve(path).build(b, in, classes);
}

// An integer attribute on n.
void int_attr(onnx::NodeProto& n, const char* name, int64_t v) {
  auto& a = *n.add_attribute();
  a.set_name(name);
  a.set_type(onnx::AttributeProto::INT);
  a.set_i(v);
}

// The tail of the constant-folding tests: the integer constant k, plus
// 10 (so never 0 or 1, which a scale would drop), cast to float scales
// the input into "out".
void scale_input_by(onnx::GraphProto& g, const std::string& k) {
  int_initializer(g, "ten", {10});
  add_node(g, "Add", "/add", k, "k10").add_input("ten");
  int_attr(add_node(g, "Cast", "/cast", "k10", "kf"), "to", onnx::TensorProto::FLOAT);
  add_node(g, "Mul", "/mul", "flat", "out").add_input("kf");
}

// The k that scale_input_by's model at `path` scales its input by.
double folded_k(const std::string& path) {
  Graph g;
  build_tiny(g, path, 32);
  for (const Node& n : g.nodes())
    if (n.op == "scale") return n.attrs.f("alpha") - 10.0;
  ADD_FAILURE() << "no scale in " << path;
  return 0.0;
}

}  // namespace

// memfit trained through the ONNX files reproduces the golden fixtures with
// the zoo models' tolerances (ConvNet: dropout masks drawn for the node of
// module `dropout`, as the golden's; ResNet-18: batch norm in training mode,
// its running statistics after 20 steps checked too).
TEST(OnnxGolden, ConvNet) {
  NEED_EXPORT();
  run_golden({exported().dir + "/convnet.onnx", "convnet.safetensors", "fc2.weight", 1e-4, 0.0}, Backend::Cpu);
}
TEST(OnnxGolden, ResNet18) {
  NEED_EXPORT();
  run_golden({exported().dir + "/resnet18.onnx", "resnet18.safetensors", "fc.weight", 1e-3, 0.0, true}, Backend::Cpu);
}

// The other imported ops (tests/golden/export_onnx.py's OpsNet: batch norm,
// average pool, a reshape computed from x.shape, Split, Concat, a 3-d Linear
// as MatMul + Add (memfit's linear), the Erf GELU, LayerNormalization, Transpose, Slice,
// Softmax, a scalar Mul) against PyTorch in float64 on the same float32
// weights and batch, with the golden check's step-0 tolerances (logits 1e-4
// of the largest, loss 1e-5, each gradient 1e-3 in relative L2: f32 sums
// over at most 256 terms here, where an op's formula or indexing error is
// O(1)).
namespace {
// A model of export_onnx.py's export_checked against PyTorch's logits (1e-4
// of the largest), loss (1e-5) and parameter gradients (1e-3 in relative
// L2) for one batch, its graph holding each of `ops`.
// Step 0 against PyTorch's fixture f (run in float64 from the same float32
// weights): the logits within 1e-4 of their largest magnitude, the loss
// within 1e-5 relative, each gradient within 1e-3 in relative L2 norm (f32
// sums in another order through a whole backward). Returns the gradients
// compared.
int expect_step0_matches(Executor& ex, const train::StepGraph& sg, const io::SafetensorsFile& f) {
  const Graph& g = sg.g;
  auto ref = f32(f, "logits");
  double mx = 0;
  for (float r : ref) mx = std::max(mx, std::abs(static_cast<double>(r)));
  const float* l = ex.ptr<float>(sg.logits);
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(l[i], ref[i], 1e-4 * mx) << "logit " << i;
  EXPECT_NEAR(ex.ptr<float>(sg.loss)[0], f32(f, "loss")[0], 1e-5 * f32(f, "loss")[0]);
  int checked = 0;
  for (ValueId v : g.trainable_params()) {
    const Value& val = g.value(v);
    auto want = f32(f, "grad." + val.name);
    const float* got = ex.ptr<float>(val.grad);
    EXPECT_EQ(want.size(), static_cast<size_t>(numel(val.shape))) << val.name;
    if (want.size() != static_cast<size_t>(numel(val.shape))) continue;
    double d = 0, r = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      d += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
      r += static_cast<double>(want[i]) * want[i];
    }
    EXPECT_LE(std::sqrt(d), 1e-3 * std::sqrt(r) + 1e-12) << val.name << " gradient differs";
    ++checked;
  }
  return checked;
}

// The step graph of spec's model trained by plain SGD (no momentum, no
// weight decay: the fixtures' torch.optim.SGD), its logits kept to compare
// (the loss may reuse their buffer).
std::unique_ptr<train::StepGraph> plain_sgd_graph(train::StepSpec spec) {
  spec.optimizer.kind = "sgd";
  spec.optimizer.momentum = 0.0;
  spec.optimizer.weight_decay = 0.0;
  auto sg = train::build_step_graph(spec);
  sg->g.value(sg->logits).is_output = true;
  return sg;
}

// How many forward nodes of each op g has.
std::map<std::string, int> forward_ops(const Graph& g) {
  std::map<std::string, int> ops;
  for (const Node& n : g.nodes())
    if (n.phase == Phase::Forward) ++ops[n.op];
  return ops;
}

// The fixture's batch of `tokens` token ids through sg (SGD at the
// fixture's lr): step 0 against PyTorch (expect_step0_matches), then its
// update and the losses of the 4 steps after it, each within 1e-4
// relative (f32 sums through a few whole steps). Returns the gradients
// compared.
int expect_golden_steps(const train::StepGraph& sg, const io::SafetensorsFile& f, size_t tokens) {
  const Graph& g = sg.g;
  Executor ex(g, ExecConfig{});
  ex.init_params(42);
  const io::TensorInfo& xt = f.at("input");
  EXPECT_EQ(xt.nbytes(), tokens * 4);
  if (xt.nbytes() != tokens * 4) return 0;
  std::memcpy(ex.data(sg.x), f.data(xt), xt.nbytes());
  const io::TensorInfo& lt = f.at("labels");
  std::memcpy(ex.data(sg.labels), f.data(lt), lt.nbytes());
  kernels::StepContext ctx;
  ctx.seed = 42;
  ctx.lr = std::stod(f.metadata().at("lr"));
  const size_t n_nodes = g.num_nodes();
  EXPECT_EQ(g.node(static_cast<NodeId>(n_nodes - 1)).phase, Phase::Update);
  ex.run_nodes(0, n_nodes - 1, ctx);  // all but the update
  const int checked = expect_step0_matches(ex, sg, f);
  ex.run_nodes(n_nodes - 1, n_nodes, ctx);  // the step-0 update
  auto losses = f32(f, "losses");
  EXPECT_EQ(losses.size(), 5u);
  for (size_t t = 1; t < losses.size(); ++t) {
    ctx.step = static_cast<int64_t>(t);
    ex.run(ctx);
    EXPECT_NEAR(ex.ptr<float>(sg.loss)[0], losses[t], 1e-4 * losses[t]) << "loss at step " << t;
  }
  return checked;
}

void check_against_pytorch(const std::string& name, std::initializer_list<const char*> ops, int params) {
  io::SafetensorsFile f = io::SafetensorsFile::load(exported().dir + "/" + name + ".safetensors");
  train::StepSpec spec;
  spec.model = exported().dir + "/" + name + ".onnx";
  spec.batch = 4;
  spec.height = spec.width = 8;
  spec.optimizer.kind = "sgd";
  auto sg = train::build_step_graph(spec);
  const Graph& g = sg->g;
  for (const char* op : ops) {
    bool found = false;
    for (const Node& n : g.nodes()) found = found || n.op == op;
    EXPECT_TRUE(found) << "no " << op << " node: the import took another path";
  }
  Executor ex(g, ExecConfig{});
  ex.init_params(42);
  auto input = f32(f, "input");
  ex.write_f32(sg->x, input.data());
  const io::TensorInfo& lt = f.at("labels");
  std::memcpy(ex.data(sg->labels), f.data(lt), lt.nbytes());
  kernels::StepContext ctx;
  ctx.seed = 42;
  ctx.lr = 0.0;
  ex.run_nodes(0, g.num_nodes() - 1, ctx);  // all but the update
  EXPECT_EQ(expect_step0_matches(ex, *sg, f), params);
}
}  // namespace

TEST(Onnx, OtherOpsMatchPyTorch) {
  NEED_EXPORT();
  // conv's weight; bn, proj, ln, head: weight and bias each
  check_against_pytorch("opsnet",
                        {"gelu", "layer_norm", "softmax", "batch_norm", "avg_pool2d", "concat", "slice", "permute", "linear"}, 9);
}

// Conv1d and the 1-d pools (an audio or text CNN's layers) as 2-d ones over
// a height of 1: padding, groups, dilation, a stride.
TEST(Onnx, OneDimensionalConvolutionsAndPoolsMatchPyTorch) {
  NEED_EXPORT();
  check_against_pytorch("conv1dnet", {"conv2d", "max_pool2d", "avg_pool2d", "linear"}, 9);
  // The weights keep their 1-d shapes (and names) in the graph: a saved
  // model loads back into the PyTorch module.
  train::StepSpec spec;
  spec.model = exported().dir + "/conv1dnet.onnx";
  spec.batch = 4;
  spec.height = spec.width = 8;
  auto sg = train::build_step_graph(spec);
  const ValueId w = sg->g.find("c2.weight");
  ASSERT_NE(w, kNone);
  EXPECT_EQ(sg->g.value(w).shape, (Shape{12, 4, 5}));
}

// ReLU6 (Clip), a depthwise convolution, Hardswish, SiLU, a
// squeeze-and-excitation (x * s broadcast), LeakyReLU, ELU, Tanh,
// Hardsigmoid and Sigmoid as torch exports them.
TEST(Onnx, ActivationsMatchPyTorch) {
  NEED_EXPORT();
  check_against_pytorch("actnet", {"activation", "binary", "conv2d", "avg_pool2d", "linear"}, 16);
  train::StepSpec spec;
  spec.model = exported().dir + "/actnet.onnx";
  spec.batch = 4;
  spec.height = spec.width = 8;
  spec.optimizer.kind = "sgd";
  auto sg = train::build_step_graph(spec);
  std::multiset<std::string> kinds;
  for (const Node& n : sg->g.nodes())
    if (n.op == "activation" && n.phase == Phase::Forward) kinds.insert(n.attrs.s("kind"));
  EXPECT_EQ(kinds, (std::multiset<std::string>{"clip", "hardswish", "silu", "hardsigmoid", "leaky_relu", "elu", "tanh",
                                               "hardsigmoid", "sigmoid"}));
  for (const Node& n : sg->g.nodes()) {
    if (n.op == "conv2d" && n.layer == "dw") {
      EXPECT_EQ(n.attrs.i("groups"), 4);
    }
  }
}

// Each activation node imports with its attributes; Clip's bounds come from
// inputs (opset 11 and later) or attributes (before), Clip(x, 0) is a ReLU.
TEST(Onnx, ActivationNodesImportWithTheirParameters) {
  auto kinds_of = [](const std::string& path) {
    Graph g;
    Builder b(g);
    models::Inputs in;
    in.values["image"] = g.input("image", {3, 1, 4, 4});
    models::resolve(path).build(b, in, 32);
    std::vector<std::string> r;
    for (const Node& n : g.nodes()) {
      if (n.op == "relu") r.push_back("relu");
      if (n.op != "activation") continue;
      std::string s = n.attrs.s("kind");
      for (const char* a : {"min", "max", "alpha", "beta"})
        if (n.attrs.has(a)) s += std::string(" ") + a + "=" + std::to_string(n.attrs.f(a));
      r.push_back(s);
    }
    return r;
  };
  auto float_attr = [](onnx::NodeProto& n, const char* name, float v) {
    auto& a = *n.add_attribute();
    a.set_name(name);
    a.set_type(onnx::AttributeProto::FLOAT);
    a.set_f(v);
  };
  auto scalar = [](onnx::GraphProto& g, const std::string& name, float v) {
    onnx::TensorProto& t = *g.add_initializer();
    t.set_name(name);
    t.set_data_type(onnx::TensorProto::FLOAT);
    t.add_float_data(v);
  };
  const std::string all = write_tiny("activations", [&](onnx::GraphProto& g) {
    add_node(g, "Sigmoid", "/a", "flat", "a");
    add_node(g, "Tanh", "/b", "a", "b");
    add_node(g, "HardSwish", "/c", "b", "c");
    float_attr(add_node(g, "HardSigmoid", "/d", "c", "d"), "alpha", 0.25f);
    add_node(g, "LeakyRelu", "/e", "d", "e");
    float_attr(add_node(g, "Elu", "/f", "e", "f"), "alpha", 0.5f);
    scalar(g, "six", 6.0f);
    scalar(g, "zero", 0.0f);
    auto& relu6 = add_node(g, "Clip", "/g", "f", "g");
    relu6.add_input("zero");
    relu6.add_input("six");
    auto& upper = add_node(g, "Clip", "/h", "g", "h");
    upper.add_input("");
    upper.add_input("six");
    add_node(g, "Clip", "/i", "h", "i").add_input("zero");
    add_node(g, "Sigmoid", "/j", "i", "j");  // x * Sigmoid(x): SiLU
    auto& mul = add_node(g, "Mul", "/k", "j", "k");
    mul.add_input("i");
  });
  EXPECT_EQ(kinds_of(all), (std::vector<std::string>{"sigmoid", "tanh", "hardswish", "hardsigmoid alpha=0.250000 beta=0.500000",
                                                     "leaky_relu alpha=0.010000", "elu alpha=0.500000",
                                                     "clip min=0.000000 max=6.000000",
                                                     "clip min=-340282346638528859811704183484516925440.000000 max=6.000000",
                                                     "relu", "silu"}));
  const std::string old = write_tiny("clip-opset9", [&](onnx::GraphProto& g) {
    auto& c = add_node(g, "Clip", "/clip", "flat", "y");
    float_attr(c, "min", -1.0f);
    float_attr(c, "max", 1.0f);
  }, {}, 9);
  EXPECT_EQ(kinds_of(old), (std::vector<std::string>{"clip min=-1.000000 max=1.000000"}));
  const std::string crossed = write_tiny("clip-crossed", [&](onnx::GraphProto& g) {
    scalar(g, "one", 1.0f);
    scalar(g, "zero", 0.0f);
    add_node(g, "Clip", "/clip", "flat", "y").add_input("one");
    g.mutable_node(g.node_size() - 1)->add_input("zero");
  });
  EXPECT_NE(model_error(crossed).find("node '/clip' (Clip): its min 1.000000 is above its max 0.000000"), std::string::npos)
      << model_error(crossed);
}

// A GPT written the way nanoGPT writes one (tests/golden/export_onnx.py's
// TinyGPT: nn.Linear layers, q @ k^T scaled and masked_fill'ed with a
// torch.tril buffer, softmax, dropout, @ v, arange positions, the head tied
// to the token table, GELU's tanh form written out) with
// gpt_tiny.safetensors' initial weights, through its ONNX file: memfit
// must reproduce the fixture as its own gpt-tiny does (test_gpt_golden.cpp,
// same tolerances: step-0 logits 1e-4 of the largest, loss 1e-5, each
// gradient 1e-3 in relative L2, the 20 AdamW losses 1e-4), with the
// attention imported as memfit's fused op (no [T, T] probabilities held)
// and the Linears as linear ops (no copies of transposed weights).
namespace {
// The forward graph of a token model file, batch 2 of 16 tokens, 23 symbols
// (the training step's graph holds the backward pass and what the
// recomputation policy clones too).
Graph gpt_forward(const std::string& path) {
  const models::Model mod = models::resolve(path);
  Graph g;
  Builder b(g);
  models::Inputs in;
  in.values["tokens"] = g.input("tokens", {2, 16}, DType::i32);
  mod.build(b, in, 23);
  return g;
}

// The fixture's index of element i of parameter p: its Linear matrices
// ([out, in], nn.Linear) are the fixture's Conv1D [in, out] transposed.
size_t conv1d_index(const Value& p, size_t i) {
  if (p.shape.size() != 2 || p.name.find(".c_") == std::string::npos) return i;
  const auto out = static_cast<size_t>(p.shape[0]), in = static_cast<size_t>(p.shape[1]);
  return (i % in) * out + i / in;
}
}  // namespace

TEST(OnnxGolden, TinyGpt) {
  NEED_EXPORT();
  const io::SafetensorsFile& f = memfit::testing::gpt_fixture();
  const train::StepSpec s = memfit::testing::gpt_golden_spec(exported().dir + "/gpt_tiny.onnx");
  const auto sg = train::build_step_graph(s);
  sg->g.value(sg->logits).is_output = true;  // kept to compare (the LM loss reuses its buffer)
  const Graph& g = sg->g;
  std::map<std::string, int> ops;
  const Graph fwd = gpt_forward(s.model);
  for (const Node& n : fwd.nodes()) ++ops[n.op];
  EXPECT_EQ(ops["attention"], 2) << "the attention of each block is one fused op";
  EXPECT_EQ(ops["softmax"], 0) << "a softmax outside the fused attention";
  EXPECT_EQ(ops["permute"], 0) << "heads are read in place, weights not copied transposed";
  EXPECT_EQ(ops["slice"], 1) << "only the position table's first T rows: q, k, v are read packed from c_attn's output";
  EXPECT_EQ(ops["linear"], 2 * 4 + 1) << "c_attn, c_proj, c_fc, c_proj per block and the tied head";
  EXPECT_EQ(ops["gelu"], 2);
  EXPECT_EQ(ops["embedding"], 1);
  Executor ex(g, ExecConfig{});
  ex.init_params(1);  // the file's weights (InitSpec::Given), not the seed's
  int params = 0;
  for (ValueId p : g.params()) {
    const Value& val = g.value(p);
    const auto w = memfit::testing::read_tensor<float>(f, "init." + val.name);
    std::vector<float> got(w.size());
    ASSERT_EQ(w.size(), static_cast<size_t>(numel(val.shape))) << val.name;
    ex.read_f32(p, got.data());
    for (size_t i = 0; i < w.size(); ++i) ASSERT_EQ(got[i], w[conv1d_index(val, i)]) << val.name << " initial " << i;
    ++params;
  }
  EXPECT_EQ(params, 4 + 2 * 12);  // wte (tied head), wpe, ln_f; 12 per block; the tril buffers are constants
  memfit::testing::check_gpt_golden(*sg, ex, conv1d_index);
}

// The parameters and buffers are the state_dict's tensors by name, and the
// weights a run saves (with the batch norms' num_batches_tracked, which
// memfit writes from its step count) load back into the PyTorch model.
TEST(Onnx, SavedWeightsAreTheStateDict) {
  NEED_EXPORT();
  const std::string onnx = exported().dir + "/resnet18.onnx";
  const std::string out = memfit::testing::temp_dir("onnx-run");
  auto plan = run_memfit("plan --model " + onnx + " --batch 16");
  EXPECT_EQ(plan.code, 0) << plan.out;
  auto r = run_memfit("train --model " + onnx + " --subset 32 --test-subset 16 --batch 16 --steps 1 --out " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  std::set<std::string> keys, saved;
  std::ifstream kf(exported().dir + "/resnet18.keys");
  for (std::string k; std::getline(kf, k);) keys.insert(k);
  ASSERT_EQ(keys.size(), 122u);  // 62 weights and biases, 20 x 3 batch-norm statistics
  const io::SafetensorsFile f = io::SafetensorsFile::load(out + "/model.safetensors");
  for (const auto& n : f.names()) saved.insert(n);
  EXPECT_EQ(saved, keys);
  auto check = run_cmd(kPython + " " + MEMFIT_TEST_DATA + "/golden/export_onnx.py --check-state-dict resnet18 " + out +
                       "/model.safetensors");
  EXPECT_EQ(check.code, 0) << check.out;
}

// The tiny GPT trained by the command on a text (a character corpus of
// exactly the file's 23 symbols: 22 letters and the newline), its weights
// loading back into the PyTorch TinyGPT: the tied head and the tril
// buffers, which the file holds once or as constants, from the module
// (the package's complete_state_dict), every other tensor from memfit.
TEST(Onnx, GptTrainsOnTextAndItsWeightsLoadBack) {
  NEED_EXPORT();
  const std::string dir = memfit::testing::temp_dir("onnx-gpt");
  {
    std::ofstream c(dir + "/corpus.txt");
    for (int line = 0; line < 300; ++line) {
      for (int k = 0; k < 12; ++k) c << static_cast<char>('a' + (line * 5 + k) % 22);
      c << '\n';
    }
  }
  const std::string onnx = exported().dir + "/gpt_tiny.onnx";
  const std::string args = " --model " + onnx + " --data " + dir + "/corpus.txt --batch 4 --threads 1";
  auto plan = run_memfit("plan" + args);
  ASSERT_EQ(plan.code, 0) << plan.out;
  auto r = run_memfit("train" + args + " --steps 30 --eval-every 0 --optimizer adamw --lr 3e-3 --progress lines --out " +
                      dir + "/run");
  ASSERT_EQ(r.code, 0) << r.out;
  const io::SafetensorsFile f = io::SafetensorsFile::load(dir + "/run/model.safetensors");
  EXPECT_EQ(f.names().size(), 4u + 2 * 12);
  auto check = run_cmd(kPython + " " + MEMFIT_TEST_DATA + "/golden/export_onnx.py --check-state-dict gpt_tiny " + dir +
                       "/run/model.safetensors");
  EXPECT_EQ(check.code, 0) << check.out;
  // A different alphabet is refused before training, naming the head's size.
  {
    std::ofstream c(dir + "/other.txt");
    for (int line = 0; line < 100; ++line) c << "abc\n";
  }
  auto bad = run_memfit("train --model " + onnx + " --data " + dir + "/other.txt --steps 1 --out " + dir + "/bad");
  EXPECT_NE(bad.code, 0) << bad.out;
  EXPECT_NE(bad.out.find("predicts 23 tokens but the data has 4"), std::string::npos) << bad.out;
}

// The attention mask is read from the file's buffer, not assumed: the GPT
// with its tril buffers replaced (through the protobuf classes) by ones
// (a mask that masks nothing) imports as attention without the causal
// mask; by a mask that hides key 0 from the last query only it is refused
// before training, naming the Where node and what memfit takes.
TEST(Onnx, AttentionMaskIsReadFromTheBuffer) {
  NEED_EXPORT();
  onnx::ModelProto m;
  {
    std::ifstream in(exported().dir + "/gpt_tiny.onnx", std::ios::binary);
    ASSERT_TRUE(m.ParseFromIstream(&in));
  }
  auto with_mask = [&](const std::string& name, const std::function<float(int, int)>& value) {
    onnx::ModelProto c = m;
    int changed = 0;
    for (auto& t : *c.mutable_graph()->mutable_initializer()) {
      if (t.name().size() < 10 || t.name().compare(t.name().size() - 10, 10, ".attn.bias") != 0) continue;
      std::vector<float> v(64 * 64);
      for (int i = 0; i < 64; ++i)
        for (int j = 0; j < 64; ++j) v[static_cast<size_t>(i * 64 + j)] = value(i, j);
      t.set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
      ++changed;
    }
    EXPECT_EQ(changed, 2);
    const std::string path = memfit::testing::temp_dir("onnx-mask") + "/" + name + ".onnx";
    std::ofstream f(path, std::ios::binary);
    EXPECT_TRUE(c.SerializeToOstream(&f));
    return path;
  };
  auto causal_attrs = [](const std::string& path) {
    std::vector<int64_t> r;
    const Graph g = gpt_forward(path);
    for (const Node& n : g.nodes())
      if (n.op == "attention") r.push_back(n.attrs.i("causal", 0));
    return r;
  };
  EXPECT_EQ(causal_attrs(exported().dir + "/gpt_tiny.onnx"), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(causal_attrs(with_mask("open", [](int, int) { return 1.0f; })), (std::vector<int64_t>{0, 0}));
  const std::string odd = with_mask("odd", [](int i, int j) { return j <= i && !(i == 15 && j == 0) ? 1.0f : 0.0f; });
  const std::string e = model_error(odd);
  EXPECT_NE(e.find("(Where): the attention mask hides keys in a pattern other than the causal one"), std::string::npos) << e;
}

TEST(Onnx, UnsupportedOpIsRefused) {
  const std::string path = write_tiny("softplus", [](onnx::GraphProto& g) { add_node(g, "Softplus", "/head/act", "flat", "y"); });
  const std::string e = model_error(path);
  EXPECT_EQ(e.rfind(path + ": node '/head/act' (Softplus): memfit cannot train op Softplus (supported: ", 0), 0u) << e;
  EXPECT_NE(e.find(models::onnx_supported_ops()), std::string::npos) << e;
  // The command refuses it before training, as a bad model file.
  auto r = run_memfit("train --model " + path + " --steps 1 --out " + memfit::testing::temp_dir("onnx-refused"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("bad model file: " + path + ": node '/head/act' (Softplus)"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("step 1"), std::string::npos) << r.out;
}

// Op semantics change between opsets: a file of an opset outside memfit's
// range is refused, naming both, and so is a node of a domain memfit does
// not implement, whatever its op is called.
TEST(Onnx, OpsetOutsideTheImportedRangeIsRefused) {
  auto none = [](onnx::GraphProto&) {};
  for (int64_t opset : {8, 23, 99}) {
    const std::string path = write_tiny("opset" + std::to_string(opset), none, {}, opset);
    const std::string e = model_error(path);
    EXPECT_NE(e.find("declares ONNX opset " + std::to_string(opset) + ", outside the opsets memfit imports (9 to 22"),
              std::string::npos)
        << e;
    auto r = run_memfit("plan --model " + path);
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find("bad model file: " + path), std::string::npos) << r.out;
  }
  for (int64_t opset : {9, 17, 22})
    EXPECT_EQ(model_error(write_tiny("opset" + std::to_string(opset), none, {}, opset)), "(no ModelFileError)") << opset;
  const std::string foreign = write_tiny("foreign", [](onnx::GraphProto& g) {
    add_node(g, "Relu", "/head/act", "flat", "y").set_domain("com.example");
  });
  EXPECT_NE(model_error(foreign).find("node '/head/act' (Relu): is an op of domain 'com.example', which memfit does not import"),
            std::string::npos)
      << model_error(foreign);
}

// A model that ends in log_softmax (trained with NLLLoss on its
// log-probabilities, as courses write them) imports with the LogSoftmax taken
// into memfit's loss: softmax cross-entropy of the logits is NLLLoss of
// their log-softmax, so the graph is the plain model's, node for node (no
// second softmax). Anywhere but the last node it is refused, naming it.
TEST(Onnx, LogSoftmaxAsTheLastNodeIsTheLossInput) {
  auto build = [](const std::string& path) {
    auto g = std::make_unique<Graph>();
    Builder b(*g);
    models::Inputs in;
    in.values["image"] = g->input("image", {3, 1, 4, 4});
    const ValueId y = models::resolve(path).build(b, in, 32);
    EXPECT_EQ(g->value(y).shape, (Shape{3, 32}));
    return g;
  };
  const auto plain = build(write_tiny("plain", [](onnx::GraphProto&) {}));
  for (int64_t opset : {11, 17}) {
    const std::string path = write_tiny("logsoftmax" + std::to_string(opset), [](onnx::GraphProto& g) {
      add_node(g, "LogSoftmax", "/log_softmax", "flat", "logp");
    }, {}, opset);
    const auto lg = build(path);
    ASSERT_EQ(lg->num_nodes(), plain->num_nodes()) << "opset " << opset;
    for (size_t k = 0; k < lg->num_nodes(); ++k)
      EXPECT_EQ(lg->node(static_cast<NodeId>(k)).op, plain->node(static_cast<NodeId>(k)).op) << k;
  }
  const std::string inside = write_tiny("logsoftmax-inside", [](onnx::GraphProto& g) {
    add_node(g, "LogSoftmax", "/log_softmax", "flat", "logp");
    add_node(g, "Relu", "/after", "logp", "y");
  });
  EXPECT_NE(model_error(inside).find("node '/log_softmax' (LogSoftmax): memfit takes LogSoftmax as the model's last node only"),
            std::string::npos)
      << model_error(inside);
  const std::string axis0 = write_tiny("logsoftmax-axis0", [](onnx::GraphProto& g) {
    auto& n = add_node(g, "LogSoftmax", "/log_softmax", "flat", "logp");
    auto& a = *n.add_attribute();
    a.set_name("axis");
    a.set_type(onnx::AttributeProto::INT);
    a.set_i(0);
  });
  EXPECT_NE(model_error(axis0).find("log-softmax over axis 0"), std::string::npos) << model_error(axis0);
}

TEST(Onnx, UnsupportedAttributesAreRefusedByName) {
  auto set_s = [](onnx::NodeProto& n, const std::string& k, const std::string& v) {
    onnx::AttributeProto& a = *n.add_attribute();
    a.set_name(k);
    a.set_type(onnx::AttributeProto::STRING);
    a.set_s(v);
  };
  const std::string same = write_tiny("same", [](onnx::GraphProto&) {},
                                      [&](onnx::NodeProto& c) { set_s(c, "auto_pad", "SAME_UPPER"); });
  EXPECT_NE(model_error(same).find("node '/conv/Conv' (Conv): auto_pad=SAME_UPPER with pads"), std::string::npos)
      << model_error(same);
  // SAME without pads: the padding that keeps ceil(4 / stride) outputs. At
  // stride 1 that is one pixel each side (the explicit pads' model); at
  // stride 2 it is one pixel on one side only, which memfit cannot pad.
  auto same_strided = [&](int64_t stride) {
    return [&, stride](onnx::NodeProto& c) {
      c.mutable_attribute()->RemoveLast();  // the pads
      set_s(c, "auto_pad", "SAME_LOWER");
      onnx::AttributeProto& a = *c.add_attribute();
      a.set_name("strides");
      a.set_type(onnx::AttributeProto::INTS);
      a.add_ints(stride);
      a.add_ints(stride);
    };
  };
  EXPECT_EQ(model_error(write_tiny("same1", [](onnx::GraphProto&) {}, same_strided(1))), "(no ModelFileError)");
  const std::string same2 = write_tiny("same2", [](onnx::GraphProto&) {}, same_strided(2));
  EXPECT_NE(model_error(same2).find("auto_pad=SAME_LOWER pads axis 0 by 1 (one side more than the other)"),
            std::string::npos)
      << model_error(same2);
  // A Pad of zeros is an AveragePool's padding; read by anything else, refused.
  auto padded = [&](const std::string& name, const std::string& pool, std::vector<int64_t> pads) {
    return write_tiny(name, [&](onnx::GraphProto& g) {
      g.mutable_node()->RemoveLast();  // pad the convolution's output, not the flattened one
      int_initializer(g, "pads", pads);
      onnx::NodeProto& pad = add_node(g, "Pad", "/pad/Pad", "c", "cp");
      pad.add_input("pads");
      onnx::NodeProto& p = add_node(g, pool, "/pool/" + pool, "cp", "p");
      onnx::AttributeProto& k = *p.add_attribute();
      k.set_name("kernel_shape");
      k.set_type(onnx::AttributeProto::INTS);
      k.add_ints(3);
      k.add_ints(3);
      add_node(g, "Flatten", "/Flatten", "p", "flat");
    });
  };
  EXPECT_EQ(model_error(padded("pad_avg", "AveragePool", {0, 0, 1, 1, 0, 0, 1, 1})), "(no ModelFileError)");
  // Zeros a max pool reads, or on the channel axis, are the file's own
  // tensor: concatenated zeros (a max pool's own padding would be -inf).
  // [N, 2, 4, 4] padded, pooled 3 x 3 to [N, C, 4, 4], flattened.
  for (const auto& [name, pool, pads, axes, classes] :
       std::vector<std::tuple<std::string, std::string, Shape, Shape, int64_t>>{
           {"pad_max", "MaxPool", {0, 0, 1, 1, 0, 0, 1, 1}, {2, 3}, 2 * 16},
           {"pad_channels", "AveragePool", {0, 1, 1, 1, 0, 0, 1, 1}, {1, 2, 3}, 3 * 16}}) {
    Graph g;
    build_tiny(g, padded(name, pool, pads), classes);
    Shape concat_axes;
    for (const Node& n : g.nodes())
      if (n.op == "concat") concat_axes.push_back(n.attrs.i("axis"));
    EXPECT_EQ(concat_axes, axes) << name;
  }
  const std::string one_sided = write_tiny("one_sided", [](onnx::GraphProto&) {}, [](onnx::NodeProto& c) {
    c.mutable_attribute(0)->set_ints(2, 0);  // pads [1, 1, 0, 1]
  });
  EXPECT_NE(model_error(one_sided).find("pads [1, 1, 0, 1]: memfit pads both sides of an axis alike"),
            std::string::npos)
      << model_error(one_sided);
  const std::string three_d = write_tiny("pads3", [](onnx::GraphProto&) {}, [](onnx::NodeProto& c) {
    c.mutable_attribute(0)->add_ints(1);  // five pads for two axes
  });
  EXPECT_NE(model_error(three_d).find("attribute pads [1, 1, 1, 1, 1] has 5 values; 4 expected"), std::string::npos)
      << model_error(three_d);
  const std::string dil = write_tiny("dilated_pool", [](onnx::GraphProto& g) {
    g.mutable_node()->RemoveLast();  // pool the convolution's output, not the flattened one
    onnx::NodeProto& p = add_node(g, "MaxPool", "/pool/MaxPool", "c", "p");
    for (const char* k : {"kernel_shape", "dilations"}) {
      onnx::AttributeProto& a = *p.add_attribute();
      a.set_name(k);
      a.set_type(onnx::AttributeProto::INTS);
      a.add_ints(2);
      a.add_ints(2);
    }
    add_node(g, "Flatten", "/Flatten", "p", "flat");
  });
  EXPECT_NE(model_error(dil).find("node '/pool/MaxPool' (MaxPool): attribute dilations [2, 2] is not supported"),
            std::string::npos)
      << model_error(dil);
  const std::string odd = write_tiny("odd_attr", [](onnx::GraphProto&) {}, [&](onnx::NodeProto& c) {
    set_s(c, "colour", "red");
  });
  EXPECT_NE(model_error(odd).find("attribute 'colour' of Conv is not supported"), std::string::npos) << model_error(odd);
}

// A tiny model that converts: the initializer is a parameter under its ONNX
// name with the file's values as its initial values.
TEST(Onnx, InitializersAreParametersWithTheirValues) {
  const std::string path = write_tiny("ok", [](onnx::GraphProto&) {});
  const models::Model m = models::resolve(path);
  Graph g;
  Builder b(g);
  models::Inputs in;
  in.values["image"] = g.input("image", {3, 1, 4, 4});
  const ValueId y = m.build(b, in, 32);
  EXPECT_EQ(g.value(y).shape, (Shape{3, 32}));
  const ValueId w = g.find("conv.weight");
  ASSERT_NE(w, kNone);
  EXPECT_EQ(g.value(w).shape, (Shape{2, 1, 3, 3}));
  ASSERT_EQ(g.value(w).init.kind, InitSpec::Given);
  EXPECT_EQ((*g.value(w).init.values)[17], 0.1f * 17.0f);
  // The data must fit the file's input and head.
  for (const auto& [shape, classes] : {std::pair{Shape{3, 3, 4, 4}, 32}, std::pair{Shape{3, 1, 4, 4}, 10}}) {
    Graph g2;
    Builder b2(g2);
    models::Inputs in2;
    in2.values["image"] = g2.input("image", shape);
    EXPECT_THROW(m.build(b2, in2, classes), GraphError) << shape_str(shape) << " " << classes;
  }
}

// Weights stored as external data beside the model (torch's dynamo
// exporter): read from the model's folder, offset and length checked
// against the file and the tensor's shape; a location outside the folder,
// a length that is not the shape's, a truncated or missing data file and
// a malformed offset are bad model files naming the tensor.
TEST(Onnx, ExternalDataIsReadFromTheModelsFolder) {
  const std::string tiny = write_tiny("external", [](onnx::GraphProto&) {});
  onnx::ModelProto base;
  {
    std::ifstream in(tiny, std::ios::binary);
    ASSERT_TRUE(base.ParseFromIstream(&in));
  }
  const std::string dir = memfit::testing::temp_dir("onnx-external");
  std::vector<float> w(18);
  for (int i = 0; i < 18; ++i) w[static_cast<size_t>(i)] = 0.5f - 0.03f * static_cast<float>(i);
  {
    std::ofstream d(dir + "/model.onnx.data", std::ios::binary);
    d.write("12345678", 8);  // the weight starts at offset 8
    d.write(reinterpret_cast<const char*>(w.data()), 72);
  }
  std::filesystem::create_directories(dir + "/sub");
  auto write = [&](const std::string& name, const std::string& location, const std::string& offset, const std::string& length) {
    onnx::ModelProto m = base;
    for (auto& t : *m.mutable_graph()->mutable_initializer()) {
      if (t.name() != "conv.weight") continue;
      t.clear_float_data();
      t.set_data_location(onnx::TensorProto::EXTERNAL);
      auto add = [&](const char* k, const std::string& v) {
        auto* e = t.add_external_data();
        e->set_key(k);
        e->set_value(v);
      };
      add("location", location);
      if (!offset.empty()) add("offset", offset);
      if (!length.empty()) add("length", length);
    }
    const std::string path = dir + "/" + name;
    std::ofstream f(path, std::ios::binary);
    EXPECT_TRUE(m.SerializeToOstream(&f));
    return path;
  };
  const models::Model m = models::resolve(write("model.onnx", "model.onnx.data", "8", "72"));
  Graph g;
  Builder b(g);
  models::Inputs in;
  in.values["image"] = g.input("image", {3, 1, 4, 4});
  m.build(b, in, 32);
  const ValueId v = g.find("conv.weight");
  ASSERT_NE(v, kNone);
  ASSERT_EQ(g.value(v).init.kind, InitSpec::Given);
  EXPECT_EQ(*g.value(v).init.values, w);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {write("up.onnx", "../model.onnx.data", "8", "72"), "is not a file name inside the model's folder"},
      {write("abs.onnx", dir + "/model.onnx.data", "8", "72"), "is not a file name inside the model's folder"},
      {write("short.onnx", "model.onnx.data", "8", "68"), "external data of 68 bytes for its shape [2, 1, 3, 3] of 72"},
      {write("past.onnx", "model.onnx.data", "16", "72"), "is past the end of"},
      {write("missing.onnx", "nothing.data", "0", "72"), "cannot read its external data file"},
      {write("offset.onnx", "model.onnx.data", "-8", "72"), "external data offset '-8' is not a whole number"},
  };
  for (const auto& [path, want] : bad) {
    const std::string e = model_error(path);
    EXPECT_NE(e.find("initializer 'conv.weight'"), std::string::npos) << e;
    EXPECT_NE(e.find(want), std::string::npos) << e;
  }
  // A link inside the folder that leads out of it is refused too.
  std::filesystem::create_symlink("/etc/hostname", dir + "/sub/link.data");
  const std::string e = model_error(write("link.onnx", "sub/link.data", "0", "72"));
  EXPECT_NE(e.find("leads outside the model's folder"), std::string::npos) << e;
}

// Batch norm exported for inference (training_mode 0, model.eval() or the
// dynamo exporter) is trained with batch statistics from the file's running
// ones, and the model says so.
TEST(Onnx, InferenceBatchNormTrains) {
  const std::string path = write_tiny("bn-eval", [](onnx::GraphProto& g) {
    for (const char* name : {"bn.weight", "bn.running_var"}) float_initializer(g, name, std::vector<float>(32, 1.0f));
    for (const char* name : {"bn.bias", "bn.running_mean"}) float_initializer(g, name, std::vector<float>(32, 0.0f));
    auto& n = add_node(g, "BatchNormalization", "/bn/BatchNormalization", "flat", "y");
    for (const char* in : {"bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"}) n.add_input(in);
  });
  const models::Model m = models::resolve(path);
  ASSERT_EQ(m.notes.size(), 1u);
  EXPECT_NE(m.notes[0].find("1 batch norm of " + path + " exported for inference"), std::string::npos) << m.notes[0];
  Graph g;
  build_tiny(g, path, 32, /*training=*/true);
  int bns = 0;
  for (const Node& n : g.nodes())
    if (n.op == "batch_norm") bns += n.attrs.i("training") == 1;
  EXPECT_EQ(bns, 1);
  EXPECT_EQ(g.value(g.find("bn.running_var")).cls, VClass::Buffer);
}

TEST(Onnx, TruncatedOrMissingFileIsRefused) {
  NEED_EXPORT();
  const std::string whole = exported().dir + "/convnet.onnx";
  const std::string cut = memfit::testing::temp_dir("onnx-cut") + "/convnet.onnx";
  {
    std::ifstream in(whole, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream out(cut, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  }
  EXPECT_NE(model_error(cut).find(cut + ": is not a readable ONNX model (truncated or corrupt protobuf)"),
            std::string::npos)
      << model_error(cut);
  auto r = run_memfit("train --model " + cut + " --steps 1 --out " + memfit::testing::temp_dir("onnx-cut-run"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("bad model file: " + cut), std::string::npos) << r.out;
  EXPECT_EQ(model_error("/nonexistent/model.onnx"), "cannot read ONNX model /nonexistent/model.onnx: not found");
}

// Gemm with alpha, beta, transA and transB; ReduceMean and ReduceSum over
// any axes (attribute or, from opset 18, input), with and without keepdims, a Sub and a Div of two tensors with
// broadcasting, and a MaxPool with ceil_mode where its size is the floor's:
// the imported graph computes what the ops define (the reference backend in
// double against the formula, from the convolution's output).
TEST(Onnx, ReductionsBroadcastsAndCeilModePoolsCompute) {
  struct Case {
    std::string name;
    std::function<void(onnx::GraphProto&)> extra;
    int64_t opset, width;  // the output's [N, width]
    std::function<double(const std::vector<double>&, int64_t, int64_t)> want;  // c [N, 2, 4, 4], sample, output index
  };
  auto ints_attr = [](onnx::NodeProto& n, const char* name, std::vector<int64_t> v) {
    auto& a = *n.add_attribute();
    a.set_name(name);
    a.set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a.add_ints(x);
  };
  auto c_at = [](const std::vector<double>& c, int64_t s, int64_t ch, int64_t h, int64_t w) {
    return c[static_cast<size_t>(((s * 2 + ch) * 4 + h) * 4 + w)];
  };
  // Gemm's weight [32, 3] (w[k][j] = (k - 2 j) / 40) and bias [3] (j - 1)
  // as initializers.
  auto gemm_weights = [](onnx::GraphProto& g, bool transposed) {
    onnx::TensorProto& w = *g.add_initializer();
    w.set_name("gw");
    w.set_data_type(onnx::TensorProto::FLOAT);
    if (transposed) w.add_dims(3), w.add_dims(32);
    else w.add_dims(32), w.add_dims(3);
    for (int r = 0; r < (transposed ? 3 : 32); ++r)
      for (int q = 0; q < (transposed ? 32 : 3); ++q) {
        const int k = transposed ? q : r, j = transposed ? r : q;
        w.add_float_data(static_cast<float>(k - 2 * j) / 40.0f);
      }
    onnx::TensorProto& b = *g.add_initializer();
    b.set_name("gb");
    b.set_data_type(onnx::TensorProto::FLOAT);
    b.add_dims(3);
    for (int j = 0; j < 3; ++j) b.add_float_data(static_cast<float>(j - 1));
  };
  auto float_attr = [](onnx::NodeProto& n, const char* name, float v) {
    auto& a = *n.add_attribute();
    a.set_name(name);
    a.set_type(onnx::AttributeProto::FLOAT);
    a.set_f(v);
  };
  // 0.5 * flat W + 2 b, flat = c as [N, 32].
  auto gemm_want = [](const std::vector<double>& c, int64_t s, int64_t j) {
    double y = 0;
    for (int64_t k = 0; k < 32; ++k) y += c[static_cast<size_t>(s * 32 + k)] * static_cast<double>(static_cast<float>(k - 2 * j) / 40.0f);
    return 0.5 * y + 2.0 * static_cast<double>(j - 1);
  };
  const std::vector<Case> cases = {
      {"gemm-alpha-beta", [&](onnx::GraphProto& g) {
         gemm_weights(g, false);
         auto& m = add_node(g, "Gemm", "/gemm", "flat", "y");
         m.add_input("gw");
         m.add_input("gb");
         float_attr(m, "alpha", 0.5f);
         float_attr(m, "beta", 2.0f);
       }, 14, 3, gemm_want},
      {"gemm-transA-transB", [&](onnx::GraphProto& g) {
         gemm_weights(g, true);
         ints_attr(add_node(g, "Transpose", "/t", "flat", "ft"), "perm", {1, 0});  // [32, N]
         auto& m = add_node(g, "Gemm", "/gemm", "ft", "y");
         m.add_input("gw");
         m.add_input("gb");
         int_attr(m, "transA", 1);
         int_attr(m, "transB", 1);
         float_attr(m, "alpha", 0.5f);
         float_attr(m, "beta", 2.0f);
       }, 14, 3, gemm_want},
      {"mean-hw", [&](onnx::GraphProto& g) { ints_attr(add_node(g, "ReduceMean", "/mean", "c", "m"), "axes", {2, 3});
                                             int_attr(*g.mutable_node(g.node_size() - 1), "keepdims", 0); }, 14, 2,
       [&](const std::vector<double>& c, int64_t s, int64_t i) {
         double t = 0;
         for (int64_t h = 0; h < 4; ++h)
           for (int64_t w = 0; w < 4; ++w) t += c_at(c, s, i, h, w);
         return t / 16;
       }},
      {"sum-c-keep", [&](onnx::GraphProto& g) {
         ints_attr(add_node(g, "ReduceSum", "/sum", "c", "r"), "axes", {1});
         add_node(g, "Flatten", "/flat2", "r", "m");
       }, 11, 16,
       [&](const std::vector<double>& c, int64_t s, int64_t i) { return c_at(c, s, 0, i / 4, i % 4) + c_at(c, s, 1, i / 4, i % 4); }},
      {"mean-h-input", [&](onnx::GraphProto& g) {
         int_initializer(g, "axes", {-2});
         add_node(g, "ReduceMean", "/mean", "c", "r").add_input("axes");
         add_node(g, "Flatten", "/flat2", "r", "m");
       }, 18, 8,
       [&](const std::vector<double>& c, int64_t s, int64_t i) {  // r [N, 2, 1, 4]
         double t = 0;
         for (int64_t h = 0; h < 4; ++h) t += c_at(c, s, i / 4, h, i % 4);
         return t / 4;
       }},
      {"sub-div-broadcast", [&](onnx::GraphProto& g) {
         ints_attr(add_node(g, "ReduceMean", "/mean", "c", "mu"), "axes", {2, 3});  // [N, 2, 1, 1]
         add_node(g, "Sub", "/sub", "c", "d").add_input("mu");
         add_node(g, "Div", "/div", "d", "q").add_input("c");
         add_node(g, "Flatten", "/flat2", "q", "m");
       }, 14, 32,
       [&](const std::vector<double>& c, int64_t s, int64_t i) {
         const int64_t ch = i / 16, h = i / 4 % 4, w = i % 4;
         double mu = 0;
         for (int64_t y = 0; y < 4; ++y)
           for (int64_t x = 0; x < 4; ++x) mu += c_at(c, s, ch, y, x) / 16;
         return (c_at(c, s, ch, h, w) - mu) / c_at(c, s, ch, h, w);
       }},
      {"maxpool-ceil", [&](onnx::GraphProto& g) {
         auto& p = add_node(g, "MaxPool", "/pool", "c", "p");  // 4 pixels, kernel 2, stride 2: 2 outputs either way
         ints_attr(p, "kernel_shape", {2, 2});
         ints_attr(p, "strides", {2, 2});
         int_attr(p, "ceil_mode", 1);
         add_node(g, "Flatten", "/flat2", "p", "m");
       }, 14, 8,
       [&](const std::vector<double>& c, int64_t s, int64_t i) {
         const int64_t ch = i / 4, oy = i / 2 % 2, ox = i % 2;
         double m = -1e300;
         for (int64_t y = 0; y < 2; ++y)
           for (int64_t x = 0; x < 2; ++x) m = std::max(m, c_at(c, s, ch, 2 * oy + y, 2 * ox + x));
         return m;
       }},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    const std::string path = write_tiny(k.name, k.extra, {}, k.opset);
    Graph g;
    Builder b(g);
    models::Inputs in;
    in.values["image"] = g.input("image", {3, 1, 4, 4});
    const models::Model mod = models::resolve(path);
    const ValueId y = mod.build(b, in, k.width);
    ValueId c = kNone;
    for (const Node& n : g.nodes())
      if (n.op == "conv2d") c = n.outputs[0];
    ASSERT_NE(c, kNone);
    g.value(c).is_output = g.value(y).is_output = true;
    ExecConfig cfg;
    cfg.backend = Backend::Reference64;
    Executor ex(g, cfg);
    ex.init_params(3);
    const std::vector<float> image = memfit::testing::random_floats(48, 9, -1.0f, 1.0f);
    ex.write_f32(in.values["image"], image.data());
    ex.run(kernels::StepContext{});
    std::vector<float> cf(static_cast<size_t>(numel(g.value(c).shape))), yf(static_cast<size_t>(numel(g.value(y).shape)));
    ex.read_f32(c, cf.data());
    ex.read_f32(y, yf.data());
    const std::vector<double> cd(cf.begin(), cf.end());
    const int64_t per = numel(g.value(y).shape) / 3;
    for (int64_t s = 0; s < 3; ++s)
      for (int64_t i = 0; i < per; ++i)
        EXPECT_NEAR(yf[static_cast<size_t>(s * per + i)], k.want(cd, s, i), 1e-5 * (1 + std::abs(k.want(cd, s, i))))
            << "sample " << s << " output " << i;
  }
  // A max pool's ceil_mode that adds an output is memfit's ceil mode (its
  // kernels: CpuKernels.MaxPoolCeilMode, GradCheckPool.MaxCeilMode); an
  // average pool's is refused, naming the sizes.
  for (const char* op : {"MaxPool", "AveragePool"}) {
    const std::string ceil = write_tiny(std::string(op) + "-ceil-partial", [&](onnx::GraphProto& g) {
      auto& p = add_node(g, op, "/pool", "c", "p");
      ints_attr(p, "kernel_shape", {3, 3});
      ints_attr(p, "strides", {2, 2});
      int_attr(p, "ceil_mode", 1);
      add_node(g, "Flatten", "/flat2", "p", "m");
    });
    if (std::string(op) == "AveragePool") {
      EXPECT_NE(model_error(ceil).find("ceil_mode=1 over 4 pixels (kernel 3, stride 2, pad 0) gives 2 outputs where floor "
                                       "gives 1: memfit's average pooling rounds down only"),
                std::string::npos)
          << model_error(ceil);
      continue;
    }
    Graph g;
    build_tiny(g, ceil, 8);
    int pools = 0;
    for (const Node& n : g.nodes())
      if (n.op == "max_pool2d") {
        EXPECT_EQ(g.value(n.outputs[0]).shape, (Shape{3, 2, 2, 2}));
        pools += n.attrs.i("ceil", 0) == 1;
      }
    EXPECT_EQ(pools, 1);
  }
}

// ------------------------------------------------------ recurrent layers ----
//
// Text classifiers written with nn.RNN, nn.GRU and nn.LSTM as courses write
// them (tests/golden/export_onnx.py's export_recurrent: batch_first=True, no
// initial state, so the exporter writes a ConstantOfShape zero state, the
// gate reordering as Slice/Concat of the parameters and Transposes around
// the node), against PyTorch in float64 on the same float32 weights and
// batch: step-0 logits (1e-4 of the largest), loss (1e-5 relative) and every
// parameter gradient (1e-3 in relative L2), as check_against_pytorch; then
// the losses of 5 plain SGD steps at lr 0.5 within 1e-4 relative (f32
// sums of <= 40 terms per gate over 12 steps of a contracting recurrence
// stay near 1e-6 relative; the updates compound them over 5 steps, as the
// LSTM golden's 4-step losses do at the same bound in test_lstm).
namespace {
constexpr int64_t kRnnT = 12, kRnnVocab = 100, kRnnClasses = 4;

train::StepSpec recurrent_spec(const std::string& name) {
  train::StepSpec spec;
  spec.model = exported().dir + "/" + name + ".onnx";
  spec.batch = 4;
  spec.data = {{"tokens", DType::i32, {kRnnT}, 0.0, kRnnVocab}, {"labels", DType::i32, {}, -1.0, kRnnClasses}};
  spec.classes = kRnnClasses;
  spec.optimizer.kind = "sgd";
  spec.optimizer.momentum = 0.0;
  return spec;
}

// `layers`: the memfit op each layer became, in order ("lstm", or rnn's
// cell: "tanh", "gru"); the state_dict's parameters are checked by name and
// shape for the one-layer classifiers (module `rnn`).
void check_recurrent(const std::string& name, const std::vector<std::string>& layers, size_t params) {
  io::SafetensorsFile f = io::SafetensorsFile::load(exported().dir + "/" + name + ".safetensors");
  auto sg = train::build_step_graph(recurrent_spec(name));
  const Graph& g = sg->g;
  std::vector<std::string> found;
  for (const Node& n : g.nodes()) {
    if ((n.op != "rnn" && n.op != "lstm") || n.phase != Phase::Forward) continue;
    found.push_back(n.op == "lstm" ? "lstm" : n.attrs.s("cell"));
    // Read batch first from the embedding or the layer below: the
    // exporter's Transposes are gone.
    const std::string& below = g.node(g.value(n.inputs[0]).producer).op;
    EXPECT_TRUE(below == "embedding" || below == "rnn" || below == "lstm") << below;
    // The module's parameters themselves: the exporter's gate reordering
    // and memfit's cancel, and neither is computed.
    for (size_t i = 1; i < 5; ++i) EXPECT_EQ(g.value(n.inputs[i]).cls, VClass::Param) << g.value(n.inputs[i]).name;
  }
  for (const Node& n : g.nodes()) {
    if (n.op != "concat" && n.op != "slice") continue;
    for (ValueId v : n.inputs) {
      EXPECT_NE(g.value(v).cls, VClass::Param) << n.op << " of " << g.value(v).name;
    }
  }
  EXPECT_EQ(found, layers) << "the import took another path";
  EXPECT_EQ(g.trainable_params().size(), params);
  if (layers.size() == 1) {
    const int64_t G = layers[0] == "lstm" ? 96 : layers[0] == "gru" ? 72 : 24;
    for (auto [p, s] : std::vector<std::pair<std::string, Shape>>{{"embedding.weight", {kRnnVocab, 16}},
                                                                  {"rnn.weight_ih_l0", {G, 16}},
                                                                  {"rnn.weight_hh_l0", {G, 24}},
                                                                  {"rnn.bias_ih_l0", {G}},
                                                                  {"rnn.bias_hh_l0", {G}},
                                                                  {"fc.weight", {kRnnClasses, 24}},
                                                                  {"fc.bias", {kRnnClasses}}}) {
      const ValueId v = g.find(p);
      ASSERT_NE(v, kNone) << p;
      EXPECT_EQ(g.value(v).shape, s) << p;
      EXPECT_TRUE(g.value(v).trainable) << p;
    }
  }

  EXPECT_EQ(expect_golden_steps(*sg, f, 4 * kRnnT), static_cast<int>(params));
}

// The exported file `name` with its RNN, GRU or LSTM node changed by `edit`,
// written beside it as `to`.
std::string edited(const std::string& name, const std::string& to,
                   const std::function<void(onnx::GraphProto&, onnx::NodeProto&)>& edit) {
  onnx::ModelProto m;
  {
    std::ifstream in(exported().dir + "/" + name + ".onnx", std::ios::binary);
    EXPECT_TRUE(m.ParseFromIstream(&in));
  }
  onnx::GraphProto& g = *m.mutable_graph();
  for (auto& n : *g.mutable_node())
    if (n.op_type() == "RNN" || n.op_type() == "GRU" || n.op_type() == "LSTM") edit(g, n);
  const std::string path = memfit::testing::temp_dir("onnx-rnn") + "/" + to + ".onnx";
  std::ofstream out(path, std::ios::binary);
  EXPECT_TRUE(m.SerializeToOstream(&out));
  return path;
}
}  // namespace

TEST(OnnxRecurrent, RnnClassifierMatchesPyTorch) {
  NEED_EXPORT();
  check_recurrent("rnn_classifier", {"tanh"}, 7);
}
TEST(OnnxRecurrent, GruClassifierMatchesPyTorch) {
  NEED_EXPORT();
  check_recurrent("gru_classifier", {"gru"}, 7);
}
TEST(OnnxRecurrent, LstmClassifierMatchesPyTorch) {
  NEED_EXPORT();
  check_recurrent("lstm_classifier", {"lstm"}, 7);
}
// nn.RNN(nonlinearity="relu"), its h_n[-1] read: the relu cell. (With
// PyTorch's initial weights a pre-activation within f32 rounding of 0
// would switch a unit and put an O(1) error in one gradient element; this
// seed's batch has none, as the 1e-3 bound on every gradient shows.)
TEST(OnnxRecurrent, ReluRnnClassifierMatchesPyTorch) {
  NEED_EXPORT();
  check_recurrent("relu_rnn_classifier", {"relu"}, 7);
}
// Two GRU layers (one ONNX node each) under an LSTM; the GRU's h_n[-1] and
// the LSTM's y[:, -1] both read.
TEST(OnnxRecurrent, StackedLayersMatchPyTorch) {
  NEED_EXPORT();
  check_recurrent("stacked_classifier", {"gru", "gru", "lstm"}, 15);  // embedding, 3 layers x 4, fc 2
}

// An LSTM whose W, R and B are initializers in ONNX's own layout (gates i,
// o, f, c; B = [Wb, Rb]), as an exporter that folds the reordering writes
// them: memfit reorders the rows in the graph, the parameters keep ONNX's
// names and layout, and the model is the LSTM classifier's: PyTorch's
// logits, loss and 5 SGD losses (a row permutation of the weights changes
// no sum, and plain SGD is elementwise), and W's, R's and B's gradients are
// PyTorch's in ONNX's row order (the same tolerances as check_recurrent).
TEST(OnnxRecurrent, LstmWeightsInOnnxLayoutAreReorderedInTheGraph) {
  NEED_EXPORT();
  const int64_t H = 24, I = 16;
  const std::vector<int64_t> torch_block{0, 3, 1, 2};  // of ONNX's blocks i, o, f, c
  // Rows of a torch [4H, ...] tensor in ONNX's gate order.
  auto onnx_rows = [&](const std::vector<float>& t, int64_t cols) {
    std::vector<float> r;
    for (int64_t b = 0; b < 4; ++b)
      for (int64_t j = 0; j < H * cols; ++j) r.push_back(t[static_cast<size_t>(torch_block[b] * H * cols + j)]);
    return r;
  };
  std::map<std::string, std::vector<float>> torch_init;
  const std::string path = edited("lstm_classifier", "onnx-layout", [&](onnx::GraphProto& g, onnx::NodeProto& n) {
    for (const auto& t : g.initializer()) {
      std::vector<float> v(t.raw_data().size() / 4);
      std::memcpy(v.data(), t.raw_data().data(), v.size() * 4);
      torch_init[t.name()] = v;
    }
    auto add = [&](const std::string& name, Shape dims, std::vector<float> v) {
      onnx::TensorProto& t = *g.add_initializer();
      t.set_name(name);
      t.set_data_type(onnx::TensorProto::FLOAT);
      for (int64_t d : dims) t.add_dims(d);
      for (float x : v) t.add_float_data(x);
    };
    add("W", {1, 4 * H, I}, onnx_rows(torch_init.at("rnn.weight_ih_l0"), I));
    add("R", {1, 4 * H, H}, onnx_rows(torch_init.at("rnn.weight_hh_l0"), H));
    std::vector<float> b = onnx_rows(torch_init.at("rnn.bias_ih_l0"), 1), bh = onnx_rows(torch_init.at("rnn.bias_hh_l0"), 1);
    b.insert(b.end(), bh.begin(), bh.end());
    add("B", {1, 8 * H}, b);
    n.set_input(1, "W");
    n.set_input(2, "R");
    n.set_input(3, "B");
    // The exporter's reordering nodes, now read by nothing, go.
    for (bool removed = true; removed;) {
      removed = false;
      std::set<std::string> used{g.output(0).name()};
      for (const auto& k : g.node())
        for (const auto& i : k.input()) used.insert(i);
      for (int k = 0; k < g.node_size(); ++k) {
        bool read = false;
        for (const auto& o : g.node(k).output()) read = read || used.count(o);
        if (!read) {
          g.mutable_node()->DeleteSubrange(k, 1);
          removed = true;
          break;
        }
      }
    }
    for (int k = g.initializer_size(); k-- > 0;)
      if (g.initializer(k).name().rfind("rnn.", 0) == 0) g.mutable_initializer()->DeleteSubrange(k, 1);
  });
  io::SafetensorsFile f = io::SafetensorsFile::load(exported().dir + "/lstm_classifier.safetensors");
  train::StepSpec spec = recurrent_spec("lstm_classifier");
  spec.model = path;
  auto sg = train::build_step_graph(spec);
  const Graph& g = sg->g;
  for (auto [p, s] : std::vector<std::pair<std::string, Shape>>{{"W", {1, 4 * H, I}}, {"R", {1, 4 * H, H}}, {"B", {1, 8 * H}}}) {
    const ValueId v = g.find(p);
    ASSERT_NE(v, kNone) << p;
    EXPECT_EQ(g.value(v).shape, s) << p;
    EXPECT_TRUE(g.value(v).trainable) << p;
  }
  EXPECT_EQ(g.trainable_params().size(), 6u);  // embedding, W, R, B, fc
  Executor ex(g, ExecConfig{});
  ex.init_params(42);
  std::memcpy(ex.data(sg->x), f.data(f.at("input")), f.at("input").nbytes());
  std::memcpy(ex.data(sg->labels), f.data(f.at("labels")), f.at("labels").nbytes());
  kernels::StepContext ctx;
  ctx.seed = 42;
  ctx.lr = std::stod(f.metadata().at("lr"));
  const size_t n_nodes = g.num_nodes();
  ex.run_nodes(0, n_nodes - 1, ctx);
  auto ref = f32(f, "logits");
  double mx = 0;
  for (float r : ref) mx = std::max(mx, std::abs(static_cast<double>(r)));
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(ex.ptr<float>(sg->logits)[i], ref[i], 1e-4 * mx) << "logit " << i;
  EXPECT_NEAR(ex.ptr<float>(sg->loss)[0], f32(f, "loss")[0], 1e-5 * f32(f, "loss")[0]);
  auto close = [&](const std::string& p, const std::vector<float>& want) {
    const float* got = ex.ptr<float>(g.value(g.find(p)).grad);
    double d = 0, r = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      d += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
      r += static_cast<double>(want[i]) * want[i];
    }
    EXPECT_LE(std::sqrt(d), 1e-3 * std::sqrt(r) + 1e-12) << p << " gradient differs";
  };
  close("W", onnx_rows(f32(f, "grad.rnn.weight_ih_l0"), I));
  close("R", onnx_rows(f32(f, "grad.rnn.weight_hh_l0"), H));
  std::vector<float> gb = onnx_rows(f32(f, "grad.rnn.bias_ih_l0"), 1), gbh = onnx_rows(f32(f, "grad.rnn.bias_hh_l0"), 1);
  gb.insert(gb.end(), gbh.begin(), gbh.end());
  close("B", gb);
  ex.run_nodes(n_nodes - 1, n_nodes, ctx);
  auto losses = f32(f, "losses");
  for (int t = 1; t < 5; ++t) {
    ctx.step = t;
    ex.run(ctx);
    EXPECT_NEAR(ex.ptr<float>(sg->loss)[0], losses[size_t(t)], 1e-4 * losses[size_t(t)]) << "loss at step " << t;
  }
}

// What memfit's layers cannot be is refused before training, naming the
// node and the attribute or input: two directions, a nonzero or computed
// initial state, clipping, another activation, the GRU of
// linear_before_reset=0, sequence lengths, batch-first X (layout=1).
// nn.RNN(nonlinearity="relu") (activations [Relu]) imports as the relu cell.
TEST(OnnxRecurrent, WhatTheLayersCannotBeIsRefusedByName) {
  NEED_EXPORT();
  auto set_s = [](onnx::NodeProto& n, const char* name, const std::string& v) {
    auto& a = *n.add_attribute();
    a.set_name(name);
    a.set_type(onnx::AttributeProto::STRING);
    a.set_s(v);
  };
  auto refusal = [&](const std::string& name, const std::string& to, const std::function<void(onnx::GraphProto&, onnx::NodeProto&)>& edit) {
    return model_error(edited(name, to, edit));
  };
  auto expect = [](const std::string& err, const std::string& want) {
    EXPECT_NE(err.find(want), std::string::npos) << err;
  };
  expect(refusal("gru_classifier", "bidirectional", [&](onnx::GraphProto&, onnx::NodeProto& n) { set_s(n, "direction", "bidirectional"); }),
         "(GRU): attribute direction=bidirectional: memfit imports forward layers only");
  // A zero state of ones: the ConstantOfShape's value.
  const std::string ones = refusal("lstm_classifier", "h0-ones", [&](onnx::GraphProto& g, onnx::NodeProto& n) {
    for (auto& k : *g.mutable_node())
      if (k.op_type() == "ConstantOfShape" && k.output(0) == n.input(5)) {
        auto& t = *k.mutable_attribute(0)->mutable_t();
        t.clear_raw_data();
        t.clear_float_data();
        t.add_float_data(1.0f);
      }
  });
  expect(ones, "(LSTM): its initial_h ('");
  expect(ones, "') is not zero: memfit's recurrent layers start from a zero state");
  const std::string computed = refusal("rnn_classifier", "h0-computed", [&](onnx::GraphProto&, onnx::NodeProto& n) { n.set_input(5, n.input(0)); });
  expect(computed, "(RNN): its initial_h ('");
  expect(computed, "') is computed by the graph: memfit's recurrent layers start from a zero state");
  expect(refusal("lstm_classifier", "clip", [&](onnx::GraphProto&, onnx::NodeProto& n) {
           auto& a = *n.add_attribute();
           a.set_name("clip");
           a.set_type(onnx::AttributeProto::FLOAT);
           a.set_f(3.0f);
         }),
         "(LSTM): attribute clip");
  expect(refusal("gru_classifier", "lbr0", [&](onnx::GraphProto&, onnx::NodeProto& n) {
           for (auto& a : *n.mutable_attribute())
             if (a.name() == "linear_before_reset") a.set_i(0);
         }),
         "(GRU): attribute linear_before_reset=0");
  expect(refusal("rnn_classifier", "sigmoid", [&](onnx::GraphProto&, onnx::NodeProto& n) {
           for (auto& a : *n.mutable_attribute())
             if (a.name() == "activations") a.set_strings(0, "Sigmoid");
         }),
         "(RNN): attribute activations [Sigmoid]: memfit's RNN takes [Tanh] or [Relu]");
  expect(refusal("rnn_classifier", "lengths", [&](onnx::GraphProto&, onnx::NodeProto& n) { n.set_input(4, n.input(5)); }),
         "(RNN): has sequence_lens");
  expect(refusal("lstm_classifier", "layout1", [&](onnx::GraphProto&, onnx::NodeProto& n) {
           auto& a = *n.add_attribute();
           a.set_name("layout");
           a.set_type(onnx::AttributeProto::INT);
           a.set_i(1);
         }),
         "(LSTM): attribute layout=1: memfit imports layout 0");
  // Relu imports as the relu cell.
  const std::string relu = edited("rnn_classifier", "relu", [&](onnx::GraphProto&, onnx::NodeProto& n) {
    for (auto& a : *n.mutable_attribute())
      if (a.name() == "activations") a.set_strings(0, "Relu");
  });
  train::StepSpec spec = recurrent_spec("rnn_classifier");
  spec.model = relu;
  auto sg = train::build_step_graph(spec);
  int cells = 0;
  for (const Node& n : sg->g.nodes())
    if (n.op == "rnn") cells += n.attrs.s("cell") == "relu";
  EXPECT_EQ(cells, 1);
}

// ConstantOfShape and Expand fold on constants (here into a scalar factor);
// an Expand that leaves a tensor of the graph as it is passes, one that
// grows it over new leading axes is a copy, one that repeats an inner axis
// is refused.
TEST(Onnx, ConstantOfShapeAndExpandFold) {
  auto ints = int_initializer;
  const std::string path = write_tiny("cos-expand", [&](onnx::GraphProto& g) {
    ints(g, "one", {1});
    ints(g, "row", {1, 32});
    auto& c = add_node(g, "ConstantOfShape", "/cos", "one", "k");  // [1] of 2.5
    auto& a = *c.add_attribute();
    a.set_name("value");
    a.set_type(onnx::AttributeProto::TENSOR);
    a.mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
    a.mutable_t()->add_dims(1);
    a.mutable_t()->add_float_data(2.5f);
    add_node(g, "Expand", "/ek", "k", "k1").add_input("one");    // still [1] of 2.5
    add_node(g, "Expand", "/ex", "flat", "e").add_input("row");  // [N, 32] as it is
    add_node(g, "Mul", "/mul", "e", "y").add_input("k1");
  });
  Graph g;
  build_tiny(g, path, 32);
  std::vector<double> scales;
  for (const Node& n : g.nodes())
    if (n.op == "scale") scales.push_back(n.attrs.f("alpha"));
  EXPECT_EQ(scales, std::vector<double>{2.5});
  // Over new leading axes it is a copy (ViT's class token over the batch):
  // [N, 32] -> [2, N, 32] (then its second copy, as [N, 32]), and a
  // leading 1 that grows is such an axis too: [1, N, 32] -> [2, N, 32].
  for (bool unit : {false, true}) {
    const std::string grow = write_tiny(unit ? "expand-grow-1" : "expand-grow", [&](onnx::GraphProto& g) {
      ints(g, "to", {2, 1, 32});
      ints(g, "unit", {1, -1, 32});
      ints(g, "from", {1});
      ints(g, "end", {2});
      ints(g, "axis0", {0});
      ints(g, "rows", {-1, 32});
      std::string x = "flat";
      if (unit) add_node(g, "Reshape", "/unit", "flat", "u").add_input("unit"), x = "u";
      add_node(g, "Expand", "/grow", x, "e").add_input("to");
      auto& sl = add_node(g, "Slice", "/second", "e", "s");
      for (const char* in : {"from", "end", "axis0"}) sl.add_input(in);
      add_node(g, "Reshape", "/rows", "s", "y").add_input("rows");
    });
    Graph grown;
    build_tiny(grown, grow, 32);
    int copies = 0;
    for (const Node& n : grown.nodes())
      if (n.op == "expand_leading") {
        ++copies;
        EXPECT_EQ(grown.value(n.inputs[0]).shape, (Shape{3, 32}));
        EXPECT_EQ(grown.value(n.outputs[0]).shape, (Shape{2, 3, 32}));
      }
    EXPECT_EQ(copies, 1);
  }
  // Repeating an inner axis is refused.
  const std::string inner = write_tiny("expand-inner", [&](onnx::GraphProto& g) {
    ints(g, "col", {-1, 32, 1});
    ints(g, "to", {1, 32, 4});
    add_node(g, "Reshape", "/col", "flat", "c").add_input("col");
    add_node(g, "Expand", "/grow", "c", "y").add_input("to");
  });
  const std::string e = model_error(inner);
  EXPECT_NE(e.find("node '/grow' (Expand): expands a tensor of the graph from [1, 32, 1] to [1, 32, 4]"), std::string::npos) << e;
}

// Hugging Face models as users build them from a config and call them,
// model(input_ids=x) without an attention mask (tests/golden/
// make_hf_golden.py; the files are kept in the repository, as transformers
// is no test dependency): BertForSequenceClassification,
// DistilBertForSequenceClassification and GPT2LMHeadModel. Each attention
// is memfit's fused op (the all-ones mask's (1 - m) * min folds to no
// mask, DistilBERT's expand_as(scores) to the scores' shape, GPT-2's
// causal bias buffer to the causal flag), and step 0 and 5 SGD steps
// match PyTorch with the recurrent models' tolerances.
namespace {
void check_hf(const std::string& name, bool lm, size_t params) {
  constexpr int64_t kVocab = 64, kClasses = 3, kT = 12;
  const std::string dir = std::string(MEMFIT_TEST_DATA) + "/golden/";
  io::SafetensorsFile f = io::SafetensorsFile::load(dir + name + ".safetensors");
  train::StepSpec spec;
  spec.model = dir + name + ".onnx";
  spec.batch = 4;
  spec.data = {{"tokens", DType::i32, {kT}, 0.0, kVocab},
               lm ? TensorSpec{"targets", DType::i32, {kT}, -1.0, kVocab} : TensorSpec{"labels", DType::i32, {}, -1.0, kClasses}};
  spec.classes = lm ? kVocab : kClasses;
  auto sg = plain_sgd_graph(spec);
  const Graph& g = sg->g;
  std::map<std::string, int> ops = forward_ops(g);
  EXPECT_EQ(ops["attention"], 2) << "each layer's attention is one fused op";
  EXPECT_EQ(ops["softmax"], 0) << "a softmax outside the fused attention";
  EXPECT_EQ(g.trainable_params().size(), params);
  EXPECT_EQ(expect_golden_steps(*sg, f, 4 * kT), static_cast<int>(params));
}
}  // namespace

// BERT: word, position and token-type tables (types all 0: row 0,
// broadcast), post-LN layers, the pooler's Tanh, the classifier: 5 + 16 per
// layer + 4 parameters.
TEST(OnnxHuggingFace, BertMatchesPyTorch) { check_hf("hf_bert", false, 5 + 2 * 16 + 4); }
// DistilBERT: q / sqrt(d) before q kT, masked_fill(mask, min) over
// mask.expand_as(scores); 4 + 16 per layer + pre_classifier and classifier.
TEST(OnnxHuggingFace, DistilBertMatchesPyTorch) { check_hf("hf_distilbert", false, 4 + 2 * 16 + 4); }
// GPT-2: Conv1D layers as Gemm on [in, out] weights, the packed c_attn
// split into heads, the scores divided by a computed full([], d ** 0.5),
// the causal bias buffer as Where, the head tied to wte (one parameter):
// wte, wpe, ln_f and 12 per block.
TEST(OnnxHuggingFace, Gpt2MatchesPyTorch) { check_hf("hf_gpt2", true, 4 + 2 * 12); }

// torchvision's stochastic depth as torch 2.x exports it (tests/golden/
// make_stochastic_depth.py: conv, StochasticDepth(0.2, "row"), fc): the
// noise is memfit's dropout of ones [N, 1, 1, 1] with p 0.2, so in training
// each sample's logits are either the fc bias alone (dropped) or the
// evaluation logits with the conv's output scaled by 1 / 0.8 (kept), and a
// batch of 64 has both; in evaluation there is no dropout at all.
// Dropout an inference export left out (torch writes no Dropout node for a
// module in eval mode) is put back where the user says: on the input of a
// layer named by its parameters, or on its output with after:, in training
// only; a spec that names no layer, an embedding's token ids, or a place the
// file already drops is refused before anything is built.
// A run reads its imported file once (train::RunContext, no process-wide
// cache): every resolve of the run shares that read and its one copy of the
// weights; letting them go frees them, a graph of the released model is
// refused, and the next resolve reads the file again. Another run's context
// reads its own.
TEST(Onnx, RunContextReadsTheFileOnceAndLetsItsWeightsGo) {
  const std::string path = write_tiny("context_mlp", [&](onnx::GraphProto& g) {
    onnx::TensorProto& t = *g.add_initializer();
    t.set_name("fc.weight");
    t.set_data_type(onnx::TensorProto::FLOAT);
    t.add_dims(3);
    t.add_dims(32);
    for (int k = 0; k < 3 * 32; ++k) t.add_float_data(0.01f);
    float_initializer(g, "fc.bias", {0.1f, 0.2f, 0.3f});
    int_attr(add_node(g, "Gemm", "/fc/Gemm", "flat", "logits"), "transB", 1);
    g.mutable_node(g.node_size() - 1)->add_input("fc.weight");
    g.mutable_node(g.node_size() - 1)->add_input("fc.bias");
  });
  auto build = [](const models::Model& m) {
    Graph g;
    Builder b(g, true);
    models::Inputs in;
    in.values["image"] = g.input("image", {3, 1, 4, 4});
    m.build(b, in, 3);
  };
  train::RunContext ctx, other;
  const auto m = ctx.model(path, {});
  EXPECT_EQ(ctx.model(path, {}).get(), m.get()) << "one read for the run";
  EXPECT_NE(other.model(path, {}).get(), m.get()) << "another run reads its own";
  // write_tiny's convolution and this fc: their float tensors of 2 or more numbers.
  const size_t held = ctx.import_bytes();
  EXPECT_GE(held, (3 * 32 + 3) * sizeof(float));
  EXPECT_NO_THROW(build(*m));
  ctx.release_import();
  EXPECT_EQ(ctx.import_bytes(), 0u);
  EXPECT_EQ(m->import_bytes(), 0u);
  EXPECT_THROW(build(*m), models::ModelFileError);
  const auto again = ctx.model(path, {});
  EXPECT_NE(again.get(), m.get());
  EXPECT_EQ(ctx.import_bytes(), held);
  EXPECT_NO_THROW(build(*again));
  EXPECT_NE(ctx.model(path, {{"fc=0.5"}}).get(), again.get()) << "other options, another read";
  // A zoo model holds no imported weights.
  EXPECT_EQ(ctx.model("convnet", {})->import_bytes, nullptr);
  EXPECT_EQ(ctx.import_bytes(), 0u);
}

TEST(Onnx, DropoutRestoredWhereTheUserSays) {
  auto fc = [](onnx::GraphProto& g, const std::string& in) {
    std::vector<float> w(3 * 32, 0.01f);
    onnx::TensorProto& t = *g.add_initializer();
    t.set_name("fc.weight");
    t.set_data_type(onnx::TensorProto::FLOAT);
    t.add_dims(3);
    t.add_dims(32);
    for (float x : w) t.add_float_data(x);
    float_initializer(g, "fc.bias", {0.1f, 0.2f, 0.3f});
    int_attr(add_node(g, "Gemm", "/fc/Gemm", in, "logits"), "transB", 1);
    g.mutable_node(g.node_size() - 1)->add_input("fc.weight");
    g.mutable_node(g.node_size() - 1)->add_input("fc.bias");
  };
  const std::string path = write_tiny("eval_mlp", [&](onnx::GraphProto& g) { fc(g, "flat"); });
  // The dropouts of the model built with these specs: (p, the shape it drops, what reads it).
  auto dropouts = [&](const std::vector<std::string>& specs, bool training) {
    Graph g;
    Builder b(g, training);
    models::Inputs in;
    in.values["image"] = g.input("image", {3, 1, 4, 4});
    models::resolve(path, {specs}).build(b, in, 3);
    std::vector<std::tuple<double, Shape, std::string>> r;
    for (const Node& n : g.nodes()) {
      if (n.op != "dropout") continue;
      std::string reader;
      for (const Node& m : g.nodes())
        for (ValueId v : m.inputs)
          if (v == n.outputs[0]) reader = m.op;
      r.emplace_back(n.attrs.f("p"), g.value(n.inputs[0]).shape, reader);
    }
    return r;
  };
  EXPECT_TRUE(dropouts({}, true).empty());
  using D = std::tuple<double, Shape, std::string>;
  // Before fc: the flattened features, read by the linear layer.
  EXPECT_EQ(dropouts({"fc=0.5"}, true), (std::vector<D>{{0.5, Shape{3, 32}, "linear"}}));
  EXPECT_EQ(dropouts({"before:fc=0.5"}, true), (std::vector<D>{{0.5, Shape{3, 32}, "linear"}}));
  // After conv: the convolution's output (its bias-less node), before the Flatten.
  const auto after = dropouts({"after:conv=0.25"}, true);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_NEAR(std::get<0>(after[0]), 0.25, 1e-7);
  EXPECT_EQ(std::get<1>(after[0]), (Shape{3, 2, 4, 4}));
  EXPECT_TRUE(dropouts({"fc=0.5"}, false).empty()) << "no dropout in evaluation";
  EXPECT_EQ(dropouts({"*=0.1"}, true).size(), 2u) << "a glob names both layers";

  auto error = [&](const std::string& p, const std::vector<std::string>& specs) {
    try {
      models::resolve(p, {specs});
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(error(path, {"fc.1=0.5"}).find("'fc.1' names no layer of the model (layers by their parameters' names: conv, fc)"),
            std::string::npos) << error(path, {"fc.1=0.5"});
  EXPECT_NE(error(path, {"fc=0.5", "before:fc=0.2"}).find("gets dropout twice"), std::string::npos);
  EXPECT_NE(error("convnet", {"fc=0.5"}).find("is neither"), std::string::npos);
  // A bare probability is a zoo GPT's, not the file's.
  EXPECT_NE(error(path, {"0.5"}).find("an ONNX file takes dropout put back as LAYER=P"), std::string::npos)
      << error(path, {"0.5"});
  EXPECT_EQ(models::dropout_spec_error("fc=0.5"), "");
  for (const std::string bad : {"fc", "fc=", "=0.5", "fc=1", "fc=0", "fc=-0.1", "fc=0.5x", "after:fc"})
    EXPECT_NE(models::dropout_spec_error(bad), "") << bad;

  // The command: a malformed spec is a usage error, one that names no layer a bad model file.
  const auto usage = run_memfit("plan --model " + path + " --dropout fc=2");
  EXPECT_EQ(usage.code, 2) << usage.out;
  EXPECT_NE(usage.out.find("--dropout: the probability in 'fc=2' must be a number above 0 and below 1"), std::string::npos)
      << usage.out;
  const auto unknown = run_memfit("plan --model " + path + " --dropout fc.1=0.5");
  EXPECT_EQ(unknown.code, 1) << unknown.out;
  EXPECT_NE(unknown.out.find("'fc.1' names no layer"), std::string::npos) << unknown.out;

  // A file exported in training mode already drops there.
  const std::string dropping = write_tiny("train_mlp", [&](onnx::GraphProto& g) {
    float_initializer(g, "ratio", {0.5f}, true);
    onnx::TensorProto& t = *g.add_initializer();
    t.set_name("mode");
    t.set_data_type(onnx::TensorProto::BOOL);
    t.add_int32_data(1);
    add_node(g, "Dropout", "/drop/Dropout", "flat", "dropped").add_input("ratio");
    g.mutable_node(g.node_size() - 1)->add_input("mode");
    fc(g, "dropped");
  });
  EXPECT_NE(error(dropping, {"fc=0.5"}).find("the file already has dropout on the input of 'fc' (node '/drop/Dropout')"),
            std::string::npos) << error(dropping, {"fc=0.5"});

  // An embedding's input is token ids.
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(14);
  onnx::GraphProto& g = *m.mutable_graph();
  onnx::ValueInfoProto& in = *g.add_input();
  in.set_name("ids");
  auto* tt = in.mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::INT64);
  tt->mutable_shape()->add_dim()->set_dim_param("N");
  tt->mutable_shape()->add_dim()->set_dim_value(4);
  float_initializer(g, "emb.weight", std::vector<float>(10 * 4, 0.5f));
  g.mutable_initializer(0)->clear_dims();
  g.mutable_initializer(0)->add_dims(10);
  g.mutable_initializer(0)->add_dims(4);
  add_node(g, "Gather", "/emb/Gather", "emb.weight", "e").add_input("ids");
  g.add_output()->set_name("e");
  const std::string tokens = memfit::testing::temp_dir("onnx-emb") + "/emb.onnx";
  {
    std::ofstream f(tokens, std::ios::binary);
    ASSERT_TRUE(m.SerializeToOstream(&f));
  }
  EXPECT_NE(error(tokens, {"emb=0.1"}).find("is token ids"), std::string::npos) << error(tokens, {"emb=0.1"});

}

TEST(Onnx, StochasticDepthDropsWholeSamples) {
  const std::string path = std::string(MEMFIT_TEST_DATA) + "/golden/stochastic_depth.onnx";
  const models::Model mod = models::resolve(path);
  constexpr int64_t N = 64, K = 5;
  const std::vector<float> image = memfit::testing::random_floats(N * 3 * 64, 4, -1.0f, 1.0f);
  auto logits = [&](bool training, int* dropouts) {
    Graph g;
    Builder b(g, training);
    models::Inputs in;
    in.values["image"] = g.input("image", {N, 3, 8, 8});
    const ValueId y = mod.build(b, in, K);
    g.value(y).is_output = true;
    *dropouts = 0;
    for (const Node& n : g.nodes())
      if (n.op == "dropout") {
        ++*dropouts;
        EXPECT_EQ(g.value(n.inputs[0]).shape, (Shape{N, 1, 1, 1}));
        EXPECT_NEAR(n.attrs.f("p"), 0.2, 1e-7);  // 1 - the file's float 0.8
      }
    ExecConfig cfg;
    cfg.backend = Backend::Reference64;
    Executor ex(g, cfg);
    ex.init_params(3);
    ex.write_f32(in.values["image"], image.data());
    kernels::StepContext ctx;
    ctx.seed = 11;
    ex.run(ctx);
    std::vector<float> out(static_cast<size_t>(N * K));
    ex.read_f32(y, out.data());
    return out;
  };
  int train_drop = 0, eval_drop = 0;
  const std::vector<float> t = logits(true, &train_drop), e = logits(false, &eval_drop);
  EXPECT_EQ(train_drop, 1);
  EXPECT_EQ(eval_drop, 0);
  // A dropped sample's logits are the fc bias b whatever its image, so b is
  // the row that several samples share; a kept one's are b + (e - b) / 0.8.
  int kept = 0, dropped = 0;
  std::vector<float> bias;
  std::map<std::vector<float>, int> rows;
  for (int64_t n = 0; n < N; ++n) ++rows[std::vector<float>(t.begin() + n * K, t.begin() + (n + 1) * K)];
  for (const auto& [row, count] : rows)
    if (count > 1) bias = row;
  ASSERT_EQ(bias.size(), size_t(K)) << "no two samples share their logits: none was dropped";
  for (int64_t n = 0; n < N; ++n) {
    bool is_bias = true, is_kept = true;
    for (int64_t k = 0; k < K; ++k) {
      const double tv = t[size_t(n * K + k)], ev = e[size_t(n * K + k)], bv = bias[size_t(k)];
      is_bias = is_bias && tv == bv;
      is_kept = is_kept && std::abs(tv - (bv + (ev - bv) / 0.8)) <= 1e-5 * (1 + std::abs(tv));
    }
    EXPECT_TRUE(is_bias || is_kept) << "sample " << n;
    dropped += is_bias;
    kept += is_kept && !is_bias;
  }
  EXPECT_EQ(kept + dropped, N);
  // p = 0.2 over 64 samples: about 13 dropped; none, or over half, has
  // probability below 1e-6.
  EXPECT_GT(dropped, 0);
  EXPECT_GT(kept, 32);
}

// A CNN as torch's dynamo exporter writes it (tests/golden/
// make_dynamo_golden.py, the package's exporter="dynamo"; the files are kept
// in the repository as Debian's torch has no dynamo exporter): batch norm in
// inference form with the module's momentum, a convolution whose bias is a
// computed zero (Expand(CastLike(0, x), [C])), torch.chunk as
// SplitToSequence and SequenceAt, GELU as x * (0.5 * (1 + erf(x / sqrt 2))),
// stochastic depth and dropout at p = 0, Hardswish, adaptive average
// pooling and a LayerNorm2d on its [N, C, 1, 1] output, Reshape with
// allowzero=1, the batch axis read through Shape. Step 0 and 5 SGD steps
// match PyTorch with the tolerances of expect_golden_steps: batch norm
// trains on the batch's statistics, as the module in training mode does.
TEST(OnnxDynamo, CnnMatchesPyTorch) {
  const std::string dir = std::string(MEMFIT_TEST_DATA) + "/golden/";
  io::SafetensorsFile f = io::SafetensorsFile::load(dir + "dynamo_cnn.safetensors");
  train::StepSpec spec;
  spec.model = dir + "dynamo_cnn.onnx";
  spec.batch = 4;
  spec.height = spec.width = 8;
  auto sg = plain_sgd_graph(spec);
  const Graph& g = sg->g;
  std::map<std::string, int> ops = forward_ops(g);
  EXPECT_EQ(ops["batch_norm"], 1);
  EXPECT_EQ(ops["conv2d"], 2);
  EXPECT_EQ(ops["dropout"], 0) << "a dropout at p = 0 is no node";
  EXPECT_EQ(ops["gelu"], 1) << "the Erf GELU is one op";
  EXPECT_EQ(ops["layer_norm"], 1);
  // conv1 (no bias), bn1's weight and bias, conv2, norm, fc: weight and
  // bias each.
  const size_t params = 1 + 2 + 2 + 2 + 2;
  EXPECT_EQ(g.trainable_params().size(), params);
  EXPECT_EQ(expect_golden_steps(*sg, f, 4 * 1 * 8 * 8), static_cast<int>(params));
}

namespace {
// tests/golden/<name>_torchscript.onnx and <name>_dynamo.onnx, one module
// exported by each of torch's exporters, against PyTorch's step 0 and 5
// SGD steps in <name>.safetensors (expect_golden_steps) on 4 RGB images of
// size x size, each graph with `params` parameters and the forward ops
// counted in `ops`.
void check_both_exporters(const std::string& name, int64_t size, size_t params, const std::map<std::string, int>& ops) {
  const std::string dir = std::string(MEMFIT_TEST_DATA) + "/golden/";
  io::SafetensorsFile f = io::SafetensorsFile::load(dir + name + ".safetensors");
  for (const char* exporter : {"torchscript", "dynamo"}) {
    SCOPED_TRACE(exporter);
    train::StepSpec spec;
    spec.model = dir + name + "_" + exporter + ".onnx";
    spec.batch = 4;
    spec.channels = 3;
    spec.height = spec.width = size;
    auto sg = plain_sgd_graph(spec);
    std::map<std::string, int> found = forward_ops(sg->g);
    for (const auto& [op, count] : ops) EXPECT_EQ(found[op], count) << op;
    EXPECT_EQ(sg->g.trainable_params().size(), params);
    EXPECT_EQ(expect_golden_steps(*sg, f, static_cast<size_t>(4 * 3 * size * size)), static_cast<int>(params));
  }
}
}  // namespace

// torchvision's VisionTransformer (16 x 16 images, patches of 8, 2 layers
// of 32 features, 2 heads): the class token expanded over the batch
// (expand_leading) and concatenated before the patches, the position table
// added, nn.MultiheadAttention's packed projection unflattened into q, k
// and v (an empty piece of a shape where the unflattened axis is the
// last), the Erf GELU.
TEST(OnnxDynamo, VisionTransformerMatchesPyTorchFromBothExporters) {
  // class token, position table, patch conv (2), per layer: 2 norms (4),
  // packed in-projection (2), out-projection (2), MLP (4); final norm (2),
  // head (2).
  check_both_exporters("vit", 16, 1 + 1 + 2 + 2 * (4 + 2 + 2 + 4) + 2 + 2, {{"expand_leading", 1}, {"gelu", 2}});
}

// torchvision's SwinTransformer (32 x 32 images, patches of 4, two stages
// of two blocks, windows of 4, the second block of each shifted): the
// relative position bias table read by its index buffer (gather_rows) and
// added to the scores (so no fused attention), the shifted windows' mask
// folded from its slice assignments into a constant buffer added to the
// scores, torch.roll, the patch merging's strided slices, the index
// grid's flip (a constant slice with step -1, TorchScript's export).
TEST(OnnxDynamo, SwinTransformerMatchesPyTorchFromBothExporters) {
  // patch conv (2) and norm (2); per block: 2 norms (4), qkv (2), proj (2),
  // bias table (1), MLP (4); patch merging: norm (2), reduction (1); final
  // norm (2), head (2).
  check_both_exporters("swin", 32, 4 + 4 * (4 + 2 + 2 + 1 + 4) + 3 + 2 + 2, {{"gather_rows", 4}, {"attention", 0}});
  // The mask is a constant of the graph, not a weight: the saved weights
  // are the module's (with its batch-norm-free state_dict: parameters
  // only), and the mask is not among them.
  train::StepSpec spec;
  spec.model = std::string(MEMFIT_TEST_DATA) + "/golden/swin_dynamo.onnx";
  spec.batch = 4;
  spec.channels = 3;
  spec.height = spec.width = 32;
  auto sg = train::build_step_graph(spec);
  int constants = 0;
  for (size_t v = 0; v < sg->g.num_values(); ++v) constants += sg->g.value(static_cast<ValueId>(v)).constant;
  // Stage 1's shifted block (8 x 8 patches); stage 2's windows cover its
  // 4 x 4 whole, where torchvision shifts nothing.
  EXPECT_EQ(constants, 1) << "one shifted-window mask";
  Executor ex(sg->g, ExecConfig{});
  ex.init_params(1);
  const std::string dir = memfit::testing::temp_dir("onnx-swin-save");
  train::save_checkpoint(dir, ex, train::TrainState{});
  const io::SafetensorsFile saved = io::SafetensorsFile::load(dir + "/model.safetensors");
  EXPECT_EQ(saved.names().size(), sg->g.trainable_params().size());
  for (const std::string& name : saved.names()) EXPECT_EQ(name.find("constant:"), std::string::npos) << name;
}

// torchvision's SwinTransformer with its V2 blocks, as small as the V1
// fixture (tests/golden/make_dynamo_golden.py swin_v2): cosine attention
// (F.normalize of q and k: ReduceL2 as sqrt of a sum of squares, the Clip
// at eps, its Expand read by the Div's broadcast), the learned logit scale
// (Clip at log 100, Exp), the continuous position bias (a two-layer MLP
// over relative_coords_table, a float buffer the package lists as one, so
// a constant and no parameter; 16 * sigmoid), the key bias zeroed on the
// qkv bias parameter (ScatterND into it: a product with a constant mask,
// whose zeroed part gets no gradient), post-norm blocks.
TEST(OnnxDynamo, SwinV2MatchesPyTorchFromBothExporters) {
  // patch conv (2) and norm (2); per block: 2 norms (4), qkv (2), proj (2),
  // logit scale (1), position MLP (3), MLP (4); patch merging: norm (2),
  // reduction (1); final norm (2), head (2).
  check_both_exporters("swin_v2", 32, 4 + 4 * (4 + 2 + 2 + 1 + 3 + 4) + 3 + 2 + 2, {{"attention", 0}});
  train::StepSpec spec;
  spec.model = std::string(MEMFIT_TEST_DATA) + "/golden/swin_v2_torchscript.onnx";
  spec.batch = 4;
  spec.channels = 3;
  spec.height = spec.width = 32;
  auto sg = train::build_step_graph(spec);
  std::map<std::string, int> kinds;
  for (const Node& n : sg->g.nodes())
    if (n.op == "activation" && n.phase == Phase::Forward) ++kinds[n.attrs.s("kind")];
  EXPECT_EQ(kinds["sqrt"], 8) << "q's and k's norms in 4 blocks";
  EXPECT_EQ(kinds["exp"], 4) << "a logit scale per block";
  for (ValueId p : sg->g.trainable_params())
    EXPECT_EQ(sg->g.value(p).name.find("relative_coords_table"), std::string::npos) << "a buffer became a parameter";
}

// The same module with stochastic depth p = 0.2 and dropout p = 0.25: one
// dropout of ones [N, 1, 1, 1] with p 0.2 (1 - the noise's CastLike'd 0.8)
// for the residual branch, one of p 0.25 on the pooled features; conv1 has
// no bias parameter (its computed zero bias is no weight).
TEST(OnnxDynamo, DropoutAndStochasticDepthImportInTrainingForm) {
  const std::string path = std::string(MEMFIT_TEST_DATA) + "/golden/dynamo_cnn_dropout.onnx";
  const models::Model mod = models::resolve(path);
  constexpr int64_t N = 4;
  Graph g;
  Builder b(g, true);
  models::Inputs in;
  in.values["image"] = g.input("image", {N, 1, 8, 8});
  const ValueId y = mod.build(b, in, 10);
  EXPECT_EQ(g.value(y).shape, (Shape{N, 10}));
  int depth = 0, drop = 0, bn = 0;
  for (const Node& n : g.nodes()) {
    if (n.op == "batch_norm") ++bn;
    if (n.op == "conv2d" && g.value(n.inputs[1]).shape == Shape{8, 1, 3, 3}) {
      EXPECT_EQ(n.inputs.size(), 2u) << "conv1's computed zero bias became an input";
    }
    if (n.op != "dropout") continue;
    if (g.value(n.inputs[0]).shape == Shape{N, 1, 1, 1}) {
      ++depth;
      EXPECT_NEAR(n.attrs.f("p"), 0.2, 1e-7);
    } else {
      ++drop;
      EXPECT_NEAR(n.attrs.f("p"), 0.25, 1e-7);
    }
  }
  EXPECT_EQ(bn, 1);
  EXPECT_EQ(depth, 1);
  EXPECT_EQ(drop, 1);
  EXPECT_EQ(g.params().size(), 9u);
}

// Shape and mask arithmetic folds on constants, floats too (Hugging Face's
// (1 - mask) * min): Equal, Where and Reshape of constants, a
// ConstantOfShape, a Sub with broadcasting and a Sqrt give one scalar factor. A
// float initializer of several numbers is a weight, never folded: its Mul
// by a number is a scale of a parameter.
TEST(Onnx, ConstantArithmeticFolds) {
  auto ints = int_initializer;
  auto floats = float_initializer;
  const std::string path = write_tiny("const-arith", [&](onnx::GraphProto& g) {
    ints(g, "v", {-1});
    ints(g, "minus1", {-1});
    ints(g, "one", {1});
    ints(g, "flat_shape", {-1});
    floats(g, "half", {0.5f}, true);
    floats(g, "w", std::vector<float>(32, 0.25f), false);
    floats(g, "two", {2.0f}, true);
    add_node(g, "Equal", "/eq", "v", "eq").add_input("minus1");             // [1]
    add_node(g, "Where", "/where", "eq", "wh").add_input("one");            // Where(eq, 1, v) = [1]
    g.mutable_node(g.node_size() - 1)->add_input("v");
    add_node(g, "Reshape", "/rs", "wh", "rs").add_input("flat_shape");      // [1]
    auto& c = add_node(g, "ConstantOfShape", "/cos", "rs", "threes");       // [1] of 3.0
    auto& a = *c.add_attribute();
    a.set_name("value");
    a.set_type(onnx::AttributeProto::TENSOR);
    a.mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
    a.mutable_t()->add_dims(1);
    a.mutable_t()->add_float_data(3.0f);
    add_node(g, "Sub", "/sub", "threes", "k0").add_input("half");           // [1] of 2.5
    add_node(g, "Mul", "/sq", "k0", "k00").add_input("k0");                 // 6.25
    add_node(g, "Sqrt", "/sqrt", "k00", "k");                               // 2.5
    add_node(g, "Mul", "/mul", "flat", "y").add_input("k");                 // flat * 2.5
    add_node(g, "Mul", "/wmul", "w", "w2").add_input("two");                // a parameter, scaled
    add_node(g, "Add", "/add", "y", "out").add_input("w2");
  });
  Graph g;
  build_tiny(g, path, 32);
  std::vector<double> scales;
  for (const Node& n : g.nodes())
    if (n.op == "scale") scales.push_back(n.attrs.f("alpha"));
  EXPECT_EQ(scales, (std::vector<double>{2.5, 2.0}));
  bool weight = false;
  for (size_t i = 0; i < g.num_values(); ++i) weight = weight || (g.value(static_cast<ValueId>(i)).cls == VClass::Param && g.value(static_cast<ValueId>(i)).name == "w");
  EXPECT_TRUE(weight) << "the float initializer 'w' must stay a parameter";
  // Sqrt and Exp of a tensor of the graph are the activations.
  for (const char* op : {"Sqrt", "Exp"}) {
    const std::string graph_op = write_tiny(std::string(op) + "-graph", [&](onnx::GraphProto& g) { add_node(g, op, "/s", "flat", "y"); });
    Graph g2;
    build_tiny(g2, graph_op, 32);
    int found = 0;
    for (const Node& n : g2.nodes())
      found += n.op == "activation" && n.attrs.s("kind") == (std::string(op) == "Sqrt" ? "sqrt" : "exp");
    EXPECT_EQ(found, 1) << op;
  }
  // Where on a tensor of the graph outside an attention is refused by name.
  const std::string graph_where = write_tiny("where-graph", [&](onnx::GraphProto& g) {
    ints(g, "one", {1});
    add_node(g, "Where", "/w", "one", "y").add_input("flat");
    g.mutable_node(g.node_size() - 1)->add_input("flat");
  });
  const std::string e = model_error(graph_where);
  EXPECT_NE(e.find("node '/w' (Where): input 'flat' is a tensor of the graph"), std::string::npos) << e;
}

// Mod of constants folds with ONNX's two rules (fmod=0: the divisor's
// sign, as Python's %; fmod=1: the dividend's, as C's %), as a shifted-window
// attention's padding (w - W % w) % w is computed: (-7) mod 3 is 2 and -1
// under the two rules, 7 mod -3 is -2 and 1; the result scales the input.
TEST(Onnx, ModFoldsWithBothSignRules) {
  auto ints = int_initializer;
  auto factor = [&](int64_t x, int64_t y, int64_t fmod) {
    return folded_k(write_tiny("mod-" + std::to_string(x) + "-" + std::to_string(y) + "-" + std::to_string(fmod),
                               [&](onnx::GraphProto& g) {
                                 ints(g, "x", {x});
                                 ints(g, "y", {y});
                                 auto& m = add_node(g, "Mod", "/mod", "x", "r");
                                 m.add_input("y");
                                 int_attr(m, "fmod", fmod);
                                 scale_input_by(g, "r");
                               }));
  };
  EXPECT_EQ(factor(-7, 3, 0), 2.0);
  EXPECT_EQ(factor(-7, 3, 1), -1.0);
  EXPECT_EQ(factor(7, -3, 0), -2.0);
  EXPECT_EQ(factor(7, -3, 1), 1.0);
  EXPECT_EQ(factor(6, 3, 0), 0.0);
  // A remainder of a tensor of the graph, and one by zero, are refused by name.
  const std::string graph_mod = write_tiny("mod-graph", [&](onnx::GraphProto& g) {
    ints(g, "three", {3});
    add_node(g, "Mod", "/m", "flat", "out").add_input("three");
  });
  EXPECT_NE(model_error(graph_mod).find("node '/m' (Mod): takes a remainder of a tensor of the graph"), std::string::npos)
      << model_error(graph_mod);
  const std::string by_zero = write_tiny("mod-zero", [&](onnx::GraphProto& g) {
    ints(g, "three", {3});
    ints(g, "zero", {0});
    add_node(g, "Mod", "/m", "three", "r").add_input("zero");
    add_node(g, "Mul", "/mul", "flat", "out").add_input("r");
  });
  EXPECT_NE(model_error(by_zero).find("node '/m' (Mod): divides by zero"), std::string::npos) << model_error(by_zero);
}

// SplitToSequence and SequenceAt (torch.chunk and split as the dynamo
// exporter writes them): the input's [N, 32] cut into pieces of 12 is 12,
// 12 and 8 wide, and position -1 is the last, the slice from 24; a list of
// sizes and none (pieces of 1, keepdims=0 without the axis) cut alike.
// A position outside the sequence, sizes that do not add up, and a
// sequence read by any other op are refused by name.
TEST(Onnx, SplitToSequencePiecesAreSlices) {
  auto split = [&](const std::string& name, const std::vector<int64_t>& sizes, bool scalar, int64_t at, int64_t keepdims) {
    return write_tiny("seq-" + name, [&](onnx::GraphProto& g) {
      auto& n = add_node(g, "SplitToSequence", "/split", "flat", "seq");
      if (!sizes.empty()) {
        onnx::TensorProto& t = *g.add_initializer();
        t.set_name("sizes");
        t.set_data_type(onnx::TensorProto::INT64);
        if (!scalar) t.add_dims(static_cast<int64_t>(sizes.size()));
        for (int64_t v : sizes) t.add_int64_data(v);
        n.add_input("sizes");
      }
      int_attr(n, "axis", 1);
      if (keepdims >= 0) int_attr(n, "keepdims", keepdims);
      int_initializer(g, "at", {at});
      add_node(g, "SequenceAt", "/at", "seq", "out").add_input("at");
    });
  };
  auto piece = [&](const std::string& path, int64_t classes) {
    Graph g;
    const Node& n = g.node(g.value(build_tiny(g, path, classes)).producer);
    EXPECT_EQ(n.op, "slice");
    return std::make_pair(n.attrs.i("start"), n.attrs.i("len"));
  };
  using Piece = std::pair<int64_t, int64_t>;
  EXPECT_EQ(piece(split("chunks", {12}, true, -1, -1), 8), Piece(24, 8));
  EXPECT_EQ(piece(split("sizes", {20, 5, 7}, false, 1, -1), 5), Piece(20, 5));
  EXPECT_EQ(piece(split("ones", {}, false, 3, 1), 1), Piece(3, 1));
  // Without the axis (keepdims=0) the piece is [N]: no logits.
  try {
    Graph squeezed;
    build_tiny(squeezed, split("squeezed", {}, false, 3, 0), 1);
    ADD_FAILURE() << "a piece without its axis built as logits";
  } catch (const GraphError& e) {
    EXPECT_NE(std::string(e.what()).find("is [3], not the logits [N, classes]"), std::string::npos) << e.what();
  }
  EXPECT_NE(model_error(split("outside", {12}, true, 3, -1)).find("node '/at' (SequenceAt): position 3"), std::string::npos)
      << model_error(split("outside", {12}, true, 3, -1));
  EXPECT_NE(model_error(split("short", {20, 5}, false, 0, -1)).find("node '/split' (SplitToSequence): split sizes [20, 5]"),
            std::string::npos)
      << model_error(split("short", {20, 5}, false, 0, -1));
  const std::string other = write_tiny("seq-other", [&](onnx::GraphProto& g) {
    add_node(g, "SplitToSequence", "/split", "flat", "seq");
    add_node(g, "Relu", "/relu", "seq", "out");
  });
  EXPECT_NE(model_error(other).find("node '/relu' (Relu)"), std::string::npos) << model_error(other);
}

// Max and Min of constants fold (a shifted window's padding, max(0, w - H)),
// with broadcasting, and so does Not; of a tensor of the graph they are
// refused by name.
// ScatterND of constants (a mask built by slice assignment) writes the
// named slices: into zeros [2, 3], row 1 set to [4, 5, 6] and element
// [0, 2] to 7, read back at [0, 2] and [1, 1].
TEST(Onnx, MaxMinNotAndScatterNdOfConstantsFold) {
  auto ints = int_initializer;
  auto maxmin = [&](const char* op, int64_t x, int64_t y) {
    return folded_k(write_tiny(std::string("maxmin-") + op + std::to_string(x) + std::to_string(y), [&](onnx::GraphProto& g) {
      ints(g, "x", {x});
      ints(g, "y", {y, y});
      ints(g, "zero", {0});
      ints(g, "one", {1});
      add_node(g, op, "/m", "x", "two").add_input("y");
      auto& sl = add_node(g, "Slice", "/first", "two", "k");
      for (const char* in : {"zero", "one", "zero"}) sl.add_input(in);
      scale_input_by(g, "k");
    }));
  };
  EXPECT_EQ(maxmin("Max", 3, 5), 5.0);
  EXPECT_EQ(maxmin("Max", -3, -5), -3.0);
  EXPECT_EQ(maxmin("Min", 3, 5), 3.0);
  // Not of a comparison: Not(3 == 5) is 1, Not(5 == 5) is 0.
  auto not_equal = [&](int64_t x) {
    return folded_k(write_tiny("not-" + std::to_string(x), [&](onnx::GraphProto& g) {
      ints(g, "x", {x});
      ints(g, "five", {5});
      add_node(g, "Equal", "/eq", "x", "same").add_input("five");
      add_node(g, "Not", "/not", "same", "k");
      scale_input_by(g, "k");
    }));
  };
  EXPECT_EQ(not_equal(3), 1.0);
  EXPECT_EQ(not_equal(5), 0.0);
  const std::string graph_max = write_tiny("max-graph", [&](onnx::GraphProto& g) {
    float_initializer(g, "half", {0.5f}, true);
    add_node(g, "Max", "/m", "flat", "out").add_input("half");
  });
  EXPECT_NE(model_error(graph_max).find("node '/m' (Max): takes the maximum of tensors of the graph"), std::string::npos)
      << model_error(graph_max);
  auto scatter = [&](int64_t r, int64_t c) {
    return folded_k(write_tiny("scatter-" + std::to_string(r) + std::to_string(c), [&](onnx::GraphProto& g) {
      ints(g, "zeros", {0, 0, 0, 0, 0, 0});
      ints(g, "dims", {2, 3});
      ints(g, "row", {1});
      ints(g, "row_values", {4, 5, 6});
      ints(g, "at", {0, 2});
      ints(g, "at_value", {7});
      ints(g, "pick", {r * 3 + c});
      ints(g, "pick_end", {r * 3 + c + 1});
      ints(g, "zero", {0});
      ints(g, "minus_one", {-1});
      add_node(g, "Reshape", "/grid", "zeros", "grid").add_input("dims");
      ints(g, "row_shape", {1, 1});
      ints(g, "at_shape", {1, 2});
      ints(g, "values_shape", {1, 3});
      add_node(g, "Reshape", "/ri", "row", "ri").add_input("row_shape");
      add_node(g, "Reshape", "/rv", "row_values", "rv").add_input("values_shape");
      add_node(g, "Reshape", "/ai", "at", "ai").add_input("at_shape");
      auto& s1 = add_node(g, "ScatterND", "/s1", "grid", "g1");  // row 1
      for (const char* in : {"ri", "rv"}) s1.add_input(in);
      auto& s2 = add_node(g, "ScatterND", "/s2", "g1", "g2");  // [0, 2]
      for (const char* in : {"ai", "at_value"}) s2.add_input(in);
      add_node(g, "Reshape", "/flat_g", "g2", "gf").add_input("minus_one");
      auto& sl = add_node(g, "Slice", "/pick", "gf", "k");
      for (const char* in : {"pick", "pick_end", "zero"}) sl.add_input(in);
      scale_input_by(g, "k");
    }));
  };
  EXPECT_EQ(scatter(0, 2), 7.0);
  EXPECT_EQ(scatter(1, 1), 5.0);
  EXPECT_EQ(scatter(0, 0), 0.0);
}

// Constants of rank 2 fold through Transpose, Concat along an axis and
// GatherND of rows (a shifted window's mask, an index buffer given its
// last axis): [[1, 2], [3, 4]] transposed is [[1, 3], [2, 4]], with [[5, 6]]
// after it, and rows [2] and [0] of that are [[5, 6], [1, 3]], read back
// flat at 0 and 3. A weight gathered at constant positions that are not a
// run (a relative position bias read by its index buffer), by Gather or by
// GatherND, is memfit's gather_rows.
TEST(Onnx, ConstantTablesFoldAndWeightRowsAreGathered) {
  auto ints = int_initializer;
  auto pick = [&](int64_t at) {
    return folded_k(write_tiny("nd-" + std::to_string(at), [&](onnx::GraphProto& g) {
      ints(g, "flat4", {1, 2, 3, 4});
      ints(g, "two_two", {2, 2});
      ints(g, "five_six", {5, 6});
      ints(g, "one_two", {1, 2});
      ints(g, "rows", {2, 0});
      ints(g, "rows_shape", {2, 1});
      ints(g, "minus_one", {-1});
      ints(g, "at", {at});
      ints(g, "at_end", {at + 1});
      ints(g, "zero", {0});
      add_node(g, "Reshape", "/sq", "flat4", "sq").add_input("two_two");
      add_node(g, "Transpose", "/t", "sq", "t");
      add_node(g, "Reshape", "/last", "five_six", "last").add_input("one_two");
      auto& cat = add_node(g, "Concat", "/cat", "t", "cat");
      cat.add_input("last");
      int_attr(cat, "axis", 0);
      add_node(g, "Reshape", "/ri", "rows", "ri").add_input("rows_shape");
      add_node(g, "GatherND", "/nd", "cat", "got").add_input("ri");
      add_node(g, "Reshape", "/flat_got", "got", "fg").add_input("minus_one");
      auto& sl = add_node(g, "Slice", "/pick", "fg", "k");
      for (const char* in : {"at", "at_end", "zero"}) sl.add_input(in);
      scale_input_by(g, "k");
    }));
  };
  EXPECT_EQ(pick(0), 5.0);
  EXPECT_EQ(pick(1), 6.0);
  EXPECT_EQ(pick(2), 1.0);
  EXPECT_EQ(pick(3), 3.0);
  for (const char* op : {"Gather", "GatherND"}) {
    const std::string path = write_tiny(std::string("rows-") + op, [&](onnx::GraphProto& g) {
      float_initializer(g, "bias", std::vector<float>(12, 0.5f));
      ints(g, "bias_shape", {4, 3});
      ints(g, "three", {3});
      ints(g, "zero", {0});
      ints(g, "one", {1});
      onnx::TensorProto& t = *g.add_initializer();
      t.set_name("index");
      t.set_data_type(onnx::TensorProto::INT64);
      t.add_dims(3);
      if (std::string(op) == "GatherND") t.add_dims(1);
      for (int64_t v : {3, 0, -1}) t.add_int64_data(v);
      add_node(g, "Reshape", "/table", "bias", "table").add_input("bias_shape");
      add_node(g, op, "/rows", "table", "rows").add_input("index");
      auto& sl = add_node(g, "Slice", "/cols", "flat", "cols");
      for (const char* in : {"zero", "three", "one"}) sl.add_input(in);
      add_node(g, "Add", "/add", "cols", "out").add_input("rows");
    });
    Graph g;
    build_tiny(g, path, 3);
    int gathers = 0;
    for (const Node& n : g.nodes())
      if (n.op == "gather_rows") {
        ++gathers;
        EXPECT_EQ(n.attrs.ints("rows"), (Shape{3, 0, 3})) << op;
        EXPECT_EQ(g.value(n.outputs[0]).shape, (Shape{3, 3})) << op;
      }
    EXPECT_EQ(gathers, 1) << op;
  }
}

// A Pad with zeros that no average pool reads (Swin's windows padded to a
// multiple of their size) is a concat with constant zeros: the input's
// [N, 32] padded by 1 before and 2 after its features is [0, x, 0, 0] per
// row; the zeros are constant buffers, not weights. A negative pad (a
// crop) is refused by name.
TEST(Onnx, PadWithZerosIsAConcatOfZeros) {
  const std::string path = write_tiny("pad-zeros", [&](onnx::GraphProto& g) {
    int_initializer(g, "pads", {0, 1, 0, 2});
    add_node(g, "Pad", "/pad", "flat", "out").add_input("pads");
  });
  Graph g;
  const ValueId y = build_tiny(g, path, 35);
  const Node& cat = g.node(g.value(y).producer);
  ASSERT_EQ(cat.op, "concat");
  ASSERT_EQ(cat.inputs.size(), 3u);
  const ValueId x = cat.inputs[1];
  for (ValueId z : {cat.inputs[0], cat.inputs[2]}) {
    EXPECT_TRUE(g.value(z).constant);
    EXPECT_EQ(g.value(z).cls, VClass::Buffer);
  }
  g.value(x).is_output = true;
  g.value(y).is_output = true;
  ExecConfig cfg;
  cfg.backend = Backend::Reference64;
  Executor ex(g, cfg);
  ex.init_params(5);
  const std::vector<float> image = memfit::testing::random_floats(3 * 16, 2, -1.0f, 1.0f);
  ex.write_f32(g.find("image"), image.data());
  ex.run(kernels::StepContext{});
  std::vector<float> xv(3 * 32), yv(3 * 35);
  ex.read_f32(x, xv.data());
  ex.read_f32(y, yv.data());
  for (size_t r = 0; r < 3; ++r) {
    std::vector<float> want{0.0f};
    want.insert(want.end(), xv.begin() + static_cast<int64_t>(r * 32), xv.begin() + static_cast<int64_t>(r * 32 + 32));
    want.insert(want.end(), {0.0f, 0.0f});
    EXPECT_EQ(std::vector<float>(yv.begin() + static_cast<int64_t>(r * 35), yv.begin() + static_cast<int64_t>(r * 35 + 35)), want)
        << "row " << r;
  }
  const std::string crop = write_tiny("pad-crop", [&](onnx::GraphProto& g) {
    int_initializer(g, "pads", {0, -1, 0, 0});
    add_node(g, "Pad", "/pad", "flat", "out").add_input("pads");
  });
  EXPECT_NE(model_error(crop).find("node '/pad' (Pad): pads [0, -1, 0, 0]: a negative pad crops"), std::string::npos)
      << model_error(crop);
}

// GatherElements of constants folds (torch.gather of a module's buffer by
// position ids, as Hugging Face's BERT reads its token types): from data
// [[0, 1, 2], [3, 4, 5]], index [[-1]] along axis 1 is 2, [[1]] along axis 0
// is 3, and index [[1], [0]] along axis 1 takes [1, 3], whose second entry
// (a Slice) is read; the result scales the input. Out of range indices and
// a gather from the graph's tensor are refused by name.
TEST(Onnx, GatherElementsOfConstantsFolds) {
  auto gather = [&](const std::string& name, int64_t axis, const std::vector<int64_t>& index, const Shape& index_dims,
                    int64_t pick) {
    return write_tiny("gather-el-" + name, [&](onnx::GraphProto& g) {
      onnx::TensorProto& d = *g.add_initializer();
      d.set_name("data");
      d.set_data_type(onnx::TensorProto::INT64);
      d.add_dims(2);
      d.add_dims(3);
      for (int64_t v = 0; v < 6; ++v) d.add_int64_data(v);
      onnx::TensorProto& t = *g.add_initializer();
      t.set_name("index");
      t.set_data_type(onnx::TensorProto::INT64);
      for (int64_t v : index_dims) t.add_dims(v);
      for (int64_t v : index) t.add_int64_data(v);
      int_initializer(g, "pick", {pick});
      int_initializer(g, "pick_end", {pick + 1});
      int_initializer(g, "zero", {0});
      int_initializer(g, "minus_one", {-1});
      auto& n = add_node(g, "GatherElements", "/ge", "data", "got");
      n.add_input("index");
      int_attr(n, "axis", axis);
      add_node(g, "Reshape", "/flat_ids", "got", "ids").add_input("minus_one");
      auto& sl = add_node(g, "Slice", "/pick", "ids", "one");
      sl.add_input("pick");
      sl.add_input("pick_end");
      sl.add_input("zero");
      scale_input_by(g, "one");
    });
  };
  auto factor = folded_k;
  EXPECT_EQ(factor(gather("last", 1, {-1}, {1, 1}, 0)), 2.0);
  EXPECT_EQ(factor(gather("row", 0, {1}, {1, 1}, 0)), 3.0);
  EXPECT_EQ(factor(gather("column", 1, {1, 0}, {2, 1}, 1)), 3.0);
  const std::string e = model_error(gather("out-of-range", 1, {3}, {1, 1}, 0));
  EXPECT_NE(e.find("node '/ge' (GatherElements): index 3 is out of range for axis 1 of [2, 3]"), std::string::npos) << e;
  const std::string graph = write_tiny("gather-el-graph", [&](onnx::GraphProto& g) {
    int_initializer(g, "index", {0});
    add_node(g, "GatherElements", "/ge", "flat", "out").add_input("index");
  });
  EXPECT_NE(model_error(graph).find("node '/ge' (GatherElements): gathers from a tensor of the graph"), std::string::npos)
      << model_error(graph);
}

// The command trains each classifier on labelled text (4 classes of 12
// letters, told apart by one letter), and its saved weights are the
// module's state_dict: PyTorch's load_state_dict(strict=True) takes every
// tensor with its shape (export_onnx.py --check-state-dict).
TEST(OnnxRecurrent, ClassifiersTrainOnTextAndTheirWeightsLoadBack) {
  NEED_EXPORT();
  const std::string dir = memfit::testing::temp_dir("onnx-rnn-text");
  uint64_t s = 7;
  auto next = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return s >> 33;
  };
  for (const char* part : {"train", "test"}) {
    std::ofstream f(dir + "/" + std::string(part) + ".jsonl");
    for (int i = 0; i < 64; ++i) {
      const int c = static_cast<int>(next() % 4);
      std::string t;
      for (int k = 0; k < kRnnT; ++k) t += "abcdefg "[next() % 8];
      t[next() % kRnnT] = "wxyz"[c];
      f << "{\"text\": \"" << t << "\", \"label\": \"c" << c << "\"}\n";
    }
  }
  for (const char* name : {"rnn_classifier", "gru_classifier", "lstm_classifier"}) {
    SCOPED_TRACE(name);
    const std::string out = dir + "/" + name;
    auto r = run_memfit("train --model " + exported().dir + "/" + name + ".onnx --data " + dir +
                        " --batch 8 --steps 3 --threads 2 --out " + out);
    ASSERT_EQ(r.code, 0) << r.out;
    std::set<std::string> saved;
    for (const auto& n : io::SafetensorsFile::load(out + "/model.safetensors").names()) saved.insert(n);
    EXPECT_EQ(saved, (std::set<std::string>{"embedding.weight", "rnn.weight_ih_l0", "rnn.weight_hh_l0", "rnn.bias_ih_l0",
                                            "rnn.bias_hh_l0", "fc.weight", "fc.bias"}));
    auto check = run_cmd(kPython + " " + MEMFIT_TEST_DATA + "/golden/export_onnx.py --check-state-dict " + name + " " + out +
                         "/model.safetensors");
    EXPECT_EQ(check.code, 0) << check.out;
  }
}
