#include <map>

#include "models/zoo.hpp"

namespace memfit::models {
ValueId basic_block(Builder& b, ValueId x, int64_t channels, int64_t stride) {
  const int64_t in_ch = b.g.value(x).shape[1];
  ValueId y = conv2d(b, x, channels, 3, {.stride = stride, .pad = 1, .bias = false, .name = "conv1"});
  y = batch_norm(b, y, {.name = "bn1"});
  y = relu(b, y);
  y = conv2d(b, y, channels, 3, {.pad = 1, .bias = false, .name = "conv2"});
  y = batch_norm(b, y, {.name = "bn2"});
  ValueId shortcut = x;
  if (stride != 1 || in_ch != channels) {
    auto sc = b.scope("downsample");
    shortcut = conv2d(b, x, channels, 1, {.stride = stride, .bias = false, .name = "0"});
    shortcut = batch_norm(b, shortcut, {.name = "1"});
  }
  return relu(b, add(b, y, shortcut));
}

ValueId resnet18(Builder& b, ValueId x, int64_t classes) {
  x = conv2d(b, x, 64, 3, {.pad = 1, .bias = false, .name = "conv1"});
  x = batch_norm(b, x, {.name = "bn1"});
  x = relu(b, x);
  const int64_t widths[4] = {64, 128, 256, 512};
  for (int s = 0; s < 4; ++s) {
    auto layer = b.scope("layer" + std::to_string(s + 1));
    for (int i = 0; i < 2; ++i) {
      auto blk = b.scope(std::to_string(i));
      x = basic_block(b, x, widths[s], (s > 0 && i == 0) ? 2 : 1);
    }
  }
  x = global_avg_pool(b, x);
  return linear(b, x, classes, {.name = "fc"});
}

ModelFn find_model(const std::string& name) {
  static const std::map<std::string, ModelFn> zoo{{"convnet", convnet}, {"resnet18", resnet18}};
  auto it = zoo.find(name);
  return it == zoo.end() ? nullptr : it->second;
}

std::vector<std::string> model_names() { return {"convnet", "resnet18"}; }

}  // namespace memfit::models
