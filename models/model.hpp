// What a model reads and predicts: its signature. A model declares its
// inputs by name, type and rank (the data decides the sizes: channels and
// image size, sequence length), its target, and its task, which decides the
// loss and the evaluation metrics (compile/step_graph.hpp). The step graph
// matches them by name against the tensors the dataset yields.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "memfit/builder.hpp"
#include "memfit/tensor_spec.hpp"
#include "models/model_file.hpp"

namespace memfit::models {

// A tensor the model reads per sample: "image" f32 of rank 3 ([C, H, W]).
struct InputDecl {
  std::string name;
  DType dtype = DType::f32;
  size_t rank = 0;
  std::string axes;  // the axes' letters for messages: "[C,H,W]", "[T]", "[]"
  // Read if the data holds it (Inputs::values then has it), else left out.
  bool optional = false;
};

enum class Task : uint8_t {
  // logits [N, classes] against labels [N]: cross-entropy; accuracy.
  Classification,
  // logits [N, T, vocab] against targets [N, T] (negative: padding):
  // cross-entropy per token; perplexity.
  LanguageModel,
};
const char* task_name(Task t);

// The model's inputs: their graph values ([N, ...]) and the data's
// description of each (a token input's range is its vocabulary), by name.
struct Inputs {
  std::map<std::string, ValueId> values;
  std::map<std::string, TensorSpec> specs;
  // Throw GraphError naming the input if the model declared no such input.
  ValueId at(const std::string& name) const;
  const TensorSpec& spec(const std::string& name) const;
};

struct Model {
  std::string name;
  std::vector<InputDecl> inputs;
  InputDecl target;
  Task task = Task::Classification;
  // The longest sequence the model takes (a GPT's block_size): a language
  // model's text data is cut into windows of it unless --block-size says
  // otherwise. 0: no limit of its own.
  int64_t max_sequence = 0;
  // What the run should say about how the model was read (an imported
  // file's batch norms exported for inference, trained in training mode).
  std::vector<std::string> notes;
  // Builds the model on its inputs and returns the logits. `classes`: the
  // dataset's number of classes (a language model's vocabulary).
  std::function<ValueId(Builder&, const Inputs&, int64_t classes)> build;
  // An imported file's initial weights, held from the read until the run's
  // parameters are initialised from them (models/onnx/model.hpp). Empty for
  // a model that holds none. import_bytes: the bytes held (0 once let go);
  // release_import: lets them go (with the copies a graph's InitSpec holds,
  // which the caller drops first), after which `build` refuses.
  std::function<size_t()> import_bytes;
  std::function<void()> release_import;
};

// An image classifier from a builder of the image form (the CNN zoo, model
// files): reads "image" f32 [C,H,W], predicts "labels" i32 [].
Model image_classifier(const std::string& name, ModelBuilder fn);

// The models of other inputs than an image, by zoo name ("lstm-classifier":
// tokens i32 [T], optional lengths i32 []; models/lstm_classifier.cpp), or
// nullptr.
const Model* find_sequence_model(const std::string& name);
std::vector<std::string> sequence_model_names();

// Every zoo name: the image classifiers, the GPTs, the BERTs, the other
// sequence models.
std::vector<std::string> zoo_names();

// How a model is read, beyond its name: dropout put back into an ONNX file
// an inference export left it out of (models/onnx/model.hpp's load_onnx_model); models::resolve (compile/resolve.hpp) takes them.
struct ResolveOptions {
  std::vector<std::string> dropout;
};

}  // namespace memfit::models
