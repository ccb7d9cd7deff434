#include "models/zoo.hpp"

namespace memfit::models {

ValueId convnet(Builder& b, ValueId x, int64_t classes) {
  x = conv2d(b, x, 32, 5, {.pad = 2, .name = "conv1"});
  x = relu(b, x);
  x = max_pool2d(b, x, 2);
  x = conv2d(b, x, 64, 5, {.pad = 2, .name = "conv2"});
  x = relu(b, x);
  x = max_pool2d(b, x, 2);
  x = flatten(b, x);
  x = linear(b, x, 1024, {.name = "fc1"});
  x = relu(b, x);
  x = dropout(b, x, 0.4, "dropout");
  return linear(b, x, classes, {.name = "fc2"});
}

}  // namespace memfit::models
