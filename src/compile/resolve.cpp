#include "compile/resolve.hpp"

#include <filesystem>
#include <optional>

#include "models/bert.hpp"
#include "models/gpt.hpp"
#include "models/onnx/model.hpp"
#include "models/zoo.hpp"

namespace memfit::models {

Model resolve(const std::string& name_or_path, const ResolveOptions& options) {
  // An exported PyTorch model; a missing one is reported as a missing file.
  std::optional<double> bare;  // --dropout P: a zoo GPT's probability
  for (const auto& d : options.dropout)
    if (auto p = bare_dropout(d)) {
      if (bare || options.dropout.size() > 1)
        throw GraphError("--dropout P (a bare probability) sets a zoo GPT's dropout and is given once, alone");
      bare = p;
    }
  if (is_onnx_path(name_or_path)) {
    if (bare)
      throw GraphError("--dropout " + options.dropout[0] + ": an ONNX file takes dropout put back as LAYER=P (e.g. "
                       "classifier.1=0.2); a bare probability sets a zoo GPT's dropout");
    return load_onnx_model(name_or_path, options.dropout);
  }
  if (bare && find_gpt(name_or_path)) return *find_gpt(name_or_path, bare);
  if (!options.dropout.empty())
    throw GraphError("--dropout LAYER=P puts back dropout an inference export left out of an ONNX file, and --dropout P "
                     "sets a zoo GPT's; '" + name_or_path + "' is neither (its dropout stays as it is written)");
  if (auto m = find_gpt(name_or_path)) return *m;
  if (auto m = find_bert(name_or_path)) return *m;
  if (const Model* m = find_sequence_model(name_or_path)) return *m;
  if (find_model(name_or_path) || std::filesystem::is_regular_file(name_or_path))
    return image_classifier(name_or_path, resolve_model(name_or_path));
  std::string names;
  for (const auto& n : zoo_names()) names += (names.empty() ? "" : ", ") + n;
  throw GraphError("unknown model '" + name_or_path + "': not a zoo model (" + names +
                   ") nor a model file, nor an ONNX file (.onnx), nor a folder with a BERT config.json");
}

}  // namespace memfit::models
