// The model a name means: the front of the step compiler. It sits above
// the zoo (models/) and the ONNX importer (models/onnx/), which know
// nothing of each other's lookup.
#pragma once

#include <string>

#include "models/model.hpp"

namespace memfit::models {

// A zoo name, a model file (model_file.hpp's resolve_model), an ONNX file
// ("*.onnx", models/onnx/model.hpp) or a folder holding a Hugging Face BERT
// config.json (models/bert.hpp), with its signature. Throws as
// resolve_model does; options that do not apply to the model (dropout for
// a model that is not an ONNX file) are a GraphError.
Model resolve(const std::string& name_or_path, const ResolveOptions& options = {});

}  // namespace memfit::models
