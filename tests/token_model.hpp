// A language model for tests, built in code: reads "tokens" i32 [T],
// predicts "targets" i32 [T] (models/model.hpp); `build` makes the logits.
#pragma once

#include <memory>
#include <string>

#include "models/model.hpp"

namespace memfit::testing {

inline std::shared_ptr<const models::Model> token_lm(
    const std::string& name, std::function<ValueId(Builder&, const models::Inputs&, int64_t vocab)> build) {
  auto m = std::make_shared<models::Model>();
  m->name = name;
  m->inputs = {{"tokens", DType::i32, 1, "[T]"}};
  m->target = {"targets", DType::i32, 1, "[T]"};
  m->task = models::Task::LanguageModel;
  m->build = std::move(build);
  return m;
}

}  // namespace memfit::testing
