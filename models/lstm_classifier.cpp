// lstm-classifier: a sequence classifier over token ids, the course lesson's
// preset: embedding(vocab, 64) -> LSTM(hidden 32, 1 layer) -> the last
// hidden state (each sample's own last step when the data holds lengths) ->
// linear(classes). Parameter names as the PyTorch module's state_dict:
// embedding.weight, lstm.weight_ih_l0 (…_hh_l0, bias_ih_l0, bias_hh_l0),
// fc.weight, fc.bias. Reads tokens i32 [T] (the vocabulary from the data's
// range) and, if the data holds it, lengths i32 [] per sample.
#include <stdexcept>

#include "models/model.hpp"

namespace memfit::models {
namespace {

constexpr int64_t kEmbed = 64, kHidden = 32, kLayers = 1;

Model lstm_classifier() {
  Model m;
  m.name = "lstm-classifier";
  m.inputs = {{"tokens", DType::i32, 1, "[T]"}, {"lengths", DType::i32, 0, "[]", /*optional=*/true}};
  m.target = {"labels", DType::i32, 0, "[]"};
  m.task = Task::Classification;
  m.build = [](Builder& b, const Inputs& in, int64_t classes) {
    const int64_t vocab = in.spec("tokens").range;
    if (vocab < 1)
      throw GraphError("model 'lstm-classifier' needs the tokens' vocabulary (the data's range of 'tokens'), got " +
                       std::to_string(vocab));
    const ValueId x = to_activations(b, embedding(b, in.at("tokens"), vocab, kEmbed, {.name = "embedding"}));
    const auto it = in.values.find("lengths");
    const ValueId lengths = it == in.values.end() ? kNone : it->second;
    const LstmOut r = lstm(b, x, kHidden, {.layers = kLayers, .name = "lstm", .lengths = lengths});
    return linear(b, r.h_last.back(), classes, {.name = "fc"});
  };
  return m;
}

}  // namespace

const Model* find_sequence_model(const std::string& name) {
  static const Model classifier = lstm_classifier();
  return name == classifier.name ? &classifier : nullptr;
}

std::vector<std::string> sequence_model_names() { return {"lstm-classifier"}; }

}  // namespace memfit::models
