// The model zoo: models written with the builder. Each takes the input value
// ([N, C, H, W]) and the number of classes and returns the logits [N, classes].
#pragma once

#include <string>
#include <vector>

#include "memfit/builder.hpp"

namespace memfit::models {

// Fashion-MNIST ConvNet: conv5x5(32,pad2)-relu-maxpool2-conv5x5(64,pad2)-relu-
// maxpool2-fc(1024)-relu-dropout(0.4)-fc(classes).
ValueId convnet(Builder& b, ValueId x, int64_t classes);
// ResNet-18 in its CIFAR form: 3x3 stem at stride 1, no stem pool, four stages
// of two basic blocks (64/128/256/512 channels), global average pool, fc.
ValueId resnet18(Builder& b, ValueId x, int64_t classes);

// ResNet basic block: conv3x3(stride)-bn-relu-conv3x3-bn, plus the input, or
// a 1x1 conv + bn projection of it when the stride or width changes; relu.
ValueId basic_block(Builder& b, ValueId x, int64_t channels, int64_t stride);

using ModelFn = ValueId (*)(Builder&, ValueId, int64_t);
// nullptr if the name is unknown.
ModelFn find_model(const std::string& name);
std::vector<std::string> model_names();

}  // namespace memfit::models
