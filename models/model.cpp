#include "models/model.hpp"

#include <filesystem>

#include "models/bert.hpp"
#include "models/gpt.hpp"
#include "models/zoo.hpp"

namespace memfit::models {

ValueId Inputs::at(const std::string& name) const {
  auto it = values.find(name);
  if (it == values.end()) throw GraphError("the model reads an input '" + name + "' it did not declare");
  return it->second;
}

const TensorSpec& Inputs::spec(const std::string& name) const {
  auto it = specs.find(name);
  if (it == specs.end()) throw GraphError("the model reads an input '" + name + "' it did not declare");
  return it->second;
}

const char* task_name(Task t) { return t == Task::Classification ? "classification" : "language model"; }

Model image_classifier(const std::string& name, ModelBuilder fn) {
  Model m;
  m.name = name;
  m.inputs = {{"image", DType::f32, 3, "[C,H,W]"}};
  m.target = {"labels", DType::i32, 0, "[]"};
  m.task = Task::Classification;
  m.build = [fn = std::move(fn)](Builder& b, const Inputs& in, int64_t classes) { return fn(b, in.at("image"), classes); };
  return m;
}

std::vector<std::string> zoo_names() {
  std::vector<std::string> names = model_names();
  for (auto& n : gpt_names()) names.push_back(n);
  for (auto& n : bert_names()) names.push_back(n);
  for (auto& n : sequence_model_names()) names.push_back(n);
  return names;
}

}  // namespace memfit::models
